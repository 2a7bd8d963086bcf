// Graph: a validated, immutable-once-built view of a GraphDef that the
// executor and the distributed runtime work on.
//
// Building (FromGraphDef / Extend) checks, naming the node in every error
// (InvalidArgument):
//  - names are non-empty and unique;
//  - the op is registered ("node 'x': unknown op 'Foo'");
//  - attrs are valid for the op (defaults are added);
//  - every input refers to an existing node and output index, data inputs
//    precede control inputs, and each input's dtype matches what the op
//    expects ("node 'y' (op Add): input 1 ('x:0') is int32, expected float");
//  - there is no cycle ("graph has a cycle: a -> b -> a").
// Extend adds nodes that may refer to existing ones; on error the graph is
// unchanged.
//
// Nodes are addressed by dense ids (0..num_nodes()-1) in insertion order;
// ids and Node pointers stay valid across Extend.
//
// Thread safety: const methods may run concurrently; Extend must not run
// concurrently with anything else (LocalSession serialises it).
#ifndef COHORT_GRAPH_GRAPH_H_
#define COHORT_GRAPH_GRAPH_H_

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/op_registry.h"

namespace cohort {

class Graph {
 public:
  struct Edge {
    int node = -1;  // Producer (for inputs) or consumer (for outputs).
    int index = 0;  // Producer's output index / consumer's input index.
  };
  struct Node {
    int id = -1;
    NodeDef def;  // With default attrs added.
    const OpDef* op_def = nullptr;
    std::vector<DataType> input_types;
    std::vector<DataType> output_types;
    std::vector<Edge> inputs;          // Data inputs, in order.
    std::vector<int> control_inputs;   // Producers of ^inputs.
    std::vector<Edge> data_outputs;    // Consumers: (consumer, input index).
    std::vector<int> control_outputs;  // Consumers of ^this.
    const std::string& name() const { return def.name(); }
    const std::string& op() const { return def.op(); }
  };

  explicit Graph(const OpRegistry* registry) : registry_(registry) {}
  static absl::StatusOr<std::unique_ptr<Graph>> FromGraphDef(
      const GraphDef& def, const OpRegistry* registry);
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  absl::Status Extend(const GraphDef& def);

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const Node& node(int id) const { return nodes_[id]; }
  // nullptr when absent.
  const Node* FindNode(absl::string_view name) const;
  const OpRegistry* op_registry() const { return registry_; }
  // The graph as a GraphDef (nodes in id order, defaults included).
  void ToGraphDef(GraphDef* out) const;

  // Parses "node", "node:3" (data) or "^node" (control). InvalidArgument on
  // a malformed string.
  struct TensorId {
    std::string node;
    int index = 0;
    bool control = false;
  };
  static absl::StatusOr<TensorId> ParseTensorName(absl::string_view name);

  // The Placeholder that a feed ("x" or "x:0") names. InvalidArgument naming
  // the feed for an unknown node, a node that is not a Placeholder, or an
  // output index other than 0.
  absl::StatusOr<const Node*> ResolveFeed(absl::string_view feed) const;

  // The output a fetch ("y" or "y:1") names. InvalidArgument naming the
  // fetch for an unknown node, a control name ("^y"), or an output index the
  // node does not have.
  absl::StatusOr<TensorId> ResolveFetch(absl::string_view fetch) const;

  // The node a target ("train" or "^train") names. InvalidArgument naming
  // the target for an unknown node.
  absl::StatusOr<const Node*> ResolveTarget(absl::string_view target) const;

 private:
  const OpRegistry* registry_;
  std::deque<Node> nodes_;
  absl::flat_hash_map<std::string, int> by_name_;
};

}  // namespace cohort

#endif  // COHORT_GRAPH_GRAPH_H_
