#include "cohort/graph/graph.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "cohort/base/status.h"

namespace cohort {

absl::StatusOr<Graph::TensorId> Graph::ParseTensorName(absl::string_view name) {
  TensorId id;
  if (absl::ConsumePrefix(&name, "^")) id.control = true;
  size_t colon = name.rfind(':');
  if (colon != absl::string_view::npos && !id.control) {
    int index;
    if (!absl::SimpleAtoi(name.substr(colon + 1), &index) || index < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed tensor name '", name,
                       "'; expected 'node' or 'node:index'"));
    }
    id.index = index;
    name = name.substr(0, colon);
  }
  if (name.empty()) {
    return absl::InvalidArgumentError("empty node name in a tensor name");
  }
  id.node = std::string(name);
  return id;
}

absl::StatusOr<std::unique_ptr<Graph>> Graph::FromGraphDef(
    const GraphDef& def, const OpRegistry* registry) {
  auto g = std::make_unique<Graph>(registry);
  COHORT_RETURN_IF_ERROR(g->Extend(def));
  return g;
}

const Graph::Node* Graph::FindNode(absl::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &nodes_[it->second];
}

void Graph::ToGraphDef(GraphDef* out) const {
  out->Clear();
  out->set_version(1);
  for (const Node& n : nodes_) *out->add_node() = n.def;
}

absl::Status Graph::Extend(const GraphDef& def) {
  const int base = num_nodes();
  // Build the new nodes aside; commit only when everything checks out.
  std::vector<Node> added(def.node_size());
  absl::flat_hash_map<std::string, int> new_names;
  for (int i = 0; i < def.node_size(); ++i) {
    Node& n = added[i];
    n.id = base + i;
    n.def = def.node(i);
    if (n.def.name().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node #", i, " (op ", n.def.op(), ") has no name"));
    }
    if (by_name_.contains(n.def.name()) ||
        !new_names.emplace(n.def.name(), n.id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", n.def.name(),
                       "' is defined twice; node names must be unique"));
    }
    COHORT_ASSIGN_OR_RETURN(n.op_def, registry_->LookUpForNode(n.def));
    AddDefaultAttrs(*n.op_def, &n.def);
    COHORT_RETURN_IF_ERROR(ValidateNodeDef(n.def, *n.op_def));
    COHORT_RETURN_IF_ERROR(
        InOutTypesForNode(n.def, *n.op_def, &n.input_types, &n.output_types));
  }
  auto lookup = [&](const std::string& name) -> const Node* {
    auto it = by_name_.find(name);
    if (it != by_name_.end()) return &nodes_[it->second];
    auto jt = new_names.find(name);
    if (jt != new_names.end()) return &added[jt->second - base];
    return nullptr;
  };
  for (Node& n : added) {
    for (const std::string& in : n.def.input()) {
      auto id_or = ParseTensorName(in);
      if (!id_or.ok()) return AttachNodeName(id_or.status(), n.def);
      const Node* src = lookup(id_or->node);
      if (src == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(NodeDebugName(n.def), ": input '", in,
                         "' refers to unknown node '", id_or->node, "'"));
      }
      if (id_or->control) {
        n.control_inputs.push_back(src->id);
        continue;
      }
      if (id_or->index >= static_cast<int>(src->output_types.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            NodeDebugName(n.def), ": input '", in, "' refers to output ",
            id_or->index, " of node '", src->name(), "', which has ",
            src->output_types.size(), " outputs"));
      }
      int slot = static_cast<int>(n.inputs.size());
      DataType have = src->output_types[id_or->index];
      DataType want = n.input_types[slot];
      if (have != want) {
        return absl::InvalidArgumentError(absl::StrCat(
            NodeDebugName(n.def), ": input ", slot, " ('", in, "') is ",
            DataTypeName(have), ", expected ", DataTypeName(want)));
      }
      n.inputs.push_back(Edge{src->id, id_or->index});
    }
  }
  // Cycle check over the new nodes (old nodes cannot depend on new ones).
  {
    std::vector<int> pending(added.size(), 0);
    std::vector<std::vector<int>> consumers(added.size());
    for (const Node& n : added) {
      auto dep = [&](int src) {
        if (src >= base) {
          ++pending[n.id - base];
          consumers[src - base].push_back(n.id - base);
        }
      };
      for (const Edge& e : n.inputs) dep(e.node);
      for (int c : n.control_inputs) dep(c);
    }
    std::vector<int> ready;
    for (size_t i = 0; i < added.size(); ++i) {
      if (pending[i] == 0) ready.push_back(static_cast<int>(i));
    }
    size_t visited = 0;
    while (!ready.empty()) {
      int i = ready.back();
      ready.pop_back();
      ++visited;
      for (int c : consumers[i]) {
        if (--pending[c] == 0) ready.push_back(c);
      }
    }
    if (visited != added.size()) {
      // Walk from a node on a cycle to report it.
      int start = -1;
      for (size_t i = 0; i < added.size(); ++i) {
        if (pending[i] > 0) {
          start = static_cast<int>(i);
          break;
        }
      }
      std::vector<std::string> path;
      std::vector<int> seen_at(added.size(), -1);
      int cur = start;
      while (seen_at[cur] < 0) {
        seen_at[cur] = static_cast<int>(path.size());
        path.push_back(added[cur].name());
        int next = -1;
        for (const Edge& e : added[cur].inputs) {
          if (e.node >= base && pending[e.node - base] > 0)
            next = e.node - base;
        }
        for (int c : added[cur].control_inputs) {
          if (next < 0 && c >= base && pending[c - base] > 0) next = c - base;
        }
        if (next < 0) break;
        cur = next;
      }
      std::vector<std::string> cycle(path.begin() + std::max(0, seen_at[cur]),
                                     path.end());
      std::reverse(cycle.begin(), cycle.end());
      cycle.push_back(cycle.front());
      return absl::InvalidArgumentError(absl::StrCat(
          "graph has a cycle through node '", added[cur].name(), "': ",
          absl::StrJoin(cycle, " -> "), "; a dataflow graph must be acyclic"));
    }
  }
  // Commit.
  for (Node& n : added) {
    by_name_[n.def.name()] = n.id;
    nodes_.push_back(std::move(n));
  }
  for (int id = base; id < num_nodes(); ++id) {
    Node& n = nodes_[id];
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      nodes_[n.inputs[i].node].data_outputs.push_back(
          Edge{id, static_cast<int>(i)});
    }
    for (int c : n.control_inputs) nodes_[c].control_outputs.push_back(id);
  }
  return absl::OkStatus();
}

