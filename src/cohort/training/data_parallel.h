// Synchronous data-parallel training of a two-layer classifier across the
// tasks of a `cohort launch` gang (barrier execution mode).
//
//   cohort launch -n 2 -- build/bin/train_data_parallel --steps 300
//
// Every task
//  1. generates the same synthetic dataset (seeded; labels come from a
//     random "teacher" network, so the task is not linearly separable) and
//     keeps its shard: the contiguous block of training examples
//     [p * N / n, (p + 1) * N / n) for partition p of n tasks;
//  2. builds the same graph: Relu(x W1 + b1) W2 + b2, sparse softmax
//     cross-entropy, symbolic gradients, and an optimizer (momentum, or plain
//     gradient descent for --momentum 0) fed by placeholders; the weights
//     start from seeded RandomNormal, so they are identical everywhere;
//  3. each step runs the forward+gradient callable on its next mini-batch,
//     all-reduces (MEAN, in place) the loss and each gradient dW1, db1, dW2,
//     db2 through a collective group (collective/collective_group.h:
//     shared memory between tasks on one host, a TCP ring otherwise; never
//     through the coordinator), and feeds the mean to the update callable.
//     The all-reduce hands every task the same bits, so the parameters stay
//     bit-identical (checked at start and end with an AllGather of a crc32c
//     of the parameters).
//
// Errors are Status values naming the step, partition and tensor involved;
// a failure of another task comes back from the all-gather or all-reduce.
//
// Thread safety: the functions are thread-compatible; RunDataParallelTraining
// uses the context's syncs sequentially and blocks until training ends.
#ifndef COHORT_TRAINING_DATA_PARALLEL_H_
#define COHORT_TRAINING_DATA_PARALLEL_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/graph/tensor.h"

namespace cohort::training {

struct TrainOptions {
  int steps = 300;
  float learning_rate = 0.1f;
  float momentum = 0.9f;  // 0: ApplyGradientDescent.
  int batch = 64;         // Examples per task per step.
  int hidden = 64;
  int features = 16;
  int classes = 4;
  int train_examples = 16384;
  int heldout_examples = 4096;
  uint64_t data_seed = 1234;
  int64_t weight_seed = 99;
  int log_every = 50;
  // Threads of each task's session pool.
  int threads = 1;
  std::string checkpoint_dir;  // Chief saves here when non-empty.
};

// The synthetic dataset (row-major x [n, features], labels [n]).
struct Dataset {
  Tensor x;
  Tensor labels;
  int size() const {
    return x.IsInitialized() ? static_cast<int>(x.dim_size(0)) : 0;
  }
};

// Training set (first) and held-out set, identical for equal options.
struct SyntheticData {
  Dataset train;
  Dataset heldout;
};
SyntheticData MakeSyntheticData(const TrainOptions& options);

// Rows [partition * n / num_tasks, (partition + 1) * n / num_tasks) of `d`.
// InvalidArgument when the partition is out of range or the shard is empty.
absl::StatusOr<Dataset> Shard(const Dataset& d, int partition, int num_tasks);

// A weight variable `name` of shape [in, out] in `root`, initialised from a
// normal distribution seeded (seed, seed2) and scaled by sqrt(gain / in):
// He-style, gain 2 before a Relu and 1 for a linear output. The initial
// value's ops go in `init`. Equal arguments give bit-identical weights in
// every task.
ops::Variable ScaledNormalWeights(const Scope& root, const Scope& init,
                                  const std::string& name, int in, int out,
                                  int64_t seed, int64_t seed2, double gain);

// The classifier's graph: Relu(x W1 + b1) W2 + b2, the mean sparse softmax
// cross-entropy and its symbolic gradients, built into `root` (nodes "x",
// "labels", "logits", "loss"; variables w1, b1, w2, b2 from
// ScaledNormalWeights and zeros). Errors name the node that failed.
struct Classifier {
  Output x;       // Placeholder float [batch, features].
  Output labels;  // Placeholder int32 [batch].
  Output logits;
  Output loss;
  std::vector<ops::Variable> vars;  // w1, b1, w2, b2.
  std::vector<std::string> var_names;
  std::vector<TensorShape> var_shapes;
  std::vector<Output> grads;  // d loss / d vars[i].
};
absl::StatusOr<Classifier> BuildClassifier(const Scope& root,
                                           const TrainOptions& options);

// The optimizer's update of c.vars[i] by `grad`, in `scope`: ApplyMomentum
// with an accumulator variable "<name>_momentum" made in `root` (returned
// through `accumulator` when not null), or ApplyGradientDescent for
// momentum 0.
Operation ApplyUpdate(const Scope& root, const Scope& scope,
                      const Classifier& c, size_t i, Input grad,
                      const TrainOptions& options, ops::Variable* accumulator);

// Rows [begin, begin + count) of `d` as new tensors (the caller keeps the
// range inside `d`).
Dataset Rows(const Dataset& d, int begin, int count);

// The share of rows of `logits` [n, classes] whose largest entry is at
// `labels` [n] (int32); 0 for no rows.
double Accuracy(const Tensor& logits, const Tensor& labels);

// crc32c over the raw bytes of the tensors, in order.
uint32_t ParameterChecksum(const std::vector<Tensor>& params);

// What the gang needs: an all-gather of short strings (BarrierTaskContext's,
// for the parameter checks) and an all-reduce MEAN of a float buffer in
// place that leaves the same bits on every task (a CollectiveGroup's, for
// the gradients). Tests may pass fakes.
struct Collective {
  int partition_id = 0;
  int num_tasks = 1;
  std::function<absl::StatusOr<std::vector<std::string>>(const std::string&)>
      all_gather;
  std::function<absl::Status(float* data, size_t count)> all_reduce_mean;

