#include "bench/common/gang.h"

#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/env.h"
#include "cohort/base/subprocess.h"
#include "cohort/launch/launcher.h"

namespace cohort::bench {

void PrintChildResult(const Json& line) {
  std::cout << kResultTag << JsonDump(line) << std::endl;
}

std::string ProgramBesideThisBinary(const std::string& name,
                                    const std::string& flag) {
  if (!flag.empty()) return flag;
  const std::string exe = ExecutablePath();
  return exe.substr(0, exe.rfind('/') + 1) + name;
}

std::vector<std::string> SelfCommand(const std::string& suite) {
  const std::string exe = ExecutablePath();
  if (absl::EndsWith(exe, "/cohort")) return {exe, "bench", suite};
  return {exe};
}

bool RunGang(const GangRun& run, MeasurementLog* log) {
  launch::LaunchOptions options;
  options.chief = run.chief;
  options.num_workers = run.chief ? run.world - 1 : run.world;
  options.command = SelfCommand(run.suite);
  options.command.insert(options.command.end(), run.child_args.begin(),
                         run.child_args.end());
  options.extra_env = run.env;
  options.progress = false;
  options.stop_grace = absl::Seconds(2);
  absl::Mutex mu;
  std::vector<std::string> results, messages;
  const std::string tag =
      std::string(run.chief ? "[chief:0] " : "[worker:0] ") + kResultTag;
  options.output = [&](const std::string& line) {
    absl::MutexLock lock(&mu);
    if (absl::StartsWith(line, tag)) {
      results.push_back(line.substr(tag.size()));
    } else {
      messages.push_back(line);
    }
  };
  options.messages = [&](const std::string& line) {
    absl::MutexLock lock(&mu);
    messages.push_back(line);
  };
  launch::Launcher launcher(Env::Default(), options);
  absl::StatusOr<launch::LaunchResult> result = launcher.Run();
  absl::MutexLock lock(&mu);
  // Partition 0's lines are only figures when the whole gang succeeded: a
  // member that failed may have left partition 0 timing a broken run (a
  // barrier released by a dying peer, a short all-reduce), so they are kept
  // back until the launcher's verdict and dropped on failure.
  std::vector<Json> lines;
  std::string unreadable;
  for (const std::string& r : results) {
    absl::StatusOr<Json> line = ParseJson(r, "partition 0's result line");
    if (!line.ok()) {
      unreadable = std::string(line.status().message());
      continue;
    }
    lines.push_back(*std::move(line));
  }
  const bool ok =
      result.ok() && result->succeeded && !lines.empty() && unreadable.empty();
  if (ok) {
    for (Json& line : lines) {
      line["rep"] = run.rep;
      if (!run.note.empty()) line["note"] = run.note;
      log->Print(line);
    }
  } else {
    std::string why =
        !result.ok() ? std::string(result.status().message())
        : !result->succeeded
            ? absl::StrCat("the gang of ", run.world, " failed (", lines.size(),
                           " result line(s) of partition 0 dropped): ",
                           result->failure_summary)
        : !unreadable.empty()
            ? absl::StrCat("partition 0 printed an unreadable result line: ",
                           unreadable)
            : "partition 0 printed no measurement";
    if (!messages.empty()) {
      absl::StrAppend(&why, "; output: ", absl::StrJoin(messages, "\n"));
    }
    Json params = run.error_params;
    params["world"] = run.world;
    PrintErrorLine(run.suite, why, {{"params", params}, {"rep", run.rep}});
  }
  if (result.ok()) {
    std::error_code ignored;
    std::filesystem::remove_all(result->log_dir, ignored);
  }
  return ok;
}

}  // namespace cohort::bench
