#include "bench/runtime/server_cluster.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/rpc/socket.h"
#include "cohort/rpc/transport.h"

namespace cohort::bench {
namespace {

constexpr char kHost[] = "127.0.0.1";
constexpr char kServingPrefix[] = "serving ";

}  // namespace

absl::StatusOr<std::unique_ptr<ServerCluster>> ServerCluster::Start(
    const std::vector<std::pair<std::string, int>>& jobs,
    const Options& options) {
  std::unique_ptr<ServerCluster> cluster(new ServerCluster());
  Json spec = Json::object();
  for (const auto& [job, count] : jobs) {
    spec[job] = Json::array();
    for (int i = 0; i < count; ++i) {
      // Every task gets a port picked now: the other tasks need it in the
      // cluster they are given. (A cluster of one task could use port 0,
      // which `cohort server` binds and reports on its "serving" line, but
      // one way for all sizes keeps this simple.)
      COHORT_ASSIGN_OR_RETURN(int port, rpc::PickFreePort(kHost));
      const std::string host = options.host ? options.host(job) : kHost;
      spec[job].push_back(absl::StrCat(host, ":", port));
      cluster->tasks_.push_back(Task{job, i, "", nullptr});
    }
  }
  const std::string spec_json = JsonDump(spec);
  const std::vector<std::string> env = {
      absl::StrCat(rpc::kJobTokenEnvVar, "=", options.job_token)};
  // Start every task before waiting for any: a server may wait for its
  // peers (the coordination agent registers with its service) before it
  // says it serves.
  for (Task& task : cluster->tasks_) {
    std::vector<std::string> argv;
    if (options.prefix) argv = options.prefix(task.job);
    for (const std::string& a :
         {options.exe, std::string("server"), std::string("--cluster"),
          spec_json, std::string("--job"), task.job, std::string("--task"),
          std::to_string(task.index)}) {
      argv.push_back(a);
    }
    if (options.threads > 0) {
      argv.push_back("--threads");
      argv.push_back(std::to_string(options.threads));
    }
    COHORT_ASSIGN_OR_RETURN(
        task.process, ChildProcess::Start(
                          absl::StrCat(task.job, ":", task.index), argv, env));
  }
  const absl::Time deadline = absl::Now() + options.start_timeout;
  for (Task& task : cluster->tasks_) {
    // On failure the destructor stops the servers already running.
    COHORT_ASSIGN_OR_RETURN(
        task.target, task.process->AwaitLine(kServingPrefix,
                                             std::max(absl::ZeroDuration(),
                                                      deadline - absl::Now())));
  }
  return cluster;
}

ServerCluster::~ServerCluster() { (void)Stop(); }

absl::StatusOr<std::string> ServerCluster::target(const std::string& job,
                                                  int task) const {
  for (const Task& t : tasks_) {
    if (t.job == job && t.index == task) return t.target;
  }
  return absl::NotFoundError(
      absl::StrCat("no task ", job, ":", task, " in the benchmark's cluster"));
}

absl::StatusOr<double> ServerCluster::CpuSeconds() const {
  double total = 0;
  for (const Task& t : tasks_) {
    if (t.process == nullptr) continue;
    COHORT_ASSIGN_OR_RETURN(double seconds,
                            ProcessCpuSeconds(t.process->pid()));
    total += seconds;
  }
  return total;
}

absl::Status ServerCluster::Stop() {
  // Signal all first, so that their grace periods overlap.
  for (Task& task : tasks_) {
    if (task.process != nullptr) task.process->Terminate();
  }
  std::vector<std::string> unclean;
  for (Task& task : tasks_) {
    if (task.process == nullptr) continue;
    const launch::ExitInfo how = task.process->Stop(kStopGrace);
    if (!how.ok()) {
      unclean.push_back(absl::StrCat(task.process->name(), " ", how.Describe(),
                                     " (output ends: ", task.process->Tail(),
                                     ")"));
    }
    task.process.reset();
  }
  if (unclean.empty()) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("`cohort server` did not stop cleanly on SIGTERM: ",
                   absl::StrJoin(unclean, "; ")));
}

}  // namespace cohort::bench
