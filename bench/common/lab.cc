#include "bench/common/lab.h"

#include <unistd.h>

#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/common/peer.h"
#include "cohort/base/subprocess.h"

namespace cohort::bench {
namespace {

// The last `n` bytes of `text`, for error messages.
std::string Tail(const std::string& text, size_t n = 2000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

}  // namespace

Lab::Lab(std::string script) : script_(std::move(script)) {
  if (script_.empty()) script_ = FindRepoFile("scripts/lab.sh");
}

Lab::~Lab() { Down(); }

absl::Status Lab::Up(int n, const std::string& rate) {
  RunProgramOptions o;
  o.deadline = absl::Minutes(1);
  ProgramRun check = RunProgram({"bash", script_, "check"}, o);
  if (!check.status.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the multi-host lab cannot run here (", script_,
                     "): ", Tail(check.output, 400),
                     "; run as root where network namespaces "
                     "can be made (docs/lab.md)"));
  }
  ProgramRun up =
      RunProgram({"bash", script_, "up", std::to_string(n), "--rate", rate}, o);
  if (!up.status.ok()) {
    Down();
    return absl::InternalError(absl::StrCat("`lab.sh up ", n, " --rate ", rate,
                                            "` failed: ", up.status.message()));
  }
  up_ = true;
  return absl::OkStatus();
}

void Lab::Down() {
  if (!up_) return;
  RunProgramOptions o;
  o.deadline = absl::Minutes(1);
  RunProgram({"bash", script_, "down"}, o);
  up_ = false;
}

std::vector<std::string> Lab::ExecPrefix(int host) {
  return {"ip", "netns", "exec", absl::StrCat("cohort-h", host)};
}

std::string Lab::Address(int host) {
  return absl::StrCat("10.77.0.", host + 1);
}

absl::StatusOr<double> Lab::RateBitsPerSecond(const std::string& rate) {
  static const std::pair<const char*, double> kUnits[] = {
      {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}};
  for (const auto& [suffix, scale] : kUnits) {
    const size_t len = std::string(suffix).size();
    if (rate.size() > len &&
        rate.compare(rate.size() - len, len, suffix) == 0) {
      double v = 0;
      if (absl::SimpleAtod(rate.substr(0, rate.size() - len), &v) && v > 0) {
        return v * scale;
      }
      break;
    }
  }
  double v = 0;
  if (absl::SimpleAtod(rate, &v) && v > 0) return v;
  return absl::InvalidArgumentError(absl::StrCat(
      "--rate '", rate, "' is not a rate such as 5gbit, 800mbit or 100kbit"));
}

absl::StatusOr<std::vector<std::string>> Lab::RunOnHosts(
    const std::vector<std::vector<std::string>>& argv,
    absl::Duration deadline) {
  std::vector<ProgramRun> runs(argv.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < argv.size(); ++i) {
    threads.emplace_back([&, i] {
      std::vector<std::string> cmd = {"bash", script_, "exec",
                                      absl::StrCat("h", i), "--"};
      cmd.insert(cmd.end(), argv[i].begin(), argv[i].end());
      RunProgramOptions o;
      o.deadline = deadline;
      runs[i] = RunProgram(cmd, o);
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::string> outputs;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!runs[i].status.ok()) {
      return absl::InternalError(absl::StrCat("lab host h", i, " (", Address(i),
                                              "): ", runs[i].status.message()));
    }
    outputs.push_back(std::move(runs[i].output));
  }
  return outputs;
}

}  // namespace cohort::bench
