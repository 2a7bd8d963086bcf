#include "cohort/runtime/master_session.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/backoff.h"
#include "cohort/base/env.h"
#include "cohort/base/logging.h"
#include "cohort/base/phase_stats.h"
#include "cohort/base/status.h"
#include "cohort/runtime/device_name.h"
#include "cohort/runtime/parallel_calls.h"
#include "cohort/runtime/partition.h"
#include "cohort/runtime/worker_errors.h"

namespace cohort::runtime {
namespace {

// TensorFlow's defaults: discovery waits this long without an operation
// timeout (TF waits forever, tensorflow#14489), logs every 10 s, and the
// session's bookkeeping calls to workers (create, close) get 10 s each.
constexpr absl::Duration kDefaultDiscoveryTimeout = absl::Seconds(60);
constexpr absl::Duration kStillWaitingLogInterval = absl::Seconds(10);
constexpr absl::Duration kCloseCallTimeout = absl::Seconds(10);
// Retry pace for tasks that are not up yet during discovery.
constexpr absl::Duration kDiscoveryRetryMin = absl::Milliseconds(50);
constexpr absl::Duration kDiscoveryRetryMax = absl::Seconds(1);
constexpr absl::Duration kDiscoveryRound = absl::Seconds(3);
// Bounds on what one client can make a session hold.
constexpr size_t kMaxSignatures = 4096;
constexpr size_t kMaxCallables = 4096;

// "x" and "x:0" name the same tensor; signatures and partitions compare the
// canonical form.
std::string CanonicalTensorName(const std::string& name) {
  auto id = Graph::ParseTensorName(name);
  if (!id.ok() || id->control) return name;
  return absl::StrCat(id->node, ":", id->index);
}

std::string SignatureKey(const std::vector<std::string>& feeds,
                         const std::vector<std::string>& fetches,
                         const std::vector<std::string>& targets) {
  // '\n' cannot appear in a node name, so the key is unambiguous.
  return absl::StrCat(absl::StrJoin(feeds, "\n"), "\n\n",
                      absl::StrJoin(fetches, "\n"), "\n\n",
                      absl::StrJoin(targets, "\n"));
}

absl::Status WithPrefix(const absl::Status& s, const std::string& prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace

// One partition of a registered signature.
struct PartitionHandle {
  std::string task;
  WorkerInterface* worker = nullptr;
  std::string graph_handle;
  int num_feeds = 0;
  int num_fetches = 0;
};

struct MasterSession::Signature {
  std::vector<PartitionHandle> partitions;
  // For each client feed / fetch (signature order): which partition and
  // which position in that partition's feed / fetch list; partition -1 for
  // a feed that pruning left unused.
  std::vector<std::pair<int, int>> feed_at;
  std::vector<std::pair<int, int>> fetch_at;
  RunOptionsProto run_options;  // Callables only.
};

MasterSession::MasterSession(const MasterEnv* env, std::string handle,
                             const ConfigProto& config)
    : env_(env),
      handle_(std::move(handle)),
      config_(config),
      // Step ids leave the top 7 bits clear (TF); a random base keeps ids
      // of different sessions apart, the counter those of one session.
      step_id_base_(RandomNonZeroId() & ((uint64_t{1} << 56) - 1)),
      last_access_(env->env->Now()) {}

MasterSession::~MasterSession() {
  Close(absl::CancelledError("the session was destroyed"));
}

uint64_t MasterSession::NewStepId() {
  for (;;) {
    uint64_t id =
        (step_id_base_ + next_step_.fetch_add(1)) & ((uint64_t{1} << 56) - 1);
    if (id != 0) return id;
  }
}

absl::StatusOr<std::shared_ptr<MasterSession>> MasterSession::Create(
    const MasterEnv* env, std::string handle, const GraphDef& graph,
    const ConfigProto& config, CallOptions* opts,
    const std::function<bool()>& stop) {
  if (config.inter_op_parallelism_threads() < 0 ||
      config.intra_op_parallelism_threads() < 0) {
    return absl::InvalidArgumentError(
        "CreateSession: thread counts in the session config must not be "
        "negative");
  }
  std::shared_ptr<MasterSession> session(
      new MasterSession(env, std::move(handle), config));
  COHORT_ASSIGN_OR_RETURN(auto g, Graph::FromGraphDef(graph, env->op_registry));
  {
    absl::MutexLock lock(&session->graph_mu_);
    session->graph_ = std::move(g);
  }
  COHORT_RETURN_IF_ERROR(session->Discover(opts, stop));
  COHORT_RETURN_IF_ERROR(session->CreateWorkerSessions());
  return session;
}

absl::Status MasterSession::Discover(CallOptions* opts,
                                     const std::function<bool()>& stop) {
  std::vector<DeviceName> filters;
  for (const std::string& f : config_.device_filters()) {
    COHORT_ASSIGN_OR_RETURN(DeviceName filter, DeviceName::Parse(f));
    filters.push_back(filter);
  }
  std::vector<std::string> pending;
  for (const std::string& task : env_->workers->ListTasks()) {
    bool wanted = filters.empty() || task == env_->task;
    auto name = DeviceName::Parse(task);
    for (const DeviceName& f : filters) {
      if (name.ok() && name->Matches(f)) wanted = true;
    }
    if (wanted) pending.push_back(task);
  }

  Env* clock = env_->env;
  const absl::Duration timeout =
      config_.operation_timeout_in_ms() > 0
          ? absl::Milliseconds(config_.operation_timeout_in_ms())
          : kDefaultDiscoveryTimeout;
  const absl::Time deadline = clock->Now() + timeout;
  absl::Time next_log = clock->Now() + kStillWaitingLogInterval;
  Backoff backoff(kDiscoveryRetryMin, kDiscoveryRetryMax);
  absl::flat_hash_map<std::string, DeviceAttributes> found;
  absl::flat_hash_map<std::string, absl::Status> last_error;
  // Tasks that are not up yet (Unavailable) are asked again until the
  // deadline: a cluster's processes start in any order.
  while (!pending.empty()) {
    std::vector<GetStatusRequest> requests(pending.size());
    std::vector<GetStatusResponse> responses(pending.size());
    std::vector<std::unique_ptr<CallOptions>> round;
    // A round ends within kDiscoveryRound even when a task hangs, so that a
    // cancelled CreateSession or a stopping master is noticed.
    const absl::Time round_end =
        std::min(deadline, clock->Now() + kDiscoveryRound);
    for (size_t i = 0; i < pending.size(); ++i) {
      round.push_back(std::make_unique<CallOptions>());
      round.back()->set_deadline(round_end);
    }
    std::vector<absl::Status> statuses =
        CallAll(pending.size(), [&](int i, StatusCallback done) {
          auto worker = env_->workers->GetWorker(pending[i]);
          if (!worker.ok()) return done(worker.status());
          (*worker)->GetStatusAsync(round[i].get(), &requests[i], &responses[i],
                                    std::move(done));
        });
    std::vector<std::string> again;
    for (size_t i = 0; i < pending.size(); ++i) {
      const std::string& task = pending[i];
      const absl::Status& s = statuses[i];
      if (s.ok() && responses[i].device_attributes_size() > 0) {
        found[task] = responses[i].device_attributes(0);
      } else if (s.ok() || absl::IsUnavailable(s) ||
                 absl::IsDeadlineExceeded(s)) {
        last_error[task] = s.ok() ? absl::InternalError("no devices") : s;
        again.push_back(task);
      } else {
        return WithPrefix(
            s, absl::StrCat("CreateSession: ", task, " (",
                            env_->workers->TaskAddress(task), "): "));
      }
    }
    pending = std::move(again);
    if (pending.empty()) break;
    // A task the coordination service already declared lost will not
    // answer by the deadline either: say so now.
    if (env_->lost_task_status) {
      for (const std::string& task : pending) {
        absl::Status lost = env_->lost_task_status(task);
        if (!lost.ok()) {
          return absl::UnavailableError(absl::StrCat(
              "CreateSession: ", task, " (", env_->workers->TaskAddress(task),
              ") did not answer and is known to be lost: ", lost.message()));
        }
      }
    }
    if ((opts != nullptr && opts->cancelled()) || (stop && stop())) {
      return absl::CancelledError(
          "CreateSession was cancelled (by the client, or the master is "
          "stopping) while waiting for tasks to answer");
    }
    const absl::Time now = clock->Now();
    if (now >= deadline) {
      std::vector<std::string> silent;
      for (const std::string& task : pending) {
        silent.push_back(absl::StrCat(task, " (",
                                      env_->workers->TaskAddress(task),
                                      "): ", last_error[task].message()));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "CreateSession: no response within ", absl::FormatDuration(timeout),
          " from ", absl::StrJoin(silent, "; "),
          ". Check that these tasks are running and reachable, or raise "
          "operation_timeout_in_ms."));
    }
    if (now >= next_log) {
      for (const std::string& task : pending) {
        COHORT_LOG(INFO) << "CreateSession still waiting for response from "
                            "worker: "
                         << task;
      }
      next_log = now + kStillWaitingLogInterval;
    }
    clock->SleepFor(std::min(backoff.Next(), deadline - now));
  }
  std::vector<std::string> tasks;
  for (const auto& [task, device] : found) tasks.push_back(task);
  std::sort(tasks.begin(), tasks.end());
  for (const std::string& task : tasks) {
    tasks_.push_back(task);
    devices_.push_back(found[task]);
  }
  return absl::OkStatus();
}

absl::Status MasterSession::CreateWorkerSessions() {
  std::vector<CreateWorkerSessionRequest> requests(tasks_.size());
  std::vector<CreateWorkerSessionResponse> responses(tasks_.size());
  std::vector<CallOptions> opts(tasks_.size());
  std::vector<absl::Status> statuses =
      CallAll(tasks_.size(), [&](int i, StatusCallback done) {
        CreateWorkerSessionRequest& r = requests[i];
        r.set_session_handle(handle_);
        // The cluster as the master knows it, with the worker's own job and
        // task (TF): the worker checks they name it.
        *r.mutable_server_def() = env_->server_def;
        auto name = DeviceName::Parse(tasks_[i]);
        if (name.ok()) {
          r.mutable_server_def()->set_job_name(name->job);
          r.mutable_server_def()->set_task_index(name->task);
        }
        r.set_isolate_session_state(config_.isolate_session_state());
        r.set_master_task(env_->task);
        r.set_master_incarnation(env_->incarnation);
        opts[i].set_deadline(env_->env->Now() + kCloseCallTimeout);
        auto worker = env_->workers->GetWorker(tasks_[i]);
        if (!worker.ok()) return done(worker.status());
        (*worker)->CreateWorkerSessionAsync(&opts[i], &r, &responses[i],
                                            std::move(done));
      });
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (!statuses[i].ok()) {
      return WithPrefix(
          statuses[i],
          absl::StrCat("CreateSession: ", tasks_[i], " (",
                       env_->workers->TaskAddress(tasks_[i]), "): "));
    }
  }
  return absl::OkStatus();
}

absl::Status MasterSession::CheckOpen() const {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::FailedPreconditionError("Session is closed.");
  return absl::OkStatus();
}

void MasterSession::Touch() {
  absl::MutexLock lock(&mu_);
  last_access_ = env_->env->Now();
}

absl::Time MasterSession::last_access() const {
  absl::MutexLock lock(&mu_);
  return last_access_;
}

bool MasterSession::running() const {
  absl::MutexLock lock(&mu_);
  return !running_.empty();
}

absl::StatusOr<int64_t> MasterSession::Extend(const GraphDef& graph,
                                              int64_t current_version) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  Touch();
  absl::MutexLock lock(&graph_mu_);
  if (current_version != graph_version_) {
    return absl::AbortedError(
        absl::StrCat("Current version is ", graph_version_,
                     " but caller expected ", current_version, "."));
  }
  COHORT_RETURN_IF_ERROR(graph_->Extend(graph));
  return ++graph_version_;
}