  // Elastic jobs only (`cohort launch --elastic`, elastic_gang.h); null
  // otherwise. The training state is committed when a step's update is
  // applied: a step whose all-reduce fails is dropped, reform() moves to
  // the next membership and sets partition_id and num_tasks, and the state
  // is then broadcast from the member with the most committed steps to all.
  // `root`'s bytes into every member's `data`.
  std::function<absl::Status(void* data, size_t bytes, int root)> broadcast;
  // This task joined a running job (a restarted member): it has no training
  // state of its own until a member hands it on.
  bool joins_running_job = false;
  // At a step boundary: whether the members move to a new membership now
  // (the same answer on every task).
  std::function<absl::StatusOr<bool>()> membership_changed;
  // After `cause` (a failed collective) or an agreed change (OK).
  std::function<absl::Status(const absl::Status& cause, Collective& self)>
      reform;
  // "generation 2: worker:0, worker:1", for the log.
  std::function<std::string()> describe;
  // Whether the job had trained to its end when this task joined or
  // re-formed (then it trains no more), and the mark that it did.
  std::function<bool()> job_finished;
  std::function<absl::Status()> mark_finished;
  bool elastic() const { return reform != nullptr; }
};

struct TrainReport {
  double initial_loss = 0;  // Global mean loss of step 1 (before any update).
  double final_train_loss = 0;  // Global mean loss of the last step.
  double heldout_loss = 0;
  double heldout_accuracy = 0;
  double steps_per_second = 0;
  double examples_per_second = 0;  // Across the whole gang.
  uint32_t checksum = 0;
  std::string checkpoint_path;  // Chief only, when saved.
  // This task's partition and the gang's size at the end (an elastic
  // gang's change), and how often the membership changed.
  int partition_id = 0;
  int num_tasks = 0;
  int membership_changes = 0;
  // An elastic replacement that came back after the others finished.
  bool arrived_after_the_end = false;
};

// Trains as one task of the gang. Progress lines go to `log` on the chief
// (partition 0) only. FailedPrecondition when the tasks' parameters differ
// (start or end), naming the partitions; errors of the syncs and the
// session otherwise. Every task computes the held-out figures.
absl::StatusOr<TrainReport> RunDataParallelTraining(const TrainOptions& options,
                                                    const Collective& gang,
                                                    std::ostream& log);

}  // namespace cohort::training

#endif  // COHORT_TRAINING_DATA_PARALLEL_H_
