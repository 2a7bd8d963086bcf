#include "cohort/graph/kernels/state_ops.h"

#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/local_session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

class StateOpsTest : public ::testing::Test {
 protected:
  void Start() {
    GraphDef def;
    ASSERT_TRUE(root_.ToGraphDef(&def).ok()) << root_.status();
    SessionOptions o;
    o.num_threads = 1;
    auto s = LocalSession::Create(def, o);
    ASSERT_TRUE(s.ok()) << s.status();
    session_ = *std::move(s);
  }
  absl::Status Run(const std::string& target) {
    return session_->Run({}, {}, {target}, nullptr);
  }
  absl::StatusOr<Tensor> Fetch(const std::string& name) {
    std::vector<Tensor> out;
    absl::Status s = session_->Run({}, {name}, {}, &out);
    if (!s.ok()) return s;
    return out[0];
  }
  Scope root_ = Scope::NewRootScope();
  std::unique_ptr<LocalSession> session_;
};

TEST_F(StateOpsTest, AssignReadAddSubIsInitialized) {
  auto h = ops::VarHandleOp(root_.WithOpName("v"), DT_INT64, TensorShape({2}));
  ops::ReadVariableOp(root_.WithOpName("read"), h, DT_INT64);
  ops::AssignVariableOp(root_.WithOpName("assign"), h,
                        Tensor::Vec<int64_t>({5, 6}));
  ops::AssignAddVariableOp(root_.WithOpName("add"), h,
                           Tensor::Vec<int64_t>({1, 1}));
  ops::AssignSubVariableOp(root_.WithOpName("sub"), h,
                           Tensor::Vec<int64_t>({10, 0}));
  ops::VarIsInitializedOp(root_.WithOpName("is_init"), h);
  Start();
  EXPECT_FALSE(Fetch("is_init")->scalar<bool>());
  EXPECT_EQ(Run("add").code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Run("assign").ok());
  EXPECT_TRUE(Fetch("is_init")->scalar<bool>());
  auto snapshot = Fetch("read");
  ASSERT_TRUE(snapshot.ok());
  ASSERT_TRUE(Run("add").ok());
  ASSERT_TRUE(Run("sub").ok());
  EXPECT_TRUE(Fetch("read")->Equals(Tensor::Vec<int64_t>({-4, 7})));
  // The earlier read is a snapshot: in-place updates did not change it.
  EXPECT_TRUE(snapshot->Equals(Tensor::Vec<int64_t>({5, 6})));
}

TEST_F(StateOpsTest, TypeAndShapeErrorsNameTheVariable) {
  auto h = ops::VarHandleOp(root_.WithOpName("w"), DT_FLOAT, TensorShape({2}));
  ops::AssignVariableOp(root_.WithOpName("bad_shape"), h,
                        Tensor::Vec<float>({1, 2, 3}));
  ops::AssignVariableOp(root_.WithOpName("ok"), h, Tensor::Vec<float>({1, 2}));
  ops::AssignAddVariableOp(root_.WithOpName("bad_add"), h,
                           Tensor::Vec<float>({1}));
  ops::ReadVariableOp(root_.WithOpName("read_as_int"), h, DT_INT32);
  Start();
  absl::Status s = Run("bad_shape");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("node 'bad_shape' (op AssignVariableOp)"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("variable 'w' declared with shape [2]"));
  ASSERT_TRUE(Run("ok").ok());
  EXPECT_THAT(std::string(Run("bad_add").message()),
              HasSubstr("shape [1] to variable 'w' of shape [2]"));
  EXPECT_THAT(std::string(Fetch("read_as_int").status().message()),
              HasSubstr("variable 'w' is float, read as int32"));
}

TEST_F(StateOpsTest, SharedNameAndContainers) {
  auto a = ops::VarHandleOp(root_.WithOpName("a"), DT_FLOAT, TensorShape(), "",
                            "shared");
  auto b = ops::VarHandleOp(root_.WithOpName("b"), DT_FLOAT, TensorShape(), "",
                            "shared");
  auto c = ops::VarHandleOp(root_.WithOpName("c"), DT_FLOAT, TensorShape(),
                            "other", "shared");
  ops::AssignVariableOp(root_.WithOpName("set_a"), a, 3.0f);
  ops::ReadVariableOp(root_.WithOpName("read_b"), b, DT_FLOAT);
  ops::ReadVariableOp(root_.WithOpName("read_c"), c, DT_FLOAT);
  Start();
  ASSERT_TRUE(Run("set_a").ok());
  EXPECT_EQ(Fetch("read_b")->scalar<float>(), 3.f);
  EXPECT_EQ(Fetch("read_c").status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(session_->Reset({"other"}).ok());
  EXPECT_EQ(Fetch("read_b")->scalar<float>(), 3.f);
}

TEST_F(StateOpsTest, ReportUninitializedVariablesNamesTheUnsetOnes) {
  auto a = ops::MakeVariable(root_, "a", 1.f);
  auto b = ops::MakeVariable(root_, "b", 2.f);
  ops::ReportUninitializedVariables(root_.WithOpName("report"),
                                    {ops::VarIsInitializedOp(root_, a.handle),
                                     ops::VarIsInitializedOp(root_, b.handle)},
                                    {"a", "b"});
  ops::ReportUninitializedVariables(root_.WithOpName("none"), {}, {});
  Start();
  auto both = Fetch("report:0");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->dtype(), DT_STRING);
  ASSERT_EQ(both->NumElements(), 2);
  EXPECT_EQ(both->flat<std::string>()(0), "a");
  EXPECT_EQ(both->flat<std::string>()(1), "b");
  ASSERT_TRUE(Run("b/Assign").ok());
  auto one = Fetch("report:0");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->NumElements(), 1);
  EXPECT_EQ(one->flat<std::string>()(0), "a");
  ASSERT_TRUE(Run("a/Assign").ok());
  EXPECT_EQ(Fetch("report:0")->NumElements(), 0);
  auto none = Fetch("none:0");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->NumElements(), 0);
}

// A graph from the wire may feed it anything: a non-scalar is an error
// naming the variable, never a crash of the task.
TEST_F(StateOpsTest, ReportUninitializedVariablesRejectsANonScalar) {
  auto flags = ops::Placeholder(root_.WithOpName("flags"), DT_BOOL);
  ops::ReportUninitializedVariables(root_.WithOpName("report"), {flags}, {"w"});
  Start();
  Tensor two(DT_BOOL, TensorShape({2}));
  std::vector<Tensor> out;
  absl::Status s = session_->Run({{"flags", two}}, {"report:0"}, {}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("'w'"));
}

}  // namespace
}  // namespace cohort
