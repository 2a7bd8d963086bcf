// CoordinationAgents whose coordination service is a real 3-member etcd
// cluster (LocalEtcd), through EtcdCoordinationClient.
#include "cohort/coord/etcd_coordination_client.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/coord/etcd_testing.h"
#include "cohort/coord/framed_coordination.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coord {
namespace {

using ::testing::HasSubstr;

// The first error an agent's callback got.
struct ErrorSink {
  absl::Notification got;
  absl::Status error;
  std::function<void(const absl::Status&)> Callback() {
    return [this](const absl::Status& s) {
      if (got.HasBeenNotified()) return;
      error = s;
      got.Notify();
    };
  }
};

class EtcdCoordinationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    COHORT_START_ETCD_OR_SKIP(etcd_);
    etcd_client_ = Etcd("/job");
  }
  std::shared_ptr<EtcdClient> Etcd(const std::string& prefix) {
    EtcdClientOptions o;
    o.target = *ParseEtcdUrl(etcd_.Url(prefix));
    o.call_timeout = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<EtcdClient>> c = EtcdClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::shared_ptr<EtcdClient>(*std::move(c)) : nullptr;
  }
  // Leases of 10 s, heartbeats every 500 ms: no agent is lost by a slow
  // machine (a sanitizer build) unless a test shortens them.
  EtcdCoordinationOptions Space(int launchers = 2,
                                absl::Duration ttl = absl::Seconds(10)) {
    EtcdCoordinationOptions o;
    o.space = "launchers/";
    o.jobs = {{"launcher", launchers}};
    o.job_id = JobIdOf("a-job-token");
    o.heartbeat_timeout = ttl;
    return o;
  }
  std::unique_ptr<CoordinationAgent> Agent(
      int index, ErrorSink* errors, int launchers = 2,
      absl::Duration ttl = absl::Seconds(10)) {
    absl::StatusOr<std::unique_ptr<CoordinationClient>> client =
        NewEtcdCoordinationClient(etcd_client_, Space(launchers, ttl));
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return nullptr;
    CoordinationAgentOptions o;
    o.task = {"launcher", index};
    o.heartbeat_timeout = ttl;
    o.heartbeat_interval = absl::Milliseconds(500);
    o.register_timeout = absl::Seconds(20);
    o.shutdown_timeout = absl::Seconds(5);
    o.poll_timeout = absl::Seconds(5);
    if (errors != nullptr) o.error_callback = errors->Callback();
    absl::StatusOr<std::unique_ptr<CoordinationAgent>> agent =
        CoordinationAgent::Create(std::move(o), *std::move(client));
    EXPECT_TRUE(agent.ok()) << agent.status();
    if (!agent.ok()) return nullptr;
    absl::Status s = (*agent)->Connect();
    EXPECT_TRUE(s.ok()) << s;
    return *std::move(agent);
  }

  LocalEtcd etcd_;
  std::shared_ptr<EtcdClient> etcd_client_;
};

TEST_F(EtcdCoordinationTest, KeyValuesAcrossAgents) {
  std::unique_ptr<CoordinationAgent> a = Agent(0, nullptr);
  std::unique_ptr<CoordinationAgent> b = Agent(1, nullptr);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->InsertKeyValue("addr/0", "h0:1").ok());
  absl::Status dup = b->InsertKeyValue("addr/0", "other");
  EXPECT_TRUE(absl::IsAlreadyExists(dup)) << dup;
  ASSERT_TRUE(b->InsertKeyValue("addr//1/", "h1:2").ok());  // "addr/1"
  absl::StatusOr<std::string> v = b->GetKeyValue("addr/0", absl::Seconds(5));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "h0:1");
  auto dir = a->GetKeyValueDir("addr");
  ASSERT_TRUE(dir.ok()) << dir.status();
  ASSERT_EQ(dir->size(), 2u);
  EXPECT_EQ((*dir)[1].first, "addr/1");
  EXPECT_EQ((*dir)[1].second, "h1:2");

  // A blocking get is answered by a later insert.
  absl::Notification waiting;
  std::thread setter([&] {
    waiting.WaitForNotification();
    EXPECT_TRUE(a->InsertKeyValue("late", "x").ok());
  });
  waiting.Notify();
  v = b->GetKeyValue("late", absl::Seconds(20));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "x");
  v = b->GetKeyValue("never", absl::Milliseconds(300));
  EXPECT_TRUE(absl::IsDeadlineExceeded(v.status())) << v.status();
  EXPECT_THAT(v.status().message(), HasSubstr("\"never\" was not set"));

  absl::StatusOr<int64_t> n = a->IncrementKeyValue("count", 5);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 5);
  n = b->IncrementKeyValue("count", -2);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3);
  absl::StatusOr<CompareAndSwapResult> cas =
      a->CompareAndSwapKeyValue("gen", std::nullopt, "1");
  ASSERT_TRUE(cas.ok());
  EXPECT_TRUE(cas->swapped);
  cas = b->CompareAndSwapKeyValue("gen", std::string("0"), "2");
  ASSERT_TRUE(cas.ok());
  EXPECT_FALSE(cas->swapped);
  EXPECT_EQ(cas->stored, "1");

  absl::StatusOr<KeyValueWatchResult> w =
      a->WatchKeyValue("gen", 0, absl::Seconds(5));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->present);
  EXPECT_EQ(w->value, "1");
  std::thread deleter([&] { EXPECT_TRUE(b->DeleteKeyValue("gen").ok()); });
  absl::StatusOr<KeyValueWatchResult> gone =
      a->WatchKeyValue("gen", w->version, absl::Seconds(20));
  deleter.join();
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_FALSE(gone->present);
  EXPECT_GT(gone->version, w->version);
}

