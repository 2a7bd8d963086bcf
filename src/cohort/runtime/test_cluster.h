// TestCluster: a cluster of real gRPC servers in this process, one per task
// on 127.0.0.1, for tests of the master, the workers and GrpcSession.
//
//   auto cluster = TestCluster::Start({{"ps", 1}, {"worker", 2}}, "token");
//   auto session = cluster->Session(cluster->server(kWorker0), graph);
//
// A port picked free can still be taken before its server binds it (by a
// test in another process picking the same one): that attempt is dropped
// and the cluster started again on new ports (5 attempts).
//
// Thread safety: thread-compatible.
#ifndef COHORT_RUNTIME_TEST_CLUSTER_H_
#define COHORT_RUNTIME_TEST_CLUSTER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"
#include "cohort/rpc/socket.h"
#include "cohort/runtime/grpc_session.h"
#include "cohort/runtime/server.h"
#include "gtest/gtest.h"

namespace cohort::runtime {

class TestCluster {
 public:
  using Jobs = std::vector<std::pair<std::string, int>>;

  // Null (and a test failure) when the servers cannot start.
  static std::unique_ptr<TestCluster> Start(const Jobs& jobs,
                                            const std::string& token) {
    constexpr int kAttempts = 5;
    absl::Status last;
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      auto c = std::unique_ptr<TestCluster>(new TestCluster(token));
      last = c->TryStart(jobs);
      if (last.ok()) return c;
      if (!absl::IsUnavailable(last)) break;
      COHORT_LOG(WARNING) << "starting the test cluster again: " << last;
    }
    ADD_FAILURE() << "cannot start the cluster: " << last;
    return nullptr;
  }

  Server* server(const std::string& task) {
    for (auto& s : servers) {
      if (s->task_name() == task) return s.get();
    }
    return nullptr;
  }

  // A session whose master is `task`'s.
  std::unique_ptr<GrpcSession> Session(const std::string& task,
                                       const GraphDef& graph,
                                       ConfigProto config = {}) {
    GrpcSessionOptions options;
    options.security.job_token = token_;
    options.config = std::move(config);
    auto s = GrpcSession::Create(server(task)->target(), graph, options);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::vector<std::unique_ptr<Server>> servers;

 private:
  explicit TestCluster(std::string token) : token_(std::move(token)) {}

  // Unavailable when a server could not listen on its port.
  absl::Status TryStart(const Jobs& jobs) {
    ClusterDef def;
    for (const auto& [job, n] : jobs) {
      JobDef* j = def.add_job();
      j->set_name(job);
      for (int i = 0; i < n; ++i) {
        auto port = rpc::PickFreePort("127.0.0.1");
        if (!port.ok()) return port.status();
        (*j->mutable_tasks())[i] = absl::StrCat("127.0.0.1:", *port);
      }
    }
    for (const JobDef& j : def.job()) {
      for (const auto& [index, address] : j.tasks()) {
        ServerDef sd;
        *sd.mutable_cluster() = def;
        sd.set_job_name(j.name());
        sd.set_task_index(index);
        ServerOptions options;
        options.security.job_token = token_;
        options.num_threads = 2;
        auto server = Server::Create(sd, options);
        if (!server.ok()) return server.status();
        absl::Status started = (*server)->Start();
        if (!started.ok()) return started;
        servers.push_back(std::move(*server));
      }
    }
    return absl::OkStatus();
  }

  const std::string token_;
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_TEST_CLUSTER_H_
