#include "cohort/distribute/worker_context.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort::distribute {
namespace {

thread_local const WorkerContext* current_context = nullptr;

std::string TaskAddressOr(const ClusterSpec& cluster, const std::string& job,
                          int index) {
  absl::StatusOr<std::string> address = cluster.task_address(job, index);
  return address.ok() ? *address : "";
}

int TaskCount(const ClusterSpec& cluster, const std::string& job) {
  const ClusterSpec::TaskMap* tasks = cluster.tasks(job);
  return tasks == nullptr ? 0 : static_cast<int>(tasks->size());
}

// Makes a context current for a scope; restores the previous (null) one.
class ScopedContext {
 public:
  explicit ScopedContext(const WorkerContext* context) {
    current_context = context;
  }
  ~ScopedContext() { current_context = nullptr; }
};

}  // namespace

WorkerContext::WorkerContext(std::unique_ptr<Strategy> strategy,
                             ClusterSpec cluster, std::string task_type,
                             int task_id, ConfigProto session_config,
                             std::string rpc_layer,
                             std::shared_ptr<WorkerBarrier> barrier)
    : strategy_(std::move(strategy)),
      cluster_(std::move(cluster)),
      task_type_(std::move(task_type)),
      task_id_(task_id),
      session_config_(std::move(session_config)),
      rpc_layer_(std::move(rpc_layer)),
      barrier_(std::move(barrier)) {
  if (cluster_.empty()) return;  // local: "", 0 workers, chief, not distributed
  std::string target;
  if (task_type_.empty()) {
    // The in-graph client's master: the chief, else worker 0.
    target = TaskAddressOr(cluster_,
                           cluster_.HasJob("chief") ? "chief" : "worker", 0);
  } else if (task_type_ == "evaluator") {
    // cohort's rule (reference A6): an evaluator outside the cluster (the
    // launcher's TF_CONFIG) has no server and runs locally.
    if (cluster_.HasJob("evaluator")) {
      target = TaskAddressOr(cluster_, "evaluator", task_id_);
    }
  } else {
    target = TaskAddressOr(cluster_, task_type_, task_id_);
  }
  // An empty target means "in this process": never prefix it.
  master_target_ = target.empty() || rpc_layer_.empty()
                       ? target
                       : absl::StrCat(rpc_layer_, "://", target);
  num_workers_ = TaskCount(cluster_, "worker") + TaskCount(cluster_, "chief");
  is_chief_ = IsChiefTask(&cluster_, task_type_, task_id_);
  distributed_mode_ = task_type_ != "evaluator";
}

bool WorkerContext::should_checkpoint() const {
  if (strategy_ == nullptr) return is_chief_;
  return strategy_->should_checkpoint().value_or(is_chief_);
}

bool WorkerContext::should_save_summary() const {
  if (strategy_ == nullptr) return is_chief_;
  return strategy_->should_save_summary().value_or(is_chief_);
}

bool WorkerContext::experimental_should_init() const {
  if (strategy_ == nullptr) return is_chief_;
  return strategy_->should_init().value_or(is_chief_);
}

absl::Status WorkerContext::WaitForOtherWorkers() const {
  if (barrier_ == nullptr) return absl::OkStatus();
  return barrier_->Wait();
}

std::string WorkerContext::DebugString() const {
  if (cluster_.empty()) return "[local]";
  return absl::StrCat(
      "[cluster_spec: ", cluster_.DebugString(),
      ", task_type: ", task_type_.empty() ? "None" : "'" + task_type_ + "'",
      ", task_id: ", task_id_ < 0 ? "None" : std::to_string(task_id_), "]");
}

const WorkerContext* CurrentWorkerContext() { return current_context; }

absl::Status NestedCoordinatorError(const std::string& debug) {
  return absl::InvalidArgumentError(absl::StrCat(
      "You cannot run distribute coordinator in a `worker_fn`.\t", debug,
      " (RunDistributeCoordinator was called from a worker_fn or eval_fn; "
      "call it once, at the top of the task's program)"));
}

absl::Status RunSingleWorker(const WorkerFn& fn, const Strategy* strategy,
                             const ClusterSpec& cluster,
                             const std::string& task_type, int task_id,
                             const ConfigProto& session_config,
                             const std::string& rpc_layer,
                             std::shared_ptr<WorkerBarrier> barrier) {
  // Each task configures its own copies: strategies and configs are shared
  // by the caller's threads (TF deep-copies both).
  ConfigProto config = session_config;
  std::unique_ptr<Strategy> configured =
      strategy == nullptr ? nullptr : strategy->Clone();
  if (configured != nullptr) {
    if (task_type == "evaluator") {
      configured->Configure(&config, nullptr, "", -1);
    } else {
      configured->Configure(&config, cluster.empty() ? nullptr : &cluster,
                            task_type, task_id);
    }
  }
  WorkerContext context(std::move(configured), cluster, task_type, task_id,
                        std::move(config), rpc_layer, std::move(barrier));
  if (current_context != nullptr) {
    return NestedCoordinatorError(context.DebugString());
  }
  if (!fn) return absl::OkStatus();
  ScopedContext scope(&context);
  return fn(context.strategy());
}

}  // namespace cohort::distribute
