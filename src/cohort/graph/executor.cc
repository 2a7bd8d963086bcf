#include "cohort/graph/executor.h"

#include <atomic>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/env.h"
#include "cohort/base/phase_stats.h"
#include "cohort/base/status.h"
#include "cohort/graph/cancellation.h"
#include "cohort/graph/denormal.h"
#include "cohort/graph/device.h"
#include "cohort/graph/rendezvous.h"
#include "cohort/graph/standard_registries.h"

namespace cohort {

struct Executor::StepState {
  StepState(int num_slots, int num_items)
      : slots(num_slots), pending(new std::atomic<int>[num_items]) {}

  std::vector<Tensor> slots;
  std::unique_ptr<std::atomic<int>[]> pending;
  OpKernelContext::Params params;  // Shared fields; copied per node.
  std::atomic<bool> aborted{false};
  std::atomic<int> outstanding{0};
  CancellationManager cancellation;
  std::unique_ptr<LocalRendezvous> own_rendezvous;
  Rendezvous* rendezvous = nullptr;
  // What the step's kernels allocate against (a child of the device's).
  MemoryBudget::Ptr memory;

  absl::Mutex mu;
  absl::Status status ABSL_GUARDED_BY(mu);
  bool done ABSL_GUARDED_BY(mu) = false;

  // Records the first error and stops the step.
  void Fail(const absl::Status& s) {
    {
      absl::MutexLock lock(&mu);
      if (!status.ok()) return;
      status = s;
    }
    aborted.store(true, std::memory_order_release);
    if (rendezvous != nullptr) rendezvous->StartAbort(s);
    cancellation.StartCancel();
  }
};

Executor::~Executor() = default;

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(
    const Graph& graph, const std::vector<std::string>& feeds,
    const std::vector<std::string>& fetches,
    const std::vector<std::string>& targets, const Options& options) {
  if (options.device == nullptr) {
    return absl::InvalidArgumentError("Executor::Create: no device");
  }
  std::unique_ptr<Executor> ex(new Executor());
  ex->options_ = options;
  if (ex->options_.kernels == nullptr)
    ex->options_.kernels = StandardKernelRegistry();
  if (ex->options_.env == nullptr) ex->options_.env = Env::Default();

  // Feeds: placeholders only.
  absl::flat_hash_map<int, int> fed_node_to_feed;  // node id -> feed index
  for (const std::string& f : feeds) {
    COHORT_ASSIGN_OR_RETURN(const Graph::Node* n, graph.ResolveFeed(f));
    if (!fed_node_to_feed.emplace(n->id, static_cast<int>(ex->feeds_.size()))
             .second) {
      return absl::InvalidArgumentError(
          absl::StrCat("placeholder '", n->name(), "' is fed twice"));
    }
    Feed feed;
    feed.name = f;
    feed.node = n;
    feed.dtype = n->output_types[0];
    COHORT_RETURN_IF_ERROR(GetNodeAttr(n->def, "shape", &feed.shape));
    ex->feeds_.push_back(std::move(feed));
  }
  // Fetches and targets: the roots of pruning.
  std::vector<Graph::TensorId> fetch_ids;
  std::deque<int> queue;
  std::vector<char> needed(graph.num_nodes(), 0);
  auto need = [&](int id) {
    if (!needed[id] && !fed_node_to_feed.contains(id)) {
      needed[id] = 1;
      queue.push_back(id);
    }
  };
  for (const std::string& f : fetches) {
    COHORT_ASSIGN_OR_RETURN(Graph::TensorId id, graph.ResolveFetch(f));
    need(graph.FindNode(id.node)->id);
    fetch_ids.push_back(std::move(id));
  }
  for (const std::string& t : targets) {
    COHORT_ASSIGN_OR_RETURN(const Graph::Node* n, graph.ResolveTarget(t));
    need(n->id);
  }
  while (!queue.empty()) {
    const Graph::Node& n = graph.node(queue.front());
    queue.pop_front();
    for (const auto& e : n.inputs) need(e.node);
    for (int c : n.control_inputs) need(c);
  }
  // Items in graph order (a topological order is not required).
  std::vector<int> item_of(graph.num_nodes(), -1);
  int slot = 0;
  for (int id = 0; id < graph.num_nodes(); ++id) {
    if (!needed[id]) continue;
    const Graph::Node& n = graph.node(id);
    if (n.op() == "Placeholder") {
      PartialTensorShape shape;
      (void)GetNodeAttr(n.def, "shape", &shape);
      return absl::InvalidArgumentError(absl::StrCat(
          "you must feed a value for placeholder '", n.name(), "' (",
          DataTypeName(n.output_types[0]), ", shape ", shape.DebugString(),
          "): the fetches/targets depend on it"));
    }
    item_of[id] = static_cast<int>(ex->items_.size());
    Item& item = ex->items_.emplace_back();
    item.node = &n;
    item.input_start = slot;
    item.num_inputs = static_cast<int>(n.inputs.size());
    slot += item.num_inputs;
    if (n.op() == "Send" || n.op() == "Recv") ex->has_send_recv_ = true;
  }
  ex->fetch_base_ = slot;
  ex->num_fetches_ = static_cast<int>(fetch_ids.size());
  ex->num_slots_ = slot + ex->num_fetches_;
  // Edges.
  for (Item& item : ex->items_) {
    const Graph::Node& n = *item.node;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Graph::Edge& e = n.inputs[i];
      OutEdge out{item_of[n.id], item.input_start + static_cast<int>(i),
                  e.index};
      auto f = fed_node_to_feed.find(e.node);
      if (f != fed_node_to_feed.end()) {
        ex->feeds_[f->second].edges.push_back(out);
      } else {
        ex->items_[item_of[e.node]].out_edges.push_back(out);
      }
      ++item.pending_init;
    }
    for (int c : n.control_inputs) {
      if (fed_node_to_feed.contains(c)) continue;  // A fed node is "done".
      ex->items_[item_of[c]].control_out.push_back(item_of[n.id]);
      ++item.pending_init;
    }
  }
  for (size_t j = 0; j < fetch_ids.size(); ++j) {
    const Graph::Node* n = graph.FindNode(fetch_ids[j].node);
    OutEdge out{-1, ex->fetch_base_ + static_cast<int>(j), fetch_ids[j].index};
    auto f = fed_node_to_feed.find(n->id);
    if (f != fed_node_to_feed.end()) {
      ex->feeds_[f->second].edges.push_back(out);
    } else {
      ex->items_[item_of[n->id]].out_edges.push_back(out);
    }
  }
  // Kernels.
  for (size_t i = 0; i < ex->items_.size(); ++i) {
    Item& item = ex->items_[i];
    COHORT_ASSIGN_OR_RETURN(
        item.kernel, ex->options_.kernels->CreateKernel(
                         item.node->def, *item.node->op_def, options.device,
                         options.device->device_type()));
    item.is_async = item.kernel->IsAsync();
    item.expensive = item.kernel->IsExpensive();
    if (item.pending_init == 0) ex->roots_.push_back(static_cast<int>(i));
  }
  return ex;
}

