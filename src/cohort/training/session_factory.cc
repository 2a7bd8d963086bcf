#include "cohort/training/session_factory.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/env.h"
#include "cohort/graph/local_session.h"
#include "cohort/rpc/transport.h"
#include "cohort/runtime/grpc_session.h"

namespace cohort::training {

SessionFactory DefaultSessionFactory(Env* env) {
  if (env == nullptr) env = Env::Default();
  return [env](const std::string& master, const GraphDef& graph,
               const ConfigProto& config)
             -> absl::StatusOr<std::unique_ptr<Session>> {
    if (master.empty() || master == "local") {
      SessionOptions options;
      options.num_threads = config.intra_op_parallelism_threads();
      options.default_timeout =
          absl::Milliseconds(config.operation_timeout_in_ms());
      auto s = LocalSession::Create(graph, options);
      if (!s.ok()) return s.status();
      return std::unique_ptr<Session>(*std::move(s));
    }
    if (absl::StartsWith(master, "grpc://")) {
      runtime::GrpcSessionOptions options;
      options.config = config;
      options.security.job_token =
          env->GetVar(rpc::kJobTokenEnvVar).value_or("");
      auto s = runtime::GrpcSession::Create(master, graph, options);
      if (!s.ok()) return s.status();
      return std::unique_ptr<Session>(*std::move(s));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported master target '", master,
                     "': expected \"\", \"local\" or \"grpc://host:port\""));
  };
}

}  // namespace cohort::training
