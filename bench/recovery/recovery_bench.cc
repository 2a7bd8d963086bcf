#include "bench/recovery/recovery_bench.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/common/flags.h"
#include "bench/common/gang.h"
#include "bench/common/peer.h"
#include "cohort/base/env.h"
#include "cohort/base/json.h"
#include "cohort/launch/launcher.h"

namespace cohort::bench {
namespace {

constexpr char kSuite[] = "recovery";
constexpr char kVictim[] = "worker:1";
// How long one job may take from its start to its end.
constexpr absl::Duration kJobDeadline = absl::Minutes(10);
// Lines of the job's output an error carries.
constexpr size_t kOutputTail = 20;

struct Flags {
  int reps = 3;
  int kill_step = 120;
  int steps = 300;
  // The elastic job steps about ten times faster than the ps job: it needs
  // more steps for the killed worker's restart to join before the end.
  int elastic_steps = 4000;
  int checkpoint_every = 50;
  int hidden = 1024;
  int batch = 64;
  std::string train_ps;
  std::string train_data_parallel;
  std::string peer_script;
  bool no_peer = false;
};

bool ParseFlags(const std::vector<std::string>& args, Flags& f,
                std::string& error) {
  FlagReader flags(args,
                   "flags: --reps N --kill-step N --steps N "
                   "--elastic-steps N --checkpoint-every N --hidden N "
                   "--batch N --train-ps PATH --train-data-parallel PATH "
                   "--peer-script PATH --no-peer");
  while (flags.Next()) {
    if (flags.Is("--reps")) {
      flags.PositiveInt(f.reps);
    } else if (flags.Is("--kill-step")) {
      flags.PositiveInt(f.kill_step);
    } else if (flags.Is("--steps")) {
      flags.PositiveInt(f.steps);
    } else if (flags.Is("--checkpoint-every")) {
      flags.PositiveInt(f.checkpoint_every);
    } else if (flags.Is("--hidden")) {
      flags.PositiveInt(f.hidden);
    } else if (flags.Is("--batch")) {
      flags.PositiveInt(f.batch);
    } else if (flags.Is("--elastic-steps")) {
      flags.PositiveInt(f.elastic_steps);
    } else if (flags.Is("--train-ps")) {
      flags.Value(f.train_ps);
    } else if (flags.Is("--train-data-parallel")) {
      flags.Value(f.train_data_parallel);
    } else if (flags.Is("--peer-script")) {
      flags.Value(f.peer_script);
    } else if (flags.Is("--no-peer")) {
      flags.Switch(f.no_peer);
    } else {
      flags.Unknown();
    }
  }
  if (!flags.ok()) {
    error = flags.error();
    return false;
  }
  if (f.steps <= f.kill_step || f.elastic_steps <= f.kill_step) {
    error = absl::StrCat("--steps (", f.steps, ") and --elastic-steps (",
                         f.elastic_steps, ") must be past --kill-step (",
                         f.kill_step, "): the jobs train on after the kill");
    return false;
  }
  return true;
}

// The job's output as it is printed, each line with when it was read.
class TimedLines {
 public:
  void Add(const std::string& line) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    lines_.push_back({absl::Now(), line});
  }
  // No more lines will come (the job ended): waits end.
  void Close() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  // Waits until `match` holds for a line from index `from` on; returns its
  // index, or nullopt at `deadline` or once closed without one.
  template <typename Match>
  std::optional<size_t> Await(size_t from, Match match, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    std::optional<size_t> found;
    size_t next = from;
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (; next < lines_.size() && !found.has_value(); ++next) {
        if (match(lines_[next].second)) found = next;
      }
      return found.has_value() || closed_;
    };
    mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
    return found;
  }
  std::pair<absl::Time, std::string> At(size_t i) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return lines_[i];
  }
  std::vector<std::pair<absl::Time, std::string>> Snapshot()
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return lines_;
  }
  std::string Tail() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> tail;
    for (size_t i = lines_.size() > kOutputTail ? lines_.size() - kOutputTail
                                                : 0;
         i < lines_.size(); ++i) {
      tail.push_back(lines_[i].second);
    }
    return absl::StrJoin(tail, " | ");
  }

 private:
  absl::Mutex mu_;
  std::vector<std::pair<absl::Time, std::string>> lines_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// The number after `key` in `line` ("global_step 420 ..."), if any.
std::optional<int64_t> NumberAfter(absl::string_view line,
                                   absl::string_view key) {
  const size_t at = line.find(key);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = line.substr(at + key.size());
  const size_t end = rest.find_first_not_of("0123456789");
  int64_t v;
  if (!absl::SimpleAtoi(rest.substr(0, end), &v)) return std::nullopt;
  return v;
}

