// Strategy: how a distribution strategy takes part in the distribute
// coordinator (docs/distribute.md): it configures the
// session config of each task, says whether it replicates between graphs
// (one client per worker) or in one graph (one client for all), and which
// tasks initialise, checkpoint and write summaries.
//
//   ParameterServerStrategy strategy;
//   RunDistributeCoordinator(options_with(&strategy));
//
// The coordinator deep-copies the strategy (Clone) for every task before it
// configures it, so a strategy object may be shared by the caller's threads.
//
// Thread safety: thread-compatible; the coordinator gives each task its own
// copy.
#ifndef COHORT_DISTRIBUTE_STRATEGY_H_
#define COHORT_DISTRIBUTE_STRATEGY_H_

#include <memory>
#include <optional>
#include <string>

#include "cohort/cluster/cluster_spec.h"
#include "cohort/config.pb.h"

namespace cohort::distribute {

class Strategy {
 public:
  virtual ~Strategy() = default;

  // Adjusts `session_config` (may be null: then only the strategy's own
  // properties change) for the task (`task_type`, `task_id`) of `cluster`.
  // No cluster: `cluster` null, `task_type` "" and `task_id` -1 (the
  // evaluator and the local mode configure this way). Never blocks.
  virtual void Configure(ConfigProto* session_config,
                         const ClusterSpec* cluster,
                         const std::string& task_type, int task_id) = 0;
  // A deep copy (the coordinator configures one per task).
  virtual std::unique_ptr<Strategy> Clone() const = 0;

  // True: one client per worker task (between-graph replication); false:
  // one client drives every worker (in-graph replication).
  virtual bool between_graph() const = 0;
  // Unset (nullopt) until Configure decided, for strategies that decide there.
  virtual std::optional<bool> should_init() const = 0;
  virtual std::optional<bool> should_checkpoint() const = 0;
  virtual std::optional<bool> should_save_summary() const = 0;
};

// Between-graph training with variables on the ps tasks. Configure, for a
// chief or worker task, sets device_filters to ["/job:<type>/task:<id>",
// "/job:ps"] (a worker sees only itself and the ps tasks) and makes the
// chief (by multi_worker_util's rule: chief 0, else worker 0) the task that
// initialises, checkpoints and writes summaries. Without a cluster the one
// local task does all three.
// It does not switch on a coordination service (the reference's §2.7 says
// it should): under `cohort launch` the servers join the launcher's; tasks
// started by hand get one by setting
// experimental.coordination_config.service_type = "standalone" in the
// session config, and only then is WaitForOtherWorkers a real barrier.
class ParameterServerStrategy : public Strategy {
 public:
  void Configure(ConfigProto* session_config, const ClusterSpec* cluster,
                 const std::string& task_type, int task_id) override;
  std::unique_ptr<Strategy> Clone() const override;
  bool between_graph() const override { return true; }
  std::optional<bool> should_init() const override { return is_chief_; }
  std::optional<bool> should_checkpoint() const override { return is_chief_; }
  std::optional<bool> should_save_summary() const override { return is_chief_; }

 private:
  std::optional<bool> is_chief_;
};

// Between-graph synchronous training with collectives (mirrored variables
// on every worker). Configure sets experimental.collective_group_leader
// ("/job:chief/replica:0/task:0", else worker 0) and device_filters to the
// task itself ("/job:<type>/task:<id>") for chief and worker tasks;
// every task initialises its own replicas (should_init true), the chief
// checkpoints and writes summaries.
class CollectiveAllReduceStrategy : public Strategy {
 public:
  void Configure(ConfigProto* session_config, const ClusterSpec* cluster,
                 const std::string& task_type, int task_id) override;
  std::unique_ptr<Strategy> Clone() const override;
  bool between_graph() const override { return true; }
  std::optional<bool> should_init() const override { return true; }
  std::optional<bool> should_checkpoint() const override { return is_chief_; }
  std::optional<bool> should_save_summary() const override { return is_chief_; }

 private:
  std::optional<bool> is_chief_;
};

// multi_worker_util's chief rule for a context: no cluster, no task type,
// "chief" and "evaluator" are chief; "worker" 0 is chief when the cluster
// has no chief job. Used by the strategies and the worker context alike.
bool IsChiefTask(const ClusterSpec* cluster, const std::string& task_type,
                 int task_id);

}  // namespace cohort::distribute

#endif  // COHORT_DISTRIBUTE_STRATEGY_H_
