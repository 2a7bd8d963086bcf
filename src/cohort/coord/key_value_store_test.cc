// KeyValueStore's caps and Close(): what a peer (which chooses every key)
// can make the store hold, and that nothing gets in or stays parked after
// the coordination service stops.
#include "cohort/coord/key_value_store.h"

#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coord {
namespace {

using ::testing::HasSubstr;

TEST(KeyValueStoreLimitsTest, OversizedKeyIsRefused) {
  KeyValueLimits limits;
  limits.max_key_bytes = 8;
  KeyValueStore kv(limits);
  EXPECT_TRUE(kv.Insert("12345678", "v", false).ok());
  absl::Status s = kv.Insert("123456789", "v", false);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_EQ(kv.size(), 1u);
}

TEST(KeyValueStoreLimitsTest, EntryAndByteCapsRefuseNewDataNotOverwrites) {
  KeyValueLimits limits;
  limits.max_entries = 2;
  limits.max_total_bytes = 20;
  KeyValueStore kv(limits);
  ASSERT_TRUE(kv.Insert("a", "12345", false).ok());  // 6 bytes
  ASSERT_TRUE(kv.Insert("b", "12345", false).ok());  // 12 bytes
  absl::Status third = kv.Insert("c", "1", false);
  EXPECT_TRUE(absl::IsResourceExhausted(third)) << third;
  EXPECT_THAT(third.message(), HasSubstr("2 keys"));
  // Overwriting an existing key within the byte cap is fine...
  EXPECT_TRUE(kv.Insert("a", "1234567", true).ok());  // 14 bytes
  // ...past it is not, and leaves the old value.
  absl::Status big = kv.Insert("b", std::string(20, 'x'), true);
  EXPECT_TRUE(absl::IsResourceExhausted(big)) << big;
  EXPECT_EQ(*kv.TryGet("b"), "12345");
  // Deleting gives the room back.
  ASSERT_TRUE(kv.Delete("a", false).ok());
  EXPECT_TRUE(kv.Insert("c", "1", false).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(
      kv.Increment("d", 1).status()));  // a third key again
}

TEST(KeyValueStoreLimitsTest, ParkedCallsAreCappedAndExpiryFreesTheirSlot) {
  // The result slots outlive the store: its destructor answers what is
  // still parked.
  std::optional<absl::StatusOr<std::string>> first, second, third;
  std::optional<absl::StatusOr<KeyValueWatchResult>> watch;
  KeyValueLimits limits;
  limits.max_waiters = 2;
  KeyValueStore kv(limits);
  const uint64_t id1 = kv.GetAsync("x", [&](auto r) { first = r; });
  const uint64_t id2 = kv.GetAsync("y", [&](auto r) { second = r; });
  EXPECT_NE(id1, 0u);
  EXPECT_NE(id2, 0u);
  EXPECT_EQ(kv.GetAsync("z", [&](auto r) { third = r; }), 0u);
  ASSERT_TRUE(third.has_value());
  EXPECT_TRUE(absl::IsResourceExhausted(third->status())) << third->status();
  kv.ExpireGet(id1, absl::DeadlineExceededError("late"));
  EXPECT_TRUE(absl::IsDeadlineExceeded(first->status()));
  EXPECT_NE(kv.WatchAsync("w", 0, [&](auto r) { watch = r; }), 0u)
      << "the expired get's slot is free again";
  ASSERT_TRUE(kv.Insert("y", "v", false).ok());
  EXPECT_EQ(**second, "v");
}

TEST(KeyValueStoreLimitsTest, OldestDeletionsAreForgottenBeyondTheCap) {
  std::optional<absl::StatusOr<KeyValueWatchResult>> c, a;
  KeyValueLimits limits;
  limits.max_tombstones = 2;
  KeyValueStore kv(limits);
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_TRUE(kv.Insert(key, "v", false).ok());
    ASSERT_TRUE(kv.Delete(key, false).ok());
  }
  // "c" and "b" are remembered (a watch from version 0 sees the deletion at
  // once); "a" is forgotten (its version reads 0, so the watch parks).
  EXPECT_EQ(kv.WatchAsync("c", 0, [&](auto r) { c = r; }), 0u);
  ASSERT_TRUE(c.has_value() && c->ok());
  EXPECT_FALSE((*c)->present);
  EXPECT_NE(kv.WatchAsync("a", 0, [&](auto r) { a = r; }), 0u);
}

