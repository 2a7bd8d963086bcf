#include "cohort/runtime/master.h"

#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cohort/base/env.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/runtime/device_name.h"
#include "cohort/runtime/parallel_calls.h"

namespace cohort::runtime {
namespace {

// TF's window for the master's non-idempotent calls.
constexpr int kRecentRequestIds = 10000;
// How often the GC looks for idle sessions (TF: 10 s).
constexpr absl::Duration kGcInterval = absl::Seconds(10);
constexpr absl::Duration kWorkerCallTimeout = absl::Seconds(10);
constexpr size_t kMaxSessions = 1024;

}  // namespace

Master::Master(const MasterEnv& env)
    : env_(env),
      gc_seconds_(env.server_def.default_session_config().session_gc_seconds()),
      recent_request_ids_(kRecentRequestIds) {
  if (env_.incarnation == 0) env_.incarnation = RandomNonZeroId();
  if (env_.env == nullptr) env_.env = Env::Default();
  // The caller's own hook (tests) wins; otherwise the coordination watch's
  // reports decide.
  if (!env_.lost_task_status)
    env_.lost_task_status = [this](const std::string& task) {
      absl::MutexLock lock(&mu_);
      auto it = lost_.find(task);
      return it == lost_.end() ? absl::OkStatus() : it->second;
    };
  if (gc_seconds_ > 0) gc_thread_ = std::thread([this] { GcLoop(); });
}

Master::~Master() {
  Stop(absl::UnavailableError(
      absl::StrCat("server ", env_.task, " is stopping")));
}

absl::Status Master::CheckRunning() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

absl::StatusOr<std::shared_ptr<MasterSession>> Master::FindSession(
    const std::string& handle, bool restarted_hint) const {
  absl::MutexLock lock(&mu_);
  COHORT_RETURN_IF_ERROR(stopped_);
  auto it = sessions_.find(handle);
  if (it == sessions_.end()) {
    return absl::AbortedError(absl::StrCat(
        "Session ", handle, " is not found.",
        restarted_hint ? " Possibly, this master has restarted." : ""));
  }
  return it->second;
}

absl::Status Master::CreateSession(CallOptions* opts,
                                   const CreateSessionRequest& request,
                                   CreateSessionResponse* response) {
  COHORT_RETURN_IF_ERROR(CheckRunning());
  // A request without a config gets the server's default (TF: the
  // ServerDef's default_session_config).
  const ConfigProto& config = request.has_config()
                                  ? request.config()
                                  : env_.server_def.default_session_config();
  const std::string handle = absl::StrFormat("%016x", RandomNonZeroId());
  COHORT_ASSIGN_OR_RETURN(
      auto session,
      MasterSession::Create(&env_, handle, request.graph_def(), config, opts,
                            [this] { return !CheckRunning().ok(); }));
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_.ok()) {
      refused = stopped_;
    } else if (sessions_.size() >= kMaxSessions) {
      // Each session holds worker sessions on every task.
      refused = absl::ResourceExhaustedError(absl::StrCat(
          "master ", env_.task, " already has ", kMaxSessions,
          " sessions; close unused ones (CloseSession) or enable session GC "
          "(--session-gc-seconds)"));
    } else {
      sessions_[handle] = session;
      session = nullptr;
    }
  }
  if (session != nullptr) {
    session->Close(refused);
    return refused;
  }
  response->set_session_handle(handle);
  response->set_graph_version(0);
  return absl::OkStatus();
}

absl::Status Master::ExtendSession(const ExtendSessionRequest& request,
                                   ExtendSessionResponse* response) {
  COHORT_ASSIGN_OR_RETURN(auto session,
                          FindSession(request.session_handle(), false));
  COHORT_ASSIGN_OR_RETURN(
      int64_t version,
      session->Extend(request.graph_def(), request.current_graph_version()));
  response->set_new_graph_version(version);
  return absl::OkStatus();
}

absl::Status Master::RunStep(CallOptions* opts, const RunStepRequest& request,
                             RunStepResponse* response) {
  COHORT_RETURN_IF_ERROR(CheckRunning());
  COHORT_RETURN_IF_ERROR(recent_request_ids_.TrackUnique(
      request.request_id(), "RunStep (Master)", request));
  if (!request.partial_run_handle().empty()) {
    return absl::UnimplementedError(
        "partial runs are not supported by cohort (RunStep with "
        "partial_run_handle)");
  }
  COHORT_ASSIGN_OR_RETURN(auto session,
                          FindSession(request.session_handle(), false));
  return session->Run(opts, request, response);
}

absl::Status Master::CloseSession(const CloseSessionRequest& request,
                                  CloseSessionResponse* response) {
  std::shared_ptr<MasterSession> session;
  {
    absl::MutexLock lock(&mu_);
    COHORT_RETURN_IF_ERROR(stopped_);
    auto it = sessions_.find(request.session_handle());
    if (it == sessions_.end()) {
      return absl::AbortedError(
          absl::StrCat("Session ", request.session_handle(),
                       " is not found. Possibly, this master has restarted."));
    }
    session = std::move(it->second);
    sessions_.erase(it);
  }
  session->Close(absl::CancelledError(
      "Step was cancelled by an explicit call to `Session::Close()`."));
  return absl::OkStatus();
}

