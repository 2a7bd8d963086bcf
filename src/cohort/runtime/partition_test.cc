#include "cohort/runtime/partition.h"

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/device.h"
#include "cohort/graph/executor.h"
#include "cohort/graph/kernel_test_util.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/elementwise_ops.h"
#include "cohort/graph/kernels/math_ops.h"
#include "cohort/graph/kernels/reduction_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/graph/local_session.h"
#include "cohort/graph/rendezvous.h"
#include "cohort/graph/standard_registries.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr char kPs0[] = "/job:ps/replica:0/task:0/device:CPU:0";
constexpr char kWorker0[] = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr char kWorker1[] = "/job:worker/replica:0/task:1/device:CPU:0";

// Fixed incarnations, so rendezvous keys can be checked.
const std::map<std::string, uint64_t>& Incarnations() {
  static const auto* m = new std::map<std::string, uint64_t>{
      {kPs0, 0x1111000000000001ull},
      {kWorker0, 0x2222000000000002ull},
      // Top bit set: the int attr must carry it bit for bit.
      {kWorker1, 0xf333000000000003ull},
  };
  return *m;
}

// The discovered devices, deliberately not in sorted order.
PartitionOptions ThreeTasks(bool soft = false) {
  PartitionOptions opts;
  for (const char* name : {kWorker1, kPs0, kWorker0}) {
    DeviceAttributes* d = &opts.devices.emplace_back();
    d->set_name(name);
    d->set_device_type("CPU");
    d->set_incarnation(Incarnations().at(name));
  }
  opts.default_device = kWorker0;
  opts.allow_soft_placement = soft;
  return opts;
}

std::unique_ptr<Graph> MustBuild(const GraphDef& def) {
  auto g = Graph::FromGraphDef(def, StandardOpRegistry());
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : nullptr;
}

// A small model over three tasks (variables on ps, compute on two
// workers), with every kind of crossing edge:
//   ps:0      w, w/read, b, b/read, scaled (s * 0.01), update (AssignAdd
//             to b: colocated with b through its resource input although
//             unplaced)
//   worker:0  x (unplaced: default device), h0, done
//   worker:1  h1, h2, y, axes, z (unplaced: with its first input y), s
// w/read and b/read cross to workers; h0 feeds three inputs on worker:1
// (one Recv); s feeds update on ps; done has control inputs from ps and
// worker:1.
GraphDef ModelGraph() {
  Scope root = Scope::NewRootScope();
  Scope ps = root.WithDevice("/job:ps/task:0");
  Scope w0 = root.WithDevice("/job:worker/task:0");
  Scope w1 = root.WithDevice("/job:worker/replica:0/task:1/device:CPU:0");
  auto w = ops::MakeVariable(
      ps, "w", *Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape({2, 2})));
  auto b = ops::MakeVariable(ps, "b", Tensor::Vec<float>({0.5f, -0.5f}));
  ops::GlobalVariablesInitializer(root);
  auto x = ops::Placeholder(root.WithOpName("x"), DT_FLOAT, {-1, 2});
  auto h0 = ops::MatMul(w0.WithOpName("h0"), x, w.value);
  auto h1 = ops::Add(w1.WithOpName("h1"), h0, b.value);
  auto h2 = ops::Mul(w1.WithOpName("h2"), h0, h1);
  auto y = ops::Add(w1.WithOpName("y"), h2, h0);
  auto z = ops::Mul(root.WithOpName("z"), y, b.value);
  auto axes = ops::Const(w1.WithOpName("axes"), Tensor(int32_t{0}));
  auto s = ops::Sum(root.WithOpName("s"), z, axes);
  auto update =
      ops::AssignAddVariableOp(root.WithOpName("update"), b.handle,
                               ops::Mul(ps.WithOpName("scaled"), s, 0.01f));
  ops::NoOp(w0.WithOpName("done").WithControlDependencies({update, h2.op()}));
  GraphDef def;
  EXPECT_TRUE(root.ToGraphDef(&def).ok()) << root.status();
  return def;
}

const Partition* FindPart(const std::vector<Partition>& parts,
                          const std::string& device) {
  for (const Partition& p : parts) {
    if (p.device == device) return &p;
  }
  return nullptr;
}

