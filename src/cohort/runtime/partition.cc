#include "cohort/runtime/partition.h"

#include <algorithm>
#include <deque>
#include <numeric>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "cohort/base/status.h"
#include "cohort/graph/attr_value.h"
#include "cohort/graph/op_registry.h"
#include "cohort/graph/tensor.h"
#include "cohort/graph/tensor_shape.h"
#include "cohort/graph/types.h"
#include "cohort/runtime/device_name.h"

namespace cohort::runtime {
namespace {

// --- Devices ------------------------------------------------------------

// The usable devices, sorted by full name: the sort order is the order of
// the returned partitions and of the "available devices" list in errors.
struct DeviceTable {
  std::vector<DeviceName> parsed;
  std::vector<std::string> names;  // Canonical full names.
  std::vector<uint64_t> incarnations;
  std::string available;  // "[ a, b ]" for messages.

  // The device equal to the complete name `d`, or -1.
  int Find(const DeviceName& d) const {
    for (size_t i = 0; i < parsed.size(); ++i) {
      if (parsed[i].Matches(d)) return static_cast<int>(i);
    }
    return -1;
  }
  // Soft placement: a device of `d`'s task, preferring its CPU:0, or -1.
  int FindOnTask(const DeviceName& d) const {
    DeviceName task = d;
    task.has_type = false;
    task.has_id = false;
    DeviceName cpu0 = task;
    cpu0.has_type = cpu0.has_id = true;
    cpu0.type = "CPU";
    cpu0.id = 0;
    int found = Find(cpu0);
    return found >= 0 ? found : Find(task);
  }
};

absl::StatusOr<DeviceTable> BuildDeviceTable(const PartitionOptions& options) {
  std::vector<std::pair<std::string, std::pair<DeviceName, uint64_t>>> sorted;
  for (const DeviceAttributes& d : options.devices) {
    COHORT_ASSIGN_OR_RETURN(DeviceName parsed, DeviceName::Parse(d.name()));
    if (!parsed.has_job || !parsed.has_replica || !parsed.has_task ||
        !parsed.has_type || !parsed.has_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("available device '", d.name(),
                       "' is not a full device name "
                       "(/job:J/replica:R/task:T/device:TYPE:ID)"));
    }
    sorted.push_back({parsed.FullName(), {parsed, d.incarnation()}});
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  DeviceTable table;
  for (auto& [name, rest] : sorted) {
    if (!table.names.empty() && table.names.back() == name) {
      return absl::InvalidArgumentError(
          absl::StrCat("device '", name, "' is listed twice"));
    }
    table.names.push_back(name);
    table.parsed.push_back(rest.first);
    table.incarnations.push_back(rest.second);
  }
  table.available = absl::StrCat("[ ", absl::StrJoin(table.names, ", "), " ]");
  return table;
}

// --- Signature and pruning ----------------------------------------------

// Which nodes one signature needs. The rules are the executor's
// (executor.h), so a partition prunes to itself on the worker: follow data
// and control inputs back from the fetches and targets, stopping at fed
// placeholders. Fed placeholders that something needs are kept as nodes
// (the worker feeds them); their own inputs are not.
struct Signature {
  absl::flat_hash_set<int> fed;
  std::vector<int> feed_nodes;  // Per client feed.
  std::vector<int> fetch_nodes;
  std::vector<int> target_nodes;
  std::vector<char> needed;
};

absl::Status ResolveFeeds(const Graph& graph,
                          const std::vector<std::string>& feeds,
                          Signature* sig) {
  for (const std::string& f : feeds) {
    COHORT_ASSIGN_OR_RETURN(const Graph::Node* n, graph.ResolveFeed(f));
    if (!sig->fed.insert(n->id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("placeholder '", n->name(), "' is fed twice"));
    }
    sig->feed_nodes.push_back(n->id);
  }
  return absl::OkStatus();
}

absl::Status ResolveFetchesAndTargets(const Graph& graph,
                                      const std::vector<std::string>& fetches,
                                      const std::vector<std::string>& targets,
                                      Signature* sig) {
  for (const std::string& f : fetches) {
    COHORT_ASSIGN_OR_RETURN(const Graph::TensorId id, graph.ResolveFetch(f));
    sig->fetch_nodes.push_back(graph.FindNode(id.node)->id);
  }
  for (const std::string& t : targets) {
    COHORT_ASSIGN_OR_RETURN(const Graph::Node* n, graph.ResolveTarget(t));
    sig->target_nodes.push_back(n->id);
  }
  return absl::OkStatus();
}

absl::StatusOr<Signature> ResolveSignature(
    const Graph& graph, const std::vector<std::string>& feeds,
    const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets) {
  Signature sig;
  COHORT_RETURN_IF_ERROR(ResolveFeeds(graph, feeds, &sig));
  COHORT_RETURN_IF_ERROR(
      ResolveFetchesAndTargets(graph, fetches, targets, &sig));
  sig.needed.assign(graph.num_nodes(), 0);
  std::deque<int> queue;
  auto need = [&](int id) {
    if (sig.needed[id]) return;
    sig.needed[id] = 1;
    if (!sig.fed.contains(id)) queue.push_back(id);
  };
  for (int id : sig.fetch_nodes) need(id);
  for (int id : sig.target_nodes) need(id);
  while (!queue.empty()) {
    const Graph::Node& n = graph.node(queue.front());
    queue.pop_front();
    for (const Graph::Edge& e : n.inputs) need(e.node);
    for (int c : n.control_inputs) need(c);
  }
  // Same check and message as the executor, but before anything is
  // registered on a worker.
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const Graph::Node& n = graph.node(id);
    if (!sig.needed[id] || sig.fed.contains(id) || n.op() != "Placeholder") {
      continue;
    }
    PartialTensorShape shape;
    (void)GetNodeAttr(n.def, "shape", &shape);
    return absl::InvalidArgumentError(absl::StrCat(
        "you must feed a value for placeholder '", n.name(), "' (",
        DataTypeName(n.output_types[0]), ", shape ", shape.DebugString(),
        "): the fetches/targets depend on it"));
  }
  return sig;
}

// --- Colocation groups --------------------------------------------------

// Union-find over node ids; the root of a set is its smallest id, so the
// group representative does not depend on the order of unions.
class Groups {
 public:
  explicit Groups(int n) : parent_(n) {
    std::iota(parent_.begin(), parent_.end(), 0);
  }
  int Find(int x) {
    while (parent_[x] != x) {
      parent_[x] = parent_[parent_[x]];
      x = parent_[x];
    }
    return x;
  }
  void Union(int a, int b) {
    a = Find(a);
    b = Find(b);
    if (a == b) return;
    if (b < a) std::swap(a, b);
    parent_[b] = a;
  }

