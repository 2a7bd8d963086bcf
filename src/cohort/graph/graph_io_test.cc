#include "cohort/graph/graph_io.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/graph.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/standard_registries.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace cohort {
namespace {

using ::testing::HasSubstr;

GraphDef Sample() {
  Scope root = Scope::NewRootScope();
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT, {-1, 2});
  ops::Add(
      root.WithOpName("y").WithDevice("/job:ps/replica:0/task:0/device:CPU:0"),
      x, {1.f, 2.f});
  GraphDef g;
  EXPECT_TRUE(root.ToGraphDef(&g).ok());
  return g;
}

TEST(GraphIoTest, BinaryAndTextRoundTrip) {
  std::string base = absl::StrCat("/tmp/cohort_graph_io_", getpid());
  GraphDef g = Sample();
  ASSERT_TRUE(WriteGraphDef(base + ".pb", g).ok());
  ASSERT_TRUE(WriteGraphDef(base + ".pbtxt", g, GraphFormat::kText).ok());
  auto b = ReadGraphDef(base + ".pb");
  auto t = ReadGraphDef(base + ".pbtxt");
  ASSERT_TRUE(b.ok() && t.ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*b, g));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*t, g));
  EXPECT_THAT(GraphDefToText(g),
              HasSubstr("device: \"/job:ps/replica:0/task:0/device:CPU:0\""));
  std::remove((base + ".pb").c_str());
  std::remove((base + ".pbtxt").c_str());
}

TEST(GraphIoTest, Errors) {
  EXPECT_EQ(ReadGraphDef("/nonexistent/g.pb").status().code(),
            absl::StatusCode::kNotFound);
  auto bad = GraphDefFromText("node { name: \"a\" op: }");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("line 1"));
  std::string path =
      absl::StrCat("/tmp/cohort_graph_io_bad_", getpid(), ".pbtxt");
  std::ofstream(path) << "garbage {";
  auto r = ReadGraphDef(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(path));
  std::remove(path.c_str());
}

// A GraphDef as TensorFlow writes it (tf.io.write_graph): a library, the
// versions, and internal "_" attrs on the nodes. It must read as text and
// binary and build into a Graph with the standard registry.
constexpr char kTensorFlowText[] = R"pb(
  node {
    name: "x"
    op: "Placeholder"
    attr {
      key: "dtype"
      value { type: DT_FLOAT }
    }
    attr {
      key: "shape"
      value { shape { dim { size: -1 } } }
    }
    attr {
      key: "_output_shapes"
      value { list { shape { dim { size: -1 } } } }
    }
  }
  node {
    name: "y"
    op: "Identity"
    input: "x"
    device: "/job:worker/task:0"
    attr {
      key: "T"
      value { type: DT_FLOAT }
    }
    attr {
      key: "_class"
      value { list { s: "loc:@x" } }
    }
  }
  library {}
  versions { producer: 27 min_consumer: 12 bad_consumers: 3 }
)pb";

TEST(GraphIoTest, ReadsTensorFlowVersionsAndLibrary) {
  auto g = GraphDefFromText(kTensorFlowText);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->versions().producer(), 27);
  EXPECT_EQ(g->versions().min_consumer(), 12);
  ASSERT_EQ(g->versions().bad_consumers_size(), 1);
  EXPECT_TRUE(g->has_library());
  EXPECT_EQ(g->node_size(), 2);

  // The same through a file, in both formats.
  std::string base = absl::StrCat("/tmp/cohort_graph_io_tf_", getpid());
  ASSERT_TRUE(WriteGraphDef(base + ".pbtxt", *g, GraphFormat::kText).ok());
  ASSERT_TRUE(WriteGraphDef(base + ".pb", *g).ok());
  for (const std::string& path : {base + ".pbtxt", base + ".pb"}) {
    auto r = ReadGraphDef(path);
    ASSERT_TRUE(r.ok()) << path << ": " << r.status();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*r, *g))
        << path;
    std::remove(path.c_str());
  }

  // Internal attrs do not stop the graph from building.
  auto graph = Graph::FromGraphDef(*g, StandardOpRegistry());
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ((*graph)->FindNode("y")->def.device(), "/job:worker/task:0");
}

// cohort has no functions: a library with content is refused, naming the
// line, rather than silently dropped.
TEST(GraphIoTest, NonEmptyLibraryIsRejected) {
  auto g =
      GraphDefFromText("library { function { signature { name: \"f\" } } }");
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("line 1"));
}

}  // namespace
}  // namespace cohort