const NodeDef* FindNode(const GraphDef& g, const std::string& name) {
  for (const NodeDef& n : g.node()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

std::vector<const NodeDef*> NodesOfOp(const GraphDef& g,
                                      const std::string& op) {
  std::vector<const NodeDef*> out;
  for (const NodeDef& n : g.node()) {
    if (n.op() == op) out.push_back(&n);
  }
  return out;
}

std::map<std::string, int> OpCounts(const GraphDef& g) {
  std::map<std::string, int> counts;
  for (const NodeDef& n : g.node()) {
    bool inserted = n.name().rfind("_send/", 0) == 0 ||
                    n.name().rfind("_recv/", 0) == 0 ||
                    n.name().rfind("_ctrl/", 0) == 0;
    ++counts[inserted ? n.op() : "(graph)"];
  }
  return counts;
}

// The rendezvous key a Send or Recv node uses (sendrecv_ops.h).
std::string KeyOf(const NodeDef& n) {
  return Rendezvous::CreateKey(
      n.attr().at("send_device").s(),
      static_cast<uint64_t>(n.attr().at("send_device_incarnation").i()),
      n.attr().at("recv_device").s(), n.attr().at("tensor_name").s(), 0, 0);
}

std::string Serialize(const GraphDef& g) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  g.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

std::vector<Partition> MustPartition(const GraphDef& def,
                                     const std::vector<std::string>& feeds,
                                     const std::vector<std::string>& fetches,
                                     const std::vector<std::string>& targets,
                                     const PartitionOptions& opts) {
  auto graph = MustBuild(def);
  if (graph == nullptr) return {};
  auto parts = PartitionGraph(*graph, feeds, fetches, targets, opts);
  EXPECT_TRUE(parts.ok()) << parts.status();
  return parts.ok() ? std::move(*parts) : std::vector<Partition>();
}

absl::Status PartitionStatus(const GraphDef& def,
                             const std::vector<std::string>& fetches,
                             const PartitionOptions& opts,
                             const std::vector<std::string>& feeds = {},
                             const std::vector<std::string>& targets = {}) {
  auto graph = MustBuild(def);
  if (graph == nullptr) return absl::InternalError("graph did not build");
  return PartitionGraph(*graph, feeds, fetches, targets, opts).status();
}

// Where `node` landed, or "" when it is in no partition.
std::string DeviceOf(const std::vector<Partition>& parts,
                     const std::string& node) {
  for (const Partition& p : parts) {
    if (const NodeDef* n = FindNode(p.graph_def, node)) return n->device();
  }
  return "";
}

void SetDevice(GraphDef* g, const std::string& node,
               const std::string& device) {
  for (NodeDef& n : *g->mutable_node()) {
    if (n.name() == node) {
      n.set_device(device);
      return;
    }
  }
  ADD_FAILURE() << "no node " << node;
}

void AddClass(GraphDef* g, const std::string& node, const std::string& cls) {
  for (NodeDef& n : *g->mutable_node()) {
    if (n.name() == node) {
      (*n.mutable_attr())["_class"].mutable_list()->add_s(cls);
      return;
    }
  }
  ADD_FAILURE() << "no node " << node;
}

// --- Partitioning the model graph ----------------------------------------

TEST(PartitionTest, ThreeTaskModelNodeCountsAndSignature) {
  std::vector<Partition> parts =
      MustPartition(ModelGraph(), {"x"}, {"y:0", "z"}, {"done"}, ThreeTasks());
  ASSERT_EQ(parts.size(), 3u);
  // Sorted by device name.
  EXPECT_EQ(parts[0].device, kPs0);
  EXPECT_EQ(parts[1].device, kWorker0);
  EXPECT_EQ(parts[2].device, kWorker1);
  EXPECT_EQ(parts[0].task, "/job:ps/replica:0/task:0");
  EXPECT_EQ(parts[2].task, "/job:worker/replica:0/task:1");

  // ps: w, w/read, b, b/read, scaled and its literal 0.01, update; Sends
  // of w/read (to worker:0) and b/read (to worker:1); the Recv of s; the
  // control dummy of update and its Send.
  EXPECT_EQ(OpCounts(parts[0].graph_def),
            (std::map<std::string, int>{
                {"(graph)", 7}, {"Const", 1}, {"Recv", 1}, {"Send", 3}}));
  // worker:0: x, h0, done; Send of h0; Recv of w/read and of the two
  // control edges into done.
  EXPECT_EQ(
      OpCounts(parts[1].graph_def),
      (std::map<std::string, int>{{"(graph)", 3}, {"Recv", 3}, {"Send", 1}}));
  // worker:1: h1, h2, y, z, axes, s; one Recv of h0 (three consumers) and
  // one of b/read (two); Send of s; the control dummy of h2 and its Send.
  EXPECT_EQ(OpCounts(parts[2].graph_def),
            (std::map<std::string, int>{
                {"(graph)", 6}, {"Const", 1}, {"Recv", 2}, {"Send", 2}}));

  // The client's names, each in the partition that holds it.
  EXPECT_THAT(parts[0].feeds, IsEmpty());
  EXPECT_THAT(parts[1].feeds, ElementsAre("x"));
  EXPECT_THAT(parts[1].targets, ElementsAre("done"));
  EXPECT_THAT(parts[1].fetches, IsEmpty());
  EXPECT_THAT(parts[2].fetches, ElementsAre("y:0", "z"));
  EXPECT_THAT(parts[2].targets, IsEmpty());
  // Initialisers are not needed by this signature.
  EXPECT_EQ(FindNode(parts[0].graph_def, "w/Assign"), nullptr);
  EXPECT_EQ(FindNode(parts[1].graph_def, "init"), nullptr);
}

TEST(PartitionTest, PlacementOfTheModel) {
  std::vector<Partition> parts =
      MustPartition(ModelGraph(), {"x"}, {"y:0", "z"}, {"done"}, ThreeTasks());
  // Explicit partial devices, completed.
  EXPECT_EQ(DeviceOf(parts, "w"), kPs0);
  EXPECT_EQ(DeviceOf(parts, "h0"), kWorker0);
  EXPECT_EQ(DeviceOf(parts, "h1"), kWorker1);
  // Unplaced: no inputs -> the default device; else the first input's.
  EXPECT_EQ(DeviceOf(parts, "x"), kWorker0);
  EXPECT_EQ(DeviceOf(parts, "z"), kWorker1);
  EXPECT_EQ(DeviceOf(parts, "s"), kWorker1);
  // A DT_RESOURCE consumer goes to the resource's producer, not to its
  // first-input rule.
  EXPECT_EQ(DeviceOf(parts, "update"), kPs0);
  // Every node carries its partition's full device name.
  for (const Partition& p : parts) {
    for (const NodeDef& n : p.graph_def.node()) {
      EXPECT_EQ(n.device(), p.device) << n.name();
    }
  }
}

TEST(PartitionTest, EveryPartitionIsAValidGraph) {
  std::vector<Partition> parts =
      MustPartition(ModelGraph(), {"x"}, {"y:0", "z"}, {"done"}, ThreeTasks());
  ASSERT_EQ(parts.size(), 3u);
  for (const Partition& p : parts) {
    auto g = Graph::FromGraphDef(p.graph_def, StandardOpRegistry());
    EXPECT_TRUE(g.ok()) << p.device << ": " << g.status();
  }
}

TEST(PartitionTest, SendRecvAttrsAndKeys) {
  std::vector<Partition> parts =
      MustPartition(ModelGraph(), {"x"}, {"y:0", "z"}, {"done"}, ThreeTasks());
  ASSERT_EQ(parts.size(), 3u);
  std::map<std::string, const NodeDef*> sends, recvs;  // By key.
  for (const Partition& p : parts) {
    for (const NodeDef* n : NodesOfOp(p.graph_def, "Send")) {
      EXPECT_EQ(n->attr().at("send_device").s(), p.device);
      EXPECT_TRUE(sends.emplace(KeyOf(*n), n).second) << KeyOf(*n);
      EXPECT_EQ(n->attr().at("send_device_incarnation").i(),
                static_cast<int64_t>(Incarnations().at(p.device)));
    }
    for (const NodeDef* n : NodesOfOp(p.graph_def, "Recv")) {
      EXPECT_EQ(n->attr().at("recv_device").s(), p.device);
      EXPECT_TRUE(recvs.emplace(KeyOf(*n), n).second) << KeyOf(*n);
    }
  }
  // Every Send has exactly one Recv with the same key, and the same dtype.
  ASSERT_EQ(sends.size(), 6u);
  ASSERT_EQ(recvs.size(), 6u);
  for (const auto& [key, send] : sends) {
    ASSERT_TRUE(recvs.count(key)) << key;
    EXPECT_EQ(send->attr().at("T").type(),
              recvs[key]->attr().at("tensor_type").type())
        << key;
  }
  // The keys, with the producer's incarnation in hex.
  auto key = [](const char* src, const char* dst, const char* tensor) {
    return Rendezvous::CreateKey(src, Incarnations().at(src), dst, tensor);
  };
  EXPECT_TRUE(recvs.count(key(kPs0, kWorker0, "w/read:0")));
  EXPECT_TRUE(recvs.count(key(kPs0, kWorker1, "b/read:0")));
  EXPECT_TRUE(recvs.count(key(kWorker0, kWorker1, "h0:0")));
  EXPECT_TRUE(recvs.count(key(kWorker1, kPs0, "s:0")));
  EXPECT_TRUE(recvs.count(key(kPs0, kWorker0, "^update")));
  EXPECT_TRUE(recvs.count(key(kWorker1, kWorker0, "^h2")));
  EXPECT_THAT(key(kWorker1, kPs0, "s:0"), HasSubstr(";f333000000000003;"));
  // A data Send reads the tensor itself; its dtype is the edge's.
  const NodeDef* send_h0 = sends.at(key(kWorker0, kWorker1, "h0:0"));
  EXPECT_THAT(send_h0->input(), ElementsAre("h0:0"));
  EXPECT_EQ(send_h0->attr().at("T").type(), DT_FLOAT);
}

TEST(PartitionTest, OneRecvPerTensorAndTaskFeedsEveryConsumer) {
  std::vector<Partition> parts =
      MustPartition(ModelGraph(), {"x"}, {"y:0", "z"}, {"done"}, ThreeTasks());
  const GraphDef& w1 = FindPart(parts, kWorker1)->graph_def;
  std::string recv_h0, recv_b;
  for (const NodeDef* n : NodesOfOp(w1, "Recv")) {
    if (n->attr().at("tensor_name").s() == "h0:0") recv_h0 = n->name();
    if (n->attr().at("tensor_name").s() == "b/read:0") recv_b = n->name();
  }
  ASSERT_FALSE(recv_h0.empty());
  ASSERT_FALSE(recv_b.empty());
  EXPECT_EQ(recv_h0, "_recv/h0_0_from_worker_0");
  EXPECT_THAT(FindNode(w1, "h1")->input(), ElementsAre(recv_h0, recv_b));
  EXPECT_THAT(FindNode(w1, "h2")->input(), ElementsAre(recv_h0, "h1"));
  EXPECT_THAT(FindNode(w1, "y")->input(), ElementsAre("h2", recv_h0));
  EXPECT_THAT(FindNode(w1, "z")->input(), ElementsAre("y", recv_b));
  // Local edges are untouched.
  EXPECT_THAT(FindNode(w1, "s")->input(), ElementsAre("z", "axes"));
}

TEST(PartitionTest, ControlEdgesAcrossTasksGoThroughADummyConst) {
  std::vector<Partition> parts =
      MustPartition(ModelGraph(), {"x"}, {"y:0", "z"}, {"done"}, ThreeTasks());
  const GraphDef& ps = FindPart(parts, kPs0)->graph_def;
  const GraphDef& w0 = FindPart(parts, kWorker0)->graph_def;
  const GraphDef& w1 = FindPart(parts, kWorker1)->graph_def;
  // On the producer's task: a scalar float Const after the producer...
  const NodeDef* dummy = FindNode(ps, "_ctrl/update_to_worker_0");
  ASSERT_NE(dummy, nullptr);
  EXPECT_EQ(dummy->op(), "Const");
  EXPECT_THAT(dummy->input(), ElementsAre("^update"));
  EXPECT_EQ(dummy->attr().at("dtype").type(), DT_FLOAT);
  EXPECT_EQ(dummy->attr().at("value").tensor().dtype(), DT_FLOAT);
  EXPECT_EQ(dummy->attr().at("value").tensor().tensor_shape().dim_size(), 0);
  // ... sent to the consumer's task...
  std::vector<const NodeDef*> ps_sends = NodesOfOp(ps, "Send");
  const NodeDef* send = nullptr;
  for (const NodeDef* n : ps_sends) {
    if (n->attr().at("tensor_name").s() == "^update") send = n;
  }
  ASSERT_NE(send, nullptr);
  EXPECT_THAT(send->input(), ElementsAre(dummy->name()));
  EXPECT_EQ(send->attr().at("recv_device").s(), kWorker0);
  // ... whose Recv is a control input of the consumer.
  EXPECT_THAT(FindNode(w0, "done")->input(),
              UnorderedElementsAre("^_recv/_ctrl/update_from_ps_0",
                                   "^_recv/_ctrl/h2_from_worker_1"));
  EXPECT_NE(FindNode(w0, "_recv/_ctrl/update_from_ps_0"), nullptr);
  EXPECT_NE(FindNode(w1, "_ctrl/h2_to_worker_0"), nullptr);
}

TEST(PartitionTest, OneControlRecvPerSourceAndTask) {
  Scope root = Scope::NewRootScope();
  auto a = ops::Const(root.WithOpName("a").WithDevice("/job:ps"), 1.0f);
  Scope w0 = root.WithDevice("/job:worker/task:0");
  ops::NoOp(w0.WithOpName("n1").WithControlDependencies({a.op()}));
  ops::NoOp(w0.WithOpName("n2").WithControlDependencies({a.op()}));
  // Data and control from the same producer: separate transfers.
  ops::Identity(w0.WithOpName("i").WithControlDependencies({a.op()}), a);
  GraphDef def;
  ASSERT_TRUE(root.ToGraphDef(&def).ok());
  std::vector<Partition> parts =
      MustPartition(def, {}, {"i"}, {"n1", "n2"}, ThreeTasks());
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(
      OpCounts(FindPart(parts, kPs0)->graph_def),
      (std::map<std::string, int>{{"(graph)", 1}, {"Const", 1}, {"Send", 2}}));
  EXPECT_EQ(OpCounts(FindPart(parts, kWorker0)->graph_def),
            (std::map<std::string, int>{{"(graph)", 3}, {"Recv", 2}}));
  const GraphDef& w = FindPart(parts, kWorker0)->graph_def;
  EXPECT_THAT(FindNode(w, "n1")->input(),
              ElementsAre("^_recv/_ctrl/a_from_ps_0"));
  EXPECT_THAT(FindNode(w, "n2")->input(),
              ElementsAre("^_recv/_ctrl/a_from_ps_0"));
  EXPECT_THAT(FindNode(w, "i")->input(),
              ElementsAre("_recv/a_0_from_ps_0", "^_recv/_ctrl/a_from_ps_0"));
}

TEST(PartitionTest, DeterministicOutput) {
  GraphDef def = ModelGraph();
  auto graph = MustBuild(def);
  ASSERT_NE(graph, nullptr);
  auto a = PartitionGraph(*graph, {"x"}, {"y:0", "z"}, {"done"}, ThreeTasks());
  auto b = PartitionGraph(*graph, {"x"}, {"y:0", "z"}, {"done"}, ThreeTasks());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ(Serialize((*a)[i].graph_def), Serialize((*b)[i].graph_def));
  }
}

TEST(PartitionTest, PruningLeavesUntouchedTasksOut) {
  GraphDef def = ModelGraph();
  // Only ps is needed to read b.
  std::vector<Partition> parts =
      MustPartition(def, {}, {"b/read:0"}, {}, ThreeTasks());
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].device, kPs0);
  EXPECT_EQ(parts[0].graph_def.node_size(), 2);  // b, b/read
  EXPECT_THAT(parts[0].fetches, ElementsAre("b/read:0"));

  // The initialiser runs on ps; init (unplaced, no data input) on the
  // default device waits for it through two control transfers.
  parts = MustPartition(def, {}, {}, {"init"}, ThreeTasks());
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(DeviceOf(parts, "w/Assign"), kPs0);
  EXPECT_EQ(DeviceOf(parts, "w/initial_value"), kPs0);
  EXPECT_EQ(DeviceOf(parts, "init"), kWorker0);
  EXPECT_EQ(NodesOfOp(FindPart(parts, kWorker0)->graph_def, "Recv").size(), 2u);
  EXPECT_EQ(FindPart(parts, kWorker1), nullptr);
}

