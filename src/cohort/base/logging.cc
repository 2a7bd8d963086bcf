#include "cohort/base/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cohort/base/status.h"

namespace cohort {
namespace {

LogLevel InitialLevel() {
  LogLevel level = LogLevel::kInfo;
  if (const char* env = std::getenv("COHORT_LOG_LEVEL"))
    ParseLogLevel(env, &level);
  return level;
}

std::atomic<int>& MinLevel() {
  static std::atomic<int> level(static_cast<int>(InitialLevel()));
  return level;
}

absl::Mutex prefix_mu(absl::kConstInit);
std::string& Prefix() ABSL_EXCLUSIVE_LOCKS_REQUIRED(prefix_mu) {
  static std::string* const prefix = new std::string;  // never destroyed
  return *prefix;
}

std::atomic<LogSink> sink{nullptr};

constexpr char kLevelLetters[] = "DIWEF";

}  // namespace

void SetMinLogLevel(LogLevel level) {
  MinLevel().store(static_cast<int>(level));
}

LogLevel MinLogLevel() { return static_cast<LogLevel>(MinLevel().load()); }

bool ParseLogLevel(absl::string_view text, LogLevel* level) {
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "debug")
    *level = LogLevel::kDebug;
  else if (lower == "info")
    *level = LogLevel::kInfo;
  else if (lower == "warning" || lower == "warn")
    *level = LogLevel::kWarning;
  else if (lower == "error")
    *level = LogLevel::kError;
  else
    return false;
  return true;
}

void SetLogTaskPrefix(absl::string_view prefix) {
  absl::MutexLock lock(&prefix_mu);
  Prefix() = std::string(prefix);
}

void SetLogSinkForTest(LogSink s) { sink.store(s); }

namespace internal {

// Longer log lines are cut (a line quoting a whole request is not useful).
constexpr size_t kMaxLogLineBytes = 64 << 10;

LogMessage::LogMessage(const char* file, int line, LogLevel level)
    : level_(level) {
  stream_ << kLevelLetters[static_cast<int>(level)]
          << absl::FormatTime("%m%d %H:%M:%E6S", absl::Now(),
                              absl::LocalTimeZone());
  std::string prefix;
  {
    absl::MutexLock lock(&prefix_mu);
    prefix = Prefix();
  }
  if (!prefix.empty()) stream_ << ' ' << prefix;
  if (level >= LogLevel::kWarning) {
    const char* base = std::strrchr(file, '/');
    stream_ << ' ' << (base ? base + 1 : file) << ':' << line;
  }
  stream_ << "] ";
}

LogMessage::~LogMessage() {
  // A message may quote what a peer sent: escaped, it cannot drive the
  // terminal. Newlines stay (a message of our own may span lines); peer
  // messages reach here with theirs escaped (rpc/status_conversion.h).
  const std::string text = SanitizeForDisplay(stream_.str(), kMaxLogLineBytes,
                                              /*keep_newlines=*/true) +
                           "\n";
  if (LogSink s = sink.load()) {
    s(level_, text);
  } else {
    // One write per line keeps concurrent lines whole.
    ssize_t ignored = ::write(STDERR_FILENO, text.data(), text.size());
    (void)ignored;
  }
  if (level_ == LogLevel::kFatal) std::abort();
}

}  // namespace internal
}  // namespace cohort