absl::StatusOr<std::shared_ptr<MasterSession::Signature>>
MasterSession::GetOrRegister(const std::vector<std::string>& feeds,
                             const std::vector<std::string>& fetches,
                             const std::vector<std::string>& targets,
                             absl::Time deadline) {
  const std::string key = SignatureKey(feeds, fetches, targets);
  {
    absl::MutexLock lock(&mu_);
    auto it = signatures_.find(key);
    if (it != signatures_.end()) return it->second;
    // Each signature holds registered graphs on the workers; a client that
    // varies its fetches without end must not grow them without end.
    if (signatures_.size() >= kMaxSignatures) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "session ", handle_, " already has ", kMaxSignatures,
          " distinct (feeds, fetches, targets) signatures registered; reuse "
          "signatures (MakeCallable) or create a new session"));
    }
  }
  // Two first runs of one signature may both register; the loser's graphs
  // are deregistered below, so the workers keep one copy.
  COHORT_ASSIGN_OR_RETURN(auto sig,
                          Register(feeds, fetches, targets, deadline));
  std::shared_ptr<Signature> existing;
  {
    absl::MutexLock lock(&mu_);
    auto [it, inserted] = signatures_.emplace(key, sig);
    if (!inserted) existing = it->second;
  }
  if (existing != nullptr) {
    Deregister(*sig);
    return existing;
  }
  return sig;
}

