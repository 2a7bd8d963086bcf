// GraphDefs as TensorFlow writes them: every attr of each op's definition
// (defaults included), device strings, versions and an empty library, in
// the text format tf.Graph.as_graph_def() prints. Such a graph must load
// and train; an attr TensorFlow allows but cohort does not implement is
// refused by name unless it has TensorFlow's default; an attr TensorFlow
// does not have is still refused.
#include <string>
#include <vector>

#include "cohort/graph/graph_io.h"
#include "cohort/graph/local_session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

// Linear regression y = x w, trained by one gradient-descent step per run:
// loss = Mean(Square(x w - y)), dloss/dw = x^T (2 (x w - y) / N). Written
// the way tf.compat.v1 names and prints such a graph with a resource
// variable: the initializer under "w/Initializer", the update as
// ResourceApplyGradientDescent under "GradientDescent", "_class"
// colocation attrs, and every attr TensorFlow's op definitions declare
// (Tidx, index_type, out_type, Truncate, validate_shape, allowed_devices,
// use_locking, transpose_a/b, ...), even where it has its default value.
constexpr char kTfLinearRegression[] = R"pb(
  node {
    name: "x"
    op: "Placeholder"
    attr {
      key: "dtype"
      value { type: DT_FLOAT }
    }
    attr {
      key: "shape"
      value {
        shape {
          dim { size: -1 }
          dim { size: 2 }
        }
      }
    }
  }
  node {
    name: "y"
    op: "Placeholder"
    attr {
      key: "dtype"
      value { type: DT_FLOAT }
    }
    attr {
      key: "shape"
      value {
        shape {
          dim { size: -1 }
          dim { size: 1 }
        }
      }
    }
  }
  node {
    name: "w/Initializer/zeros/shape_as_tensor"
    op: "Const"
    attr {
      key: "_class"
      value { list { s: "loc:@w" } }
    }
    attr {
      key: "dtype"
      value { type: DT_INT32 }
    }
    attr {
      key: "value"
      value {
        tensor {
          dtype: DT_INT32
          tensor_shape { dim { size: 2 } }
          tensor_content: "\002\000\000\000\001\000\000\000"
        }
      }
    }
  }
  node {
    name: "w/Initializer/zeros/Const"
    op: "Const"
    attr {
      key: "_class"
      value { list { s: "loc:@w" } }
    }
    attr {
      key: "dtype"
      value { type: DT_FLOAT }
    }
    attr {
      key: "value"
      value {
        tensor {
          dtype: DT_FLOAT
          tensor_shape {}
          float_val: 0.0
        }
      }
    }
  }
  node {
    name: "w/Initializer/zeros"
    op: "Fill"
    input: "w/Initializer/zeros/shape_as_tensor"
    input: "w/Initializer/zeros/Const"
    attr {
      key: "T"
      value { type: DT_FLOAT }
    }
    attr {
      key: "_class"
      value { list { s: "loc:@w" } }
    }
    attr {
      key: "index_type"
      value { type: DT_INT32 }
    }
  }
  node {
    name: "w"
    op: "VarHandleOp"
    device: "/device:CPU:0"
    attr {
      key: "_class"
      value { list { s: "loc:@w" } }
    }
    attr {
      key: "allowed_devices"
      value { list {} }
    }
    attr {
      key: "container"
      value { s: "" }
    }
    attr {
      key: "dtype"
      value { type: DT_FLOAT }
    }
    attr {
      key: "shape"
      value {
        shape {
          dim { size: 2 }
          dim { size: 1 }
        }
      }
    }
    attr {
      key: "shared_name"
      value { s: "w" }
    }
  }
  node {
    name: "w/IsInitialized/VarIsInitializedOp"
    op: "VarIsInitializedOp"
    input: "w"
  }
  node {
    name: "w/Assign"
    op: "AssignVariableOp"
    input: "w"
    input: "w/Initializer/zeros"
    device: "/device:CPU:0"
    attr {
      key: "dtype"
      value { type: DT_FLOAT }
    }
    attr {
      key: "validate_shape"
      value { b: false }
    }
  }
  node {
    name: "w/Read/ReadVariableOp"
    op: "ReadVariableOp"
    input: "w"
    device: "/device:CPU:0"
    attr {
      key: "dtype"
      value { type: DT_FLOAT }
    }
  }
  node {
    name: "MatMul/ReadVariableOp"
    op: "ReadVariableOp"
    input: "w"
    attr {
      key: "dtype"
      value { type: DT_FLOAT }
    }
  }
  node {
    name: "MatMul"
    op: "MatMul"
    input: "x"
    input: "MatMul/ReadVariableOp"
    attr {
      key: "T"
      value { type: DT_FLOAT }
    }
    attr {
      key: "transpose_a"
      value { b: false }
    }
    attr {
      key: "transpose_b"
      value { b: false }
    }
  }
  node {
    name: "sub"
    op: "Sub"
    input: "MatMul"
    input: "y"
    attr {
      key: "T"
      value { type: DT_FLOAT }
    }
  }
  node {
    name: "Square"
    op: "Square"
    input: "sub"
    attr {
      key: "T"
      value { type: DT_FLOAT }
    }
  }
  node {
    name: "Const"
    op: "Const"
    attr {
      key: "dtype"
      value { type: DT_INT32 }
    }
    attr {
      key: "value"
      value {
        tensor {
          dtype: DT_INT32
          tensor_shape { dim { size: 2 } }
          tensor_content: "\000\000\000\000\001\000\000\000"
        }
      }
    }
  }
  node {
    name: "Mean"
    op: "Mean"
    input: "Square"
    input: "Const"
    attr {
      key: "T"
      value { type: DT_FLOAT }
    }
    attr {
      key: "Tidx"
      value { type: DT_INT32 }
    }
    attr {
      key: "keep_dims"
      value { b: false }
    }
  }
  node {
    name: "Sum"
    op: "Sum"
    input: "Square"
    input: "Const"
    attr {
      key: "T"
      value { type: DT_FLOAT }
    }
    attr {
      key: "Tidx"
      value { type: DT_INT32 }
    }
    attr {
      key: "keep_dims"
      value { b: false }
    }
  }
  node {
    name: "gradients/Size"
    op: "Size"
    input: "sub"
    attr {
      key: "T"
      value { type: DT_FLOAT }
    }
    attr {
      key: "out_type"
      value { type: DT_INT32 }
    }
  }
  node {
    name: "gradients/Cast"
    op: "Cast"
    input: "gradients/Size"
    attr {
      key: "DstT"
      value { type: DT_FLOAT }
    }
    attr {
      key: "SrcT"
      value { type: DT_INT32 }
    }
    attr {
      key: "Truncate"
      value { b: false }
    }
  }
  node {
    name: "gradients/mul/x"
    op: "Const"
    attr {
      key: "dtype"
      value { type: DT_FLOAT }
    }
    attr {
      key: "value"
      value {
        tensor {
          dtype: DT_FLOAT
          tensor_shape {}
          float_val: 2.0
        }
      }
    }
  }
  node {
    name: "gradients/mul"
    op: "Mul"
    input: "gradients/mul/x"
    input: "sub"
    attr {
      key: "T"
      value { type: DT_FLOAT }
    }
  }
  node {
    name: "gradients/truediv"
    op: "Div"
    input: "gradients/mul"
    input: "gradients/Cast"
    attr {
      key: "T"
      value { type: DT_FLOAT }
    }
  }
  node {
    name: "gradients/MatMul_grad/MatMul_1"
    op: "MatMul"
    input: "x"
    input: "gradients/truediv"
    attr {
      key: "T"
      value { type: DT_FLOAT }
    }
    attr {
      key: "transpose_a"
      value { b: true }
    }
    attr {
      key: "transpose_b"
      value { b: false }
    }
  }
  node {
    name: "GradientDescent/learning_rate"
    op: "Const"
    attr {
      key: "dtype"
      value { type: DT_FLOAT }
    }
    attr {
      key: "value"
      value {
        tensor {
          dtype: DT_FLOAT
          tensor_shape {}
          float_val: 0.1
        }
      }
    }
  }
  node {
    name: "GradientDescent/update_w/ResourceApplyGradientDescent"
    op: "ResourceApplyGradientDescent"
    input: "w"
    input: "GradientDescent/learning_rate"
    input: "gradients/MatMul_grad/MatMul_1"
    device: "/device:CPU:0"
    attr {
      key: "T"
      value { type: DT_FLOAT }
    }
    attr {
      key: "_class"
      value { list { s: "loc:@w" } }
    }
    attr {
      key: "use_locking"
      value { b: false }
    }
  }
  node {
    name: "GradientDescent"
    op: "NoOp"
    input: "^GradientDescent/update_w/ResourceApplyGradientDescent"
  }
  library {}
  versions { producer: 1645 min_consumer: 12 }
)pb";

