// train_ps: one task of an asynchronous parameter-server training job, run
// by the distribute coordinator in INDEPENDENT_WORKER mode from the
// TF_CONFIG that `cohort launch` gives each task (docs/training.md):
//
//   build/bin/cohort launch --chief --workers 2 --ps 1 --evaluator -- \
//       build/bin/train_ps --steps 2000 --checkpoint-dir /tmp/ckpt
//
//  - ps: serves the variables (its standard server; the launcher stops it
//    when the job is done);
//  - chief and workers: train the 1.07M-parameter model of ps_model.h
//    through MonitoredTrainingSession, variables placed on the ps tasks by
//    the replica device setter, each on its own stream of examples, until
//    the global step reaches --steps. worker:i starts once the global step
//    reaches (i + 1) x --wait-steps-per-worker (GlobalStepWaiterHook). The
//    chief saves checkpoints (at creation, every --save-checkpoint-steps,
//    at the end; 5 kept) and, finding one at start, prints "restored from
//    <path> (global step S)" and continues from S. Its last line is
//    "final: global_step S heldout_loss L heldout_accuracy A".
//  - evaluator: evaluates each new checkpoint ("evaluation at global step
//    S: loss L accuracy A") until one reaches --steps.
// With --step-times-dir DIR, each training task writes, when its loop ends,
// DIR/<job>-<index>.json: when each of its steps finished, and on the chief
// the final global step and held-out accuracy (step_log.h). `cohort bench
// training` measures the job's examples/s from them.
// Without TF_CONFIG the same program trains alone in this process.
//
// Exit codes: 0 when training ran to --steps, whatever accuracy it reached;
// 1 on an error (named on stderr); 2 only when --target-accuracy X is given
// and the chief's held-out accuracy ends below X; 3 for bad flags. The
// accuracy a short run reaches varies with the order in which the
// asynchronous workers' updates land, so no target is implied: a caller
// that needs one (scripts/main_job.sh) says which.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/base/phase_stats.h"
#include "cohort/base/status.h"
#include "cohort/distribute/distribute_coordinator.h"
#include "cohort/distribute/strategy.h"
#include "cohort/distribute/worker_context.h"
#include "cohort/graph/checkpoint.h"
#include "cohort/graph/local_session.h"
#include "cohort/training/basic_session_run_hooks.h"
#include "cohort/training/data_parallel.h"
#include "cohort/training/global_step_waiter_hook.h"
#include "cohort/training/metrics_publisher_hook.h"
#include "cohort/training/monitored_training_session.h"
#include "cohort/training/replica_device_setter.h"
#include "cohort/training/saver.h"
#include "cohort/training/scaffold.h"
#include "cohort/training/session_factory.h"
#include "examples/train/ps_model.h"
#include "examples/train/step_log.h"