absl::Status Master::ListDevices(const ListDevicesRequest& request,
                                 ListDevicesResponse* response) {
  COHORT_RETURN_IF_ERROR(CheckRunning());
  std::vector<DeviceAttributes> devices;
  if (!request.session_handle().empty()) {
    auto session = FindSession(request.session_handle(), true);
    if (!session.ok()) {
      return absl::InvalidArgumentError(session.status().message());
    }
    devices = (*session)->devices();
  } else {
    // Every task that answers within the timeout; the silent ones are left
    // out (ListDevices reports what is there).
    std::vector<std::string> tasks = env_.workers->ListTasks();
    std::vector<GetStatusRequest> requests(tasks.size());
    std::vector<GetStatusResponse> responses(tasks.size());
    std::vector<CallOptions> opts(tasks.size());
    std::vector<absl::Status> statuses =
        CallAll(tasks.size(), [&](int i, StatusCallback done) {
          opts[i].set_deadline(env_.env->Now() + kWorkerCallTimeout);
          auto worker = env_.workers->GetWorker(tasks[i]);
          if (!worker.ok()) return done(worker.status());
          (*worker)->GetStatusAsync(&opts[i], &requests[i], &responses[i],
                                    std::move(done));
        });
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (!statuses[i].ok()) continue;
      for (const auto& d : responses[i].device_attributes()) {
        devices.push_back(d);
      }
    }
  }
  for (const DeviceAttributes& d : devices) {
    auto name = DeviceName::Parse(d.name());
    const bool local = name.ok() && name->TaskName() == env_.task;
    *(local ? response->add_local_device() : response->add_remote_device()) = d;
  }
  return absl::OkStatus();
}

absl::Status Master::Reset(const ResetRequest& request,
                           ResetResponse* response) {
  std::vector<std::shared_ptr<MasterSession>> sessions;
  {
    absl::MutexLock lock(&mu_);
    COHORT_RETURN_IF_ERROR(stopped_);
    for (auto& [handle, session] : sessions_) sessions.push_back(session);
    sessions_.clear();
  }
  // TF closes every session of this master, also other clients'.
  for (const auto& session : sessions) {
    session->Close(absl::CancelledError(
        "Step was cancelled by an explicit call to `Session::Reset()`."));
  }
  std::vector<DeviceName> filters;
  for (const std::string& f : request.device_filters()) {
    COHORT_ASSIGN_OR_RETURN(DeviceName filter, DeviceName::Parse(f));
    filters.push_back(filter);
  }
  std::vector<std::string> tasks;
  for (const std::string& task : env_.workers->ListTasks()) {
    auto name = DeviceName::Parse(task);
    bool wanted = filters.empty();
    for (const DeviceName& f : filters) {
      if (name.ok() && name->Matches(f)) wanted = true;
    }
    if (wanted) tasks.push_back(task);
  }
  std::vector<CleanupAllRequest> requests(tasks.size());
  std::vector<CleanupAllResponse> responses(tasks.size());
  std::vector<CallOptions> opts(tasks.size());
  std::vector<absl::Status> statuses =
      CallAll(tasks.size(), [&](int i, StatusCallback done) {
        for (const std::string& c : request.container()) {
          requests[i].add_container(c);
        }
        opts[i].set_deadline(env_.env->Now() + kWorkerCallTimeout);
        auto worker = env_.workers->GetWorker(tasks[i]);
        if (!worker.ok()) return done(worker.status());
        (*worker)->CleanupAllAsync(&opts[i], &requests[i], &responses[i],
                                   std::move(done));
      });
  std::vector<std::string> failed;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (statuses[i].ok()) continue;
    if (code == absl::StatusCode::kOk) code = statuses[i].code();
    failed.push_back(absl::StrCat(tasks[i], ": ", statuses[i].message()));
  }
  if (!failed.empty()) {
    return absl::Status(code, absl::StrCat("Reset: CleanupAll failed on ",
                                           absl::StrJoin(failed, "; ")));
  }
  return absl::OkStatus();
}

absl::Status Master::MakeCallable(const MakeCallableRequest& request,
                                  MakeCallableResponse* response) {
  COHORT_RETURN_IF_ERROR(CheckRunning());
  COHORT_RETURN_IF_ERROR(recent_request_ids_.TrackUnique(
      request.request_id(), "MakeCallable (Master)", request));
  COHORT_ASSIGN_OR_RETURN(auto session,
                          FindSession(request.session_handle(), false));
  COHORT_ASSIGN_OR_RETURN(int64_t handle,
                          session->MakeCallable(request.options()));
  response->set_handle(handle);
  return absl::OkStatus();
}

