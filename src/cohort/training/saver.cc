#include "cohort/training/saver.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/graph/checkpoint.h"
#include "cohort/graph/kernels/array_ops.h"
#include "cohort/graph/kernels/state_ops.h"
#include "cohort/training/training_util.h"

namespace cohort::training {
namespace {

// The variable's own read ("<node>/read" of this handle), so saving does
// not add a second read of every variable.
Output FindRead(const Scope& graph, const Operation& handle) {
  Operation read = graph.FindOp(handle.name() + "/read");
  if (read.valid() && read.op_type() == "ReadVariableOp" &&
      read.num_inputs() == 1 && read.input(0) == handle.output(0)) {
    return read.output(0);
  }
  return Output();
}

}  // namespace

absl::StatusOr<std::shared_ptr<Saver>> Saver::Build(
    const Scope& graph, const SaverOptions& options) {
  Scope root = Scope::RootOf(graph);
  Scope save = root.NewSubScope("save");
  std::vector<Entry> entries;
  for (const VariableInfo& v : ListVariables(root)) {
    Entry e;
    e.name = v.name;
    e.dtype = v.dtype;
    Output read = FindRead(root, v.handle);
    const std::string& node = v.handle.name();
    if (!read.valid()) {
      read = ops::ReadVariableOp(save.WithOpName(node + "/read"),
                                 v.handle.output(0), v.dtype);
    }
    Output feed = ops::Placeholder(save.WithOpName(node + "/restore_value"),
                                   v.dtype, PartialTensorShape::UnknownRank());
    Operation assign = ops::AssignVariableOp(save.WithOpName(node + "/restore"),
                                             v.handle.output(0), feed);
    if (!root.ok()) return root.status();
    e.read = read.name();
    e.feed = feed.name();
    e.restore = assign.name();
    entries.push_back(std::move(e));
  }
  return std::shared_ptr<Saver>(new Saver(std::move(entries), options));
}

Saver::Saver(std::vector<Entry> entries, SaverOptions options)
    : entries_(std::move(entries)), options_(options) {}

void Saver::LoadKept(const std::string& dir) {
  if (kept_dir_ == dir) return;
  kept_dir_ = dir;
  kept_.clear();
  // A job restarted on the same directory keeps counting its old
  // checkpoints towards max_to_keep (TF recover_last_checkpoints).
  auto state = ReadCheckpointState(dir);
  if (state.ok()) kept_ = state->all_model_checkpoint_paths;
}

absl::StatusOr<std::string> Saver::Save(Session* session,
                                        const std::string& dir,
                                        int64_t global_step,
                                        const std::string& basename) {
  std::vector<std::string> fetches;
  for (const Entry& e : entries_) fetches.push_back(e.read);
  std::vector<Tensor> values;
  if (!fetches.empty()) {
    COHORT_RETURN_IF_ERROR(session->Run({}, fetches, {}, &values));
  }
  CheckpointEntries out;
  for (size_t i = 0; i < entries_.size(); ++i) {
    out.emplace_back(entries_[i].name, values[i]);
  }
  std::string file = absl::StrCat(basename, "-", global_step);
  if (!IsCheckpointFileName(file)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint basename '", basename,
                     "' must be a file name (no '/', quote or newline)"));
  }
  std::string path = CheckpointPath(dir, file);
  COHORT_RETURN_IF_ERROR(WriteCheckpointFile(path, out));

  LoadKept(dir);
  kept_.erase(std::remove(kept_.begin(), kept_.end(), file), kept_.end());
  kept_.push_back(file);
  std::vector<std::string> removed;
  if (options_.max_to_keep > 0) {
    while (static_cast<int>(kept_.size()) > options_.max_to_keep) {
      removed.push_back(kept_.front());
      kept_.erase(kept_.begin());
    }
  }
  CheckpointState state;
  state.model_checkpoint_path = file;
  state.all_model_checkpoint_paths = kept_;
  COHORT_RETURN_IF_ERROR(WriteCheckpointState(dir, state));
  // Deleted after the pointer file stops naming them, so a crash in
  // between leaves a stray file, never a pointer to a missing one.
  for (const std::string& old : removed) {
    // Only what a saver of this basename writes, whatever the pointer file
    // listed.
    if (!absl::StartsWith(old, absl::StrCat(basename, "-"))) continue;
    std::string old_path = CheckpointPath(dir, old);
    if (std::remove(old_path.c_str()) != 0) {
      COHORT_LOG(WARNING) << "could not delete old checkpoint '" << old_path
                          << "'";
    }
  }
  return path;
}

absl::Status Saver::Restore(Session* session, const std::string& path) {
  COHORT_LOG(INFO) << "Restoring parameters from " << path;
  COHORT_ASSIGN_OR_RETURN(CheckpointEntries file, ReadCheckpointFile(path));
  absl::flat_hash_map<std::string, const Tensor*> by_name;
  for (const auto& [name, value] : file) by_name[name] = &value;
  std::vector<std::pair<std::string, Tensor>> feeds;
  std::vector<std::string> targets;
  for (const Entry& e : entries_) {
    auto it = by_name.find(e.name);
    if (it == by_name.end()) {
      return absl::NotFoundError(absl::StrCat(
          "variable '", e.name, "' is not in checkpoint '", path, "'"));
    }
    if (it->second->dtype() != e.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint '", path, "' holds variable '", e.name,
                       "' as ", DataTypeName(it->second->dtype()),
                       " but the variable is ", DataTypeName(e.dtype)));
    }
    feeds.emplace_back(e.feed, *it->second);
    targets.push_back(e.restore);
  }
  if (!targets.empty()) {
    COHORT_RETURN_IF_ERROR(session->Run(feeds, {}, targets, nullptr));
  }
  absl::MutexLock lock(&restored_mu_);
  last_restored_ = path;
  return absl::OkStatus();
}

absl::StatusOr<std::string> Saver::LatestCheckpoint(const std::string& dir) {
  return cohort::Saver::LatestCheckpoint(dir);
}

std::string Saver::last_restored() const {
  absl::MutexLock lock(&restored_mu_);
  return last_restored_;
}

std::vector<std::string> Saver::last_checkpoints() const {
  std::vector<std::string> out;
  for (const auto& f : kept_) out.push_back(CheckpointPath(kept_dir_, f));
  return out;
}

}  // namespace cohort::training
