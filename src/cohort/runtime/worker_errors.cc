#include "cohort/runtime/worker_errors.h"

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"

namespace cohort::runtime {

absl::Status SessionNotFoundError(absl::string_view session_handle,
                                  absl::string_view task) {
  absl::Status s = absl::AbortedError(
      absl::StrCat("Session handle is not found: ", session_handle,
                   ". Possibly this worker (\"", task, "\") just restarted."));
  s.SetPayload(kWorkerPossiblyRestartedPayload, absl::Cord(task));
  return s;
}

absl::Status GraphNotFoundError(absl::string_view graph_handle) {
  return absl::AbortedError(
      absl::StrCat("Graph handle is not found: ", graph_handle));
}

absl::Status DeregisterGraphNotFoundError(absl::string_view graph_handle) {
  return absl::AbortedError(
      absl::StrCat("Graph handle is not found: ", graph_handle,
                   ". Possibly, this worker just "
                   "restarted."));
}

absl::Status StoppingError(absl::string_view task) {
  return absl::UnavailableError(absl::StrCat("server ", task, " is stopping"));
}

absl::Status IncarnationMismatchError(uint64_t key_incarnation,
                                      uint64_t device_incarnation) {
  return absl::AbortedError(absl::StrCat(
      "RecvTensor expects a different device incarnation: ", key_incarnation,
      " vs. ", device_incarnation,
      ". Your worker job was probably restarted. Check your worker job for "
      "the reason why it was restarted."));
}

absl::Status CleanupError(int64_t step_id) {
  return MarkDerived(absl::AbortedError(absl::StrCat("Cleanup ", step_id)));
}

bool IsWorkerPossiblyRestarted(const absl::Status& status) {
  return status.GetPayload(kWorkerPossiblyRestartedPayload).has_value();
}

bool IsDerivedError(const absl::Status& status) {
  return status.GetPayload(kDerivedErrorPayload).has_value();
}

absl::Status MarkDerived(absl::Status status) {
  if (!status.ok()) status.SetPayload(kDerivedErrorPayload, absl::Cord());
  return status;
}

absl::Status AttachTaskName(const absl::Status& status,
                            absl::string_view task) {
  if (status.ok()) return status;
  // The executor names the failing node with a fixed prefix; the task goes
  // inside it so the message reads like the reference's
  // "node 'x' (op Y) on /job:J/replica:0/task:T: ...". This formats text; no
  // decision is taken on it.
  absl::string_view msg = status.message();
  const size_t end = msg.find("): ");
  if (absl::StartsWith(msg, "node '") && end != absl::string_view::npos) {
    absl::Status out(status.code(), absl::StrCat(msg.substr(0, end + 1), " on ",
                                                 task, msg.substr(end + 1)));
    status.ForEachPayload([&](absl::string_view url, const absl::Cord& p) {
      out.SetPayload(url, p);
    });
    return out;
  }
  return Annotate(status, task);
}

}  // namespace cohort::runtime
