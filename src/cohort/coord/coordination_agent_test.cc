#include "cohort/coord/coordination_agent.h"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "cohort/base/fake_env.h"
#include "cohort/base/status.h"
#include "cohort/coord/framed_coordination.h"
#include "cohort/coord/grpc_coordination_client.h"
#include "cohort/coord/in_process_cluster.h"
#include "cohort/coord/local_coordination_client.h"
#include "cohort/rpc/frame.h"
#include "cohort/rpc/socket.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::coord {
namespace {

using ::testing::HasSubstr;

CoordinationServiceOptions ServiceOptions(int n, Env* env,
                                          absl::Duration timeout) {
  CoordinationServiceOptions options;
  options.jobs = {{"worker", n}};
  options.heartbeat_timeout = timeout;
  options.env = env;
  return options;
}

// Waits (real time, bounded) for `cond`.
bool Eventually(const std::function<bool()>& cond,
                absl::Duration limit = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + limit;
  while (absl::Now() < end) {
    if (cond()) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return cond();
}

// Advances a fake clock by `total` in steps, each only once `parked`
// threads (the agent's heartbeat thread and the service's timer) wait on the
// clock again, i.e. have reacted to the previous step. Returns early once
// `until` holds (e.g. the agent went to ERROR and its heartbeat thread
// ended, so fewer threads will ever park again).
void AdvanceWhenParked(
    FakeEnv& env, absl::Duration total,
    const std::function<bool()>& until = [] { return false; }, int parked = 2,
    absl::Duration step = absl::Milliseconds(250)) {
  for (absl::Duration done; done < total; done += step) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (!env.BlockUntilParked(parked, absl::Milliseconds(5))) {
      if (until()) return;
      ASSERT_LT(absl::Now(), give_up)
          << "the agent and service threads never parked on the fake clock";
    }
    if (until()) return;
    env.AdvanceTime(step);
  }
}

TEST(CoordinationAgentTest, TasksMeetAtBarriersAndShareKeys) {
  auto cluster = InProcessCluster::Create(
      ServiceOptions(4, Env::Default(), absl::Seconds(10)));
  ASSERT_TRUE(cluster.ok());
  auto results = (*cluster)->RunTasks(4, [](CoordinationAgent& agent, int i) {
    COHORT_RETURN_IF_ERROR(agent.InsertKeyValue(absl::StrCat("addr/", i),
                                                absl::StrCat("host", i)));
    for (int round = 0; round < 5; ++round) {
      COHORT_RETURN_IF_ERROR(agent.WaitAtBarrier("step", absl::Seconds(10)));
    }
    COHORT_ASSIGN_OR_RETURN(auto dir, agent.GetKeyValueDir("addr"));
    if (dir.size() != 4) return absl::InternalError("missing addresses");
    COHORT_ASSIGN_OR_RETURN(
        std::string next, agent.GetKeyValue(absl::StrCat("addr/", (i + 1) % 4),
                                            absl::Seconds(5)));
    if (next != absl::StrCat("host", (i + 1) % 4)) {
      return absl::InternalError("wrong value");
    }
    COHORT_ASSIGN_OR_RETURN(int64_t n, agent.IncrementKeyValue("count", 1));
    if (n < 1 || n > 4) return absl::InternalError("bad count");
    return absl::OkStatus();
  });
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ((*cluster)->service()->GetJobStatus().job_state, "finished");
}

class OverTheWireTest : public ::testing::TestWithParam<bool> {
 protected:
  // The gRPC service, or the framed fast path (GetParam()).
  InProcessClusterOptions Wire() {
    InProcessClusterOptions o;
    o.grpc = !GetParam();
    o.framed = GetParam();
    return o;
  }
};

INSTANTIATE_TEST_SUITE_P(Transports, OverTheWireTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Framed" : "Grpc";
                         });

TEST_P(OverTheWireTest, SameTasks) {
  auto cluster = InProcessCluster::Create(
      ServiceOptions(3, Env::Default(), absl::Seconds(10)), Wire());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto results = (*cluster)->RunTasks(3, [](CoordinationAgent& agent, int i) {
    for (int round = 0; round < 3; ++round) {
      COHORT_RETURN_IF_ERROR(agent.WaitAtBarrier("b", absl::Seconds(10)));
    }
    COHORT_ASSIGN_OR_RETURN(auto alive,
                            agent.GetAliveTasks({}, absl::Seconds(10)));
    if (alive.size() != 3) return absl::InternalError("alive != 3");
    auto cas =
        agent.CompareAndSwapKeyValue("leader", std::nullopt, absl::StrCat(i));
    if (!cas.ok()) return cas.status();
    return absl::OkStatus();
  });
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
  auto leader = (*cluster)->service()->TryGetKeyValue("leader");
  ASSERT_TRUE(leader.ok());
}

