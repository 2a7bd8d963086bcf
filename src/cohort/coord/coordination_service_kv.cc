// CoordinationService, the key-value calls (coordination_service.h is the
// contract; coordination_service.cc has the overview of the parts).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/coord/coordination_service_util.h"
#include "cohort/coordination.pb.h"

namespace cohort::coord {

using internal::FormatUtc;
using internal::RunAll;
using internal::TaskList;

// ---------------------------------------------------------------- key-value

absl::Status CoordinationService::InsertKeyValue(absl::string_view key,
                                                 std::string value,
                                                 bool allow_overwrite) {
  return kv_.Insert(key, std::move(value), allow_overwrite);
}

absl::StatusOr<std::string> CoordinationService::TryGetKeyValue(
    absl::string_view key) {
  return kv_.TryGet(key);
}

absl::StatusOr<int64_t> CoordinationService::IncrementKeyValue(
    absl::string_view key, int64_t delta) {
  return kv_.Increment(key, delta);
}

absl::StatusOr<CompareAndSwapResult>
CoordinationService::CompareAndSwapKeyValue(
    absl::string_view key, const std::optional<std::string>& expected,
    std::string desired) {
  return kv_.CompareAndSwap(key, expected, std::move(desired));
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
CoordinationService::ListKeyValueDir(absl::string_view dir) {
  return kv_.ListDir(dir);
}

absl::Status CoordinationService::DeleteKeyValue(absl::string_view key,
                                                 bool is_directory) {
  return kv_.Delete(key, is_directory);
}

void CoordinationService::GetKeyValueAsync(const std::string& key,
                                           absl::Time deadline,
                                           KeyValueStore::GetCallback done) {
  // No stopped_ check here: Stop() closes the store, which answers this get
  // (parked or not) with the stopped error atomically.
  const uint64_t id = kv_.GetAsync(key, std::move(done));
  if (id != 0 && deadline != absl::InfiniteFuture()) {
    const absl::Time start = env_->Now();
    timer_->Schedule(deadline, [this, id, key, start, deadline] {
      kv_.ExpireGet(
          id, Error(absl::StatusCode::kDeadlineExceeded,
                    absl::StrCat("key \"", KeyValueStore::NormalizeKey(key),
                                 "\" was not set within ",
                                 absl::FormatDuration(absl::Trunc(
                                     deadline - start, absl::Milliseconds(1))),
                                 "; check the task that should publish it")));
    });
  }
}

void CoordinationService::WatchKeyValueAsync(
    const std::string& key, int64_t after_version, absl::Time deadline,
    KeyValueStore::WatchCallback done) {
  const uint64_t id = kv_.WatchAsync(key, after_version, std::move(done));
  if (id != 0 && deadline != absl::InfiniteFuture()) {
    timer_->Schedule(deadline, [this, id, key, after_version] {
      kv_.ExpireWatch(
          id, Error(absl::StatusCode::kDeadlineExceeded,
                    absl::StrCat("key \"", KeyValueStore::NormalizeKey(key),
                                 "\" did not change after version ",
                                 after_version, " before the deadline")));
    });
  }
}

}  // namespace cohort::coord
