// Fuzzes kernel inputs from GraphDefs (issue 25): builds a small graph from
// the input and runs it through a LocalSession with small memory budgets
// (16 MiB per step, 64 MiB per session), as a token holder could on a
// server.
//
// Input: byte 0 picks the form of the rest:
//   even  one op: byte 1 picks a registered op (ops that wait for peers,
//         Send/Recv and the collectives, are left out), then each of its
//         attrs takes a value from the bytes (types among float, double,
//         int32, int64, bool; ints 0..4), and each input is a Placeholder
//         fed a tensor decoded from the bytes (rank 0..3, dims 0..4, raw
//         element bytes, so int32 "shape" inputs take any value);
//   odd   a binary GraphDef (at most 32 nodes, none of the waiting ops),
//         every output of every node fetched.
//
// Checked: no crash, trap, sanitizer report or absurd allocation
// (libFuzzer's malloc limit, which the budgets keep kernels far below);
// a failed step's status is never Internal or Unknown (a kernel that forgot
// an output, an unexpected exception); the session runs a trivial step
// after every failure.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cohort/base/logging.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/graph.h"
#include "cohort/graph/local_session.h"
#include "cohort/graph/op_registry.h"
#include "cohort/graph/standard_registries.h"
#include "cohort/graph/tensor.h"
#include "google/protobuf/stubs/logging.h"
#include "tensor_known_bugs.h"