namespace cohort::examples {
namespace {

using distribute::CurrentWorkerContext;
using distribute::WorkerContext;
using training::Accuracy;
using training::Dataset;
using training::MakeSyntheticData;
using training::Rows;
using training::SyntheticData;
using training::TrainOptions;

struct Flags {
  int64_t steps = 1000;
  std::string checkpoint_dir;
  int64_t save_checkpoint_steps = 100;
  int64_t wait_steps_per_worker = 0;
  int batch = 64;
  double recovery_wait_secs = 1;
  int log_every = 100;
  double eval_timeout_secs = 600;
  // Unset: no accuracy is required (see the exit codes above).
  std::optional<double> target_accuracy;
  // Time each phase of the steps (base/phase_stats.h) and print it.
  bool phase_stats = false;
  // Threads of the BLAS library (OpenBLAS) in this process: the same one
  // thread per process the PyTorch peer runs with. With more, on a machine
  // whose cores the ps and the workers share, OpenBLAS's idle threads spin
  // (sched_yield) on the cores the ps needs: 2 threads measured 5,114
  // examples/s with 2 workers, 1 thread 7,407.
  int blas_threads = 1;
  // Non-empty: write this task's StepLog there (step_log.h).
  std::string step_times_dir;
  PsModelOptions model;
};

absl::Mutex output_mu;
void Print(const std::string& line) {
  absl::MutexLock lock(&output_mu);
  std::cout << line << std::endl;
}

TrainOptions DataOptions(const PsModelOptions& m) {
  TrainOptions d;
  d.features = m.features;
  d.classes = m.classes;
  return d;
}

// Which of the training tasks (chief, then workers) this is: its example
// stream and its wait.
int ReplicaIndex(const WorkerContext& c) {
  if (c.task_type() == "worker") {
    return c.task_id() + (c.cluster_spec().HasJob("chief") ? 1 : 0);
  }
  return 0;
}

absl::Status Train(const Flags& f, Env* env) {
  const WorkerContext* c = CurrentWorkerContext();
  Scope root = Scope::NewRootScope();
  COHORT_ASSIGN_OR_RETURN(PsModel model, BuildPsModel(root, f.model));
  const SyntheticData data = MakeSyntheticData(DataOptions(f.model));
  if (f.batch <= 0 || f.batch > data.train.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch ", f.batch, " must be in [1, ", data.train.size(), "]"));
  }
  const bool chief = c->is_chief();
  const std::string who = c->task_type().empty()
                              ? "local"
                              : absl::StrCat(c->task_type(), ":", c->task_id());

  training::MonitoredTrainingSessionOptions o;
  o.is_chief = chief;
  o.checkpoint_dir = f.checkpoint_dir;
  o.save_checkpoint_steps = f.save_checkpoint_steps;
  // The task that counts steps (the chief) writes TensorBoard's
  // global_step/sec, examples/sec and loss into the checkpoint directory.
  o.log_step_count_steps = 100;
  o.save_summaries_steps = 100;
  o.examples_per_step = f.batch;
  o.summary_scalars = {{"loss", model.loss}};
  o.recovery_wait = absl::Seconds(f.recovery_wait_secs);
  o.env = env;
  COHORT_ASSIGN_OR_RETURN(
      auto stop, training::StopAtStepHook::Create(std::nullopt, f.steps));
  o.hooks.push_back(stop);
  if (c->task_type() == "worker" && f.wait_steps_per_worker > 0) {
    o.hooks.push_back(std::make_shared<training::GlobalStepWaiterHook>(
        (c->task_id() + 1) * f.wait_steps_per_worker, env));
  }
  // Under `cohort launch`: progress for its progress line and job page.
  if (auto put = training::MetricsPutFromEnvironment(env); put.ok()) {
    training::MetricsPublisherOptions m;
    m.task = who;
    m.loss_tensor = model.loss;
    m.examples_per_step = f.batch;
    m.last_step = f.steps;
    m.put = *std::move(put);
    m.env = env;
    COHORT_ASSIGN_OR_RETURN(auto publisher,
                            training::MetricsPublisherHook::Create(m));
    o.hooks.push_back(std::move(publisher));
  }
  auto final_ops = std::make_shared<training::FinalOpsHook>(
      std::vector<std::string>{model.loss, model.logits, model.global_step},
      std::vector<std::pair<std::string, Tensor>>{
          {model.x, data.heldout.x}, {model.labels, data.heldout.labels}});
  o.chief_only_hooks.push_back(final_ops);
  o.session_factory = training::DefaultSessionFactory(env);
  if (c->distributed_mode()) {
    training::ReplicaDeviceSetterOptions placement;
    placement.ps_tasks =
        c->cluster_spec().HasJob("ps") ? *c->cluster_spec().num_tasks("ps") : 0;
    placement.worker_device =
        absl::StrCat("/job:", c->task_type(), "/task:", c->task_id());
    o.session_factory =
        training::WithReplicaDeviceSetter(o.session_factory, placement);
  }

  if (!f.step_times_dir.empty()) {
    // Checked now, not when the loop ends: a typo must not cost the run.
    std::error_code ec;
    if (!std::filesystem::is_directory(f.step_times_dir, ec)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--step-times-dir ", f.step_times_dir, " is not a directory (", who,
          " writes its step times there "
          "when it ends); create it first"));
    }
  }
  if (chief && !f.checkpoint_dir.empty()) {
    // A directory others can write is one where they can plant the
    // checkpoint this task restores (graph/checkpoint.h).
    COHORT_RETURN_IF_ERROR(
        CreateCheckpointDirectory(f.checkpoint_dir, "--checkpoint-dir"));
  }
  // The scaffold's saver says whether the chief's session was restored.
  o.scaffold = std::make_shared<training::Scaffold>();
  COHORT_ASSIGN_OR_RETURN(auto session,
                          training::MonitoredTrainingSession(root, o));
  const std::string restored =
      o.scaffold->saver != nullptr ? o.scaffold->saver->last_restored() : "";
  if (!restored.empty()) {
    // The step the variables hold now, not the one the file name claims
    // (a renamed or hand-made file says anything).
    std::vector<Tensor> step;
    COHORT_RETURN_IF_ERROR(session->raw_session()->Run(
        RunOptions(), {}, {model.global_step}, {}, &step));
    Print(absl::StrCat("restored from ", restored, " (global step ",
                       step[0].scalar<int64_t>(), ")"));
  }

