// `cohort launch`: start a gang of tasks on this machine, all or nothing,
// with barrier execution mode, per-task logs and whole-gang retries.
//
//   cohort launch -n 4 -- ./my_task --flag
//   cohort launch --chief --workers 2 --ps 1 --max-restarts 2 -- python3 t.py
//
// Exit code: 0 when the job succeeded; otherwise the root-cause task's exit
// code (128 + signal when it was killed), 130 after Ctrl-C/SIGTERM, 1 when
// nothing could be started (bad flags, not enough slots, missing program).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "cohort/barrier/launcher.h"
#include "cohort/base/env.h"
#include "tools/cohort/commands.h"

namespace cohort::tools {
namespace {

int g_signal_pipe[2] = {-1, -1};

void OnStopSignal(int sig) {
  const char byte = static_cast<char>(sig);
  ssize_t ignored = write(g_signal_pipe[1], &byte, 1);
  (void)ignored;
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
    double barrier_timeout_s = 365.0 * 24 * 3600;
    double stop_grace_s = 5;
    double heartbeat_timeout_s = 10;
    std::string log_dir;
    std::string token_file;
    bool quiet = false;
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
                     "how many times the whole gang may be restarted after a "
                     "task fails (default 0)");
  launch->add_option("--barrier-timeout", flags->barrier_timeout_s,
                     "seconds a barrier sync may wait for all tasks (default "
                     "365 days, like spark.barrier.sync.timeout)");
  launch->add_option("--stop-grace", flags->stop_grace_s,
                     "seconds between SIGTERM and SIGKILL when stopping tasks "
                     "(default 5)");
  launch->add_option("--heartbeat-timeout", flags->heartbeat_timeout_s,
                     "seconds without heartbeats after which the job's "
                     "coordination service fails a connected task (default "
                     "10)");
  launch->add_option("--log-dir", flags->log_dir,
                     "directory for per-task logs (default: a new directory "
                     "under $TMPDIR or /tmp)");
  launch->add_flag("--quiet", flags->quiet, "no progress lines");
  launch->add_option("--token-file", flags->token_file,
                     "the job token every server of the job requires "
                     "(default: a fresh random one, written to "
                     "LOG_DIR/job-token)");
  launch
      ->add_option("command", flags->command,
                   "the program and its arguments, after --")
      ->required();

  launch->callback([flags, &exit_code] {
    barrier::LaunchOptions options;
    options.num_workers = flags->n > 0 ? flags->n : flags->workers;
    options.chief = flags->chief;
    options.num_ps = flags->ps;
    options.evaluator = flags->evaluator;
    options.slots = flags->slots;
    options.max_restarts = flags->max_restarts;
    options.barrier_timeout = absl::Seconds(flags->barrier_timeout_s);
    options.stop_grace = absl::Seconds(flags->stop_grace_s);
    options.heartbeat_timeout = absl::Seconds(flags->heartbeat_timeout_s);
    options.log_dir = flags->log_dir;
    options.progress = !flags->quiet;
    options.command = flags->command;
    if (!flags->token_file.empty()) {
      absl::StatusOr<std::string> token =
          Env::Default()->ReadFile(flags->token_file);
      std::string line = token.ok() ? token->substr(0, token->find('\n')) : "";
      if (!token.ok() || line.empty()) {
        std::cerr << "cohort launch: --token-file " << flags->token_file << ": "
                  << (token.ok() ? "empty; expected the token on its first line"
                                 : std::string(token.status().message()))
                  << std::endl;
        exit_code = 1;
        return;
      }
      options.job_token = line;
    }
    // Tasks find this very binary in COHORT_BIN (for `cohort task ...`).
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len > 0) {
      options.extra_env.push_back("COHORT_BIN=" +
                                  std::string(self, static_cast<size_t>(len)));
    }

    barrier::Launcher launcher(Env::Default(), options);
    // Ctrl-C and SIGTERM stop every task cleanly: the handler only writes to
    // a pipe; a thread turns that into Launcher::Stop().
    if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
      std::cerr << "cohort launch: pipe failed: " << strerror(errno)
                << std::endl;
      exit_code = 1;
      return;
    }
    struct sigaction sa {};
    sa.sa_handler = OnStopSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
    std::thread watcher([&launcher] {
      char byte;
      while (true) {
        const ssize_t got = read(g_signal_pipe[0], &byte, 1);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0 || byte == 0) return;  // 0: the launcher is done
        launcher.Stop();
      }
    });

    absl::StatusOr<barrier::LaunchResult> result = launcher.Run();

    const char done = 0;
    ssize_t ignored = write(g_signal_pipe[1], &done, 1);
    (void)ignored;
    watcher.join();
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (!result.ok()) {
      std::cerr << "cohort launch: " << result.status().message() << std::endl;
      exit_code = 1;
      return;
    }
    exit_code = result->exit_code;
  });
}

}  // namespace cohort::tools
