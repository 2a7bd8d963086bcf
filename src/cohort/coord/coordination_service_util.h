// Small helpers shared by the files that implement CoordinationService
// (coordination_service*.cc) and its etcd counterpart
// (etcd_coordination_client.cc). Internal: not for other modules.
#ifndef COHORT_COORD_COORDINATION_SERVICE_UTIL_H_
#define COHORT_COORD_COORDINATION_SERVICE_UTIL_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cohort/coord/coordination_service.h"

namespace cohort::coord::internal {

// A status as the service answers with it: `code` and `message` with the
// kCoordinationErrorUrl payload (the service's incarnation, the task the
// error is about, whether that task reported it). The built-in service and
// the etcd client (etcd_coordination_client.cc) both make theirs here.
absl::Status ServiceError(absl::StatusCode code, const std::string& message,
                          uint64_t incarnation, const TaskId* source,
                          bool reported);
// `status` with the kBarrierErrorUrl payload naming barrier `id`, instance
// `counter`.
absl::Status WithBarrierPayload(absl::Status status, const std::string& id,
                                int64_t counter);

// "2026-11-23T15:04:05.123Z".
inline std::string FormatUtc(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

// "worker:0, worker:2".
// "a:0, a:1, ..." naming at most 32 tasks and counting the rest: errors
// that carry the list go to every task of the job, so their size must not
// grow with it.
inline std::string TaskList(const std::set<TaskId>& tasks) {
  constexpr size_t kNamed = 32;
  std::vector<std::string> names;
  for (const TaskId& t : tasks) {
    if (names.size() == kNamed) break;
    names.push_back(t.ToString());
  }
  std::string list = absl::StrJoin(names, ", ");
  if (tasks.size() > kNamed) {
    absl::StrAppend(&list, " and ", tasks.size() - kNamed, " more");
  }
  return list;
}

// " (first difference: a:3 only in the caller's)" for two different sets
// (TaskList may cut both lists before they differ); "" when one is empty
// (a barrier of all tasks) or they are equal.
inline std::string FirstDifference(const std::set<TaskId>& callers,
                                   const std::set<TaskId>& openers) {
  if (callers.empty() || openers.empty()) return "";
  auto a = callers.begin();
  auto b = openers.begin();
  while (a != callers.end() && b != openers.end() && *a == *b) {
    ++a;
    ++b;
  }
  if (a == callers.end() && b == openers.end()) return "";
  const bool callers_only =
      b == openers.end() || (a != callers.end() && *a < *b);
  return absl::StrCat(
      " (first difference: ", (callers_only ? *a : *b).ToString(),
      " only in the ", callers_only ? "caller's" : "opener's", ")");
}

// Runs callbacks collected under the service's lock, after releasing it.
inline void RunAll(std::vector<std::function<void()>>& callbacks) {
  for (auto& fn : callbacks) fn();
  callbacks.clear();
}

}  // namespace cohort::coord::internal

#endif  // COHORT_COORD_COORDINATION_SERVICE_UTIL_H_
