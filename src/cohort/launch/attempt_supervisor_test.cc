// The attempt supervisor's rules, one at a time: the ledgers' first writer
// wins, the restart policy, and one attempt of real /bin/sh tasks under the
// supervisor (exits, a failure the service saw, a stop, a lost control
// plane, a program that cannot start). The launchers' end-to-end behaviour
// is in launcher_test.cc and cluster_launcher_test.cc.
#include "cohort/launch/attempt_supervisor.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "cohort/coord/in_process_cluster.h"
#include "cohort/launch/task_failure_watch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::launch {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Outcome = AttemptEnd::Outcome;

FailureRecord Failure(const std::string& task, int job_task, int code) {
  FailureRecord r;
  r.task = task;
  r.job_task = job_task;
  r.reason = absl::StrCat("exited with code ", code);
  r.code = code;
  return r;
}

// What the coordination service reports of a silent task, dated `when`.
FailureRecord NoHeartbeat(const std::string& task, int job_task,
                          absl::Time when = absl::Time()) {
  FailureRecord r;
  r.task = task;
  r.job_task = job_task;
  r.reason = "was failed by the coordination service: no heartbeat";
  r.when = when;
  return r;
}

// --- Ledgers --------------------------------------------------------------

// Spark #28: two failures of one attempt are one failure: the first.
TEST(LocalAttemptLedgerTest, TheFirstFailureIsTheVerdict) {
  int changes = 0;
  LocalAttemptLedger ledger(2, [&] { ++changes; });
  EXPECT_FALSE(ledger.Verdict().has_value());
  ASSERT_TRUE(ledger.RecordFailure(Failure("worker:1", 1, 3)).ok());
  ASSERT_TRUE(ledger.RecordFailure(Failure("worker:0", 0, 4)).ok());
  ASSERT_TRUE(ledger.Verdict().has_value());
  EXPECT_FALSE(ledger.Verdict()->succeeded);
  EXPECT_EQ(ledger.Verdict()->failure.task, "worker:1");
  EXPECT_EQ(ledger.Verdict()->failure.code, 3);
  EXPECT_EQ(changes, 1);
}

TEST(LocalAttemptLedgerTest, SuccessNeedsEveryTaskThatMustFinishOnce) {
  int changes = 0;
  LocalAttemptLedger ledger(2, [&] { ++changes; });
  ASSERT_TRUE(ledger.RecordDone(0).ok());
  ASSERT_TRUE(ledger.RecordDone(0).ok());  // the same task twice is once
  EXPECT_FALSE(ledger.Verdict().has_value());
  ASSERT_TRUE(ledger.RecordDone(1).ok());
  ASSERT_TRUE(ledger.Verdict().has_value());
  EXPECT_TRUE(ledger.Verdict()->succeeded);
  // A failure after the verdict (the ps stopped by it) changes nothing.
  ASSERT_TRUE(ledger.RecordFailure(Failure("ps:0", 2, 143)).ok());
  EXPECT_TRUE(ledger.Verdict()->succeeded);
  EXPECT_EQ(changes, 1);
}

TEST(FailureRecordTest, RoundTripsAndBoundsWhatItReads) {
  FailureRecord r = Failure("worker:1", 1, 3);
  r.where = "pid 12 on node-1";
  r.tail = {"a", "b", "c"};
  r.after_start = absl::Milliseconds(1500);
  FailureRecord back = FailureRecord::Decode(r.Encode(), 2, 2);
  EXPECT_EQ(back.task, "worker:1");
  EXPECT_EQ(back.job_task, 1);
  EXPECT_EQ(back.where, "pid 12 on node-1");
  EXPECT_EQ(back.code, 3);
  EXPECT_EQ(back.after_start, absl::Milliseconds(1500));
  EXPECT_THAT(back.tail, ElementsAre("a", "b"));  // at most tail_lines
  // Written by any token holder: out-of-range fields are bounded.
  FailureRecord hostile = FailureRecord::Decode(
      R"({"task":"x","job_task":99,"code":0,"tail":"no"})", 2, 10);
  EXPECT_EQ(hostile.job_task, 0);
  EXPECT_EQ(hostile.code, 1);  // a failed job never exits 0
  EXPECT_TRUE(hostile.tail.empty());
  EXPECT_THAT(FailureRecord::Decode("not json", 2, 10).reason,
              HasSubstr("unreadable"));
}

class ControlPlaneLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    coord::CoordinationServiceOptions so;
    so.jobs = {{"launcher", 2}};
    absl::StatusOr<std::unique_ptr<coord::InProcessCluster>> cluster =
        coord::InProcessCluster::Create(so);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(cluster).value();
    for (int k = 0; k < 2; ++k) {
      coord::CoordinationAgentOptions ao;
      ao.task = {"launcher", k};
      absl::StatusOr<std::unique_ptr<coord::CoordinationAgent>> agent =
          cluster_->NewAgent(ao);
      ASSERT_TRUE(agent.ok()) << agent.status();
      agents_.push_back(std::move(agent).value());
      ASSERT_TRUE(agents_.back()->Connect().ok());
    }
  }

  std::unique_ptr<ControlPlaneLedger> Ledger(int k, int must_finish) {
    ControlPlaneLedger::Options o;
    o.agent = agents_[k].get();
    o.attempt = 4;
    o.num_tasks = 2;
    o.must_finish = must_finish;
    o.changed = [this, k] {
      absl::MutexLock lock(&mu_);
      ++changes_[k];
    };
    return std::make_unique<ControlPlaneLedger>(std::move(o));
  }
  // Waits (on the ledger's own watch, no polling) for ledger k's change.
  void AwaitChange(int k) {
    absl::MutexLock lock(&mu_);
    auto changed = [this, k]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return changes_[k] > 0;
    };
    ASSERT_TRUE(
        mu_.AwaitWithTimeout(absl::Condition(&changed), absl::Seconds(30)))
        << "ledger " << k << " never saw the verdict";
  }

  std::unique_ptr<coord::InProcessCluster> cluster_;
  std::vector<std::unique_ptr<coord::CoordinationAgent>> agents_;
  absl::Mutex mu_;
  int changes_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
};

