#include "cohort/distribute/testing.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cohort::distribute {

MockStrategy::MockStrategy(bool between_graph, std::optional<bool> should_init,
                           std::optional<bool> should_checkpoint,
                           std::optional<bool> should_save_summary)
    : between_graph_(between_graph),
      should_init_(should_init),
      should_checkpoint_(should_checkpoint),
      should_save_summary_(should_save_summary) {}

void MockStrategy::Configure(ConfigProto* session_config,
                             const ClusterSpec* cluster,
                             const std::string& task_type, int task_id) {
  if (!should_init_.has_value()) should_init_ = task_id == 0;
  if (!should_checkpoint_.has_value()) should_checkpoint_ = task_id == 0;
  if (!should_save_summary_.has_value()) should_save_summary_ = task_id == 0;
  if (session_config == nullptr) return;
  const bool has_cluster = cluster != nullptr && !cluster->empty();
  if (has_cluster && !task_type.empty() && task_id >= 0 && between_graph_) {
    session_config->set_intra_op_parallelism_threads(
        session_config->intra_op_parallelism_threads() + 1);
    if (task_type == "chief" || task_type == "worker") {
      session_config->add_device_filters(
          absl::StrCat("/job:", task_type, "/task:", task_id));
      session_config->add_device_filters("/job:ps");
    }
  } else {
    session_config->set_inter_op_parallelism_threads(
        session_config->inter_op_parallelism_threads() + 1);
    session_config->add_device_filters("/job:somejob");
  }
}

std::unique_ptr<Strategy> MockStrategy::Clone() const {
  return std::make_unique<MockStrategy>(*this);
}

class RecordingStdServerFactory::Server : public StdServer {
 public:
  Server(RecordingStdServerFactory* factory, size_t index, std::string target,
         bool block_join)
      : factory_(factory),
        index_(index),
        target_(std::move(target)),
        block_join_(block_join) {}
  absl::Status Join() override {
    factory_->MarkJoined(index_);
    if (!block_join_) return absl::OkStatus();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&stopped_));
    return absl::OkStatus();
  }
  void Stop() override {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  std::string target() const override { return target_; }
  std::string description() const override {
    return absl::StrCat("recorded server ", target_);
  }

 private:
  RecordingStdServerFactory* const factory_;
  const size_t index_;
  const std::string target_;
  const bool block_join_;
  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

absl::StatusOr<std::unique_ptr<StdServer>>
RecordingStdServerFactory::CreateAndStart(const StdServerArgs& args, Env* env) {
  absl::StatusOr<std::string> address =
      args.cluster.task_address(args.task_type, args.task_id);
  if (!address.ok()) return address.status();
  size_t index;
  {
    absl::MutexLock lock(&mu_);
    index = records_.size();
    records_.push_back(Record{args, false});
  }
  return std::unique_ptr<StdServer>(
      new Server(this, index,
                 absl::StrCat(args.rpc_layer.empty() ? "grpc" : args.rpc_layer,
                              "://", *address),
                 block_join_));
}

void RecordingStdServerFactory::MarkJoined(size_t index) {
  absl::MutexLock lock(&mu_);
  records_[index].joined = true;
}

std::vector<RecordingStdServerFactory::Record>
RecordingStdServerFactory::records() {
  absl::MutexLock lock(&mu_);
  return records_;
}

int RecordingStdServerFactory::started(const std::string& task_type) {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(std::count_if(
      records_.begin(), records_.end(),
      [&](const Record& r) { return r.args.task_type == task_type; }));
}

std::vector<bool> RecordingStdServerFactory::joined(
    const std::string& task_type) {
  absl::MutexLock lock(&mu_);
  std::map<int, bool> by_id;
  for (const Record& r : records_) {
    if (r.args.task_type == task_type) by_id[r.args.task_id] = r.joined;
  }
  std::vector<bool> out;
  for (const auto& [id, joined] : by_id) out.push_back(joined);
  return out;
}

}  // namespace cohort::distribute