 private:
  std::vector<int> parent_;
};

// The names of the colocation classes of a node: its `_class` entries
// "loc:@x" (TensorFlow's tf.colocate_with), or its own name when it has
// none. Entries without the prefix are not colocation constraints.
std::vector<std::string> ColocationClasses(const Graph::Node& n) {
  std::vector<std::string> classes;
  auto it = n.def.attr().find("_class");
  if (it != n.def.attr().end() && it->second.has_list()) {
    for (const std::string& s : it->second.list().s()) {
      absl::string_view name = s;
      if (absl::ConsumePrefix(&name, "loc:@")) classes.emplace_back(name);
    }
  }
  if (classes.empty()) classes.push_back(n.name());
  return classes;
}

// Groups over the whole graph, not only the signature's nodes: a variable
// and everything using it must land on one device in every signature, or
// the signature that initialises it and the one that reads it would see
// two different variables.
Groups BuildGroups(const Graph& graph) {
  Groups groups(graph.num_nodes());
  absl::flat_hash_map<std::string, int> class_root;
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const Graph::Node& n = graph.node(id);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.input_types[i] == DT_RESOURCE) groups.Union(id, n.inputs[i].node);
    }
    for (const std::string& c : ColocationClasses(n)) {
      auto [it, inserted] = class_root.emplace(c, id);
      if (!inserted) groups.Union(id, it->second);
    }
  }
  return groups;
}

// --- Placement ----------------------------------------------------------

class Placer {
 public:
  Placer(const Graph& graph, const Signature& sig, const DeviceTable& devices,
         const PartitionOptions& options)
      : graph_(graph),
        sig_(sig),
        devices_(devices),
        soft_(options.allow_soft_placement),
        groups_(BuildGroups(graph)) {}