absl::Status Executor::Run(const RunArgs& args, std::vector<Tensor>* fetches) {
  if (args.feeds.size() != feeds_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("got ", args.feeds.size(),
                                                   " feed values for ",
                                                   feeds_.size(), " feeds"));
  }
  for (size_t k = 0; k < feeds_.size(); ++k) {
    const Tensor& t = args.feeds[k];
    const Feed& f = feeds_[k];
    if (t.dtype() != f.dtype || !t.IsInitialized()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the value fed to placeholder '", f.node->name(), "' is ",
          t.IsInitialized() ? DataTypeName(t.dtype())
                            : "an uninitialized tensor",
          ", but the placeholder is ", DataTypeName(f.dtype)));
    }
    if (!f.shape.IsCompatibleWith(t.shape())) {
      return absl::InvalidArgumentError(
          absl::StrCat("the value fed to placeholder '", f.node->name(),
                       "' has shape ", t.shape().DebugString(),
                       ", which is incompatible with its declared shape ",
                       f.shape.DebugString()));
    }
  }
  auto st =
      std::make_shared<StepState>(num_slots_, static_cast<int>(items_.size()));
  for (size_t i = 0; i < items_.size(); ++i) {
    st->pending[i].store(items_[i].pending_init, std::memory_order_relaxed);
  }
  st->rendezvous = args.rendezvous;
  if (st->rendezvous == nullptr && has_send_recv_) {
    st->own_rendezvous = std::make_unique<LocalRendezvous>();
    st->rendezvous = st->own_rendezvous.get();
  }
  OpKernelContext::Params& p = st->params;
  p.step_id = args.step_id;
  p.device = options_.device;
  p.rendezvous = st->rendezvous;
  p.cancellation_manager = &st->cancellation;
  p.deadline = args.deadline;
  p.env = options_.env;
  // A budget per step: the per-step limit caps what one step's kernels hold
  // at once, whatever the graph asks for; the device's (server's) budget
  // above it caps all steps and variables together.
  st->memory = MemoryBudget::Create(
      "the step", options_.device->step_memory_limit(),
      options_.device->memory_budget(),
      "raise MemoryLimits::per_step_bytes (SessionOptions::memory; `cohort "
      "server --max-step-memory`)");
  p.memory_budget = st->memory.get();

  CancellationToken outer_token = 0;
  bool outer_registered = false;
  if (args.cancellation != nullptr) {
    outer_token = args.cancellation->GetCancellationToken();
    StepState* raw = st.get();
    int64_t step = args.step_id;
    outer_registered =
        args.cancellation->RegisterCallback(outer_token, [raw, step] {
          raw->Fail(absl::CancelledError(
              absl::StrCat("step ", step, " was cancelled")));
        });
    if (!outer_registered) {
      return absl::CancelledError(absl::StrCat(
          "step ", args.step_id, " was cancelled before it started"));
    }
  }

  ReadyList ready(roots_.begin(), roots_.end());
  for (size_t k = 0; k < feeds_.size(); ++k) {
    for (const OutEdge& e : feeds_[k].edges) {
      st->slots[e.dst_slot] = args.feeds[k];
      if (e.dst_item >= 0 && st->pending[e.dst_item].fetch_sub(
                                 1, std::memory_order_acq_rel) == 1) {
        ready.push_back(e.dst_item);
      }
    }
  }
  if (!ready.empty()) {
    st->outstanding.store(static_cast<int>(ready.size()),
                          std::memory_order_relaxed);
    RunLoop(st, std::move(ready));
  } else {
    absl::MutexLock lock(&st->mu);
    st->done = true;
  }
  bool finished;
  {
    absl::MutexLock lock(&st->mu);
    finished =
        st->done || options_.env->AwaitWithDeadline(
                        &st->mu, absl::Condition(&st->done), args.deadline);
  }
  if (!finished) {
    st->Fail(absl::DeadlineExceededError(absl::StrCat(
        "step ", args.step_id, " did not finish before its deadline (",
        absl::FormatTime(args.deadline),
        "); increase the run timeout or "
        "check for a Recv whose Send never runs")));
    absl::MutexLock lock(&st->mu);
    st->mu.Await(absl::Condition(&st->done));
  }
  if (outer_registered) args.cancellation->DeregisterCallback(outer_token);
  absl::Status status;
  {
    absl::MutexLock lock(&st->mu);
    status = st->status;
  }
  if (!status.ok()) return status;
  fetches->resize(num_fetches_);
  for (int j = 0; j < num_fetches_; ++j) {
    (*fetches)[j] = std::move(st->slots[fetch_base_ + j]);
  }
  return absl::OkStatus();
}

