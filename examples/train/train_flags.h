// What the two synchronous data-parallel programs share: their flags (the
// job of training/data_parallel.h) and the lines they end with.
//
//   train_data_parallel: through the gang's collective group, beside the
//     session (barrier mode, `cohort launch -n N`);
//   train_collective: through the distributed runtime, collective ops in
//     the graph (`cohort launch --chief --workers N`).
//
// Thread safety: functions of one thread.
#ifndef COHORT_EXAMPLES_TRAIN_TRAIN_FLAGS_H_
#define COHORT_EXAMPLES_TRAIN_TRAIN_FLAGS_H_

#include <ostream>

#include "CLI/CLI.hpp"
#include "cohort/training/data_parallel.h"

namespace cohort::examples {

// --steps, --lr, --momentum, --batch, --hidden, --features, --examples,
// --log-every, --threads, --checkpoint-dir, --target-loss.
void AddTrainFlags(CLI::App& app, training::TrainOptions& options,
                   double& target_loss);

// False, after a message on `err` naming `program` and the flags, when a
// count that must be positive is not.
bool CheckTrainFlags(const training::TrainOptions& options, const char* program,
                     std::ostream& err);

// The chief's closing lines: the parameters' checksum across `num_tasks`,
// throughput, the checkpoint (if any) and the final losses.
void PrintTrainReport(const training::TrainReport& report, int num_tasks,
                      int batch, std::ostream& out);

// False, after a message on `err`, when the held-out loss ends above
// `target_loss` (the programs then exit 2).
bool MetTargetLoss(const training::TrainReport& report, double target_loss,
                   const std::string& who, std::ostream& err);

}  // namespace cohort::examples

#endif  // COHORT_EXAMPLES_TRAIN_TRAIN_FLAGS_H_