absl::Status Master::RunCallable(CallOptions* opts,
                                 const RunCallableRequest& request,
                                 RunCallableResponse* response) {
  COHORT_RETURN_IF_ERROR(CheckRunning());
  COHORT_RETURN_IF_ERROR(recent_request_ids_.TrackUnique(
      request.request_id(), "RunCallable (Master)", request));
  COHORT_ASSIGN_OR_RETURN(auto session,
                          FindSession(request.session_handle(), false));
  return session->RunCallable(opts, request, response);
}

absl::Status Master::ReleaseCallable(const ReleaseCallableRequest& request,
                                     ReleaseCallableResponse* response) {
  COHORT_ASSIGN_OR_RETURN(auto session,
                          FindSession(request.session_handle(), false));
  return session->ReleaseCallable(request.handle());
}

void Master::Stop(const absl::Status& status) {
  std::vector<std::shared_ptr<MasterSession>> sessions;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_.ok()) stopped_ = status;
    for (auto& [handle, session] : sessions_) sessions.push_back(session);
    sessions_.clear();
  }
  // In parallel: each close may wait up to its worker-call timeouts on a
  // hung task, and a stop must stay bounded however many sessions there are.
  std::vector<std::thread> closers;
  for (const auto& session : sessions) {
    closers.emplace_back([session, status] { session->Close(status); });
  }
  for (std::thread& t : closers) t.join();
  if (gc_thread_.joinable()) gc_thread_.join();
}

void Master::TaskBack(const std::string& task) {
  absl::MutexLock lock(&mu_);
  lost_.erase(task);
}

void Master::AbortStepsOn(const std::string& task, const absl::Status& status,
                          bool remember) {
  std::vector<std::shared_ptr<MasterSession>> sessions;
  {
    absl::MutexLock lock(&mu_);
    if (remember) lost_[task] = status;
    for (auto& [handle, session] : sessions_) sessions.push_back(session);
  }
  for (const auto& session : sessions) session->AbortStepsOn(task, status);
}

void Master::GcLoop() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !stopped_.ok();
      };
      if (env_.env->AwaitWithDeadline(&mu_, absl::Condition(&stopped),
                                      env_.env->Now() + kGcInterval)) {
        return;
      }
    }
    GcSessionsNow();
  }
}

void Master::GcSessionsNow() {
  if (gc_seconds_ <= 0) return;
  const absl::Time now = env_.env->Now();
  const absl::Duration limit = absl::Seconds(gc_seconds_);
  std::vector<std::shared_ptr<MasterSession>> idle;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      auto cur = it++;
      // A session with a step running is in use, however long the step.
      if (!cur->second->running() && now - cur->second->last_access() > limit) {
        idle.push_back(std::move(cur->second));
        sessions_.erase(cur);
      }
    }
  }
  for (const auto& session : idle) {
    COHORT_LOG(WARNING)
        << "GC session " << session->handle() << " after " << gc_seconds_
        << " seconds.  Note that if you are starting multiple replicas on a "
           "staggered delay, session_gc_seconds may need to be raised.";
    session->Close(absl::CancelledError(
        "Step was cancelled because the session was garbage collected due "
        "to inactivity."));
  }
}

absl::Status InvokeMaster(Master* m, CallOptions* o,
                          const CreateSessionRequest& r,
                          CreateSessionResponse* p) {
  return m->CreateSession(o, r, p);
}
absl::Status InvokeMaster(Master* m, CallOptions*,
                          const ExtendSessionRequest& r,
                          ExtendSessionResponse* p) {
  return m->ExtendSession(r, p);
}
absl::Status InvokeMaster(Master* m, CallOptions* o, const RunStepRequest& r,
                          RunStepResponse* p) {
  return m->RunStep(o, r, p);
}
absl::Status InvokeMaster(Master* m, CallOptions*, const CloseSessionRequest& r,
                          CloseSessionResponse* p) {
  return m->CloseSession(r, p);
}
absl::Status InvokeMaster(Master* m, CallOptions*, const ListDevicesRequest& r,
                          ListDevicesResponse* p) {
  return m->ListDevices(r, p);
}
absl::Status InvokeMaster(Master* m, CallOptions*, const ResetRequest& r,
                          ResetResponse* p) {
  return m->Reset(r, p);
}
absl::Status InvokeMaster(Master* m, CallOptions*, const MakeCallableRequest& r,
                          MakeCallableResponse* p) {
  return m->MakeCallable(r, p);
}
absl::Status InvokeMaster(Master* m, CallOptions* o,
                          const RunCallableRequest& r, RunCallableResponse* p) {
  return m->RunCallable(o, r, p);
}
absl::Status InvokeMaster(Master* m, CallOptions*,
                          const ReleaseCallableRequest& r,
                          ReleaseCallableResponse* p) {
  return m->ReleaseCallable(r, p);
}

}  // namespace cohort::runtime
