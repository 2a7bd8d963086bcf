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
// with one Summary value per tag; AddSessionStart is a SessionLog START
// event (TensorBoard then drops the events a restarted run goes back over).
//
//   COHORT_ASSIGN_OR_RETURN(auto w, SummaryWriterFor("/tmp/ckpt", env->Now()));
//   COHORT_RETURN_IF_ERROR(w->AddScalars(step, {{"loss", 0.25f}}, env->Now()));
//
// Every record reaches the file (fflush) before a call returns: a task
// killed mid-run leaves a file TensorBoard reads up to its last event. A
// file deleted under the writer is replaced by a new one on the next
// event, as TensorFlow's EventsWriter does.
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
#include "absl/time/time.h"

namespace cohort::training {

// TFRecord framing of `data`, appended to `out`.
void AppendTfRecord(absl::string_view data, std::string* out);

class EventFileWriter {
 public:
  // Creates the directory when missing and a new event file in it, named
  // and versioned at `now`. FailedPrecondition naming the path when either
  // cannot be made.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(
      const std::string& dir, absl::Time now);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // One Event at `step` and `wall_time`, holding a scalar per (tag,
  // value). Internal naming the file when it cannot be written.
  absl::Status AddScalars(
      int64_t step, const std::vector<std::pair<std::string, float>>& values,
      absl::Time wall_time);
  absl::Status AddSessionStart(int64_t step, absl::Time wall_time);

  // The file written now.
  std::string path() const;

 private:
  EventFileWriter(std::string dir, std::string path, std::FILE* file)
      : dir_(std::move(dir)), path_(std::move(path)), file_(file) {}
  // Writes `event` (a serialized Event), first replacing a deleted file.
  absl::Status Write(const std::string& event, absl::Time wall_time)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  mutable absl::Mutex mu_;
  std::string path_ ABSL_GUARDED_BY(mu_);
  std::FILE* file_ ABSL_GUARDED_BY(mu_);
};

// The process's writer for `dir`, created on first use (TensorFlow's
// SummaryWriterCache): the hooks that write summaries into one directory
// share one file, as TensorBoard expects of one run.
// `now` names a file created by this call. "dir" and "dir/" are one.
absl::StatusOr<std::shared_ptr<EventFileWriter>> SummaryWriterFor(
    const std::string& dir, absl::Time now);

}  // namespace cohort::training

#endif  // COHORT_TRAINING_SUMMARY_WRITER_H_
