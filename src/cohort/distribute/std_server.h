// StdServer: the "standard TensorFlow server" the distribute coordinator
// starts for a task (docs/distribute.md), behind a factory
// so tests and the conformance adapter can record what would be started.
//
// The real factory (RealStdServerFactory) creates and starts a
// runtime::Server for the task: the job token comes from COHORT_JOB_TOKEN
// and, under `cohort launch`, the server joins the launcher's coordination
// service (COHORT_COORDINATION_SERVICE_ADDRESS), both read through the Env.
// Its coordination agent is what the INDEPENDENT_WORKER worker barrier
// uses.
//
// GoogleFakeServer is what TF_CONFIG `"environment": "google"` gets: no
// server at all (the environment runs one); Join sleeps 5 s at a time on
// the Env's clock until Stop.
//
// Thread safety: StdServer and StdServerFactory implementations are
// thread-safe.
#ifndef COHORT_DISTRIBUTE_STD_SERVER_H_
#define COHORT_DISTRIBUTE_STD_SERVER_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/cluster/cluster_spec.h"
#include "cohort/config.pb.h"

namespace cohort::coord {
class CoordinationAgent;
}  // namespace cohort::coord

namespace cohort::distribute {

// What a standard server is started with. `cluster` is already split for
// the evaluator (§2.5); `session_config` has no device filters.
struct StdServerArgs {
  ClusterSpec cluster;
  std::string task_type;
  int task_id = 0;
  ConfigProto session_config;
  std::string rpc_layer;    // "" = the default protocol (grpc)
  std::string environment;  // TF_CONFIG's "environment"
};

class StdServer {
 public:
  virtual ~StdServer() = default;
  // Blocks until the server stops (for the real server: until Stop; for
  // the Google fake: until Stop, sleeping on the Env meanwhile).
  virtual absl::Status Join() = 0;
  // Ends Join. Idempotent.
  virtual void Stop() = 0;
  // "grpc://host:port" (what clients connect to).
  virtual std::string target() const = 0;
  // Human-readable kind, for logs and the conformance adapter.
  virtual std::string description() const = 0;
  // This task's connected coordination agent, valid while the server runs;
  // blocks up to `timeout` for it to register. NotFound when the server has
  // none (the default).
  virtual absl::StatusOr<coord::CoordinationAgent*> WaitForCoordinationAgent(
      absl::Duration timeout);
};

class StdServerFactory {
 public:
  virtual ~StdServerFactory() = default;
  // Creates and starts the server of `args`. Errors: the server's (bad
  // address, port in use, unknown protocol, ...).
  virtual absl::StatusOr<std::unique_ptr<StdServer>> CreateAndStart(
      const StdServerArgs& args, Env* env) = 0;
};

// The process-wide factory of real runtime::Servers. Never null.
StdServerFactory* RealStdServerFactory();

// The Google-environment fake: nothing listens; Join loops SleepFor(5 s)
// on `env` until Stop.
class GoogleFakeServer : public StdServer {
 public:
  GoogleFakeServer(Env* env, std::string target);
  absl::Status Join() override;
  void Stop() override;
  std::string target() const override { return target_; }
  std::string description() const override;

 private:
  Env* const env_;
  const std::string target_;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cohort::distribute

#endif  // COHORT_DISTRIBUTE_STD_SERVER_H_
