// Reading and checking the job token where a user hands it in: a token
// file, COHORT_JOB_TOKEN, --token. Servers and clients take whatever token
// they are given (tests use short ones); the command-line tools and the
// launcher check it here first.
//
// Thread safety: thread-safe (no state).
#ifndef COHORT_RPC_JOB_TOKEN_H_
#define COHORT_RPC_JOB_TOKEN_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cohort::rpc {

// Shorter tokens can be guessed or brute-forced offline from a captured
// framed handshake. `cohort launch` makes 64 hex digits.
inline constexpr size_t kMinJobTokenChars = 16;
// A token file's first line may be at most this long (the file is read no
// further).
inline constexpr size_t kMaxJobTokenFileBytes = 4096;

// OK for a token of at least kMinJobTokenChars printable characters, no
// spaces. InvalidArgument naming `where` (e.g. "--token-file /x") otherwise,
// with how to make a good one; the message never contains the token.
absl::Status CheckJobTokenStrength(absl::string_view token,
                                   absl::string_view where);

// The first line of `path`, a regular file (not a symbolic link) owned by
// this user that no one else may read or write, checked as above.
// FailedPrecondition when it cannot be opened, PermissionDenied for another
// owner or a group/other mode bit (naming the mode and the chmod to run),
// InvalidArgument for anything but a regular file, an empty or too long
// first line or a weak token. Every message names the path.
absl::StatusOr<std::string> ReadJobTokenFile(const std::string& path);

// A value derived from the job token for one `purpose` (hex of
// HMAC-SHA256(token, purpose)): it proves knowledge of the token, or names
// the job, without revealing the token. Different purposes give unrelated
// values.
std::string DeriveFromToken(absl::string_view token, absl::string_view purpose);

}  // namespace cohort::rpc

#endif  // COHORT_RPC_JOB_TOKEN_H_
