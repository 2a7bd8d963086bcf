#include "cohort/graph/graph_io.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/math_ops.h"
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

}  // namespace
}  // namespace cohort
