// `cohort kv`: the coordination key-value store from the shell.
//
//   cohort kv get KEY [--wait 30s]       prints the value (blocks with --wait)
//   cohort kv set KEY VALUE [--overwrite]
//   cohort kv add KEY DELTA               atomic increment; prints the result
//   cohort kv ls DIR                      KEY=VALUE lines under DIR/
//   cohort kv rm KEY                      deletes KEY and everything under it
// Every form takes --coordinator HOST:PORT (gRPC) or framed:HOST:PORT (the
// framed endpoint), --token-file and the TLS flags.
// Values written by `add` are 8-byte big-endian integers and print as numbers.
// Exit code 1 with the reason on stderr on any failure (2 when `get` finds
// no such key).
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"
#include "cohort/coord/framed_coordination.h"
#include "cohort/coord/grpc_coordination_client.h"
#include "tools/cohort/commands.h"
#include "tools/cohort/coord_cli_call.h"
#include "tools/cohort/coord_client_flags.h"

namespace cohort::tools {
namespace {

using coord::CoordinationClient;

struct KvOptions {
  std::string coordinator;
  std::string action;
  std::string key;
  std::string value;
  std::string wait;
  bool overwrite = false;
  CoordSecurityFlags security;
};

absl::Status Run(const KvOptions& o) {
  COHORT_ASSIGN_OR_RETURN(rpc::TransportSecurity security,
                          o.security.Security());
  COHORT_ASSIGN_OR_RETURN(
      auto client, coord::NewCoordinationClient(o.coordinator, security));
  const absl::Duration rpc_timeout = absl::Seconds(10);
  if (o.action == "get") {
    if (o.wait.empty()) {
      coord::TryGetKeyValueRequest request;
      request.set_key(o.key);
      coord::TryGetKeyValueResponse response;
      COHORT_RETURN_IF_ERROR(
          CallCoordinator(*client, &CoordinationClient::TryGetKeyValueAsync,
                          request, &response, rpc_timeout));
      std::cout << response.kv().value() << std::endl;
      return absl::OkStatus();
    }
    absl::Duration wait;
    if (!absl::ParseDuration(o.wait, &wait)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--wait: expected a duration like 30s, got ", o.wait));
    }
    coord::GetKeyValueRequest request;
    request.set_key(o.key);
    request.set_timeout_ms(absl::ToInt64Milliseconds(wait));
    coord::GetKeyValueResponse response;
    COHORT_RETURN_IF_ERROR(
        CallCoordinator(*client, &CoordinationClient::GetKeyValueAsync, request,
                        &response, wait + absl::Seconds(5)));
    std::cout << response.kv().value() << std::endl;
    return absl::OkStatus();
  }
  if (o.action == "set") {
    coord::InsertKeyValueRequest request;
    request.mutable_kv()->set_key(o.key);
    request.mutable_kv()->set_value(o.value);
    request.set_allow_overwrite(o.overwrite);
    coord::InsertKeyValueResponse response;
    return CallCoordinator(*client, &CoordinationClient::InsertKeyValueAsync,
                           request, &response, rpc_timeout);
  }
  if (o.action == "add") {
    int64_t delta;
    if (!absl::SimpleAtoi(o.value, &delta)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kv add: DELTA must be an integer, got \"", o.value, "\""));
    }
    coord::IncrementKeyValueRequest request;
    request.set_key(o.key);
    request.set_increment(delta);
    coord::IncrementKeyValueResponse response;
    COHORT_RETURN_IF_ERROR(
        CallCoordinator(*client, &CoordinationClient::IncrementKeyValueAsync,
                        request, &response, rpc_timeout));
    std::cout << response.value() << std::endl;
    return absl::OkStatus();
  }
  if (o.action == "ls") {
    coord::GetKeyValueDirRequest request;
    request.set_directory_key(o.key);
    coord::GetKeyValueDirResponse response;
    COHORT_RETURN_IF_ERROR(
        CallCoordinator(*client, &CoordinationClient::GetKeyValueDirAsync,
                        request, &response, rpc_timeout));
    for (const auto& kv : response.kv()) {
      std::cout << kv.key() << "=" << kv.value() << "\n";
    }
    std::cout << std::flush;
    return absl::OkStatus();
  }
  if (o.action == "rm") {
    coord::DeleteKeyValueRequest request;
    request.set_key(o.key);
    request.set_is_directory(true);
    coord::DeleteKeyValueResponse response;
    return CallCoordinator(*client, &CoordinationClient::DeleteKeyValueAsync,
                           request, &response, rpc_timeout);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "kv: unknown action \"", o.action, "\" (get, set, add, ls or rm)"));
}

}  // namespace

void RegisterKvCommand(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<KvOptions>();
  CLI::App* command = app.add_subcommand(
      "kv", "read and write the coordination key-value store");
  command->add_option("action", options->action, "get, set, add, ls or rm")
      ->required();
  command->add_option("key", options->key, "key (a directory for ls)");
  command->add_option("value", options->value, "value (set) or delta (add)");
  command
      ->add_option("--coordinator", options->coordinator,
                   "coordination service address HOST:PORT")
      ->required();
  command->add_option("--wait", options->wait,
                      "get: block until the key exists, at most this long");
  command->add_flag("--overwrite", options->overwrite,
                    "set: replace an existing value");
  options->security.Add(command);
  command->callback([options, &exit_code] {
    absl::Status status = Run(*options);
    if (!status.ok()) {
      std::cerr << "cohort kv " << options->action << ": " << status.message()
                << "\n";
      exit_code = status.code() == absl::StatusCode::kNotFound ? 2 : 1;
    }
  });
}

}  // namespace cohort::tools
