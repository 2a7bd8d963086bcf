// Worker::Impl's step RPCs: RunGraph and RecvTensor (worker.h).
#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/phase_stats.h"
#include "cohort/base/status.h"
#include "cohort/runtime/worker_errors.h"
#include "cohort/runtime/worker_impl.h"
#include "cohort/runtime/worker_tensor_coding.h"

namespace cohort::runtime {
namespace {

// "x" and "x:0" name the same tensor.
bool SameTensorName(const std::string& a, const std::string& b) {
  return a == b || a == b + ":0" || b == a + ":0";
}

}  // namespace

// Everything one RunGraph needs while its step runs. Members are destroyed
// in reverse order: the graph (its executor points at the session's device)
// goes before the session (which may own that device).
struct Worker::Impl::StepCall {
  std::shared_ptr<WorkerSession> session;
  std::shared_ptr<RegisteredGraph> graph;
  std::shared_ptr<RemoteRendezvous> rendezvous;
  std::shared_ptr<RunningStep> step;
  std::vector<Tensor> feeds;
  absl::Time deadline = absl::InfiniteFuture();
  uint64_t running_id = 0;
};

// One RecvTensor waiting in a step's rendezvous. Shared by the waiter, the
// CallOptions cancel callback and the deadline timer; whichever runs last
// frees it.
struct Worker::Impl::RecvCall {
  CancellationManager cancellation;
  // Set by the deadline timer before it cancels: the waiter then reports
  // DeadlineExceeded instead of Cancelled.
  std::atomic<bool> expired{false};
  uint64_t timer_id = 0;  // Written before the waiter is registered.
};

// --- RunGraph -------------------------------------------------------------

absl::StatusOr<std::vector<Tensor>> Worker::Impl::DecodeFeeds(
    const RunGraphRequest& request, const RegisteredGraph& graph) const {
  const int expected = static_cast<int>(graph.feeds.size());
  if (request.send_size() != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunGraph on ", env_.task_name, ": graph ",
                     request.graph_handle(), " was registered with ", expected,
                     " feeds [", absl::StrJoin(graph.feeds, ", "),
                     "] but the request sends ", request.send_size()));
  }
  std::vector<Tensor> feeds;
  feeds.reserve(expected);
  for (int i = 0; i < expected; ++i) {
    const NamedTensorProto& sent = request.send(i);
    const std::string& want = graph.feeds[i];
    // Names are optional (the order is the contract) but must not lie.
    if (!sent.name().empty() && !SameTensorName(sent.name(), want)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RunGraph on ", env_.task_name, ": send ", i, " is '", sent.name(),
          "' but feed ", i, " of graph ", request.graph_handle(), " is '", want,
          "'; send feeds in RegisterGraph order"));
    }
    COHORT_ASSIGN_OR_RETURN(
        Tensor t,
        DecodeWireTensor(sent.tensor(), absl::StrCat("feed '", want, "'")));
    feeds.push_back(std::move(t));
  }
  return feeds;
}

absl::StatusOr<std::shared_ptr<Worker::Impl::StepCall>>
Worker::Impl::PrepareStep(CallOptions* opts, const RunGraphRequest& request) {
  COHORT_RETURN_IF_ERROR(CheckRunning());
  // Before anything else, as TF: a retried RunGraph must not run a second
  // time, whatever else is wrong with it.
  COHORT_RETURN_IF_ERROR(run_graph_ids_.TrackUnique(
      request.request_id(), "RunGraph (Worker)", request));
  auto call = std::make_shared<StepCall>();
  COHORT_ASSIGN_OR_RETURN(call->session,
                          sessions_.Find(request.session_handle()));
  call->graph = call->session->FindGraph(request.graph_handle());
  if (call->graph == nullptr) {
    return GraphNotFoundError(request.graph_handle());
  }
  COHORT_ASSIGN_OR_RETURN(call->feeds, DecodeFeeds(request, *call->graph));
  COHORT_ASSIGN_OR_RETURN(call->rendezvous,
                          rendezvous_.Find(request.step_id()));
  if (request.timeout_in_ms() > 0) {
    call->deadline =
        env_.env->Now() + absl::Milliseconds(request.timeout_in_ms());
  }
  if (opts != nullptr)
    call->deadline = std::min(call->deadline, opts->deadline());
  call->step = std::make_shared<RunningStep>(request.session_handle(),
                                             request.step_id());
  return call;
}

