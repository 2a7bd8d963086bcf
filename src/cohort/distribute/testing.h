// Test doubles for the distribute coordinator, shared by its unit tests and
// the conformance adapter (tools/conformance/distribute_adapter.cc):
//
//  - MockStrategy: TensorFlow's distribute_coordinator_test MockStrategy,
//    rule for rule (docs/distribute.md).
//  - RecordingStdServerFactory: "starts" servers that listen nowhere and
//    records what each was started with and whether it was joined (TF's
//    mocked _run_std_server).
//
// Thread safety: MockStrategy is thread-compatible (the coordinator clones
// it per task); RecordingStdServerFactory and its servers are thread-safe.
#ifndef COHORT_DISTRIBUTE_TESTING_H_
#define COHORT_DISTRIBUTE_TESTING_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cohort/distribute/std_server.h"
#include "cohort/distribute/strategy.h"

namespace cohort::distribute {

// Configure: each unset property becomes (task_id == 0). With a session
// config: given a cluster, a task type and id and between-graph,
// intra_op_parallelism_threads += 1 and, for chief/worker, device_filters
// += ["/job:<type>/task:<id>", "/job:ps"]; otherwise
// inter_op_parallelism_threads += 1 and device_filters += ["/job:somejob"].
class MockStrategy : public Strategy {
 public:
  explicit MockStrategy(bool between_graph,
                        std::optional<bool> should_init = std::nullopt,
                        std::optional<bool> should_checkpoint = std::nullopt,
                        std::optional<bool> should_save_summary = std::nullopt);
  void Configure(ConfigProto* session_config, const ClusterSpec* cluster,
                 const std::string& task_type, int task_id) override;
  std::unique_ptr<Strategy> Clone() const override;
  bool between_graph() const override { return between_graph_; }
  std::optional<bool> should_init() const override { return should_init_; }
  std::optional<bool> should_checkpoint() const override {
    return should_checkpoint_;
  }
  std::optional<bool> should_save_summary() const override {
    return should_save_summary_;
  }

 private:
  bool between_graph_;
  std::optional<bool> should_init_;
  std::optional<bool> should_checkpoint_;
  std::optional<bool> should_save_summary_;
};

class RecordingStdServerFactory : public StdServerFactory {
 public:
  struct Record {
    StdServerArgs args;
    bool joined = false;
  };
  // block_join: Join blocks until Stop (a real server's behaviour);
  // otherwise Join returns at once (TF's MockServer).
  explicit RecordingStdServerFactory(bool block_join = false)
      : block_join_(block_join) {}

  absl::StatusOr<std::unique_ptr<StdServer>> CreateAndStart(
      const StdServerArgs& args, Env* env) override;

  // Every server started so far, in start order.
  std::vector<Record> records();
  // How many were started for `task_type`.
  int started(const std::string& task_type);
  // joined flags of `task_type`'s servers, by task id.
  std::vector<bool> joined(const std::string& task_type);

 private:
  class Server;
  void MarkJoined(size_t index);

  const bool block_join_;
  absl::Mutex mu_;
  std::vector<Record> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cohort::distribute

#endif  // COHORT_DISTRIBUTE_TESTING_H_
