// Checkpoints: variables saved to and restored from files of cohort's own
// format, with a pointer file naming the latest.
//
// File format (little-endian):
//   "COHORTCKPT1\n"            12-byte magic
//   u32 entry_count, u32 masked crc32c of magic+count
//   entry_count x { u32 name_len, name, u64 payload_len,
//                   payload (a serialized TensorProto),
//                   u32 masked crc32c of name_len..payload }
//   "CKPTEND\n"                8-byte footer
// Files are written to "<path>.tmp-<random>", flushed with fsync and renamed
// over <path> (then the directory is fsynced), so a crash leaves either the
// old file or the complete new one, never a partial checkpoint.
//
// Only regular files are read (a FIFO or device is DataLoss). Nothing in a
// file sizes an allocation unchecked: the file's size is charged to a
// memory budget before it is read (ResourceExhausted naming the file, its
// size and the budget: a sparse 50 GB file is refused, not read), every
// entry's declared tensor must fit in the bytes the entry carries (cohort
// writes every value; a few bytes declaring 1 GiB are DataLoss naming the
// entry and both sizes), and each restored tensor is charged to the budget
// as it is built (ResourceExhausted naming the entry).
//
// A crashed save leaves "<name>.tmp-<pid>-<n>" behind; the next
// WriteCheckpointFile into that directory removes such files whose writer
// process is gone (only that pattern; never a file this process is still
// writing). Reading a
// corrupt or truncated file returns DataLoss naming the file and
// the entry ("checkpoint '/ckpt/model.ckpt-10': checksum mismatch in entry
// 'w'"), never wrong numbers. A missing file is NotFound.
//
// The pointer file "<dir>/checkpoint" (TensorFlow's CheckpointState text
// format) holds
//   model_checkpoint_path: "model.ckpt-10"
//   all_model_checkpoint_paths: "model.ckpt-8"      (zero or more, oldest
//   all_model_checkpoint_paths: "model.ckpt-10"      first)
// (relative to <dir>), written the same atomic way after each save. Saver
// below writes the first line only; training::Saver writes the list too.
//
// Thread safety: functions are thread-safe; Saver is thread-safe (Save and
// Restore lock each variable while copying it). Save/Restore block on file
// I/O.
#ifndef COHORT_GRAPH_CHECKPOINT_H_
#define COHORT_GRAPH_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/graph/resource_mgr.h"
#include "cohort/graph/tensor.h"

namespace cohort {

using CheckpointEntries = std::vector<std::pair<std::string, Tensor>>;

// Writes `contents` to `path` atomically (temp file, fsync, rename, fsync of
// the directory). Internal naming the path on any I/O failure.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::string& contents);

absl::Status WriteCheckpointFile(const std::string& path,
                                 const CheckpointEntries& entries);
// `budget` (null: the process budget) is charged for the file while it is
// read and for the returned tensors while they live.
absl::StatusOr<CheckpointEntries> ReadCheckpointFile(
    const std::string& path, MemoryBudget* budget = nullptr);

// Removes "<dir>/<name>.tmp-<pid>-<n>" files (WriteFileAtomically's
// temporaries) left by processes that no longer run. Returns how many were
// removed; errors reading the directory are ignored (best effort).
int RemoveStaleTempFiles(const std::string& dir);

// Checks that a checkpoint directory cannot be written by anyone but this
// user, as ssh does for ~/.ssh: FailedPrecondition naming the directory,
// its owner and mode and the fix, when it (or, for a missing directory,
// nothing) is owned by another user (root excepted) or is group- or
// world-writable without the sticky bit. A checkpoint planted there would
// be restored into the model; stray files could be deleted by others.
// NotFound when it does not exist.
absl::Status CheckCheckpointDirectory(const std::string& dir);

// Creates `dir` (and its parents) when missing, then CheckCheckpointDirectory.
// FailedPrecondition naming `flag` (e.g. "--checkpoint-dir") and the
// directory when it cannot be created.
absl::Status CreateCheckpointDirectory(const std::string& dir,
                                       const std::string& flag);

// The pointer file's contents: names of checkpoint files in its directory.
struct CheckpointState {
  std::string model_checkpoint_path;
  std::vector<std::string> all_model_checkpoint_paths;
};
// NotFound when "<dir>/checkpoint" does not exist. DataLoss naming the file
// and line for a line that is not `field: value`, a path field whose value
// is not a quoted file name in `dir` (no '/', '..', quote or newline: a
// crafted pointer must not make a saver read or delete files elsewhere), a
// file over 1 MiB, or no model_checkpoint_path. Other fields TensorFlow
// writes (timestamps) are skipped.
absl::StatusOr<CheckpointState> ReadCheckpointState(const std::string& dir);
// Whether `name` may be a checkpoint file name in a pointer file.
bool IsCheckpointFileName(absl::string_view name);
// "<dir>/<name>".
std::string CheckpointPath(const std::string& dir, absl::string_view name);
// Writes "<dir>/checkpoint" atomically.
absl::Status WriteCheckpointState(const std::string& dir,
                                  const CheckpointState& state);

class Saver {
 public:
  // Saves and restores the Vars of `rm`'s default container.
  explicit Saver(ResourceMgr* rm) : rm_(rm) {}

  // Saves every initialised variable (or only `names`: NotFound /
  // FailedPrecondition for a missing / uninitialised one) to
  // "<dir>/<basename>-<step>" and points "<dir>/checkpoint" at it. Returns
  // the checkpoint's path. The directory must exist.
  absl::StatusOr<std::string> Save(const std::string& dir, int64_t step,
                                   const std::vector<std::string>& names = {},
                                   const std::string& basename = "model.ckpt");
  // Assigns every variable in the file (or only `names`: NotFound naming
  // the variable and file when absent), creating missing variables. A
  // dtype or shape conflicting with an existing variable is
  // InvalidArgument. Nothing is assigned unless the whole file reads back
  // intact.
  absl::Status Restore(const std::string& path,
                       const std::vector<std::string>& names = {});

  // The path the pointer file names; NotFound when there is none.
  static absl::StatusOr<std::string> LatestCheckpoint(const std::string& dir);

 private:
  ResourceMgr* rm_;
};

}  // namespace cohort

#endif  // COHORT_GRAPH_CHECKPOINT_H_