TEST_F(EtcdCoordinationTest, BarriersPassForAllAndAreReusable) {
  std::unique_ptr<CoordinationAgent> a = Agent(0, nullptr);
  std::unique_ptr<CoordinationAgent> b = Agent(1, nullptr);
  ASSERT_TRUE(a && b);
  for (int use = 0; use < 3; ++use) {
    absl::Status at_a;
    std::thread t([&] { at_a = a->WaitAtBarrier("start", absl::Seconds(20)); });
    absl::Status at_b = b->WaitAtBarrier("start", absl::Seconds(20));
    t.join();
    EXPECT_TRUE(at_a.ok()) << use << ": " << at_a;
    EXPECT_TRUE(at_b.ok()) << use << ": " << at_b;
  }
}

TEST_F(EtcdCoordinationTest, ATimedOutBarrierFailsTheSameForEveryone) {
  std::unique_ptr<CoordinationAgent> a = Agent(0, nullptr);
  std::unique_ptr<CoordinationAgent> b = Agent(1, nullptr);
  ASSERT_TRUE(a && b);
  absl::Status s = a->WaitAtBarrier("start", absl::Milliseconds(500));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("barrier 'start' (#0) timed out: 1 of 2 "
                                     "task(s) had not arrived: launcher:1"));
  // launcher:1 comes late to the same instance and reads the same outcome.
  absl::Status late = b->WaitAtBarrier("start", absl::Seconds(20));
  EXPECT_EQ(late, s);
}

TEST_F(EtcdCoordinationTest, ACancelledBarrierFailsForEveryone) {
  std::unique_ptr<CoordinationAgent> a = Agent(0, nullptr);
  std::unique_ptr<CoordinationAgent> b = Agent(1, nullptr);
  ASSERT_TRUE(a && b);
  absl::Status at_a;
  std::thread t([&] { at_a = a->WaitAtBarrier("end", absl::Seconds(30)); });
  ASSERT_TRUE(b->CancelBarrier("end").ok());
  t.join();
  EXPECT_TRUE(absl::IsCancelled(at_a)) << at_a;
  EXPECT_THAT(at_a.message(), HasSubstr("cancelled by task launcher:1"));
}

TEST_F(EtcdCoordinationTest, AReportedErrorReachesEveryAgent) {
  ErrorSink a_errors;
  std::unique_ptr<CoordinationAgent> a = Agent(0, &a_errors);
  std::unique_ptr<CoordinationAgent> b = Agent(1, nullptr);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(b->ReportError(absl::InternalError("worker:1 exited 3")).ok());
  ASSERT_TRUE(a_errors.got.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsInternal(a_errors.error)) << a_errors.error;
  EXPECT_THAT(a_errors.error.message(), HasSubstr("worker:1 exited 3"));
  std::optional<TaskId> source = ErrorSourceTask(a_errors.error);
  ASSERT_TRUE(source.has_value());
  EXPECT_EQ(source->ToString(), "launcher:1");
}

TEST_F(EtcdCoordinationTest, ATaskWhoseLeaseExpiresIsLost) {
  ErrorSink a_errors;
  std::unique_ptr<CoordinationAgent> a =
      Agent(0, &a_errors, 2, absl::Seconds(2));
  ASSERT_TRUE(a);
  // launcher:1 registers and then never heartbeats: its process died.
  absl::StatusOr<std::unique_ptr<CoordinationClient>> dead =
      NewEtcdCoordinationClient(etcd_client_, Space(2, absl::Seconds(2)));
  ASSERT_TRUE(dead.ok());
  RegisterTaskRequest request;
  request.mutable_source_task()->set_job_name("launcher");
  request.mutable_source_task()->set_task_id(1);
  request.set_incarnation(7);
  RegisterTaskResponse response;
  ASSERT_TRUE((*dead)->RegisterTask(request, &response, CallOptions()).ok());
  ASSERT_TRUE(a_errors.got.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsUnavailable(a_errors.error)) << a_errors.error;
  EXPECT_THAT(a_errors.error.message(),
              HasSubstr("task launcher:1 was lost: no heartbeat reached etcd "
                        "for 2s"));
}

