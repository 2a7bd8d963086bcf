#include "cohort/graph/op_registry.h"

#include "cohort/graph/graph.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

OpRegistry* TestRegistry() {
  static OpRegistry* r = [] {
    auto* r = new OpRegistry();
    EXPECT_TRUE(r->Register(OpDefBuilder("MatMulLike")
                                .Input("a: T")
                                .Input("b: T")
                                .Output("product: T")
                                .Attr("transpose_a: bool = false")
                                .Attr("T: {float, double}")
                                .SetShapeFn(shape_fns::Unknown))
                    .ok());
    EXPECT_TRUE(r->Register(OpDefBuilder("AddNLike")
                                .Input("inputs: N * T")
                                .Output("sum: T")
                                .Attr("T: type")
                                .SetShapeFn(shape_fns::Unchanged))
                    .ok());
    EXPECT_TRUE(r->Register(OpDefBuilder("Defaults")
                                .Output("out: int64")
                                .Attr("i: int >= 2 = 3")
                                .Attr("f: float = 0.5")
                                .Attr("s: string = 'SAME'")
                                .Attr("t: type = int32")
                                .Attr("shape: shape = [?,3]")
                                .Attr("perm: list(int) = [1, 0]")
                                .Attr("types: list(type) = []"))
                    .ok());
    return r;
  }();
  return r;
}

NodeDef MakeNode(const std::string& name, const std::string& op,
                 std::vector<std::string> inputs) {
  NodeDef n;
  n.set_name(name);
  n.set_op(op);
  for (auto& i : inputs) n.add_input(i);
  return n;
}

TEST(OpRegistryTest, ParsesSpecsAndDefaults) {
  const OpDef* def = TestRegistry()->LookUp("Defaults");
  ASSERT_NE(def, nullptr);
  NodeDef n = MakeNode("d", "Defaults", {});
  AddDefaultAttrs(*def, &n);
  ASSERT_TRUE(ValidateNodeDef(n, *def).ok());
  EXPECT_EQ(n.attr().at("i").i(), 3);
  EXPECT_FLOAT_EQ(n.attr().at("f").f(), 0.5f);
  EXPECT_EQ(n.attr().at("s").s(), "SAME");
  EXPECT_EQ(n.attr().at("t").type(), DT_INT32);
  EXPECT_EQ(
      PartialTensorShape::FromProto(n.attr().at("shape").shape()).DebugString(),
      "[?,3]");
  EXPECT_EQ(n.attr().at("perm").list().i_size(), 2);
  std::vector<DataType> in, out;
  ASSERT_TRUE(InOutTypesForNode(n, *def, &in, &out).ok());
  EXPECT_TRUE(in.empty());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], DT_INT64);
}