  // One device index per node of the graph (-1 for nodes in no group that
  // the signature needs, whose placement is never used).
  absl::StatusOr<std::vector<int>> Run(absl::string_view default_device);

 private:
  // The device a node's own `device` attr names: -1 when empty.
  absl::StatusOr<int> ResolveExplicit(const Graph::Node& n) const;
  // Merges the explicit devices of every group's members; records errors
  // per group.
  void ResolveGroups();
  std::vector<int> TopologicalOrder() const;
  // "'<device>'" or "'<device>' (written '<as in the node>')".
  std::string Describe(int node, int dev) const;

  const Graph& graph_;
  const Signature& sig_;
  const DeviceTable& devices_;
  const bool soft_;
  Groups groups_;
  DeviceName defaults_;  // Only the default device's job.
  // Per group root: the device (-1 unknown yet), the member that pinned it
  // (for conflict messages), and the first error.
  absl::flat_hash_map<int, int> group_device_;
  absl::flat_hash_map<int, int> group_pinned_by_;
  absl::flat_hash_map<int, absl::Status> group_error_;
};

std::string Placer::Describe(int node, int dev) const {
  const std::string& written = graph_.node(node).def.device();
  const std::string& resolved = devices_.names[dev];
  return written == resolved
             ? absl::StrCat("'", resolved, "'")
             : absl::StrCat("'", resolved, "' (written '", written, "')");
}

absl::StatusOr<int> Placer::ResolveExplicit(const Graph::Node& n) const {
  const std::string& written = n.def.device();
  if (written.empty()) return -1;
  auto parsed = DeviceName::Parse(written);
  if (!parsed.ok()) return AttachNodeName(parsed.status(), n.def);
  DeviceName full = parsed->Complete(defaults_);
  int found = devices_.Find(full);
  // TF's soft placement ignores the device type and id but never the task:
  // a GPU op on a CPU-only task runs on its CPU, a node on a task that does
  // not exist still fails.
  if (found < 0 && soft_) found = devices_.FindOnTask(full);
  if (found >= 0) return found;
  return absl::InvalidArgumentError(absl::StrCat(
      "Cannot assign a device for operation ", n.name(), ": node ", n.name(),
      " was explicitly assigned to ", written, " but available devices are ",
      devices_.available,
      ". Make sure the device specification refers to a valid device."));
}

void Placer::ResolveGroups() {
  // Members in id order, so the node named first in a conflict is the
  // group's earliest one and messages are deterministic.
  for (int id = 0; id < graph_.num_nodes(); ++id) {
    const Graph::Node& n = graph_.node(id);
    if (n.def.device().empty()) continue;
    const int root = groups_.Find(id);
    if (group_error_.contains(root)) continue;
    absl::StatusOr<int> dev = ResolveExplicit(n);
    if (!dev.ok()) {
      group_error_[root] = dev.status();
      continue;
    }
    auto [it, inserted] = group_device_.emplace(root, *dev);
    if (inserted) {
      group_pinned_by_[root] = id;
      continue;
    }
    if (it->second == *dev) continue;
    const int first = group_pinned_by_[root];
    group_error_[root] = absl::InvalidArgumentError(absl::StrCat(
        "Cannot colocate nodes '", graph_.node(first).name(), "' and '",
        n.name(), "': '", graph_.node(first).name(), "' is assigned to ",
        Describe(first, it->second), " but '", n.name(), "' to ",
        Describe(id, *dev),
        ". They must share a device because one consumes a DT_RESOURCE "
        "output of the other (directly or through their group) or because "
        "of a _class \"loc:@...\" attr; place them on the same device or "
        "leave one unplaced."));
  }
}

// Kahn's algorithm with a FIFO seeded in id order: a deterministic order in
// which every node comes after its data and control inputs.
std::vector<int> Placer::TopologicalOrder() const {
  const int n = graph_.num_nodes();
  std::vector<int> pending(n);
  std::deque<int> ready;
  for (int id = 0; id < n; ++id) {
    const Graph::Node& node = graph_.node(id);
    pending[id] =
        static_cast<int>(node.inputs.size() + node.control_inputs.size());
    if (pending[id] == 0) ready.push_back(id);
  }
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int id = ready.front();
    ready.pop_front();
    order.push_back(id);
    const Graph::Node& node = graph_.node(id);
    for (const Graph::Edge& e : node.data_outputs) {
      if (--pending[e.node] == 0) ready.push_back(e.node);
    }
    for (int c : node.control_outputs) {
      if (--pending[c] == 0) ready.push_back(c);
    }
  }
  return order;  // Graph guarantees acyclicity, so every node is here.
}

