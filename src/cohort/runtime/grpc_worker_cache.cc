#include "cohort/runtime/grpc_worker_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/runtime/grpc_remote_worker.h"
#include "cohort/runtime/rendezvous_mgr.h"

namespace cohort::runtime {

absl::StatusOr<std::unique_ptr<GrpcWorkerCache>> GrpcWorkerCache::Create(
    const ClusterDef& cluster, std::string local_task,
    WorkerInterface* local_worker, rpc::TransportSecurity security) {
  std::map<std::string, std::string> addresses;
  for (const JobDef& job : cluster.job()) {
    for (const auto& [index, address] : job.tasks()) {
      const std::string task =
          absl::StrCat("/job:", job.name(), "/replica:0/task:", index);
      if (address.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("task ", task, " has no address in the cluster"));
      }
      addresses[task] = address;
    }
  }
  if (!local_task.empty() && !addresses.count(local_task)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the local task ", local_task, " is not in the cluster"));
  }
  return std::unique_ptr<GrpcWorkerCache>(
      new GrpcWorkerCache(std::move(addresses), std::move(local_task),
                          local_worker, std::move(security)));
}

GrpcWorkerCache::GrpcWorkerCache(std::map<std::string, std::string> addresses,
                                 std::string local_task,
                                 WorkerInterface* local_worker,
                                 rpc::TransportSecurity security)
    : addresses_(std::move(addresses)),
      local_task_(std::move(local_task)),
      security_(std::move(security)),
      local_worker_(local_worker) {}

void GrpcWorkerCache::SetLocalWorker(WorkerInterface* local_worker) {
  absl::MutexLock lock(&mu_);
  local_worker_ = local_worker;
}

std::vector<std::string> GrpcWorkerCache::ListTasks() const {
  std::vector<std::string> tasks;
  tasks.reserve(addresses_.size());
  for (const auto& [task, address] : addresses_) tasks.push_back(task);
  return tasks;
}

std::string GrpcWorkerCache::Canonical(const std::string& task) const {
  if (addresses_.count(task)) return task;
  // "/job:ps/task:0" or a device of the task.
  auto parsed = TaskOfDevice(task);
  if (parsed.ok() && addresses_.count(*parsed)) return *parsed;
  return "";
}

std::string GrpcWorkerCache::TaskAddress(const std::string& task) const {
  auto it = addresses_.find(Canonical(task));
  return it == addresses_.end() ? "" : it->second;
}

absl::StatusOr<WorkerInterface*> GrpcWorkerCache::GetWorker(
    const std::string& task) {
  const std::string name = Canonical(task);
  if (name.empty()) {
    return absl::NotFoundError(
        absl::StrCat("task ", task, " is not in the cluster; known tasks: [",
                     absl::StrJoin(ListTasks(), ", "), "]"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (name == local_task_ && local_worker_ != nullptr) return local_worker_;
    auto it = remote_.find(name);
    if (it != remote_.end()) return it->second.get();
  }
  // Outside the lock: with TLS, making a channel reads certificate files.
  const std::string& address = addresses_.at(name);
  auto channel =
      rpc::CreateChannel(address, security_, rpc::kMaxTensorMessageBytes);
  if (!channel.ok()) return channel.status();
  auto worker =
      std::make_unique<GrpcRemoteWorker>(name, address, *channel, security_);
  absl::MutexLock lock(&mu_);
  // Another caller may have won the race; keep the first so pointers
  // handed out stay valid.
  auto [it, inserted] = remote_.emplace(name, std::move(worker));
  return it->second.get();
}

}  // namespace cohort::runtime