void Worker::Impl::RunGraph(CallOptions* opts, const RunGraphRequest* request,
                            RunGraphResponse* response,
                            const StatusCallback& done) {
  StartStep(opts, request, response, done, /*on_caller_thread=*/false);
}

void Worker::Impl::StartStep(CallOptions* opts, const RunGraphRequest* request,
                             RunGraphResponse* response,
                             const StatusCallback& done,
                             bool on_caller_thread) {
  auto call = PrepareStep(opts, *request);
  if (!call.ok()) return done(call.status());
  if (absl::Status s = RegisterStep(&(*call)->running_id, (*call)->step);
      !s.ok()) {
    return done(s);
  }
  if (opts != nullptr) {
    // A caller's cancel is a consequence of something else (a sibling
    // partition failed, the client gave up): derived.
    opts->SetCancelCallback([step = (*call)->step] {
      step->Cancel(MarkDerived(absl::CancelledError(
          absl::StrCat("RunGraph of step ", step->step_id(),
                       " was cancelled by its caller"))));
    });
  }
  if (on_caller_thread) {
    // The caller (the master) waits for the step anyway.
    ExecuteStep(*call, opts, response, done);
    return;
  }
  // Executor::Run blocks its thread until the step ends, remote Recvs
  // included; a step thread of its own keeps the caller (a gRPC thread or
  // the master) free, and keeps the device pool free for kernels
  // (worker_thread_pool.h says why that pool grows).
  step_pool_.Schedule([this, call = *std::move(call), opts, response, done] {
    ExecuteStep(call, opts, response, done);
  });
}

void Worker::Impl::ExecuteStep(const std::shared_ptr<StepCall>& call,
                               CallOptions* opts, RunGraphResponse* response,
                               const StatusCallback& done) {
  Executor::RunArgs args;
  args.step_id = call->step->step_id();
  args.feeds = call->feeds;
  args.rendezvous = call->rendezvous.get();
  args.cancellation = call->step->cancellation();
  args.deadline = call->deadline;
  std::vector<Tensor> fetches;
  const bool timed = PhaseStats::enabled();
  const absl::Time started = timed ? env_.env->Now() : absl::Time();
  absl::Status status = call->graph->executor->Run(args, &fetches);
  if (timed) PhaseStats::Add(Phase::kRunGraph, env_.env->Now() - started);
  // Waits for a cancel callback running on another thread, so the caller
  // may free `opts` once `done` ran. (`done` never runs inside that
  // callback: the step answers from this thread.)
  if (opts != nullptr) opts->ClearCancelCallback();
  // Before `done`: once a caller has its answer, the step no longer counts
  // as running (NumRunningSteps). Stop still waits for `done` to return.
  UnregisterStep(call->running_id, /*answering=*/true);
  if (status.ok()) {
    // The master sends no CleanupGraph after a step that succeeded: the
    // step's rendezvous goes once its last tensor is taken
    // (rendezvous_mgr.h).
    rendezvous_.StepSucceeded(call->step->step_id());
  } else {
    // When the worker cancelled the step (Stop, session deleted, caller
    // cancel), that reason is the answer; the executor only saw "cancelled".
    absl::Status why = call->step->reason();
    status = why.ok() ? AttachTaskName(status, env_.task_name) : why;
  }
  for (size_t i = 0; status.ok() && i < fetches.size(); ++i) {
    NamedTensorProto* out = response->add_recv();
    out->set_name(call->graph->fetches[i]);
    status = EncodeWireTensor(
        fetches[i], absl::StrCat("fetch '", call->graph->fetches[i], "'"),
        out->mutable_tensor());
  }
  done(status);
  // Stop returns only after this, so a Server that shuts gRPC down next has
  // no RunGraph left to finish.
  AnswerSent();
}

// --- RecvTensor -----------------------------------------------------------