absl::StatusOr<std::vector<int>> Placer::Run(absl::string_view default_device) {
  absl::StatusOr<DeviceName> parsed = DeviceName::Parse(default_device);
  if (!parsed.ok()) return Annotate(parsed.status(), "default device");
  const DeviceName& def = *parsed;
  const int default_index = devices_.Find(def.Complete(DeviceName()));
  if (default_device.empty() || default_index < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "default device '", default_device,
        "' is not one of the available devices ", devices_.available));
  }
  defaults_.has_job = def.has_job;
  defaults_.job = def.job;
  ResolveGroups();
  // Errors matter only for groups the signature touches: an unused node
  // with a bad device must not break every other signature. The first
  // needed node (in id order) with a failed group reports.
  for (int id = 0; id < graph_.num_nodes(); ++id) {
    if (!sig_.needed[id]) continue;
    auto it = group_error_.find(groups_.Find(id));
    if (it != group_error_.end()) return it->second;
  }
  // Unplaced groups (reference §1.8 rule 4): the device of the first data
  // input of the group's topologically first member, else the default.
  // Walking the whole graph in topological order makes that input already
  // placed, and the outcome independent of the signature.
  std::vector<int> device(graph_.num_nodes(), -1);
  for (int id : TopologicalOrder()) {
    const int root = groups_.Find(id);
    auto it = group_device_.find(root);
    if (it == group_device_.end()) {
      const Graph::Node& n = graph_.node(id);
      const int dev =
          n.inputs.empty() ? default_index : device[n.inputs.front().node];
      it = group_device_.emplace(root, dev).first;
    }
    device[id] = it->second;
  }
  return device;
}

// --- Partitioning -------------------------------------------------------

// A short, readable tag of a device for inserted node names: "ps_0", or
// "worker_1_gpu_0" when the device is not the task's CPU:0.
std::string DeviceTag(const DeviceName& d) {
  std::string tag = absl::StrCat(d.job, "_", d.task);
  if (d.replica != 0) absl::StrAppend(&tag, "_r", d.replica);
  if (d.type != "CPU" || d.id != 0) {
    absl::StrAppend(&tag, "_", absl::AsciiStrToLower(d.type), "_", d.id);
  }
  return tag;
}

class Partitioner {
 public:
  Partitioner(const Graph& graph, const Signature& sig,
              const DeviceTable& devices, std::vector<int> device)
      : graph_(graph),
        sig_(sig),
        devices_(devices),
        device_(std::move(device)),
        parts_(devices.names.size()) {}

  absl::Status Run();
  // The non-empty partitions in device order, with the client's names.
  std::vector<Partition> Finish(const std::vector<std::string>& feeds,
                                const std::vector<std::string>& fetches,
                                const std::vector<std::string>& targets);

 private:
  struct Part {
    GraphDef def;
    absl::flat_hash_set<std::string> taken;  // Inserted names.
    bool used = false;
  };
  // "_recv/..." on `dst` receiving output `index` of `src`, made once.
  absl::StatusOr<std::string> DataRecv(int src, int index, int dst);
  // "_recv/_ctrl/..." on `dst` that completes after `src` ran, made once.
  absl::StatusOr<std::string> ControlRecv(int src, int dst);
  // Adds a Send of `tensor` (on src_dev) and its Recv (on dst_dev); returns
  // the Recv's name.
  std::string AddSendRecv(const std::string& tensor, DataType dtype,
                          const std::string& tensor_name,
                          const std::string& base, int src_dev, int dst_dev);
  NodeDef* AddNode(int dev, const std::string& base, const std::string& op);
  absl::Status CheckKeyName(int src) const;
  absl::Status CopyNode(int id);

  const Graph& graph_;
  const Signature& sig_;
  const DeviceTable& devices_;
  const std::vector<int> device_;
  std::vector<Part> parts_;
  // (src node, output or -1 for control, dst device) -> Recv name.
  absl::flat_hash_map<std::tuple<int, int, int>, std::string> recvs_;
};

