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
#include "absl/strings/str_format.h"
#include "cohort/training/data_parallel.h"
#include "cohort/training/data_parallel_gang.h"

int main(int argc, char** argv) {
  cohort::training::TrainOptions o;
  double target_loss = 0.5;
  CLI::App app{
      "One task of a data-parallel training job; run it under "
      "`cohort launch -n N -- train_data_parallel ...`"};
  app.add_option("--steps", o.steps, "training steps (default 300)");
  app.add_option("--lr", o.learning_rate, "learning rate (default 0.1)");
  app.add_option("--momentum", o.momentum,
                 "momentum; 0 = plain gradient descent (default 0.9)");
  app.add_option("--batch", o.batch, "examples per task per step (default 64)");
  app.add_option("--hidden", o.hidden, "hidden units (default 64)");
  app.add_option("--features", o.features,
                 "input features of the synthetic data (default 16)");
  app.add_option("--examples", o.train_examples,
                 "training examples across all tasks (default 16384)");
  app.add_option(
      "--log-every", o.log_every,
      "chief prints progress every this many steps (default 50; 0 = never)");
  app.add_option("--threads", o.threads,
                 "threads of each task's session (default 1)");
  app.add_option(
      "--checkpoint-dir", o.checkpoint_dir,
      "the chief saves the final parameters here (created if missing)");
  app.add_option("--target-loss", target_loss,
                 "exit 2 when the held-out loss ends above this (default 0.5)");
  CLI11_PARSE(app, argc, argv);
  if (o.steps <= 0 || o.hidden <= 0 || o.threads <= 0 ||
      o.train_examples <= 0 || o.features <= 0) {
    std::cerr << "train_data_parallel: --steps, --hidden, --features, "
                 "--threads and --examples must be positive"
              << std::endl;
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
    std::cout << "gradients all-reduced over " << joined->group->transport()
              << " between " << gang.num_tasks << " tasks" << std::endl;
  }
  absl::StatusOr<cohort::training::TrainReport> r =
      cohort::training::RunDataParallelTraining(o, gang, std::cout);
  if (!r.ok()) {
    std::cerr << "train_data_parallel: partition " << gang.partition_id
              << " failed: " << r.status() << std::endl;
    return 1;
  }
  if (gang.partition_id == 0) {
    std::cout << absl::StrFormat(
                     "parameters identical across %d tasks: checksum %08x",
                     gang.num_tasks, r->checksum)
              << std::endl;
    std::cout
        << absl::StrFormat(
               "throughput: %.1f steps/s, %.0f examples/s (%d tasks, batch %d "
               "per task)",
               r->steps_per_second, r->examples_per_second, gang.num_tasks,
               o.batch)
        << std::endl;
    if (!r->checkpoint_path.empty()) {
      std::cout << "checkpoint: " << r->checkpoint_path << std::endl;
    }
    std::cout << absl::StrFormat(
                     "final: train_loss %.4f (initial %.4f) heldout_loss %.4f "
                     "heldout_accuracy %.4f",
                     r->final_train_loss, r->initial_loss, r->heldout_loss,
                     r->heldout_accuracy)
              << std::endl;
  }
  if (r->heldout_loss > target_loss) {
    std::cerr
        << absl::StrFormat(
               "train_data_parallel: partition %d: held-out loss %.4f is above "
               "--target-loss %.4f; train longer (--steps) or raise the target",
               gang.partition_id, r->heldout_loss, target_loss)
        << std::endl;
    return 2;
  }
  return 0;
}
