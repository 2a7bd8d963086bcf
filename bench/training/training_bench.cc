#include "bench/training/training_bench.h"

#include <unistd.h>

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
#include "bench/training/ps_job.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/distribute/worker_context.h"
#include "cohort/training/collective_training.h"
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
  // The child trains through the runtime (train_collective's path) rather
  // than the gang's side path; --no-runtime skips those runs.
  bool runtime = false;
  bool no_runtime = false;
  // The parameter-server job (ps_job.h).
  std::vector<int> ps_workers = {1, 2};
  int ps_steps = 1000;
  int ps_warmup = 10;
  int ps_batch = 64;
  int ps_hidden = 1024;
  std::string train_ps;  // empty: train_ps beside this binary
  std::string ps_peer_script;
  bool no_ps = false;
};

bool ParseFlags(const std::vector<std::string>& args, Flags& f,
                std::string& error) {
  FlagReader flags(args,
                   "flags: --tasks 1,2 --reps 3 --steps 60 --batch 256 "
                   "--features 512 --hidden 2048 --transport shm|tcp "
                   "--peer-script PATH --no-peer --ps-workers 1,2 "
                   "--ps-steps 1000 --ps-warmup 10 --ps-batch 64 "
                   "--ps-hidden 1024 --train-ps PATH --ps-peer-script PATH "
                   "--no-ps --no-runtime");
  while (flags.Next()) {
    if (flags.Is("--child")) {
      flags.Switch(f.child);
    } else if (flags.Is("--runtime")) {
      flags.Switch(f.runtime);
    } else if (flags.Is("--no-runtime")) {
      flags.Switch(f.no_runtime);
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
    } else if (flags.Is("--ps-workers")) {
      flags.PositiveIntList(f.ps_workers);
    } else if (flags.Is("--ps-steps")) {
      flags.PositiveInt(f.ps_steps);
    } else if (flags.Is("--ps-warmup")) {
      flags.PositiveInt(f.ps_warmup);
    } else if (flags.Is("--ps-batch")) {
      flags.PositiveInt(f.ps_batch);
    } else if (flags.Is("--ps-hidden")) {
      flags.PositiveInt(f.ps_hidden);
    } else if (flags.Is("--train-ps")) {
      flags.Value(f.train_ps);
    } else if (flags.Is("--ps-peer-script")) {
      flags.Value(f.ps_peer_script);
    } else if (flags.Is("--no-ps")) {
      flags.Switch(f.no_ps);
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

// One task of the job through the runtime (training/collective_training.h)
// under the distribute coordinator; the chief prints the figures.
int RunRuntimeChild(const Flags& f) {
  training::CollectiveTrainOptions o;
  o.train = OptionsFor(f);
  o.save_checkpoint_steps = 0;
  std::ostringstream quiet;
  absl::Status s = training::RunCollectiveTrainingJob(
      o, quiet,
      [&](const training::TrainReport& r,
          const distribute::WorkerContext& c) -> absl::Status {
        if (!c.is_chief()) return absl::OkStatus();
        PrintChildResult(
            Json{{"suite", "training"},
                 {"metric", "runtime_examples_per_second"},
                 {"params",
                  {{"tasks", c.num_workers()},
                   {"parameters", Parameters(f)},
                   {"batch", f.batch}}},
                 {"value", std::round(r.examples_per_second * 10) / 10},
                 {"unit", "examples/s"}});
        return absl::OkStatus();
      });
  if (!s.ok()) {
    std::cerr << s << std::endl;
    return 1;
  }
  return 0;
}

int RunChild(const Flags& f) {
  if (f.runtime) return RunRuntimeChild(f);
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

// One ratio line per count (`param` = each of `counts`) of `metric`:
// cohort's over the peer's (suite `peer_suite`, same metric), better
// higher; an error line for a count without one. Returns the exit code.
int PrintRatiosPerCount(const std::string& metric, const std::string& param,
                        const std::vector<int>& counts,
                        const std::string& peer_suite,
                        const std::string& peer_metric, const std::string& note,
                        const Json& extra, const MeasurementLog& ours,
                        const MeasurementLog& peer) {
  int rc = 0;
  for (int count : counts) {
    RatioSpec spec{metric,
                   {{param, count}},
                   peer_metric,
                   Json::object(),
                   /*lower_is_better=*/false,
                   note,
                   extra};
    absl::Status s = PrintRatio("training", peer_suite, ours, peer, spec);
    if (!s.ok()) {
      PrintErrorLine("training", "no ratio for " + metric + ": " +
                                     std::string(s.message()));
      rc = 1;
    }
  }
  return rc;
}

// One ratio line per task count: cohort's examples/s over PyTorch DDP's,
// for the gang's side path and (unless --no-runtime) the runtime's.
int PrintRatios(const Flags& f, const MeasurementLog& ours,
                const MeasurementLog& torch) {
  constexpr char kNote[] =
      "the same classifier, data sizes and steps; PyTorch: "
      "DistributedDataParallel on gloo (one process: the plain model), one "
      "thread per process";
  int rc = PrintRatiosPerCount("examples_per_second", "tasks", f.tasks,
                               "torch_ddp", "examples_per_second", kNote,
                               {{"transport", f.transport}}, ours, torch);
  if (!f.no_runtime &&
      PrintRatiosPerCount("runtime_examples_per_second", "tasks", f.tasks,
                          "torch_ddp", "examples_per_second",
                          absl::StrCat("through the runtime (collective ops "
                                       "in the graph); ",
                                       kNote),
                          Json::object(), ours, torch) != 0) {
    rc = 1;
  }
  return rc;
}

// One ratio line per task count: the runtime's examples/s over the gang's
// side path's, same run (issue: within 10%).
int PrintRuntimeRatios(const Flags& f, const MeasurementLog& ours) {
  return PrintRatiosPerCount(
      "runtime_examples_per_second", "tasks", f.tasks, "cohort_gang",
      "examples_per_second",
      "train_collective's path (distribute coordinator, GrpcSession, "
      "CollectiveReduce ops) over train_data_parallel's (a gang all-reducing "
      "beside a local session), same model and steps",
      Json::object(), ours, ours);
}

// The ps job's model (examples/train/ps_model.h): features -> hidden ->
// hidden -> classes.
int64_t PsParameters(const Flags& f) {
  const int64_t features = 16, classes = 4, h = f.ps_hidden;
  return features * h + h + h * h + h + h * classes + classes;
}

Json PsParams(const Flags& f, int workers) {
  return {{"workers", workers},
          {"ps", 1},
          {"parameters", PsParameters(f)},
          {"batch", f.ps_batch}};
}

// train_ps: --train-ps, else beside this binary (build/bin holds cohort,
// training_bench and train_ps alike).
std::string TrainPsPath(const Flags& f) {
  return ProgramBesideThisBinary("train_ps", f.train_ps);
}

// One run of the ps job per worker count; its lines go to `log`.
int RunPsJobs(const Flags& f, int rep, MeasurementLog* log) {
  int rc = 0;
  for (int workers : f.ps_workers) {
    PsJobOptions o;
    o.train_ps = TrainPsPath(f);
    o.workers = workers;
    o.steps = f.ps_steps;
    o.batch = f.ps_batch;
    o.warmup = f.ps_warmup;
    o.hidden = f.ps_hidden;
    // No thread settings: train_ps's own defaults (one BLAS thread per
    // task, as the peer runs one intra-op thread per process) are the job
    // a user runs.
    absl::StatusOr<PsJobResult> r = RunPsJob(o);
    if (!r.ok()) {
      PrintErrorLine("training", std::string(r.status().message()),
                     {{"params", PsParams(f, workers)}, {"rep", rep}});
      rc = 1;
      continue;
    }
    log->Print(
        Json{{"suite", "training"},
             {"metric", "ps_examples_per_second"},
             {"params", PsParams(f, workers)},
             {"value", std::round(r->span.examples_per_second * 10) / 10},
             {"unit", "examples/s"},
             {"heldout_accuracy", Round3(r->heldout_accuracy)},
             {"global_step", r->global_step},
             {"measured_steps", r->span.steps},
             {"span_seconds",
              Round3((r->span.end_unix_us - r->span.start_unix_us) * 1e-6)},
             {"warmup_steps", f.ps_warmup},
             {"rep", rep},
             {"note",
              "train_ps under cohort launch (1 ps, worker:0 the chief), its "
              "default threads; examples of every worker over the span all "
              "workers trained past their warm-up"}});
  }
  return rc;
}

// The ps peer's flags: the same model size, batch, steps and warm-up.
std::vector<std::string> PsPeerArgs(const Flags& f) {
  std::vector<std::string> workers;
  for (int w : f.ps_workers) workers.push_back(std::to_string(w));
  return {"--workers", absl::StrJoin(workers, ","),
          "--reps",    "1",
          "--steps",   std::to_string(f.ps_steps),
          "--warmup",  std::to_string(f.ps_warmup),
          "--batch",   std::to_string(f.ps_batch),
          "--hidden",  std::to_string(f.ps_hidden)};
}

// One ratio line per worker count: cohort's ps job over PyTorch's RPC
// parameter server.
int PrintPsRatios(const Flags& f, const MeasurementLog& ours,
                  const MeasurementLog& torch) {
  return PrintRatiosPerCount(
      "ps_examples_per_second", "workers", f.ps_workers, "torch_rpc_ps",
      "ps_examples_per_second",
      "the same model, batch, steps and warm-up, examples over the span "
      "common to all workers; PyTorch: one ps process and the workers over "
      "torch.distributed.rpc (TensorPipe), one intra-op thread per process",
      Json::object(), ours, torch);
}

// The scaling line of the data-parallel runs: the most tasks against one.
int PrintScaling(const Flags& flags, const MeasurementLog& log) {
  int most = 1;
  for (int t : flags.tasks) most = std::max(most, t);
  if (most == 1) return 0;
  int n1 = 0, nk = 0;
  const double one = MedianOf(log, "examples_per_second", {{"tasks", 1}}, &n1);
  const double many =
      MedianOf(log, "examples_per_second", {{"tasks", most}}, &nk);
  if (n1 == 0 || nk == 0 || one <= 0) {
    PrintErrorLine("training",
                   "no scaling figure: a task count has no "
                   "measurement (see the errors above)");
    return 1;
  }
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
  return 0;
}

// The data-parallel gangs of one repetition.
int RunDataParallel(const Flags& flags, int rep, MeasurementLog* log) {
  int rc = 0;
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
    if (!RunGang(run, log)) rc = 1;
    if (flags.no_runtime) continue;
    // The same job through the runtime: a chief and tasks - 1 workers.
    run.chief = true;
    run.child_args.push_back("--runtime");
    run.error_params = {{"tasks", tasks}, {"path", "runtime"}};
    if (!RunGang(run, log)) rc = 1;
  }
  return rc;
}

}  // namespace

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
  PeerRunner ddp("torch_ddp", "torch_ddp_peer.py", flags.peer_script);
  PeerRunner rpc_ps("torch_rpc_ps", "torch_rpc_ps_peer.py",
                    flags.ps_peer_script);
  const bool use_ddp = ddp.Use(!flags.no_peer, &rc);
  if (!flags.no_ps && access(TrainPsPath(flags).c_str(), X_OK) != 0) {
    // Once, up front, rather than one launcher error per job.
    PrintErrorLine("training",
                   "train_ps not found at " + TrainPsPath(flags) +
                       (flags.train_ps.empty() ? " (beside this binary)" : "") +
                       ": build it (cmake "
                       "--build build --target train_ps), pass --train-ps "
                       "PATH, or --no-ps to run without the ps job");
    rc = 1;
    flags.no_ps = true;
  }
  const bool use_rpc_ps = rpc_ps.Use(!flags.no_peer && !flags.no_ps, &rc);
  MeasurementLog log, torch;
  // Each repetition runs cohort's side, then the peers': every pair of
  // figures a ratio divides saw the same machine, minutes apart at most.
  for (int rep = 0; rep < flags.reps; ++rep) {
    if (RunDataParallel(flags, rep, &log) != 0) rc = 1;
    if (!flags.no_ps && RunPsJobs(flags, rep, &log) != 0) rc = 1;
    if (use_ddp) {
      absl::Status s = ddp.Run(PeerArgs(flags), absl::Minutes(20), rep, &torch);
      if (!s.ok()) {
        PrintErrorLine("torch_ddp", std::string(s.message()), {{"rep", rep}});
        rc = 1;
      }
    }
    if (use_rpc_ps) {
      absl::Status s =
          rpc_ps.Run(PsPeerArgs(flags), absl::Minutes(20), rep, &torch);
      if (!s.ok()) {
        PrintErrorLine("torch_rpc_ps", std::string(s.message()),
                       {{"rep", rep}});
        rc = 1;
      }
    }
  }
  if (use_ddp && PrintRatios(flags, log, torch) != 0) rc = 1;
  if (!flags.no_runtime && PrintRuntimeRatios(flags, log) != 0) rc = 1;
  if (use_rpc_ps && PrintPsRatios(flags, log, torch) != 0) rc = 1;
  if (PrintScaling(flags, log) != 0) rc = 1;
  PrintEnvLine("training", "end");
  return rc;
}

}  // namespace cohort::bench
