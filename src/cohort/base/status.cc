#include "cohort/base/status.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cohort {

// Payloads are copied because callers branch on them (which task failed,
// which barrier); context added on the way up must not lose them.
absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  absl::Status annotated(status.code(),
                         absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    annotated.SetPayload(url, payload);
  });
  return annotated;
}

namespace {
// The names are API: `cohort status` prints them, also in its JSON output,
// which scripts read, so they never change.
constexpr struct {
  absl::StatusCode code;
  const char* name;
} kCodeNames[] = {
    {absl::StatusCode::kOk, "ok"},
    {absl::StatusCode::kCancelled, "cancelled"},
    {absl::StatusCode::kUnknown, "unknown"},
    {absl::StatusCode::kInvalidArgument, "invalid_argument"},
    {absl::StatusCode::kDeadlineExceeded, "deadline_exceeded"},
    {absl::StatusCode::kNotFound, "not_found"},
    {absl::StatusCode::kAlreadyExists, "already_exists"},
    {absl::StatusCode::kPermissionDenied, "permission_denied"},
    {absl::StatusCode::kResourceExhausted, "resource_exhausted"},
    {absl::StatusCode::kFailedPrecondition, "failed_precondition"},
    {absl::StatusCode::kAborted, "aborted"},
    {absl::StatusCode::kOutOfRange, "out_of_range"},
    {absl::StatusCode::kUnimplemented, "unimplemented"},
    {absl::StatusCode::kInternal, "internal"},
    {absl::StatusCode::kUnavailable, "unavailable"},
    {absl::StatusCode::kDataLoss, "data_loss"},
    {absl::StatusCode::kUnauthenticated, "unauthenticated"},
};
}  // namespace

std::string SanitizeForDisplay(absl::string_view text, size_t max_bytes,
                               bool keep_newlines) {
  const absl::string_view kept = text.substr(0, max_bytes);
  std::string out;
  out.reserve(kept.size());
  for (char ch : kept) {
    const unsigned char c = static_cast<unsigned char>(ch);
    // Control bytes from a peer could rewrite a terminal or forge log lines;
    // they are shown escaped instead.
    const bool kept = c == '\t' || (c == '\n' && keep_newlines);
    if ((c < 0x20 && !kept) || c == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out.push_back(ch);
    }
  }
  if (text.size() > max_bytes) {
    absl::StrAppend(&out, "... (", text.size() - max_bytes,
                    " more bytes not shown)");
  }
  return out;
}

const char* StatusCodeName(absl::StatusCode code) {
  for (const auto& entry : kCodeNames) {
    if (entry.code == code) return entry.name;
  }
  return "unknown";
}

bool StatusCodeFromName(absl::string_view name, absl::StatusCode* code) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (const auto& entry : kCodeNames) {
    if (lower == entry.name) {
      *code = entry.code;
      return true;
    }
  }
  return false;
}

}  // namespace cohort
