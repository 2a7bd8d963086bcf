#include "cohort/launch/launch_support.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "cohort/barrier/barrier_control_plane.h"
#include "cohort/base/status.h"
#include "cohort/launch/job_plan.h"

namespace cohort::launch {
namespace {

absl::Status MakeDirs(const std::string& path) {
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      const std::string partial = path.substr(0, i);
      if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::FailedPreconditionError(
            absl::StrCat("cannot create log directory ", partial, ": ",
                         strerror(errno), "; check --log-dir"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> PrepareLogDir(const std::string& log_dir) {
  if (!log_dir.empty()) {
    if (absl::Status s = MakeDirs(log_dir); !s.ok()) return s;
    return log_dir;
  }
  const char* tmp = getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp",
                                   "/cohort-launch-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create a log directory from ", templ, ": ",
                     strerror(errno), "; pass --log-dir"));
  }
  return templ;
}

absl::Status WritePrivateFile(const std::string& path,
                              const std::string& contents) {
  unlink(path.c_str());  // a reused --log-dir: never write through a link
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create ", path, ": ", strerror(errno), "; check --log-dir"));
  }
  const bool ok = write(fd, contents.data(), contents.size()) ==
                  static_cast<ssize_t>(contents.size());
  close(fd);
  if (!ok) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

std::function<void(const std::string&)> LineWriter(FILE* file) {
  return [file](const std::string& line) {
    const std::string l = line + "\n";
    fwrite(l.data(), 1, l.size(), file);
    fflush(file);
  };
}

std::string FormatWallTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%E3S UTC", t, absl::UTCTimeZone());
}

std::vector<std::string> FailureSummaryLines(int attempt,
                                             const FailureRecord& r,
                                             const std::string& barrier,
                                             int stopped_others) {
  std::vector<std::string> lines;
  // A task failed from outside (its launcher lost) has no start time or
  // output lines here.
  lines.push_back(absl::StrCat(
      "attempt ", attempt, " failed: task ", r.task, " (", r.where, ") ",
      r.reason, " at ", FormatWallTime(r.when),
      r.after_start > absl::ZeroDuration()
          ? absl::StrCat(", ",
                         absl::FormatDuration(
                             absl::Trunc(r.after_start, absl::Milliseconds(1))),
                         " after it started")
          : ""));
  if (!barrier.empty()) lines.push_back(barrier);
  lines.push_back(r.tail.empty()
                      ? absl::StrCat("no output lines of it here; "
                                     "see ",
                                     r.log_path)
                      : absl::StrCat("last ", r.tail.size(), " line(s) of ",
                                     r.log_path, ":"));
  for (const std::string& l : r.tail) lines.push_back("  | " + l);
  lines.push_back(absl::StrCat("stopped ", stopped_others,
                               " other task(s) of attempt ", attempt));
  return lines;
}

absl::StatusOr<std::unique_ptr<coord::CoordinationServer>> StartJobControlPlane(
    Env* env, const std::string& address,
    const rpc::TransportSecurity& security, absl::Duration heartbeat_timeout,
    const std::vector<TaskSpec>& tasks,
    std::shared_ptr<barrier::BarrierCoordinator> coordinator,
    bool tasks_restart_alone) {
  coord::CoordinationServerOptions co;
  co.address = address;
  co.security = security;
  co.service.env = env;
  co.service.heartbeat_timeout = heartbeat_timeout;
  for (const TaskSpec& t : tasks) {
    ++co.service.jobs[t.job];
    if (tasks_restart_alone) co.service.recoverable_jobs.insert(t.job);
  }
  co.service.allow_new_incarnation_to_reconnect = tasks_restart_alone;
  COHORT_RETURN_IF_ERROR(barrier::ServeBarriers(std::move(coordinator), co));
  return coord::CoordinationServer::Start(std::move(co));
}

std::function<void(const FailureRecord&)> GangFailureHook(
    barrier::BarrierCoordinator* coordinator, int attempt,
    std::string* barrier_failure) {
  return [=](const FailureRecord& failure) {
    std::optional<barrier::GangSnapshot> gang =
        coordinator->Snapshot(kStageId, attempt);
    if (gang.has_value() && !gang->failure.ok()) {
      *barrier_failure = absl::StrCat("barrier: ", gang->failure.message());
    }
    coordinator->ClearStage(
        kStageId, attempt,
        failure.interrupted
            ? std::string("the launcher was interrupted")
            : absl::StrCat("task ", failure.task, " ", failure.reason));
  };
}

namespace {

std::vector<std::string> TaskNames(const std::vector<TaskSpec>& tasks) {
  std::vector<std::string> names;
  for (const TaskSpec& t : tasks) names.push_back(t.Name());
  return names;
}

}  // namespace

absl::Status WriteFirstGeneration(const coord::ElasticStore& store,
                                  const std::vector<TaskSpec>& tasks) {
  return coord::WriteInitialMembership(store, TaskNames(tasks));
}

void PlanElastic(coord::ElasticRange range, absl::Duration wait,
                 coord::ElasticStore store, bool enforce_minimum,
                 const std::vector<TaskSpec>& tasks,
                 std::vector<std::string>& extra_env, AttemptPlan& plan) {
  extra_env.push_back(
      absl::StrCat(coord::kEnvElastic, "=", range.min, ":", range.max));
  extra_env.push_back(
      absl::StrCat(coord::kEnvElasticWait, "=", absl::FormatDuration(wait)));
  plan.elastic.min = range.min;
  plan.elastic.wait = wait;
  plan.elastic.lose = [store](const std::string& task) {
    return coord::ChangeMembership(store,
                                   [&task](std::vector<std::string> members) {
                                     return coord::WithoutMember(members, task);
                                   });
  };
  plan.elastic.read = [store](int64_t generation) {
    return coord::ReadMembership(store, generation);
  };
  plan.elastic.enforce_minimum = enforce_minimum;
  if (enforce_minimum) plan.elastic.tasks = TaskNames(tasks);
}

}  // namespace cohort::launch
