#include "cohort/runtime/worker.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/graph/collective.h"
#include "cohort/graph/standard_registries.h"
#include "cohort/runtime/collective_resolver.h"
#include "cohort/runtime/device_name.h"
#include "cohort/runtime/worker_errors.h"
#include "cohort/runtime/worker_impl.h"

namespace cohort::runtime {
namespace {

// TF's windows (§1.9): large enough that a retry arriving after many later
// requests is still caught. 16 shards keep concurrent steps off one lock.
constexpr int kRequestIdWindow = 100000;
constexpr int kRequestIdShards = 16;

WorkerEnv WithDefaults(WorkerEnv env) {
  COHORT_CHECK(env.device != nullptr) << "WorkerEnv.device is required";
  COHORT_CHECK(env.device->name() == env.task_name + "/device:CPU:0")
      << "WorkerEnv.device is named " << env.device->name()
      << ", expected the CPU:0 of task '" << env.task_name << "'";
  if (env.env == nullptr) env.env = Env::Default();
  if (env.ops == nullptr) env.ops = StandardOpRegistry();
  return env;
}

RendezvousMgr::Options RendezvousOptions(const WorkerEnv& env) {
  RendezvousMgr::Options o;
  o.task_name = env.task_name;
  o.worker_cache = env.worker_cache;
  o.env = env.env;
  return o;
}

// Canonical form of a device string, so "/job:ps/replica:0/task:0/cpu:0"
// and the full TF spelling compare equal; the string itself when it does
// not parse (it then matches nothing).
std::string CanonicalDevice(const std::string& device) {
  auto parsed = DeviceName::Parse(device);
  return parsed.ok() ? parsed->FullName() : device;
}

}  // namespace

// --- RunningStep ----------------------------------------------------------

void RunningStep::Cancel(const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    if (reason_.ok()) reason_ = why;
  }
  // Outside mu_: StartCancel runs the executor's callback, which aborts the
  // step's rendezvous and so runs waiters.
  cancellation_.StartCancel();
}

absl::Status RunningStep::reason() const {
  absl::MutexLock lock(&mu_);
  return reason_;
}

// --- Worker (forwarding) --------------------------------------------------

Worker::Worker(WorkerEnv env)
    : impl_(std::make_unique<Impl>(WithDefaults(std::move(env)))) {}

Worker::~Worker() = default;

#define COHORT_RUNTIME_WORKER_FORWARD_(Name)                                \
  void Worker::Name##Async(CallOptions* opts, const Name##Request* request, \
                           Name##Response* response, StatusCallback done) { \
    impl_->Name(opts, request, response, done);                             \
  }
COHORT_WORKER_RPCS(COHORT_RUNTIME_WORKER_FORWARD_)
#undef COHORT_RUNTIME_WORKER_FORWARD_

void Worker::RecvTensorValueAsync(CallOptions* opts,
                                  const RecvTensorRequest* request,
                                  RecvTensorValue* value, StatusCallback done) {
  impl_->RecvTensorAsTensor(opts, request, value, done);
}

void Worker::RunGraphOnCallerThread(CallOptions* opts,
                                    const RunGraphRequest* request,
                                    RunGraphResponse* response,
                                    StatusCallback done) {
  impl_->StartStep(opts, request, response, done, /*on_caller_thread=*/true);
}

void Worker::SetTensorPort(int port) { impl_->SetTensorPort(port); }

void Worker::Stop(const absl::Status& status) { impl_->Stop(status); }
const std::string& Worker::task_name() const { return impl_->task_name(); }
size_t Worker::NumRunningSteps() const { return impl_->NumRunningSteps(); }
size_t Worker::NumStepRendezvous() const { return impl_->NumStepRendezvous(); }

// --- Lifecycle ------------------------------------------------------------

Worker::Impl::Impl(WorkerEnv env)
    : env_(std::move(env)),
      run_graph_ids_(kRequestIdWindow, kRequestIdShards),
      recv_tensor_ids_(kRequestIdWindow, kRequestIdShards),
      sessions_(env_.task_name, env_.device),
      rendezvous_(RendezvousOptions(env_)),
      timer_(env_.env),
      collective_leader_(env_.task_name, env_.env, [cache = env_.worker_cache] {
        return cache != nullptr ? cache->ListTasks()
                                : std::vector<std::string>();
      }) {}

Worker::Impl::~Impl() {
  Stop(StoppingError(env_.task_name));
  // Members go in reverse order: step_pool_ joins its threads first.
}

absl::Status Worker::Impl::CheckRunning() const {
  absl::MutexLock lock(&mu_);
  return stopping_ ? stop_status_ : absl::OkStatus();
}

void Worker::Impl::Stop(const absl::Status& status) {
  std::vector<std::shared_ptr<RunningStep>> steps;
  absl::Status why;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      stopping_ = true;
      stop_status_ = status.ok() ? StoppingError(env_.task_name) : status;
    }
    why = stop_status_;
    for (const auto& [id, step] : running_) steps.push_back(step);
  }
  for (const auto& step : steps) step->Cancel(why);
  // Members waiting on this task as their group leader hear why now.
  collective_leader_.Stop(why);
  // Pending RecvTensors (ours, from peers) and remote Recvs of our steps end
  // now; later Finds are refused, so nothing waits on a stopped worker.
  rendezvous_.AbortAll(why);
  // Steps are cancelled, so this waits only for kernels already running
  // and for the answers being sent.
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Impl* impl) ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl->mu_) {
        return impl->running_.empty() && impl->answering_ == 0;
      },
      this));
}

