// Leveled logging to stderr with an optional task prefix.
//
//   COHORT_LOG(INFO) << "registered " << task;
//   COHORT_CHECK(ptr != nullptr) << "why this cannot happen";
//
// Each line reads "I1122 10:31:07.123456 worker:1] message". The minimum level
// comes from SetMinLogLevel or, at start, the COHORT_LOG_LEVEL variable
// (debug|info|warning|error). COHORT_CHECK is for bugs only: it logs and
// aborts.
//
// Thread safety: all functions are thread-safe; a line is written with one
// write() so lines of concurrent threads do not interleave.
#ifndef COHORT_BASE_LOGGING_H_
#define COHORT_BASE_LOGGING_H_

#include <sstream>
#include <string>

#include "absl/strings/string_view.h"

namespace cohort {

enum class LogLevel {
  kDebug = 0,
  kInfo = 1,
  kWarning = 2,
  kError = 3,
  kFatal = 4
};

void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
// Parses "debug", "info", "warning" or "error"; false on anything else.
bool ParseLogLevel(absl::string_view text, LogLevel* level);

// Names this process in every log line, e.g. "worker:1". Empty removes it.
void SetLogTaskPrefix(absl::string_view prefix);

// Where log lines go; tests capture them. nullptr restores stderr.
using LogSink = void (*)(LogLevel level, const std::string& line);
void SetLogSinkForTest(LogSink sink);

namespace internal {

// Collects one log line and emits it from its destructor.
class LogMessage {
 public:
  LogMessage(const char* file, int line, LogLevel level);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Makes `cond ? (void)0 : LogMessageVoidify() & stream` type-check.
struct LogMessageVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace cohort

#define COHORT_LOG_LEVEL_DEBUG ::cohort::LogLevel::kDebug
#define COHORT_LOG_LEVEL_INFO ::cohort::LogLevel::kInfo
#define COHORT_LOG_LEVEL_WARNING ::cohort::LogLevel::kWarning
#define COHORT_LOG_LEVEL_ERROR ::cohort::LogLevel::kError
#define COHORT_LOG_LEVEL_FATAL ::cohort::LogLevel::kFatal

#define COHORT_LOG(level)                                            \
  (COHORT_LOG_LEVEL_##level < ::cohort::MinLogLevel())               \
      ? (void)0                                                      \
      : ::cohort::internal::LogMessageVoidify() &                    \
            ::cohort::internal::LogMessage(__FILE__, __LINE__,       \
                                           COHORT_LOG_LEVEL_##level) \
                .stream()

#define COHORT_CHECK(cond)                                                \
  (cond) ? (void)0                                                        \
         : ::cohort::internal::LogMessageVoidify() &                      \
               ::cohort::internal::LogMessage(__FILE__, __LINE__,         \
                                              ::cohort::LogLevel::kFatal) \
                       .stream()                                          \
                   << "Check failed: " #cond " "

#endif  // COHORT_BASE_LOGGING_H_
