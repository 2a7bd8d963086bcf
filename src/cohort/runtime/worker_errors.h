// The worker's errors (docs/runtime.md): one builder
// per kind, and the payloads a master branches on instead of message text.
//
// Payloads (absl::Status payload URLs; they cross gRPC through
// rpc/status_conversion.h):
//  - kWorkerPossiblyRestartedPayload: on Aborted "Session handle is not
//    found"; the value is the worker's task name. A master that sees it
//    knows the worker lost its state (restart, incarnation GC) and that the
//    session must be recreated (TF kWorkerPossiblyRestarted).
//  - kDerivedErrorPayload: the error is a consequence of another one (a
//    step cancelled because a sibling partition failed, a rendezvous
//    cleaned up). A master reporting a step's error picks a status without
//    it when there is one (TF DerivedStatus).
//
// Thread safety: pure functions.
#ifndef COHORT_RUNTIME_WORKER_ERRORS_H_
#define COHORT_RUNTIME_WORKER_ERRORS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cohort::runtime {

inline constexpr char kWorkerPossiblyRestartedPayload[] =
    "type.googleapis.com/cohort.runtime.WorkerPossiblyRestarted";
inline constexpr char kDerivedErrorPayload[] =
    "type.googleapis.com/cohort.runtime.DerivedStatus";

// Aborted `Session handle is not found: <h>. Possibly this worker
// ("<task>") just restarted.` with kWorkerPossiblyRestartedPayload.
absl::Status SessionNotFoundError(absl::string_view session_handle,
                                  absl::string_view task);
// Aborted `Graph handle is not found: <g>` (RunGraph) or, for
// DeregisterGraph, the same followed by `. Possibly, this worker just
// restarted.` (TF's two wordings).
absl::Status GraphNotFoundError(absl::string_view graph_handle);
absl::Status DeregisterGraphNotFoundError(absl::string_view graph_handle);
// Unavailable `server <task> is stopping`.
absl::Status StoppingError(absl::string_view task);
// Aborted `RecvTensor expects a different device incarnation: <key's> vs.
// <device's>. Your worker job was probably restarted. Check your worker job
// for the reason why it was restarted.`
absl::Status IncarnationMismatchError(uint64_t key_incarnation,
                                      uint64_t device_incarnation);
// Aborted `Cleanup <step_id>`, derived.
absl::Status CleanupError(int64_t step_id);

bool IsWorkerPossiblyRestarted(const absl::Status& status);
bool IsDerivedError(const absl::Status& status);
// `status` with kDerivedErrorPayload set (OK stays OK).
absl::Status MarkDerived(absl::Status status);

// Names the task in a partition's error: "node 'x' (op Y): msg" (the
// executor's prefix, graph/op_registry.h AttachNodeName) becomes
// "node 'x' (op Y) on <task>: msg"; any other message gets "<task>: ".
// Code and payloads are kept.
absl::Status AttachTaskName(const absl::Status& status, absl::string_view task);

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_WORKER_ERRORS_H_