TEST(CoordinationAgentTest, ReportedErrorReachesEveryOtherTaskOnce) {
  auto cluster = InProcessCluster::Create(
      ServiceOptions(3, Env::Default(), absl::Seconds(10)));
  ASSERT_TRUE(cluster.ok());
  std::vector<std::unique_ptr<CoordinationAgent>> agents;
  std::atomic<int> calls{0};
  for (int i = 0; i < 3; ++i) {
    CoordinationAgentOptions options;
    options.task = TaskId{"worker", i};
    options.error_callback = [&calls](const absl::Status&) { ++calls; };
    auto agent = (*cluster)->NewAgent(options);
    ASSERT_TRUE(agent.ok());
    ASSERT_TRUE((*agent)->Connect().ok());
    agents.push_back(std::move(*agent));
  }
  ASSERT_TRUE(agents[2]->ReportError(absl::InternalError("disk full")).ok());
  ASSERT_TRUE(Eventually([&] {
    return agents[0]->state() == CoordinationAgent::State::kError &&
           agents[1]->state() == CoordinationAgent::State::kError;
  }));
  EXPECT_THAT(agents[0]->error().message(), HasSubstr("worker:2"));
  EXPECT_THAT(agents[0]->error().message(), HasSubstr("disk full"));
  // The callbacks run after the state changes, outside the agent's lock.
  ASSERT_TRUE(Eventually([&] { return calls.load() >= 3; })) << calls.load();
  EXPECT_EQ(agents[0]->WaitAtBarrier("x", absl::Seconds(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  // Once every agent thread is joined no callback can come any more: the
  // count is final. Once per agent, the reporter included.
  agents.clear();
  EXPECT_EQ(calls.load(), 3);
}

TEST(CoordinationAgentTest, SilentTaskDetectedAtTimeoutOnFakeClock) {
  FakeEnv env;
  auto cluster =
      InProcessCluster::Create(ServiceOptions(2, &env, absl::Seconds(10)));
  ASSERT_TRUE(cluster.ok());
  CoordinationAgentOptions options;
  options.task = TaskId{"worker", 0};
  auto agent = (*cluster)->NewAgent(options);
  ASSERT_TRUE(agent.ok());
  ASSERT_TRUE((*agent)->Connect().ok());
  // worker:1 registers and then goes silent (a crashed process).
  absl::Notification registered;
  (*cluster)->service()->RegisterTaskAsync(
      TaskId{"worker", 1}, 77,
      [&](absl::StatusOr<uint64_t>) { registered.Notify(); });
  registered.WaitForNotification();
  // 9.75 s of silence: nothing happens yet.
  AdvanceWhenParked(env, absl::Milliseconds(9750));
  ASSERT_TRUE(env.BlockUntilParked(2));
  EXPECT_EQ((*agent)->state(), CoordinationAgent::State::kConnected);
  // The step to exactly 10 s: worker:1's heartbeat timeout.
  env.AdvanceTime(absl::Milliseconds(250));
  ASSERT_TRUE(Eventually(
      [&] { return (*agent)->state() == CoordinationAgent::State::kError; }));
  EXPECT_EQ((*agent)->error().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT((*agent)->error().message(), HasSubstr("worker:1"));
  // The callback runs after the state change: wait for it, then it is the
  // only one.
  ASSERT_TRUE(Eventually([&] {
    return !(*cluster)->errors_for(TaskId{"worker", 0}).empty();
  }));
  EXPECT_EQ((*agent)->Shutdown().code(), absl::StatusCode::kOk);
  EXPECT_EQ((*cluster)->errors_for(TaskId{"worker", 0}).size(), 1u);
}

// A client whose heartbeats and polls fail in transport while `down`.
class FlakyClient : public LocalCoordinationClient {
 public:
  FlakyClient(CoordinationService* service, std::atomic<bool>* down)
      : LocalCoordinationClient(service), down_(down) {}
  void HeartbeatAsync(const HeartbeatRequest& request,
                      HeartbeatResponse* response, const CallOptions& options,
                      StatusCallback done) override {
    if (down_->load()) {
      done(absl::UnavailableError("connection reset (injected)"));
      return;
    }
    LocalCoordinationClient::HeartbeatAsync(request, response, options,
                                            std::move(done));
  }

 private:
  std::atomic<bool>* down_;
};

TEST(CoordinationAgentTest, TransportBlipShorterThanTimeoutIsHarmless) {
  FakeEnv env;
  auto cluster =
      // The service waits twice as long as the agent, so that when the
      // outage is long the agent is the one to notice, deterministically.
      InProcessCluster::Create(ServiceOptions(1, &env, absl::Seconds(8)));
  ASSERT_TRUE(cluster.ok());
  std::atomic<bool> down{false};
  CoordinationAgentOptions options;
  options.task = TaskId{"worker", 0};
  options.heartbeat_timeout = absl::Seconds(4);
  options.heartbeat_interval = absl::Milliseconds(500);
  options.env = &env;
  auto agent = CoordinationAgent::Create(
      options, std::make_unique<FlakyClient>((*cluster)->service(), &down));
  ASSERT_TRUE(agent.ok());
  ASSERT_TRUE((*agent)->Connect().ok());
  AdvanceWhenParked(env, absl::Seconds(2));
  down = true;
  AdvanceWhenParked(env, absl::Milliseconds(1500));
  down = false;
  AdvanceWhenParked(env, absl::Seconds(8));
  EXPECT_EQ((*agent)->state(), CoordinationAgent::State::kConnected)
      << (*agent)->error();
  // A longer outage is fatal, and says so.
  down = true;
  AdvanceWhenParked(env, absl::Seconds(6), [&] {
    return (*agent)->state() == CoordinationAgent::State::kError;
  });
  ASSERT_TRUE(Eventually(
      [&] { return (*agent)->state() == CoordinationAgent::State::kError; }));
  EXPECT_EQ((*agent)->error().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT((*agent)->error().message(), HasSubstr("lost contact"));
  EXPECT_THAT((*agent)->error().message(), HasSubstr("heartbeat timeout 4s"));
}

// A client that cannot reach the service for blocking calls.
class UnreachableClient : public LocalCoordinationClient {
 public:
  using LocalCoordinationClient::LocalCoordinationClient;
  void GetKeyValueAsync(const GetKeyValueRequest&, GetKeyValueResponse*,
                        const CallOptions&, StatusCallback done) override {
    done(absl::UnavailableError("connection refused (injected)"));
  }
  void WatchKeyValueAsync(const WatchKeyValueRequest&, WatchKeyValueResponse*,
                          const CallOptions&, StatusCallback done) override {
    done(absl::UnavailableError("connection refused (injected)"));
  }
  void BarrierAsync(const BarrierRequest&, BarrierResponse*, const CallOptions&,
                    StatusCallback done) override {
    done(absl::UnavailableError("connection refused (injected)"));
  }
};

TEST(CoordinationAgentTest, RetriesOfABlockingCallEndAtItsOwnTimeout) {
  FakeEnv env;
  auto cluster =
      InProcessCluster::Create(ServiceOptions(1, &env, absl::Seconds(60)));
  ASSERT_TRUE(cluster.ok());
  CoordinationAgentOptions options;
  options.task = TaskId{"worker", 0};
  // Far longer than the calls' timeouts: only those may end the retries.
  options.heartbeat_timeout = absl::Seconds(60);
  options.env = &env;
  auto agent = CoordinationAgent::Create(
      options, std::make_unique<UnreachableClient>((*cluster)->service()));
  ASSERT_TRUE(agent.ok());
  const std::vector<std::function<absl::Status()>> calls = {
      [&] { return (*agent)->GetKeyValue("k", absl::Seconds(2)).status(); },
      [&] {
        return (*agent)->WatchKeyValue("k", 0, absl::Seconds(2)).status();
      },
      [&] { return (*agent)->WaitAtBarrier("b", absl::Seconds(2)); },
  };
  for (size_t i = 0; i < calls.size(); ++i) {
    const absl::Time start = env.Now();
    std::atomic<bool> returned{false};
    absl::Status status;
    std::thread caller([&] {
      status = calls[i]();
      returned = true;
    });
    // The caller's backoff and the service's timer wait on the fake clock.
    // Without the deadline the retries would go on to the heartbeat timeout
    // (60 s).
    AdvanceWhenParked(
        env, absl::Seconds(90), [&] { return returned.load(); },
        /*parked=*/2);
    caller.join();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << i << status;
    EXPECT_THAT(status.message(), HasSubstr("connection refused")) << i;
    EXPECT_LE(env.Now() - start, absl::Seconds(2)) << "call " << i;
  }
}

TEST(CoordinationAgentTest, ServiceStopIsNotAnError) {
  auto cluster = InProcessCluster::Create(
      ServiceOptions(1, Env::Default(), absl::Seconds(10)));
  ASSERT_TRUE(cluster.ok());
  CoordinationAgentOptions options;
  options.task = TaskId{"worker", 0};
  std::atomic<int> error_calls{0};
  options.error_callback = [&](const absl::Status&) { ++error_calls; };
  auto agent = (*cluster)->NewAgent(options);
  ASSERT_TRUE((*agent)->Connect().ok());
  (*cluster)->service()->Stop();
  // The agent's own verdict, FailedPrecondition without asking the service
  // (a stopped service answers Internal), shows that its poll thread has
  // seen the stop and taken it as the end of the job.
  ASSERT_TRUE(Eventually([&] {
    absl::Status s = (*agent)->InsertKeyValue("k", "v");
    return s.code() == absl::StatusCode::kFailedPrecondition &&
           absl::StrContains(s.message(), "the job is over");
  }));
  EXPECT_EQ((*agent)->state(), CoordinationAgent::State::kConnected);
  EXPECT_TRUE((*agent)->Shutdown().ok());
  agent->reset();  // joins every agent thread: no callback can come later
  EXPECT_EQ(error_calls.load(), 0);
  EXPECT_TRUE((*cluster)->errors_for(TaskId{"worker", 0}).empty());
}

TEST(CoordinationAgentTest, BarrierFailsForSurvivorsWhenPeerDies) {
  auto cluster = InProcessCluster::Create(
      ServiceOptions(3, Env::Default(), absl::Seconds(10)));
  ASSERT_TRUE(cluster.ok());
  std::vector<std::unique_ptr<CoordinationAgent>> agents;
  for (int i = 0; i < 3; ++i) {
    CoordinationAgentOptions options;
    options.task = TaskId{"worker", i};
    auto agent = (*cluster)->NewAgent(options);
    ASSERT_TRUE((*agent)->Connect().ok());
    agents.push_back(std::move(*agent));
  }
  absl::Status s0, s1;
  std::thread t0(
      [&] { s0 = agents[0]->WaitAtBarrier("b", absl::Seconds(30)); });
  std::thread t1(
      [&] { s1 = agents[1]->WaitAtBarrier("b", absl::Seconds(30)); });
  ASSERT_TRUE(Eventually([&] {
    auto status = (*cluster)->service()->GetJobStatus();
    return !status.barriers.empty() && status.barriers[0].arrived.size() == 2;
  }));
  ASSERT_TRUE(agents[2]->ReportError(absl::AbortedError("preempted")).ok());
  t0.join();
  t1.join();
  EXPECT_FALSE(s0.ok());
  EXPECT_THAT(s0.message(), HasSubstr("worker:2"));
  EXPECT_FALSE(s1.ok());
}

TEST(CoordinationAgentTest, ConcurrentSameBarrierIsRejectedLocally) {
  auto cluster = InProcessCluster::Create(
      ServiceOptions(2, Env::Default(), absl::Seconds(10)));
  CoordinationAgentOptions options;
  options.task = TaskId{"worker", 0};
  auto agent = (*cluster)->NewAgent(options);
  ASSERT_TRUE((*agent)->Connect().ok());
  absl::Status first;
  std::thread t(
      [&] { first = (*agent)->WaitAtBarrier("b", absl::Seconds(30)); });
  ASSERT_TRUE(Eventually(
      [&] { return !(*cluster)->service()->GetJobStatus().barriers.empty(); }));
  EXPECT_EQ((*agent)->WaitAtBarrier("b", absl::Seconds(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*agent)->CancelBarrier("b").ok());
  t.join();
  EXPECT_EQ(first.code(), absl::StatusCode::kCancelled);
}

TEST_P(OverTheWireTest, ServiceErrorsKeepTheirCodeMessageAndPayload) {
  auto cluster = InProcessCluster::Create(
      ServiceOptions(1, Env::Default(), absl::Seconds(10)), Wire());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto results = (*cluster)->RunTasks(1, [](CoordinationAgent& agent, int) {
    absl::StatusOr<std::string> v =
        agent.GetKeyValue("never-set", absl::Milliseconds(50));
    if (v.status().code() != absl::StatusCode::kDeadlineExceeded ||
        !absl::StrContains(v.status().message(), "never-set")) {
      return absl::InternalError(absl::StrCat("get: ", v.status().ToString()));
    }
    COHORT_RETURN_IF_ERROR(agent.InsertKeyValue("k", "v"));
    absl::Status again = agent.InsertKeyValue("k", "w");
    if (again.code() != absl::StatusCode::kAlreadyExists ||
        !again
             .GetPayload(
                 "type.googleapis.com/cohort.coord.CoordinationServiceError")
             .has_value()) {
      return absl::InternalError(absl::StrCat("insert: ", again.ToString()));
    }
    return absl::OkStatus();
  });
  for (const auto& s : results) EXPECT_TRUE(s.ok()) << s;
}

TEST_P(OverTheWireTest, AsynchronousCallsCompleteWithTheirResponses) {
  auto cluster = InProcessCluster::Create(
      ServiceOptions(1, Env::Default(), absl::Seconds(10)), Wire());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = (*cluster)->NewClient();
  ASSERT_TRUE(client.ok()) << client.status();
  InsertKeyValueRequest insert;
  insert.mutable_kv()->set_key("k");
  insert.mutable_kv()->set_value("v");
  InsertKeyValueResponse inserted;
  absl::Notification done;
  absl::Status status = absl::UnknownError("not called");
  (*client)->InsertKeyValueAsync(insert, &inserted, CallOptions(),
                                 [&](absl::Status s) {
                                   status = s;
                                   done.Notify();
                                 });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(status.ok()) << status;
  auto value = (*cluster)->service()->TryGetKeyValue("k");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "v");
}

TEST_P(OverTheWireTest, CancellingAFinishedCallIsHarmless) {
  // The agent cancels its watch and poll calls at shutdown, finished or
  // not; the transport must not touch a connection it already dropped
  // (ASan catches a use after free here).
  auto cluster = InProcessCluster::Create(
      ServiceOptions(1, Env::Default(), absl::Seconds(10)), Wire());
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto client = (*cluster)->NewClient();
  ASSERT_TRUE(client.ok()) << client.status();
  for (int i = 0; i < 3; ++i) {
    CallCancellation cancellation;
    CallOptions options;
    options.cancellation = &cancellation;
    TryGetKeyValueRequest request;
    request.set_key("absent");
    TryGetKeyValueResponse response;
    absl::Status s = (*client)->TryGetKeyValue(request, &response, options);
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
    cancellation.Cancel();
  }
  // The client still works afterwards.
  TryGetKeyValueRequest request;
  request.set_key("absent");
  TryGetKeyValueResponse response;
  EXPECT_EQ((*client)->TryGetKeyValue(request, &response, CallOptions()).code(),
            absl::StatusCode::kNotFound);
}

// Reads one frame from a socket; empty when the peer closed, or (a test
// failure) when nothing came within 20 s.
std::string ReadFrameFrom(int fd) {
  rpc::FrameReader reader(1 << 20);
  std::string frame;
  char buf[4096];
  while (reader.Next(&frame) != rpc::FrameReader::Result::kFrame) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20000) <= 0) {
      ADD_FAILURE() << "no frame and no EOF within 20 s";
      return "";
    }
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return "";
    reader.Append(buf, static_cast<size_t>(n));
  }
  return frame;
}

// A raw, authenticated connection to a framed coordination endpoint.
rpc::UniqueFd RawFramedConnection(const std::string& address,
                                  const std::string& token) {
  auto fd = rpc::ConnectTcp(address, absl::Now() + absl::Seconds(10));
  EXPECT_TRUE(fd.ok()) << fd.status();
  if (!fd.ok()) return rpc::UniqueFd();
  absl::StatusOr<std::string> nonce =
      rpc::ParseGreeting(ReadFrameFrom(fd->get()));
  EXPECT_TRUE(nonce.ok()) << nonce.status();
  std::string out;
  rpc::AppendFrame(&out, rpc::HelloProof(token, nonce.value_or(""),
                                         kFramedCoordinationIdentity));
  EXPECT_EQ(write(fd->get(), out.data(), out.size()),
            static_cast<ssize_t>(out.size()));
  EXPECT_FALSE(ReadFrameFrom(fd->get()).empty());  // the handshake's OK
  return *std::move(fd);
}

// Sends `n` blocking gets of a key nobody sets (each parks), tags from
// `first_tag`.
void SendParkedGets(int fd, int n, uint32_t first_tag) {
  GetKeyValueRequest get;
  get.set_key("never");
  get.set_timeout_ms(60000);
  std::string out;
  for (int i = 0; i < n; ++i) {
    rpc::AppendTaggedRequestFrame(&out, first_tag + i, "\x09",
                                  get.SerializeAsString());
  }
  ASSERT_EQ(write(fd, out.data(), out.size()),
            static_cast<ssize_t>(out.size()));
}

class FramedCapsTest : public ::testing::Test {
 protected:
  void Start(FramedCoordinationLimits limits) {
    auto service = CoordinationService::Create(
        ServiceOptions(1, Env::Default(), absl::Seconds(10)));
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
    handler_ =
        std::make_unique<FramedCoordinationService>(service_.get(), limits);
    rpc::FramedServerOptions options;
    options.job_token = "right";
    options.identity = kFramedCoordinationIdentity;
    auto server = rpc::FramedServer::Start(options, handler_.get());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    server_.reset();
    if (service_ != nullptr) service_->Stop();
  }

  std::unique_ptr<CoordinationService> service_;
  std::unique_ptr<FramedCoordinationService> handler_;
  std::unique_ptr<rpc::FramedServer> server_;
};

TEST_F(FramedCapsTest, ACallOverTheConnectionsCapIsRefusedNotParked) {
  FramedCoordinationLimits limits;
  limits.max_calls_per_connection = 2;
  ASSERT_NO_FATAL_FAILURE(Start(limits));
  rpc::UniqueFd fd = RawFramedConnection(server_->address(), "right");
  ASSERT_TRUE(fd.valid());
  SendParkedGets(fd.get(), 2, 1);
  ASSERT_TRUE(Eventually([&] { return handler_->calls_in_flight() == 2; }));
  // The third is one too many: answered at once with its own tag, while
  // the two parked calls stay parked.
  SendParkedGets(fd.get(), 1, 3);
  absl::StatusOr<rpc::TaggedReply> reply =
      rpc::ParseTaggedReply(ReadFrameFrom(fd.get()));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->tag, 3u);
  EXPECT_EQ(reply->code, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(reply->body, HasSubstr("2 coordination calls in flight"));
  EXPECT_EQ(handler_->calls_in_flight(), 2);
  EXPECT_EQ(server_->num_connections(), 1);
}

TEST_F(FramedCapsTest, TheServiceWideCapAnswersResourceExhausted) {
  FramedCoordinationLimits limits;
  limits.max_calls = 3;
  ASSERT_NO_FATAL_FAILURE(Start(limits));
  rpc::UniqueFd a = RawFramedConnection(server_->address(), "right");
  rpc::UniqueFd b = RawFramedConnection(server_->address(), "right");
  ASSERT_TRUE(a.valid() && b.valid());
  SendParkedGets(a.get(), 2, 1);
  ASSERT_TRUE(Eventually([&] { return handler_->calls_in_flight() == 2; }));
  SendParkedGets(b.get(), 2, 7);
  // b's first call parks (the third in all), its second is refused with its
  // own tag; the connection stays open.
  absl::StatusOr<rpc::TaggedReply> reply =
      rpc::ParseTaggedReply(ReadFrameFrom(b.get()));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->tag, 8u);
  EXPECT_EQ(reply->code, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(reply->body, HasSubstr("3 calls in flight"));
  EXPECT_EQ(handler_->calls_in_flight(), 3);
}

TEST_P(OverTheWireTest, WrongTokenIsUnauthenticatedAndGetsNoData) {
  InProcessClusterOptions options = Wire();
  options.security.job_token = "right";
  auto cluster = InProcessCluster::Create(
      ServiceOptions(1, Env::Default(), absl::Seconds(10)), options);
  ASSERT_TRUE(cluster.ok());
  ASSERT_TRUE((*cluster)
                  ->service()
                  ->InsertKeyValue("secret", "s3cr3t-value", false)
                  .ok());
  for (std::string token : {"wrong", ""}) {
    rpc::TransportSecurity security;
    security.job_token = token;
    auto client = NewCoordinationClient(
        GetParam() ? (*cluster)->framed_target() : (*cluster)->target(),
        security);
    ASSERT_TRUE(client.ok());
    CoordinationAgentOptions agent_options;
    agent_options.task = TaskId{"worker", 0};
    agent_options.register_timeout = absl::Seconds(2);
    auto agent = CoordinationAgent::Create(agent_options, std::move(*client));
    auto value = (*agent)->TryGetKeyValue("secret");
    EXPECT_THAT(value.status().message(), ::testing::Not(HasSubstr("s3cr3t")));
    if (GetParam() || !token.empty()) {
      // Refused on the token (framed), or on the certificate of another
      // token's CA (gRPC's job TLS): at once, saying so.
      EXPECT_EQ(value.status().code(), absl::StatusCode::kUnauthenticated)
          << value.status();
      EXPECT_EQ((*agent)->Connect().code(), absl::StatusCode::kUnauthenticated);
      continue;
    }
    // gRPC without a token: plaintext to a TLS server, which closes the
    // connection. No call arrives; the error says the client has no token.
    EXPECT_EQ(value.status().code(), absl::StatusCode::kUnavailable)
        << value.status();
    EXPECT_THAT(value.status().message(), HasSubstr("no job token"));
    absl::Status connect = (*agent)->Connect();
    EXPECT_EQ(connect.code(), absl::StatusCode::kDeadlineExceeded) << connect;
    EXPECT_THAT(connect.message(), HasSubstr("no job token"));
  }
}

TEST(CoordinationAgentTest, ReconnectsWithNewIncarnationWhenDeclaredDead) {
  CoordinationServiceOptions service =
      ServiceOptions(2, Env::Default(), absl::Seconds(2));
  service.recoverable_jobs = {"worker"};
  auto cluster = InProcessCluster::Create(service);
  ASSERT_TRUE(cluster.ok());
  CoordinationAgentOptions options;
  options.task = TaskId{"worker", 0};
  options.heartbeat_interval = absl::Milliseconds(100);
  options.reconnect_after_heartbeat_timeout = true;
  auto agent = (*cluster)->NewAgent(options);
  ASSERT_TRUE((*agent)->Connect().ok());
  const uint64_t first = (*agent)->incarnation();
  // The service declares the task dead (as after a long stall).
  ASSERT_TRUE((*cluster)
                  ->service()
                  ->ReportErrorToService(TaskId{"worker", 0},
                                         absl::UnavailableError("stalled"))
                  .ok());
  // The agent picks its new incarnation before it registers it, so wait for
  // both: the new incarnation and the state that its registration brings.
  ASSERT_TRUE(Eventually([&] {
    return (*agent)->incarnation() != first &&
           (*agent)->state() == CoordinationAgent::State::kConnected;
  }));
  auto states = (*cluster)->service()->GetTaskState({TaskId{"worker", 0}});
  ASSERT_TRUE(states.ok());
  EXPECT_EQ((*states)[0].state, TaskState::kConnected);
  EXPECT_EQ((*states)[0].incarnation, (*agent)->incarnation());
  EXPECT_TRUE((*cluster)->errors_for(TaskId{"worker", 0}).empty());
}

// A task stalled (SIGSTOP) or cut off past the heartbeat timeout is declared
// dead; when it comes back it is re-admitted with a new incarnation and
// watched again, so a second stall is detected like the first.
TEST(CoordinationAgentTest, StalledTaskIsReadmittedAndWatchedAgain) {
  FakeEnv env;
  CoordinationServiceOptions service =
      ServiceOptions(1, &env, absl::Seconds(4));
  service.recoverable_jobs = {"worker"};
  auto cluster = InProcessCluster::Create(service);
  ASSERT_TRUE(cluster.ok());
  std::atomic<bool> down{false};
  CoordinationAgentOptions options;
  options.task = TaskId{"worker", 0};
  options.heartbeat_timeout = absl::Seconds(4);
  options.heartbeat_interval = absl::Milliseconds(500);
  options.reconnect_after_heartbeat_timeout = true;
  options.poll_for_errors = false;
  options.env = &env;
  auto agent = CoordinationAgent::Create(
      options, std::make_unique<FlakyClient>((*cluster)->service(), &down));
  ASSERT_TRUE(agent.ok());
  ASSERT_TRUE((*agent)->Connect().ok());
  auto state = [&] {
    auto states = (*cluster)->service()->GetTaskState({options.task});
    return states.ok() ? (*states)[0] : TaskStateSnapshot{};
  };
  for (int stall = 0; stall < 2; ++stall) {
    SCOPED_TRACE(absl::StrCat("stall ", stall));
    const uint64_t before = (*agent)->incarnation();
    down = true;
    AdvanceWhenParked(env, absl::Seconds(6));
    EXPECT_EQ(state().state, TaskState::kError) << "the stall went unseen";
    EXPECT_EQ((*agent)->state(), CoordinationAgent::State::kConnected)
        << (*agent)->error();
    down = false;
    AdvanceWhenParked(env, absl::Seconds(2));
    ASSERT_TRUE(Eventually([&] {
      return state().state == TaskState::kConnected &&
             state().incarnation == (*agent)->incarnation();
    })) << "not re-admitted";
    EXPECT_NE((*agent)->incarnation(), before);
  }
  EXPECT_TRUE((*cluster)->errors_for(options.task).empty());
}

// An agent of an attempt that ended (its process outlived the attempt)
// sends its incarnation on every per-task call, so the service refuses what
// it says instead of applying it to the next attempt's task of the same
// name.
TEST(CoordinationAgentTest, AnAgentOfAnEndedAttemptCannotActOnTheNext) {
  FakeEnv env;  // no time passes: no heartbeat, no deadline
  auto cluster =
      InProcessCluster::Create(ServiceOptions(2, &env, absl::Seconds(10)));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  CoordinationService* service = (*cluster)->service();
  const TaskId w0{"worker", 0};
  CoordinationAgentOptions options;
  options.task = w0;
  options.poll_for_errors = false;
  options.env = &env;
  auto stale = (*cluster)->NewAgent(options);
  ASSERT_TRUE(stale.ok()) << stale.status();
  ASSERT_TRUE((*stale)->Connect().ok());
  const uint64_t old_incarnation = (*stale)->incarnation();
  ASSERT_TRUE(service->ResetForNextAttempt({}, "attempt 1 ended").ok());
  // The next attempt's w0.
  const uint64_t next_incarnation = old_incarnation + 1;
  absl::Notification registered;
  service->RegisterTaskAsync(w0, next_incarnation,
                             [&](absl::StatusOr<uint64_t> r) {
                               EXPECT_TRUE(r.ok()) << r.status();
                               registered.Notify();
                             });
  ASSERT_TRUE(registered.WaitForNotificationWithTimeout(absl::Seconds(10)));

  auto expect_refused = [&](const absl::Status& s, const char* call) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition)
        << call << ": " << s;
    EXPECT_THAT(s.message(),
                HasSubstr(absl::StrCat("incarnation ", old_incarnation, ":")))
        << call;
    EXPECT_THAT(s.message(), HasSubstr("a process of an ended attempt?"))
        << call;
  };
  // w0 alone: were it let in, it would pass at once (nothing to wait for
  // on a clock that does not move).
  expect_refused((*stale)->WaitAtBarrier("step", absl::Seconds(5), {w0}),
                 "Barrier");
  expect_refused((*stale)->CancelBarrier("step"), "CancelBarrier");
  expect_refused((*stale)->ReportError(absl::InternalError("stale")),
                 "ReportError");
  expect_refused((*stale)->Shutdown(), "Shutdown");

  auto states = service->GetTaskState({w0});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ((*states)[0].state, TaskState::kConnected);
  EXPECT_EQ((*states)[0].incarnation, next_incarnation);
  EXPECT_TRUE((*states)[0].error.ok()) << (*states)[0].error;
  EXPECT_FALSE((*states)[0].shut_down);
  EXPECT_TRUE(service->GetJobStatus().barriers.empty());
}

}  // namespace
}  // namespace cohort::coord