// The RegisterGraph calls of one signature.
struct MasterSession::Registration : MasterSession::Running {
  explicit Registration(size_t n) : opts(n) {}
  void Abort(const absl::Status& why) override {
    {
      absl::MutexLock lock(&mu);
      if (forced_.ok()) forced_ = why;
    }
    for (CallOptions& o : opts) o.StartCancel();
  }
  absl::Status forced() {
    absl::MutexLock lock(&mu);
    return forced_;
  }
  std::vector<CallOptions> opts;
  absl::Mutex mu;
  absl::Status forced_ ABSL_GUARDED_BY(mu);
};

absl::Status MasterSession::AddRunning(Running* r) {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::FailedPreconditionError("Session is closed.");
  running_.insert(r);
  return absl::OkStatus();
}

void MasterSession::RemoveRunning(Running* r) {
  absl::MutexLock lock(&mu_);
  running_.erase(r);
  // A step that just ended counts as use: GC measures idleness from here.
  last_access_ = env_->env->Now();
}

absl::StatusOr<std::shared_ptr<MasterSession::Signature>>
MasterSession::Register(const std::vector<std::string>& feeds,
                        const std::vector<std::string>& fetches,
                        const std::vector<std::string>& targets,
                        absl::Time deadline) {
  PartitionOptions po;
  po.devices = devices_;
  po.default_device = env_->device;
  po.allow_soft_placement = config_.allow_soft_placement();
  std::vector<Partition> parts;
  {
    absl::ReaderMutexLock lock(&graph_mu_);
    COHORT_ASSIGN_OR_RETURN(
        parts, PartitionGraph(*graph_, feeds, fetches, targets, po));
  }
  auto sig = std::make_shared<Signature>();
  sig->feed_at.assign(feeds.size(), {-1, -1});
  sig->fetch_at.assign(fetches.size(), {-1, -1});
  std::vector<RegisterGraphRequest> requests(parts.size());
  std::vector<RegisterGraphResponse> responses(parts.size());
  Registration reg(parts.size());
  for (size_t p = 0; p < parts.size(); ++p) {
    PartitionHandle h;
    h.task = parts[p].task;
    COHORT_ASSIGN_OR_RETURN(h.worker, env_->workers->GetWorker(h.task));
    h.num_feeds = parts[p].feeds.size();
    h.num_fetches = parts[p].fetches.size();
    sig->partitions.push_back(h);
    RegisterGraphRequest& r = requests[p];
    r.set_session_handle(handle_);
    *r.mutable_graph_def() = std::move(parts[p].graph_def);
    *r.mutable_config() = config_;
    for (const auto& f : parts[p].feeds) r.add_feed(f);
    for (const auto& f : parts[p].fetches) r.add_fetch(f);
    for (const auto& t : parts[p].targets) r.add_target(t);
    // Map the client's feeds and fetches onto partition positions.
    for (size_t i = 0; i < parts[p].feeds.size(); ++i) {
      for (size_t c = 0; c < feeds.size(); ++c) {
        if (CanonicalTensorName(feeds[c]) ==
            CanonicalTensorName(parts[p].feeds[i])) {
          sig->feed_at[c] = {static_cast<int>(p), static_cast<int>(i)};
        }
      }
    }
    for (size_t i = 0; i < parts[p].fetches.size(); ++i) {
      for (size_t c = 0; c < fetches.size(); ++c) {
        if (sig->fetch_at[c].first < 0 &&
            CanonicalTensorName(fetches[c]) ==
                CanonicalTensorName(parts[p].fetches[i])) {
          sig->fetch_at[c] = {static_cast<int>(p), static_cast<int>(i)};
        }
      }
    }
  }
  for (size_t c = 0; c < fetches.size(); ++c) {
    if (sig->fetch_at[c].first < 0) {
      return absl::InternalError(
          absl::StrCat("no partition produces fetch '", fetches[c], "'"));
    }
  }
  for (const PartitionHandle& h : sig->partitions) reg.tasks.push_back(h.task);
  for (CallOptions& o : reg.opts) o.set_deadline(deadline);
  COHORT_RETURN_IF_ERROR(AddRunning(&reg));
  std::vector<absl::Status> statuses =
      CallAll(parts.size(), [&](int p, StatusCallback done) {
        sig->partitions[p].worker->RegisterGraphAsync(
            &reg.opts[p], &requests[p], &responses[p], std::move(done));
      });
  RemoveRunning(&reg);
  absl::Status first = reg.forced();
  for (size_t p = 0; p < parts.size(); ++p) {
    if (statuses[p].ok()) {
      sig->partitions[p].graph_handle = responses[p].graph_handle();
    } else if (first.ok()) {
      first = WithPrefix(
          statuses[p],
          absl::StrCat("RegisterGraph on ", sig->partitions[p].task, ": "));
    }
  }
  if (!first.ok()) {
    Deregister(*sig);
    return first;
  }
  return sig;
}

