// `cohort launch`: start a gang of tasks on this machine, all or nothing,
// with barrier execution mode, per-task logs and whole-gang retries; or, with
// --engine, one task per cluster-engine task, the launchers together giving
// the same gang semantics across machines (launch/cluster_launcher.h).
//
//   cohort launch -n 4 -- ./my_task --flag
//   cohort launch --chief --workers 2 --ps 1 --max-restarts 2 -- python3 t.py
//       (a ps job: a failed task is restarted alone, --restart task)
//   srun -n 4 cohort launch --engine slurm --jobs chief=1,worker=2,ps=1 -- ...
//
// Exit code: 0 when the job succeeded; otherwise the root-cause task's exit
// code (128 + signal when it was killed), 130 after Ctrl-C/SIGTERM, 1 when
// nothing could be started (bad flags, not enough slots, missing program).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/base/subprocess.h"
#include "cohort/coord/etcd_client.h"
#include "cohort/launch/cluster_launcher.h"
#include "cohort/launch/engine.h"
#include "cohort/launch/launch_support.h"
#include "cohort/launch/launcher.h"
#include "cohort/rpc/frame.h"
#include "cohort/rpc/job_token.h"
#include "cohort/rpc/transport.h"
#include "tools/cohort/commands.h"
#include "tools/cohort/flag_checks.h"
#include "tools/cohort/stop_signals.h"

namespace cohort::tools {
namespace {

// Runs `run` with Ctrl-C and SIGTERM turned into `stop()`. The signals are
// blocked in this thread before `run` starts any thread, so every thread of
// the launcher inherits the block and one watcher takes them with sigwait.
// (A handler would run on whichever thread the kernel picks; under
// ThreadSanitizer that delivery waits until the thread next enters the
// runtime, which a thread parked in a futex may never do.) Tasks start with
// an empty mask (base/subprocess.h), so they still see the signals.
template <typename Run, typename Stop>
auto WithStopSignals(Run run, Stop stop) -> decltype(run()) {
  sigset_t old;
  const sigset_t signals = BlockStopSignals(&old);
  signal(SIGPIPE, SIG_IGN);
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (true) {
      int number = 0;
      if (sigwait(&signals, &number) != 0) continue;
      if (done.load()) return;  // the launcher is done: the wake-up below
      stop();
    }
  });
  auto result = run();
  done.store(true);
  pthread_kill(watcher.native_handle(), SIGTERM);
  watcher.join();
  // A signal that came after the watcher left would, unblocked, end the
  // process by its default action and lose the job's exit code: the
  // launcher is done, so it is taken and dropped.
  const struct timespec now = {0, 0};
  while (sigtimedwait(&signals, nullptr, &now) > 0) {
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return result;
}

// `cohort launch -n N --rendezvous etcd://...`: engine task k of N, every
// one on this machine.
std::vector<launch::EngineTask> EngineTasksHere(int n) {
  std::vector<launch::EngineTask> tasks;
  for (int k = 0; k < n; ++k) {
    launch::EngineTask t;
    t.engine = "local";
    t.index = k;
    t.count = n;
    t.hosts.assign(n, "127.0.0.1");
    t.source = absl::StrCat("-n ", n, " on this machine");
    tasks.push_back(std::move(t));
  }
  return tasks;
}

// Runs the N launchers of a job on this machine, one thread each, meeting
// in etcd as launchers on N hosts would (so no launcher is special here
// either, though they share this process). One log directory and one job
// token (random unless given) serve them all; SIGINT/SIGTERM stops every
// one, and so does a launcher that could not run its part. The job's exit
// code is the highest any launcher returns (they agree unless one was cut
// off from etcd); an error is that of the lowest launcher that had one.
absl::StatusOr<launch::LaunchResult> RunHere(
    launch::ClusterLaunchOptions options, int n) {
  COHORT_ASSIGN_OR_RETURN(options.log_dir,
                          launch::PrepareLogDir(options.log_dir));
  if (options.job_token.empty()) {
    options.job_token = absl::BytesToHexString(rpc::RandomNonce());
  }
  std::vector<std::unique_ptr<launch::ClusterLauncher>> launchers;
  for (const launch::EngineTask& task : EngineTasksHere(n)) {
    options.engine = task;
    launchers.push_back(
        std::make_unique<launch::ClusterLauncher>(Env::Default(), options));
  }
  return WithStopSignals(
      [&]() -> absl::StatusOr<launch::LaunchResult> {
        std::vector<absl::StatusOr<launch::LaunchResult>> results(
            n, absl::UnknownError("not run"));
        std::vector<std::thread> threads;
        for (int k = 0; k < n; ++k) {
          threads.emplace_back([&, k] {
            results[k] = launchers[k]->Run();
            // One that could not run its part stops the others, which
            // would otherwise wait for it until their timeouts.
            if (!results[k].ok()) {
              for (auto& l : launchers) l->Stop();
            }
          });
        }
        for (std::thread& t : threads) t.join();
        launch::LaunchResult job;
        for (absl::StatusOr<launch::LaunchResult>& r : results) {
          if (!r.ok()) return r.status();
          if (r->exit_code >= job.exit_code) {
            const int attempts = std::max(job.attempts, r->attempts);
            job = *std::move(r);
            job.attempts = attempts;
          }
        }
        job.succeeded = job.exit_code == 0;
        return job;
      },
      [&] {
        for (auto& l : launchers) l->Stop();
      });
}

// The job token from a token file (rpc::ReadJobTokenFile's checks). Under an
// engine, a file that does not exist yet is created (0600, random) by engine
// task 0 and waited for by the others, for a file system every task shares.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path, bool engine,
                                          int engine_task,
                                          absl::Duration wait) {
  if (engine && engine_task == 0 && access(path.c_str(), F_OK) != 0) {
    const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
    const int fd =
        open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create ", tmp, ": ", strerror(errno)));
    }
    const std::string token = absl::BytesToHexString(rpc::RandomNonce()) + "\n";
    const bool ok = write(fd, token.data(), token.size()) ==
                    static_cast<ssize_t>(token.size());
    close(fd);
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
      unlink(tmp.c_str());
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", path, ": ", strerror(errno)));
    }
  }
  const absl::Time deadline =
      absl::Now() + (engine ? wait : absl::ZeroDuration());
  while (engine && access(path.c_str(), F_OK) != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(200));  // polling a shared file system
  }
  if (engine && engine_task != 0 && access(path.c_str(), F_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("token file ", path, " does not exist after waiting ",
                     absl::FormatDuration(wait),
                     " for engine task 0 to create it (check that the path is "
                     "on a file system every task shares)"));
  }
  return rpc::ReadJobTokenFile(path);
}

}  // namespace

