#include "cohort/distribute/std_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/rpc/transport.h"
#include "cohort/runtime/server.h"

namespace cohort::distribute {
namespace {

constexpr absl::Duration kGoogleJoinSleep = absl::Seconds(5);

class RealStdServer : public StdServer {
 public:
  explicit RealStdServer(std::unique_ptr<runtime::Server> server)
      : server_(std::move(server)) {}
  absl::Status Join() override { return server_->Join(); }
  void Stop() override { (void)server_->Stop(); }
  std::string target() const override { return server_->target(); }
  std::string description() const override {
    return absl::StrCat("standard server ", server_->task_name(), " at ",
                        server_->target());
  }
  absl::StatusOr<coord::CoordinationAgent*> WaitForCoordinationAgent(
      absl::Duration timeout) override {
    return server_->WaitForCoordinationAgent(timeout);
  }

 private:
  const std::unique_ptr<runtime::Server> server_;
};

class RealFactory : public StdServerFactory {
 public:
  absl::StatusOr<std::unique_ptr<StdServer>> CreateAndStart(
      const StdServerArgs& args, Env* env) override {
    COHORT_ASSIGN_OR_RETURN(
        ServerDef def,
        MakeServerDef(
            args.cluster, args.task_type, args.task_id,
            args.rpc_layer.empty() ? std::string("grpc") : args.rpc_layer));
    *def.mutable_default_session_config() = args.session_config;
    runtime::ServerOptions options;
    options.env = env;
    options.security.job_token = env->GetVar(rpc::kJobTokenEnvVar).value_or("");
    // Under `cohort launch` the server registers this task with the
    // launcher's coordination service; its agent then also serves the
    // worker barrier, so the task is registered once.
    options.launcher_coordination_address =
        env->GetVar(coord::kEnvCoordinationAddress).value_or("");
    COHORT_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Server> server,
                            runtime::Server::Create(def, options));
    COHORT_RETURN_IF_ERROR(server->Start());
    return std::unique_ptr<StdServer>(new RealStdServer(std::move(server)));
  }
};

}  // namespace

absl::StatusOr<coord::CoordinationAgent*> StdServer::WaitForCoordinationAgent(
    absl::Duration timeout) {
  return absl::NotFoundError(
      absl::StrCat(description(), " has no coordination agent"));
}

StdServerFactory* RealStdServerFactory() {
  static RealFactory* const factory = new RealFactory();
  return factory;
}

GoogleFakeServer::GoogleFakeServer(Env* env, std::string target)
    : env_(env), target_(std::move(target)) {}

absl::Status GoogleFakeServer::Join() {
  // The environment runs the real server; a task that "joins" it just
  // stays alive (TF: `while True: time.sleep(5)`).
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return absl::OkStatus();
    }
    env_->SleepFor(kGoogleJoinSleep);
  }
}

void GoogleFakeServer::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

std::string GoogleFakeServer::description() const {
  return "fake server (session-based) because environment == 'google'";
}

}  // namespace cohort::distribute
