// GrpcWorkerCache: the WorkerCache of a server: every task of the cluster,
// this task's own worker called in process, the others through gRPC.
//
//   auto cache = GrpcWorkerCache::Create(server_def.cluster(),
//                                        "/job:worker/replica:0/task:0",
//                                        &worker, security);
//   auto ps0 = (*cache)->GetWorker("/job:ps/replica:0/task:0");
//
// Calls to the local task go straight to `local_worker` (TF
// GrpcWorkerCacheWithLocalWorker): same statuses and messages as the gRPC
// path, without the job token round trip. For any other task a channel and
// a GrpcRemoteWorker are made on first use and kept for the cache's life;
// connecting is lazy (gRPC), so a task that is not up yet costs nothing
// until it is called.
//
// Task names: "/job:J/replica:0/task:T"; GetWorker also accepts the short
// "/job:J/task:T" and a device name of the task.
//
// Thread safety: thread-safe. GetWorker takes a short lock; channels are
// created outside it.
#ifndef COHORT_RUNTIME_GRPC_WORKER_CACHE_H_
#define COHORT_RUNTIME_GRPC_WORKER_CACHE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/cluster.pb.h"
#include "cohort/rpc/transport.h"
#include "cohort/runtime/worker_interface.h"

namespace cohort::runtime {

class GrpcWorkerCache final : public WorkerCache {
 public:
  // `local_task` may be empty (a cache with no local worker, e.g. a
  // client's); otherwise it must be a task of `cluster`. `local_worker`
  // (not owned, may be null until SetLocalWorker) must outlive the cache.
  // InvalidArgument when a task has an empty address or `local_task` is not
  // in the cluster.
  static absl::StatusOr<std::unique_ptr<GrpcWorkerCache>> Create(
      const ClusterDef& cluster, std::string local_task,
      WorkerInterface* local_worker, rpc::TransportSecurity security);

  // For a Worker built after its cache (the Worker takes the cache in its
  // WorkerEnv): until set, the local task is reached through gRPC like the
  // others, which behaves the same.
  void SetLocalWorker(WorkerInterface* local_worker);

  std::vector<std::string> ListTasks() const override;
  // NotFound `task <t> is not in the cluster; known tasks: [...]`; the
  // errors of rpc::CreateChannel (unreadable TLS files).
  absl::StatusOr<WorkerInterface*> GetWorker(const std::string& task) override;
  std::string TaskAddress(const std::string& task) const override;

 private:
  GrpcWorkerCache(std::map<std::string, std::string> addresses,
                  std::string local_task, WorkerInterface* local_worker,
                  rpc::TransportSecurity security);
  // The canonical task name, or "" when `task` is not one.
  std::string Canonical(const std::string& task) const;

  const std::map<std::string, std::string> addresses_;  // task -> host:port
  const std::string local_task_;
  const rpc::TransportSecurity security_;

  mutable absl::Mutex mu_;
  WorkerInterface* local_worker_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<WorkerInterface>> remote_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_GRPC_WORKER_CACHE_H_