  std::mt19937_64 rng(1000 + ReplicaIndex(*c));
  std::uniform_int_distribution<int> offset(0, data.train.size() - f.batch);
  std::vector<Tensor> out;
  StepLog step_log;
  step_log.task = who;
  step_log.batch = f.batch;
  const bool log_steps = !f.step_times_dir.empty();
  // Reserved up front: growing the vector inside the loop would put an
  // occasional copy into the very steps being timed.
  if (log_steps) step_log.step_end_unix_us.reserve(f.steps);
  int64_t local_steps = 0, window_steps = 0;
  const absl::Time start = env->Now();
  absl::Time window_start = start;
  while (!session->ShouldStop()) {
    const Dataset batch = Rows(data.train, offset(rng), f.batch);
    COHORT_RETURN_IF_ERROR(session->Run(
        RunOptions(), {{model.x, batch.x}, {model.labels, batch.labels}},
        {model.loss, model.global_step}, {model.train}, &out));
    if (log_steps) {
      // The wall clock, not a monotonic one: the bench lines up the steps
      // of different processes on one host, which share only this clock.
      step_log.step_end_unix_us.push_back(absl::ToUnixMicros(env->Now()));
    }
    ++local_steps;
    ++window_steps;
    if (f.log_every > 0 && local_steps % f.log_every == 0) {
      const double secs = absl::ToDoubleSeconds(env->Now() - window_start);
      Print(absl::StrFormat("%s: global_step %d loss %.4f examples/s %.0f", who,
                            out[1].scalar<int64_t>(), out[0].scalar<float>(),
                            secs > 0 ? window_steps * f.batch / secs : 0.0));
      window_start = env->Now();
      window_steps = 0;
    }
  }
  const double secs = absl::ToDoubleSeconds(env->Now() - start);
  if (f.phase_stats) {
    // Before Close, whose RPCs are no step's.
    Print(absl::StrFormat("%s: phases over %d local steps (%.3f ms/step):\n%s",
                          who, local_steps,
                          local_steps > 0 ? secs * 1e3 / local_steps : 0.0,
                          PhaseStats::Summary(local_steps)));
  }
  COHORT_RETURN_IF_ERROR(session->Close());
  Print(absl::StrFormat("%s: trained %d steps (%.0f examples/s)", who,
                        local_steps,
                        secs > 0 ? local_steps * f.batch / secs : 0.0));
  if (chief) {
    const std::vector<Tensor>& v = final_ops->final_ops_values();
    if (v.size() != 3) {
      return absl::InternalError("the final held-out evaluation did not run");
    }
    const double accuracy = Accuracy(v[1], data.heldout.labels);
    Print(absl::StrFormat(
        "final: global_step %d heldout_loss %.4f heldout_accuracy %.4f",
        v[2].scalar<int64_t>(), v[0].scalar<float>(), accuracy));
    step_log.global_step = v[2].scalar<int64_t>();
    step_log.heldout_accuracy = accuracy;
  }
  if (log_steps) {
    // Written before the accuracy verdict: a run below --target-accuracy
    // still ran at a measurable speed.
    COHORT_RETURN_IF_ERROR(WriteStepLog(
        absl::StrCat(f.step_times_dir, "/",
                     StepLogFileName(c->task_type(), c->task_id())),
        step_log));
  }
  if (chief && f.target_accuracy.has_value() &&
      *step_log.heldout_accuracy < *f.target_accuracy) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "held-out accuracy %.4f is below --target-accuracy %.4f; train "
        "longer (--steps) or lower the target",
        *step_log.heldout_accuracy, *f.target_accuracy));
  }
  return absl::OkStatus();
}