// A training task's step line: "[worker:1] worker:1: global_step 420 ...".
std::optional<int64_t> StepOf(absl::string_view line,
                              absl::string_view task = "") {
  if (!task.empty() && !absl::StartsWith(line, absl::StrCat("[", task, "] "))) {
    return std::nullopt;
  }
  if (!absl::StrContains(line, ": global_step ")) return std::nullopt;
  return NumberAfter(line, ": global_step ");
}

std::string TrainPsPath(const Flags& f) {
  return ProgramBesideThisBinary("train_ps", f.train_ps);
}

std::string TrainDataParallelPath(const Flags& f) {
  return ProgramBesideThisBinary("train_data_parallel", f.train_data_parallel);
}

// rank 0's step line of the data-parallel job: "[worker:0] step 420/600 ...".
std::optional<int64_t> DataParallelStepOf(absl::string_view line) {
  if (!absl::StartsWith(line, "[worker:0] step ")) return std::nullopt;
  return NumberAfter(line, "[worker:0] step ");
}

// What differs between the two jobs the suite kills a worker of.
struct Job {
  std::string name;  // in errors
  Json params;
  launch::LaunchOptions options;  // without sinks
  std::string victim;
  // The step a line reports (any task's), if it is a step line.
  std::function<std::optional<int64_t>(absl::string_view)> step_of;
  // The line of the victim's process that reached the kill step.
  std::function<bool(absl::string_view)> at_kill_step;
  // The line that says the job knows of the loss (`pid`: the victim's).
  std::function<bool(absl::string_view, int64_t pid)> detected;
  // The first step line after the loss, read after the detection line.
  std::function<bool(absl::string_view)> stepped_again;
  // For the elastic job: the line that says the victim is a member again.
  std::function<bool(absl::string_view)> member_again;
};

// The main job: chief, 2 workers and a ps under --restart task; the killed
// worker is restarted alone and its first step is the job's first after
// the loss.
Job PsJob(const Flags& f, const std::string& dir) {
  Job j;
  j.name = "the ps job (chief, 2 workers, ps; --restart task)";
  j.params = {{"tasks", 4},
              {"job", "ps"},
              {"hidden_layers", 2},
              {"kill_step", f.kill_step},
              {"checkpoint_every", f.checkpoint_every}};
  launch::LaunchOptions& o = j.options;
  o.chief = true;
  o.num_workers = 2;
  o.num_ps = 1;
  o.restart = launch::RestartMode::kTask;
  o.command = {TrainPsPath(f),
               "--steps",
               std::to_string(f.steps),
               "--batch",
               std::to_string(f.batch),
               "--hidden",
               std::to_string(f.hidden),
               "--log-every",
               "1",
               "--checkpoint-dir",
               dir + "/ckpt",
               "--save-checkpoint-steps",
               std::to_string(f.checkpoint_every)};
  j.victim = kVictim;
  j.step_of = [](absl::string_view l) { return StepOf(l); };
  j.at_kill_step = [&f](absl::string_view l) {
    return StepOf(l, kVictim).value_or(-1) >= f.kill_step;
  };
  j.detected = [](absl::string_view l, int64_t pid) {
    // The victim's own restart line: "worker:1 (pid P) killed by ...".
    return absl::StrContains(l, absl::StrCat(kVictim, " (pid ", pid, ")")) &&
           absl::StrContains(l, "restarted alone");
  };
  j.stepped_again = [](absl::string_view l) {
    return StepOf(l, kVictim).has_value();
  };
  return j;
}

// The elastic data-parallel job: 4 tasks under --elastic 3:4; the three
// others go on without the killed worker, which joins again later.
Job ElasticJob(const Flags& f) {
  Job j;
  j.name = "the elastic data-parallel job (-n 4 --elastic 3:4)";
  j.params = {{"tasks", 4},
              {"job", "elastic_data_parallel"},
              {"hidden_layers", 1},
              {"kill_step", f.kill_step}};
  launch::LaunchOptions& o = j.options;
  o.num_workers = 4;
  o.restart = launch::RestartMode::kTask;
  o.elastic = {3, 4};
  o.command = {TrainDataParallelPath(f),
               "--steps",
               std::to_string(f.elastic_steps),
               "--batch",
               std::to_string(f.batch),
               "--hidden",
               std::to_string(f.hidden),
               "--momentum",
               "0",
               "--lr",
               "0.01",
               "--log-every",
               "1",
               "--target-loss",
               "100"};
  j.victim = kVictim;
  j.step_of = DataParallelStepOf;
  j.at_kill_step = [&f](absl::string_view l) {
    return DataParallelStepOf(l).value_or(-1) >= f.kill_step;
  };
  j.detected = [](absl::string_view l, int64_t) {
    return absl::StrContains(
        l, absl::StrCat("elastic: ", kVictim, " left the membership"));
  };
  j.stepped_again = [](absl::string_view l) {
    return DataParallelStepOf(l).has_value();
  };
  j.member_again = [](absl::string_view l) {
    return absl::StrContains(l, "elastic generation 2: ") &&
           absl::StrContains(l, "4 task(s) go on");
  };
  return j;
}

