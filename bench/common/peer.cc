#include "bench/common/peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cohort/base/subprocess.h"

#ifndef COHORT_BENCH_SOURCE_DIR
#define COHORT_BENCH_SOURCE_DIR "."
#endif

namespace cohort::bench {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

bool IsMeasurement(const Json& line) {
  return line.is_object() && !line.contains("error") &&
         line.contains("metric") && line.contains("value") &&
         line["value"].is_number();
}

// `params` contains every entry of `want`.
bool Contains(const Json& params, const Json& want) {
  if (!want.is_object()) return true;
  if (!params.is_object()) return want.empty();
  for (auto it = want.begin(); it != want.end(); ++it) {
    auto found = params.find(it.key());
    if (found == params.end() || *found != it.value()) return false;
  }
  return true;
}

std::string ShellQuote(const std::string& s) {
  return "'" + absl::StrReplaceAll(s, {{"'", "'\\''"}}) + "'";
}

}  // namespace

void PrintJsonLine(const Json& line) {
  std::cout << JsonDump(line) << std::endl;
}

void PrintErrorLine(const std::string& suite, const std::string& message,
                    const Json& extra) {
  Json line = {{"suite", suite}, {"error", message}};
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      line[it.key()] = it.value();
    }
  }
  PrintJsonLine(line);
}

void PrintEnvLine(const std::string& bench, const std::string& when) {
  Json line = {{"suite", "env"}, {"bench", bench}, {"when", when}};
  char date[64];
  const time_t now = time(nullptr);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
  line["date"] = date;
  line["nproc"] = sysconf(_SC_NPROCESSORS_ONLN);
  double load[3];
  if (getloadavg(load, 3) == 3) {
    line["loadavg"] = {Round3(load[0]), Round3(load[1]), Round3(load[2])};
  }
  // The environment switches that change what is measured, where set, so
  // that a run's lines say which side of a comparison they are.
  Json settings = Json::object();
  for (const char* name : {"COHORT_HUGE_PAGES", "COHORT_TENSOR_SAME_HOST",
                           "OPENBLAS_NUM_THREADS"}) {
    if (const char* v = std::getenv(name)) settings[name] = v;
  }
  if (!settings.empty()) line["settings"] = settings;
  PrintJsonLine(line);
}

void MeasurementLog::Print(const Json& line) {
  PrintJsonLine(line);
  Add(line);
}

void MeasurementLog::Add(const Json& line) {
  if (!IsMeasurement(line)) return;
  absl::MutexLock lock(&mu_);
  lines_.push_back(line);
}

std::vector<Json> MeasurementLog::lines() const {
  absl::MutexLock lock(&mu_);
  return lines_;
}

double MedianOf(const MeasurementLog& log, const std::string& metric,
                const Json& params, int* count) {
  std::vector<double> values;
  for (const Json& line : log.lines()) {
    if (line["metric"] != metric) continue;
    if (!Contains(line.value("params", Json::object()), params)) continue;
    values.push_back(line["value"].get<double>());
  }
  *count = static_cast<int>(values.size());
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

absl::Status PrintRatio(const std::string& suite, const std::string& peer,
                        const MeasurementLog& ours,
                        const MeasurementLog& theirs, const RatioSpec& spec) {
  Json peer_params = spec.params.is_object() ? spec.params : Json::object();
  for (auto it = spec.peer_params.begin(); it != spec.peer_params.end(); ++it) {
    peer_params[it.key()] = it.value();
  }
  Json ours_params = spec.params.is_object() ? spec.params : Json::object();
  for (auto it = spec.ours_params.begin(); it != spec.ours_params.end(); ++it) {
    ours_params[it.key()] = it.value();
  }
  int n_ours = 0, n_theirs = 0;
  const double a = MedianOf(ours, spec.metric, ours_params, &n_ours);
  const double b = MedianOf(theirs, spec.peer_metric, peer_params, &n_theirs);
  if (n_ours == 0 || n_theirs == 0 || b == 0) {
    return absl::NotFoundError(absl::StrCat(
        "no ", n_ours == 0 ? "cohort" : peer, " measurement of ",
        n_ours == 0 ? spec.metric : spec.peer_metric, " with params ",
        JsonDump(n_ours == 0 ? ours_params : peer_params),
        n_ours != 0 && n_theirs != 0 ? " (the peer's median is 0)" : ""));
  }
  Json params = ours_params;
  params["peer"] = peer;
  params["peer_metric"] = spec.peer_metric;
  for (auto it = spec.peer_params.begin(); it != spec.peer_params.end(); ++it) {
    params["peer_" + it.key()] = it.value();
  }
  Json line = {{"suite", suite},
               {"metric", spec.metric + "_ratio"},
               {"params", params},
               {"value", Round3(a / b)},
               {"unit", "x"},
               {"cohort", Round3(a)},
               {"peer_value", Round3(b)},
               {"reps", std::min(n_ours, n_theirs)},
               {"better", spec.lower_is_better ? "lower" : "higher"}};
  if (!spec.note.empty()) line["note"] = spec.note;
  PrintJsonLine(line);
  return absl::OkStatus();
}

std::string FindRepoFile(const std::string& relative) {
  // The source tree first: a build directory may sit anywhere. Then above
  // the binary (build/bin/cohort -> build/bin/../../) for a tree that moved
  // after it was built, then the working directory.
  std::vector<std::string> candidates = {
      absl::StrCat(COHORT_BENCH_SOURCE_DIR, "/", relative)};
  if (const std::string exe = ExecutablePath(); !exe.empty()) {
    const std::string bin = exe.substr(0, exe.rfind('/') + 1);
    candidates.push_back(bin + "../" + relative);
    candidates.push_back(bin + "../../" + relative);
  }
  candidates.push_back(relative);
  for (const std::string& c : candidates) {
    if (access(c.c_str(), R_OK) == 0) return c;
  }
  return candidates.front();
}

PeerRunner::PeerRunner(std::string suite, std::string script, std::string path)
    : suite_(std::move(suite)), script_(std::move(script)) {
  if (!path.empty()) {
    path_ = std::move(path);
    return;
  }
  const std::string found = FindRepoFile("bench/peers/" + script_);
  if (access(found.c_str(), R_OK) == 0) path_ = found;
}

bool PeerRunner::Use(bool wanted, int* rc) {
  if (!wanted) return false;
  absl::Status s = Check();
  if (s.ok()) return true;
  PrintErrorLine(suite_, std::string(s.message()));
  *rc = 1;
  return false;
}

absl::Status PeerRunner::Check() {
  if (path_.empty() || access(path_.c_str(), R_OK) != 0) {
    return absl::NotFoundError(absl::StrCat(
        "peer script not found (", path_.empty() ? script_ : path_,
        " is not readable; looked in bench/peers of the source tree ",
        COHORT_BENCH_SOURCE_DIR,
        ", beside this binary and under the working directory); pass "
        "--peer-script PATH, or --no-peer to run without the peer"));
  }
  RunProgramOptions probe;
  probe.stderr_to = Subprocess::Stderr::kDiscard;
  probe.deadline = absl::Minutes(1);  // importing torch takes seconds
  if (!RunProgram({kPython, "-c", "import torch.distributed"}, probe)
           .status.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("torch is not installed for ", kPython,
                     " (apt-get install python3-torch), so the ", suite_,
                     " peer cannot run; pass --no-peer to run without it"));
  }
  return absl::OkStatus();
}