void MasterSession::Deregister(const Signature& sig) {
  const int n = sig.partitions.size();
  std::vector<DeregisterGraphRequest> requests(n);
  std::vector<DeregisterGraphResponse> responses(n);
  std::vector<CallOptions> opts(n);
  CallAll(n, [&](int p, StatusCallback done) {
    const PartitionHandle& h = sig.partitions[p];
    if (h.graph_handle.empty()) return done(absl::OkStatus());
    requests[p].set_session_handle(handle_);
    requests[p].set_graph_handle(h.graph_handle);
    opts[p].set_deadline(env_->env->Now() + kCloseCallTimeout);
    h.worker->DeregisterGraphAsync(&opts[p], &requests[p], &responses[p],
                                   std::move(done));
  });
}

absl::Time MasterSession::RegisterDeadline(int64_t timeout_in_ms) const {
  // Registration is part of the first step of a signature and shares its
  // deadline; without one it still gets the discovery bound, as a call that
  // must not wait forever on a hung worker.
  const absl::Time step = StepDeadline(timeout_in_ms);
  return std::min(step, env_->env->Now() + kDefaultDiscoveryTimeout);
}

absl::Duration MasterSession::StepTimeout(int64_t timeout_in_ms) const {
  if (timeout_in_ms <= 0) timeout_in_ms = config_.operation_timeout_in_ms();
  if (timeout_in_ms > 0) return absl::Milliseconds(timeout_in_ms);
  return env_->default_step_timeout;
}