TEST_F(ControlPlaneLedgerTest, EveryLauncherSeesTheFirstFailure) {
  auto a = Ledger(0, 2);
  auto b = Ledger(1, 2);
  ASSERT_TRUE(b->RecordFailure(Failure("worker:1", 1, 3)).ok());
  // Second: loses, and that is not an error.
  ASSERT_TRUE(a->RecordFailure(Failure("worker:0", 0, 4)).ok());
  AwaitChange(0);
  AwaitChange(1);
  for (auto* l : {a.get(), b.get()}) {
    ASSERT_TRUE(l->Verdict().has_value());
    EXPECT_FALSE(l->Verdict()->succeeded);
    EXPECT_EQ(l->Verdict()->failure.task, "worker:1");
    EXPECT_EQ(l->Verdict()->failure.code, 3);
  }
  EXPECT_THAT(
      *agents_[0]->TryGetKeyValue(ControlPlaneLedger::Key(4, "verdict")),
      HasSubstr("worker:1"));
}

TEST_F(ControlPlaneLedgerTest, TheLastDoneRecordMakesTheSuccess) {
  auto a = Ledger(0, 2);
  auto b = Ledger(1, 2);
  ASSERT_TRUE(a->RecordDone(0).ok());
  // Not yet: only one of two is done, and no verdict key exists.
  EXPECT_TRUE(absl::IsNotFound(
      agents_[0]
          ->TryGetKeyValue(ControlPlaneLedger::Key(4, "verdict"))
          .status()));
  ASSERT_TRUE(b->RecordDone(1).ok());
  AwaitChange(0);
  AwaitChange(1);
  EXPECT_TRUE(a->Verdict()->succeeded);
  EXPECT_TRUE(b->Verdict()->succeeded);
  // A failure after the success is not the verdict.
  ASSERT_TRUE(a->RecordFailure(Failure("ps:0", 1, 143)).ok());
  EXPECT_EQ(*agents_[0]->TryGetKeyValue(ControlPlaneLedger::Key(4, "verdict")),
            "succeeded");
}

// --- Restart policy ---------------------------------------------------------

TEST(GangRestartPolicyTest, RestartsFailuresWhileRestartsRemain) {
  GangRestartPolicy policy(1);
  AttemptEnd failed;
  failed.outcome = Outcome::kFailed;
  EXPECT_EQ(policy.Decide(failed), RestartPolicy::Decision::kRestart);
  EXPECT_EQ(policy.RestartMessage(1),
            "restarting the whole gang as attempt 1 (0 restart(s) left after "
            "this)");
  EXPECT_EQ(policy.Decide(failed), RestartPolicy::Decision::kGiveUp);
}

TEST(GangRestartPolicyTest, StopsAndLossesAndSuccessesNeverRestart) {
  GangRestartPolicy policy(5);
  for (Outcome o : {Outcome::kSucceeded, Outcome::kStopped, Outcome::kLost}) {
    AttemptEnd end;
    end.outcome = o;
    EXPECT_EQ(policy.Decide(end), RestartPolicy::Decision::kFinish);
  }
  EXPECT_EQ(policy.restarts_left(), 5);
}

TEST(RestartModeTest, IsGangOrTaskAndAnythingElseNamesTheFlag) {
  EXPECT_EQ(*ParseRestartMode("gang"), RestartMode::kGang);
  EXPECT_EQ(*ParseRestartMode("task"), RestartMode::kTask);
  absl::StatusOr<RestartMode> bad = ParseRestartMode("worker");
  ASSERT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(bad.status().message(), HasSubstr("--restart must be gang"));
  EXPECT_THAT(bad.status().message(), HasSubstr("got \"worker\""));
}

// Task restarts happen inside the attempt: a failed attempt is the last.
TEST(TaskRestartPolicyTest, AFailedAttemptIsNeverRestarted) {
  TaskRestartPolicy policy(3);
  AttemptEnd end;
  end.outcome = Outcome::kFailed;
  EXPECT_EQ(policy.Decide(end), RestartPolicy::Decision::kGiveUp);
  end.outcome = Outcome::kSucceeded;
  EXPECT_EQ(policy.Decide(end), RestartPolicy::Decision::kFinish);
  EXPECT_EQ(policy.GiveUpMessage(1),
            "giving up: a task failed and was not restarted (--restart task "
            "--max-restarts 3; the lines above say why)");
}

// --- One attempt of real processes ----------------------------------------

// A LocalAttemptLedger that counts the failures written to it, or refuses
// them (a control plane that cannot be written).
class CountingLedger : public AttemptLedger {
 public:
  CountingLedger(int must_finish, std::function<void()> changed)
      : ledger_(must_finish, std::move(changed)) {}
  absl::Status RecordFailure(const FailureRecord& record) override {
    ++failures;
    if (!refuse.ok()) return refuse;
    return ledger_.RecordFailure(record);
  }
  absl::Status RecordDone(int job_task) override {
    done.push_back(job_task);
    return ledger_.RecordDone(job_task);
  }
  std::optional<AttemptVerdict> Verdict() override { return ledger_.Verdict(); }