// --- Placement rules -----------------------------------------------------

GraphDef Chain() {
  // c (Const) -> i1 -> i2, and a lone Const k.
  Scope root = Scope::NewRootScope();
  auto c = ops::Const(root.WithOpName("c"), 1.0f);
  auto i1 = ops::Identity(root.WithOpName("i1"), c);
  ops::Identity(root.WithOpName("i2"), i1);
  ops::Const(root.WithOpName("k"), 2.0f);
  GraphDef def;
  EXPECT_TRUE(root.ToGraphDef(&def).ok());
  return def;
}

TEST(PlacementTest, PartialNamesAreCompletedFromTheDefaultJob) {
  struct Case {
    const char* written;
    const char* placed;
  } cases[] = {
      {"", kWorker0},
      {"/job:ps", kPs0},
      {"/job:ps/task:0", kPs0},
      {"/task:1", kWorker1},
      {"/replica:0/task:1", kWorker1},
      {"/device:CPU:0", kWorker0},
      {"/cpu:0", kWorker0},
      {"/job:worker/replica:0/task:1/cpu:0", kWorker1},
      {"/job:ps/replica:0/task:0/device:CPU:0", kPs0},
  };
  for (const Case& c : cases) {
    GraphDef def = Chain();
    SetDevice(&def, "i2", c.written);
    std::vector<Partition> parts =
        MustPartition(def, {}, {"i2"}, {}, ThreeTasks());
    EXPECT_EQ(DeviceOf(parts, "i2"), c.placed) << c.written;
  }
}