// x w_true = y for w_true = [2, -1]^T.
Tensor Matrix(std::vector<float> values, int64_t rows, int64_t cols) {
  return *Tensor::FromVector<float>(values, TensorShape({rows, cols}));
}
Tensor X() { return Matrix({1, 0, 0, 1, 1, 1}, 3, 2); }
Tensor Y() { return Matrix({2, -1, 1}, 3, 1); }

GraphDef LoadTfGraph() {
  auto g = GraphDefFromText(kTfLinearRegression);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : GraphDef();
}

absl::StatusOr<std::unique_ptr<LocalSession>> MakeSession(const GraphDef& g) {
  SessionOptions options;
  options.num_threads = 1;
  return LocalSession::Create(g, options);
}

NodeDef* FindNode(GraphDef* g, const std::string& name) {
  for (NodeDef& n : *g->mutable_node()) {
    if (n.name() == name) return &n;
  }
  ADD_FAILURE() << "no node " << name;
  return g->mutable_node(0);
}

TEST(TfGraphDefTest, TensorFlowsLinearRegressionLoadsAndTrains) {
  GraphDef g = LoadTfGraph();
  EXPECT_EQ(g.versions().producer(), 1645);
  auto session = MakeSession(g);
  ASSERT_TRUE(session.ok()) << session.status();
  LocalSession& s = **session;
  const std::vector<std::pair<std::string, Tensor>> feeds = {{"x", X()},
                                                             {"y", Y()}};
  std::vector<Tensor> out;
  ASSERT_TRUE(
      s.Run({}, {"w/IsInitialized/VarIsInitializedOp:0"}, {}, &out).ok());
  EXPECT_FALSE(out[0].scalar<bool>());
  ASSERT_TRUE(s.Run({}, {}, {"w/Assign"}, &out).ok());

  // At w = 0 the loss is mean(y^2) = 6/3 and its sum 6.
  ASSERT_TRUE(s.Run(feeds, {"Mean:0", "Sum:0"}, {}, &out).ok());
  EXPECT_FLOAT_EQ(out[0].scalar<float>(), 2.0f);
  EXPECT_FLOAT_EQ(out[1].scalar<float>(), 6.0f);

  // One step: dloss/dw = x^T (2 (0 - y) / 3) = [-2, 0], so w = 0.1 * [2, 0].
  ASSERT_TRUE(s.Run(feeds, {}, {"GradientDescent"}, &out).ok());
  ASSERT_TRUE(s.Run({}, {"w/Read/ReadVariableOp:0"}, {}, &out).ok());
  ASSERT_EQ(out[0].NumElements(), 2);
  EXPECT_NEAR(out[0].flat<float>()(0), 0.2f, 1e-6);
  EXPECT_NEAR(out[0].flat<float>()(1), 0.0f, 1e-6);

  // Training converges to w_true.
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(s.Run(feeds, {}, {"GradientDescent"}, &out).ok());
  }
  ASSERT_TRUE(
      s.Run(feeds, {"w/Read/ReadVariableOp:0", "Mean:0"}, {}, &out).ok());
  EXPECT_NEAR(out[0].flat<float>()(0), 2.0f, 1e-3);
  EXPECT_NEAR(out[0].flat<float>()(1), -1.0f, 1e-3);
  EXPECT_LT(out[1].scalar<float>(), 1e-6f);
  EXPECT_TRUE(s.Close().ok());
}