TEST_F(EtcdCoordinationTest, AShutDownTaskIsNotLost) {
  ErrorSink a_errors;
  std::unique_ptr<CoordinationAgent> a = Agent(0, &a_errors);
  std::unique_ptr<CoordinationAgent> b = Agent(1, nullptr);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(b->Shutdown().ok());
  // Its key went at once (revoked): a poll has seen that by the time a
  // barrier of launcher:0 alone passes after it.
  int64_t revision = 0;
  absl::StatusOr<std::optional<EtcdKeyValue>> key =
      etcd_client_->Get("launchers/status/tasks/launcher:1", &revision);
  ASSERT_TRUE(key.ok());
  EXPECT_FALSE(key->has_value());
  // a's error poll saw the revoke's delete at once; a loss wrongly judged
  // from it would be recorded within milliseconds, so 4 s is ample.
  EXPECT_FALSE(a_errors.got.WaitForNotificationWithTimeout(absl::Seconds(4)));
  EXPECT_TRUE(a->error().ok()) << a->error();
}

TEST_F(EtcdCoordinationTest, AnotherJobOnThePrefixIsRefused) {
  ASSERT_TRUE(NewEtcdCoordinationClient(etcd_client_, Space()).ok());
  EtcdCoordinationOptions other = Space();
  other.job_id = JobIdOf("another-token");
  absl::StatusOr<std::unique_ptr<CoordinationClient>> c =
      NewEtcdCoordinationClient(etcd_client_, other);
  EXPECT_TRUE(absl::IsFailedPrecondition(c.status())) << c.status();
  EXPECT_THAT(c.status().message(),
              HasSubstr("/job/launchers/ holds another job's control plane"));
  c = NewEtcdCoordinationClient(etcd_client_, Space(/*launchers=*/3));
  EXPECT_TRUE(absl::IsFailedPrecondition(c.status())) << c.status();
  // Under its own prefix it is its own job.
  c = NewEtcdCoordinationClient(Etcd("/job-2"), other);
  EXPECT_TRUE(c.ok()) << c.status();
  EXPECT_NE(JobIdOf("a-job-token"), JobIdOf("another-token"));
  EXPECT_EQ(JobIdOf("a-job-token").size(), 16u);
}

TEST_F(EtcdCoordinationTest, ABarrierSurvivesTheEtcdLeaderKilled) {
  ErrorSink a_errors, b_errors;
  std::unique_ptr<CoordinationAgent> a = Agent(0, &a_errors);
  std::unique_ptr<CoordinationAgent> b = Agent(1, &b_errors);
  ASSERT_TRUE(a && b);
  absl::Status at_a;
  std::thread t([&] { at_a = a->WaitAtBarrier("start", absl::Seconds(60)); });
  etcd_.Kill(etcd_.Leader());
  absl::Status at_b = b->WaitAtBarrier("start", absl::Seconds(60));
  t.join();
  EXPECT_TRUE(at_a.ok()) << at_a;
  EXPECT_TRUE(at_b.ok()) << at_b;
  absl::Status after = a->InsertKeyValue("after", "1");
  ASSERT_TRUE(after.ok()) << after;
  EXPECT_TRUE(a->error().ok()) << a->error();
  EXPECT_TRUE(b->error().ok()) << b->error();
}