TEST(PlacementTest, UnknownDeviceNamesTheNodeAndTheDeviceAsWritten) {
  GraphDef def = Chain();
  SetDevice(&def, "i1", "/job:ps/task:9");
  absl::Status s = PartitionStatus(def, {"i2"}, ThreeTasks());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            absl::StrCat("Cannot assign a device for operation i1: node i1 "
                         "was explicitly assigned to /job:ps/task:9 but "
                         "available devices are [ ",
                         kPs0, ", ", kWorker0, ", ", kWorker1,
                         " ]. Make sure the device specification refers to "
                         "a valid device."));
  // An unknown job too.
  SetDevice(&def, "i1", "/job:chief");
  s = PartitionStatus(def, {"i2"}, ThreeTasks());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("explicitly assigned to /job:chief but"));
}

TEST(PlacementTest, MalformedDeviceNamesTheNode) {
  GraphDef def = Chain();
  SetDevice(&def, "i1", "/job:ps/tsk:0");
  absl::Status s = PartitionStatus(def, {"i2"}, ThreeTasks());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("node 'i1'"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("invalid device string '/job:ps/tsk:0'"));
}

TEST(PlacementTest, SoftPlacementFallsBackToTheTasksCpu) {
  GraphDef def = Chain();
  SetDevice(&def, "i1", "/job:worker/task:1/device:GPU:0");
  // Without soft placement: the unknown-device error.
  absl::Status s = PartitionStatus(def, {"i2"}, ThreeTasks(/*soft=*/false));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("explicitly assigned to "
                        "/job:worker/task:1/device:GPU:0 but available"));
  // With it: the same task's CPU:0.
  std::vector<Partition> parts =
      MustPartition(def, {}, {"i2"}, {}, ThreeTasks(/*soft=*/true));
  EXPECT_EQ(DeviceOf(parts, "i1"), kWorker1);
  // Another id of an existing type falls back too.
  SetDevice(&def, "i1", "/job:ps/device:CPU:3");
  parts = MustPartition(def, {}, {"i2"}, {}, ThreeTasks(/*soft=*/true));
  EXPECT_EQ(DeviceOf(parts, "i1"), kPs0);
  // Soft placement never invents a task.
  SetDevice(&def, "i1", "/job:worker/task:7/device:GPU:0");
  s = PartitionStatus(def, {"i2"}, ThreeTasks(/*soft=*/true));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("Cannot assign a device for operation i1"));
}