NodeDef* Partitioner::AddNode(int dev, const std::string& base,
                              const std::string& op) {
  // Inserted names start with "_send/", "_recv/", "_ctrl/"; a graph may
  // still own such a name, so take the first free "<base>", "<base>_1", ...
  Part& part = parts_[dev];
  std::string name = base;
  for (int k = 1; graph_.FindNode(name) != nullptr || part.taken.contains(name);
       ++k) {
    name = absl::StrCat(base, "_", k);
  }
  part.taken.insert(name);
  part.used = true;
  NodeDef* node = part.def.add_node();
  node->set_name(name);
  node->set_op(op);
  node->set_device(devices_.names[dev]);
  return node;
}

std::string Partitioner::AddSendRecv(const std::string& tensor, DataType dtype,
                                     const std::string& tensor_name,
                                     const std::string& base, int src_dev,
                                     int dst_dev) {
  // The attrs Send/Recv's OpDefs declare (sendrecv_ops.cc); the key they
  // build is CreateKey(send_device, incarnation, recv_device, tensor_name).
  // The incarnation attr is an int: the uint64 is carried bit for bit and
  // cast back by the kernel.
  auto common = [&](NodeDef* n) {
    auto& attr = *n->mutable_attr();
    attr["tensor_name"] = MakeAttrValue(tensor_name);
    attr["send_device"] = MakeAttrValue(devices_.names[src_dev]);
    attr["recv_device"] = MakeAttrValue(devices_.names[dst_dev]);
    attr["send_device_incarnation"] =
        MakeAttrValue(static_cast<int64_t>(devices_.incarnations[src_dev]));
  };
  const DeviceName& src = devices_.parsed[src_dev];
  const DeviceName& dst = devices_.parsed[dst_dev];
  NodeDef* send = AddNode(
      src_dev, absl::StrCat("_send/", base, "_to_", DeviceTag(dst)), "Send");
  send->add_input(tensor);
  (*send->mutable_attr())["T"] = MakeAttrValue(dtype);
  common(send);
  NodeDef* recv = AddNode(
      dst_dev, absl::StrCat("_recv/", base, "_from_", DeviceTag(src)), "Recv");
  (*recv->mutable_attr())["tensor_type"] = MakeAttrValue(dtype);
  common(recv);
  return recv->name();
}

