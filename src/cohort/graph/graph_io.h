// Reading and writing GraphDefs as binary or text protos.
//
// Text is protobuf's text format (what TensorFlow's .pbtxt files hold).
// ReadGraphDef takes either: files ending in ".pbtxt" or ".txt" are parsed
// as text, others as binary first and as text if that fails. Errors:
// NotFound (no file), InvalidArgument naming the file and, for text, the
// line and column; InvalidArgument naming the file for one that is not a
// regular file (/dev/zero would be read for ever, a FIFO would hang) or is
// over `max_bytes` (checked before reading, and no more than that is
// read). Writes are atomic (see checkpoint.h).
//
// GraphDefs written by TensorFlow read as they are: `versions { ... }` and
// an empty `library {}` are kept (graph.proto), internal node attrs
// ("_class", "_output_shapes") pass validation, and every registered op
// declares TensorFlow's full attr set with its defaults (op_registry.h), so
// a node carrying all of them (Sum's Tidx, Fill's index_type, ...) builds;
// tf_graph_def_test.cc trains such a graph. A library with functions is
// InvalidArgument: cohort cannot express functions.
//
// Thread safety: thread-safe functions; block on file I/O.
#ifndef COHORT_GRAPH_GRAPH_IO_H_
#define COHORT_GRAPH_GRAPH_IO_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/types.h"

namespace cohort {

enum class GraphFormat { kBinary, kText };

absl::Status WriteGraphDef(const std::string& path, const GraphDef& graph,
                           GraphFormat format = GraphFormat::kBinary);
// Protobuf cannot parse a message of 2 GiB or more.
inline constexpr int64_t kMaxGraphFileBytes = int64_t{1} << 30;
absl::StatusOr<GraphDef> ReadGraphDef(const std::string& path,
                                      int64_t max_bytes = kMaxGraphFileBytes);

std::string GraphDefToText(const GraphDef& graph);
// InvalidArgument with the parser's line:column message.
absl::StatusOr<GraphDef> GraphDefFromText(const std::string& text);

// The dtype of the Placeholder that a feed named `feed` ("x" or "x:0")
// fills. InvalidArgument naming the feed when the graph has no such node or
// the node is not a Placeholder.
absl::StatusOr<DataType> FeedDataType(const GraphDef& graph,
                                      absl::string_view feed);

}  // namespace cohort

#endif  // COHORT_GRAPH_GRAPH_IO_H_