TEST(PlacementTest, UnplacedNodesFollowTheirFirstInputElseTheDefault) {
  GraphDef def = Chain();
  SetDevice(&def, "c", "/job:ps");
  std::vector<Partition> parts =
      MustPartition(def, {}, {"i2", "k"}, {}, ThreeTasks());
  EXPECT_EQ(DeviceOf(parts, "i1"), kPs0);
  EXPECT_EQ(DeviceOf(parts, "i2"), kPs0);
  EXPECT_EQ(DeviceOf(parts, "k"), kWorker0);
  // With another default device.
  PartitionOptions opts = ThreeTasks();
  opts.default_device = kWorker1;
  parts = MustPartition(def, {}, {"k"}, {}, opts);
  EXPECT_EQ(DeviceOf(parts, "k"), kWorker1);
}

TEST(PlacementTest, ResourceConsumersGoToTheProducer) {
  Scope root = Scope::NewRootScope();
  auto v = ops::MakeVariable(root.WithDevice("/job:ps"), "v", 1.0f);
  // Unplaced readers and writers of v, and one whose first data input is
  // on worker:1 but whose resource input is on ps.
  auto on_w1 = ops::Const(root.WithOpName("on_w1").WithDevice("/task:1"), 2.f);
  ops::ReadVariableOp(root.WithOpName("r"), v.handle, DT_FLOAT);
  ops::AssignAddVariableOp(root.WithOpName("add"), v.handle, on_w1);
  GraphDef def;
  ASSERT_TRUE(root.ToGraphDef(&def).ok());
  std::vector<Partition> parts =
      MustPartition(def, {}, {"r"}, {"add"}, ThreeTasks());
  EXPECT_EQ(DeviceOf(parts, "r"), kPs0);
  EXPECT_EQ(DeviceOf(parts, "add"), kPs0);
  EXPECT_EQ(DeviceOf(parts, "on_w1"), kWorker1);
  // No resource ever crosses tasks.
  for (const Partition& p : parts) {
    for (const NodeDef* n : NodesOfOp(p.graph_def, "Send")) {
      EXPECT_NE(n->attr().at("T").type(), DT_RESOURCE) << n->name();
    }
  }
}

