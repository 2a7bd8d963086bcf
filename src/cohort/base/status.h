// Status helpers shared by every cohort module.
//
// cohort reports failure with absl::Status / absl::StatusOr, never exceptions.
// Codes are API (see docs/architecture.md): Unavailable = retry this call,
// Aborted = restart at a higher level, FailedPrecondition = fix state first,
// DeadlineExceeded = timeout, Cancelled = explicit cancel, InvalidArgument =
// bad input. Messages say what happened, to which task/key/barrier/node, and
// what to check.
#ifndef COHORT_BASE_STATUS_H_
#define COHORT_BASE_STATUS_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cohort {

// Returns `status` with `context` prepended to its message ("context: msg"),
// keeping the code and payloads. OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

// Lower-case name of a status code as used in JSON and the CLI
// ("invalid_argument"); the inverse of StatusCodeFromName.
// `text` made safe to print and send: control characters other than '\t'
// (and '\n' with `keep_newlines`) become \xNN, so a peer's bytes quoted in
// an error or a log line cannot move a terminal's cursor or forge a line;
// text beyond `max_bytes` is cut, saying how much was cut.
std::string SanitizeForDisplay(absl::string_view text, size_t max_bytes,
                               bool keep_newlines = false);

const char* StatusCodeName(absl::StatusCode code);
// Parses either absl's spelling ("INVALID_ARGUMENT") or the lower-case one.
// Returns false for an unknown name.
bool StatusCodeFromName(absl::string_view name, absl::StatusCode* code);

}  // namespace cohort

#define COHORT_STATUS_CONCAT_INNER_(a, b) a##b
#define COHORT_STATUS_CONCAT_(a, b) COHORT_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// when it is not OK.
#define COHORT_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status cohort_status_ = (expr);          \
    if (!cohort_status_.ok()) return cohort_status_; \
  } while (0)

// COHORT_ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>);
// on error returns its status, otherwise moves the value into `lhs`, which may
// be a declaration (`auto x`) or an existing variable.
#define COHORT_ASSIGN_OR_RETURN(lhs, expr) \
  COHORT_ASSIGN_OR_RETURN_IMPL_(           \
      COHORT_STATUS_CONCAT_(cohort_statusor_, __LINE__), lhs, expr)

#define COHORT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // COHORT_BASE_STATUS_H_