// TensorFlow allows Tidx = int64; cohort's reduction kernels read int32
// axes, so that value is refused by node, op and attr instead of being
// misread.
TEST(TfGraphDefTest, AttrTensorFlowAllowsButCohortLacksIsRefusedByName) {
  GraphDef g = LoadTfGraph();
  (*FindNode(&g, "Mean")->mutable_attr())["Tidx"].set_type(DT_INT64);
  auto session = MakeSession(g);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(session.status().message(),
              HasSubstr("node 'Mean' (op Mean): attr 'Tidx' is"));
  EXPECT_THAT(session.status().message(),
              HasSubstr("cohort supports only TensorFlow's default int32"));

  g = LoadTfGraph();
  (*FindNode(&g, "gradients/Cast")->mutable_attr())["Truncate"].set_b(true);
  session = MakeSession(g);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(session.status().message(),
              HasSubstr("node 'gradients/Cast' (op Cast): attr 'Truncate'"));

  g = LoadTfGraph();
  (*FindNode(&g, "w")->mutable_attr())["allowed_devices"].mutable_list()->add_s(
      "/job:worker/task:1/device:CPU:0");
  session = MakeSession(g);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(session.status().message(),
              HasSubstr("node 'w' (op VarHandleOp): attr 'allowed_devices'"));
}