TEST(KeyValueStoreCloseTest, CloseAnswersParkedCallsAndRefusesEverything) {
  KeyValueStore kv;
  ASSERT_TRUE(kv.Insert("k", "v", false).ok());
  std::optional<absl::StatusOr<std::string>> parked, after;
  std::optional<absl::StatusOr<KeyValueWatchResult>> watch;
  ASSERT_NE(kv.GetAsync("missing", [&](auto r) { parked = r; }), 0u);
  ASSERT_NE(kv.WatchAsync("k", 100, [&](auto r) { watch = r; }), 0u);
  kv.Close(absl::UnavailableError("service stopped"));
  ASSERT_TRUE(parked.has_value());
  EXPECT_TRUE(absl::IsUnavailable(parked->status()));
  ASSERT_TRUE(watch.has_value());
  EXPECT_TRUE(absl::IsUnavailable(watch->status()));
  // Nothing can be written, read, or parked after Close.
  EXPECT_TRUE(absl::IsUnavailable(kv.Insert("intruder", "yes", false)));
  EXPECT_TRUE(absl::IsUnavailable(kv.Increment("n", 1).status()));
  EXPECT_TRUE(
      absl::IsUnavailable(kv.CompareAndSwap("k", std::nullopt, "x").status()));
  EXPECT_TRUE(absl::IsUnavailable(kv.Delete("k", false)));
  EXPECT_TRUE(absl::IsUnavailable(kv.TryGet("k").status()));
  EXPECT_TRUE(absl::IsUnavailable(kv.ListDir("").status()));
  EXPECT_EQ(kv.GetAsync("k", [&](auto r) { after = r; }), 0u);
  ASSERT_TRUE(after.has_value());
  EXPECT_TRUE(absl::IsUnavailable(after->status()));
  EXPECT_EQ(kv.size(), 1u) << "Close keeps the data; it only refuses calls";
}

const absl::Status kEnded = absl::AbortedError("attempt 1 ended");

TEST(KeyValueStoreDeleteAllExceptTest, KeepsOnlyTheKeptDirectories) {
  KeyValueStore kv;
  for (const char* key : {"cohort/launch", "cohort/launch/1/failed",
                          "cohort/launcher", "app/step", "z"}) {
    ASSERT_TRUE(kv.Insert(key, "v", false).ok()) << key;
  }
  std::optional<absl::StatusOr<KeyValueWatchResult>> watch;
  // Parked until "app/step" changes.
  ASSERT_NE(kv.WatchAsync("app/step", kv.version(), [&](auto r) { watch = r; }),
            0u);
  // The prefix is normalised, and is a directory: "cohort/launcher" goes.
  absl::StatusOr<size_t> deleted =
      kv.DeleteAllExcept({"//cohort/launch/"}, kEnded);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 3u);
  auto left = kv.ListDir("");
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 2u);
  EXPECT_EQ((*left)[0].first, "cohort/launch");
  EXPECT_EQ((*left)[1].first, "cohort/launch/1/failed");
  ASSERT_TRUE(watch.has_value());
  ASSERT_TRUE(watch->ok());
  EXPECT_FALSE((*watch)->present);
  // Nothing kept: everything goes; "" keeps everything.
  EXPECT_EQ(*kv.DeleteAllExcept({""}, kEnded), 0u);
  EXPECT_EQ(*kv.DeleteAllExcept({}, kEnded), 2u);
  EXPECT_EQ(kv.size(), 0u);
}

