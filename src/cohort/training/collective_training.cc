#include "cohort/training/collective_training.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cohort/base/env.h"
#include "cohort/base/status.h"
#include "cohort/distribute/distribute_coordinator.h"
#include "cohort/distribute/strategy.h"
#include "cohort/distribute/worker_context.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/checkpoint.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/collective_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/training/basic_session_run_hooks.h"
#include "cohort/training/monitored_training_session.h"
#include "cohort/training/saver.h"
#include "cohort/training/scaffold.h"

namespace cohort::training {
namespace {

// The one collective group of the job, and the instance keys of its ops:
// the loss, then one per gradient; the broadcasts from the chief; the
// checksum gather. Every task builds the same graph, so the keys agree.
constexpr int64_t kGroupKey = 1;
constexpr int64_t kLossInstance = 1;
constexpr int64_t kGradientInstance = 10;
constexpr int64_t kBroadcastInstance = 100;
constexpr int64_t kChecksumInstance = 1000;

// Node names the loop feeds and fetches.
struct Net {
  std::string x, labels, logits, loss, mean_loss, train, global_step;
  std::string sync;  // Target: every variable copied from the chief.
  std::string checksum_in, checksums;
  std::vector<std::string> params;
};

absl::StatusOr<Net> BuildNet(const Scope& root, const TrainOptions& o, int rank,
                             int size) {
  COHORT_ASSIGN_OR_RETURN(Classifier c, BuildClassifier(root, o));
  auto step = ops::GetOrCreateGlobalStep(root);
  // Each collective waits for the previous one: the ops of one group must
  // reach it in the same order on every task. The last layer's gradients
  // come first out of the backward pass, so they go first.
  Scope reduce = root.NewSubScope("allreduce");
  Output mean_loss = ops::CollectiveReduce(
      reduce.WithOpName("loss"), c.loss, size, kGroupKey, kLossInstance, "Div");
  Operation previous = mean_loss.op();
  std::vector<Operation> updates;
  std::vector<ops::Variable> state = c.vars;
  std::vector<TensorShape> shapes = c.var_shapes;
  for (size_t k = c.vars.size(); k-- > 0;) {
    Output mean = ops::CollectiveReduce(
        reduce.WithOpName(c.var_names[k]).WithControlDependencies({previous}),
        c.grads[k], size, kGroupKey, kGradientInstance + k, "Div");
    previous = mean.op();
    ops::Variable accumulator;
    updates.push_back(ApplyUpdate(root,
                                  root.NewSubScope("update_" + c.var_names[k]),
                                  c, k, mean, o, &accumulator));
    if (accumulator.handle.valid()) {
      state.push_back(accumulator);
      shapes.push_back(c.var_shapes[k]);
    }
  }
  ops::IncrementGlobalStep(
      root.WithOpName("train").WithControlDependencies(updates), step);
  state.push_back(step);
  shapes.push_back(TensorShape({}));

  // The chief's value of every variable, to everyone.
  Scope sync = root.NewSubScope("sync_from_chief");
  std::vector<Operation> copied;
  for (size_t v = 0; v < state.size(); ++v) {
    Scope s =
        copied.empty() ? sync : sync.WithControlDependencies({copied.back()});
    const int64_t instance = kBroadcastInstance + static_cast<int64_t>(v);
    const DataType dtype = state[v].value.dtype();
    const TensorShape& shape = shapes[v];
    if (rank == 0) {
      copied.push_back(ops::CollectiveBcastSend(s, state[v].value, size,
                                                kGroupKey, instance, shape)
                           .op());
    } else {
      copied.push_back(ops::AssignVariableOp(
          s, state[v].handle,
          ops::CollectiveBcastRecv(s, dtype, size, kGroupKey, instance,
                                   shape)));
    }
  }
  ops::NoOp(sync.WithOpName("done").WithControlDependencies(copied));

  auto checksum_in =
      ops::Placeholder(root.WithOpName("checksum_in"), DT_INT64, {1});
  auto checksums =
      ops::CollectiveGather(root.WithOpName("checksums"), checksum_in, size,
                            kGroupKey, kChecksumInstance, TensorShape({1}));
  COHORT_RETURN_IF_ERROR(root.status());

  Net n;
  n.x = c.x.name();
  n.labels = c.labels.name();
  n.logits = c.logits.name();
  n.loss = c.loss.name();
  n.mean_loss = mean_loss.name();
  n.train = "train";
  n.global_step = step.value.name();
  n.sync = "sync_from_chief/done";
  n.checksum_in = checksum_in.name();
  n.checksums = checksums.name();
  for (const auto& v : c.vars) n.params.push_back(v.value.name());
  return n;
}

// Runs the broadcast from the chief after every session creation.
class SyncFromChiefHook : public SessionRunHook {
 public:
  explicit SyncFromChiefHook(std::string target) : target_(std::move(target)) {}
  absl::Status AfterCreateSession(Session* session, Coordinator*) override {
    return Annotate(session->Run(RunOptions(), {}, {}, {target_}, nullptr),
                    "copying the variables from the chief");
  }

