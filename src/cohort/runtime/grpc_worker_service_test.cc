// The worker over real gRPC on 127.0.0.1:0: GrpcWorkerService,
// GrpcRemoteWorker and GrpcWorkerCache, with two workers exchanging a
// tensor through Send/Recv partitions.
#include "cohort/runtime/grpc_worker_service.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "cohort/graph/device.h"
#include "cohort/graph/rendezvous.h"
#include "cohort/rpc/transport.h"
#include "cohort/runtime/grpc_remote_worker.h"
#include "cohort/runtime/grpc_worker_cache.h"
#include "cohort/runtime/worker.h"
#include "cohort/runtime/worker_errors.h"
#include "cohort/runtime/worker_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace testing;  // NOLINT: the test helpers

constexpr char kToken[] = "job-token-for-tests";

// Lets a Worker be built before its GrpcWorkerCache, which needs the ports
// the servers got from the OS.
class ForwardingCache : public WorkerCache {
 public:
  std::vector<std::string> ListTasks() const override {
    return target->ListTasks();
  }
  absl::StatusOr<WorkerInterface*> GetWorker(const std::string& t) override {
    return target->GetWorker(t);
  }
  std::string TaskAddress(const std::string& t) const override {
    return target->TaskAddress(t);
  }
  WorkerCache* target = nullptr;
};

struct TestTask {
  explicit TestTask(const std::string& task)
      : name(task), device(Dev(task), 2) {
    WorkerEnv env;
    env.task_name = task;
    env.device = &device;
    env.worker_cache = &cache;
    worker = std::make_unique<Worker>(env);
    service = std::make_unique<GrpcWorkerService>(worker.get(), kToken);
    rpc::TransportSecurity security;
    security.job_token = kToken;
    auto started =
        rpc::StartGrpcServer("127.0.0.1:0", {service.get()}, security);
    EXPECT_TRUE(started.ok()) << started.status();
    server = std::move(*started);
  }
  ~TestTask() {
    // Stop first so parked calls finish, then shut gRPC down.
    worker->Stop(StoppingError(name));
    server.server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  }
  std::string address() const {
    return "127.0.0.1:" + std::to_string(server.port);
  }

  std::string name;
  Device device;
  ForwardingCache cache;
  std::unique_ptr<Worker> worker;
  std::unique_ptr<GrpcWorkerService> service;
  rpc::GrpcServer server;
  std::unique_ptr<GrpcWorkerCache> real_cache;
};

class GrpcWorkerTest : public ::testing::Test {
 protected:
  const std::string kA = Task("a", 0);
  const std::string kB = Task("b", 0);

  void SetUp() override {
    a_ = std::make_unique<TestTask>(kA);
    b_ = std::make_unique<TestTask>(kB);
    JobDef* ja = cluster_.add_job();
    ja->set_name("a");
    (*ja->mutable_tasks())[0] = a_->address();
    JobDef* jb = cluster_.add_job();
    jb->set_name("b");
    (*jb->mutable_tasks())[0] = b_->address();
    for (TestTask* t : {a_.get(), b_.get()}) {
      t->real_cache = *GrpcWorkerCache::Create(cluster_, t->name,
                                               t->worker.get(), Security());
      t->cache.target = t->real_cache.get();
    }
    // The "master": reaches both tasks through gRPC.
    client_ = *GrpcWorkerCache::Create(cluster_, "", nullptr, Security());
    wa_ = *client_->GetWorker(kA);
    wb_ = *client_->GetWorker(kB);
  }

  static rpc::TransportSecurity Security(const std::string& token = kToken) {
    rpc::TransportSecurity s;
    s.job_token = token;
    return s;
  }

