// ServerCluster: real `cohort server` processes on 127.0.0.1, one per task,
// for the runtime suite (tensors and steps must cross process boundaries,
// as they do in a job).
//
//   ServerCluster::Options options;
//   options.exe = "/path/to/cohort";           // the bench's own binary
//   options.job_token = token;                 // given as COHORT_JOB_TOKEN
//   COHORT_ASSIGN_OR_RETURN(auto cluster,
//       ServerCluster::Start({{"ps", 1}, {"worker", 1}}, options));
//   GrpcSession::Create(*cluster->target("worker", 0), graph, ...);
//   COHORT_RETURN_IF_ERROR(cluster->Stop());   // each must exit 0
//
// Every task runs `EXE server --cluster JSON --job J --task I` in its own
// process group, with the job token in its environment (as `cohort
// launch` hands it over; never on the command line). A cluster of several
// tasks needs every address before any server starts, so ports are picked
// free by the OS just before (rpc::PickFreePort; a port taken in between
// makes that server fail to start, reported as such). A single task gets
// one too: `cohort server` does not accept port 0 in --cluster.
//
// Thread safety: thread-compatible.
#ifndef COHORT_BENCH_RUNTIME_SERVER_CLUSTER_H_
#define COHORT_BENCH_RUNTIME_SERVER_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bench/runtime/child_process.h"

namespace cohort::bench {

class ServerCluster {
 public:
  struct Options {
    std::string exe;  // The cohort binary.
    std::string job_token;
    int threads = 0;  // `--threads` of each server; 0 = its default.
    // Bounds the wait for every "serving grpc://..." line.
    absl::Duration start_timeout = absl::Seconds(60);
    // Where each job's tasks run (the multi-host lab): the address in the
    // cluster (default 127.0.0.1) and a prefix to their command (e.g. `ip
    // netns exec cohort-h1`). Unset: this machine's loopback.
    std::function<std::string(const std::string& job)> host;
    std::function<std::vector<std::string>(const std::string& job)> prefix;
  };

  // Starts `jobs` ({job name, number of tasks}) and blocks until every
  // server prints its `serving` line. Errors: the spawn's (NotFound for a
  // missing binary), FailedPrecondition for a server that exited first and
  // DeadlineExceeded for one that stayed silent past start_timeout (both
  // naming the task and quoting its last output). Servers already started
  // are stopped on failure.
  static absl::StatusOr<std::unique_ptr<ServerCluster>> Start(
      const std::vector<std::pair<std::string, int>>& jobs,
      const Options& options);

  ~ServerCluster();  // Stop(), ignoring its result.
  ServerCluster(const ServerCluster&) = delete;
  ServerCluster& operator=(const ServerCluster&) = delete;

  // "grpc://127.0.0.1:PORT" of `job`:`task`, as the server printed it.
  // NotFound for a task that is not in the cluster.
  absl::StatusOr<std::string> target(const std::string& job, int task) const;

  // CPU seconds (user + system) all servers have used so far; errors as
  // ProcessCpuSeconds (a server that died).
  absl::StatusOr<double> CpuSeconds() const;

  // SIGTERM to every server, each given kStopGrace to exit. `cohort
  // server` promises a clean stop (exit 0), so anything else is an error:
  // Internal naming each task that exited otherwise or had to be killed.
  // Idempotent (later calls return OK).
  absl::Status Stop();

  static constexpr absl::Duration kStopGrace = absl::Seconds(10);

 private:
  struct Task {
    std::string job;
    int index = 0;
    std::string target;
    std::unique_ptr<ChildProcess> process;
  };
  ServerCluster() = default;

  std::vector<Task> tasks_;
};

}  // namespace cohort::bench

#endif  // COHORT_BENCH_RUNTIME_SERVER_CLUSTER_H_
