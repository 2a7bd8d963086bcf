#include "cohort/training/replica_device_setter.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::training {
namespace {

using ::testing::HasSubstr;

NodeDef* Add(GraphDef* g, const std::string& name, const std::string& op,
             std::initializer_list<std::string> inputs = {},
             const std::string& device = "") {
  NodeDef* n = g->add_node();
  n->set_name(name);
  n->set_op(op);
  for (const auto& in : inputs) n->add_input(in);
  n->set_device(device);
  return n;
}

std::string DeviceOf(const GraphDef& g, const std::string& name) {
  for (const auto& n : g.node()) {
    if (n.name() == name) return n.device();
  }
  return "<missing>";
}

TEST(ReplicaDeviceSetterTest, VariablesRoundRobinOverPsAndTheRestOnWorker) {
  GraphDef g;
  Add(&g, "w1", "VarHandleOp");
  Add(&g, "w1/Read", "ReadVariableOp", {"w1"});
  Add(&g, "b1", "VarHandleOp");
  Add(&g, "w2", "VarHandleOp");
  Add(&g, "x", "Placeholder");
  Add(&g, "mm", "MatMul", {"x", "w1/Read:0"});
  Add(&g, "sgd/w2", "ApplyGradientDescent", {"w2", "lr", "mm"});
  Add(&g, "b1/Assign", "AssignVariableOp", {"b1:0", "init", "^x"});
  ASSERT_TRUE(
      ApplyReplicaDeviceSetter({2, "ps", "/job:worker/task:1"}, &g).ok());
  EXPECT_EQ(DeviceOf(g, "w1"), "/job:ps/task:0");
  EXPECT_EQ(DeviceOf(g, "b1"), "/job:ps/task:1");
  EXPECT_EQ(DeviceOf(g, "w2"), "/job:ps/task:0");
  EXPECT_EQ(DeviceOf(g, "w1/Read"), "/job:ps/task:0");
  EXPECT_EQ(DeviceOf(g, "sgd/w2"), "/job:ps/task:0");
  EXPECT_EQ(DeviceOf(g, "b1/Assign"), "/job:ps/task:1");
  EXPECT_EQ(DeviceOf(g, "x"), "/job:worker/task:1");
  EXPECT_EQ(DeviceOf(g, "mm"), "/job:worker/task:1");
}

TEST(ReplicaDeviceSetterTest, ExplicitDevicesAreKept) {
  GraphDef g;
  Add(&g, "v", "VarHandleOp", {}, "/job:ps/task:3");
  Add(&g, "r", "ReadVariableOp", {"v"});
  Add(&g, "c", "Const", {}, "/job:chief/task:0");
  ASSERT_TRUE(
      ApplyReplicaDeviceSetter({2, "ps", "/job:worker/task:0"}, &g).ok());
  EXPECT_EQ(DeviceOf(g, "v"), "/job:ps/task:3");
  EXPECT_EQ(DeviceOf(g, "r"), "/job:ps/task:3");
  EXPECT_EQ(DeviceOf(g, "c"), "/job:chief/task:0");
}

TEST(ReplicaDeviceSetterTest, NoPsPutsEverythingOnTheWorker) {
  GraphDef g;
  Add(&g, "v", "VarHandleOp");
  Add(&g, "r", "ReadVariableOp", {"v"});
  ASSERT_TRUE(
      ApplyReplicaDeviceSetter({0, "ps", "/job:worker/task:0"}, &g).ok());
  EXPECT_EQ(DeviceOf(g, "v"), "/job:worker/task:0");
  EXPECT_EQ(DeviceOf(g, "r"), "/job:worker/task:0");
}

TEST(ReplicaDeviceSetterTest, AVariableAndItsSlotsShareAPs) {
  GraphDef g;
  Add(&g, "w", "VarHandleOp");
  Add(&g, "w/momentum", "VarHandleOp");
  Add(&g, "b", "VarHandleOp");
  Add(&g, "b/momentum", "VarHandleOp");
  Add(&g, "update_w", "ApplyMomentum", {"w", "w/momentum", "lr", "g", "m"});
  Add(&g, "update_b", "ApplyMomentum", {"b", "b/momentum", "lr", "g", "m"});
  ASSERT_TRUE(ApplyReplicaDeviceSetter({2, "ps", ""}, &g).ok());
  EXPECT_EQ(DeviceOf(g, "w"), "/job:ps/task:0");
  EXPECT_EQ(DeviceOf(g, "w/momentum"), "/job:ps/task:0");
  EXPECT_EQ(DeviceOf(g, "update_w"), "/job:ps/task:0");
  EXPECT_EQ(DeviceOf(g, "b"), "/job:ps/task:1");
  EXPECT_EQ(DeviceOf(g, "b/momentum"), "/job:ps/task:1");
  EXPECT_EQ(DeviceOf(g, "update_b"), "/job:ps/task:1");
}

TEST(ReplicaDeviceSetterTest, AHandleConsumerOfTwoPinnedDevicesIsNamed) {
  GraphDef g;
  Add(&g, "a", "VarHandleOp", {}, "/job:ps/task:0");
  Add(&g, "b", "VarHandleOp", {}, "/job:ps/task:1");
  Add(&g, "both", "ApplyMomentum", {"a", "b", "lr", "g", "m"});
  absl::Status s = ApplyReplicaDeviceSetter({2, "ps", ""}, &g);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'both'"));
  EXPECT_THAT(s.message(), HasSubstr("/job:ps/task:0"));
  EXPECT_THAT(s.message(), HasSubstr("/job:ps/task:1"));
}

TEST(ReplicaDeviceSetterTest, NegativePsTasksIsInvalid) {
  GraphDef g;
  EXPECT_EQ(ApplyReplicaDeviceSetter({-1, "ps", ""}, &g).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ReplicaDeviceSetterTest, FactoryPlacesTheGraphItOpens) {
  GraphDef seen;
  SessionFactory inner =
      [&seen](const std::string&, const GraphDef& graph,
              const ConfigProto&) -> absl::StatusOr<std::unique_ptr<Session>> {
    seen = graph;
    return absl::UnavailableError("recorded");
  };
  SessionFactory placed =
      WithReplicaDeviceSetter(inner, {1, "ps", "/job:chief/task:0"});
  GraphDef g;
  Add(&g, "v", "VarHandleOp");
  Add(&g, "c", "Const");
  EXPECT_EQ(placed("grpc://h:1", g, ConfigProto()).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(DeviceOf(seen, "v"), "/job:ps/task:0");
  EXPECT_EQ(DeviceOf(seen, "c"), "/job:chief/task:0");
  EXPECT_EQ(DeviceOf(g, "v"), "");  // The caller's graph is unchanged.
}

}  // namespace
}  // namespace cohort::training