// Attrs TensorFlow's op definitions do not have are still unknown.
TEST(TfGraphDefTest, AttrTensorFlowDoesNotHaveIsStillRefused) {
  GraphDef g = LoadTfGraph();
  (*FindNode(&g, "Sum")->mutable_attr())["Tidy"].set_type(DT_INT32);
  auto session = MakeSession(g);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(session.status().message(),
              HasSubstr("node 'Sum' (op Sum): unknown attr 'Tidy' for op Sum"));
}

// TensorFlow's legacy Concat takes (concat_dim, values); cohort's join is
// TensorFlow's ConcatV2 (values, axis). The legacy op is unknown, not
// misread as ConcatV2 (int32 values would have been taken for the axis).
TEST(TfGraphDefTest, LegacyConcatIsUnknownAndConcatV2Loads) {
  GraphDef g = LoadTfGraph();
  NodeDef* concat = g.add_node();
  concat->set_name("concat");
  concat->set_op("Concat");
  concat->add_input("Const");
  concat->add_input("Const");
  concat->add_input("Const");
  (*concat->mutable_attr())["N"].set_i(2);
  (*concat->mutable_attr())["T"].set_type(DT_INT32);
  auto session = MakeSession(g);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(session.status().message(),
              HasSubstr("node 'concat': unknown op 'Concat'"));

  // The same node as TensorFlow writes tf.concat([c, c], 0): ConcatV2.
  concat->set_op("ConcatV2");
  (*concat->mutable_attr())["Tidx"].set_type(DT_INT32);
  concat->mutable_input()->RemoveLast();
  concat->add_input("concat/axis");
  NodeDef* axis = g.add_node();
  axis->set_name("concat/axis");
  axis->set_op("Const");
  (*axis->mutable_attr())["dtype"].set_type(DT_INT32);
  Tensor(int32_t{0}).AsProto((*axis->mutable_attr())["value"].mutable_tensor());
  session = MakeSession(g);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<Tensor> out;
  ASSERT_TRUE((*session)->Run({}, {"concat:0"}, {}, &out).ok());
  ASSERT_EQ(out[0].NumElements(), 4);
  EXPECT_EQ(out[0].flat<int32_t>()(2), 0);
  EXPECT_EQ(out[0].flat<int32_t>()(3), 1);
}

// A graph that leaves TensorFlow's defaulted attrs out (as cohort's own
// builder and older TensorFlow versions write them) gets the defaults.
TEST(TfGraphDefTest, MissingDefaultedAttrsAreFilledIn) {
  GraphDef g = LoadTfGraph();
  for (const char* attr : {"Tidx", "keep_dims"}) {
    FindNode(&g, "Mean")->mutable_attr()->erase(attr);
  }
  FindNode(&g, "w/Initializer/zeros")->mutable_attr()->erase("index_type");
  FindNode(&g, "w")->mutable_attr()->erase("allowed_devices");
  auto session = MakeSession(g);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<Tensor> out;
  ASSERT_TRUE((*session)->Run({}, {}, {"w/Assign"}, &out).ok());
  ASSERT_TRUE(
      (*session)->Run({{"x", X()}, {"y", Y()}}, {"Mean:0"}, {}, &out).ok());
  EXPECT_FLOAT_EQ(out[0].scalar<float>(), 2.0f);
}

}  // namespace
}  // namespace cohort
