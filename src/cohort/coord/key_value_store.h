// KeyValueStore: the coordination service's in-memory key-value store.
//
// Keys are '/'-separated paths, normalised ("//a//b/" is "a/b"); values are
// bytes. Besides put/get it offers a blocking get (parked callback), an
// atomic increment on 8-byte big-endian integers, compare-and-swap, prefix
// listing, recursive delete, and a watch that wakes when a key changes.
// Every mutation bumps a store-wide version; each key remembers the version
// of its last change (also for deletes), which is what watches compare to.
//
// Not persisted, not replicated: for job configuration and rendezvous data.
//
// Callbacks (GetAsync, WatchAsync) run either inline from the call that
// satisfies them or from Expire*/CancelAll, always with no store lock held.
//
// Thread safety: thread-safe.
#ifndef COHORT_COORD_KEY_VALUE_STORE_H_
#define COHORT_COORD_KEY_VALUE_STORE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace cohort::coord {

struct KeyValueWatchResult {
  bool present = false;
  std::string value;
  int64_t version = 0;
};

struct CompareAndSwapResult {
  bool swapped = false;
  std::optional<std::string> stored;  // nullopt: key absent
};

class KeyValueStore {
 public:
  using GetCallback = std::function<void(absl::StatusOr<std::string>)>;
  using WatchCallback = std::function<void(absl::StatusOr<KeyValueWatchResult>)>;

  KeyValueStore() = default;
  // Answers every parked get and watch with Cancelled.
  ~KeyValueStore();
  KeyValueStore(const KeyValueStore&) = delete;
  KeyValueStore& operator=(const KeyValueStore&) = delete;

  // "///a//b/" -> "a/b".
  static std::string NormalizeKey(absl::string_view key);

  // InvalidArgument on an empty key; AlreadyExists when present and
  // !allow_overwrite. Wakes parked gets and watches of the key.
  absl::Status Insert(absl::string_view key, std::string value,
                      bool allow_overwrite);
  // NotFound when absent.
  absl::StatusOr<std::string> TryGet(absl::string_view key);
  // Calls `done` with the value as soon as the key exists (inline when it
  // already does; then returns 0). Otherwise returns an id for ExpireGet.
  uint64_t GetAsync(absl::string_view key, GetCallback done);
  // Answers a parked get with `status` (no-op if it was answered already).
  void ExpireGet(uint64_t id, const absl::Status& status);
  // Adds `delta` to the 8-byte big-endian int64 at `key` (absent = 0) and
  // returns the new value. FailedPrecondition when the value is not 8 bytes.
  absl::StatusOr<int64_t> Increment(absl::string_view key, int64_t delta);
  // Stores `desired` if the current value equals `expected` (nullopt:
  // "absent"). Always returns the value stored after the call.
  absl::StatusOr<CompareAndSwapResult> CompareAndSwap(
      absl::string_view key, const std::optional<std::string>& expected,
      std::string desired);
  // Every entry under "dir/", in key order. Never fails; may be empty.
  std::vector<std::pair<std::string, std::string>> ListDir(
      absl::string_view dir);
  // Deletes `key` and, if `is_directory`, everything under "key/". Always OK.
  void Delete(absl::string_view key, bool is_directory);
  // Calls `done` once the key's version exceeds `after_version` (inline if it
  // already does; then returns 0), else returns an id for ExpireWatch.
  uint64_t WatchAsync(absl::string_view key, int64_t after_version,
                      WatchCallback done);
  void ExpireWatch(uint64_t id, const absl::Status& status);
  // Answers every parked get and watch with `status`.
  void CancelAll(const absl::Status& status);

  int64_t version();
  size_t size();

 private:
  struct Waiter {
    std::string key;
    GetCallback get;
    WatchCallback watch;
    int64_t after_version = 0;
  };
  // Wakes the waiters of `key` (normalised); appends the callbacks to run.
  void CollectWakeupsLocked(const std::string& key,
                            std::vector<std::function<void()>>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetLocked(const std::string& key, std::string value,
                 std::vector<std::function<void()>>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  KeyValueWatchResult StateLocked(const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  struct Entry {
    std::string value;
    int64_t version = 0;
  };
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Version at which a key was last deleted.
  std::map<std::string, int64_t> tombstones_ ABSL_GUARDED_BY(mu_);
  std::multimap<std::string, uint64_t> waiters_by_key_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cohort::coord

#endif  // COHORT_COORD_KEY_VALUE_STORE_H_