  int failures = 0;       // the supervisor's thread only
  std::vector<int> done;  // job tasks recorded done, likewise
  absl::Status refuse;

 private:
  LocalAttemptLedger ledger_;
};

class AttemptSupervisorTest : public ::testing::Test {
 protected:
  // One /bin/sh task per script; the first `must_finish` are workers, the
  // rest ps.
  AttemptPlan Plan(const std::vector<std::string>& scripts, int attempt = 0) {
    AttemptPlan plan;
    plan.attempt = attempt;
    plan.job_size = static_cast<int>(scripts.size());
    plan.announce = false;
    plan.stop_grace = absl::Seconds(30);  // SIGTERM is enough for sh
    plan.messages = [this](const std::string& line) {
      absl::MutexLock lock(&mu_);
      messages_ += line + "\n";
    };
    for (int i = 0; i < static_cast<int>(scripts.size()); ++i) {
      AttemptPlan::Task t;
      t.job_task = i;
      t.options.spec = {"worker", i};
      t.options.command = {"/bin/sh", "-c", scripts[i]};
      t.options.env = {"PATH=/usr/bin:/bin"};
      t.options.output = [](const std::string&) {};
      t.options.messages = [](const std::string&) {};
      plan.tasks.push_back(std::move(t));
    }
    return plan;
  }
  AttemptEnd Run(AttemptPlan plan, int must_finish,
                 absl::Status refuse = absl::OkStatus()) {
    CountingLedger ledger(must_finish, [this] { events_.Changed(); });
    ledger.refuse = refuse;
    AttemptEnd end =
        AttemptSupervisor(Env::Default(), &events_, &ledger, std::move(plan))
            .Run();
    failures_written_ = ledger.failures;
    done_written_ = ledger.done;
    return end;
  }

  int failures_written_ = 0;
  std::vector<int> done_written_;

  AttemptEvents events_{Env::Default()};
  absl::Mutex mu_;
  std::string messages_ ABSL_GUARDED_BY(mu_);
};

TEST_F(AttemptSupervisorTest, EveryTaskExitingZeroIsASuccess) {
  AttemptEnd end = Run(Plan({"exit 0", "exit 0"}), 2);
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  EXPECT_EQ(end.stopped_running, 0);
}

// The failing task is the verdict; the sleeping one is stopped by SIGTERM,
// and its own non-zero exit (caused by the stop) is not a second failure.
TEST_F(AttemptSupervisorTest, AFailureStopsTheOthersAndIsTheOnlyFailure) {
  AttemptEnd end = Run(Plan({"exec sleep 60", "echo last words; exit 3"}), 2);
  EXPECT_EQ(end.outcome, Outcome::kFailed);
  EXPECT_EQ(end.failure.task, "worker:1");
  EXPECT_EQ(end.failure.reason, "exited with code 3");
  EXPECT_EQ(end.failure.code, 3);
  EXPECT_THAT(end.failure.where, HasSubstr("pid "));
  EXPECT_THAT(end.failure.tail, ElementsAre("last words"));
  EXPECT_EQ(end.stopped_running, 1);
  EXPECT_EQ(end.stopped_others, 1);
  EXPECT_EQ(failures_written_, 1);  // worker:0's SIGTERM exit is not one
}

// Spark #29: an event of an earlier attempt never fails the current one.
TEST_F(AttemptSupervisorTest, AnEarlierAttemptsExitIsIgnored) {
  events_.TaskExited(/*attempt=*/0, 0, /*restart=*/0, ExitInfo{false, 3},
                     absl::Now());
  AttemptEnd end = Run(Plan({"exit 0"}, /*attempt=*/1), 1);
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
}

// Only chief/worker/evaluator tasks make the success; a ps still running is
// then stopped, and its SIGTERM exit is not a failure.
TEST_F(AttemptSupervisorTest, PsTasksAreStoppedOnceTheGangSucceeds) {
  AttemptPlan plan = Plan({"exit 0", "exec sleep 60"});
  plan.tasks[1].options.spec = {"ps", 0};
  AttemptEnd end = Run(std::move(plan), 1);
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  EXPECT_EQ(failures_written_, 0);
  EXPECT_EQ(end.stopped_running, 1);
}

// A failure that cannot be written might never become anyone's verdict:
// the attempt ends as lost instead of waiting for one.
TEST_F(AttemptSupervisorTest, AFailureThatCannotBeRecordedEndsTheAttempt) {
  AttemptEnd end = Run(Plan({"exec sleep 60", "exit 3"}), 2,
                       absl::UnavailableError("control plane unreachable"));
  EXPECT_EQ(end.outcome, Outcome::kLost);
  EXPECT_THAT(end.lost.message(), HasSubstr("control plane unreachable"));
  EXPECT_EQ(end.stopped_running, 1);
}

// A task that already exited is judged by its exit, not by what the
// service later says of its silence. (The exit is queued first; the real
// process is then ended by the supervisor's cleanup.)
TEST_F(AttemptSupervisorTest, TheServiceCannotFailATaskThatExitedZero) {
  events_.TaskExited(0, 0, 0, ExitInfo{false, 0}, absl::Now());
  FailureRecord silent = NoHeartbeat("worker:0", 0);
  events_.TaskFailed(0, silent);
  AttemptEnd end = Run(Plan({"exec sleep 60"}), 1);
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  EXPECT_EQ(failures_written_, 0);
}