void Executor::Dispatch(const std::shared_ptr<StepState>& st, ReadyList* ready,
                        ReadyList* inline_ready) {
  // Keep one node (preferably cheap) inline; give expensive ones to the pool
  // when there is other work for this thread.
  for (size_t i = 0; i < ready->size(); ++i) {
    int id = (*ready)[i];
    bool other_work = !inline_ready->empty() || i + 1 < ready->size();
    if (items_[id].expensive && other_work) {
      ReadyList one{id};
      options_.device->Schedule(
          [this, st, one]() mutable { RunLoop(st, std::move(one)); });
    } else {
      inline_ready->push_back(id);
    }
  }
  ready->clear();
}

void Executor::RunLoop(const std::shared_ptr<StepState>& st_ptr,
                       ReadyList initial) {
  // Kernels run with denormals flushed, wherever this loop runs (the
  // caller's thread or the pool's): see denormal.h.
  ScopedFlushDenormal flush_denormals;
  StepState* st = st_ptr.get();
  ReadyList inline_ready;
  ReadyList ready;
  Dispatch(st_ptr, &initial, &inline_ready);
  const bool has_deadline = st->params.deadline != absl::InfiniteFuture();
  while (!inline_ready.empty()) {
    const int id = inline_ready.back();
    inline_ready.pop_back();
    const Item& item = items_[id];
    if (st->aborted.load(std::memory_order_acquire)) {
      NodeDone(st);
      continue;
    }
    if (has_deadline && options_.env->Now() > st->params.deadline) {
      st->Fail(absl::DeadlineExceededError(absl::StrCat(
          "step ", st->params.step_id, " passed its deadline before ",
          NodeDebugName(item.node->def),
          " could run; increase the run timeout")));
      NodeDone(st);
      continue;
    }
    if (item.is_async) {
      struct AsyncCall {
        OpKernelContext::Params params;
        std::unique_ptr<OpKernelContext> ctx;
      };
      auto call = std::make_shared<AsyncCall>();
      call->params = st->params;
      call->params.op_kernel = item.kernel.get();
      call->params.inputs = st->slots.data() + item.input_start;
      call->params.num_inputs = item.num_inputs;
      call->ctx = std::make_unique<OpKernelContext>(&call->params);
      auto* kernel = static_cast<AsyncOpKernel*>(item.kernel.get());
      kernel->ComputeAsync(call->ctx.get(), [this, st_ptr, call, id]() {
        StepState* s = st_ptr.get();
        const Item& it = items_[id];
        ReadyList r;
        absl::Status status = PropagateOutputs(it, call->ctx.get(), s, &r);
        if (!status.ok()) s->Fail(status);
        if (!r.empty()) {
          s->outstanding.fetch_add(static_cast<int>(r.size()),
                                   std::memory_order_relaxed);
          RunLoop(st_ptr, std::move(r));
        }
        NodeDone(s);
      });
      continue;
    }
    OpKernelContext::Params params = st->params;
    params.op_kernel = item.kernel.get();
    params.inputs = st->slots.data() + item.input_start;
    params.num_inputs = item.num_inputs;
    OpKernelContext ctx(&params);
    if (PhaseStats::enabled()) {
      const absl::Time start = options_.env->Now();
      item.kernel->Compute(&ctx);
      PhaseStats::Add(Phase::kKernelCompute, options_.env->Now() - start);
    } else {
      item.kernel->Compute(&ctx);
    }
    absl::Status status = PropagateOutputs(item, &ctx, st, &ready);
    if (!status.ok()) st->Fail(status);
    if (!ready.empty()) {
      st->outstanding.fetch_add(static_cast<int>(ready.size()),
                                std::memory_order_relaxed);
      Dispatch(st_ptr, &ready, &inline_ready);
    }
    NodeDone(st);
  }
}