TEST(PlacementTest, ResourceGroupIsPlacedTheSameInEverySignature) {
  // v is unplaced, its writer is explicitly on ps:0: the reader-only
  // signature must still find v on ps, where the writer initialised it.
  Scope root = Scope::NewRootScope();
  auto v = ops::VarHandleOp(root.WithOpName("v"), DT_FLOAT, {});
  ops::AssignVariableOp(root.WithOpName("assign").WithDevice("/job:ps"), v,
                        3.0f);
  ops::ReadVariableOp(root.WithOpName("read"), v, DT_FLOAT);
  GraphDef def;
  ASSERT_TRUE(root.ToGraphDef(&def).ok());
  EXPECT_EQ(DeviceOf(MustPartition(def, {}, {"read"}, {}, ThreeTasks()), "v"),
            kPs0);
  EXPECT_EQ(DeviceOf(MustPartition(def, {}, {}, {"assign"}, ThreeTasks()), "v"),
            kPs0);
}

TEST(PlacementTest, ConflictingColocationNamesBothNodesAndDevices) {
  Scope root = Scope::NewRootScope();
  auto v = ops::MakeVariable(root.WithDevice("/job:ps"), "v", 1.0f);
  ops::ReadVariableOp(root.WithOpName("r").WithDevice("/job:worker/task:1"),
                      v.handle, DT_FLOAT);
  GraphDef def;
  ASSERT_TRUE(root.ToGraphDef(&def).ok());
  absl::Status s = PartitionStatus(def, {"r"}, ThreeTasks());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  std::string m(s.message());
  EXPECT_THAT(m, HasSubstr("Cannot colocate nodes 'v' and 'r'"));
  EXPECT_THAT(m, HasSubstr(kPs0));
  EXPECT_THAT(m, HasSubstr(kWorker1));
  EXPECT_THAT(m, HasSubstr("'/job:worker/task:1'"));
}

TEST(PlacementTest, ClassAttrColocates) {
  GraphDef def = Chain();
  SetDevice(&def, "k", "/job:worker/task:1");
  AddClass(&def, "i2", "loc:@k");
  std::vector<Partition> parts =
      MustPartition(def, {}, {"i2"}, {}, ThreeTasks());
  // i2 follows k (which this signature does not even run), not its input.
  EXPECT_EQ(DeviceOf(parts, "i2"), kWorker1);
  EXPECT_EQ(DeviceOf(parts, "i1"), kWorker0);
  EXPECT_EQ(DeviceOf(parts, "k"), "");
  // The attr stays on the node and the partition still validates.
  const NodeDef* i2 = FindNode(FindPart(parts, kWorker1)->graph_def, "i2");
  ASSERT_NE(i2, nullptr);
  EXPECT_EQ(i2->attr().at("_class").list().s(0), "loc:@k");
  EXPECT_NE(MustBuild(FindPart(parts, kWorker1)->graph_def), nullptr);

  // A conflicting explicit device is an error naming both.
  SetDevice(&def, "i2", "/job:ps");
  absl::Status s = PartitionStatus(def, {"i2"}, ThreeTasks());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("Cannot colocate nodes 'i2' and 'k'"));
}

TEST(PlacementTest, ErrorsOfNodesTheSignatureDoesNotNeedAreIgnored) {
  GraphDef def = Chain();
  SetDevice(&def, "k", "/job:nowhere");
  std::vector<Partition> parts =
      MustPartition(def, {}, {"i2"}, {}, ThreeTasks());
  EXPECT_EQ(parts.size(), 1u);
  absl::Status s = PartitionStatus(def, {"k"}, ThreeTasks());
  EXPECT_THAT(std::string(s.message()), HasSubstr("/job:nowhere"));
}