TEST_F(AttemptSupervisorTest, AStopIsPendingUntilAnAttemptActsOnIt) {
  std::atomic<bool> done{false};
  events_.Stop();
  // Between attempts (a launcher's barrier wait): the stop is pending.
  EXPECT_TRUE(events_.AwaitStopOr(done));
  AttemptEnd end = Run(Plan({"exec sleep 60"}), 1);
  EXPECT_EQ(end.outcome, Outcome::kStopped);
  // The attempt acted on it: a later wait ends on its own condition.
  done = true;
  EXPECT_FALSE(events_.AwaitStopOr(done));
  EXPECT_TRUE(events_.stop_requested());
}

TEST_F(AttemptSupervisorTest, AStopEndsTheAttemptAsInterrupted) {
  events_.Stop();
  AttemptEnd end = Run(Plan({"exec sleep 60"}), 1);
  EXPECT_EQ(end.outcome, Outcome::kStopped);
  EXPECT_TRUE(end.failure.interrupted);
  EXPECT_EQ(end.failure.code, 130);
  absl::MutexLock lock(&mu_);
  EXPECT_THAT(messages_, HasSubstr("interrupted: stopping every task"));
}

// A failure the coordination service saw is told with what the supervisor
// knows of the task: its pid and log.
TEST_F(AttemptSupervisorTest, AFailureTheServiceSawNamesTheTask) {
  FailureRecord seen = NoHeartbeat("worker:0", 0);
  events_.TaskFailed(0, seen);
  AttemptEnd end = Run(Plan({"exec sleep 60"}), 1);
  EXPECT_EQ(end.outcome, Outcome::kFailed);
  EXPECT_EQ(end.failure.reason, seen.reason);
  EXPECT_THAT(end.failure.where, HasSubstr("pid "));
  // It was still running: stopped, but not one of the "others".
  EXPECT_EQ(end.stopped_running, 1);
  EXPECT_EQ(end.stopped_others, 0);
}

TEST_F(AttemptSupervisorTest, ALostControlPlaneStopsTheTasks) {
  events_.ControlPlaneLost(absl::UnavailableError("task 0's launcher died"));
  AttemptEnd end = Run(Plan({"exec sleep 60"}), 1);
  EXPECT_EQ(end.outcome, Outcome::kLost);
  EXPECT_THAT(end.lost.message(), HasSubstr("task 0's launcher died"));
  EXPECT_EQ(end.stopped_running, 1);
}

TEST_F(AttemptSupervisorTest, AProgramThatCannotStartFailsTheAttempt) {
  AttemptPlan plan = Plan({"exec sleep 60", "exit 0"});
  plan.tasks[1].options.command = {"/nonexistent/cohort-test-program"};
  AttemptEnd end = Run(std::move(plan), 2);
  EXPECT_EQ(end.outcome, Outcome::kFailed);
  EXPECT_TRUE(absl::IsNotFound(end.spawn_error)) << end.spawn_error;
  EXPECT_EQ(end.failure.task, "worker:1");
  EXPECT_THAT(end.failure.reason, HasSubstr("could not start"));
  EXPECT_EQ(end.stopped_running, 1);  // worker:0 had started
}

// --- Task restarts (--restart task) ----------------------------------------

class TaskRestartTest : public AttemptSupervisorTest {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/task_restart.", getpid(), ".",
                        absl::ToUnixNanos(absl::Now()));
    ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0) << dir_;
  }
  // Plan() with each task's log in the test's directory.
  AttemptPlan LoggedPlan(const std::vector<std::string>& scripts,
                         int task_restarts) {
    AttemptPlan plan = Plan(scripts);
    plan.task_restarts = task_restarts;
    for (AttemptPlan::Task& t : plan.tasks) {
      t.options.log_path =
          absl::StrCat(dir_, "/worker-", t.job_task, ".attempt-0.log");
    }
    return plan;
  }
  // A script that fails (printing "dying") in the task's first process and
  // runs `then` in its first restart.
  std::string FailsOnce(const std::string& then) {
    return absl::StrCat("if [ \"$COHORT_TASK_RESTART\" = 1 ]; then ", then,
                        "; fi; echo dying; exit 3");
  }
  // A script that exits 0 once `file` exists, or 9 after 60 s.
  std::string ExitsOnceThere(const std::string& file) {
    return absl::StrCat("i=0; while [ $i -lt 600 ]; do [ -e ", dir_, "/", file,
                        " ] && exit 0; sleep 0.1; i=$((i+1)); done; exit 9");
  }
  std::string dir_;
};

// worker:1 fails; it alone is started again (its second run makes the file
// worker:0 waits for), and worker:0, never stopped, finishes with it.
TEST_F(TaskRestartTest, AFailedTaskIsRestartedAloneWhileTheOthersRun) {
  AttemptEnd end =
      Run(LoggedPlan(
              {ExitsOnceThere("restarted"),
               FailsOnce(absl::StrCat("touch ", dir_, "/restarted; exit 0"))},
              /*task_restarts=*/2),
          2);
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  EXPECT_EQ(failures_written_, 0);
  EXPECT_EQ(end.stopped_running, 0);
  ASSERT_EQ(end.restarts.size(), 1u);
  const TaskRestart& r = end.restarts[0];
  EXPECT_EQ(r.task, "worker:1");
  EXPECT_EQ(r.restart, 1);
  EXPECT_EQ(r.cause.reason, "exited with code 3");
  EXPECT_THAT(r.cause.tail, ElementsAre("dying"));
  EXPECT_EQ(r.cause.log_path, dir_ + "/worker-1.attempt-0.log");
  EXPECT_EQ(r.new_log_path, dir_ + "/worker-1.attempt-0.restart-1.log");
  absl::MutexLock lock(&mu_);
  EXPECT_THAT(messages_, HasSubstr("worker:1 (pid "));
  EXPECT_THAT(messages_, HasSubstr(") exited with code 3 at "));
  EXPECT_THAT(messages_,
              HasSubstr("restarted alone (restart 1 of 2), the other tasks "
                        "kept running; its log: " +
                        r.new_log_path));
}

