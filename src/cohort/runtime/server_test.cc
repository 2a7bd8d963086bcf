// Server: configuration errors (reference runtime_training.md §1.2, in
// TensorFlow's order and words) and the lifecycle state machine.
#include "cohort/runtime/server.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "cohort/rpc/socket.h"
#include "cohort/runtime/grpc_session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cohort::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

ServerDef OneTask(const std::string& address) {
  ServerDef def;
  JobDef* job = def.mutable_cluster()->add_job();
  job->set_name("worker");
  (*job->mutable_tasks())[0] = address;
  def.set_job_name("worker");
  def.set_task_index(0);
  return def;
}

TEST(ServerTest, UnknownProtocolIsNotFound) {
  ServerDef def = OneTask("127.0.0.1:0");
  def.set_protocol("grpc+verbs");
  auto s = Server::Create(def);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.status().message(),
              HasSubstr("No server factory registered for the given "
                        "ServerDef"));
  EXPECT_THAT(s.status().message(), HasSubstr("[ GRPC_SERVER ]"));
}

TEST(ServerTest, JobAndTaskMustBeInTheCluster) {
  ServerDef def = OneTask("127.0.0.1:0");
  def.set_job_name("ps");
  auto s = Server::Create(def);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "Job \"ps\" was not defined in cluster");
  def = OneTask("127.0.0.1:0");
  def.set_task_index(3);
  s = Server::Create(def);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "Task 3 was not defined in job \"worker\"");
}

TEST(ServerTest, AddressWithoutPortNamesIt) {
  auto s = Server::Create(OneTask("localhost"));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(),
            "Could not parse port for local server from \"localhost\".");
  s = Server::Create(OneTask("localhost:http"));
  EXPECT_THAT(s.status().message(), HasSubstr("port"));
}

TEST(ServerTest, PortZeroOnlyInASingleTaskCluster) {
  ServerDef def = OneTask("127.0.0.1:0");
  (*def.mutable_cluster()->mutable_job(0)->mutable_tasks())[1] = "127.0.0.1:1";
  auto s = Server::Create(def);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("/job:worker/replica:0/task:0"));
  EXPECT_THAT(s.status().message(), HasSubstr("port 0"));
}

TEST(ServerTest, PortInUseIsUnavailableNamingIt) {
  auto first = Server::Create(OneTask("127.0.0.1:0"));
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address =
      absl::StrCat("127.0.0.1:", (*first)->bound_port());
  auto second = Server::Create(OneTask(address));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(address));
}

TEST(ServerTest, ServerDefPortOverridesTheAddress) {
  auto port = rpc::PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok());
  ServerDef def = OneTask("127.0.0.1:1");
  def.set_port(*port);
  auto s = Server::Create(def);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->bound_port(), *port);
  EXPECT_EQ((*s)->target(), absl::StrCat("grpc://127.0.0.1:", *port));
}

TEST(ServerTest, LocalServerTargetAndLifecycle) {
  auto server = Server::CreateLocal();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT((*server)->target(), StartsWith("grpc://localhost:"));
  EXPECT_EQ((*server)->task_name(), "/job:localhost/replica:0/task:0");
  ASSERT_TRUE((*server)->Start().ok());
  EXPECT_TRUE((*server)->Start().ok());  // Already started: OK.

  // Join blocks until another thread stops the server.
  std::thread joiner([&] { EXPECT_TRUE((*server)->Join().ok()); });
  EXPECT_TRUE((*server)->Stop().ok());
  joiner.join();
  EXPECT_TRUE((*server)->Stop().ok());  // Idempotent.
  absl::Status restart = (*server)->Start();
  EXPECT_EQ(restart.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(restart.message(), "Server has stopped.");
  EXPECT_TRUE((*server)->Join().ok());  // At once.
}

TEST(ServerTest, JoinBeforeStartPreventsStart) {
  auto server = Server::CreateLocal();
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*server)->Join().ok());
  EXPECT_EQ((*server)->Start().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(ServerTest, StoppedServerRefusesNewSessions) {
  auto server = Server::CreateLocal();
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE((*server)->Start().ok());
  const std::string target = (*server)->target();
  ASSERT_TRUE((*server)->Stop().ok());
  GrpcSessionOptions options;
  options.rpc_timeout = absl::Seconds(2);
  auto session = GrpcSession::Create(target, GraphDef(), options);
  EXPECT_FALSE(session.ok());
  EXPECT_TRUE(absl::IsUnavailable(session.status()) ||
              absl::IsDeadlineExceeded(session.status()))
      << session.status();
}

}  // namespace
}  // namespace cohort::runtime
