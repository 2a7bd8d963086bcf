// training_util's global step, against TensorFlow's training_util.py:
// get_global_step looks in the GLOBAL_STEP collection, then for the tensor
// "global_step:0"; assert_global_step wants an integer scalar (an unknown
// shape passes); a step read before initialization gives the initial
// value (0) rather than an error.
#include "cohort/training/training_util.h"

#include <memory>
#include <vector>

#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/graph/local_session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::training {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<LocalSession> MakeSession(const Scope& root) {
  GraphDef def;
  EXPECT_TRUE(root.ToGraphDef(&def).ok()) << root.status();
  SessionOptions options;
  options.num_threads = 1;
  auto s = LocalSession::Create(def, options);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

TEST(GetGlobalStepTest, CreatedStepIsInTheCollection) {
  Scope root = Scope::NewRootScope();
  ops::Variable v = ops::GetOrCreateGlobalStep(root);
  std::vector<Operation> collected = root.GetCollection(kGlobalStepCollection);
  ASSERT_EQ(collected.size(), 1u);
  EXPECT_EQ(collected[0].name(), "global_step");
  // A second call neither makes a new variable nor adds it twice.
  ops::GetOrCreateGlobalStep(root.NewSubScope("train"));
  EXPECT_EQ(root.GetCollection(kGlobalStepCollection).size(), 1u);
  auto step = GetGlobalStep(root);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->name(), v.handle.node_name());
}

// The collection wins over the name: a step called something else is
// found through it, and an op named "global_step" outside it is ignored.
TEST(GetGlobalStepTest, CollectionComesBeforeTheName) {
  Scope root = Scope::NewRootScope();
  Output mine =
      ops::VarHandleOp(root.NewSubScope("train").WithOpName("my_step"),
                       DT_INT32, PartialTensorShape::Scalar());
  ops::VarHandleOp(root.WithOpName("global_step"), DT_INT64,
                   PartialTensorShape::Scalar());
  root.AddToCollection(kGlobalStepCollection, mine.op());
  auto step = GetGlobalStep(root);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->name(), "train/my_step");
  auto read = GetOrCreateGlobalStepRead(root);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "train/my_step/read:0");
}

// A plain variable named "global_step" that no one added to the collection
// (TF's legacy global_step:0) is the step, int32 as well as int64, and
// reads as the value assigned to it.
TEST(GetGlobalStepTest, PlainInt32VariableNamedGlobalStepIsFound) {
  Scope root = Scope::NewRootScope();
  Output handle = ops::VarHandleOp(root.WithOpName("global_step"), DT_INT32,
                                   PartialTensorShape::Scalar());
  Operation assign = ops::AssignVariableOp(root.WithOpName("set"), handle,
                                           Tensor(int32_t{41}));
  EXPECT_TRUE(root.GetCollection(kGlobalStepCollection).empty());
  auto read = GetOrCreateGlobalStepRead(root);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "global_step/read:0");
  auto session = MakeSession(root);
  ASSERT_NE(session, nullptr);
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({}, {}, {assign.name()}, &out).ok());
  auto value = ReadGlobalStep(session.get(), *read);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, 41);
}

// TF's get_global_step also takes a tensor that is no variable.
TEST(GetGlobalStepTest, TensorNamedGlobalStepIsReadAsItIs) {
  Scope root = Scope::NewRootScope();
  ops::Placeholder(root.WithOpName("global_step"), DT_INT64,
                   PartialTensorShape::Scalar());
  auto read = GetOrCreateGlobalStepRead(root);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "global_step:0");
  auto initialized = GetOrCreateGlobalStepIsInitialized(root);
  ASSERT_TRUE(initialized.ok()) << initialized.status();
  EXPECT_EQ(*initialized, "");
}