absl::Status Worker::Impl::RegisterStep(uint64_t* id,
                                        std::shared_ptr<RunningStep> step) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return stop_status_;
    *id = next_step_id_++;
    running_.emplace(*id, step);
  }
  // Re-checked after registering: a DeleteWorkerSession that removed the
  // session before this point either sees the step in running_ (and cancels
  // it) or finished before, and then this lookup fails.
  auto session = sessions_.Find(step->session_handle());
  if (!session.ok()) {
    UnregisterStep(*id, /*answering=*/false);
    return session.status();
  }
  return absl::OkStatus();
}

void Worker::Impl::UnregisterStep(uint64_t id, bool answering) {
  absl::MutexLock lock(&mu_);
  running_.erase(id);
  if (answering) ++answering_;
}

void Worker::Impl::AnswerSent() {
  absl::MutexLock lock(&mu_);
  --answering_;
}

size_t Worker::Impl::NumRunningSteps() const {
  absl::MutexLock lock(&mu_);
  return running_.size();
}

void Worker::Impl::CancelSessionSteps(const std::string& session_handle,
                                      const absl::Status& why) {
  std::vector<std::shared_ptr<RunningStep>> steps;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, step] : running_) {
      if (step->session_handle() == session_handle) steps.push_back(step);
    }
  }
  for (const auto& step : steps) step->Cancel(why);
}

// --- Quick RPCs -----------------------------------------------------------

void Worker::Impl::GetStatus(CallOptions*, const GetStatusRequest*,
                             GetStatusResponse* response,
                             const StatusCallback& done) {
  if (absl::Status s = CheckRunning(); !s.ok()) return done(s);
  DeviceAttributes* d = response->add_device_attributes();
  d->set_name(env_.device->name());
  d->set_device_type(env_.device->device_type());
  // cohort's CPU device has no allocator limit of its own; 0 = unknown.
  d->set_memory_limit(0);
  d->set_incarnation(env_.device->incarnation());
  response->set_tensor_port(tensor_port_.load());
  done(absl::OkStatus());
}

void Worker::Impl::CreateWorkerSession(
    CallOptions*, const CreateWorkerSessionRequest* request,
    CreateWorkerSessionResponse*, const StatusCallback& done) {
  if (absl::Status s = CheckRunning(); !s.ok()) return done(s);
  std::vector<std::shared_ptr<WorkerSession>> collected;
  absl::Status status = sessions_.Create(*request, &collected);
  for (const auto& old : collected) {
    CancelSessionSteps(
        old->handle(),
        absl::CancelledError(
            absl::StrCat("worker session ", old->handle(), " on ",
                         env_.task_name, " was garbage collected: master task ",
                         old->master_task(), " has a new incarnation")));
  }
  collected.clear();  // Isolated devices are joined here, not in `done`.
  done(status);
}

void Worker::Impl::DeleteWorkerSession(
    CallOptions*, const DeleteWorkerSessionRequest* request,
    DeleteWorkerSessionResponse*, const StatusCallback& done) {
  if (absl::Status s = CheckRunning(); !s.ok()) return done(s);
  // Unknown handles are OK (TF): a retried delete must not fail.
  if (sessions_.Remove(request->session_handle()) != nullptr) {
    CancelSessionSteps(request->session_handle(),
                       absl::CancelledError(absl::StrCat(
                           "worker session ", request->session_handle(), " on ",
                           env_.task_name, " was deleted")));
  }
  done(absl::OkStatus());
}

absl::StatusOr<std::shared_ptr<RegisteredGraph>> Worker::Impl::BuildGraph(
    const RegisterGraphRequest& request, Device* device) const {
  const std::string context = absl::StrCat("RegisterGraph on ", env_.task_name);
  auto graph = Graph::FromGraphDef(request.graph_def(), env_.ops);
  if (!graph.ok()) return Annotate(graph.status(), context);
  const std::string own = CanonicalDevice(device->name());
  std::vector<std::string> targets(request.target().begin(),
                                   request.target().end());
  absl::flat_hash_set<std::string> seen(targets.begin(), targets.end());
  for (int i = 0; i < (*graph)->num_nodes(); ++i) {
    const Graph::Node& node = (*graph)->node(i);
    if (CanonicalDevice(node.def.device()) != own) {
      return absl::InvalidArgumentError(absl::StrCat(
          context, ": ", NodeDebugName(node.def), " is placed on '",
          node.def.device(), "', not on this worker's device ", device->name(),
          "; the master must send each task only its own partition"));
    }
    // Sends are always run: the partition exists to feed other tasks.
    if (node.op() == "Send" && seen.insert(node.name()).second) {
      targets.push_back(node.name());
    }
  }
  auto out = std::make_shared<RegisteredGraph>();
  out->feeds.assign(request.feed().begin(), request.feed().end());
  out->fetches.assign(request.fetch().begin(), request.fetch().end());
  Executor::Options options;
  options.device = device;
  options.kernels = env_.kernels;
  options.env = env_.env;
  auto executor =
      Executor::Create(**graph, out->feeds, out->fetches, targets, options);
  if (!executor.ok()) return Annotate(executor.status(), context);
  out->graph = std::move(*graph);
  out->executor = std::move(*executor);
  return out;
}

