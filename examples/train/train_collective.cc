// train_collective: one task of a synchronous data-parallel training job
// through the distributed runtime (training/collective_training.h): the job
// of train_data_parallel, with the gradients all-reduced by collective ops
// in each task's graph, run by the distribute coordinator (INDEPENDENT_
// WORKER, CollectiveAllReduceStrategy) from the TF_CONFIG that `cohort
// launch` gives each task:
//
//   build/bin/cohort launch --chief --workers 1 -- \
//       build/bin/train_collective --steps 300 --checkpoint-dir /tmp/ckpt
//
// With the same flags it computes the same parameters, bit for bit, as
// train_data_parallel on as many tasks. The chief prints progress and the
// final figures; every task checks that the parameters are identical across
// the group. Exit codes: 0 on success, 1 on any error (named on stderr), 2
// when the held-out loss is above --target-loss, 3 for bad flags.
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cohort/base/phase_stats.h"
#include "cohort/distribute/worker_context.h"
#include "cohort/training/collective_training.h"
#include "examples/train/train_flags.h"

int main(int argc, char** argv) {
  using namespace cohort;  // NOLINT: a program's main.
  training::CollectiveTrainOptions o;
  double target_loss = 0.5;
  CLI::App app{
      "One task of a synchronous data-parallel job through the runtime; run "
      "it under `cohort launch --chief --workers N -- train_collective ...`"};
  examples::AddTrainFlags(app, o.train, target_loss);
  app.add_option("--save-checkpoint-steps", o.save_checkpoint_steps,
                 "the chief saves every this many global steps and at the "
                 "end (default 100; 0: only at the end)");
  bool phase_stats = false;
  app.add_flag("--phase-stats", phase_stats,
               "time each phase of a step (master step, RunGraph, kernels) "
               "and print it per task at the end");
  CLI11_PARSE(app, argc, argv);
  PhaseStats::Enable(phase_stats);
  if (!examples::CheckTrainFlags(o.train, "train_collective", std::cerr)) {
    return 3;
  }

  bool met_target = true;
  absl::Status status = training::RunCollectiveTrainingJob(
      o, std::cout,
      [&](const training::TrainReport& r,
          const distribute::WorkerContext& c) -> absl::Status {
        if (phase_stats) {
          std::cout << absl::StrFormat("%s:%d: phases over %d steps:\n%s",
                                       c.task_type(), c.task_id(),
                                       o.train.steps,
                                       PhaseStats::Summary(o.train.steps))
                    << std::endl;
        }
        if (c.is_chief()) {
          examples::PrintTrainReport(r, c.num_workers(), o.train.batch,
                                     std::cout);
        }
        met_target = examples::MetTargetLoss(
            r, target_loss,
            absl::StrCat("train_collective: ", c.task_type(), ":", c.task_id()),
            std::cerr);
        return absl::OkStatus();
      });
  if (!status.ok()) {
    std::cerr << "train_collective: " << status << std::endl;
    return 1;
  }
  return met_target ? 0 : 2;
}
