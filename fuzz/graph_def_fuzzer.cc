// Fuzzes graph files: GraphDef bytes read as binary or text
// (src/cohort/graph/graph_io.h) and the Graph built and validated from them
// against the standard op registry (src/cohort/graph/graph.h). Nothing is
// executed.
//
// Input: byte 0 picks how the rest is read:
//   0  binary proto (GraphDef::ParseFromArray, what ReadGraphDef tries first);
//   1  text proto (GraphDefFromText);
//   2  ReadGraphDef of a file named "graph.pb" (binary, else text);
//   3  ReadGraphDef of a file named "graph.pbtxt" (text only).
// Files live at reused paths in a private directory under /dev/shm (or
// /tmp).
//
// Checked: no crash, no absurd allocation (libFuzzer's malloc limit); read
// and build errors are InvalidArgument; a graph that builds rebuilds from
// its own ToGraphDef() into the same nodes; an Extend that fails leaves the
// graph unchanged.
#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/graph.h"
#include "cohort/graph/graph_io.h"
#include "cohort/graph/op_registry.h"
#include "cohort/graph/standard_registries.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/stubs/logging.h"
#include "tensor_known_bugs.h"

namespace {

std::string& Dir() {
  static std::string* const dir = new std::string;
  return *dir;
}

void RemoveDir() {
  for (const char* name : {"/graph.pb", "/graph.pbtxt"}) {
    unlink(absl::StrCat(Dir(), name).c_str());
  }
  rmdir(Dir().c_str());
}

void WriteFile(const std::string& path, const uint8_t* data, size_t size) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  COHORT_CHECK(fd >= 0) << "cannot create " << path;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    COHORT_CHECK(n > 0) << "cannot write " << path;
    done += static_cast<size_t>(n);
  }
  close(fd);
}

// Known project bugs (fuzz/crashes-found/graph_def/README.md), skipped
// unless COHORT_FUZZ_KNOWN_BUGS is set:
//  1. ValidateNodeDef truncates a number attr (the N of "N * T") to int
//     when it counts the expected inputs, so N = 2^32 + 1 passes with one
//     input and InOutTypesForNode then expands N types (16 GiB). Nodes
//     whose number attrs lie outside [0, kMaxNumberAttr] are skipped.
//  2. A tensor attr of the wrong type is printed for the error message
//     through Tensor::FromProto (crashes-found/checkpoint/README.md): a
//     huge declared shape overflows the buffer during validation. Graphs
//     with such a tensor in any attr are skipped.
constexpr int64_t kMaxNumberAttr = int64_t{1} << 20;

bool HitsKnownBug(const cohort::GraphDef& def,
                  const cohort::OpRegistry* registry) {
  for (const cohort::NodeDef& node : def.node()) {
    for (const auto& [name, value] : node.attr()) {
      if (value.has_tensor() &&
          cohort::fuzz::TensorDeclaresTooMuch(value.tensor())) {
        return true;
      }
      for (const cohort::TensorProto& t : value.list().tensor()) {
        if (cohort::fuzz::TensorDeclaresTooMuch(t)) return true;
      }
    }
    const cohort::OpDef* op = registry->LookUp(node.op());
    if (op == nullptr) continue;
    for (const auto* args : {&op->inputs, &op->outputs}) {
      for (const auto& arg : *args) {
        if (arg.number_attr.empty()) continue;
        auto it = node.attr().find(arg.number_attr);
        if (it == node.attr().end()) continue;
        const int64_t n = it->second.i();
        if (n < 0 || n > kMaxNumberAttr) return true;
      }
    }
  }
  return false;
}

// Bytes that compare equal exactly when the messages do (attr maps in a
// fixed order, NaNs by their bits).
std::string DeterministicBytes(const google::protobuf::Message& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // tmpfs when there is one: a file is written for every input.
  char shm_pattern[] = "/dev/shm/fuzz_graph_def.XXXXXX";
  char tmp_pattern[] = "/tmp/fuzz_graph_def.XXXXXX";
  const char* dir = mkdtemp(shm_pattern);
  if (dir == nullptr) dir = mkdtemp(tmp_pattern);
  COHORT_CHECK(dir != nullptr) << "mkdtemp failed";
  Dir() = dir;
  atexit(RemoveDir);
  // Keeps stderr for libFuzzer's own output (protobuf logs every string
  // field that is not UTF-8).
  cohort::SetMinLogLevel(cohort::LogLevel::kError);
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 4;
  ++data;
  --size;

  cohort::GraphDef def;
  switch (mode) {
    case 0:
      if (!def.ParseFromArray(data, static_cast<int>(size))) return 0;
      break;
    case 1: {
      auto parsed = cohort::GraphDefFromText(
          std::string(reinterpret_cast<const char*>(data), size));
      if (!parsed.ok()) {
        COHORT_CHECK(parsed.status().code() ==
                     absl::StatusCode::kInvalidArgument)
            << parsed.status();
        return 0;
      }
      def = *std::move(parsed);
      break;
    }
    default: {
      const std::string path =
          absl::StrCat(Dir(), mode == 2 ? "/graph.pb" : "/graph.pbtxt");
      WriteFile(path, data, size);
      auto read = cohort::ReadGraphDef(path);
      if (!read.ok()) {
        COHORT_CHECK(read.status().code() == absl::StatusCode::kInvalidArgument)
            << read.status();
        return 0;
      }
      def = *std::move(read);
      break;
    }
  }

  const cohort::OpRegistry* registry = cohort::StandardOpRegistry();
  if (cohort::fuzz::SkipKnownBugs() && HitsKnownBug(def, registry)) return 0;
  auto graph = cohort::Graph::FromGraphDef(def, registry);
  if (!graph.ok()) {
    // InvalidArgument for a wrong graph; Unimplemented for an attr value
    // TensorFlow allows and cohort does not (OpDefBuilder::RequireDefault).
    const absl::StatusCode code = graph.status().code();
    COHORT_CHECK(code == absl::StatusCode::kInvalidArgument ||
                 code == absl::StatusCode::kUnimplemented)
        << graph.status();
    return 0;
  }
  COHORT_CHECK((*graph)->num_nodes() == def.node_size());

  // A built graph, written out, builds again into the same nodes.
  cohort::GraphDef written;
  (*graph)->ToGraphDef(&written);
  auto rebuilt = cohort::Graph::FromGraphDef(written, registry);
  COHORT_CHECK(rebuilt.ok()) << rebuilt.status();
  cohort::GraphDef rewritten;
  (*rebuilt)->ToGraphDef(&rewritten);
  COHORT_CHECK(DeterministicBytes(written) == DeterministicBytes(rewritten));
  for (int id = 0; id < (*graph)->num_nodes(); ++id) {
    const cohort::Graph::Node& a = (*graph)->node(id);
    const cohort::Graph::Node& b = (*rebuilt)->node(id);
    COHORT_CHECK(a.inputs.size() == b.inputs.size() &&
                 a.control_inputs == b.control_inputs &&
                 a.output_types == b.output_types)
        << "node '" << a.name() << "' changed on a rebuild";
  }

  // Adding the same nodes again fails (names are taken) and changes nothing.
  if (def.node_size() > 0) {
    absl::Status extended = (*graph)->Extend(def);
    COHORT_CHECK(extended.code() == absl::StatusCode::kInvalidArgument)
        << extended;
    COHORT_CHECK((*graph)->num_nodes() == def.node_size());
  }
  return 0;
}
