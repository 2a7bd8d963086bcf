#include "cohort/coord/key_value_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cohort/base/status.h"

namespace cohort::coord {
namespace {

using Callbacks = std::vector<std::function<void()>>;

void RunAll(Callbacks& callbacks) {
  for (auto& fn : callbacks) fn();
}

}  // namespace

std::string EncodeInt64(int64_t v) {
  std::string out(8, '\0');
  uint64_t u = static_cast<uint64_t>(v);
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(u & 0xff);
    u >>= 8;
  }
  return out;
}

int64_t DecodeInt64(absl::string_view s) {
  uint64_t u = 0;
  for (unsigned char c : s) u = (u << 8) | c;
  return static_cast<int64_t>(u);
}

KeyValueStore::~KeyValueStore() {
  Close(absl::CancelledError(
      "the coordination service's key-value store is shutting down"));
}

std::string KeyValueStore::NormalizeKey(absl::string_view key) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(key, '/', absl::SkipEmpty());
  return absl::StrJoin(parts, "/");
}

void KeyValueStore::CollectWakeupsLocked(const std::string& key,
                                         Callbacks* out) {
  auto range = waiters_by_key_.equal_range(key);
  const KeyValueWatchResult state = StateLocked(key);
  for (auto it = range.first; it != range.second;) {
    auto w = waiters_.find(it->second);
    Waiter& waiter = w->second;
    if (waiter.get) {
      if (!state.present) {
        ++it;
        continue;
      }
      out->push_back([cb = std::move(waiter.get), v = state.value] { cb(v); });
    } else {
      if (state.version <= waiter.after_version) {
        ++it;
        continue;
      }
      out->push_back([cb = std::move(waiter.watch), state] { cb(state); });
    }
    waiters_.erase(w);
    it = waiters_by_key_.erase(it);
  }
}

KeyValueWatchResult KeyValueStore::StateLocked(const std::string& key) {
  KeyValueWatchResult result;
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    result.present = true;
    result.value = it->second.value;
    result.version = it->second.version;
  } else {
    auto t = tombstones_.find(key);
    result.version = t == tombstones_.end() ? 0 : t->second;
  }
  return result;
}

absl::Status KeyValueStore::CheckWriteLocked(const std::string& key,
                                             size_t value_bytes) {
  if (!closed_.ok()) return closed_;
  if (key.size() > limits_.max_key_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key-value key of ", key.size(), " bytes (\"", key.substr(0, 64),
        "...\") is longer than the cap of ", limits_.max_key_bytes, " bytes"));
  }
  auto it = entries_.find(key);
  const size_t old_bytes =
      it == entries_.end() ? 0 : key.size() + it->second.value.size();
  if (it == entries_.end() && entries_.size() >= limits_.max_entries) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the coordination key-value store holds ", entries_.size(),
                     " keys, its cap; cannot add \"", key,
                     "\" (delete keys that are no longer needed)"));
  }
  if (total_bytes_ - old_bytes + key.size() + value_bytes >
      limits_.max_total_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "storing ", value_bytes, " bytes at \"", key,
        "\" would take the coordination key-value store past its cap of ",
        limits_.max_total_bytes, " bytes (", total_bytes_, " in use)"));
  }
  return absl::OkStatus();
}

void KeyValueStore::SetLocked(const std::string& key, std::string value,
                              Callbacks* out) {
  Entry& entry = entries_[key];
  if (entry.version == 0) {
    total_bytes_ += key.size();
  } else {
    total_bytes_ -= entry.value.size();
  }
  total_bytes_ += value.size();
  entry.value = std::move(value);
  entry.version = ++version_;
  if (auto t = tombstones_.find(key); t != tombstones_.end()) {
    tombstones_by_version_.erase(t->second);
    tombstones_.erase(t);
  }
  CollectWakeupsLocked(key, out);
}

void KeyValueStore::RememberDeletionLocked(const std::string& key) {
  if (auto t = tombstones_.find(key); t != tombstones_.end()) {
    tombstones_by_version_.erase(t->second);
  }
  tombstones_[key] = version_;
  tombstones_by_version_[version_] = key;
  while (tombstones_.size() > limits_.max_tombstones) {
    auto oldest = tombstones_by_version_.begin();
    tombstones_.erase(oldest->second);
    tombstones_by_version_.erase(oldest);
  }
}

uint64_t KeyValueStore::ParkLocked(Waiter waiter) {
  const uint64_t id = next_waiter_id_++;
  waiters_by_key_.emplace(waiter.key, id);
  waiters_.emplace(id, std::move(waiter));
  return id;
}

void KeyValueStore::UnparkLocked(std::map<uint64_t, Waiter>::iterator it) {
  auto range = waiters_by_key_.equal_range(it->second.key);
  for (auto k = range.first; k != range.second; ++k) {
    if (k->second == it->first) {
      waiters_by_key_.erase(k);
      break;
    }
  }
  waiters_.erase(it);
}

