// Placement and partitioning: how a master turns one client signature
// (feeds, fetches, targets) of a session's graph into one GraphDef per task
// with Send/Recv pairs on the edges that cross tasks (docs/runtime.md;
// TensorFlow's placer and graph_partition).
//
//   PartitionOptions opts;
//   opts.devices = discovered;                // every task's CPU:0
//   opts.default_device = "/job:worker/replica:0/task:0/device:CPU:0";
//   COHORT_ASSIGN_OR_RETURN(auto parts,
//       PartitionGraph(graph, {"x"}, {"loss:0"}, {"train"}, opts));
//
// Contract:
//  - Pruning first: only nodes that the fetches and targets need (data and
//    control inputs, stopping at fed placeholders: the executor's rules)
//    end up in a partition; a task none of them lands on gets no Partition.
//    A fed placeholder that something needs is kept (the worker feeds it)
//    without its control inputs (a fed node never waits for them).
//  - Placement is computed over the whole graph, so a node lands on the
//    same device in every signature (a variable initialised by one
//    signature is found by the next); only errors that concern a needed
//    node or a member of its colocation group are reported. In order:
//    (1) a node's explicit `device` (DeviceName syntax; partial names are
//    completed from the default device's job, replica 0, task 0, CPU:0);
//    a name matching no device in `devices` is InvalidArgument `Cannot
//    assign a device for operation <node>: node <node> was explicitly
//    assigned to <device as written> but available devices are [ <sorted,
//    ", "-joined> ]. Make sure the device specification refers to a valid
//    device.`; a malformed one is `node '<node>' (op <op>): invalid device
//    string '<x>'...`. A device type or id the task lacks (e.g. GPU:0)
//    goes to that task's CPU:0 with allow_soft_placement, else the same
//    InvalidArgument; soft placement never changes the task. (2)
//    Colocation groups: a node with a DT_RESOURCE input is grouped with
//    that input's producer, and nodes sharing a `_class: ["loc:@x"]` entry
//    (TF: a node without `_class` is in class "x" = its own name) are
//    grouped; a group goes where its explicitly placed members are, and two
//    members placed on different devices are InvalidArgument `Cannot
//    colocate nodes 'a' and 'b': ...` naming both devices. (3) A group
//    without an explicit device (a lone unplaced node is a group of one):
//    the device of the first data input of its topologically first member,
//    else `default_device`.
//  - Partitioning: for each data edge src:k -> dst whose ends are on
//    different devices (= tasks; cohort has one CPU:0 per task), one Send
//    on src's device and one Recv on dst's (one pair per (src tensor,
//    destination device), however many consumers the tensor feeds there),
//    with attrs tensor_name = "<src>:<k>", send_device, recv_device,
//    send_device_incarnation (the incarnation of src's device in
//    `devices`, as int64 bit for bit), T on the Send / tensor_type on the
//    Recv (the edge's dtype). A control edge across devices becomes a
//    scalar float Const on src's device (control input "^<src>") sent to
//    dst's device (tensor_name "^<src>"), whose Recv is a control input of
//    dst; one per (src, destination device).
//  - Inserted node names, <tag> being "<job>_<task>" (e.g. "worker_1"):
//    "_send/<src>_<k>_to_<dst tag>" and "_recv/<src>_<k>_from_<src tag>"
//    for data; "_ctrl/<src>_to_<dst tag>" (the Const),
//    "_send/_ctrl/<src>_to_<dst tag>", "_recv/_ctrl/<src>_from_<src tag>"
//    for control. A name the graph already uses gets "_1", "_2", ... .
//  - The worker must run every Send node of its partition (as targets) in
//    addition to the partition's fetches and targets (RegisterGraphRequest).
//  - Every node of every partition has its partition's full device name;
//    each partition's GraphDef (version 1, nodes in graph order, inserted
//    nodes after them) is valid on its own (Graph::FromGraphDef).
//  - Deterministic: the same input gives byte-identical partitions (with
//    deterministic serialisation of the attr maps).
//
// Thread safety: pure function of its arguments.
#ifndef COHORT_RUNTIME_PARTITION_H_
#define COHORT_RUNTIME_PARTITION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cohort/graph.pb.h"
#include "cohort/graph/graph.h"
#include "cohort/worker.pb.h"

namespace cohort::runtime {

struct PartitionOptions {
  // Every usable device, full names (one CPU:0 per discovered task).
  std::vector<DeviceAttributes> devices;
  // Full name of the master's device: unplaced nodes and partial names.
  std::string default_device;
  bool allow_soft_placement = false;
};

struct Partition {
  std::string device;  // Full name of the task's device.
  std::string task;    // "/job:J/replica:0/task:T".
  GraphDef graph_def;
  // The client's feeds ("x:0"), fetches ("y:0") and targets ("train") that
  // live in this partition, spelled and ordered as the client gave them. A
  // feed that nothing needs is in no partition (its value is unused).
  std::vector<std::string> feeds;
  std::vector<std::string> fetches;
  std::vector<std::string> targets;
};

// Partitions sorted by device name. Errors (all InvalidArgument):
//  - feeds, fetches and targets as the executor checks them (unknown node,
//    fetch index out of range, a feed that is not a Placeholder or is fed
//    twice, a needed Placeholder that is not fed), naming the node;
//  - the placement errors above;
//  - `default_device` malformed or not among `devices`; a device in
//    `devices` that is not a full name or is listed twice;
//  - a node whose output crosses devices with ';' in its name (it would
//    break the rendezvous key).
absl::StatusOr<std::vector<Partition>> PartitionGraph(
    const Graph& graph, const std::vector<std::string>& feeds,
    const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets, const PartitionOptions& options);

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_PARTITION_H_
