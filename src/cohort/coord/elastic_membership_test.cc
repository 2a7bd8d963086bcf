#include "cohort/coord/elastic_membership.h"

#include <string>
#include <vector>

#include "cohort/coord/key_value_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ElasticStore StoreOf(KeyValueStore* kv) {
  ElasticStore s;
  s.insert_new = [kv](const std::string& key, const std::string& value) {
    return kv->Insert(key, value, /*allow_overwrite=*/false);
  };
  s.try_get = [kv](const std::string& key) { return kv->TryGet(key); };
  return s;
}

TEST(ElasticRangeTest, ParsesMinMaxAndRejectsTheRest) {
  absl::StatusOr<ElasticRange> r = ParseElasticRange("3:4", "--elastic");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->min, 3);
  EXPECT_EQ(r->max, 4);
  for (const char* bad : {"4", "0:4", "4:3", "a:4", "3:4:5", ""}) {
    absl::Status s = ParseElasticRange(bad, "--elastic").status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_THAT(s.message(), HasSubstr("--elastic expects MIN:MAX")) << bad;
  }
}

TEST(ElasticMembershipTest, GenerationsRecordEachChangeInJobOrder) {
  KeyValueStore kv;
  ElasticStore store = StoreOf(&kv);
  EXPECT_EQ(LatestMembership(store)->generation, -1);
  ASSERT_TRUE(WriteInitialMembership(
                  store, {"worker:10", "worker:2", "chief:0", "worker:1"})
                  .ok());
  absl::StatusOr<Membership> m = LatestMembership(store);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->generation, 0);
  EXPECT_THAT(m->members,
              ElementsAre("chief:0", "worker:1", "worker:2", "worker:10"));

  m = ChangeMembership(store, [](std::vector<std::string> members) {
    return WithoutMember(members, "worker:2");
  });
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->generation, 1);
  EXPECT_EQ(m->RankOf("worker:10"), 2);
  EXPECT_EQ(m->RankOf("worker:2"), -1);

  m = ChangeMembership(store, [](std::vector<std::string> members) {
    return WithMember(members, "worker:2");
  });
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->ToString(),
            "generation 2: chief:0, worker:1, worker:2, worker:10");
  EXPECT_EQ(LatestMembership(store)->generation, 2);
  EXPECT_EQ(ReadMembership(store, 1)->members.size(), 3u);
  // A change that changes nothing writes nothing.
  m = ChangeMembership(store, [](std::vector<std::string> members) {
    return WithMember(members, "worker:2");
  });
  EXPECT_EQ(m->generation, 2);
  EXPECT_TRUE(absl::IsNotFound(ReadMembership(store, 3).status()));
}

TEST(ElasticMembershipTest, TheSecondWriterOfAGenerationRetriesOnTheFirsts) {
  KeyValueStore kv;
  ElasticStore store = StoreOf(&kv);
  ASSERT_TRUE(
      WriteInitialMembership(store, {"worker:0", "worker:1", "worker:2"}).ok());
  // The race, forced: between this writer's read of generation 0 and its
  // write of generation 1, another writer removes worker:1.
  ElasticStore racing = store;
  bool raced = false;
  racing.insert_new = [&](const std::string& key, const std::string& value) {
    if (!raced) {
      raced = true;
      EXPECT_TRUE(kv.Insert(key, "worker:0,worker:2", false).ok());
    }
    return store.insert_new(key, value);
  };
  absl::StatusOr<Membership> m =
      ChangeMembership(racing, [](std::vector<std::string> members) {
        return WithoutMember(members, "worker:2");
      });
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(raced);
  // Both removals hold: the second writer's change went on top of the
  // first's, as generation 2.
  EXPECT_EQ(m->generation, 2);
  EXPECT_THAT(m->members, ElementsAre("worker:0"));
  EXPECT_THAT(ReadMembership(store, 1)->members,
              ElementsAre("worker:0", "worker:2"));
}

TEST(ElasticMembershipTest, ForeignValuesAndAMissingStartAreErrors) {
  KeyValueStore kv;
  ElasticStore store = StoreOf(&kv);
  absl::Status s = ChangeMembership(store, [](std::vector<std::string> m) {
                     return m;
                   }).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("cohort launch --elastic"));
  ASSERT_TRUE(kv.Insert(GenerationKey(0), "not a task list", false).ok());
  s = LatestMembership(store).status();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("cohort/elastic/generation/0"));
  EXPECT_TRUE(
      absl::IsAlreadyExists(WriteInitialMembership(store, {"worker:0"})));
}

}  // namespace
}  // namespace cohort::coord