// Restarts are counted per task: the failure after the last one fails the
// attempt, and the gang's rule applies from there (the others stopped).
TEST_F(TaskRestartTest, AFailureWithNoRestartLeftFailsTheAttempt) {
  AttemptEnd end =
      Run(LoggedPlan({"exec sleep 60", "echo dying; exit 3"}, 1), 2);
  EXPECT_EQ(end.outcome, Outcome::kFailed);
  EXPECT_EQ(end.failure.task, "worker:1");
  EXPECT_EQ(end.failure.reason, "exited with code 3");
  EXPECT_EQ(end.failure.log_path, dir_ + "/worker-1.attempt-0.restart-1.log");
  EXPECT_EQ(failures_written_, 1);
  ASSERT_EQ(end.restarts.size(), 1u);
  EXPECT_EQ(end.stopped_others, 1);  // worker:0
  absl::MutexLock lock(&mu_);
  EXPECT_THAT(messages_, HasSubstr("worker:1 exited with code 3 with no "
                                   "restart left (1 of 1 used): the job "
                                   "fails"));
}

// Without restarts left from the start (--max-restarts 0) task restarts
// are the gang's rule.
TEST_F(TaskRestartTest, ZeroRestartsFailTheAttemptAtTheFirstFailure) {
  AttemptEnd end = Run(LoggedPlan({"exec sleep 60", "exit 3"}, 0), 2);
  EXPECT_EQ(end.outcome, Outcome::kFailed);
  EXPECT_TRUE(end.restarts.empty());
  EXPECT_EQ(end.stopped_others, 1);
}

// A task the service failed while it still runs (silent: hung, or cut
// off) is killed and started again; its restart names the service's
// reason and how it ended. The rule for a restarted task's late failures
// (below) does not cover a task's first process: this failure is dated
// well within service_silence of its start.
TEST_F(TaskRestartTest, ARunningTaskTheServiceFailedIsKilledAndRestarted) {
  FailureRecord silent = NoHeartbeat("worker:0", 0, absl::Now());
  events_.TaskFailed(0, silent);
  // The first process sleeps (hung, as far as the service knows); the
  // second exits 0.
  AttemptPlan plan = LoggedPlan(
      {"[ \"$COHORT_TASK_RESTART\" = 1 ] && exit 0; exec sleep 60"}, 1);
  plan.service_silence = absl::Seconds(30);
  AttemptEnd end = Run(std::move(plan), 1);
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  ASSERT_EQ(end.restarts.size(), 1u);
  EXPECT_EQ(end.restarts[0].cause.reason,
            silent.reason +
                " (killed by its launcher: killed by signal 9 (SIGKILL))");
  absl::MutexLock lock(&mu_);
  EXPECT_THAT(messages_, HasSubstr("no heartbeat; killing it"));
}

// Killed to be restarted, a task is restarted even when its exit (here
// queued before the kill could land) is 0: the service's failure stands.
TEST_F(TaskRestartTest, ATaskKilledToBeRestartedIsRestartedWhateverItsExit) {
  events_.TaskFailed(0, NoHeartbeat("worker:0", 0, absl::Now()));
  events_.TaskExited(0, 0, /*restart=*/0, ExitInfo{false, 0}, absl::Now());
  AttemptEnd end =
      Run(LoggedPlan(
              {"[ \"$COHORT_TASK_RESTART\" = 1 ] && exit 0; exec sleep 60"}, 1),
          1);
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  ASSERT_EQ(end.restarts.size(), 1u);
  EXPECT_THAT(end.restarts[0].cause.reason, HasSubstr("no heartbeat"));
}

// The service fails a restarted task's old process only once its
// heartbeats were late, possibly after the new process started: a failure
// of a restarted task dated sooner after its start than service_silence is
// the old process's, and the new one runs on. (The late report is sent
// when the restart is announced.)
TEST_F(TaskRestartTest, ALateFailureOfARestartedTasksOldProcessIsDropped) {
  AttemptPlan plan = LoggedPlan({FailsOnce("sleep 0.5; exit 0")}, 2);
  plan.service_silence = absl::Seconds(30);
  plan.messages = [this](const std::string& line) {
    if (absl::StrContains(line, "restarted alone")) {
      events_.TaskFailed(0, NoHeartbeat("worker:0", 0, absl::Now()));
    }
  };
  AttemptEnd end = Run(std::move(plan), 1);
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  EXPECT_EQ(end.restarts.size(), 1u);  // not 2: the late report was dropped
}

// Restarts are counted per task: two tasks failing once each, with one
// restart each, are both restarted.
TEST_F(TaskRestartTest, EachTaskHasItsOwnRestarts) {
  AttemptEnd end =
      Run(LoggedPlan({FailsOnce("exit 0"), FailsOnce("exit 0")}, 1), 2);
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  ASSERT_EQ(end.restarts.size(), 2u);
  EXPECT_NE(end.restarts[0].task, end.restarts[1].task);
}

// Under an engine, task 0's supervisor hears of other launchers' programs
// from the service; their own launchers cannot, so such a failure (a
// program hung on another host) fails the attempt as under the gang rule
// rather than leaving the job waiting for it.
TEST_F(TaskRestartTest, AnotherLaunchersTaskTheServiceFailedFailsTheAttempt) {
  events_.TaskFailed(0, NoHeartbeat("worker:5", 5, absl::Now()));
  AttemptEnd end = Run(LoggedPlan({"exec sleep 60"}, 1), 1);
  EXPECT_EQ(end.outcome, Outcome::kFailed);
  EXPECT_EQ(end.failure.task, "worker:5");
  EXPECT_TRUE(end.restarts.empty());
}