void Worker::Impl::RegisterGraph(CallOptions*,
                                 const RegisterGraphRequest* request,
                                 RegisterGraphResponse* response,
                                 const StatusCallback& done) {
  if (absl::Status s = CheckRunning(); !s.ok()) return done(s);
  auto session = sessions_.Find(request->session_handle());
  if (!session.ok()) return done(session.status());
  auto graph = BuildGraph(*request, (*session)->device());
  if (!graph.ok()) return done(graph.status());
  const std::string handle = absl::StrFormat(
      "%016x", next_graph_id_.fetch_add(1, std::memory_order_relaxed) + 1);
  const std::string& leader =
      request->config().experimental().collective_group_leader();
  if (!leader.empty()) {
    absl::StatusOr<std::shared_ptr<CollectiveGroups>> groups =
        CollectiveGroupsOf((*session)->device()->resource_manager());
    if (!groups.ok()) return done(groups.status());
    GroupResolverOptions resolver;
    resolver.task = env_.task_name;
    resolver.incarnation = (*session)->device()->incarnation();
    resolver.leader = leader;
    resolver.workers = env_.worker_cache;
    resolver.host = env_.collective_host;
    resolver.job_token = env_.job_token;
    resolver.env = env_.env;
    if (resolver.workers == nullptr) {
      return done(absl::FailedPreconditionError(absl::StrCat(
          "graph for ", env_.task_name, " names the collective group leader ",
          leader, " but this worker has no worker cache to reach it")));
    }
    absl::Status set =
        (*groups)->SetResolver(leader, MakeGroupResolver(std::move(resolver)));
    if (!set.ok()) return done(set);
  }
  (*session)->AddGraph(handle, std::move(*graph));
  response->set_graph_handle(handle);
  done(absl::OkStatus());
}

void Worker::Impl::DeregisterGraph(CallOptions*,
                                   const DeregisterGraphRequest* request,
                                   DeregisterGraphResponse*,
                                   const StatusCallback& done) {
  if (absl::Status s = CheckRunning(); !s.ok()) return done(s);
  auto session = sessions_.Find(request->session_handle());
  if (!session.ok()) return done(session.status());
  if (!(*session)->RemoveGraph(request->graph_handle())) {
    return done(DeregisterGraphNotFoundError(request->graph_handle()));
  }
  done(absl::OkStatus());
}

void Worker::Impl::CleanupGraph(CallOptions*,
                                const CleanupGraphRequest* request,
                                CleanupGraphResponse*,
                                const StatusCallback& done) {
  if (absl::Status s = CheckRunning(); !s.ok()) return done(s);
  rendezvous_.Cleanup(request->step_id());
  done(absl::OkStatus());
}

void Worker::Impl::CleanupAll(CallOptions*, const CleanupAllRequest* request,
                              CleanupAllResponse*, const StatusCallback& done) {
  if (absl::Status s = CheckRunning(); !s.ok()) return done(s);
  ResourceMgr* rm = env_.device->resource_manager();
  if (request->container().empty()) {
    rm->Cleanup(rm->default_container());
  }
  for (const std::string& c : request->container()) rm->Cleanup(c);
  done(absl::OkStatus());
}

// --- Collective group leader ------------------------------------------------

namespace {

// The earlier of the call's deadline and the caller's timeout_ms.
absl::Time LeaderDeadline(CallOptions* opts, int64_t timeout_ms, Env* env) {
  absl::Time deadline =
      opts != nullptr ? opts->deadline() : absl::InfiniteFuture();
  if (timeout_ms > 0) {
    deadline = std::min(deadline, env->Now() + absl::Milliseconds(timeout_ms));
  }
  return deadline;
}

}  // namespace

void Worker::Impl::CompleteGroup(CallOptions* opts,
                                 const CompleteGroupRequest* request,
                                 CompleteGroupResponse* response,
                                 const StatusCallback& done) {
  if (absl::Status s = CheckRunning(); !s.ok()) return done(s);
  collective_leader_.CompleteGroup(
      LeaderDeadline(opts, request->timeout_ms(), env_.env), *request, response,
      done);
}

void Worker::Impl::CompleteInstance(CallOptions* opts,
                                    const CompleteInstanceRequest* request,
                                    CompleteInstanceResponse* response,
                                    const StatusCallback& done) {
  if (absl::Status s = CheckRunning(); !s.ok()) return done(s);
  collective_leader_.CompleteInstance(
      LeaderDeadline(opts, request->timeout_ms(), env_.env), *request, response,
      done);
}

}  // namespace cohort::runtime