// A get or watch of a key that does not exist is not woken by the deletions;
// the store answers it with the caller's status in the same step, kept keys'
// waiters too, and frees its slot.
TEST(KeyValueStoreDeleteAllExceptTest, EndsEveryParkedGetAndWatch) {
  KeyValueLimits limits;
  limits.max_waiters = 3;
  KeyValueStore kv(limits);
  ASSERT_TRUE(kv.Insert("cohort/launch/x", "v", false).ok());
  std::optional<absl::StatusOr<std::string>> get;
  std::optional<absl::StatusOr<KeyValueWatchResult>> watch, kept_watch;
  ASSERT_NE(kv.GetAsync("never", [&](auto r) { get = r; }), 0u);
  ASSERT_NE(kv.WatchAsync("also/never", 0, [&](auto r) { watch = r; }), 0u);
  ASSERT_NE(kv.WatchAsync("cohort/launch/x", kv.version(),
                          [&](auto r) { kept_watch = r; }),
            0u);

  ASSERT_TRUE(kv.DeleteAllExcept({"cohort/launch"}, kEnded).ok());

  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->status(), kEnded);
  ASSERT_TRUE(watch.has_value());
  EXPECT_EQ(watch->status(), kEnded);
  ASSERT_TRUE(kept_watch.has_value());
  EXPECT_EQ(kept_watch->status(), kEnded);
  // The slots are free again (the cap is 3), and a value set now reaches
  // only waiters parked now.
  std::optional<absl::StatusOr<std::string>> next[3];
  for (auto& slot : next) {
    ASSERT_NE(kv.GetAsync("never", [&slot](auto r) { slot = r; }), 0u);
  }
  ASSERT_TRUE(kv.Insert("never", "next", false).ok());
  for (auto& slot : next) {
    ASSERT_TRUE(slot.has_value());
    EXPECT_EQ(**slot, "next");
  }
}

// After the reset a key the last attempt set (and one it deleted itself) is
// as on a new store: a watch from version 0 parks until the first set, and
// the watch then sees that set. A kept key's deletion record stays.
TEST(KeyValueStoreDeleteAllExceptTest, ForgetsTheDeletionsOfTheKeysItDrops) {
  KeyValueStore kv;
  ASSERT_TRUE(kv.Insert("app/step", "1", false).ok());
  ASSERT_TRUE(kv.Insert("app/gone", "1", false).ok());
  ASSERT_TRUE(kv.Delete("app/gone", false).ok());
  ASSERT_TRUE(kv.Insert("cohort/launch/x", "1", false).ok());
  ASSERT_TRUE(kv.Delete("cohort/launch/x", false).ok());
  const int64_t kept_deleted_at = kv.version();

  ASSERT_TRUE(kv.DeleteAllExcept({"cohort/launch"}, kEnded).ok());

  for (const char* key : {"app/step", "app/gone"}) {
    std::optional<absl::StatusOr<KeyValueWatchResult>> watch;
    const uint64_t id = kv.WatchAsync(key, 0, [&](auto r) { watch = r; });
    EXPECT_NE(id, 0u) << key << " answered at once";
    EXPECT_FALSE(watch.has_value()) << key;
    ASSERT_TRUE(kv.Insert(key, "2", false).ok());
    ASSERT_TRUE(watch.has_value()) << key;
    ASSERT_TRUE(watch->ok()) << key;
    EXPECT_TRUE((*watch)->present) << key;
    EXPECT_EQ((*watch)->value, "2") << key;
  }
  std::optional<absl::StatusOr<KeyValueWatchResult>> kept;
  EXPECT_EQ(kv.WatchAsync("cohort/launch/x", 0, [&](auto r) { kept = r; }), 0u);
  ASSERT_TRUE(kept.has_value());
  ASSERT_TRUE(kept->ok());
  EXPECT_FALSE((*kept)->present);
  EXPECT_EQ((*kept)->version, kept_deleted_at);
}

}  // namespace
}  // namespace cohort::coord