 private:
  const std::string target_;
};

}  // namespace

absl::StatusOr<TrainReport> RunCollectiveTraining(
    const CollectiveTrainOptions& options, std::ostream& log) {
  const TrainOptions& o = options.train;
  const distribute::WorkerContext* context = distribute::CurrentWorkerContext();
  if (context == nullptr || !context->distributed_mode() ||
      (context->task_type() != "chief" && context->task_type() != "worker")) {
    return absl::FailedPreconditionError(
        "collective training runs in a chief or worker task of a cluster "
        "(RunDistributeCoordinator with TF_CONFIG, e.g. under `cohort launch "
        "--chief --workers N`)");
  }
  const bool has_chief = context->cluster_spec().HasJob("chief");
  const int rank = context->task_type() == "chief"
                       ? 0
                       : context->task_id() + (has_chief ? 1 : 0);
  const int size = context->num_workers();
  const std::string who =
      absl::StrCat(context->task_type(), ":", context->task_id());
  const bool chief = rank == 0;

  const SyntheticData data = MakeSyntheticData(o);
  COHORT_ASSIGN_OR_RETURN(Dataset shard, Shard(data.train, rank, size));
  if (o.batch <= 0 || o.batch > shard.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--batch ", o.batch, " must be in [1, ", shard.size(),
                     "] (the examples of ", who, "'s shard)"));
  }
  Scope root = Scope::NewRootScope();
  COHORT_ASSIGN_OR_RETURN(Net net, BuildNet(root, o, rank, size));

  MonitoredTrainingSessionOptions mts;
  // Every task initialises its own replica (the broadcast then makes them
  // equal); only the chief restores and saves checkpoints.
  mts.is_chief = true;
  if (chief && !o.checkpoint_dir.empty()) {
    COHORT_RETURN_IF_ERROR(
        CreateCheckpointDirectory(o.checkpoint_dir, "--checkpoint-dir"));
    mts.checkpoint_dir = o.checkpoint_dir;
    if (options.save_checkpoint_steps > 0) {
      mts.save_checkpoint_steps = options.save_checkpoint_steps;
    }
  }
  mts.log_step_count_steps = 0;
  COHORT_ASSIGN_OR_RETURN(auto stop,
                          StopAtStepHook::Create(std::nullopt, o.steps));
  mts.hooks.push_back(std::make_shared<SyncFromChiefHook>(net.sync));
  mts.hooks.push_back(stop);
  mts.config.set_intra_op_parallelism_threads(o.threads);
  mts.scaffold = std::make_shared<Scaffold>();
  COHORT_ASSIGN_OR_RETURN(auto session, MonitoredTrainingSession(root, mts));
  const std::string restored = mts.scaffold->saver != nullptr
                                   ? mts.scaffold->saver->last_restored()
                                   : "";
  if (chief) {
    if (!restored.empty()) log << "restored from " << restored << std::endl;
    log << "training through the runtime: " << size << " tasks, batch "
        << o.batch << " per task (" << o.batch * size << " global), hidden "
        << o.hidden << ", lr " << o.learning_rate << ", momentum " << o.momentum
        << ", to global step " << o.steps << std::endl;
  }

