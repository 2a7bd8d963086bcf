// TensorBoard's event files, as TensorFlow's EventsWriter and
// tf.summary.FileWriter write them for scalar summaries, so TensorBoard
// reads cohort's training curves unchanged (docs/ui.md).
//
// The file, <dir>/events.out.tfevents.<unix seconds>.<hostname>, is a
// sequence of TFRecords, each
//
//   uint64 length (little-endian) | uint32 masked CRC-32C of the length
//   | data[length] | uint32 masked CRC-32C of the data
//
// (graph/crc32c.h masks), whose data is a serialized tensorboard.Event
// (proto/cohort/summary.proto, TensorFlow's field numbers). The first event
// carries file_version "brain.Event:2"; each AddScalars call is one Event
// with one Summary value per tag.
//
//   COHORT_ASSIGN_OR_RETURN(auto w, SummaryWriterFor("/tmp/ckpt", env));
//   COHORT_RETURN_IF_ERROR(w->AddScalars(step, {{"loss", 0.25f}}));
//
// Every record reaches the file (fflush) before AddScalars returns: a task
// killed mid-run leaves a file TensorBoard reads up to its last event.
//
// Thread safety: an EventFileWriter is thread-safe; SummaryWriterFor is.
#ifndef COHORT_TRAINING_SUMMARY_WRITER_H_
#define COHORT_TRAINING_SUMMARY_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace cohort {
class Env;
}

namespace cohort::training {

// TFRecord framing of `data`, appended to `out`.
void AppendTfRecord(absl::string_view data, std::string* out);

class EventFileWriter {
 public:
  // Creates the directory when missing and a new event file in it.
  // FailedPrecondition naming the path when either cannot be made.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(
      const std::string& dir, Env* env = nullptr);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One Event at `step`, wall time now, holding a scalar per (tag, value).
  // Internal naming the file when it cannot be written.
  absl::Status AddScalars(
      int64_t step, const std::vector<std::pair<std::string, float>>& values);

  const std::string& path() const { return path_; }

 private:
  EventFileWriter(Env* env, std::string path, std::FILE* file)
      : env_(env), path_(std::move(path)), file_(file) {}
  absl::Status WriteEvent(const std::string& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Env* const env_;
  const std::string path_;
  absl::Mutex mu_;
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
};

// The process's writer for `dir`, created on first use (TensorFlow's
// SummaryWriterCache): the hooks that write summaries into one directory
// share one file, as TensorBoard expects of one run.
absl::StatusOr<std::shared_ptr<EventFileWriter>> SummaryWriterFor(
    const std::string& dir, Env* env = nullptr);

}  // namespace cohort::training

#endif  // COHORT_TRAINING_SUMMARY_WRITER_H_