TEST_F(EtcdCoordinationTest, AProgramJoinsByUrlAndWatchesTheJobState) {
  std::unique_ptr<CoordinationAgent> a = Agent(0, nullptr);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->InsertKeyValue("model", "resnet").ok());
  // As a program started by `cohort launch` does: the address alone.
  absl::StatusOr<std::unique_ptr<CoordinationClient>> joined =
      NewCoordinationClient(etcd_.Url("/job/launchers"), {});
  ASSERT_TRUE(joined.ok()) << joined.status();
  TryGetKeyValueRequest get;
  get.set_key("model");
  TryGetKeyValueResponse got;
  ASSERT_TRUE((*joined)->TryGetKeyValue(get, &got, CallOptions()).ok());
  EXPECT_EQ(got.kv().value(), "resnet");

  WatchJobStateRequest watch;
  watch.set_version_number(-1);
  WatchJobStateResponse now;
  ASSERT_TRUE((*joined)->WatchJobState(watch, &now, CallOptions()).ok());
  ASSERT_EQ(now.task_state_size(), 2);
  EXPECT_EQ(now.task_state(0).state(), TASK_STATE_CONNECTED);
  EXPECT_EQ(now.task_state(0).incarnation(), a->incarnation());
  EXPECT_EQ(now.task_state(1).state(), TASK_STATE_DISCONNECTED);
  // A watch from that version returns when launcher:1 registers.
  watch.set_version_number(now.version_number());
  watch.set_timeout_ms(20000);
  WatchJobStateResponse later;
  std::unique_ptr<CoordinationAgent> b;
  std::thread joiner([&] { b = Agent(1, nullptr); });
  ASSERT_TRUE((*joined)->WatchJobState(watch, &later, CallOptions()).ok());
  joiner.join();
  EXPECT_GT(later.version_number(), now.version_number());
  EXPECT_EQ(later.task_state(1).state(), TASK_STATE_CONNECTED);

  // A prefix with no job: a clear error.
  joined = NewCoordinationClient(etcd_.Url("/nothing-here"), {});
  EXPECT_TRUE(absl::IsFailedPrecondition(joined.status())) << joined.status();
  EXPECT_THAT(joined.status().message(), HasSubstr("no cohort job at etcd"));
}

TEST_F(EtcdCoordinationTest, MalformedRecordsAreErrorsNotCrashes) {
  // Anyone with access to the prefix can write these: wrong types must not
  // throw (and kill the process).
  ASSERT_TRUE(etcd_client_
                  ->Put("bad/job", R"({"job_id":5,"jobs":{"w":1},)"
                                   R"("heartbeat_timeout_ms":"10"})")
                  .ok());
  absl::StatusOr<std::unique_ptr<CoordinationClient>> joined =
      NewCoordinationClient(etcd_.Url("/job/bad"), {});
  EXPECT_TRUE(absl::IsFailedPrecondition(joined.status())) << joined.status();
  EXPECT_THAT(joined.status().message(), HasSubstr("names no tasks or no job"));
  ASSERT_TRUE(etcd_client_->Put("bad2/job", R"({"jobs":{"w":"many"}})").ok());
  joined = NewCoordinationClient(etcd_.Url("/job/bad2"), {});
  EXPECT_TRUE(absl::IsFailedPrecondition(joined.status())) << joined.status();

  ErrorSink a_errors;
  std::unique_ptr<CoordinationAgent> a = Agent(0, &a_errors);
  ASSERT_TRUE(a);
  ASSERT_TRUE(etcd_client_
                  ->Put("launchers/status/error",
                        R"({"code":"x","task":5,"message":["m"]})")
                  .ok());
  ASSERT_TRUE(a_errors.got.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(a_errors.error.code(), absl::StatusCode::kUnknown)
      << a_errors.error;
}

TEST_F(EtcdCoordinationTest, AnErrorMessageOfAnyBytesReachesTheOthers) {
  ErrorSink a_errors;
  std::unique_ptr<CoordinationAgent> a = Agent(0, &a_errors);
  std::unique_ptr<CoordinationAgent> b = Agent(1, nullptr);
  ASSERT_TRUE(a && b);
  // Not UTF-8, and a multi-byte character cut by the 4 KiB limit.
  std::string message = "bad \xff\xfe bytes ";
  message += std::string(4090 - message.size(), 'x') + "\xc3\xa9\xc3\xa9";
  ASSERT_TRUE(b->ReportError(absl::InternalError(message)).ok());
  ASSERT_TRUE(a_errors.got.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(absl::IsInternal(a_errors.error)) << a_errors.error;
  EXPECT_THAT(a_errors.error.message(), HasSubstr("bad "));
  EXPECT_THAT(a_errors.error.message(), HasSubstr(" bytes xxx"));
}

TEST_F(EtcdCoordinationTest, AWatchFromAVersionSeesADeleteThatCameFirst) {
  std::unique_ptr<CoordinationAgent> a = Agent(0, nullptr);
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->InsertKeyValue("gen", "1").ok());
  absl::StatusOr<KeyValueWatchResult> w =
      a->WatchKeyValue("gen", 0, absl::Seconds(5));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(a->DeleteKeyValue("gen").ok());
  // The delete came before the watch: reported, not waited past (the
  // watch would end DeadlineExceeded).
  absl::StatusOr<KeyValueWatchResult> gone =
      a->WatchKeyValue("gen", w->version, absl::Seconds(20));
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_FALSE(gone->present);
  EXPECT_GT(gone->version, w->version);
}

}  // namespace
}  // namespace cohort::coord