// An elastic job's membership, in memory, for the supervisor's elastic
// plan: a list of generations; lose() appends one without the task (or
// returns the newest when it is not a member), read() reads one.
struct FakeMembership {
  absl::Mutex mu;
  std::vector<std::vector<std::string>> generations ABSL_GUARDED_BY(mu);
  std::vector<std::string> lost ABSL_GUARDED_BY(mu);
  // lose() answers Unavailable (the service out of reach) this many times.
  int unreachable ABSL_GUARDED_BY(mu) = 0;
  // Run (outside mu) after every loss, and after every read of a
  // generation not written yet.
  std::function<void()> on_loss;
  std::function<void(int64_t generation)> on_missing_read;

  coord::Membership Generation(int64_t g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return {g, generations[g]};
  }
  void Write(std::vector<std::string> members) {
    absl::MutexLock lock(&mu);
    generations.push_back(std::move(members));
  }

  void Plan(AttemptPlan& plan) {
    plan.elastic.min = 1;
    plan.elastic.wait = absl::Seconds(60);
    plan.elastic.lose =
        [this](const std::string& task) -> absl::StatusOr<coord::Membership> {
      coord::Membership newest;
      {
        absl::MutexLock lock(&mu);
        if (unreachable > 0) {
          --unreachable;
          return absl::UnavailableError("coordination service unreachable");
        }
        lost.push_back(task);
        std::vector<std::string> last = generations.back();
        auto it = std::find(last.begin(), last.end(), task);
        if (it != last.end()) {
          last.erase(it);
          generations.push_back(last);
        }
        newest = Generation(static_cast<int64_t>(generations.size()) - 1);
      }
      if (on_loss) on_loss();
      return newest;
    };
    plan.elastic.read = [this](int64_t g) -> absl::StatusOr<coord::Membership> {
      absl::StatusOr<coord::Membership> result;
      {
        absl::MutexLock lock(&mu);
        if (g < static_cast<int64_t>(generations.size())) {
          result = Generation(g);
        } else {
          result = absl::NotFoundError(absl::StrCat("generation ", g));
        }
      }
      if (!result.ok() && on_missing_read) on_missing_read(g);
      return result;
    };
  }
};

// Under an engine in an elastic job, a task of another launcher that the
// service failed leaves the membership instead of failing the attempt (its
// own launcher stops it when it sees it removed). worker:0 finishes once
// the removal was made.
TEST_F(TaskRestartTest, ElasticAnotherLaunchersSilentTaskLeavesTheMembership) {
  FakeMembership m;
  m.Write({"worker:0", "worker:5"});
  m.on_loss = [this] { std::ofstream(dir_ + "/removed").put('\n'); };
  events_.TaskFailed(0, NoHeartbeat("worker:5", 5, absl::Now()));
  AttemptPlan plan = LoggedPlan({ExitsOnceThere("removed")}, 1);
  m.Plan(plan);
  AttemptEnd end = Run(std::move(plan), 1);
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  EXPECT_EQ(failures_written_, 0);
  {
    absl::MutexLock lock(&m.mu);
    EXPECT_THAT(m.lost, ElementsAre("worker:5"));
    ASSERT_EQ(m.generations.size(), 2u);
    EXPECT_THAT(m.generations[1], ElementsAre("worker:0"));
  }
  absl::MutexLock lock(&mu_);
  EXPECT_THAT(messages_,
              HasSubstr("no heartbeat; elastic: removed from the membership, "
                        "its launcher stops it; 1 task(s) train on "
                        "(worker:0)"));
}

// A task orphaned by its launcher's loss (an etcd control plane: that
// launcher's lease expired) leaves the membership and counts as done, since
// no launcher is left to restart it: the attempt succeeds when worker:0,
// which waits for the removal, exits 0. Without worker:5's done record
// there would be no verdict: the watchdog stops the attempt after 60 s and
// the outcome is kStopped.
TEST_F(TaskRestartTest, ElasticAnOrphanedTaskLeavesTheJobAndCountsAsDone) {
  FakeMembership m;
  m.Write({"worker:0", "worker:5"});
  m.on_loss = [this] { std::ofstream(dir_ + "/removed").put('\n'); };
  FailureRecord orphan = NoHeartbeat("worker:5", 5, absl::Now());
  orphan.reason = "was lost with its launcher";
  events_.TaskOrphaned(0, orphan);
  AttemptPlan plan = LoggedPlan({ExitsOnceThere("removed")}, 1);
  m.Plan(plan);
  absl::Notification ended;
  std::thread watchdog([&] {
    if (!ended.WaitForNotificationWithTimeout(absl::Seconds(60))) {
      events_.Stop();
    }
  });
  AttemptEnd end = Run(std::move(plan), /*must_finish=*/2);
  ended.Notify();
  watchdog.join();
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  EXPECT_EQ(failures_written_, 0);
  EXPECT_THAT(done_written_, Contains(5));
  {
    absl::MutexLock lock(&m.mu);
    EXPECT_THAT(m.lost, ElementsAre("worker:5"));
  }
  absl::MutexLock lock(&mu_);
  EXPECT_THAT(messages_,
              HasSubstr("worker:5 () was lost with its launcher; elastic: "
                        "removed from the membership; no launcher is left to "
                        "restart it, so it leaves the job; 1 task(s) train on "
                        "(worker:0)"));
}