  void CreateSessions() {
    CreateWorkerSessionRequest req;
    req.set_session_handle("s");
    ASSERT_TRUE(DoCreateWorkerSession(wa_, req).ok());
    ASSERT_TRUE(DoCreateWorkerSession(wb_, req).ok());
  }
  uint64_t IncarnationOf(WorkerInterface* w) {
    GetStatusResponse resp;
    EXPECT_TRUE(DoGetStatus(w, {}, &resp).ok());
    return resp.device_attributes(0).incarnation();
  }
  std::string Register(WorkerInterface* w, const GraphDef& g,
                       const std::vector<std::string>& fetches) {
    RegisterGraphRequest req;
    req.set_session_handle("s");
    *req.mutable_graph_def() = g;
    for (const auto& f : fetches) req.add_fetch(f);
    RegisterGraphResponse resp;
    absl::Status s = DoRegisterGraph(w, req, &resp);
    EXPECT_TRUE(s.ok()) << s;
    return resp.graph_handle();
  }
  static RunGraphRequest Run(const std::string& graph, int64_t step) {
    RunGraphRequest req;
    req.set_session_handle("s");
    req.set_graph_handle(graph);
    req.set_step_id(step);
    return req;
  }
  // B's partition: r = Recv(tensor_name) from A; y = r + r.
  std::string RegisterRecvOnB(const std::string& tensor_name,
                              uint64_t a_incarnation) {
    GraphDef g;
    AddRecv(&g, "r", tensor_name, Dev(kA), Dev(kB), a_incarnation);
    AddAdd(&g, "y", "r", "r", Dev(kB));
    return Register(wb_, g, {"r:0", "y:0"});
  }

  ClusterDef cluster_;
  std::unique_ptr<TestTask> a_;
  std::unique_ptr<TestTask> b_;
  std::unique_ptr<GrpcWorkerCache> client_;
  WorkerInterface* wa_ = nullptr;
  WorkerInterface* wb_ = nullptr;
};

TEST_F(GrpcWorkerTest, TwoWorkersMoveATensorThroughSendAndRecv) {
  CreateSessions();
  const uint64_t inc_a = IncarnationOf(wa_);
  EXPECT_EQ(inc_a, a_->device.incarnation());
  GraphDef ga;
  AddConst(&ga, "c", Tensor::Vec<float>({1, 2, 3}), Dev(kA));
  AddSend(&ga, "send", "c", "edge_1_c", Dev(kA), Dev(kB), inc_a);
  const std::string pa = Register(wa_, ga, {});
  const std::string pb = RegisterRecvOnB("edge_1_c", inc_a);
  for (int64_t step : {77, 78}) {
    // B first: its Recv asks A before A's partition ran (A's rendezvous is
    // created by the RecvTensor and waits); the order must not matter.
    auto run_b = StartRunGraph(wb_, Run(pb, step));
    auto run_a = StartRunGraph(wa_, Run(pa, step));
    ASSERT_TRUE(run_a->Result().ok()) << run_a->status;
    ASSERT_TRUE(run_b->Result().ok()) << run_b->status;
    ASSERT_EQ(run_b->response.recv_size(), 2);
    EXPECT_TRUE(Tensor::FromProto(run_b->response.recv(0).tensor())
                    ->Equals(Tensor::Vec<float>({1, 2, 3})));
    EXPECT_TRUE(Tensor::FromProto(run_b->response.recv(1).tensor())
                    ->Equals(Tensor::Vec<float>({2, 4, 6})));
    CleanupGraphRequest cleanup;
    cleanup.set_step_id(step);
    ASSERT_TRUE(DoCleanupGraph(wa_, cleanup).ok());
    ASSERT_TRUE(DoCleanupGraph(wb_, cleanup).ok());
  }
  EXPECT_EQ(a_->worker->NumStepRendezvous(), 0u);
  EXPECT_EQ(b_->worker->NumStepRendezvous(), 0u);
}

TEST_F(GrpcWorkerTest, WorkerErrorsCrossTheWireIntact) {
  RegisterGraphRequest req;
  req.set_session_handle("nope");
  absl::Status s = DoRegisterGraph(wa_, req);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(),
            "Session handle is not found: nope. Possibly this worker "
            "(\"/job:a/replica:0/task:0\") just restarted.");
  EXPECT_TRUE(IsWorkerPossiblyRestarted(s));
  // A node error keeps its code.
  CreateSessions();
  GraphDef g;
  AddVar(&g, "v", "unset", Dev(kA));
  AddRead(&g, "r", "v", Dev(kA));
  s = DoRunGraph(wa_, Run(Register(wa_, g, {"r:0"}), 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), StartsWith("node 'r' (op ReadVariableOp) on "
                                      "/job:a/replica:0/task:0: "));
}

