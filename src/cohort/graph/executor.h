// Executor: runs one pruned signature of a Graph (feeds, fetches, targets)
// on a Device, step after step. LocalSession caches one per signature
// (MakeCallable) and the distributed runtime one per graph partition.
//
// Contract:
//  - Create prunes the graph to the nodes the fetches and targets need
//    (following data and control inputs, stopping at fed tensors), builds
//    one kernel per node and precomputes every edge as a slot index, so a
//    step allocates only its slot array and the tensors kernels produce.
//  - Feeds must name outputs of Placeholder nodes ("x" or "x:0"); a needed
//    Placeholder that is not fed, an unknown node, a fetch index out of
//    range, or a node without a kernel give InvalidArgument naming it.
//  - Run executes ready nodes: the calling thread runs nodes inline; when
//    several nodes are ready, expensive ones (OpKernel::IsExpensive) go to
//    the device's pool, so independent expensive branches run in parallel.
//    Control inputs order execution. Async kernels (Recv) never block a
//    thread.
//  - The first failing node stops the step: no further nodes start, the
//    step's rendezvous is aborted and its cancellation manager cancelled,
//    and Run returns that error prefixed "node 'x' (op Y): " (code kept).
//    Feed errors (wrong dtype, incompatible shape, wrong count) are
//    InvalidArgument naming the placeholder.
//  - RunArgs::deadline: when it passes the step is cancelled and Run
//    returns DeadlineExceeded naming the step and the timeout; RunArgs::
//    cancellation (optional) cancels the step from outside (Cancelled).
//    In both cases Run returns only after every started kernel finished.
//
// Thread safety: Run may be called concurrently from several threads (each
// call is its own step). Blocks until the step finishes or its deadline.
#ifndef COHORT_GRAPH_EXECUTOR_H_
#define COHORT_GRAPH_EXECUTOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "cohort/graph/graph.h"
#include "cohort/graph/kernel.h"
#include "cohort/graph/tensor.h"

namespace cohort {

class CancellationManager;
class Device;
class Env;
class Rendezvous;

class Executor {
 public:
  struct Options {
    Device* device = nullptr;                 // Required.
    const KernelRegistry* kernels = nullptr;  // Null = standard kernels.
    Env* env = nullptr;                       // Null = Env::Default().
  };
  struct RunArgs {
    int64_t step_id = 0;
    // One tensor per feed, in the order given to Create.
    absl::Span<const Tensor> feeds;
    // Null: a fresh LocalRendezvous for the step when the graph has
    // Send/Recv nodes.
    Rendezvous* rendezvous = nullptr;
    // Optional outside cancellation.
    CancellationManager* cancellation = nullptr;
    absl::Time deadline = absl::InfiniteFuture();
  };

  static absl::StatusOr<std::unique_ptr<Executor>> Create(
      const Graph& graph, const std::vector<std::string>& feeds,
      const std::vector<std::string>& fetches,
      const std::vector<std::string>& targets, const Options& options);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs one step; `fetches` gets one tensor per fetch. See the contract.
  absl::Status Run(const RunArgs& args, std::vector<Tensor>* fetches);

  // Number of nodes kept after pruning.
  int num_nodes() const { return static_cast<int>(items_.size()); }
  bool has_send_recv() const { return has_send_recv_; }

 private:
  struct OutEdge {
    int dst_item;  // -1 for a fetch slot.
    int dst_slot;  // Absolute slot index.
    int src_output;
  };
  struct Item {
    const Graph::Node* node = nullptr;
    std::unique_ptr<OpKernel> kernel;
    int input_start = 0;
    int num_inputs = 0;
    int pending_init = 0;
    bool is_async = false;
    bool expensive = false;
    std::vector<OutEdge> out_edges;
    std::vector<int> control_out;
  };
  struct Feed {
    std::string name;
    const Graph::Node* node = nullptr;
    DataType dtype = DT_INVALID;
    PartialTensorShape shape;
    std::vector<OutEdge> edges;
  };
  struct StepState;
  using ReadyList = absl::InlinedVector<int, 8>;

  Executor() = default;
  void RunLoop(const std::shared_ptr<StepState>& st, ReadyList ready);
  // Runs `ready`'s first node inline and hands the rest out; returns after
  // the inline chain is done.
  void Dispatch(const std::shared_ptr<StepState>& st, ReadyList* ready,
                ReadyList* inline_ready);
  // After a node computed: checks outputs, fills consumers' slots, and
  // appends newly ready nodes.
  absl::Status PropagateOutputs(const Item& item, OpKernelContext* ctx,
                                StepState* st, ReadyList* ready);
  void NodeDone(StepState* st, int count = 1);

  Options options_;
  std::vector<Item> items_;
  std::vector<int> roots_;
  std::vector<Feed> feeds_;
  int num_slots_ = 0;
  int fetch_base_ = 0;
  int num_fetches_ = 0;
  bool has_send_recv_ = false;
};

}  // namespace cohort

#endif  // COHORT_GRAPH_EXECUTOR_H_