absl::Status Executor::PropagateOutputs(const Item& item, OpKernelContext* ctx,
                                        StepState* st, ReadyList* ready) {
  // Inputs are no longer needed: release them early.
  for (int i = 0; i < item.num_inputs; ++i)
    st->slots[item.input_start + i] = Tensor();
  if (!ctx->status().ok()) return AttachNodeName(ctx->status(), item.node->def);
  auto& outputs = *ctx->outputs();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    if (!t.IsInitialized()) {
      return absl::InternalError(
          absl::StrCat(NodeDebugName(item.node->def),
                       ": the kernel did not set output ", i));
    }
    if (t.dtype() != item.node->output_types[i]) {
      return absl::InvalidArgumentError(absl::StrCat(
          NodeDebugName(item.node->def), ": output ", i, " has dtype ",
          DataTypeName(t.dtype()), " but the op declares ",
          DataTypeName(item.node->output_types[i])));
    }
  }
  for (const OutEdge& e : item.out_edges) {
    st->slots[e.dst_slot] = outputs[e.src_output];
    if (e.dst_item >= 0 &&
        st->pending[e.dst_item].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      ready->push_back(e.dst_item);
    }
  }
  for (int c : item.control_out) {
    if (st->pending[c].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      ready->push_back(c);
    }
  }
  // The slots hold the outputs now. Drop the kernel context's references,
  // so that a consumer scheduled after this returns and holding the last
  // reference sees its input unshared and may write over it
  // (forward_input_or_allocate_output). A consumer another thread starts
  // earlier just allocates: forwarding is an optimisation, never required.
  for (Tensor& t : outputs) t = Tensor();
  return absl::OkStatus();
}

void Executor::NodeDone(StepState* st, int count) {
  if (st->outstanding.fetch_sub(count, std::memory_order_acq_rel) == count) {
    absl::MutexLock lock(&st->mu);
    st->done = true;
  }
}

}  // namespace cohort