absl::Status PeerRunner::Run(const std::vector<std::string>& args,
                             absl::Duration timeout, int rep,
                             MeasurementLog* log) {
  char stderr_path[] = "/tmp/cohort-bench-peer-XXXXXX";
  const int stderr_fd = mkstemp(stderr_path);
  if (stderr_fd < 0) {
    return absl::InternalError("cannot create a temporary file for stderr");
  }
  close(stderr_fd);
  // stdout carries the measurements and stderr the diagnostics, read apart:
  // the explicit shell only sends stderr to the file.
  std::vector<std::string> argv = {
      "/bin/sh", "-c",
      absl::StrCat("exec \"$0\" \"$@\" 2>", ShellQuote(stderr_path)), kPython,
      path_};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string shown =
      absl::StrCat(script_, " ", absl::StrJoin(args, " "));
  const int64_t seconds = std::max<int64_t>(
      1, absl::ToInt64Seconds(absl::Ceil(timeout, absl::Seconds(1))));
  RunProgramOptions options;
  options.deadline = absl::Seconds(seconds);
  ProgramRun run = RunProgram(argv, options);
  if (!run.exit.has_value() &&
      run.status.code() != absl::StatusCode::kDeadlineExceeded) {
    unlink(stderr_path);
    return run.status;  // it did not start: names the command
  }
  int measurements = 0;
  std::vector<std::string> errors;
  auto handle_line = [&](const std::string& text, bool from_stderr) {
    if (text.empty() || text[0] != '{') return;
    absl::StatusOr<Json> line = ParseJson(text, shown);
    if (!line.ok() || !line->is_object()) return;
    if (line->contains("error")) {
      (*line)["suite"] = line->value("suite", suite_);
      (*line)["rep"] = rep;
      errors.push_back(JsonDump((*line)["error"]));
      PrintJsonLine(*line);
      return;
    }
    if (from_stderr) return;
    (*line)["rep"] = rep;
    if (!IsMeasurement(*line)) return;
    ++measurements;
    if (keep_ && !keep_(*line)) return;
    log->Print(*line);
  };
  for (absl::string_view text : absl::StrSplit(run.output, '\n')) {
    handle_line(std::string(absl::StripSuffix(text, "\r")), false);
  }
  std::vector<std::string> tail;
  {
    std::ifstream err(stderr_path);
    std::string text;
    while (std::getline(err, text)) {
      handle_line(text, true);
      if (text.empty()) continue;
      tail.push_back(text);
      if (tail.size() > 5) tail.erase(tail.begin());
    }
  }
  unlink(stderr_path);
  const int code = run.exit.has_value() ? run.exit->ShellCode() : -1;
  std::string why;
  const bool timed_out = !run.exit.has_value();
  if (timed_out) {
    why = absl::StrCat("timed out after ", seconds, " s");
  } else if (code != 0) {
    why = absl::StrCat("exited with status ", code);
  } else if (!errors.empty()) {
    why = absl::StrCat("reported ", errors.size(), " error(s), first ",
                       errors.front());
  } else if (measurements == 0) {
    why = "printed no measurement";
  } else {
    return absl::OkStatus();
  }
  std::string message = absl::StrCat(
      "peer ", shown, " ", why,
      tail.empty() ? "" : "; stderr ends: " + absl::StrJoin(tail, " | "));
  return timed_out ? absl::DeadlineExceededError(message)
                   : absl::InternalError(message);
}

double Round3(double v) { return std::round(v * 1000.0) / 1000.0; }

double Percentile(std::vector<double> xs, double p) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end());
  const long k = std::lround(p / 100.0 * static_cast<double>(xs.size() - 1));
  return xs[std::min<size_t>(xs.size() - 1,
                             static_cast<size_t>(std::max(0L, k)))];
}

}  // namespace cohort::bench
