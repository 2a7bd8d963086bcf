// The launcher behind `cohort launch --engine ...`: one launcher per task of
// a cluster engine (Slurm, Kubernetes, a TF_CONFIG scheduler), each starting
// one task of the job, together giving the gang semantics `cohort launch -n N`
// gives on one machine.
//
//   ClusterLaunchOptions options;
//   options.engine = *ResolveEngineTask(env, "slurm", {});
//   options.jobs = {{"chief", 1}, {"worker", 2}, {"ps", 1}};
//   options.command = {"python3", "train.py"};
//   options.job_token = ...;              // the same on every launcher
//   ClusterLauncher launcher(env, options);
//   absl::StatusOr<LaunchResult> result = launcher.Run();   // blocks
//
// Rendezvous: engine task 0's launcher serves the job's control plane at
// engine.rendezvous (a coordination service whose tasks are the launchers,
// "launcher:0".."launcher:N-1", with the job token), and, per attempt, the
// programs' coordination service and the barrier coordinator. Every launcher
// registers there (retrying until rendezvous_timeout), picks a free port on
// its own host for its program, publishes it, and waits at a barrier of all
// launchers; then each starts its program with the environment the
// single-machine launcher gives (job_plan.h: TF_CONFIG with the agreed
// addresses, partition id, attempt number, coordination address, job token).
// Roles: engine task k is the k-th task of `jobs` sorted by job name
// (PlanEngineTasks); no jobs: every task is a worker.
//
// Gang semantics: the first failure of an attempt (a program that exits
// non-zero or by a signal, a program failed by the coordination service for
// lost heartbeats, or an interrupted launcher) is recorded once, first
// writer wins, in the control plane (attempt_ledger.h); every launcher
// watches that key, so it sees the verdict as soon as it is written, stops
// its program (SIGTERM, SIGKILL after stop_grace), and
// waits for all launchers at the end of the attempt. Task 0 prints the
// root-cause summary; the others print one line naming it. While restarts
// remain (and the failure was not an interruption) all start the next
// attempt together, its number agreed through the control plane's keys;
// otherwise every launcher exits with the root cause's code.
//
// Silence: a launcher or program whose heartbeats stop is named by task 0's
// launcher once silent for heartbeat_timeout (a program: at least 10 s, its
// server's own interval; SilenceWatch) but declared lost only after
// heartbeat_timeout + partition_grace, so a partition healed within it is
// survived. In an elastic job (--elastic) a program is declared lost once
// silent for max(heartbeat_timeout, 10 s): task 0's launcher removes it from
// the membership, the others train on, and its own launcher restarts it
// when it sees it removed (after the heal, for a partition). A launcher that
// loses the control plane for that long (task 0's
// launcher or its host died, or its own host is cut off) stops its program and
// fails; one declared lost fails every other launcher (the coordination
// service's error propagation), naming it and its host. The job succeeds when
// every chief, worker and evaluator program exited 0 in one attempt; ps
// programs are then stopped.
//
// With an etcd control plane (ClusterLaunchOptions::etcd) every launcher
// meets the others in etcd (etcd_coordination_client.h, space
// "launchers/"), and each attempt's programs share a coordination service in
// etcd too (space "programs/<attempt>/", their address the etcd URL): a
// launcher is lost when its etcd lease (heartbeat_timeout +
// partition_grace) expires, whichever launcher it is. Under the gang policy
// that fails the attempt. Under --restart task the loss is no job error:
// every launcher follows the others' leases (EtcdLauncherLossWatch). In an
// elastic job the lost launcher's task leaves the membership and the
// others train on; otherwise the others run on while their tasks wait, up
// to rendezvous_timeout, for a launcher started again for that engine task
// (the engine restarting it), which finds the job running, rejoins its
// attempt without a barrier and starts its task as restart 1. The launcher
// that prints summaries is then the lowest one not lost. Not yet with
// etcd: the barrier-mode gang service (BarrierTaskContext), the silence
// lines and the progress line, which need task 0's services.
//
// Thread safety: Run() is called once, from one thread; Stop() may be called
// from any thread at any time.
#ifndef COHORT_LAUNCH_CLUSTER_LAUNCHER_H_
#define COHORT_LAUNCH_CLUSTER_LAUNCHER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/coord/etcd_client.h"
#include "cohort/launch/engine.h"
#include "cohort/launch/launcher.h"