// Evaluates each new checkpoint of --checkpoint-dir in a local session
// until one reaches --steps.
absl::Status Evaluate(const Flags& f, Env* env) {
  if (f.checkpoint_dir.empty()) {
    Print("evaluator: no --checkpoint-dir, nothing to evaluate");
    return absl::OkStatus();
  }
  Scope root = Scope::NewRootScope();
  COHORT_ASSIGN_OR_RETURN(PsModel model, BuildPsModel(root, f.model));
  COHORT_ASSIGN_OR_RETURN(auto saver, training::Saver::Build(root));
  GraphDef graph;
  COHORT_RETURN_IF_ERROR(root.ToGraphDef(&graph));
  COHORT_ASSIGN_OR_RETURN(auto session, LocalSession::Create(graph));
  const SyntheticData data = MakeSyntheticData(DataOptions(f.model));
  std::string last;
  absl::Time last_new = env->Now();
  while (true) {
    auto latest = training::Saver::LatestCheckpoint(f.checkpoint_dir);
    if (latest.ok() && *latest != last) {
      // The chief may delete an old checkpoint under us: try the next one.
      absl::Status restored = saver->Restore(session.get(), *latest);
      if (restored.ok()) {
        std::vector<Tensor> out;
        COHORT_RETURN_IF_ERROR(session->Run(
            {{model.x, data.heldout.x}, {model.labels, data.heldout.labels}},
            {model.loss, model.logits, model.global_step}, {}, &out));
        const int64_t step = out[2].scalar<int64_t>();
        Print(absl::StrFormat(
            "evaluation at global step %d: loss %.4f accuracy %.4f", step,
            out[0].scalar<float>(), Accuracy(out[1], data.heldout.labels)));
        if (step >= f.steps) return absl::OkStatus();
      }
      last = *latest;
      last_new = env->Now();
    }
    if (env->Now() - last_new > absl::Seconds(f.eval_timeout_secs)) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "evaluator: no new checkpoint in %s for %.0f s (last: %s); is the "
          "chief running and saving (--save-checkpoint-steps)?",
          f.checkpoint_dir, f.eval_timeout_secs, last.empty() ? "none" : last));
    }
    env->SleepFor(absl::Milliseconds(500));
  }
}

// A ps runs no step of its own and is stopped by the launcher rather than
// returning, so with --phase-stats a thread prints its totals every 5 s
// once partitions ran here and this process is no master (a training task
// prints its own at the end).
struct PhaseReporter {
  absl::Mutex mu;
  bool stop ABSL_GUARDED_BY(mu) = false;
  std::thread thread;
};
PhaseReporter* reporter = nullptr;

void StartPhaseReporter(Env* env) {
  PhaseStats::Enable(true);
  reporter = new PhaseReporter;
  reporter->thread = std::thread([env] {
    int64_t printed = 0;
    while (true) {
      {
        absl::MutexLock lock(&reporter->mu);
        auto stopped = []() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return reporter->stop;  // Await holds reporter->mu.
        };
        if (env->AwaitWithDeadline(&reporter->mu, absl::Condition(&stopped),
                                   env->Now() + absl::Seconds(5))) {
          return;
        }
      }
      const int64_t runs = PhaseStats::Get(Phase::kRunGraph).count;
      if (PhaseStats::Get(Phase::kMasterStep).count > 0 || runs == printed) {
        continue;
      }
      printed = runs;
      Print(absl::StrFormat("phases of this task over %d partition runs:\n%s",
                            runs, PhaseStats::Summary(runs)));
    }
  });
}

void StopPhaseReporter() {
  if (reporter == nullptr) return;
  {
    absl::MutexLock lock(&reporter->mu);
    reporter->stop = true;
  }
  reporter->thread.join();
}

}  // namespace
}  // namespace cohort::examples