// One run of `make_job` with one kill; its lines go to `log`.
absl::Status MeasureOnce(const Flags& f, int rep,
                         const std::function<Job(const std::string&)>& make_job,
                         MeasurementLog* log) {
  std::string dir =
      (std::filesystem::temp_directory_path() / "cohort-bench-recovery-XXXXXX")
          .string();
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create a directory like ", dir,
                     " for the job's checkpoints; check TMPDIR"));
  }
  Job job_spec = make_job(dir);
  launch::LaunchOptions o = job_spec.options;
  o.max_restarts = 1;
  o.log_dir = dir + "/logs";
  o.stop_grace = absl::Seconds(2);
  TimedLines lines;
  o.output = [&lines](const std::string& line) { lines.Add(line); };
  o.messages = [&lines](const std::string& line) { lines.Add(line); };
  launch::Launcher launcher(Env::Default(), o);
  absl::StatusOr<launch::LaunchResult> launched;
  std::thread job([&] {
    launched = launcher.Run();
    lines.Close();
  });

  const absl::Time deadline = absl::Now() + kJobDeadline;
  absl::Status failed;
  auto fail = [&](const std::string& why) {
    failed = absl::InternalError(absl::StrCat(job_spec.name, ": ", why,
                                              "; output ends: ", lines.Tail()));
    launcher.Stop();
  };
  const std::string victim_pid = absl::StrCat(job_spec.victim, " (pid ");
  std::optional<size_t> started = lines.Await(
      0, [&](const std::string& l) { return absl::StrContains(l, victim_pid); },
      deadline);
  std::optional<size_t> at_kill_step;
  if (!started.has_value()) {
    fail(absl::StrCat("the launcher never announced ", job_spec.victim,
                      "'s pid"));
  } else {
    at_kill_step = lines.Await(
        0, [&](const std::string& l) { return job_spec.at_kill_step(l); },
        deadline);
  }
  int64_t pid = 0;
  absl::Time killed;
  if (started.has_value() && !at_kill_step.has_value()) {
    fail(absl::StrCat("step ", f.kill_step,
                      " was never logged (raise --steps, or check the job)"));
  } else if (at_kill_step.has_value()) {
    const std::string announce = lines.At(*started).second;
    pid = NumberAfter(announce, victim_pid).value_or(0);
    if (pid <= 0 || kill(static_cast<pid_t>(pid), SIGKILL) != 0) {
      fail(absl::StrCat("cannot kill ", job_spec.victim, " (pid ", pid,
                        ") from \"", announce, "\""));
    }
    killed = absl::Now();
  }
  std::optional<size_t> detected, stepped, member;
  if (failed.ok()) {
    detected = lines.Await(
        *at_kill_step,
        [&](const std::string& l) { return job_spec.detected(l, pid); },
        deadline);
    if (detected.has_value()) {
      stepped = lines.Await(
          *detected,
          [&](const std::string& l) { return job_spec.stepped_again(l); },
          deadline);
    }
    if (!stepped.has_value()) {
      fail(absl::StrCat(job_spec.victim, " (pid ", pid,
                        ") was killed, but the job did not say it knew, or "
                        "never stepped again"));
    } else if (job_spec.member_again) {
      member = lines.Await(
          *detected,
          [&](const std::string& l) { return job_spec.member_again(l); },
          deadline);
      if (!member.has_value()) {
        fail(absl::StrCat(job_spec.victim,
                          "'s restart never joined the job again"));
      }
    }
  }
  job.join();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (!failed.ok()) return failed;
  if (!launched.ok()) return launched.status();
  if (!launched->succeeded) {
    return absl::InternalError(absl::StrCat(
        job_spec.name, " failed after the kill: ", launched->failure_summary,
        "; output ends: ", lines.Tail()));
  }
  // The last step any task logged before the kill, and the job's first
  // after it.
  int64_t before = 0;
  for (const auto& [when, line] : lines.Snapshot()) {
    if (when > killed) break;
    before = std::max(before, job_spec.step_of(line).value_or(0));
  }
  const absl::Time detect_at = lines.At(*detected).first;
  const auto [step_at, step_line] = lines.At(*stepped);
  const int64_t first = job_spec.step_of(step_line).value_or(0);
  auto print = [&](const char* metric, double value, const char* unit) {
    log->Print(Json{{"suite", kSuite},
                    {"metric", metric},
                    {"params", job_spec.params},
                    {"value", Round3(value)},
                    {"unit", unit},
                    {"rep", rep}});
  };
  print("detect_time", absl::ToDoubleMilliseconds(detect_at - killed), "ms");
  print("rejoin_time", absl::ToDoubleMilliseconds(step_at - killed), "ms");
  print("steps_lost",
        static_cast<double>(std::max<int64_t>(0, before + 1 - first)), "steps");
  if (member.has_value()) {
    print("member_again_time",
          absl::ToDoubleMilliseconds(lines.At(*member).first - killed), "ms");
  }
  return absl::OkStatus();
}

