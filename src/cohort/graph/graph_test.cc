#include "cohort/graph/graph.h"

#include "cohort/graph/standard_registries.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

NodeDef N(const std::string& name, const std::string& op,
          std::vector<std::string> inputs = {}, DataType t = DT_FLOAT) {
  NodeDef n;
  n.set_name(name);
  n.set_op(op);
  for (auto& i : inputs) n.add_input(i);
  if (op == "Const") {
    Tensor v(1.f);
    if (t == DT_INT32) v = Tensor(1);
    v.AsProto((*n.mutable_attr())["value"].mutable_tensor());
    (*n.mutable_attr())["dtype"].set_type(t);
  } else if (op == "Placeholder") {
    (*n.mutable_attr())["dtype"].set_type(t);
  } else if (op != "NoOp") {
    (*n.mutable_attr())["T"].set_type(t);
  }
  return n;
}

absl::Status Build(std::vector<NodeDef> nodes) {
  GraphDef g;
  for (auto& n : nodes) *g.add_node() = n;
  return Graph::FromGraphDef(g, StandardOpRegistry()).status();
}

TEST(GraphTest, BuildsEdgesAndDefaults) {
  GraphDef g;
  *g.add_node() = N("a", "Const");
  *g.add_node() = N("b", "Placeholder");
  *g.add_node() = N("sum", "Add", {"a", "b:0", "^a"});
  auto graph = Graph::FromGraphDef(g, StandardOpRegistry());
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Graph::Node* sum = (*graph)->FindNode("sum");
  ASSERT_NE(sum, nullptr);
  ASSERT_EQ(sum->inputs.size(), 2u);
  EXPECT_EQ(sum->inputs[1].node, (*graph)->FindNode("b")->id);
  EXPECT_EQ(sum->control_inputs.size(), 1u);
  EXPECT_EQ((*graph)->FindNode("a")->data_outputs.size(), 1u);
  EXPECT_TRUE(
      (*graph)->FindNode("b")->def.attr().contains("shape"));  // default
}

TEST(GraphTest, ErrorsNameTheNode) {
  auto msg = [](absl::Status s) { return std::string(s.message()); };
  EXPECT_THAT(msg(Build({N("a", "Const"), N("a", "Const")})),
              HasSubstr("node 'a' is defined twice"));
  EXPECT_THAT(msg(Build({N("x", "Frob")})),
              HasSubstr("node 'x': unknown op 'Frob'"));
  EXPECT_THAT(
      msg(Build({N("s", "Add", {"a", "b"})})),
      HasSubstr("node 's' (op Add): input 'a' refers to unknown node 'a'"));
  EXPECT_THAT(msg(Build({N("a", "Const"), N("s", "Add", {"a:1", "a"})})),
              HasSubstr("refers to output 1 of node 'a', which has 1 outputs"));
  EXPECT_THAT(
      msg(Build({N("a", "Const", {}, DT_INT32), N("s", "Add", {"a", "a"})})),
      HasSubstr("node 's' (op Add): input 0 ('a') is int32, expected float"));
  NodeDef bad_attr = N("c", "Const");
  (*bad_attr.mutable_attr())["dtype"].set_s("float");
  absl::Status s = Build({bad_attr});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(msg(s), HasSubstr("attr 'dtype' is a string"));
}

TEST(GraphTest, CyclesAreRejectedNamingANode) {
  absl::Status s = Build({N("p", "Placeholder"), N("a", "Add", {"p", "b"}),
                          N("b", "Add", {"a", "p"})});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cycle"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("a -> b"));
  // A control-edge cycle and a self loop too.
  EXPECT_THAT(std::string(Build({N("n", "NoOp", {"^n"})}).message()),
              HasSubstr("cycle"));
}

TEST(GraphTest, ExtendIsAtomic) {
  GraphDef g;
  *g.add_node() = N("a", "Const");
  auto graph = *Graph::FromGraphDef(g, StandardOpRegistry());
  GraphDef more;
  *more.add_node() = N("b", "Add", {"a", "a"});
  *more.add_node() = N("c", "Add", {"b", "missing"});
  EXPECT_FALSE(graph->Extend(more).ok());
  EXPECT_EQ(graph->num_nodes(), 1);
  more.mutable_node()->RemoveLast();
  ASSERT_TRUE(graph->Extend(more).ok());
  EXPECT_EQ(graph->num_nodes(), 2);
  EXPECT_EQ(graph->FindNode("a")->data_outputs.size(), 2u);
}

TEST(GraphTest, ParseTensorName) {
  auto a = Graph::ParseTensorName("x:3");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->node, "x");
  EXPECT_EQ(a->index, 3);
  EXPECT_TRUE(Graph::ParseTensorName("^y")->control);
  EXPECT_FALSE(Graph::ParseTensorName("x:").ok());
  EXPECT_FALSE(Graph::ParseTensorName(":1").ok());
}

}  // namespace
}  // namespace cohort