absl::Status Partitioner::CheckKeyName(int src) const {
  // A rendezvous key is ';'-separated (rendezvous.h): a node name with ';'
  // in a tensor_name would make a key no Recv can parse.
  const Graph::Node& n = graph_.node(src);
  if (absl::StrContains(n.name(), ';')) {
    return absl::InvalidArgumentError(absl::StrCat(
        NodeDebugName(n.def),
        ": a node whose output crosses tasks cannot have ';' in its name "
        "(rendezvous keys are ';'-separated); rename it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Partitioner::DataRecv(int src, int index, int dst) {
  auto it = recvs_.find({src, index, dst});
  if (it != recvs_.end()) return it->second;
  COHORT_RETURN_IF_ERROR(CheckKeyName(src));
  const Graph::Node& n = graph_.node(src);
  std::string recv =
      AddSendRecv(absl::StrCat(n.name(), ":", index), n.output_types[index],
                  absl::StrCat(n.name(), ":", index),
                  absl::StrCat(n.name(), "_", index), device_[src], dst);
  recvs_.emplace(std::make_tuple(src, index, dst), recv);
  return recv;
}

absl::StatusOr<std::string> Partitioner::ControlRecv(int src, int dst) {
  auto it = recvs_.find({src, -1, dst});
  if (it != recvs_.end()) return it->second;
  COHORT_RETURN_IF_ERROR(CheckKeyName(src));
  // A control edge carries no tensor, but a Recv needs one to wait for: a
  // scalar Const that runs after `src` stands in for it (TF's
  // graph_partition does the same).
  const Graph::Node& n = graph_.node(src);
  const int src_dev = device_[src];
  NodeDef* dummy = AddNode(
      src_dev,
      absl::StrCat("_ctrl/", n.name(), "_to_", DeviceTag(devices_.parsed[dst])),
      "Const");
  dummy->add_input(absl::StrCat("^", n.name()));
  (*dummy->mutable_attr())["dtype"] = MakeAttrValue(DT_FLOAT);
  (*dummy->mutable_attr())["value"] = MakeAttrValue(Tensor(0.0f));
  const std::string dummy_name = dummy->name();
  std::string recv =
      AddSendRecv(dummy_name, DT_FLOAT, absl::StrCat("^", n.name()),
                  absl::StrCat("_ctrl/", n.name()), src_dev, dst);
  recvs_.emplace(std::make_tuple(src, -1, dst), recv);
  return recv;
}

absl::Status Partitioner::CopyNode(int id) {
  const Graph::Node& n = graph_.node(id);
  const int dev = device_[id];
  Part& part = parts_[dev];
  part.used = true;
  NodeDef* out = part.def.add_node();
  *out = n.def;
  out->set_device(devices_.names[dev]);
  out->clear_input();
  // A fed placeholder is "done" before the step starts (executor.h): its
  // control inputs are never waited for, and may name nodes this
  // signature does not include, so they are dropped.
  if (sig_.fed.contains(id)) return absl::OkStatus();
  const int num_data = static_cast<int>(n.inputs.size());
  for (int i = 0; i < num_data; ++i) {
    const Graph::Edge& e = n.inputs[i];
    if (device_[e.node] == dev) {
      out->add_input(n.def.input(i));
      continue;
    }
    COHORT_ASSIGN_OR_RETURN(std::string recv, DataRecv(e.node, e.index, dev));
    out->add_input(recv);
  }
  for (size_t j = 0; j < n.control_inputs.size(); ++j) {
    const int src = n.control_inputs[j];
    if (device_[src] == dev) {
      out->add_input(n.def.input(num_data + static_cast<int>(j)));
      continue;
    }
    COHORT_ASSIGN_OR_RETURN(std::string recv, ControlRecv(src, dev));
    out->add_input(absl::StrCat("^", recv));
  }
  return absl::OkStatus();
}

absl::Status Partitioner::Run() {
  for (int id = 0; id < graph_.num_nodes(); ++id) {
    if (sig_.needed[id]) COHORT_RETURN_IF_ERROR(CopyNode(id));
  }
  return absl::OkStatus();
}

std::vector<Partition> Partitioner::Finish(
    const std::vector<std::string>& feeds,
    const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets) {
  std::vector<Partition> out;
  std::vector<int> index_of(parts_.size(), -1);
  for (size_t dev = 0; dev < parts_.size(); ++dev) {
    if (!parts_[dev].used) continue;
    index_of[dev] = static_cast<int>(out.size());
    Partition& p = out.emplace_back();
    p.device = devices_.names[dev];
    p.task = devices_.parsed[dev].TaskName();
    p.graph_def = std::move(parts_[dev].def);
    p.graph_def.set_version(1);
  }
  // A feed nothing needs is in no partition: its value is not used.
  for (size_t i = 0; i < feeds.size(); ++i) {
    const int id = sig_.feed_nodes[i];
    if (sig_.needed[id]) out[index_of[device_[id]]].feeds.push_back(feeds[i]);
  }
  for (size_t i = 0; i < fetches.size(); ++i) {
    out[index_of[device_[sig_.fetch_nodes[i]]]].fetches.push_back(fetches[i]);
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    out[index_of[device_[sig_.target_nodes[i]]]].targets.push_back(targets[i]);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Partition>> PartitionGraph(
    const Graph& graph, const std::vector<std::string>& feeds,
    const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets, const PartitionOptions& options) {
  COHORT_ASSIGN_OR_RETURN(Signature sig,
                          ResolveSignature(graph, feeds, fetches, targets));
  COHORT_ASSIGN_OR_RETURN(DeviceTable devices, BuildDeviceTable(options));
  Placer placer(graph, sig, devices, options);
  COHORT_ASSIGN_OR_RETURN(std::vector<int> device,
                          placer.Run(options.default_device));
  Partitioner partitioner(graph, sig, devices, std::move(device));
  COHORT_RETURN_IF_ERROR(partitioner.Run());
  return partitioner.Finish(feeds, fetches, targets);
}

}  // namespace cohort::runtime