TEST(PlacementTest, BadOptions) {
  PartitionOptions opts = ThreeTasks();
  opts.default_device = "/job:chief/replica:0/task:0/device:CPU:0";
  absl::Status s = PartitionStatus(Chain(), {"i2"}, opts);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("default device"));
  opts = ThreeTasks();
  opts.devices[0].set_name("/job:ps");
  s = PartitionStatus(Chain(), {"i2"}, opts);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a full device name"));
}

// --- Signature errors and feeds -------------------------------------------

TEST(PartitionTest, SignatureErrorsNameTheNode) {
  GraphDef def = ModelGraph();
  PartitionOptions opts = ThreeTasks();
  absl::Status s = PartitionStatus(def, {"nope:0"}, opts);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("unknown node 'nope'"));
  s = PartitionStatus(def, {"h0:3"}, opts, {"x"});
  EXPECT_THAT(std::string(s.message()), HasSubstr("fetch 'h0:3'"));
  s = PartitionStatus(def, {}, opts, {}, {"nope"});
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("target 'nope' refers to unknown node"));
  s = PartitionStatus(def, {"y"}, opts, {"h0"});
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a Placeholder"));
  s = PartitionStatus(def, {"y"}, opts);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("you must feed a value for placeholder 'x'"));
  s = PartitionStatus(def, {"y"}, opts, {"x", "x:0"});
  EXPECT_THAT(std::string(s.message()), HasSubstr("fed twice"));
}

TEST(PartitionTest, FeedsMapToTheirPlaceholdersPartition) {
  Scope root = Scope::NewRootScope();
  auto a =
      ops::Placeholder(root.WithOpName("a").WithDevice("/job:ps"), DT_FLOAT);
  auto b =
      ops::Placeholder(root.WithOpName("b").WithDevice("/task:1"), DT_FLOAT);
  ops::Placeholder(root.WithOpName("unused").WithDevice("/task:1"), DT_FLOAT);
  // A fed placeholder's control inputs are never waited for; the node
  // named there is not in the signature.
  auto gate = ops::NoOp(root.WithOpName("gate").WithDevice("/job:ps"));
  auto c = ops::Placeholder(
      root.WithOpName("c").WithDevice("/task:1").WithControlDependencies(
          {gate}),
      DT_FLOAT);
  auto sum = ops::Add(root.WithOpName("sum"), a, b);
  ops::Add(root.WithOpName("sum2").WithDevice("/task:1"), sum, c);
  GraphDef def;
  ASSERT_TRUE(root.ToGraphDef(&def).ok());
  std::vector<Partition> parts = MustPartition(
      def, {"b:0", "unused", "a", "c"}, {"sum2", "a:0"}, {}, ThreeTasks());
  ASSERT_EQ(parts.size(), 2u);
  const Partition* ps = FindPart(parts, kPs0);
  const Partition* w1 = FindPart(parts, kWorker1);
  // In the client's order and spelling; an unneeded feed is in none.
  EXPECT_THAT(ps->feeds, ElementsAre("a"));
  EXPECT_THAT(w1->feeds, ElementsAre("b:0", "c"));
  EXPECT_THAT(ps->fetches, ElementsAre("a:0"));
  EXPECT_THAT(w1->fetches, ElementsAre("sum2"));
  EXPECT_EQ(DeviceOf(parts, "unused"), "");
  EXPECT_EQ(DeviceOf(parts, "gate"), "");
  EXPECT_THAT(FindNode(w1->graph_def, "c")->input(), IsEmpty());
  for (const Partition& p : parts) EXPECT_NE(MustBuild(p.graph_def), nullptr);
}

TEST(PartitionTest, InsertedNamesNeverCollide) {
  GraphDef def = Chain();
  SetDevice(&def, "c", "/job:ps");
  SetDevice(&def, "i1", "/job:worker/task:0");
  // A graph node already named like the Recv the partitioner would add.
  Scope root = Scope::NewRootScope();
  ops::Const(root.WithOpName("_recv/c_0_from_ps_0"), 5.0f);
  GraphDef extra;
  ASSERT_TRUE(root.ToGraphDef(&extra).ok());
  *def.add_node() = extra.node(0);
  SetDevice(&def, "_recv/c_0_from_ps_0", "/job:worker/task:0");
  std::vector<Partition> parts =
      MustPartition(def, {}, {"i1", "_recv/c_0_from_ps_0"}, {}, ThreeTasks());
  const GraphDef& w0 = FindPart(parts, kWorker0)->graph_def;
  EXPECT_THAT(FindNode(w0, "i1")->input(),
              ElementsAre("_recv/c_0_from_ps_0_1"));
  EXPECT_EQ(FindNode(w0, "_recv/c_0_from_ps_0")->op(), "Const");
  EXPECT_NE(MustBuild(w0), nullptr);
}

// --- Running the partitions ----------------------------------------------