int main(int argc, char** argv) {
  using namespace cohort;  // NOLINT: a program's main.
#ifdef NDEBUG
  // As the cohort binary (tools/cohort/main.cc): Debian's Abseil keeps
  // absl::Mutex's lock-order graph on, ~1% of a PS job's CPU under one
  // global lock (perf: GraphCycles::GetId). Test binaries keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  examples::Flags f;
  CLI::App app{
      "One task of a parameter-server training job; run it under `cohort "
      "launch --chief --workers N --ps M -- train_ps ...` or alone"};
  app.add_option("--steps", f.steps,
                 "train until the global step reaches this (default 1000)");
  app.add_option("--checkpoint-dir", f.checkpoint_dir,
                 "the chief saves and restores checkpoints here");
  app.add_option("--save-checkpoint-steps", f.save_checkpoint_steps,
                 "chief saves every this many global steps (default 100)");
  app.add_option("--wait-steps-per-worker", f.wait_steps_per_worker,
                 "worker:i starts at global step (i + 1) x this (default 0)");
  app.add_option("--batch", f.batch, "examples per step (default 64)");
  app.add_option("--lr", f.model.learning_rate, "learning rate (default 0.1)");
  app.add_option("--hidden", f.model.hidden,
                 "units in each hidden layer (default 1024)");
  app.add_option("--recovery-wait-secs", f.recovery_wait_secs,
                 "wait before re-creating a failed session (default 1)");
  app.add_option("--log-every", f.log_every,
                 "print progress every this many local steps (default 100)");
  app.add_option("--eval-timeout-secs", f.eval_timeout_secs,
                 "evaluator gives up after this long without a new "
                 "checkpoint (default 600)");
  app.add_option("--step-times-dir", f.step_times_dir,
                 "each training task writes DIR/<job>-<index>.json: when "
                 "each of its steps finished (for `cohort bench training`)");
  app.add_option("--target-accuracy", f.target_accuracy,
                 "exit 2 when the chief's held-out accuracy ends below this "
                 "(default: none, any accuracy exits 0)");
  app.add_option("--blas-threads", f.blas_threads,
                 "OpenBLAS threads in this process (default 1, as the "
                 "PyTorch peer; 0: OpenBLAS's own default, one per core)");
  app.add_flag("--phase-stats", f.phase_stats,
               "time each phase of a step (kernels, RecvTensor calls, tensors "
               "served, RunGraph) and print it: training tasks at the end, "
               "a ps every 5 s while it serves");
  CLI11_PARSE(app, argc, argv);
  if (f.steps <= 0 || f.batch <= 0 || f.model.hidden <= 0 ||
      f.recovery_wait_secs < 0) {
    std::cerr << "train_ps: --steps, --batch and --hidden must be positive "
                 "and --recovery-wait-secs not negative"
              << std::endl;
    return 3;
  }
  if (f.target_accuracy.has_value() &&
      !(*f.target_accuracy >= 0 && *f.target_accuracy <= 1)) {
    std::cerr << "train_ps: --target-accuracy " << *f.target_accuracy
              << " must be in [0, 1] (a fraction of held-out examples)"
              << std::endl;
    return 3;
  }
  if (f.blas_threads > 0) {
    // Read by OpenBLAS when it loads (graph/kernels/blas.h: on the first
    // MatMul, after this); an explicit OPENBLAS_NUM_THREADS wins.
    setenv("OPENBLAS_NUM_THREADS", std::to_string(f.blas_threads).c_str(),
           /*overwrite=*/0);
  }
  Env* env = Env::Default();
  if (f.phase_stats) examples::StartPhaseReporter(env);
  distribute::ParameterServerStrategy strategy;
  distribute::DistributeCoordinatorOptions options;
  options.mode = distribute::CoordinatorMode::kIndependentWorker;
  options.strategy = &strategy;
  options.worker_fn = [&](const distribute::Strategy*) {
    return examples::Train(f, env);
  };
  options.eval_fn = [&](const distribute::Strategy*) {
    return examples::Evaluate(f, env);
  };
  absl::Status status = distribute::RunDistributeCoordinator(options);
  examples::StopPhaseReporter();
  if (!status.ok()) {
    std::cerr << "train_ps: " << status << std::endl;
    return absl::IsFailedPrecondition(status) &&
                   absl::StrContains(status.message(), "--target-accuracy")
               ? 2
               : 1;
  }
  return 0;
}