namespace cohort::launch {

struct ClusterLaunchOptions {
  EngineTask engine;
  // Job name -> task count, adding up to engine.count; empty: the engine's
  // own jobs (tf_config), else every task a worker.
  std::map<std::string, int> jobs;
  std::vector<std::string> command;
  // As LaunchOptions::restart and max_restarts: under kTask each launcher
  // restarts its own program alone; the coordination service fails no
  // other program for it, and task 0 leaves another launcher's program to
  // that launcher.
  RestartMode restart = RestartMode::kGang;
  int max_restarts = 0;
  // As LaunchOptions::elastic and elastic_wait (min 0: off): every task a
  // worker, MAX of them; each launcher removes its own lost task from the
  // membership, task 0's (with etcd: every launcher) fails the job below
  // MIN.
  coord::ElasticRange elastic;
  absl::Duration elastic_wait = absl::Seconds(60);
  // Required, the same on every launcher (see docs/slurm.md,
  // docs/kubernetes.md for how each engine hands it over).
  std::string job_token;
  // The job's control plane in an etcd cluster instead of task 0's launcher
  // (--rendezvous etcd://HOST:PORT[,...][/PREFIX], docs/etcd.md): then no
  // launcher is special. `etcd.target` empty: task 0's launcher serves it.
  // etcd_credentials_file: the file `etcd`'s user and password came from,
  // handed to the programs by name.
  coord::EtcdClientOptions etcd;
  std::string etcd_credentials_file;
  // How long a launcher tries to reach task 0's launcher, and how long any
  // launcher waits for all the others at an attempt's start and end.
  absl::Duration rendezvous_timeout = absl::Minutes(5);
  absl::Duration barrier_timeout = absl::Hours(24 * 365);
  // A launcher or program silent for heartbeat_timeout is named by task 0's
  // launcher (with its host); it is declared lost only when silent for
  // heartbeat_timeout + partition_grace (an elastic job's program: when
  // silent for max(heartbeat_timeout, 10 s)). A host partitioned, stalled or
  // rebooting its network for less costs the job nothing beyond what its
  // programs' own recovery does; a dead host is found that much later.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  absl::Duration partition_grace = absl::Seconds(60);
  absl::Duration stop_grace = absl::Seconds(5);
  // The address this launcher's servers bind (task 0's control plane, the
  // program's port is picked on it).
  std::string bind_host = "0.0.0.0";
  std::string log_dir;  // as LaunchOptions::log_dir
  int summary_lines = 10;
  bool progress = true;
  // Task 0's launcher: a training progress line (launcher.h's) this often.
  absl::Duration progress_every = absl::Seconds(5);
  std::vector<std::string> extra_env;
  std::function<void(const std::string&)> output;
  std::function<void(const std::string&)> messages;
};

class ClusterLauncher {
 public:
  // `env` must outlive the launcher.
  ClusterLauncher(Env* env, ClusterLaunchOptions options);
  ~ClusterLauncher();
  ClusterLauncher(const ClusterLauncher&) = delete;
  ClusterLauncher& operator=(const ClusterLauncher&) = delete;

  // Runs this launcher's part of the job to the end. A finished job, failed
  // or not, is a LaunchResult (exit_code: 0, the root cause's code, 130 when
  // interrupted); an error status means the job could not start here:
  // InvalidArgument for bad options, DeadlineExceeded naming the rendezvous
  // address and the engine when task 0's launcher was not reachable,
  // Unauthenticated for a job token task 0 does not share.
  absl::StatusOr<LaunchResult> Run();

  // Stops this launcher's program and, through the control plane, the whole
  // job (no restart); Run() returns exit code 130. Never blocks.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::launch

#endif  // COHORT_LAUNCH_CLUSTER_LAUNCHER_H_
