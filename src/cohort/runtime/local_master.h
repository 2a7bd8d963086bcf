// LocalMaster: the masters of this process's servers, found by target, so
// that a GrpcSession whose target is one of them calls it in process, as
// TensorFlow's LocalMaster does: no gRPC, no serialisation through a socket,
// no thread hop per step. That is how each task of a between-graph job
// (train_collective, train_ps) reaches its own server.
//
//   // Server, once its target is known:
//   local_ = LocalMaster::Register(target, master, job_token);
//   // GrpcSession::Create:
//   std::shared_ptr<LocalMaster> m = LocalMaster::Find(target, token);
//   if (m != nullptr) status = m->Call(&opts, request, &response);
//   // Server::Stop, after the master stopped:
//   local_->Detach();   // waits for calls in flight; later ones: Unavailable
//
// Find answers only a caller holding the server's job token, over a server
// without TLS (a TLS server is reached over gRPC, where its certificates are
// checked): the in-process path admits exactly who the gRPC path would.
//
// Thread safety: thread-safe.
#ifndef COHORT_RUNTIME_LOCAL_MASTER_H_
#define COHORT_RUNTIME_LOCAL_MASTER_H_

#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "cohort/runtime/call_options.h"
#include "cohort/runtime/master.h"

namespace cohort::runtime {

class LocalMaster {
 public:
  // Registers `master` under `target` ("grpc://host:port"), replacing an
  // earlier registration of that target. `master` must stay valid until
  // Detach() returns.
  static std::shared_ptr<LocalMaster> Register(const std::string& target,
                                               Master* master,
                                               std::string job_token);
  // The master registered under `target` when `job_token` is its token;
  // null otherwise (the caller then uses gRPC).
  static std::shared_ptr<LocalMaster> Find(const std::string& target,
                                           const std::string& job_token);

  // Runs one master call (InvokeMaster) unless detached: then Unavailable
  // naming the target, as a stopped server's connection would be.
  template <typename Request, typename Response>
  absl::Status Call(CallOptions* opts, const Request& request,
                    Response* response) ABSL_LOCKS_EXCLUDED(mu_) {
    Master* master = Enter(opts);
    if (master == nullptr) return Detached();
    absl::Status status = InvokeMaster(master, opts, request, response);
    Leave(opts);
    return status;
  }

  // Unregisters, refuses new calls, cancels those in flight (as a stopping
  // gRPC server cancels its calls) and waits for them to return.
  void Detach() ABSL_LOCKS_EXCLUDED(mu_);

  LocalMaster(std::string target, Master* master, std::string job_token)
      : target_(std::move(target)),
        job_token_(std::move(job_token)),
        master_(master) {}

 private:
  // The master, `opts` counted in flight; null once detached.
  Master* Enter(CallOptions* opts) ABSL_LOCKS_EXCLUDED(mu_);
  void Leave(CallOptions* opts) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Detached() const;

  const std::string target_;
  const std::string job_token_;
  absl::Mutex mu_;
  Master* master_ ABSL_GUARDED_BY(mu_);
  std::set<CallOptions*> in_flight_ ABSL_GUARDED_BY(mu_);
  // Detach is cancelling the calls in flight: none may leave until it is done.
  bool cancelling_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_LOCAL_MASTER_H_