absl::Time MasterSession::StepDeadline(int64_t timeout_in_ms) const {
  const absl::Duration timeout = StepTimeout(timeout_in_ms);
  if (timeout == absl::InfiniteDuration()) return absl::InfiniteFuture();
  return env_->env->Now() + timeout;
}

absl::Status MasterSession::Run(CallOptions* opts,
                                const RunStepRequest& request,
                                RunStepResponse* response) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  Touch();
  std::vector<std::string> feeds, fetches, targets;
  absl::flat_hash_set<std::string> seen;
  std::vector<const TensorProto*> feed_values;
  for (const NamedTensorProto& f : request.feed()) {
    if (!seen.insert(CanonicalTensorName(f.name())).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("Duplicated feeds: ", f.name()));
    }
    feeds.push_back(f.name());
    feed_values.push_back(&f.tensor());
  }
  fetches.assign(request.fetch().begin(), request.fetch().end());
  targets.assign(request.target().begin(), request.target().end());
  COHORT_ASSIGN_OR_RETURN(
      auto sig,
      GetOrRegister(feeds, fetches, targets,
                    RegisterDeadline(request.options().timeout_in_ms())));
  std::vector<TensorProto> out;
  COHORT_RETURN_IF_ERROR(RunSignature(opts, *sig, std::move(feed_values),
                                      request.options().timeout_in_ms(), &out));
  for (size_t i = 0; i < out.size(); ++i) {
    NamedTensorProto* t = response->add_tensor();
    t->set_name(fetches[i]);
    *t->mutable_tensor() = std::move(out[i]);
  }
  return absl::OkStatus();
}

// The state of one step: every partition's RunGraph call.
struct MasterSession::Step : MasterSession::Running {
  struct Call {
    CallOptions opts;
    RunGraphRequest request;
    RunGraphResponse response;
    absl::Status status;
    bool done = false;
  };
  explicit Step(size_t n) : calls(n) {}