void RegisterLaunchCommand(CLI::App& app, int& exit_code) {
  struct Flags {
    int n = 0;
    bool chief = false;
    int workers = 0;
    int ps = 0;
    bool evaluator = false;
    int slots = -1;
    int max_restarts = 0;
    std::string restart;
    std::string elastic;
    double elastic_wait_s = 60;
    double barrier_timeout_s = 365.0 * 24 * 3600;
    double stop_grace_s = 5;
    double heartbeat_timeout_s = 10;
    std::string log_dir;
    std::string token_file;
    bool quiet = false;
    bool no_progress = false;
    std::string ui;
    double progress_every_s = 5;
    std::string engine;
    std::string jobs;
    std::string rendezvous;
    std::string etcd_ca;
    std::string etcd_cert;
    std::string etcd_key;
    std::string etcd_credentials;
    double rendezvous_timeout_s = 300;
    double partition_grace_s = 60;
    std::string bind_host = "0.0.0.0";
    std::vector<std::string> command;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* launch = app.add_subcommand(
      "launch",
      "start a gang of tasks on this machine with barrier execution mode and "
      "whole-gang retry");
  auto* n_opt = launch->add_option("-n,--num-tasks", flags->n,
                                   "number of tasks (worker:0..N-1)");
  auto* chief_opt =
      launch->add_flag("--chief", flags->chief, "add a chief task (chief:0)");
  auto* workers_opt =
      launch->add_option("--workers", flags->workers, "number of worker tasks");
  auto* ps_opt = launch->add_option("--ps", flags->ps, "number of ps tasks");
  auto* eval_opt = launch->add_flag("--evaluator", flags->evaluator,
                                    "add an evaluator task (evaluator:0)");
  n_opt->excludes(chief_opt)
      ->excludes(workers_opt)
      ->excludes(ps_opt)
      ->excludes(eval_opt);
  launch->add_option("--slots", flags->slots,
                     "task slots on this machine; a job needing more fails "
                     "before starting anything (default: no limit)");
  launch->add_option("--max-restarts", flags->max_restarts,
                     "how many times the whole gang (--restart gang), or "
                     "each task (--restart task), may be restarted after a "
                     "task fails (default 0)");
  launch->add_option(
      "--restart", flags->restart,
      "what a task's failure restarts: task (the failed task alone, the "
      "others keep running: the default for a parameter-server job, one "
      "with --ps, a ps in --jobs or in TF_CONFIG) or gang (every task, from "
      "the start: the default for any other job)");
  launch->add_option(
      "--elastic", flags->elastic,
      "MIN:MAX: an elastic data-parallel job of MAX tasks (as torchrun's "
      "--nnodes MIN:MAX): a lost task leaves the collective group, the "
      "others go on from their last committed step while at least MIN "
      "remain, and its restart (--max-restarts per task) joins at a step "
      "boundary; implies --restart task");
  launch
      ->add_option("--elastic-wait", flags->elastic_wait_s,
                   "seconds an elastic job below MIN waits for a replacement "
                   "before it fails, naming the missing tasks (default 60)")
      ->check(Seconds(/*allow_zero=*/false));
  launch
      ->add_option("--barrier-timeout", flags->barrier_timeout_s,
                   "seconds a barrier sync may wait for all tasks (default "
                   "365 days, like spark.barrier.sync.timeout)")
      ->check(Seconds(/*allow_zero=*/false));
  launch
      ->add_option("--stop-grace", flags->stop_grace_s,
                   "seconds between SIGTERM and SIGKILL when stopping tasks "
                   "(default 5)")
      ->check(Seconds(/*allow_zero=*/true));
  launch
      ->add_option("--heartbeat-timeout", flags->heartbeat_timeout_s,
                   "seconds without heartbeats after which the job's "
                   "coordination service fails a connected task (default "
                   "10); with --engine a silent task is named then and "
                   "failed after --partition-grace more")
      ->check(Seconds(/*allow_zero=*/false));
  launch->add_option("--log-dir", flags->log_dir,
                     "directory for per-task logs (default: a new directory "
                     "under $TMPDIR or /tmp)");
  launch->add_flag("--quiet", flags->quiet,
                   "print only the training progress line and how the job "
                   "ended (task output goes to the logs)");
  launch->add_flag("--no-progress", flags->no_progress,
                   "no progress lines (task output is still printed)");
  auto* ui_opt =
      launch->add_option("--ui", flags->ui,
                         "[HOST:]PORT: serve the job's live page there "
                         "(loopback unless HOST is given; it needs the job "
                         "token, printed in its URL)");
  launch
      ->add_option("--progress-every", flags->progress_every_s,
                   "seconds between training progress lines (default 5)")
      ->check(Seconds(/*allow_zero=*/false));
  launch->add_option("--token-file", flags->token_file,
                     "the job token every server of the job requires "
                     "(default: a fresh random one, written to "
                     "LOG_DIR/job-token)");
  auto* engine_opt = launch->add_option(
      "--engine", flags->engine,
      "run as one task of a cluster engine's job: slurm, kubernetes, "
      "tf_config or auto; one `cohort launch` per engine task, task 0's "
      "launcher hosts the rendezvous");
  // Under an engine, `cohort ui --coordinator` shows the job.
  engine_opt->excludes(ui_opt);
  engine_opt->excludes(chief_opt)
      ->excludes(workers_opt)
      ->excludes(ps_opt)
      ->excludes(eval_opt);
  launch->add_option("--jobs", flags->jobs,
                     "with --engine (or -n N and --rendezvous etcd://): roles "
                     "of the engine's tasks in order of job name, e.g. "
                     "chief=1,worker=2,ps=1 (default: every task a worker)");
  auto* rendezvous_opt =
      launch->add_option("--rendezvous", flags->rendezvous,
                         "with --engine: HOST:PORT of task 0's launcher, or "
                         ":PORT to keep the engine's host (default: the "
                         "engine's address of task 0, port 8888); or "
                         "etcd://HOST:PORT[,HOST:PORT...][/PREFIX]: the job's "
                         "control plane in etcd, no launcher special "
                         "(docs/etcd.md); etcd:// also with -n N on one "
                         "machine: one launcher per task in this process");
  launch
      ->add_option("--etcd-ca", flags->etcd_ca,
                   "with --rendezvous etcd://: the CA file of the etcd "
                   "members' TLS certificates")
      ->needs(rendezvous_opt);
  launch
      ->add_option("--etcd-cert", flags->etcd_cert,
                   "with --rendezvous etcd://: this client's TLS certificate "
                   "(with --etcd-key), for members run with "
                   "--client-cert-auth")
      ->needs(rendezvous_opt);
  launch
      ->add_option("--etcd-key", flags->etcd_key,
                   "with --etcd-cert: its private key file")
      ->needs(rendezvous_opt);
  launch
      ->add_option("--etcd-credentials", flags->etcd_credentials,
                   "with --rendezvous etcd://: a file holding USER:PASSWORD "
                   "of an etcd user (never on the command line)")
      ->needs(rendezvous_opt);
  launch
      ->add_option("--rendezvous-timeout", flags->rendezvous_timeout_s,
                   "with --engine: seconds to reach task 0's launcher and "
                   "to wait for every launcher at an attempt's start and "
                   "end (default 300)")
      ->check(Seconds(/*allow_zero=*/false))
      ->needs(engine_opt);
  launch
      ->add_option("--partition-grace", flags->partition_grace_s,
                   "with --engine: seconds a silent launcher or program (a "
                   "partitioned or stalled host) may take to be heard from "
                   "again after --heartbeat-timeout before the job declares "
                   "it lost (default 60; 0: lost at the heartbeat timeout)")
      ->check(Seconds(/*allow_zero=*/true))
      ->needs(engine_opt);
  launch
      ->add_option("--bind-host", flags->bind_host,
                   "with --engine: the address the launcher's servers and "
                   "its task's port bind (default 0.0.0.0)")
      ->needs(engine_opt);
  launch
      ->add_option("command", flags->command,
                   "the program and its arguments, after --")
      ->required();

  launch->callback([flags, &exit_code] {
    auto fail = [&exit_code](const absl::Status& status) {
      std::cerr << "cohort launch: " << status.message() << std::endl;
      exit_code = 1;
    };
    std::vector<std::string> extra_env;
    // Tasks find this very binary in COHORT_BIN (for `cohort task ...`).
    if (const std::string self = ExecutablePath(); !self.empty()) {
      extra_env.push_back("COHORT_BIN=" + self);
    }
    const absl::Duration rendezvous_timeout =
        absl::Seconds(flags->rendezvous_timeout_s);
    // The restart rule: --restart, else the failed task alone for a
    // parameter-server job (its tasks recover from each other's loss through
    // MonitoredSession) and the whole gang for any other (barrier-mode and
    // collective tasks step together: their group cannot re-form yet).
    auto restart_mode =
        [&](bool has_ps) -> absl::StatusOr<launch::RestartMode> {
      if (!flags->restart.empty()) {
        return launch::ParseRestartMode(flags->restart);
      }
      return has_ps ? launch::RestartMode::kTask : launch::RestartMode::kGang;
    };
    // --elastic MIN:MAX (min 0 when not given).
    absl::StatusOr<coord::ElasticRange> elastic =
        flags->elastic.empty()
            ? absl::StatusOr<coord::ElasticRange>(coord::ElasticRange{})
            : coord::ParseElasticRange(flags->elastic, "--elastic");
    if (!elastic.ok()) return fail(elastic.status());
    const absl::Duration elastic_wait = absl::Seconds(flags->elastic_wait_s);

    // -n N with an etcd control plane: the engine's launchers, one per task,
    // as threads of this process on this machine.
    const bool etcd_here = flags->engine.empty() && !flags->rendezvous.empty();
    if (flags->engine.empty() && flags->rendezvous.empty() &&
        !flags->jobs.empty()) {
      return fail(absl::InvalidArgumentError(
          "--jobs needs --engine, or -n N with --rendezvous etcd://...; on "
          "one machine give roles with --chief, --workers, --ps"));
    }
    if (etcd_here &&
        (!absl::StartsWith(flags->rendezvous, coord::kEtcdScheme) ||
         flags->n <= 0 || flags->chief || flags->ps > 0 || flags->evaluator ||
         flags->workers > 0 || !flags->ui.empty())) {
      return fail(absl::InvalidArgumentError(
          "--rendezvous without --engine runs -n N tasks on this machine with "
          "the control plane in etcd: give -n N and --rendezvous "
          "etcd://HOST:PORT[,...][/PREFIX], with --jobs for roles (not "
          "--chief, --ps, --workers, --evaluator or --ui)"));
    }
    if (!flags->engine.empty() || etcd_here) {
      launch::EngineFlags ef;
      coord::EtcdClientOptions etcd;
      if (absl::StartsWith(flags->rendezvous, coord::kEtcdScheme)) {
        absl::StatusOr<coord::EtcdTarget> target =
            coord::ParseEtcdUrl(flags->rendezvous);
        if (!target.ok()) return fail(target.status());
        etcd.target = *target;
        // No single call to etcd outlasts the rendezvous timeout.
        etcd.call_timeout = std::min(etcd.call_timeout, rendezvous_timeout);
        etcd.ca_file = flags->etcd_ca;
        etcd.cert_file = flags->etcd_cert;
        etcd.key_file = flags->etcd_key;
        if (!flags->etcd_credentials.empty() && flags->etcd_ca.empty()) {
          return fail(absl::InvalidArgumentError(
              "--etcd-credentials without --etcd-ca would send the etcd "
              "password unencrypted; give the etcd CA (--etcd-ca) too"));
        }
        if (!flags->etcd_credentials.empty()) {
          absl::Status read =
              coord::ReadEtcdCredentials(flags->etcd_credentials, etcd);
          if (!read.ok()) return fail(read);
        }
      } else {
        ef.rendezvous = flags->rendezvous;
        if (!flags->etcd_ca.empty() || !flags->etcd_cert.empty() ||
            !flags->etcd_key.empty() || !flags->etcd_credentials.empty()) {
          return fail(absl::InvalidArgumentError(
              "--etcd-ca, --etcd-cert, --etcd-key and --etcd-credentials "
              "need --rendezvous etcd://..."));
        }
      }
      ef.num_tasks = flags->n;
      ef.timeout = rendezvous_timeout;
      absl::StatusOr<launch::EngineTask> engine =
          etcd_here
              ? EngineTasksHere(flags->n).front()
              : launch::ResolveEngineTask(Env::Default(), flags->engine, ef);
      if (!engine.ok()) return fail(engine.status());
      if (flags->n > 0 && flags->n != engine->count) {
        return fail(absl::InvalidArgumentError(absl::StrCat(
            "-n ", flags->n, " but the ", engine->engine, " engine runs ",
            engine->count, " task(s) (", engine->source, ")")));
      }
      launch::ClusterLaunchOptions options;
      options.engine = *engine;
      options.etcd = etcd;
      options.etcd_credentials_file = flags->etcd_credentials;
      if (!flags->jobs.empty()) {
        absl::StatusOr<std::map<std::string, int>> jobs =
            launch::ParseJobCounts(flags->jobs);
        if (!jobs.ok()) return fail(jobs.status());
        options.jobs = *jobs;
      }
      options.command = flags->command;
      // A ps in --jobs, or in the engine's own roles (TF_CONFIG).
      absl::StatusOr<launch::RestartMode> restart =
          restart_mode(options.jobs.count("ps") > 0 ||
                       engine->jobs.count("ps") > 0 || !flags->elastic.empty());
      if (!restart.ok()) return fail(restart.status());
      options.restart = *restart;
      options.max_restarts = flags->max_restarts;
      options.elastic = *elastic;
      options.elastic_wait = elastic_wait;
      options.rendezvous_timeout = rendezvous_timeout;
      options.barrier_timeout = absl::Seconds(flags->barrier_timeout_s);
      options.stop_grace = absl::Seconds(flags->stop_grace_s);
      options.heartbeat_timeout = absl::Seconds(flags->heartbeat_timeout_s);
      options.partition_grace = absl::Seconds(flags->partition_grace_s);
      options.bind_host = etcd_here ? "127.0.0.1" : flags->bind_host;
      options.log_dir = flags->log_dir;
      // Task 0's launcher prints the training progress line. Under an
      // engine --quiet also drops it (a launcher's lines are not told
      // apart there) and keeps a task's output in its log alone.
      options.progress = !flags->quiet && !flags->no_progress;
      options.progress_every = absl::Seconds(flags->progress_every_s);
      if (flags->quiet) options.output = [](const std::string&) {};
      options.extra_env = extra_env;
      if (!flags->token_file.empty()) {
        absl::StatusOr<std::string> token =
            ReadTokenFile(flags->token_file, /*engine=*/true, engine->index,
                          rendezvous_timeout);
        if (!token.ok()) return fail(token.status());
        options.job_token = *token;
      } else {
        options.job_token =
            Env::Default()->GetVar(rpc::kJobTokenEnvVar).value_or("");
        if (!options.job_token.empty()) {
          absl::Status strong = rpc::CheckJobTokenStrength(
              options.job_token, rpc::kJobTokenEnvVar);
          if (!strong.ok()) return fail(strong);
        }
      }
      if (etcd_here) {
        absl::StatusOr<launch::LaunchResult> result =
            RunHere(std::move(options), flags->n);
        if (!result.ok()) return fail(result.status());
        exit_code = result->exit_code;
        return;
      }
      launch::ClusterLauncher launcher(Env::Default(), options);
      absl::StatusOr<launch::LaunchResult> result = WithStopSignals(
          [&] { return launcher.Run(); }, [&] { launcher.Stop(); });
      if (!result.ok()) return fail(result.status());
      exit_code = result->exit_code;
      return;
    }

    if (flags->quiet && !Env::Default()->GetVar("COHORT_LOG_LEVEL")) {
      // The launcher's own informational log lines are not the summary.
      SetMinLogLevel(LogLevel::kWarning);
    }
    launch::LaunchOptions options;
    options.num_workers = flags->n > 0 ? flags->n : flags->workers;
    options.chief = flags->chief;
    options.num_ps = flags->ps;
    options.evaluator = flags->evaluator;
    options.slots = flags->slots;
    // An elastic job restarts lost tasks alone.
    absl::StatusOr<launch::RestartMode> restart =
        restart_mode(flags->ps > 0 || !flags->elastic.empty());
    if (!restart.ok()) return fail(restart.status());
    options.restart = *restart;
    options.max_restarts = flags->max_restarts;
    options.elastic = *elastic;
    options.elastic_wait = elastic_wait;
    if (elastic->min > 0 && options.num_workers == 0 && !flags->chief &&
        flags->ps == 0) {
      options.num_workers = elastic->max;  // -n defaults to MAX
    }
    options.barrier_timeout = absl::Seconds(flags->barrier_timeout_s);
    options.stop_grace = absl::Seconds(flags->stop_grace_s);
    options.heartbeat_timeout = absl::Seconds(flags->heartbeat_timeout_s);
    options.log_dir = flags->log_dir;
    options.progress = !flags->no_progress;
    options.quiet = flags->quiet;
    options.progress_every = absl::Seconds(flags->progress_every_s);
    options.ui = flags->ui;
    options.command = flags->command;
    options.extra_env = extra_env;
    if (!flags->token_file.empty()) {
      absl::StatusOr<std::string> token = ReadTokenFile(
          flags->token_file, /*engine=*/false, 0, absl::ZeroDuration());
      if (!token.ok()) {
        std::cerr << "cohort launch: " << token.status().message() << std::endl;
        exit_code = 1;
        return;
      }
      options.job_token = *token;
    }
    launch::Launcher launcher(Env::Default(), options);
    absl::StatusOr<launch::LaunchResult> result = WithStopSignals(
        [&] { return launcher.Run(); }, [&] { launcher.Stop(); });
    if (!result.ok()) return fail(result.status());
    exit_code = result->exit_code;
  });
}

}  // namespace cohort::tools