// Job TLS: a wrong token fails the handshake on the server's certificate
// (Unauthenticated); with no token the client speaks plaintext to a TLS
// server, which closes the connection (Unavailable). Neither call arrives.
TEST_F(GrpcWorkerTest, WrongOrMissingTokenIsRefusedAndChangesNothing) {
  for (const std::string token : {"wrong", ""}) {
    auto channel = rpc::CreateChannel(a_->address(), Security(token));
    ASSERT_TRUE(channel.ok());
    GrpcRemoteWorker intruder(kA, a_->address(), *channel, Security(token));
    const absl::StatusCode refused = token.empty()
                                         ? absl::StatusCode::kUnavailable
                                         : absl::StatusCode::kUnauthenticated;
    CreateWorkerSessionRequest create;
    create.set_session_handle("x");
    absl::Status s = DoCreateWorkerSession(&intruder, create);
    EXPECT_EQ(s.code(), refused) << token << s;
    GetStatusResponse status;
    EXPECT_EQ(DoGetStatus(&intruder, {}, &status).code(), refused);
    EXPECT_EQ(status.device_attributes_size(), 0);  // no data
    // The collective group leader's calls too: nothing joins, nothing waits.
    CompleteGroupRequest join;
    join.set_group_key(1);
    join.set_group_size(2);
    join.set_task(kA);
    EXPECT_EQ(DoCompleteGroup(&intruder, join).code(), refused) << token;
    CompleteInstanceRequest round;
    round.set_group_key(1);
    round.set_task(kA);
    round.set_payload(std::string(64, 'x'));
    EXPECT_EQ(DoCompleteInstance(&intruder, round).code(), refused) << token;
  }
  RegisterGraphRequest req;
  req.set_session_handle("x");
  EXPECT_TRUE(IsWorkerPossiblyRestarted(DoRegisterGraph(wa_, req)));
}

TEST_F(GrpcWorkerTest, TransportFailureIsUnavailableNamingTaskAndAddress) {
  // A port nothing listens on.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  const std::string address =
      "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  const std::string task = Task("c", 0);
  GrpcRemoteWorker dead(task, address, *rpc::CreateChannel(address, Security()),
                        Security());
  absl::Status s = DoGetStatus(&dead, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(),
              StartsWith(task + " (" + address + ") is unavailable: "));
  EXPECT_THAT(s.message(),
              EndsWith(". Additional GRPC error information from remote "
                       "target " +
                       task));
}

TEST_F(GrpcWorkerTest, RemoteWorkersUnavailableAnswerIsNotRewritten) {
  a_->worker->Stop(StoppingError(kA));
  absl::Status s = DoGetStatus(wa_, {});
  EXPECT_EQ(
      s, absl::UnavailableError("server /job:a/replica:0/task:0 is stopping"));
}