  TrainReport report;
  Env* env = Env::Default();
  // The first step registers the graph on the task and forms the group:
  // set-up the side path does before its clock starts, so the rates count
  // from its end.
  absl::Time start = env->Now();
  absl::Time window_start = start;
  int64_t local_steps = 0, window_steps = 0;
  int offset = 0;
  std::vector<Tensor> out;
  while (!session->ShouldStop()) {
    if (offset + o.batch > shard.size()) offset = 0;
    const Dataset batch = Rows(shard, offset, o.batch);
    offset += o.batch;
    COHORT_RETURN_IF_ERROR(Annotate(
        session->Run(RunOptions(),
                     {{net.x, batch.x}, {net.labels, batch.labels}},
                     {net.mean_loss, net.global_step}, {net.train}, &out),
        absl::StrCat(who, ": step ", local_steps + 1)));
    const double loss = out[0].scalar<float>();
    if (local_steps == 0) {
      report.initial_loss = loss;
      start = window_start = env->Now();
    }
    report.final_train_loss = loss;
    if (local_steps++ > 0) ++window_steps;
    // The global step read in the same Run may be from before or after
    // its increment; the count of this task's steps is exact.
    if (chief && o.log_every > 0 && local_steps % o.log_every == 0) {
      const double secs = absl::ToDoubleSeconds(env->Now() - window_start);
      log << absl::StrFormat(
                 "step %d (global step %d of %d) loss %.4f examples/s %.0f",
                 local_steps, out[1].scalar<int64_t>(), o.steps, loss,
                 secs > 0
                     ? window_steps * static_cast<double>(o.batch) * size / secs
                     : 0.0)
          << std::endl;
      window_start = env->Now();
      window_steps = 0;
    }
  }
  const double secs = absl::ToDoubleSeconds(env->Now() - start);
  if (secs > 0 && local_steps > 1) {
    report.steps_per_second = (local_steps - 1) / secs;
    report.examples_per_second =
        (local_steps - 1) * static_cast<double>(o.batch) * size / secs;
  }

  // Every task's parameters, compared through the group.
  Session* raw = session->raw_session();
  COHORT_RETURN_IF_ERROR(raw->Run(RunOptions(), {}, net.params, {}, &out));
  report.checksum = ParameterChecksum(out);
  Tensor mine(DT_INT64, TensorShape({1}));
  mine.flat<int64_t>()(0) = report.checksum;
  COHORT_RETURN_IF_ERROR(
      Annotate(raw->Run(RunOptions(), {{net.checksum_in, mine}},
                        {net.checksums}, {}, &out),
               absl::StrCat(who, ": comparing the parameters' checksums")));
  std::vector<std::string> differing;
  const auto all = out[0].flat<int64_t>();
  for (int q = 0; q < size; ++q) {
    if (all(q) != all(0)) {
      differing.push_back(absl::StrFormat("rank %d=%08x", q, all(q)));
    }
  }
  if (!differing.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "parameters differ across tasks after training: rank 0 (the chief) "
        "has checksum %08x; %s (this task, %s, is rank %d); every task must "
        "build the same graph with the same flags",
        all(0), absl::StrJoin(differing, ", "), who, rank));
  }

  COHORT_RETURN_IF_ERROR(Annotate(
      raw->Run(RunOptions(),
               {{net.x, data.heldout.x}, {net.labels, data.heldout.labels}},
               {net.loss, net.logits}, {}, &out),
      "held-out evaluation"));
  report.heldout_loss = out[0].scalar<float>();
  report.heldout_accuracy = Accuracy(out[1], data.heldout.labels);
  COHORT_RETURN_IF_ERROR(session->Close());
  if (chief && !o.checkpoint_dir.empty()) {
    COHORT_ASSIGN_OR_RETURN(report.checkpoint_path,
                            Saver::LatestCheckpoint(o.checkpoint_dir));
  }
  return report;
}

absl::Status RunCollectiveTrainingJob(const CollectiveTrainOptions& options,
                                      std::ostream& log,
                                      const CollectiveReportFn& report) {
  distribute::CollectiveAllReduceStrategy strategy;
  distribute::DistributeCoordinatorOptions coordinator;
  coordinator.mode = distribute::CoordinatorMode::kIndependentWorker;
  coordinator.strategy = &strategy;
  // Each task's server runs the job's intra-op threads, as the gang's
  // session does.
  ConfigProto config;
  config.set_intra_op_parallelism_threads(options.train.threads);
  coordinator.session_config = config;
  coordinator.worker_fn = [&](const distribute::Strategy*) -> absl::Status {
    COHORT_ASSIGN_OR_RETURN(TrainReport r, RunCollectiveTraining(options, log));
    return report(r, *distribute::CurrentWorkerContext());
  };
  return distribute::RunDistributeCoordinator(coordinator);
}

}  // namespace cohort::training
