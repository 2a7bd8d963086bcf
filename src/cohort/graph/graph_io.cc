#include "cohort/graph/graph_io.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cohort/graph/checkpoint.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace cohort {
namespace {

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first.empty())
      first = absl::StrCat("line ", line + 1, ":", column + 1, ": ", message);
  }
  std::string first;
};

}  // namespace

std::string GraphDefToText(const GraphDef& graph) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(graph, &out);
  return out;
}

absl::StatusOr<GraphDef> GraphDefFromText(const std::string& text) {
  GraphDef g;
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &g)) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a text GraphDef: ", errors.first));
  }
  return g;
}

absl::Status WriteGraphDef(const std::string& path, const GraphDef& graph,
                           GraphFormat format) {
  std::string data;
  if (format == GraphFormat::kText) {
    data = GraphDefToText(graph);
  } else if (!graph.SerializeToString(&data)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot serialize the GraphDef for '", path, "'"));
  }
  return WriteFileAtomically(path, data);
}

absl::StatusOr<GraphDef> ReadGraphDef(const std::string& path,
                                      int64_t max_bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("graph file '", path, "' does not exist"));
  }
  // Checked before reading: a device or FIFO would be read for ever, and a
  // huge file would be held whole.
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph file '", path,
                     "' is not a regular file; give a .pb or .pbtxt "
                     "file"));
  }
  auto too_large = [&](int64_t bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph file '", path, "' is ", bytes,
        " bytes or more, over the limit of ", max_bytes, " bytes"));
  };
  if (st.st_size > max_bytes) return too_large(st.st_size);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("graph file '", path, "' cannot be opened"));
  // No more than stat said (plus one byte to notice a file that grew): a
  // file that keeps growing is not read for ever.
  std::string data(static_cast<size_t>(st.st_size) + 1, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<int64_t>(data.size()) > st.st_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph file '", path,
                     "' grew while it was read; give a finished file"));
  }
  bool text = absl::EndsWith(path, ".pbtxt") || absl::EndsWith(path, ".txt");
  if (!text) {
    GraphDef g;
    if (g.ParseFromString(data)) return g;
  }
  auto g = GraphDefFromText(data);
  if (!g.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph file '", path, "' is neither a binary nor a text GraphDef (",
        g.status().message(), ")"));
  }
  return g;
}

absl::StatusOr<DataType> FeedDataType(const GraphDef& graph,
                                      absl::string_view feed) {
  const absl::string_view node_name = feed.substr(0, feed.find(':'));
  for (const NodeDef& node : graph.node()) {
    if (node.name() != node_name) continue;
    auto it = node.attr().find("dtype");
    if (node.op() != "Placeholder" || it == node.attr().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("feed ", feed, ": node '", node_name, "' is a ",
                       node.op(), ", not a Placeholder"));
    }
    return it->second.type();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("feed ", feed, ": the graph has no node '", node_name, "'"));
}

}  // namespace cohort
