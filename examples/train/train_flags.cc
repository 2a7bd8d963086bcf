#include "examples/train/train_flags.h"

#include "absl/strings/str_format.h"

namespace cohort::examples {

void AddTrainFlags(CLI::App& app, training::TrainOptions& o,
                   double& target_loss) {
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
}

bool CheckTrainFlags(const training::TrainOptions& o, const char* program,
                     std::ostream& err) {
  if (o.steps > 0 && o.hidden > 0 && o.threads > 0 && o.train_examples > 0 &&
      o.features > 0) {
    return true;
  }
  err << program
      << ": --steps, --hidden, --features, --threads and --examples must be "
         "positive"
      << std::endl;
  return false;
}

void PrintTrainReport(const training::TrainReport& r, int num_tasks, int batch,
                      std::ostream& out) {
  out << absl::StrFormat("parameters identical across %d tasks: checksum %08x",
                         num_tasks, r.checksum)
      << std::endl;
  out << absl::StrFormat(
             "throughput: %.1f steps/s, %.0f examples/s (%d tasks, batch %d "
             "per task)",
             r.steps_per_second, r.examples_per_second, num_tasks, batch)
      << std::endl;
  if (!r.checkpoint_path.empty()) {
    out << "checkpoint: " << r.checkpoint_path << std::endl;
  }
  out << absl::StrFormat(
             "final: train_loss %.4f (initial %.4f) heldout_loss %.4f "
             "heldout_accuracy %.4f",
             r.final_train_loss, r.initial_loss, r.heldout_loss,
             r.heldout_accuracy)
      << std::endl;
}

bool MetTargetLoss(const training::TrainReport& r, double target_loss,
                   const std::string& who, std::ostream& err) {
  if (r.heldout_loss <= target_loss) return true;
  err << absl::StrFormat(
             "%s: held-out loss %.4f is above --target-loss %.4f; train longer "
             "(--steps) or raise the target",
             who, r.heldout_loss, target_loss)
      << std::endl;
  return false;
}

}  // namespace cohort::examples