absl::Status KeyValueStore::Insert(absl::string_view raw_key, std::string value,
                                   bool allow_overwrite) {
  const std::string key = NormalizeKey(raw_key);
  if (key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key-value insert: key \"", raw_key, "\" is empty after normalising"));
  }
  Callbacks wake;
  {
    absl::MutexLock lock(&mu_);
    COHORT_RETURN_IF_ERROR(CheckWriteLocked(key, value.size()));
    if (!allow_overwrite && entries_.count(key) > 0) {
      return absl::AlreadyExistsError(absl::StrCat(
          "key \"", key,
          "\" already exists in the coordination key-value store; use "
          "overwrite (kv set --overwrite) or delete it first"));
    }
    SetLocked(key, std::move(value), &wake);
  }
  RunAll(wake);
  return absl::OkStatus();
}

absl::StatusOr<std::string> KeyValueStore::TryGet(absl::string_view raw_key) {
  const std::string key = NormalizeKey(raw_key);
  absl::MutexLock lock(&mu_);
  if (!closed_.ok()) return closed_;
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "key \"", key, "\" is not in the coordination key-value store"));
  }
  return it->second.value;
}

uint64_t KeyValueStore::GetAsync(absl::string_view raw_key, GetCallback done) {
  const std::string key = NormalizeKey(raw_key);
  absl::StatusOr<std::string> answer;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (!closed_.ok()) {
      answer = closed_;
    } else if (it != entries_.end()) {
      answer = it->second.value;
    } else if (waiters_.size() >= limits_.max_waiters) {
      answer = absl::ResourceExhaustedError(absl::StrCat(
          "cannot wait for key \"", key, "\": ", limits_.max_waiters,
          " key-value calls are already waiting (cap)"));
    } else {
      Waiter waiter;
      waiter.key = key;
      waiter.get = std::move(done);
      return ParkLocked(std::move(waiter));
    }
  }
  done(std::move(answer));
  return 0;
}

void KeyValueStore::ExpireGet(uint64_t id, const absl::Status& status) {
  GetCallback cb;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    cb = std::move(it->second.get);
    UnparkLocked(it);
  }
  if (cb) cb(status);
}

absl::StatusOr<int64_t> KeyValueStore::Increment(absl::string_view raw_key,
                                                 int64_t delta) {
  const std::string key = NormalizeKey(raw_key);
  if (key.empty()) {
    return absl::InvalidArgumentError("key-value increment: empty key");
  }
  Callbacks wake;
  int64_t result;
  {
    absl::MutexLock lock(&mu_);
    COHORT_RETURN_IF_ERROR(CheckWriteLocked(key, 8));
    int64_t current = 0;
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      if (it->second.value.size() != 8) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot increment key \"", key, "\": its value has ",
            it->second.value.size(),
            " bytes, not the 8-byte big-endian integer that increment "
            "creates; it was set by a plain insert"));
      }
      current = DecodeInt64(it->second.value);
    }
    result = static_cast<int64_t>(static_cast<uint64_t>(current) +
                                  static_cast<uint64_t>(delta));
    SetLocked(key, EncodeInt64(result), &wake);
  }
  RunAll(wake);
  return result;
}

absl::StatusOr<CompareAndSwapResult> KeyValueStore::CompareAndSwap(
    absl::string_view raw_key, const std::optional<std::string>& expected,
    std::string desired) {
  const std::string key = NormalizeKey(raw_key);
  if (key.empty()) {
    return absl::InvalidArgumentError("key-value compare-and-swap: empty key");
  }
  Callbacks wake;
  CompareAndSwapResult result;
  {
    absl::MutexLock lock(&mu_);
    COHORT_RETURN_IF_ERROR(CheckWriteLocked(key, desired.size()));
    auto it = entries_.find(key);
    const bool matches = expected.has_value() ? (it != entries_.end() &&
                                                 it->second.value == *expected)
                                              : it == entries_.end();
    if (matches) {
      result.swapped = true;
      result.stored = desired;
      SetLocked(key, std::move(desired), &wake);
    } else if (it != entries_.end()) {
      result.stored = it->second.value;
    }
  }
  RunAll(wake);
  return result;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
KeyValueStore::ListDir(absl::string_view raw_dir) {
  const std::string dir = NormalizeKey(raw_dir);
  const std::string prefix = dir.empty() ? "" : dir + "/";
  std::vector<std::pair<std::string, std::string>> out;
  absl::MutexLock lock(&mu_);
  if (!closed_.ok()) return closed_;
  for (auto it = entries_.lower_bound(prefix);
       it != entries_.end() && absl::StartsWith(it->first, prefix); ++it) {
    out.emplace_back(it->first, it->second.value);
  }
  return out;
}

absl::Status KeyValueStore::Delete(absl::string_view raw_key,
                                   bool is_directory) {
  const std::string key = NormalizeKey(raw_key);
  Callbacks wake;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok()) return closed_;
    std::vector<std::string> doomed;
    if (entries_.count(key) > 0) doomed.push_back(key);
    if (is_directory) {
      const std::string prefix = key.empty() ? "" : key + "/";
      for (auto it = entries_.lower_bound(prefix);
           it != entries_.end() && absl::StartsWith(it->first, prefix); ++it) {
        if (it->first != key) doomed.push_back(it->first);
      }
    }
    for (const std::string& k : doomed) {
      auto it = entries_.find(k);
      total_bytes_ -= k.size() + it->second.value.size();
      entries_.erase(it);
      ++version_;
      RememberDeletionLocked(k);
      CollectWakeupsLocked(k, &wake);
    }
  }
  RunAll(wake);
  return absl::OkStatus();
}

