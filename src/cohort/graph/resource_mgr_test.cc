#include "cohort/graph/resource_mgr.h"

#include "gtest/gtest.h"

namespace cohort {
namespace {

class Other : public ResourceBase {
 public:
  static constexpr const char* kTypeName = "Other";
  std::string TypeName() const override { return kTypeName; }
  std::string DebugString() const override { return "Other"; }
};

TEST(ResourceMgrTest, CreateLookupDelete) {
  ResourceMgr rm;
  ASSERT_TRUE(rm.Create("", "v", std::make_shared<Var>(DT_FLOAT)).ok());
  EXPECT_EQ(rm.Create("localhost", "v", std::make_shared<Var>(DT_FLOAT)).code(),
            absl::StatusCode::kAlreadyExists);
  auto v = rm.Lookup<Var>("", "v");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ((*v)->dtype(), DT_FLOAT);
  auto missing = rm.Lookup<Var>("c", "v");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'v'"), std::string::npos);
  ASSERT_TRUE(rm.Create("c", "o", std::make_shared<Other>()).ok());
  EXPECT_EQ(rm.Lookup<Var>("c", "o").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rm.List().size(), 2u);
  rm.Cleanup("c");
  EXPECT_EQ(rm.List().size(), 1u);
  EXPECT_TRUE(rm.Delete("", "v").ok());
  EXPECT_EQ(rm.Delete("", "v").code(), absl::StatusCode::kNotFound);
  // The looked-up variable outlives its removal.
  absl::MutexLock l((*v)->mu());
  EXPECT_FALSE((*v)->is_initialized());
}

TEST(ResourceMgrTest, LookupOrCreateCreatesOnce) {
  ResourceMgr rm;
  int calls = 0;
  std::function<absl::StatusOr<std::shared_ptr<Var>>()> make = [&]() {
    ++calls;
    return std::make_shared<Var>(DT_INT64);
  };
  auto a = rm.LookupOrCreate<Var>("", "step", make);
  auto b = rm.LookupOrCreate<Var>("", "step", make);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(calls, 1);
}

TEST(VarTest, SnapshotsAreNotChangedByInPlaceUpdates) {
  Var v(DT_FLOAT);
  Tensor snapshot;
  {
    absl::MutexLock l(v.mu());
    v.Assign(Tensor::Vec<float>({1, 2}));
    snapshot = v.value();
    v.PrepareForUpdate();
    v.tensor()->flat<float>()(0) = 10;
  }
  EXPECT_EQ(snapshot.flat<float>()(0), 1);
  absl::MutexLock l(v.mu());
  EXPECT_EQ(v.value().flat<float>()(0), 10);
}

}  // namespace
}  // namespace cohort