// What a set of workers does with one step: every partition on its own
// Device (the task's), with its own Executor, all sharing one rendezvous;
// each executor also runs its partition's Sends (RegisterGraphRequest's
// rule).
class FakeCluster {
 public:
  FakeCluster() {
    for (const auto& [name, inc] : Incarnations()) {
      devices_[name] = std::make_unique<Device>(name, 2, inc);
    }
  }

  absl::Status Run(const GraphDef& def,
                   const std::vector<std::pair<std::string, Tensor>>& feeds,
                   const std::vector<std::string>& fetches,
                   const std::vector<std::string>& targets,
                   std::vector<Tensor>* out) {
    COHORT_ASSIGN_OR_RETURN(auto graph,
                            Graph::FromGraphDef(def, StandardOpRegistry()));
    std::vector<std::string> feed_names;
    for (const auto& f : feeds) feed_names.push_back(f.first);
    COHORT_ASSIGN_OR_RETURN(
        std::vector<Partition> parts,
        PartitionGraph(*graph, feed_names, fetches, targets, ThreeTasks()));
    LocalRendezvous rendezvous;
    const int64_t step_id = ++step_;
    std::vector<absl::Status> status(parts.size());
    std::vector<std::vector<Tensor>> fetched(parts.size());
    std::vector<std::unique_ptr<Graph>> graphs(parts.size());
    std::vector<std::unique_ptr<Executor>> executors(parts.size());
    std::vector<std::vector<Tensor>> part_feeds(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      const Partition& p = parts[i];
      COHORT_ASSIGN_OR_RETURN(
          graphs[i], Graph::FromGraphDef(p.graph_def, StandardOpRegistry()));
      std::vector<std::string> run_targets = p.targets;
      for (const NodeDef& n : p.graph_def.node()) {
        if (n.op() == "Send") run_targets.push_back(n.name());
      }
      Executor::Options opts;
      opts.device = devices_.at(p.device).get();
      COHORT_ASSIGN_OR_RETURN(
          executors[i],
          Executor::Create(*graphs[i], p.feeds, p.fetches, run_targets, opts));
      for (const std::string& f : p.feeds) {
        for (const auto& [name, value] : feeds) {
          if (name == f) part_feeds[i].push_back(value);
        }
      }
    }
    // In parallel: a partition's Recv waits for another's Send.
    std::vector<std::thread> threads;
    for (size_t i = 0; i < parts.size(); ++i) {
      threads.emplace_back([&, i] {
        Executor::RunArgs args;
        args.step_id = step_id;
        args.feeds = part_feeds[i];
        args.rendezvous = &rendezvous;
        status[i] = executors[i]->Run(args, &fetched[i]);
      });
    }
    for (auto& t : threads) t.join();
    for (const absl::Status& s : status) COHORT_RETURN_IF_ERROR(s);
    // Fetches back in the client's order.
    out->clear();
    for (const std::string& f : fetches) {
      for (size_t i = 0; i < parts.size(); ++i) {
        for (size_t j = 0; j < parts[i].fetches.size(); ++j) {
          if (parts[i].fetches[j] == f) out->push_back(fetched[i][j]);
        }
      }
    }
    return absl::OkStatus();
  }

  Device* device(const std::string& name) { return devices_.at(name).get(); }

 private:
  std::map<std::string, std::unique_ptr<Device>> devices_;
  int64_t step_ = 0;
};

TEST(PartitionEndToEndTest, PartitionedStepsMatchLocalSession) {
  GraphDef def = ModelGraph();
  auto local = LocalSession::Create(def);
  ASSERT_TRUE(local.ok()) << local.status();
  FakeCluster cluster;
  Tensor x =
      *Tensor::FromVector<float>({1, -1, 0.5f, 2, 3, 0}, TensorShape({3, 2}));

  // Step 1: initialise (ps and worker:0).
  std::vector<Tensor> want, got;
  ASSERT_TRUE((*local)->Run({}, {}, {"init"}, nullptr).ok());
  absl::Status s = cluster.Run(def, {}, {}, {"init"}, &got);
  ASSERT_TRUE(s.ok()) << s;

  // Step 2: all three tasks, updating b on ps.
  ASSERT_TRUE(
      (*local)->Run({{"x", x}}, {"y:0", "z", "h1:0"}, {"done"}, &want).ok());
  s = cluster.Run(def, {{"x", x}}, {"y:0", "z", "h1:0"}, {"done"}, &got);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectTensorNear(got[i], want[i], 1e-6);
  }

  // Step 3: the variable update happened on ps's device, as locally.
  ASSERT_TRUE((*local)->Run({}, {"b/read:0"}, {}, &want).ok());
  s = cluster.Run(def, {}, {"b/read:0"}, {}, &got);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(got.size(), 1u);
  ExpectTensorNear(got[0], want[0], 1e-6);
  // b changed (the update ran), and it lives only in ps's ResourceMgr.
  EXPECT_FALSE(got[0].Equals(Tensor::Vec<float>({0.5f, -0.5f})));
  ASSERT_TRUE((*local)->Run({}, {"w/read:0"}, {}, &want).ok());
  s = cluster.Run(def, {}, {"w/read:0"}, {}, &got);
  ASSERT_TRUE(s.ok()) << s;
  ExpectTensorEqual(got[0], want[0]);
}

}  // namespace
}  // namespace cohort::runtime
