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
// satisfies them or from Expire*/Close, always with no store lock held.
//
// Bounds (KeyValueLimits): keys, entries, total bytes, parked waiters and
// remembered deletions are capped, since keys are chosen by peers; a call
// over a cap fails with ResourceExhausted (InvalidArgument for an oversized
// key) and changes nothing.
//
// Close() ends the store atomically with respect to every call: afterwards
// each call, and each get or watch that was parked, fails with the status
// given to Close; nothing can be written or parked after it.
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

struct KeyValueLimits {
  size_t max_key_bytes = 4096;
  size_t max_entries = size_t{1} << 20;
  // Keys plus values of every entry.
  size_t max_total_bytes = size_t{1} << 30;
  size_t max_waiters = size_t{1} << 16;
  // Deleted keys whose deletion version is remembered for watches; beyond
  // this the oldest are forgotten (a watch on such a key then sees version 0).
  size_t max_tombstones = size_t{1} << 16;
};

// The value IncrementKeyValue keeps: an 8-byte big-endian int64.
std::string EncodeInt64(int64_t v);
int64_t DecodeInt64(absl::string_view s);

class KeyValueStore {
 public:
  using GetCallback = std::function<void(absl::StatusOr<std::string>)>;
  using WatchCallback =
      std::function<void(absl::StatusOr<KeyValueWatchResult>)>;

  explicit KeyValueStore(KeyValueLimits limits = {}) : limits_(limits) {}
  // Close()s the store with Cancelled.
  ~KeyValueStore();
  KeyValueStore(const KeyValueStore&) = delete;
  KeyValueStore& operator=(const KeyValueStore&) = delete;

  // "///a//b/" -> "a/b".
  static std::string NormalizeKey(absl::string_view key);

  // Every call below fails with the Close() status once the store is closed.

  // InvalidArgument on an empty or oversized key; AlreadyExists when present
  // and !allow_overwrite; ResourceExhausted over a cap. Wakes parked gets and
  // watches of the key.
  absl::Status Insert(absl::string_view key, std::string value,
                      bool allow_overwrite);
  // NotFound when absent.
  absl::StatusOr<std::string> TryGet(absl::string_view key);
  // Calls `done` with the value as soon as the key exists (inline when it
  // already does, or with an error when the store is closed or too many
  // calls are parked; then returns 0). Otherwise returns an id for
  // ExpireGet.
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
  // Every entry under "dir/", in key order; may be empty.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ListDir(
      absl::string_view dir);
  // Deletes `key` and, if `is_directory`, everything under "key/". OK when
  // nothing matched.
  absl::Status Delete(absl::string_view key, bool is_directory);
  // Starts the store afresh for a new attempt of the job, in one step under
  // the store's lock (no call sees part of it):
  //   1. every key except those equal to or under one of `keep` (each
  //      normalised; "" keeps everything) is deleted, and the watchers of
  //      the deleted keys are told (present=false), as Delete does;
  //   2. every get and watch still parked, of any key (kept ones too), is
  //      answered with `end_parked` (not OK; the caller says why): they were
  //      the ended attempt's, and would otherwise hold a waiter slot and
  //      answer later with the next attempt's value;
  //   3. the deletion records of every key outside `keep` are dropped (also
  //      of keys deleted before this call), so a watch from version 0 on
  //      such a key parks until it is first set, as on a new store; kept
  //      keys keep theirs.
  // Versions keep counting up. Returns how many keys went.
  absl::StatusOr<size_t> DeleteAllExcept(const std::vector<std::string>& keep,
                                         const absl::Status& end_parked);
  // Calls `done` once the key's version exceeds `after_version` (inline if it
  // already does; then returns 0), else returns an id for ExpireWatch.
  uint64_t WatchAsync(absl::string_view key, int64_t after_version,
                      WatchCallback done);
  void ExpireWatch(uint64_t id, const absl::Status& status);
  // Closes the store: answers every parked get and watch with `status`
  // (not OK), and every later call fails with it. Idempotent (the first
  // status stays).
  void Close(const absl::Status& status);

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
  // The error for a write of `key` with `value_bytes` (replacing what is
  // stored), or OK.
  absl::Status CheckWriteLocked(const std::string& key, size_t value_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parks a get or watch (the caller checked the waiter cap).
  uint64_t ParkLocked(Waiter waiter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a waiter and its index entry.
  void UnparkLocked(std::map<uint64_t, Waiter>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberDeletionLocked(const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const KeyValueLimits limits_;
  absl::Mutex mu_;
  // Not OK once Close() ran.
  absl::Status closed_ ABSL_GUARDED_BY(mu_);
  size_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  struct Entry {
    std::string value;
    int64_t version = 0;
  };
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  // Version at which a key was last deleted, and the same keys by version
  // (oldest first) for forgetting beyond the cap.
  std::map<std::string, int64_t> tombstones_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::string> tombstones_by_version_ ABSL_GUARDED_BY(mu_);
  std::multimap<std::string, uint64_t> waiters_by_key_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cohort::coord

#endif  // COHORT_COORD_KEY_VALUE_STORE_H_