namespace {

using cohort::DataType;
using cohort::GraphDef;
using cohort::NodeDef;
using cohort::Tensor;

class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Next() { return pos_ < size_ ? data_[pos_++] : 0; }
  void Raw(void* out, size_t n) {
    auto* o = static_cast<uint8_t*>(out);
    for (size_t i = 0; i < n; ++i) o[i] = Next();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

constexpr DataType kTypes[] = {cohort::DT_FLOAT, cohort::DT_DOUBLE,
                               cohort::DT_INT32, cohort::DT_INT64,
                               cohort::DT_BOOL};

// Ops that wait for a peer or another task: a step with one would sit until
// its timeout.
bool Waits(const std::string& op) {
  return op == "Send" || op == "Recv" || absl::StartsWith(op, "Collective") ||
         op == "WaitForPeer";
}

const std::vector<std::string>& RunnableOps() {
  static const auto* ops = [] {
    auto* v = new std::vector<std::string>;
    for (const std::string& op : cohort::StandardOpRegistry()->ListOps()) {
      if (!Waits(op)) v->push_back(op);
    }
    return v;
  }();
  return *ops;
}

Tensor DecodeTensor(DataType dtype, Bytes* in) {
  const int rank = in->Next() % 4;
  std::vector<int64_t> dims;
  for (int i = 0; i < rank; ++i) dims.push_back(in->Next() % 5);
  Tensor t(dtype, cohort::TensorShape(absl::MakeConstSpan(dims)));
  if (dtype == cohort::DT_BOOL) {
    for (bool& b : t.span<bool>()) b = (in->Next() & 1) != 0;
  } else if (t.NumElements() > 0) {
    in->Raw(t.raw_data(), t.TotalBytes());
  }
  return t;
}

// Sets the op's attrs from the bytes; false when an attr kind is not
// covered (the input is then skipped).
bool SetAttrs(const cohort::OpDef& op, Bytes* in, NodeDef* node) {
  for (const auto& a : op.attrs) {
    cohort::AttrValue& v = (*node->mutable_attr())[a.name];
    if (a.type == "type") {
      DataType t = kTypes[in->Next() % 5];
      if (!a.allowed_types.empty()) {
        t = a.allowed_types[in->Next() % a.allowed_types.size()];
      }
      v.set_type(t);
    } else if (a.type == "int") {
      v.set_i(in->Next() % 5);
    } else if (a.type == "bool") {
      v.set_b((in->Next() & 1) != 0);
    } else if (a.type == "float") {
      v.set_f(static_cast<float>(in->Next()) / 16.0f);
    } else if (a.type == "string") {
      v.set_s(absl::StrCat("s", in->Next() % 4));
    } else if (a.type == "shape") {
      v.mutable_shape()->set_unknown_rank(true);
    } else if (a.type == "tensor") {
      const cohort::AttrValue* dtype_attr = nullptr;
      auto it = node->attr().find("dtype");
      if (it != node->attr().end()) dtype_attr = &it->second;
      DataType t =
          dtype_attr != nullptr ? dtype_attr->type() : kTypes[in->Next() % 5];
      DecodeTensor(t, in).AsProto(v.mutable_tensor());
    } else if (a.has_default) {
      v = a.default_value;
    } else {
      return false;
    }
  }
  return true;
}

// One op with placeholder inputs; `feeds` gets their values.
bool BuildOneOp(Bytes* in, GraphDef* graph,
                std::vector<std::pair<std::string, Tensor>>* feeds,
                std::vector<std::string>* fetches) {
  const auto& ops = RunnableOps();
  const std::string& name = ops[in->Next() % ops.size()];
  const cohort::OpDef* op = cohort::StandardOpRegistry()->LookUp(name);
  if (op == nullptr) return false;
  NodeDef node;
  node.set_name("op");
  node.set_op(name);
  // "dtype" first, so a "tensor" attr (Const's value) can match it.
  if (const auto* d = op->FindAttr("dtype");
      d != nullptr && d->type == "type") {
    (*node.mutable_attr())["dtype"].set_type(kTypes[in->Next() % 5]);
  }
  if (!SetAttrs(*op, in, &node)) return false;
  std::vector<DataType> in_types, out_types;
  if (!cohort::InOutTypesForNode(node, *op, &in_types, &out_types).ok()) {
    return false;
  }
  if (in_types.size() > 8) return false;
  for (size_t i = 0; i < in_types.size(); ++i) {
    const std::string input = absl::StrCat("in", i);
    NodeDef* p = graph->add_node();
    p->set_name(input);
    p->set_op("Placeholder");
    (*p->mutable_attr())["dtype"].set_type(in_types[i]);
    node.add_input(input);
    if (in_types[i] == cohort::DT_RESOURCE ||
        in_types[i] == cohort::DT_STRING) {
      return false;  // Not decodable from bytes.
    }
    feeds->emplace_back(input, DecodeTensor(in_types[i], in));
  }
  *graph->add_node() = node;
  for (size_t i = 0; i < out_types.size(); ++i) {
    fetches->push_back(absl::StrCat("op:", i));
  }
  if (out_types.empty()) fetches->clear();
  return true;
}

// Number attrs (the N of "N * T") beyond this are a known bug of
// validation (graph_def_fuzzer.cc) and skipped.
constexpr int64_t kMaxNumberAttr = 1024;

bool ParseGraph(const uint8_t* data, size_t size, GraphDef* graph,
                std::vector<std::string>* fetches) {
  if (!graph->ParseFromArray(data, static_cast<int>(size))) return false;
  if (graph->node_size() > 32) return false;
  const cohort::OpRegistry* registry = cohort::StandardOpRegistry();
  for (const NodeDef& node : graph->node()) {
    if (Waits(node.op()) || node.op() == "Placeholder") return false;
    for (const auto& [name, value] : node.attr()) {
      if (value.has_tensor() &&
          cohort::fuzz::TensorDeclaresTooMuch(value.tensor())) {
        return false;
      }
    }
    const cohort::OpDef* op = registry->LookUp(node.op());
    if (op == nullptr) return false;
    for (const auto* args : {&op->inputs, &op->outputs}) {
      for (const auto& arg : *args) {
        if (arg.number_attr.empty()) continue;
        auto it = node.attr().find(arg.number_attr);
        if (it == node.attr().end()) continue;
        if (it->second.i() < 0 || it->second.i() > kMaxNumberAttr) return false;
      }
    }
  }
  // Fetches from the validated graph (output types need a valid node).
  auto validated = cohort::Graph::FromGraphDef(*graph, registry);
  if (!validated.ok()) return false;
  for (int id = 0; id < (*validated)->num_nodes(); ++id) {
    const cohort::Graph::Node& n = (*validated)->node(id);
    for (size_t i = 0; i < n.output_types.size() && i < 8; ++i) {
      fetches->push_back(absl::StrCat(n.name(), ":", i));
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  cohort::SetMinLogLevel(cohort::LogLevel::kError);
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  GraphDef graph;
  std::vector<std::pair<std::string, Tensor>> feeds;
  std::vector<std::string> fetches;
  std::vector<std::string> targets;
  if (data[0] % 2 == 0) {
    Bytes in(data + 1, size - 1);
    if (!BuildOneOp(&in, &graph, &feeds, &fetches)) return 0;
    if (fetches.empty()) targets.push_back("op");
  } else {
    if (!ParseGraph(data + 1, size - 1, &graph, &fetches)) return 0;
    if (fetches.empty()) return 0;
  }
  cohort::SessionOptions options;
  options.num_threads = 1;
  options.memory.per_step_bytes = int64_t{16} << 20;
  options.memory.per_server_bytes = int64_t{64} << 20;
  // A hang guard only: no runnable op waits.
  options.default_timeout = absl::Seconds(10);
  auto session = cohort::LocalSession::Create(graph, options);
  if (!session.ok()) {
    // The two ways a graph is refused: InvalidArgument for a graph that is
    // wrong, Unimplemented for an attr value TensorFlow allows and cohort
    // does not (OpDefBuilder::RequireDefault, e.g. an int64 Tidx).
    const absl::StatusCode code = session.status().code();
    COHORT_CHECK(code == absl::StatusCode::kInvalidArgument ||
                 code == absl::StatusCode::kUnimplemented)
        << session.status();
    return 0;
  }
  std::vector<Tensor> out;
  absl::Status s = (*session)->Run(feeds, fetches, targets, &out);
  if (s.ok()) {
    COHORT_CHECK(out.size() == fetches.size());
    for (const Tensor& t : out) COHORT_CHECK(t.IsInitialized());
    return 0;
  }
  COHORT_CHECK(s.code() != absl::StatusCode::kInternal &&
               s.code() != absl::StatusCode::kUnknown &&
               s.code() != absl::StatusCode::kDeadlineExceeded)
      << s;
  // The session is still usable after any failure.
  COHORT_CHECK((*session)->Reset().ok());
  return 0;
}