  // Cancels every call still running (each call's done runs at most once,
  // and takes only `mu`).
  void CancelAll() {
    for (Call& c : calls) c.opts.StartCancel();
  }
  // Ends the step from outside (Close, the client, a lost task): it then
  // answers `why` whatever its calls return.
  void Abort(const absl::Status& why) override {
    {
      absl::MutexLock lock(&mu);
      if (forced.ok()) forced = why;
    }
    CancelAll();
  }
  // A partition's RunGraph finished.
  void OnCallDone(size_t p, const absl::Status& s) {
    bool cancel = false;
    {
      absl::MutexLock lock(&mu);
      calls[p].status = s;
      calls[p].done = true;
      // The first error is the root cause, unless it is derived (a
      // cancelled partition, an aborted rendezvous: consequences of another
      // error); a derived error never replaces a root one. The first error
      // of any kind cancels the other calls, so a Cancelled answer after it
      // is this step's own doing, derived too (it hid the lost ps's
      // Unavailable from MonitoredSession's recovery).
      if (!s.ok()) {
        const bool derived =
            IsDerivedError(s) || (root >= 0 && absl::IsCancelled(s));
        if (root < 0) cancel = true;
        if (root < 0 || (root_derived && !derived)) {
          root = p;
          root_derived = derived;
        }
      }
    }
    if (cancel) CancelAll();
    // Last: once pending is 0 the step may be freed by its thread.
    absl::MutexLock lock(&mu);
    --pending;
  }

  std::vector<Call> calls;
  absl::Mutex mu;
  int pending ABSL_GUARDED_BY(mu) = 0;
  // The call whose error is the step's root cause; -1 while none failed.
  int root ABSL_GUARDED_BY(mu) = -1;
  bool root_derived ABSL_GUARDED_BY(mu) = false;
  // Why the step was ended from outside; OK when it was not.
  absl::Status forced ABSL_GUARDED_BY(mu);
};

