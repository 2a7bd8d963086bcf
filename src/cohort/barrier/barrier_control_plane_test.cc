// Barriers served by the job's coordination server (barrier_control_plane.h):
// one server answers the coordination service and the barrier coordinator
// on its gRPC port and its framed port, with one job token.
#include "cohort/barrier/barrier_control_plane.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/barrier/barrier_framed_handler.h"
#include "cohort/barrier/barrier_task_context.h"
#include "cohort/coord/framed_coordination.h"
#include "cohort/rpc/framed_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::barrier {
namespace {

using ::testing::ElementsAre;

constexpr char kToken[] = "control-plane-token";

// A coordination server for jobs {worker: 2} serving `coordinator`'s gang
// (0, 0) of two tasks.
std::unique_ptr<coord::CoordinationServer> StartControlPlane(
    const std::shared_ptr<BarrierCoordinator>& coordinator) {
  coord::CoordinationServerOptions options;
  options.security.job_token = kToken;
  options.service.jobs = {{"worker", 2}};
  EXPECT_TRUE(ServeBarriers(coordinator, options).ok());
  auto server = coord::CoordinationServer::Start(std::move(options));
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(server).value() : nullptr;
}

std::unique_ptr<BarrierTaskContext> Task(const BarrierEndpoints& at,
                                         int partition, bool tcp,
                                         const std::string& token) {
  BarrierTaskContext::Options o;
  o.coordinator_address = at.grpc;
  if (tcp) o.tcp_address = at.tcp;
  o.job_token = token;
  o.partition_id = partition;
  o.num_tasks = 2;
  o.task_attempt_id = 100 + partition;
  o.sync_timeout = absl::Seconds(30);
  auto ctx = BarrierTaskContext::Create(o);
  EXPECT_TRUE(ctx.ok()) << ctx.status();
  return ctx.ok() ? std::move(ctx).value() : nullptr;
}

absl::Status PutAndGet(const std::string& target, const std::string& token,
                       const std::string& key, std::string* value) {
  rpc::TransportSecurity security;
  security.job_token = token;
  auto client = coord::NewCoordinationClient(target, security);
  if (!client.ok()) return client.status();
  coord::CallOptions call;
  call.timeout = absl::Seconds(10);
  coord::InsertKeyValueRequest insert;
  insert.mutable_kv()->set_key(key);
  insert.mutable_kv()->set_value("v-" + key);
  coord::InsertKeyValueResponse inserted;
  absl::Status s = (*client)->InsertKeyValue(insert, &inserted, call);
  if (!s.ok()) return s;
  coord::TryGetKeyValueRequest get;
  get.set_key(key);
  coord::TryGetKeyValueResponse got;
  s = (*client)->TryGetKeyValue(get, &got, call);
  if (s.ok()) *value = got.kv().value();
  return s;
}

TEST(BarrierControlPlaneTest, OneServerAnswersCoordinationAndBarriers) {
  auto coordinator =
      std::make_shared<BarrierCoordinator>(Env::Default(), absl::Seconds(30));
  ASSERT_TRUE(coordinator->OpenGang(0, 0, 2).ok());
  auto server = StartControlPlane(coordinator);
  ASSERT_NE(server, nullptr);
  const BarrierEndpoints at = BarrierEndpointsOf(*server);
  // The barriers live at the coordination server's own endpoints.
  EXPECT_EQ(at.grpc, server->target());
  EXPECT_EQ(absl::StrCat(coord::kFramedTargetPrefix, at.tcp),
            server->framed_target());

  // The coordination service answers on both transports.
  std::string value;
  ASSERT_TRUE(PutAndGet(server->target(), kToken, "a", &value).ok());
  EXPECT_EQ(value, "v-a");
  ASSERT_TRUE(PutAndGet(server->framed_target(), kToken, "b", &value).ok());
  EXPECT_EQ(value, "v-b");

  // One gang, one task on each transport: both see both messages, so both
  // requests reached the one coordinator.
  auto grpc_task = Task(at, 0, /*tcp=*/false, kToken);
  auto tcp_task = Task(at, 1, /*tcp=*/true, kToken);
  ASSERT_NE(grpc_task, nullptr);
  ASSERT_NE(tcp_task, nullptr);
  absl::StatusOr<std::vector<std::string>> over_grpc, over_tcp;
  std::thread t0([&] { over_grpc = grpc_task->AllGather("from grpc"); });
  std::thread t1([&] { over_tcp = tcp_task->AllGather("from tcp"); });
  t0.join();
  t1.join();
  ASSERT_TRUE(over_grpc.ok()) << over_grpc.status();
  ASSERT_TRUE(over_tcp.ok()) << over_tcp.status();
  EXPECT_THAT(*over_grpc, ElementsAre("from grpc", "from tcp"));
  EXPECT_THAT(*over_tcp, ElementsAre("from grpc", "from tcp"));
  EXPECT_EQ(coordinator->Snapshot(0, 0)->epoch, 1);

  coordinator->CloseGang(0, 0, "test over");
  server->Stop();
}

TEST(BarrierControlPlaneTest, TheSharedEndpointRefusesAWrongTokenEverywhere) {
  auto coordinator =
      std::make_shared<BarrierCoordinator>(Env::Default(), absl::Seconds(30));
  ASSERT_TRUE(coordinator->OpenGang(0, 0, 2).ok());
  auto server = StartControlPlane(coordinator);
  ASSERT_NE(server, nullptr);
  const BarrierEndpoints at = BarrierEndpointsOf(*server);

  // Coordination service, gRPC and framed.
  std::string value;
  EXPECT_TRUE(absl::IsUnauthenticated(
      PutAndGet(server->target(), "wrong-token", "x", &value)));
  EXPECT_TRUE(absl::IsUnauthenticated(
      PutAndGet(server->framed_target(), "wrong-token", "y", &value)));
  // Barrier methods, gRPC and framed.
  auto grpc_task = Task(at, 0, /*tcp=*/false, "wrong-token");
  auto tcp_task = Task(at, 1, /*tcp=*/true, "wrong-token");
  ASSERT_NE(grpc_task, nullptr);
  ASSERT_NE(tcp_task, nullptr);
  absl::Status over_grpc = grpc_task->Barrier();
  absl::Status over_tcp = tcp_task->Barrier();
  EXPECT_TRUE(absl::IsUnauthenticated(over_grpc)) << over_grpc;
  EXPECT_TRUE(absl::IsUnauthenticated(over_tcp)) << over_tcp;
  // Nothing of the refused calls reached the service or the coordinator.
  auto listed = server->service()->TryGetKeyValue("x");
  EXPECT_TRUE(absl::IsNotFound(listed.status())) << listed.status();
  EXPECT_TRUE(
      absl::IsNotFound(server->service()->TryGetKeyValue("y").status()));
  EXPECT_TRUE(coordinator->Snapshot(0, 0)->waiting.empty());
  EXPECT_EQ(coordinator->Snapshot(0, 0)->epoch, 0);

  // The right token for a service this server does not have is refused
  // too: the handshake names the service, and no other answers for it.
  auto stranger = rpc::FramedClient::Connect(
      at.tcp, kToken, absl::Now() + absl::Seconds(10), rpc::kDefaultMaxFrame,
      "tensor data plane of /job:ps/replica:0/task:0");
  EXPECT_TRUE(absl::IsUnauthenticated(stranger.status())) << stranger.status();

  coordinator->CloseGang(0, 0, "test over");
  server->Stop();
}

TEST(BarrierControlPlaneTest, AServerServesOneBarrierCoordinator) {
  auto coordinator =
      std::make_shared<BarrierCoordinator>(Env::Default(), absl::Seconds(30));
  coord::CoordinationServerOptions options;
  ASSERT_TRUE(ServeBarriers(coordinator, options).ok());
  EXPECT_TRUE(options.serve_framed);
  EXPECT_TRUE(absl::IsInvalidArgument(ServeBarriers(coordinator, options)));
  EXPECT_TRUE(absl::IsInvalidArgument(ServeBarriers(nullptr, options)));
  // Turning the framed endpoint off again would leave the barrier's framed
  // handler unserved: the server refuses to start so.
  options.serve_framed = false;
  EXPECT_TRUE(absl::IsInvalidArgument(
      coord::CoordinationServer::Start(std::move(options)).status()));
}

TEST(BarrierControlPlaneTest, TheServerKeepsTheCoordinatorAlive) {
  std::weak_ptr<BarrierCoordinator> weak;
  std::unique_ptr<coord::CoordinationServer> server;
  {
    auto coordinator =
        std::make_shared<BarrierCoordinator>(Env::Default(), absl::Seconds(30));
    weak = coordinator;
    server = StartControlPlane(coordinator);
    ASSERT_NE(server, nullptr);
  }
  // The caller let go; the server's services still hold it.
  EXPECT_FALSE(weak.expired());
  server.reset();
  EXPECT_TRUE(weak.expired());
}

}  // namespace
}  // namespace cohort::barrier