absl::StatusOr<Rendezvous::ParsedKey> Worker::Impl::CheckRecvKey(
    const RecvTensorRequest& request) const {
  COHORT_ASSIGN_OR_RETURN(Rendezvous::ParsedKey key,
                          Rendezvous::ParseKey(request.rendezvous_key()));
  auto src_task = TaskOfDevice(key.src_device);
  if (!src_task.ok() || *src_task != env_.task_name) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecvTensor: the src device ", key.src_device, " of key '",
                     key.full_key, "' is not on this task (", env_.task_name,
                     "); ask the task that sends it"));
  }
  if (key.src_incarnation != env_.device->incarnation()) {
    return IncarnationMismatchError(key.src_incarnation,
                                    env_.device->incarnation());
  }
  return key;
}

void Worker::Impl::RecvTensor(CallOptions* opts,
                              const RecvTensorRequest* request,
                              RecvTensorResponse* response,
                              const StatusCallback& done) {
  // The gRPC answer is the Tensor-level one, encoded as a TensorProto.
  auto value = std::make_shared<runtime::RecvTensorValue>();
  RecvTensorAsTensor(
      opts, request, value.get(),
      [request, response, value, done](absl::Status s) {
        if (s.ok()) {
          s = EncodeWireTensor(
              value->tensor,
              absl::StrCat("RecvTensor '", request->rendezvous_key(), "'"),
              response->mutable_tensor());
          response->set_is_dead(value->is_dead);
          response->set_send_start_micros(value->send_start_micros);
        }
        done(s);
      });
}

void Worker::Impl::RecvTensorAsTensor(CallOptions* opts,
                                      const RecvTensorRequest* request,
                                      runtime::RecvTensorValue* value,
                                      const StatusCallback& done) {
  if (absl::Status s = CheckRunning(); !s.ok()) return done(s);
  if (absl::Status s = recv_tensor_ids_.TrackUnique(
          request->request_id(), "RecvTensor (GrpcWorker)", *request);
      !s.ok()) {
    return done(s);
  }
  auto key = CheckRecvKey(*request);
  if (!key.ok()) return done(key.status());
  // Creates the step's rendezvous when the RecvTensor comes before the
  // producer's RunGraph (§1.4); refuses a cleaned-up step at once.
  auto rendezvous = rendezvous_.Find(request->step_id());
  if (!rendezvous.ok()) return done(rendezvous.status());

  auto call = std::make_shared<RecvCall>();
  if (opts != nullptr) {
    // A cancelled waiter answers from the thread that cancels it. Doing that
    // inside the caller's StartCancel would let the caller free its
    // CallOptions while StartCancel still uses them, so the cancel is handed
    // to the timer thread (due at once). Runs at once if the caller already
    // cancelled; the waiter below then answers Cancelled without waiting.
    opts->SetCancelCallback([this, call] {
      timer_.Schedule(absl::InfinitePast(),
                      [call] { call->cancellation.StartCancel(); });
    });
  }
  const absl::Time deadline =
      opts != nullptr ? opts->deadline() : absl::InfiniteFuture();
  if (deadline != absl::InfiniteFuture()) {
    // A timer, not a waiting thread: RecvTensor never holds a thread.
    call->timer_id = timer_.Schedule(deadline, [call] {
      call->expired.store(true, std::memory_order_release);
      call->cancellation.StartCancel();
    });
  }
  const int64_t step_id = request->step_id();
  (*rendezvous)
      ->RecvLocalAsync(
          *key, &call->cancellation,
          [this, call, opts, value, done, step_id, k = key->full_key](
              const absl::Status& status, const Tensor& tensor,
              absl::Time sent_at) {
            if (call->timer_id != 0) timer_.Cancel(call->timer_id);
            // Safe to wait: this never runs inside the opts callback, which
            // only hands the cancel to the timer thread.
            if (opts != nullptr) opts->ClearCancelCallback();
            absl::Status s = status;
            if (!s.ok() && call->expired.load(std::memory_order_acquire)) {
              s = absl::DeadlineExceededError(
                  absl::StrCat("RecvTensor of '", k, "' for step ", step_id,
                               " on ", env_.task_name,
                               " passed its deadline before the tensor "
                               "was sent"));
            }
            if (s.ok()) {
              // Shares the sender's buffer: no copy until a transport
              // encodes it (gRPC) or writes it out (the data plane).
              value->tensor = tensor;
              value->is_dead = false;
              value->send_start_micros = absl::ToUnixMicros(sent_at);
            }
            // Before `done`, after which this worker may be gone.
            if (s.ok()) rendezvous_.TakenFrom(step_id);
            done(s);
          });
}

}  // namespace cohort::runtime