// ... but not below the elastic minimum: there the orphan is not counted
// done (the supervisor's minimum check, not enforced in this plan, is what
// fails such a job). The message comes after that decision; the attempt is
// then stopped.
TEST_F(TaskRestartTest, ElasticAnOrphanBelowTheMinimumIsNotCountedDone) {
  FakeMembership m;
  m.Write({"worker:0", "worker:5"});
  FailureRecord orphan = NoHeartbeat("worker:5", 5, absl::Now());
  orphan.reason = "was lost with its launcher";
  events_.TaskOrphaned(0, orphan);
  AttemptPlan plan = LoggedPlan({"exec sleep 60"}, 1);
  m.Plan(plan);
  plan.elastic.min = 2;
  std::thread stopper([this] {
    for (int i = 0; i < 6000; ++i) {
      {
        absl::MutexLock lock(&mu_);
        if (absl::StrContains(messages_, "below the elastic minimum")) break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    events_.Stop();
  });
  AttemptEnd end = Run(std::move(plan), /*must_finish=*/2);
  stopper.join();
  EXPECT_EQ(end.outcome, Outcome::kStopped);
  EXPECT_THAT(done_written_, Not(Contains(5)));
  absl::MutexLock lock(&mu_);
  EXPECT_THAT(messages_,
              HasSubstr("no launcher is left to restart it, so it leaves the "
                        "job; 1 task(s) remain (worker:0), below the elastic "
                        "minimum of 2"));
}

// Outside an elastic job an orphaned task fails the attempt, as any other
// launcher's task the service failed.
TEST_F(TaskRestartTest, AnOrphanedTaskFailsANonElasticAttempt) {
  FailureRecord orphan = NoHeartbeat("worker:5", 5, absl::Now());
  orphan.reason = "was lost with its launcher";
  events_.TaskOrphaned(0, orphan);
  AttemptEnd end = Run(LoggedPlan({"exec sleep 60"}, 1), 2);
  EXPECT_EQ(end.outcome, Outcome::kFailed);
  EXPECT_EQ(end.failure.task, "worker:5");
  EXPECT_EQ(end.failure.reason, "was lost with its launcher");
}

// Under task restarts an orphaned task waits for a launcher to replace
// its lost one: adopted (TaskAdopted) it is that launcher's again, and the
// attempt goes on. The wait here is 1 ms, and the supervisor wakes at an
// orphan's deadline: had the adoption been ignored, the orphan would fail
// the attempt long before worker:0, which exits only once the adoption was
// said, finishes.
TEST_F(TaskRestartTest,
       AnOrphanedTaskAdoptedByAReplacementLauncherIsNoFailure) {
  FailureRecord orphan = NoHeartbeat("worker:5", 5, absl::Now());
  orphan.reason = "was lost with its launcher";
  events_.TaskOrphaned(0, orphan);
  events_.TaskAdopted(0, 5);
  AttemptPlan plan = LoggedPlan({ExitsOnceThere("adopted")}, 1);
  plan.replacement_wait = absl::Milliseconds(1);
  std::thread said([this] {
    for (int i = 0; i < 6000; ++i) {
      {
        absl::MutexLock lock(&mu_);
        if (absl::StrContains(messages_, "rejoined the job for it")) break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    std::ofstream(dir_ + "/adopted").put('\n');
  });
  AttemptEnd end = Run(std::move(plan), 1);
  said.join();
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  EXPECT_EQ(failures_written_, 0);
  absl::MutexLock lock(&mu_);
  EXPECT_THAT(messages_,
              HasSubstr("worker:5 () was lost with its launcher; the other "
                        "tasks run on while a launcher started again for it "
                        "(by the engine, or by hand) rejoins the job, within "
                        "1ms"));
  EXPECT_THAT(messages_, HasSubstr("worker:5: a launcher rejoined the job for "
                                   "it and restarts it"));
}

// ... and one no launcher adopts within the wait fails the attempt,
// naming the wait.
TEST_F(TaskRestartTest, AnOrphanedTaskNotAdoptedWithinTheWaitFailsTheAttempt) {
  FailureRecord orphan = NoHeartbeat("worker:5", 5, absl::Now());
  orphan.reason = "was lost with its launcher";
  events_.TaskOrphaned(0, orphan);
  AttemptPlan plan = LoggedPlan({"exec sleep 60"}, 1);
  plan.replacement_wait = absl::Milliseconds(50);
  AttemptEnd end = Run(std::move(plan), 2);
  EXPECT_EQ(end.outcome, Outcome::kFailed);
  EXPECT_EQ(end.failure.task, "worker:5");
  EXPECT_EQ(end.failure.reason,
            "was lost with its launcher; no launcher rejoined the job for it "
            "within 50ms");
}

// A task of this launcher that a generation listed and a later one does
// not (another launcher removed it while its process ran: it was silent or
// cut off) is killed and restarted. Its replacement is not a member until
// it adds itself, so it is left running even though generation 0 listed
// the task: here it finishes only after the supervisor looked three more
// times for the generation after its restart, and a second kill would have
// been a failure with no restart left.
TEST_F(TaskRestartTest, ElasticATaskRemovedWhileRunningIsKilledAndRestarted) {
  FakeMembership m;
  m.Write({"worker:0"});
  // Once the supervisor has seen generation 0 and looked for generation 1,
  // "another launcher" writes generation 1 without worker:0. The restart's
  // leaving writes nothing (it is not a member): the replacement finishes
  // after the supervisor looked for generation 2 three times.
  int looks_for_2 = 0;  // the supervisor's thread only
  m.on_missing_read = [&m, &looks_for_2, this](int64_t g) {
    if (g == 1) m.Write({});
    if (g == 2 && ++looks_for_2 == 3) {
      std::ofstream(dir_ + "/replacement-checked").put('\n');
    }
  };
  AttemptPlan plan =
      LoggedPlan({absl::StrCat("[ \"$COHORT_TASK_RESTART\" = 1 ] && { ",
                               ExitsOnceThere("replacement-checked"),
                               "; }; exec sleep 60")},
                 1);
  m.Plan(plan);
  AttemptEnd end = Run(std::move(plan), 1);
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  ASSERT_EQ(end.restarts.size(), 1u);
  EXPECT_THAT(end.restarts[0].cause.reason,
              HasSubstr("was removed from the elastic membership while "
                        "running"));
  {
    absl::MutexLock lock(&m.mu);
    // Its exit removes it again (nothing to change) before the restart.
    EXPECT_THAT(m.lost, ElementsAre("worker:0"));
    EXPECT_EQ(m.generations.size(), 2u);
  }
  absl::MutexLock lock(&mu_);
  EXPECT_THAT(messages_, HasSubstr("while running (the coordination service "
                                   "failed it: silent or cut off); killing "
                                   "it"));
}

// A task that fails while its launcher cannot reach the coordination
// service (its host cut off) cannot leave the membership yet: that is not
// the job's failure; it is restarted once the service answers again.
TEST_F(TaskRestartTest, ElasticAFailureWhileCutOffIsRestartedOnceItLeft) {
  FakeMembership m;
  m.Write({"worker:0"});
  {
    absl::MutexLock lock(&m.mu);
    m.unreachable = 3;
  }
  AttemptPlan plan = LoggedPlan({FailsOnce("exit 0")}, 1);
  m.Plan(plan);
  AttemptEnd end = Run(std::move(plan), 1);
  EXPECT_EQ(end.outcome, Outcome::kSucceeded);
  EXPECT_EQ(failures_written_, 0);
  ASSERT_EQ(end.restarts.size(), 1u);
  {
    absl::MutexLock lock(&m.mu);
    EXPECT_EQ(m.unreachable, 0);
    EXPECT_THAT(m.lost, ElementsAre("worker:0"));
  }
  absl::MutexLock lock(&mu_);
  // Said once, not at every retry.
  const std::string said =
      "coordination service unreachable; it is restarted once it has left "
      "the membership";
  EXPECT_THAT(messages_, HasSubstr(said));
  EXPECT_EQ(messages_.find(said), messages_.rfind(said));
}

// ... but not forever: past the plan's wait the failure is the attempt's,
// naming why it could not leave.
TEST_F(TaskRestartTest, ElasticAFailureCutOffLongerThanTheWaitFailsTheJob) {
  FakeMembership m;
  m.Write({"worker:0"});
  {
    absl::MutexLock lock(&m.mu);
    m.unreachable = 1 << 20;
  }
  AttemptPlan plan = LoggedPlan({FailsOnce("exit 0")}, 1);
  m.Plan(plan);
  plan.elastic.wait = absl::Milliseconds(300);
  AttemptEnd end = Run(std::move(plan), 1);
  EXPECT_EQ(end.outcome, Outcome::kFailed);
  EXPECT_EQ(end.failure.task, "worker:0");
  EXPECT_THAT(end.failure.reason,
              HasSubstr("exited with code 3; removing worker:0 from the "
                        "elastic membership: coordination service "
                        "unreachable, so it is not restarted"));
  EXPECT_TRUE(end.restarts.empty());
}

// --- The service's failures reach the attempt -------------------------------

TEST(TaskFailureWatchTest, AFailureTheServiceSeesEndsTheAttempt) {
  coord::CoordinationServiceOptions so;
  so.jobs = {{"worker", 2}};
  auto cluster = coord::InProcessCluster::Create(so);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  AttemptEvents events(Env::Default());
  std::vector<TaskSpec> tasks = {{"worker", 0}, {"worker", 1}};
  TaskFailureWatch watch((*cluster)->service(), tasks, {"h0", "h1"}, 7,
                         &events);
  coord::CoordinationAgentOptions ao;
  ao.task = {"worker", 1};
  auto agent = (*cluster)->NewAgent(ao);
  ASSERT_TRUE(agent.ok());
  ASSERT_TRUE((*agent)->Connect().ok());
  ASSERT_TRUE((*agent)->ReportError(absl::InternalError("disk full")).ok());
  // The watch answered on the change, so the failure is queued: an attempt
  // whose only task sleeps must end with it.
  // must_finish 1: should the failure not arrive, the task's own exit 0
  // ends the attempt as a success and the test fails rather than hangs.
  LocalAttemptLedger ledger(1, [&] { events.Changed(); });
  AttemptPlan plan;
  plan.attempt = 7;
  plan.announce = false;
  AttemptPlan::Task t;
  t.job_task = 1;
  t.options.spec = {"worker", 1};
  t.options.command = {"/bin/sh", "-c", "exec sleep 30"};
  t.options.env = {"PATH=/usr/bin:/bin"};
  t.options.output = [](const std::string&) {};
  t.options.messages = [](const std::string&) {};
  plan.tasks.push_back(std::move(t));
  AttemptEnd end =
      AttemptSupervisor(Env::Default(), &events, &ledger, std::move(plan))
          .Run();
  EXPECT_EQ(end.outcome, Outcome::kFailed);
  EXPECT_EQ(end.failure.task, "worker:1");
  EXPECT_THAT(end.failure.reason,
              HasSubstr("was failed by the coordination service"));
  EXPECT_THAT(end.failure.reason, HasSubstr("disk full"));
}

}  // namespace
}  // namespace cohort::launch
