#include "cohort/cluster/resolver_registry.h"

#include "cohort/base/fake_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ResolverRegistration Fake(std::string name, int priority, std::string var) {
  ResolverRegistration r;
  r.name = name;
  r.description = "reads " + var;
  r.priority = priority;
  r.factory = [name](Env*) -> absl::StatusOr<std::unique_ptr<ClusterResolver>> {
    return absl::UnimplementedError("fake factory " + name);
  };
  r.detector = [var](Env* env) { return env->GetVar(var).has_value(); };
  return r;
}

TEST(ResolverRegistryTest, DetectsInPriorityOrder) {
  ResolverRegistry registry;
  ASSERT_TRUE(registry.Register(Fake("late", 50, "LATE")).ok());
  ASSERT_TRUE(registry.Register(Fake("early", 10, "EARLY")).ok());
  EXPECT_THAT(registry.names(), ElementsAre("early", "late"));

  FakeEnv env;
  auto none = registry.Detect(&env);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("reads EARLY"));
  env.SetVar("LATE", "1");
  EXPECT_EQ((*registry.Detect(&env))->name, "late");
  env.SetVar("EARLY", "1");
  EXPECT_EQ((*registry.Detect(&env))->name, "early");
}

TEST(ResolverRegistryTest, RejectsDuplicatesAndUnknownNames) {
  ResolverRegistry registry;
  ASSERT_TRUE(registry.Register(Fake("a", 1, "A")).ok());
  EXPECT_EQ(registry.Register(Fake("a", 2, "A")).code(),
            absl::StatusCode::kAlreadyExists);
  ResolverRegistration no_factory;
  no_factory.name = "b";
  EXPECT_EQ(registry.Register(no_factory).code(),
            absl::StatusCode::kInvalidArgument);
  FakeEnv env;
  auto unknown = registry.Create("zzz", &env);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("known resolvers: a"));
  EXPECT_EQ(registry.Create("a", &env).status().code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace cohort