absl::StatusOr<const Graph::Node*> Graph::ResolveFeed(
    absl::string_view feed) const {
  COHORT_ASSIGN_OR_RETURN(TensorId id, ParseTensorName(feed));
  const Node* n = FindNode(id.node);
  if (n == nullptr || id.control) {
    return absl::InvalidArgumentError(absl::StrCat(
        "feed '", feed, "' refers to unknown node '", id.node, "'"));
  }
  if (n->op() != "Placeholder") {
    return absl::InvalidArgumentError(absl::StrCat(
        "feed '", feed, "' names ", NodeDebugName(n->def),
        ", which is not a Placeholder; only placeholders can be fed"));
  }
  if (id.index != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "feed '", feed, "': placeholder '", id.node, "' has only output 0"));
  }
  return n;
}

absl::StatusOr<Graph::TensorId> Graph::ResolveFetch(
    absl::string_view fetch) const {
  COHORT_ASSIGN_OR_RETURN(TensorId id, ParseTensorName(fetch));
  const Node* n = FindNode(id.node);
  if (n == nullptr || id.control) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fetch '", fetch, "' refers to unknown node '", id.node, "'"));
  }
  if (id.index >= static_cast<int>(n->output_types.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("fetch '", fetch, "': ", NodeDebugName(n->def), " has ",
                     n->output_types.size(), " outputs"));
  }
  return id;
}

absl::StatusOr<const Graph::Node*> Graph::ResolveTarget(
    absl::string_view target) const {
  absl::string_view name = target;
  absl::ConsumePrefix(&name, "^");
  const Node* n = FindNode(name);
  if (n == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target '", target, "' refers to unknown node '", name, "'"));
  }
  return n;
}

}  // namespace cohort