TEST(GetGlobalStepTest, NoGlobalStepIsNotFound) {
  Scope root = Scope::NewRootScope();
  ops::VarHandleOp(root.WithOpName("step"), DT_INT64,
                   PartialTensorShape::Scalar());
  EXPECT_EQ(GetGlobalStep(root).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(GlobalStepReadForHook(root, "StopAtStepHook").status().message(),
            "Global step should be created to use StopAtStepHook.");
}

// TensorFlow logs "Multiple tensors in global_step collection." and finds
// no global step.
TEST(GetGlobalStepTest, SeveralInTheCollectionIsNotFound) {
  Scope root = Scope::NewRootScope();
  for (const char* name : {"a", "b"}) {
    Output h = ops::VarHandleOp(root.WithOpName(name), DT_INT64,
                                PartialTensorShape::Scalar());
    root.AddToCollection(kGlobalStepCollection, h.op());
  }
  auto step = GetGlobalStep(root);
  EXPECT_EQ(step.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(step.status().message(), HasSubstr("holds 2 ops (a, b)"));
}

// assert_global_step: an integer type; a scalar unless the shape is
// unknown.
TEST(GetGlobalStepTest, NonIntegerOrNonScalarStepIsRefused) {
  Scope floating = Scope::NewRootScope();
  ops::VarHandleOp(floating.WithOpName("global_step"), DT_FLOAT,
                   PartialTensorShape::Scalar());
  auto s = GetGlobalStep(floating);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(),
              HasSubstr("does not have integer type: float"));

  Scope vector = Scope::NewRootScope();
  ops::VarHandleOp(vector.WithOpName("global_step"), DT_INT64,
                   PartialTensorShape({2}));
  s = GetGlobalStep(vector);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("is not scalar"));

  Scope unknown = Scope::NewRootScope();
  ops::VarHandleOp(unknown.WithOpName("global_step"), DT_INT64,
                   PartialTensorShape::UnknownRank());
  EXPECT_TRUE(GetGlobalStep(unknown).ok());
}

// Before its initializer runs, the step reads 0 (TF's global step read
// falls back to the initial value); after it, the real value. Without the
// is-initialized tensor the read still fails, as a plain read does.
TEST(ReadGlobalStepTest, UninitializedStepReadsZero) {
  Scope root = Scope::NewRootScope();
  ops::Variable v = ops::GetOrCreateGlobalStep(root);
  Operation increment = ops::IncrementGlobalStep(root, v);
  auto read = GetOrCreateGlobalStepRead(root);
  auto initialized = GetOrCreateGlobalStepIsInitialized(root);
  ASSERT_TRUE(read.ok() && initialized.ok());
  EXPECT_EQ(*initialized, "global_step/IsInitialized:0");
  auto session = MakeSession(root);
  ASSERT_NE(session, nullptr);

  EXPECT_EQ(ReadGlobalStep(session.get(), *read).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto value = ReadGlobalStep(session.get(), *read, *initialized);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, 0);

  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({}, {}, {v.initializer.name()}, &out).ok());
  ASSERT_TRUE(session->Run({}, {}, {increment.name()}, &out).ok());
  ASSERT_TRUE(session->Run({}, {}, {increment.name()}, &out).ok());
  value = ReadGlobalStep(session.get(), *read, *initialized);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, 2);
}

TEST(ScalarValueTest, NumbersOfEveryKindAndNothingElse) {
  EXPECT_EQ(*ScalarValue(Tensor(0.25f), "a"), 0.25);
  EXPECT_EQ(*ScalarValue(Tensor(0.5), "a"), 0.5);
  EXPECT_EQ(*ScalarValue(Tensor(int32_t{-3}), "a"), -3);
  EXPECT_EQ(*ScalarValue(Tensor(int64_t{7}), "a"), 7);
  EXPECT_EQ(ScalarValue(Tensor(std::string("x")), "loss:0").status().message(),
            "tensor 'loss:0' is a string [], not a float, double, int32 or "
            "int64 scalar");
  EXPECT_FALSE(ScalarValue(Tensor(DT_FLOAT, TensorShape({2})), "a").ok());
}

}  // namespace
}  // namespace cohort::training