absl::Status MasterSession::RunSignature(CallOptions* opts,
                                         const Signature& sig,
                                         std::vector<const TensorProto*> feeds,
                                         int64_t timeout_in_ms,
                                         std::vector<TensorProto>* fetches) {
  const uint64_t step_id = NewStepId();
  const bool timed = PhaseStats::enabled();
  const absl::Time started = timed ? env_->env->Now() : absl::Time();
  const absl::Time deadline = StepDeadline(timeout_in_ms);
  const size_t n = sig.partitions.size();
  Step step(n);
  for (size_t p = 0; p < n; ++p) step.tasks.push_back(sig.partitions[p].task);
  for (size_t p = 0; p < n; ++p) {
    RunGraphRequest& r = step.calls[p].request;
    r.set_session_handle(handle_);
    r.set_graph_handle(sig.partitions[p].graph_handle);
    r.set_step_id(step_id);
    r.set_request_id(NewRequestId());
    for (int i = 0; i < sig.partitions[p].num_feeds; ++i) r.add_send();
    step.calls[p].opts.set_deadline(deadline);
    if (deadline != absl::InfiniteFuture()) {
      r.set_timeout_in_ms(std::max<int64_t>(
          1, absl::ToInt64Milliseconds(deadline - env_->env->Now())));
    }
  }
  for (size_t c = 0; c < feeds.size(); ++c) {
    auto [p, i] = sig.feed_at[c];
    if (p < 0) continue;  // Pruned away: no partition needs this feed.
    NamedTensorProto* send = step.calls[p].request.mutable_send(i);
    *send->mutable_tensor() = *feeds[c];
  }

  // A step can be ended by Close and AbortStepsOn (through running_) and
  // by the caller.
  COHORT_RETURN_IF_ERROR(AddRunning(&step));
  {
    absl::MutexLock lock(&step.mu);
    step.pending = n;
  }
  if (opts != nullptr) {
    opts->SetCancelCallback(
        [&step] { step.Abort(absl::CancelledError("Step was cancelled")); });
  }

  // Other tasks' partitions first; this task's partition last, on this
  // thread, which waits for the step anyway (it starts at once, and its
  // end wakes nobody).
  int local = -1;
  for (size_t p = 0; p < n; ++p) {
    if (local < 0 && sig.partitions[p].task == env_->task) {
      local = static_cast<int>(p);
      continue;
    }
    Step::Call& call = step.calls[p];
    sig.partitions[p].worker->RunGraphAsync(
        &call.opts, &call.request, &call.response,
        [&step, p](const absl::Status& s) { step.OnCallDone(p, s); });
  }
  if (local >= 0) {
    Step::Call& call = step.calls[local];
    sig.partitions[local].worker->RunGraphOnCallerThread(
        &call.opts, &call.request, &call.response,
        [&step, local](const absl::Status& s) { step.OnCallDone(local, s); });
  }
  const absl::Time local_done = timed ? env_->env->Now() : absl::Time();

  std::vector<std::string> still_running;
  {
    absl::MutexLock lock(&step.mu);
    auto all_done = [&step]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(step.mu) {
      return step.pending == 0;
    };
    if (!env_->env->AwaitWithDeadline(&step.mu, absl::Condition(&all_done),
                                      deadline)) {
      for (size_t p = 0; p < n; ++p) {
        if (!step.calls[p].done)
          still_running.push_back(sig.partitions[p].task);
      }
    }
  }
  if (!still_running.empty()) step.CancelAll();
  {
    absl::MutexLock lock(&step.mu);
    step.mu.Await(absl::Condition(
        +[](int* pending) { return *pending == 0; }, &step.pending));
  }
  if (opts != nullptr) opts->ClearCancelCallback();
  if (timed) {
    const absl::Time end = env_->env->Now();
    PhaseStats::Add(Phase::kMasterStep, end - started);
    if (local >= 0 && n > 1) {
      PhaseStats::Add(Phase::kRemotePartitionsWait, end - local_done);
    }
  }
  RemoveRunning(&step);
  bool succeeded = false;
  {
    absl::MutexLock lock(&step.mu);
    succeeded = step.forced.ok() && still_running.empty() && step.root < 0;
  }
  // A worker whose partition succeeded forgets the step by itself once its
  // sent tensors were taken (rendezvous_mgr.h), and in a step where every
  // partition succeeded every tensor was taken: only a failed step leaves
  // state (parked tensors, waiting Recvs) for CleanupGraph to drop.
  if (!succeeded) CleanupStep(sig, step_id);

  absl::MutexLock lock(&step.mu);
  if (!step.forced.ok()) return step.forced;
  if (!still_running.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "step ", step_id, " timed out after ",
        absl::FormatDuration(StepTimeout(timeout_in_ms)),
        "; still waiting for ", absl::StrJoin(still_running, ", "),
        " (RunGraph). Check those tasks (a hung op, a Recv nothing sends); "
        "a longer step needs operation_timeout_in_ms or the server's "
        "--step-timeout"));
  }
  if (step.root >= 0) return step.calls[step.root].status;
  for (size_t p = 0; p < n; ++p) {
    // A worker that answers OK must answer every registered fetch; anything
    // else (a version-skewed or impostor worker) must not index past it.
    if (step.calls[p].response.recv_size() != sig.partitions[p].num_fetches) {
      return absl::InternalError(absl::StrCat(
          "RunGraph on ", sig.partitions[p].task, " returned ",
          step.calls[p].response.recv_size(), " tensors for ",
          sig.partitions[p].num_fetches,
          " registered fetches; check that every task runs the same cohort "
          "version"));
    }
  }
  fetches->clear();
  for (auto [p, i] : sig.fetch_at) {
    fetches->push_back(step.calls[p].response.recv(i).tensor());
  }
  return absl::OkStatus();
}

void MasterSession::CleanupStep(const Signature& sig, int64_t step_id) {
  // Fire and forget (TF CleanupPartitionsAsync): the step's result does not
  // wait for its per-step state to be dropped. One call per task.
  absl::flat_hash_set<WorkerInterface*> done_tasks;
  for (const PartitionHandle& h : sig.partitions) {
    if (!done_tasks.insert(h.worker).second) continue;
    struct Call {
      CallOptions opts;
      CleanupGraphRequest request;
      CleanupGraphResponse response;
    };
    auto* call = new Call;
    call->request.set_step_id(step_id);
    call->opts.set_deadline(env_->env->Now() + kCloseCallTimeout);
    h.worker->CleanupGraphAsync(&call->opts, &call->request, &call->response,
                                [call](const absl::Status&) { delete call; });
  }
}