TEST_F(GrpcWorkerTest, StopEndsAStepWaitingOnARemoteRecvPromptly) {
  CreateSessions();
  // A never runs a partition for this step: B's Recv waits in A.
  const std::string pb = RegisterRecvOnB("never", IncarnationOf(wa_));
  auto run_b = StartRunGraph(wb_, Run(pb, 5));
  EXPECT_FALSE(run_b->Wait(absl::Milliseconds(50)));
  const absl::Time start = absl::Now();
  b_->worker->Stop(StoppingError(kB));
  EXPECT_EQ(
      run_b->Result(absl::Seconds(10)),
      absl::UnavailableError("server /job:b/replica:0/task:0 is stopping"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(GrpcWorkerTest, StepDeadlineOverGrpcIsDeadlineExceeded) {
  CreateSessions();
  const std::string pb = RegisterRecvOnB("never", IncarnationOf(wa_));
  RunGraphRequest req = Run(pb, 6);
  req.set_timeout_in_ms(100);
  absl::Status s = DoRunGraph(wb_, req);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  // The CallOptions deadline becomes the gRPC deadline.
  auto call =
      StartRunGraph(wb_, Run(pb, 7), absl::Now() + absl::Milliseconds(100));
  EXPECT_EQ(call->Result().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(GrpcWorkerTest, RecvTensorRulesOverGrpc) {
  CreateSessions();
  const uint64_t inc_a = IncarnationOf(wa_);
  auto request = [&](int64_t step, uint64_t inc) {
    RecvTensorRequest r;
    r.set_step_id(step);
    r.set_rendezvous_key(Rendezvous::CreateKey(Dev(kA), inc, Dev(kB), "t"));
    return r;
  };
  // A client cancel ends the call at once. (Over gRPC the server drops its
  // waiter when the cancel reaches it, later; that it drops only that
  // waiter is tested in process, worker_steps_test.cc. The value below is sent
  // in step 5 only after the cancelled call used step 4, so the two never
  // race for it.)
  auto waiting = StartRecvTensor(wa_, request(4, inc_a));
  EXPECT_FALSE(waiting->Wait(absl::Milliseconds(50)));
  waiting->opts.StartCancel();
  EXPECT_EQ(waiting->Result().code(), absl::StatusCode::kCancelled);
  GraphDef ga;
  AddConst(&ga, "c", Tensor(8.0f), Dev(kA));
  AddSend(&ga, "send", "c", "t", Dev(kA), Dev(kB), inc_a);
  ASSERT_TRUE(DoRunGraph(wa_, Run(Register(wa_, ga, {}), 5)).ok());
  RecvTensorResponse resp;
  ASSERT_TRUE(DoRecvTensor(wa_, request(5, inc_a), &resp).ok());
  EXPECT_TRUE(Tensor::FromProto(resp.tensor())->Equals(Tensor(8.0f)));
  // Stale incarnation.
  absl::Status s = DoRecvTensor(wa_, request(5, inc_a + 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(
      s.message(),
      StartsWith("RecvTensor expects a different device incarnation: " +
                 std::to_string(inc_a + 1) + " vs. " + std::to_string(inc_a) +
                 ". Your worker job was "
                 "probably restarted."));
  // After Cleanup: Aborted at once.
  CleanupGraphRequest cleanup;
  cleanup.set_step_id(5);
  ASSERT_TRUE(DoCleanupGraph(wa_, cleanup).ok());
  s = DoRecvTensor(wa_, request(5, inc_a));
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(s.message(), "Cleanup 5");
  EXPECT_TRUE(IsDerivedError(s));  // the payload crossed the wire
}

TEST_F(GrpcWorkerTest, CacheCallsTheLocalTaskInProcess) {
  GrpcWorkerCache& cache = *a_->real_cache;
  EXPECT_EQ(*cache.GetWorker(kA), a_->worker.get());
  EXPECT_EQ(*cache.GetWorker("/job:a/task:0"), a_->worker.get());
  WorkerInterface* b = *cache.GetWorker(kB);
  EXPECT_NE(b, b_->worker.get());
  EXPECT_EQ(*cache.GetWorker(kB), b);  // one client per task, made once
  EXPECT_EQ(cache.GetWorker(Task("zz", 0)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(cache.ListTasks(), (std::vector<std::string>{kA, kB}));
  EXPECT_EQ(cache.TaskAddress(kB), b_->address());
  EXPECT_EQ(cache.TaskAddress(Task("zz", 0)), "");
  // The same error through both paths.
  RegisterGraphRequest req;
  req.set_session_handle("nope");
  EXPECT_EQ(DoRegisterGraph(*cache.GetWorker(kA), req),
            DoRegisterGraph(wa_, req));
  // A local task outside the cluster is refused.
  EXPECT_EQ(
      GrpcWorkerCache::Create(cluster_, Task("zz", 0), nullptr, Security())
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cohort::runtime
