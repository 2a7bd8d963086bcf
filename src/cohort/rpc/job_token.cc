#include "cohort/rpc/job_token.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cohort::rpc {

absl::Status CheckJobTokenStrength(absl::string_view token,
                                   absl::string_view where) {
  const char* const advice =
      "; use a random one, e.g. `openssl rand -hex 32` (cohort launch makes "
      "one per job)";
  if (token.size() < kMinJobTokenChars) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the job token has ", token.size(),
                     " characters, fewer than ", kMinJobTokenChars, advice));
  }
  for (char c : token) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the job token holds a space or a non-printable character",
          advice));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadJobTokenFile(const std::string& path) {
  const std::string where = absl::StrCat("token file ", path);
  // One descriptor for every check and the read, never through a link: the
  // file cannot be swapped between the check and the read.
  // O_NONBLOCK: a FIFO would block open() before the type check could
  // refuse it (a regular file reads the same either way).
  const int fd =
      open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open ", where, ": ", strerror(err),
        err == ELOOP ? " (a symbolic link; give the file itself)" : ""));
  }
  struct stat st {};
  std::string text;
  absl::Status problem;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problem = absl::InvalidArgumentError(
        absl::StrCat(where, " is not a regular file"));
  } else if (st.st_uid != geteuid()) {
    problem = absl::PermissionDeniedError(absl::StrCat(
        where, " is owned by uid ", st.st_uid, ", not by this user (uid ",
        geteuid(), "); the job token must be the user's own file"));
  } else if ((st.st_mode & 077) != 0) {
    problem = absl::PermissionDeniedError(
        absl::StrCat(where, " is readable or writable by others (mode ",
                     absl::StrFormat("%04o", st.st_mode & 07777),
                     "); the job token must be private: chmod 600 ", path));
  } else {
    // One byte past the cap tells a file that is too long from one that
    // just fits.
    char buf[kMaxJobTokenFileBytes + 1];
    while (text.size() <= kMaxJobTokenFileBytes) {
      const ssize_t got = read(fd, buf, sizeof(buf) - text.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        problem = absl::FailedPreconditionError(
            absl::StrCat("cannot read ", where, ": ", strerror(errno)));
        break;
      }
      if (got == 0) break;
      text.append(buf, static_cast<size_t>(got));
    }
  }
  close(fd);
  if (!problem.ok()) return problem;
  if (text.find('\n') > kMaxJobTokenFileBytes &&
      text.size() > kMaxJobTokenFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, " has a first line of more than ", kMaxJobTokenFileBytes,
        " bytes; expected the job token on its first line"));
  }
  std::string line = std::string(
      absl::StripTrailingAsciiWhitespace(text.substr(0, text.find('\n'))));
  if (line.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     " is empty; expected the job token on its first "
                     "line"));
  }
  absl::Status strong = CheckJobTokenStrength(line, where);
  if (!strong.ok()) return strong;
  return line;
}

std::string DeriveFromToken(absl::string_view token,
                            absl::string_view purpose) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(purpose.data()), purpose.size(),
       mac, &len);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(mac), len));
}

}  // namespace cohort::rpc