absl::StatusOr<int64_t> MasterSession::MakeCallable(
    const CallableOptionsProto& options) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  Touch();
  std::vector<std::string> feeds(options.feed().begin(), options.feed().end());
  std::vector<std::string> fetches(options.fetch().begin(),
                                   options.fetch().end());
  std::vector<std::string> targets(options.target().begin(),
                                   options.target().end());
  COHORT_ASSIGN_OR_RETURN(
      auto registered,
      GetOrRegister(feeds, fetches, targets,
                    RegisterDeadline(options.run_options().timeout_in_ms())));
  // A callable shares the registered partitions but has its own options.
  auto sig = std::make_shared<Signature>(*registered);
  sig->run_options = options.run_options();
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::FailedPreconditionError("Session is closed.");
  if (callables_.size() >= kMaxCallables) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session ", handle_, " already has ", kMaxCallables,
                     " callables; release some (ReleaseCallable)"));
  }
  const int64_t handle = next_callable_++;
  callables_[handle] = std::move(sig);
  return handle;
}

absl::Status MasterSession::RunCallable(CallOptions* opts,
                                        const RunCallableRequest& request,
                                        RunCallableResponse* response) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  Touch();
  std::shared_ptr<Signature> sig;
  {
    absl::MutexLock lock(&mu_);
    auto it = callables_.find(request.handle());
    if (it == callables_.end()) {
      if (request.handle() >= 0 && request.handle() < next_callable_) {
        return absl::InvalidArgumentError(
            absl::StrCat("Attempted to run callable after handle was "
                         "released: ",
                         request.handle()));
      }
      return absl::InvalidArgumentError(
          absl::StrCat("No such callable handle: ", request.handle()));
    }
    sig = it->second;
  }
  if (request.feed_size() != static_cast<int>(sig->feed_at.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunCallable: the callable takes ", sig->feed_at.size(),
                     " feeds, got ", request.feed_size()));
  }
  std::vector<const TensorProto*> feeds;
  for (const TensorProto& t : request.feed()) feeds.push_back(&t);
  std::vector<TensorProto> out;
  COHORT_RETURN_IF_ERROR(RunSignature(opts, *sig, std::move(feeds),
                                      sig->run_options.timeout_in_ms(), &out));
  for (TensorProto& t : out) *response->add_fetch() = std::move(t);
  return absl::OkStatus();
}

absl::Status MasterSession::ReleaseCallable(int64_t handle) {
  COHORT_RETURN_IF_ERROR(CheckOpen());
  Touch();
  absl::MutexLock lock(&mu_);
  callables_.erase(handle);  // An unknown handle is fine (TF).
  return absl::OkStatus();
}

void MasterSession::AbortStepsOn(const std::string& task,
                                 const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  for (Running* r : running_) {
    for (const std::string& t : r->tasks) {
      if (t == task) {
        r->Abort(status);
        break;
      }
    }
  }
}

void MasterSession::Close(const absl::Status& why) {
  std::vector<std::shared_ptr<Signature>> signatures;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    // Cancelled under mu_ so that no step can leave (and free itself) in
    // between; a step's cancellation takes only its own lock (order: mu_,
    // then Step::mu).
    for (Running* r : running_) r->Abort(why);
    mu_.Await(absl::Condition(
        +[](absl::flat_hash_set<Running*>* r) { return r->empty(); },
        &running_));
    for (auto& [key, sig] : signatures_) signatures.push_back(sig);
    signatures_.clear();
    callables_.clear();
  }
  for (const auto& sig : signatures) Deregister(*sig);
  const int n = tasks_.size();
  std::vector<DeleteWorkerSessionRequest> requests(n);
  std::vector<DeleteWorkerSessionResponse> responses(n);
  std::vector<CallOptions> opts(n);
  std::vector<absl::Status> statuses =
      CallAll(n, [&](int i, StatusCallback done) {
        auto worker = env_->workers->GetWorker(tasks_[i]);
        if (!worker.ok()) return done(worker.status());
        requests[i].set_session_handle(handle_);
        opts[i].set_deadline(env_->env->Now() + kCloseCallTimeout);
        (*worker)->DeleteWorkerSessionAsync(&opts[i], &requests[i],
                                            &responses[i], std::move(done));
      });
  for (int i = 0; i < n; ++i) {
    if (!statuses[i].ok()) {
      COHORT_LOG(WARNING) << "session " << handle_
                          << ": DeleteWorkerSession on " << tasks_[i]
                          << " failed: " << statuses[i];
    }
  }
}

}  // namespace cohort::runtime
