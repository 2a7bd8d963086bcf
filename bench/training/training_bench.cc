#include "bench/training/training_bench.h"

#include <cmath>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/common/flags.h"
#include "bench/common/gang.h"
#include "bench/common/peer.h"
#include "cohort/base/json.h"
#include "cohort/training/data_parallel.h"
#include "cohort/training/data_parallel_gang.h"

namespace cohort::bench {
namespace {

struct Flags {
  std::vector<int> tasks = {1, 2};
  int reps = 3;
  int steps = 60;
  int batch = 256;
  int features = 512;
  int hidden = 2048;
  std::string transport = "shm";
  std::string peer_script;
  bool no_peer = false;
  bool child = false;
};

bool ParseFlags(const std::vector<std::string>& args, Flags& f,
                std::string& error) {
  FlagReader flags(args,
                   "flags: --tasks 1,2 --reps 3 --steps 60 --batch 256 "
                   "--features 512 --hidden 2048 --transport shm|tcp "
                   "--peer-script PATH --no-peer");
  while (flags.Next()) {
    if (flags.Is("--child")) {
      flags.Switch(f.child);
    } else if (flags.Is("--reps")) {
      flags.PositiveInt(f.reps);
    } else if (flags.Is("--steps")) {
      flags.PositiveInt(f.steps);
    } else if (flags.Is("--batch")) {
      flags.PositiveInt(f.batch);
    } else if (flags.Is("--features")) {
      flags.PositiveInt(f.features);
    } else if (flags.Is("--hidden")) {
      flags.PositiveInt(f.hidden);
    } else if (flags.Is("--tasks")) {
      flags.PositiveIntList(f.tasks);
    } else if (flags.Is("--transport")) {
      flags.OneOf({"shm", "tcp"}, f.transport);
    } else if (flags.Is("--no-peer")) {
      flags.Switch(f.no_peer);
    } else if (flags.Is("--peer-script")) {
      flags.Value(f.peer_script);
    } else {
      flags.Unknown();
    }
  }
  error = flags.error();
  return flags.ok();
}

int64_t Parameters(const Flags& f) {
  const int64_t classes = training::TrainOptions().classes;
  return int64_t{f.features} * f.hidden + f.hidden + f.hidden * classes +
         classes;
}

training::TrainOptions OptionsFor(const Flags& f) {
  training::TrainOptions o;
  o.steps = f.steps;
  o.batch = f.batch;
  o.features = f.features;
  o.hidden = f.hidden;
  o.threads = 1;
  o.log_every = 0;
  // The default 0.1 diverges with 512 inputs; speed does not depend on it.
  o.learning_rate = 0.01f;
  // Enough examples that every task's shard holds a few batches.
  o.train_examples = f.batch * 8;
  o.heldout_examples = 256;
  return o;
}

int RunChild(const Flags& f) {
  absl::StatusOr<training::LaunchedGang> gang = training::JoinLaunchedGang(
      f.transport == "tcp" ? collective::Transport::kTcp
                           : collective::Transport::kSharedMemory);
  if (!gang.ok()) {
    std::cerr << gang.status() << std::endl;
    return 1;
  }
  std::ostringstream quiet;
  absl::StatusOr<training::TrainReport> r =
      training::RunDataParallelTraining(OptionsFor(f), gang->collective, quiet);
  if (!r.ok()) {
    std::cerr << r.status() << std::endl;
    return 1;
  }
  if (gang->collective.partition_id != 0) return 0;
  Json params{{"tasks", gang->collective.num_tasks},
              {"parameters", Parameters(f)},
              {"batch", f.batch},
              {"transport", gang->group->transport()}};
  auto round1 = [](double v) { return std::round(v * 10) / 10; };
  PrintChildResult(Json{{"suite", "training"},
                        {"metric", "examples_per_second"},
                        {"params", params},
                        {"value", round1(r->examples_per_second)},
                        {"unit", "examples/s"}});
  PrintChildResult(Json{{"suite", "training"},
                        {"metric", "steps_per_second"},
                        {"params", params},
                        {"value", round1(r->steps_per_second)},
                        {"unit", "steps/s"}});
  return 0;
}

}  // namespace

// The peer's flags: the same model, data sizes and steps, each task count.
std::vector<std::string> PeerArgs(const Flags& f) {
  std::vector<std::string> tasks;
  for (int t : f.tasks) tasks.push_back(std::to_string(t));
  return {"--tasks",    absl::StrJoin(tasks, ","),
          "--reps",     "1",
          "--steps",    std::to_string(f.steps),
          "--batch",    std::to_string(f.batch),
          "--features", std::to_string(f.features),
          "--hidden",   std::to_string(f.hidden)};
}

// One ratio line per task count: cohort's examples/s over PyTorch DDP's.
int PrintRatios(const Flags& f, const MeasurementLog& ours,
                const MeasurementLog& torch) {
  int rc = 0;
  for (int tasks : f.tasks) {
    RatioSpec spec{"examples_per_second",
                   {{"tasks", tasks}},
                   "examples_per_second",
                   Json::object(),
                   /*lower_is_better=*/false,
                   "the same classifier, data sizes and steps; PyTorch: "
                   "DistributedDataParallel on gloo (one process: the plain "
                   "model), one thread per process",
                   {{"transport", f.transport}}};
    absl::Status s = PrintRatio("training", "torch_ddp", ours, torch, spec);
    if (!s.ok()) {
      PrintErrorLine("training", "no ratio for examples_per_second: " +
                                     std::string(s.message()));
      rc = 1;
    }
  }
  return rc;
}

int RunTrainingBench(const std::vector<std::string>& args) {
  Flags flags;
  std::string error;
  if (!ParseFlags(args, flags, error)) {
    std::cerr << "cohort bench training: " << error << std::endl;
    return 1;
  }
  if (flags.child) return RunChild(flags);
  int rc = 0;
  PrintEnvLine("training", "start");
  PeerRunner peer("torch_ddp", "torch_ddp_peer.py", flags.peer_script);
  bool use_peer = !flags.no_peer;
  if (use_peer) {
    if (absl::Status s = peer.Check(); !s.ok()) {
      PrintErrorLine("torch_ddp", std::string(s.message()));
      rc = 1;
      use_peer = false;
    }
  }
  MeasurementLog log, torch;
  for (int rep = 0; rep < flags.reps; ++rep) {
    for (int tasks : flags.tasks) {
      GangRun run;
      run.suite = "training";
      run.world = tasks;
      run.child_args = {"--child",
                        "--steps",
                        std::to_string(flags.steps),
                        "--batch",
                        std::to_string(flags.batch),
                        "--features",
                        std::to_string(flags.features),
                        "--hidden",
                        std::to_string(flags.hidden),
                        "--transport",
                        flags.transport};
      run.rep = rep;
      run.note = "one session thread and one OpenBLAS thread per task";
      run.env = {"OPENBLAS_NUM_THREADS=1"};
      run.error_params = {{"tasks", tasks}};
      if (!RunGang(run, &log)) rc = 1;
    }
    if (!use_peer) continue;
    absl::Status s = peer.Run(PeerArgs(flags), absl::Minutes(20), rep, &torch);
    if (!s.ok()) {
      PrintErrorLine("torch_ddp", std::string(s.message()), {{"rep", rep}});
      rc = 1;
    }
  }
  if (use_peer && PrintRatios(flags, log, torch) != 0) rc = 1;
  // Scaling: the most tasks against one task, same run.
  int most = 1;
  for (int t : flags.tasks) most = std::max(most, t);
  if (most > 1) {
    int n1 = 0, nk = 0;
    const double one =
        MedianOf(log, "examples_per_second", {{"tasks", 1}}, &n1);
    const double many =
        MedianOf(log, "examples_per_second", {{"tasks", most}}, &nk);
    if (n1 == 0 || nk == 0 || one <= 0) {
      PrintErrorLine("training",
                     "no scaling figure: a task count has no "
                     "measurement (see the errors above)");
      rc = 1;
    } else {
      PrintJsonLine(Json{{"suite", "training"},
                         {"metric", "examples_per_second_scaling"},
                         {"params",
                          {{"tasks", most},
                           {"baseline_tasks", 1},
                           {"parameters", Parameters(flags)},
                           {"batch", flags.batch},
                           {"transport", flags.transport}}},
                         {"value", std::round(many / one * 1000) / 1000},
                         {"unit", "x"},
                         {"cohort", many},
                         {"baseline", one},
                         {"reps", std::min(n1, nk)},
                         {"better", "higher"}});
    }
  }
  PrintEnvLine("training", "end");
  return rc;
}

}  // namespace cohort::bench
