// Saver: checkpoints of a graph's variables taken through a Session
// (TensorFlow's tf.train.Saver), so variables that live on ps tasks are
// saved and restored by the chief's session.
//
// Build adds to the graph, for every VarHandleOp, a read (the variable's own
// "<name>/read" when there is one), a restore Placeholder and an
// AssignVariableOp from it (colocated with the variable by the placer).
// Save fetches every read in one Run and writes "<dir>/<basename>-<step>"
// in graph/checkpoint.h's format, then the pointer file "<dir>/checkpoint"
// naming it as model_checkpoint_path and listing every kept checkpoint as
// all_model_checkpoint_paths (oldest first). At most max_to_keep
// checkpoints are kept (older files are deleted); the list is read back
// from the pointer file the first time a directory is saved to, so it
// survives restarts. Restore feeds every value in one Run.
//
// Entries are named as the variables are in a ResourceMgr (shared_name or
// node name), so graph/checkpoint.h's Saver reads the same files.
//
// Thread safety: thread-compatible: Save keeps the list of kept
// checkpoints, so calls to Save must not overlap (CheckpointSaverHook makes
// them from the training thread); Restore and LatestCheckpoint may run at
// any time. Save and Restore block on the session and on file I/O.
#ifndef COHORT_TRAINING_SAVER_H_
#define COHORT_TRAINING_SAVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cohort/graph/builder.h"
#include "cohort/graph/session.h"

namespace cohort::training {

struct SaverOptions {
  // Checkpoints kept in a directory; <= 0 keeps all.
  int max_to_keep = 5;
};

class Saver {
 public:
  // Adds the save/restore nodes for every variable `graph` has now (under
  // the name scope "save", made unique). Errors: the graph's.
  static absl::StatusOr<std::shared_ptr<Saver>> Build(
      const Scope& graph, const SaverOptions& options = SaverOptions());

  // Writes "<dir>/<basename>-<global_step>" and the pointer file; returns
  // the path. Errors: the session's (FailedPrecondition for an
  // uninitialised variable), Internal naming the path for I/O; on error
  // the pointer file is unchanged. The directory must exist.
  absl::StatusOr<std::string> Save(Session* session, const std::string& dir,
                                   int64_t global_step,
                                   const std::string& basename = "model.ckpt");
  // Logs "Restoring parameters from <path>" and assigns every variable.
  // NotFound (naming variable and file) when the file lacks one;
  // InvalidArgument for a dtype mismatch; DataLoss for a corrupt file;
  // nothing is assigned unless all values are present.
  absl::Status Restore(Session* session, const std::string& path);

  // The checkpoint the pointer file of `dir` names, joined to `dir`;
  // NotFound when there is none (ReadCheckpointState's errors otherwise).
  static absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir);

  // The checkpoints kept in the directory last saved to, oldest first.
  std::vector<std::string> last_checkpoints() const;
  // The path of the last successful Restore; "" when none succeeded.
  std::string last_restored() const;

 private:
  struct Entry {
    std::string name;
    DataType dtype;
    std::string read;     // tensor fetched to save
    std::string feed;     // restore placeholder
    std::string restore;  // AssignVariableOp node
  };
  Saver(std::vector<Entry> entries, SaverOptions options);
  // Loads the kept list of `dir` from its pointer file on first use.
  void LoadKept(const std::string& dir);

  const std::vector<Entry> entries_;
  const SaverOptions options_;

  mutable absl::Mutex restored_mu_;
  std::string last_restored_ ABSL_GUARDED_BY(restored_mu_);
  // Touched by Save only.
  std::string kept_dir_;
  // Files (relative to kept_dir_) oldest first.
  std::vector<std::string> kept_;
};

}  // namespace cohort::training

#endif  // COHORT_TRAINING_SAVER_H_
