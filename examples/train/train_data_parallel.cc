// train_data_parallel: one task of a synchronous data-parallel training job
// (see data_parallel.h and docs/training.md). Run it as a gang:
//
//   build/bin/cohort launch -n 2 -- build/bin/train_data_parallel --steps 300
//
// The chief (partition 0) prints progress and the final figures; every task
// checks that the parameters are identical across the gang. Exit codes: 0
// on success, 1 on any error (named on stderr), 2 when the held-out loss is
// above --target-loss, 3 for bad flags (CLI11's own codes otherwise).
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cohort/training/data_parallel.h"
#include "cohort/training/data_parallel_gang.h"
#include "examples/train/train_flags.h"

int main(int argc, char** argv) {
  cohort::training::TrainOptions o;
  double target_loss = 0.5;
  CLI::App app{
      "One task of a data-parallel training job; run it under "
      "`cohort launch -n N -- train_data_parallel ...`"};
  cohort::examples::AddTrainFlags(app, o, target_loss);
  CLI11_PARSE(app, argc, argv);
  if (!cohort::examples::CheckTrainFlags(o, "train_data_parallel", std::cerr)) {
    return 3;
  }

  absl::StatusOr<cohort::training::LaunchedGang> joined =
      cohort::training::JoinLaunchedGang();
  if (!joined.ok()) {
    std::cerr
        << "train_data_parallel: " << joined.status().message()
        << "\nLaunch it as a gang, e.g.:\n  build/bin/cohort launch -n 2 -- "
           "build/bin/train_data_parallel --steps 300"
        << std::endl;
    return 1;
  }
  const cohort::training::Collective& gang = joined->collective;
  if (gang.partition_id == 0) {
    std::cout << "gradients all-reduced over " << joined->transport()
              << " between " << gang.num_tasks << " tasks" << std::endl;
  }
  absl::StatusOr<cohort::training::TrainReport> r =
      cohort::training::RunDataParallelTraining(o, gang, std::cout);
  if (!r.ok()) {
    std::cerr << "train_data_parallel: partition " << gang.partition_id
              << " failed: " << r.status() << std::endl;
    return 1;
  }
  if (r->arrived_after_the_end) {
    std::cout << "the elastic job trained to its end before this task came "
                 "back: nothing left to do"
              << std::endl;
    return 0;
  }
  if (r->partition_id == 0) {
    cohort::examples::PrintTrainReport(*r, r->num_tasks, o.batch, std::cout);
  }
  return cohort::examples::MetTargetLoss(
             *r, target_loss,
             absl::StrCat("train_data_parallel: partition ", r->partition_id),
             std::cerr)
             ? 0
             : 2;
}