absl::StatusOr<size_t> KeyValueStore::DeleteAllExcept(
    const std::vector<std::string>& keep, const absl::Status& end_parked) {
  std::vector<std::string> kept;
  for (const std::string& k : keep) kept.push_back(NormalizeKey(k));
  // A kept prefix is a directory: "cohort/launch" keeps "cohort/launch/x",
  // not "cohort/launcher".
  auto is_kept = [&kept](const std::string& key) {
    for (const std::string& k : kept) {
      if (k.empty() || key == k ||
          (absl::StartsWith(key, k) && key[k.size()] == '/')) {
        return true;
      }
    }
    return false;
  };
  Callbacks wake;
  size_t deleted = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.ok()) return closed_;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (is_kept(it->first)) {
        ++it;
        continue;
      }
      const std::string key = it->first;
      total_bytes_ -= key.size() + it->second.value.size();
      it = entries_.erase(it);
      ++version_;
      ++deleted;
      RememberDeletionLocked(key);
      CollectWakeupsLocked(key, &wake);
    }
    // What is still parked waits for something of the ended attempt (or of
    // the next one, which it must not see). In this same step, so no waiter
    // can slip in between the deletions and this.
    const absl::Status ended =
        end_parked.ok() ? absl::AbortedError(
                              "the key-value store was started afresh for "
                              "the job's next attempt")
                        : end_parked;
    for (auto& [id, waiter] : waiters_) {
      if (waiter.get) {
        wake.push_back([cb = std::move(waiter.get), ended] { cb(ended); });
      } else if (waiter.watch) {
        wake.push_back([cb = std::move(waiter.watch), ended] { cb(ended); });
      }
    }
    waiters_.clear();
    waiters_by_key_.clear();
    // The deletion records were needed only to answer the watchers just
    // woken; kept, a watch from version 0 in the next attempt would see the
    // last attempt's deletion at once instead of parking.
    for (auto it = tombstones_.begin(); it != tombstones_.end();) {
      if (is_kept(it->first)) {
        ++it;
        continue;
      }
      tombstones_by_version_.erase(it->second);
      it = tombstones_.erase(it);
    }
  }
  RunAll(wake);
  return deleted;
}

uint64_t KeyValueStore::WatchAsync(absl::string_view raw_key,
                                   int64_t after_version, WatchCallback done) {
  const std::string key = NormalizeKey(raw_key);
  absl::StatusOr<KeyValueWatchResult> answer;
  {
    absl::MutexLock lock(&mu_);
    KeyValueWatchResult state = StateLocked(key);
    if (!closed_.ok()) {
      answer = closed_;
    } else if (state.version > after_version) {
      answer = std::move(state);
    } else if (waiters_.size() >= limits_.max_waiters) {
      answer = absl::ResourceExhaustedError(
          absl::StrCat("cannot watch key \"", key, "\": ", limits_.max_waiters,
                       " key-value calls are already waiting (cap)"));
    } else {
      Waiter waiter;
      waiter.key = key;
      waiter.watch = std::move(done);
      waiter.after_version = after_version;
      return ParkLocked(std::move(waiter));
    }
  }
  done(std::move(answer));
  return 0;
}

void KeyValueStore::ExpireWatch(uint64_t id, const absl::Status& status) {
  WatchCallback cb;
  {
    absl::MutexLock lock(&mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    cb = std::move(it->second.watch);
    UnparkLocked(it);
  }
  if (cb) cb(status);
}

void KeyValueStore::Close(const absl::Status& status) {
  std::map<uint64_t, Waiter> waiters;
  {
    absl::MutexLock lock(&mu_);
    if (closed_.ok()) closed_ = status;
    waiters.swap(waiters_);
    waiters_by_key_.clear();
  }
  for (auto& [id, waiter] : waiters) {
    if (waiter.get) waiter.get(status);
    if (waiter.watch) waiter.watch(status);
  }
}

int64_t KeyValueStore::version() {
  absl::MutexLock lock(&mu_);
  return version_;
}

size_t KeyValueStore::size() {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace cohort::coord
