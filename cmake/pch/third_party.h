// The third-party headers nearly every cohort source file parses, whether
// it names them or not (through cohort's own headers and the generated
// protobuf code): libstdc++, Abseil, protobuf, gRPC and nlohmann/json, about
// 200,000 lines per file. cmake/CohortPch.cmake precompiles them once per
// build tree and every target reuses the result (what it saves in CI:
// docs/architecture.md). Only headers whose meaning does not depend on a
// target's own definitions belong here (cpp-httplib's does: it is left out).
#ifndef COHORT_CMAKE_PCH_THIRD_PARTY_H_
#define COHORT_CMAKE_PCH_THIRD_PARTY_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/arena.h"
#include "google/protobuf/generated_message_reflection.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_field.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"

#endif  // COHORT_CMAKE_PCH_THIRD_PARTY_H_
