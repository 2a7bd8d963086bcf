#include "cohort/runtime/worker_session.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"
#include "cohort/runtime/worker_errors.h"

namespace cohort::runtime {

// --- WorkerSession --------------------------------------------------------

WorkerSession::WorkerSession(const CreateWorkerSessionRequest& request,
                             Device* shared_device)
    : handle_(request.session_handle()),
      master_task_(request.master_task()),
      master_incarnation_(request.master_incarnation()),
      // Same name as the task's device so node placements and rendezvous
      // keys do not change (the incarnation too); same thread count so an
      // isolated session runs as fast as a shared one.
      own_device_(request.isolate_session_state()
                      ? std::make_unique<Device>(shared_device->name(),
                                                 shared_device->num_threads(),
                                                 shared_device->incarnation())
                      : nullptr),
      device_(own_device_ != nullptr ? own_device_.get() : shared_device) {}

bool WorkerSession::SameAs(const CreateWorkerSessionRequest& request) const {
  return request.session_handle() == handle_ &&
         request.master_task() == master_task_ &&
         request.master_incarnation() == master_incarnation_ &&
         request.isolate_session_state() == isolated();
}

void WorkerSession::AddGraph(const std::string& graph_handle,
                             std::shared_ptr<RegisteredGraph> graph) {
  absl::MutexLock lock(&mu_);
  graphs_[graph_handle] = std::move(graph);
}

std::shared_ptr<RegisteredGraph> WorkerSession::FindGraph(
    const std::string& graph_handle) const {
  absl::MutexLock lock(&mu_);
  auto it = graphs_.find(graph_handle);
  return it == graphs_.end() ? nullptr : it->second;
}

bool WorkerSession::RemoveGraph(const std::string& graph_handle) {
  std::shared_ptr<RegisteredGraph> removed;
  absl::MutexLock lock(&mu_);
  auto it = graphs_.find(graph_handle);
  if (it == graphs_.end()) return false;
  // Steps running it hold their own reference and finish (§1.4).
  removed = std::move(it->second);
  graphs_.erase(it);
  return true;
}

// --- WorkerSessionMgr -----------------------------------------------------

WorkerSessionMgr::WorkerSessionMgr(std::string task_name, Device* shared_device)
    : task_name_(std::move(task_name)), shared_device_(shared_device) {}

absl::Status WorkerSessionMgr::CheckServerDef(
    const CreateWorkerSessionRequest& request) const {
  // A master sends each worker a ServerDef naming that worker (TF sets
  // job_name/task_index per task); an empty job_name means "not given".
  const ServerDef& def = request.server_def();
  if (def.job_name().empty()) return absl::OkStatus();
  const std::string named = absl::StrCat("/job:", def.job_name(),
                                         "/replica:0/task:", def.task_index());
  if (named != task_name_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CreateWorkerSession for session ", request.session_handle(),
        ": server_def names ", named, " but this worker is ", task_name_,
        "; check the master's cluster definition"));
  }
  return absl::OkStatus();
}

absl::Status WorkerSessionMgr::Create(
    const CreateWorkerSessionRequest& request,
    std::vector<std::shared_ptr<WorkerSession>>* collected) {
  if (request.session_handle().empty()) {
    return absl::InvalidArgumentError("Session must be non-empty.");
  }
  if (absl::Status s = CheckServerDef(request); !s.ok()) return s;
  // Built before taking the lock: an isolated session starts a thread pool.
  auto session = std::make_shared<WorkerSession>(request, shared_device_);
  std::shared_ptr<WorkerSession> replaced;  // Destroyed outside the lock.
  absl::MutexLock lock(&mu_);
  const std::string& master = request.master_task();
  if (!master.empty()) {
    // A master restarted at the same task (new incarnation) will never use
    // its predecessor's sessions again; without this they would live
    // forever (TF SessionMgr).
    bool found_old = false;
    for (const auto& [h, s] : sessions_) {
      if (s->master_task() == master &&
          s->master_incarnation() != request.master_incarnation()) {
        found_old = true;
        break;
      }
    }
    if (found_old) {
      COHORT_LOG(INFO)
          << "When creating WorkerSession for master task " << master
          << ", found old WorkerSessions created by the same master task "
          << "with a different incarnation. These sessions will be garbage "
          << "collected. Current WorkerSession count: " << sessions_.size();
      for (auto it = sessions_.begin(); it != sessions_.end();) {
        auto next = std::next(it);
        if (it->second->master_task() == master &&
            it->second->master_incarnation() != request.master_incarnation()) {
          collected->push_back(std::move(it->second));
          sessions_.erase(it);
        }
        it = next;
      }
    }
  }
  auto it = sessions_.find(request.session_handle());
  if (it != sessions_.end()) {
    if (it->second->SameAs(request)) return absl::OkStatus();
    return absl::AlreadyExistsError(
        absl::StrCat("worker session ", request.session_handle(),
                     " already exists on ", task_name_,
                     " with other settings (master_task, master_incarnation "
                     "or isolate_session_state)"));
  }
  sessions_.emplace(request.session_handle(), std::move(session));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<WorkerSession>> WorkerSessionMgr::Find(
    const std::string& handle) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(handle);
  if (it == sessions_.end()) return SessionNotFoundError(handle, task_name_);
  return it->second;
}

std::shared_ptr<WorkerSession> WorkerSessionMgr::Remove(
    const std::string& handle) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(handle);
  if (it == sessions_.end()) return nullptr;
  auto session = std::move(it->second);
  sessions_.erase(it);
  return session;
}

std::vector<std::shared_ptr<WorkerSession>> WorkerSessionMgr::RemoveAll() {
  std::vector<std::shared_ptr<WorkerSession>> all;
  absl::MutexLock lock(&mu_);
  for (auto& [h, s] : sessions_) all.push_back(std::move(s));
  sessions_.clear();
  return all;
}

size_t WorkerSessionMgr::size() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace cohort::runtime