std::vector<std::string> PeerArgs(const Flags& f, int hidden_layers) {
  return {"--hidden-layers",
          std::to_string(hidden_layers),
          "--reps",
          "1",
          "--tasks",
          "4",
          "--kill-step",
          std::to_string(f.kill_step),
          "--steps",
          std::to_string(f.steps),
          "--checkpoint-every",
          std::to_string(f.checkpoint_every),
          "--hidden",
          std::to_string(f.hidden),
          "--batch",
          std::to_string(f.batch)};
}

}  // namespace

int RunRecoveryBench(const std::vector<std::string>& args) {
  Flags flags;
  std::string error;
  if (!ParseFlags(args, flags, error)) {
    std::cerr << "cohort bench recovery: " << error << std::endl;
    return 1;
  }
  int rc = 0;
  PrintEnvLine(kSuite, "start");
  for (const auto& [name, flag, path] :
       {std::tuple{"train_ps", "--train-ps", TrainPsPath(flags)},
        std::tuple{"train_data_parallel", "--train-data-parallel",
                   TrainDataParallelPath(flags)}}) {
    if (access(path.c_str(), X_OK) != 0) {
      PrintErrorLine(kSuite, absl::StrCat(name, " not found at ", path,
                                          ": build it (cmake --build build "
                                          "--target ",
                                          name, ") or pass ", flag, " PATH"));
      return 1;
    }
  }
  PeerRunner torchrun("torchrun_recovery", "torchrun_recovery_peer.py",
                      flags.peer_script);
  const bool use_peer = torchrun.Use(!flags.no_peer, &rc);
  MeasurementLog log, peer;
  const std::function<Job(const std::string&)> jobs[] = {
      [&flags](const std::string& dir) { return PsJob(flags, dir); },
      [&flags](const std::string&) { return ElasticJob(flags); }};
  for (int rep = 0; rep < flags.reps; ++rep) {
    for (int j = 0; j < 2; ++j) {
      if (absl::Status s = MeasureOnce(flags, rep, jobs[j], &log); !s.ok()) {
        PrintErrorLine(kSuite, std::string(s.message()), {{"rep", rep}});
        rc = 1;
      }
      if (!use_peer) continue;
      // The peer trains each job's model: 2 hidden layers (the ps job's),
      // then 1 (the data-parallel job's).
      if (absl::Status s = torchrun.Run(PeerArgs(flags, 2 - j),
                                        absl::Minutes(10), rep, &peer);
          !s.ok()) {
        PrintErrorLine("torchrun_recovery", std::string(s.message()),
                       {{"rep", rep}});
        rc = 1;
      }
    }
  }
  if (use_peer) {
    for (const auto& [job, layers, note] :
         {std::tuple{"ps", 2,
                     "cohort: the ps job, the killed worker restarted alone; "
                     "torchrun: DDP, every worker restarted from the last "
                     "checkpoint"},
          std::tuple{"elastic_data_parallel", 1,
                     "cohort: the elastic data-parallel job, the others go "
                     "on without the killed worker; torchrun: DDP, every "
                     "worker restarted from the last checkpoint"}}) {
      for (const char* metric : {"detect_time", "rejoin_time"}) {
        RatioSpec spec{
            metric, {{"tasks", 4}, {"hidden_layers", layers}}, metric};
        spec.ours_params = {{"job", job}};
        spec.note = note;
        if (absl::Status s =
                PrintRatio(kSuite, "torchrun_recovery", log, peer, spec);
            !s.ok()) {
          PrintErrorLine(kSuite, std::string(s.message()),
                         {{"metric", metric}, {"job", job}});
          rc = 1;
        }
      }
    }
  }
  PrintEnvLine(kSuite, "end");
  return rc;
}

}  // namespace cohort::bench
