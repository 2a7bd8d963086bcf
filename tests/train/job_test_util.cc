#include "tests/train/job_test_util.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace cohort::testing {

// The number after `key` in `line` ("global_step 420 ..."), if any.
std::string HoldFirstRestart(const std::string& dir, const std::string& task) {
  return absl::StrCat(
      "if [ \"$COHORT_TASK_NAME\" = ", task,
      " ] && [ \"$COHORT_TASK_RESTART\" = 1 ]; then echo held down; i=0; "
      "while [ ! -e ",
      dir, "/go ]; do i=$((i+1)); [ $i -gt 2400 ] && exit 7; sleep 0.05; ",
      "done; fi; exec \"$0\" \"$@\"");
}

std::optional<double> FigureAfter(const std::string& line,
                                  const std::string& key) {
  const size_t at = line.find(key + " ");
  if (at == std::string::npos) return std::nullopt;
  std::vector<std::string> rest =
      absl::StrSplit(line.substr(at + key.size() + 1), absl::ByAnyChar(" ):/"));
  double v;
  if (rest.empty() || !absl::SimpleAtod(rest[0], &v)) return std::nullopt;
  return v;
}

// Reads `p`'s lines until one contains `needle` and its figure after `key`
// is at least `at_least`; "" on the deadline.
std::string WaitForFigure(TestProcess* p, const std::string& needle,
                          const std::string& key, double at_least,
                          absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::string line = p->WaitForLine(needle, deadline - absl::Now());
    if (line.empty()) return "";
    std::optional<double> v = FigureAfter(line, key);
    if (v.has_value() && *v >= at_least) return line;
  }
  return "";
}

int ExitCode(TestProcess* p, absl::Duration timeout) {
  const int status = p->Wait(timeout);
  return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Reads every remaining line (until the process closes stdout).
void Drain(TestProcess* p, absl::Duration timeout) {
  p->WaitForLine("\x01never\x01", timeout);
}

std::string LineWith(TestProcess* p, const std::string& needle) {
  for (const std::string& line : p->lines()) {
    if (absl::StrContains(line, needle)) return line;
  }
  return "";
}

// The pid of the launched task `task` ("ps:0"): a process whose
// environment has COHORT_TASK_NAME=<task> and whose parent is `launcher`.
std::optional<pid_t> TaskPid(pid_t launcher, const std::string& task) {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return std::nullopt;
  std::optional<pid_t> found;
  for (dirent* e; (e = readdir(proc)) != nullptr && !found.has_value();) {
    int pid;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string stat_line;
    std::getline(stat, stat_line);
    // "pid (comm) state ppid ...": the fields after the last ')'.
    const size_t close = stat_line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat_line.substr(close + 1));
    std::string state;
    int ppid = 0;
    fields >> state >> ppid;
    if (ppid != launcher) continue;
    std::ifstream environ_file(absl::StrCat("/proc/", pid, "/environ"));
    std::stringstream contents;
    contents << environ_file.rdbuf();
    for (absl::string_view var : absl::StrSplit(contents.str(), '\0')) {
      if (var == "COHORT_TASK_NAME=" + task) found = pid;
    }
  }
  closedir(proc);
  return found;
}

}  // namespace cohort::testing
