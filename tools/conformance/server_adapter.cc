// Conformance adapter for "Server": TensorFlow's tf.distribute.Server
// (server_lib.Server) as runtime::Server.
//
// Input: the server's definition, one of
//   `cluster` / `server_or_cluster_def`  a cluster in as_dict form, with
//                                        `job_name`, `task_index`,
//                                        `protocol` (TF's _make_server_def)
//   `server_def`                         {cluster (as_dict form), job_name,
//                                        task_index, protocol, port}
// and `start` (default true, TF's). Steps:
//   {"construct": true}    creates the server (and starts it unless `start`
//                          is false): the configuration errors of TF's
//                          constructor, and a real bind
//   {"call": "create_local_server", "args": {"start": b}}
//                          replaces the case's server with
//                          Server::CreateLocal (TF's create_local_server)
//   {"get": "target"}      "grpc://host:port" with the bound port
//   {"get": "server_def"}  the ServerDef (ServerDefToJson)
//   {"call": "start" | "stop" | "join"}
// Steps other than construct and create_local_server construct the server
// first when no step has. Servers carry a job token (every cohort endpoint
// checks one) and run no coordination (no coordination_config).
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/cluster/cluster_spec.h"
#include "cohort/runtime/server.h"
#include "tools/conformance/adapters.h"

namespace cohort::conformance {
namespace {

constexpr char kJobToken[] = "conformance-server-token-0123456789";

absl::Status Unknown(const Json& step) {
  return absl::UnimplementedError(
      absl::StrCat("the Server adapter does not know the step ", step.dump()));
}

// The case's ServerDef (see the file comment).
absl::StatusOr<ServerDef> CaseServerDef(CaseContext& ctx, const Json& input) {
  const nlohmann::ordered_json& ordered = ctx.ordered_input();
  if (input.contains("server_def")) {
    const Json& def_json = input["server_def"];
    if (!def_json.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "case field \"server_def\" must be an object {cluster, job_name, "
          "task_index, protocol, port}, got ",
          JsonPreview(def_json)));
    }
    COHORT_ASSIGN_OR_RETURN(ClusterSpec spec,
                            ClusterSpec::FromJson(Field(def_json, "cluster"),
                                                  "server_def.cluster"));
    COHORT_ASSIGN_OR_RETURN(auto job, OptString(def_json, "job_name"));
    COHORT_ASSIGN_OR_RETURN(auto index, OptInt(def_json, "task_index"));
    COHORT_ASSIGN_OR_RETURN(auto protocol, OptString(def_json, "protocol"));
    COHORT_ASSIGN_OR_RETURN(auto port, OptInt(def_json, "port"));
    // A ServerDef proto: unset fields are "" and 0, nothing is inferred.
    ServerDef def;
    *def.mutable_cluster() = spec.ToClusterDef();
    def.set_job_name(job.value_or(""));
    def.set_task_index(static_cast<int>(index.value_or(0)));
    def.set_protocol(protocol.value_or(""));
    def.set_port(static_cast<int>(port.value_or(0)));
    return def;
  }
  const char* key = input.contains("server_or_cluster_def")
                        ? "server_or_cluster_def"
                        : "cluster";
  ClusterSpec spec;
  if (ordered.is_object() && ordered.contains(key)) {
    COHORT_ASSIGN_OR_RETURN(spec, ClusterSpec::FromJson(ordered[key], key));
  } else {
    COHORT_ASSIGN_OR_RETURN(spec,
                            ClusterSpec::FromJson(Field(input, key), key));
  }
  COHORT_ASSIGN_OR_RETURN(auto job, OptString(input, "job_name"));
  COHORT_ASSIGN_OR_RETURN(auto index, OptInt(input, "task_index"));
  COHORT_ASSIGN_OR_RETURN(auto protocol, OptString(input, "protocol"));
  std::optional<int> task_index;
  if (index.has_value()) task_index = static_cast<int>(*index);
  return MakeServerDef(spec, job, task_index, protocol);
}

runtime::ServerOptions Options() {
  runtime::ServerOptions options;
  options.security.job_token = kJobToken;
  return options;
}

bool StartFlag(const Json& obj) {
  const Json& start = Field(obj, "start");
  return start.is_boolean() ? start.get<bool>() : true;
}

class ServerAdapter : public Adapter {
 public:
  CaseRun Run(const Json& test_case, CaseContext& ctx) const override {
    const Json& input = Field(test_case, "input");
    CaseRun run;
    const Json& calls = Field(input, "calls");
    if (!calls.is_array()) return run;
    std::unique_ptr<runtime::Server> server;
    ServerDef def;
    // Constructs the case's server once; the first failure is every later
    // step's outcome too (there is no server to call).
    std::optional<absl::Status> constructed;
    auto construct = [&]() -> absl::Status {
      if (constructed) return *constructed;
      absl::StatusOr<ServerDef> made = CaseServerDef(ctx, input);
      absl::Status status = made.status();
      if (status.ok()) {
        def = *made;
        auto created = runtime::Server::Create(def, Options());
        status = created.status();
        if (status.ok()) {
          server = std::move(*created);
          if (StartFlag(input)) status = server->Start();
        }
      }
      constructed = status;
      return status;
    };
    for (const Json& step : calls) {
      if (step.contains("construct")) {
        absl::Status s = construct();
        run.steps.push_back(s.ok() ? StepOutcome::Ok() : StepOutcome::Error(s));
        continue;
      }
      const std::string method = Field(step, "call").is_string()
                                     ? step["call"].get<std::string>()
                                     : "";
      if (method == "create_local_server") {
        auto created = runtime::Server::CreateLocal(Options());
        absl::Status s = created.status();
        if (s.ok()) {
          server = std::move(*created);
          def = ServerDef();
          JobDef* job = def.mutable_cluster()->add_job();
          job->set_name("localhost");
          (*job->mutable_tasks())[0] = "localhost:0";
          def.set_job_name("localhost");
          def.set_protocol("grpc");
          if (StartFlag(Field(step, "args"))) s = server->Start();
        }
        constructed = s;
        run.steps.push_back(s.ok() ? StepOutcome::Ok() : StepOutcome::Error(s));
        continue;
      }
      absl::Status s = construct();
      if (!s.ok()) {
        run.steps.push_back(StepOutcome::Error(s));
        continue;
      }
      const Json& get = Field(step, "get");
      if (get == Json("target")) {
        run.steps.push_back(StepOutcome::Value(server->target()));
      } else if (get == Json("server_def")) {
        run.steps.push_back(StepOutcome::Value(ServerDefToJson(def)));
      } else if (method == "start") {
        s = server->Start();
        run.steps.push_back(s.ok() ? StepOutcome::Ok() : StepOutcome::Error(s));
      } else if (method == "stop") {
        s = server->Stop();
        run.steps.push_back(s.ok() ? StepOutcome::Ok() : StepOutcome::Error(s));
      } else if (method == "join") {
        // Join blocks until a Stop; a case joins a server it stopped (or
        // never started), where Join returns at once.
        s = server->Join();
        run.steps.push_back(s.ok() ? StepOutcome::Ok() : StepOutcome::Error(s));
      } else {
        run.steps.push_back(StepOutcome::Error(Unknown(step)));
      }
    }
    return run;
  }
};

}  // namespace

void RegisterServerAdapters(AdapterRegistry* registry) {
  registry->Register("Server", std::make_unique<ServerAdapter>());
}

}  // namespace cohort::conformance