TEST(OpRegistryTest, BadSpecsAndDuplicates) {
  OpRegistry r;
  EXPECT_EQ(r.Register(OpDefBuilder("A").Input("x: Q")).code(),
            absl::StatusCode::kInvalidArgument);  // Q undeclared.
  EXPECT_EQ(r.Register(OpDefBuilder("B").Attr("x: complex")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Register(OpDefBuilder("C").Attr("x: int = abc")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Register(OpDefBuilder("D").Attr("T: {float, quux}")).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(r.Register(OpDefBuilder("E")).ok());
  EXPECT_EQ(r.Register(OpDefBuilder("E")).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(r.ListOps(), std::vector<std::string>{"E"});
}

// RequireDefault: the default passes (filled in or written out), any other
// value is Unimplemented naming node, op, attr and what cohort lacks; only
// an attr declared with a default can be required.
TEST(OpRegistryTest, RequireDefaultAcceptsOnlyTheDefault) {
  OpRegistry r;
  ASSERT_TRUE(r.Register(OpDefBuilder("Cmp")
                             .Attr("strict: bool = true")
                             .RequireDefault("strict", "no lenient mode"))
                  .ok());
  const OpDef* def = r.LookUp("Cmp");
  NodeDef n = MakeNode("c", "Cmp", {});
  AddDefaultAttrs(*def, &n);
  EXPECT_TRUE(ValidateNodeDef(n, *def).ok());
  (*n.mutable_attr())["strict"].set_b(false);
  absl::Status s = ValidateNodeDef(n, *def);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(),
            "node 'c' (op Cmp): attr 'strict' is false; cohort supports only "
            "TensorFlow's default true (no lenient mode)");

  EXPECT_EQ(
      r.Register(
           OpDefBuilder("NoDefault").Attr("T: type").RequireDefault("T", "x"))
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      r.Register(OpDefBuilder("Undeclared").RequireDefault("T", "x")).code(),
      absl::StatusCode::kInvalidArgument);
}

// A number attr from the GraphDef is checked against the inputs the node
// has, in int64: N = 2^32+1 used to pass as 1 (found by fuzz_graph_def).
TEST(OpRegistryTest, NumberAttrMustMatchTheInputsWithoutWrapping) {
  const OpDef* def = TestRegistry()->LookUp("AddNLike");
  NodeDef n = MakeNode("sum", "AddNLike", {"x"});
  (*n.mutable_attr())["T"].set_type(DT_FLOAT);
  (*n.mutable_attr())["N"].set_i(1);
  ASSERT_TRUE(ValidateNodeDef(n, *def).ok());
  for (int64_t bad : {(int64_t{1} << 32) + 1, int64_t{-1}, int64_t{2}}) {
    (*n.mutable_attr())["N"].set_i(bad);
    absl::Status s = ValidateNodeDef(n, *def);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "N=" << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("sum")) << s;
  }
}

TEST(OpRegistryTest, ValidationErrorsNameTheNode) {
  const OpDef* def = TestRegistry()->LookUp("MatMulLike");
  NodeDef n = MakeNode("dense/mm", "MatMulLike", {"x", "w:0"});
  (*n.mutable_attr())["T"].set_type(DT_FLOAT);
  AddDefaultAttrs(*def, &n);
  ASSERT_TRUE(ValidateNodeDef(n, *def).ok());

  NodeDef bad_type = n;
  (*bad_type.mutable_attr())["T"].set_type(DT_INT32);
  absl::Status s = ValidateNodeDef(bad_type, *def);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("node 'dense/mm' (op MatMulLike)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("allowed [float, double]"));

  NodeDef wrong_attr_kind = n;
  (*wrong_attr_kind.mutable_attr())["transpose_a"].set_i(1);
  s = ValidateNodeDef(wrong_attr_kind, *def);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("attr 'transpose_a' is a int"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("expected bool"));

  NodeDef unknown_attr = n;
  (*unknown_attr.mutable_attr())["color"].set_s("red");
  EXPECT_THAT(std::string(ValidateNodeDef(unknown_attr, *def).message()),
              HasSubstr("unknown attr 'color'"));

  NodeDef missing = n;
  missing.mutable_attr()->erase("T");
  EXPECT_THAT(std::string(ValidateNodeDef(missing, *def).message()),
              HasSubstr("missing attr 'T'"));

  NodeDef few_inputs = n;
  few_inputs.mutable_input()->RemoveLast();
  EXPECT_THAT(std::string(ValidateNodeDef(few_inputs, *def).message()),
              HasSubstr("has 1 data inputs, op MatMulLike takes 2"));

  NodeDef control_first =
      MakeNode("dense/mm", "MatMulLike", {"^init", "x", "w"});
  *control_first.mutable_attr() = n.attr();
  EXPECT_THAT(std::string(ValidateNodeDef(control_first, *def).message()),
              HasSubstr("control inputs (^node) must be last"));
}

// TensorFlow writes internal attrs ("_class", "_output_shapes") that no
// OpDef declares; they must pass validation untouched, and only they: an
// unknown attr without the leading underscore is still an error.
TEST(OpRegistryTest, InternalAttrsAreAcceptedWithoutValidation) {
  const OpDef* def = TestRegistry()->LookUp("Defaults");
  ASSERT_NE(def, nullptr);
  NodeDef n = MakeNode("d", "Defaults", {});
  AddDefaultAttrs(*def, &n);
  (*n.mutable_attr())["_class"].mutable_list()->add_s("loc:@x");
  (*n.mutable_attr())["_output_shapes"].mutable_list()->add_shape();
  // Even a value no OpDef attr type could have (nothing set) is not looked
  // at.
  (*n.mutable_attr())["_anything"];
  EXPECT_TRUE(ValidateNodeDef(n, *def).ok()) << ValidateNodeDef(n, *def);

  NodeDef unknown = n;
  (*unknown.mutable_attr())["class"].mutable_list()->add_s("loc:@x");
  absl::Status s = ValidateNodeDef(unknown, *def);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unknown attr 'class'"));

  // A Graph keeps the internal attr on the node (the placer reads it).
  GraphDef g;
  *g.add_node() = n;
  auto graph = Graph::FromGraphDef(g, TestRegistry());
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ((*graph)->FindNode("d")->def.attr().at("_class").list().s(0),
            "loc:@x");
}

TEST(OpRegistryTest, NumberAttrsAndMinimum) {
  const OpDef* def = TestRegistry()->LookUp("AddNLike");
  ASSERT_NE(def->FindAttr("N"), nullptr);  // Added automatically.
  NodeDef n = MakeNode("sum", "AddNLike", {"a", "b", "c"});
  (*n.mutable_attr())["T"].set_type(DT_DOUBLE);
  (*n.mutable_attr())["N"].set_i(3);
  ASSERT_TRUE(ValidateNodeDef(n, *def).ok());
  std::vector<DataType> in, out;
  ASSERT_TRUE(InOutTypesForNode(n, *def, &in, &out).ok());
  EXPECT_EQ(in, std::vector<DataType>(3, DT_DOUBLE));
  (*n.mutable_attr())["N"].set_i(0);
  n.clear_input();
  EXPECT_THAT(std::string(ValidateNodeDef(n, *def).message()),
              HasSubstr("must be at least 1"));
}

TEST(OpRegistryTest, UnknownOpNamesTheNode) {
  NodeDef n = MakeNode("layer/foo", "Frobnicate", {});
  auto r = TestRegistry()->LookUpForNode(n);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("'layer/foo'"));
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("unknown op 'Frobnicate'"));
}

TEST(ShapeFnsTest, Broadcasting) {
  OpRegistry r;
  ASSERT_TRUE(r.Register(OpDefBuilder("B")
                             .Input("x: float")
                             .Input("y: float")
                             .Output("z: float")
                             .SetShapeFn(shape_fns::BroadcastBinaryOp))
                  .ok());
  const OpDef* def = r.LookUp("B");
  NodeDef n = MakeNode("b", "B", {"x", "y"});
  auto infer = [&](PartialTensorShape a,
                   PartialTensorShape b) -> absl::StatusOr<std::string> {
    std::vector<PartialTensorShape> out;
    absl::Status s =
        InferShapes(n, *def, {a, b}, {DT_FLOAT, DT_FLOAT}, {}, 1, &out);
    if (!s.ok()) return s;
    return out[0].DebugString();
  };
  EXPECT_EQ(*infer({2, 3}, {3}), "[2,3]");
  EXPECT_EQ(*infer({2, 1}, {1, 4}), "[2,4]");
  EXPECT_EQ(*infer(PartialTensorShape::Scalar(), {5, 1}), "[5,1]");
  EXPECT_EQ(*infer({-1, 3}, {4, 1}), "[4,3]");
  EXPECT_EQ(*infer(PartialTensorShape(), {4}), "<unknown>");
  auto bad = infer({2, 3}, {4});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("node 'b' (op B)"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("[2,3] and [4]"));
}

}  // namespace
}  // namespace cohort
