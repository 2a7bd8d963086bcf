// coord_test_task: a process for the multi-process coordination tests.
//
//   coord_test_task serve --jobs worker=3 [--heartbeat-timeout-ms 1000]
//       [--recoverable-jobs worker] [--token T] [--port P]
//     Runs a coordination service; prints "PORT <n>"; exits when stdin
//     closes (or when killed).
//   coord_test_task task --coordinator HOST:PORT --task worker:1
//       [--heartbeat-timeout-ms 1000] [--token T] [--actions a,b,...]
//     Runs an agent and the actions in order, printing one line per event:
//       CONNECTED <incarnation> | CONNECT_ERROR <code> <message>
//       AGENT_ERROR <code> <message>     (from the error callback)
//       BARRIER <id> OK | BARRIER <id> ERROR <code> <message>
//       GET <key> <value> | SET <key> OK | SHUTDOWN OK|ERROR ... | DONE
//     Actions: barrier:ID:TIMEOUT_MS, set:KEY:VALUE, get:KEY:TIMEOUT_MS,
//     shutdown, wait (block until stdin closes).
//   coord_test_task set --coordinator HOST:PORT --key K --value V
//     Sets a key as a plain client (not a task); prints "SET K OK".
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/coord/coordination_server.h"
#include "cohort/coord/grpc_coordination_client.h"

namespace {

using cohort::coord::TaskId;

absl::Mutex print_mu;

void Print(const std::string& line) {
  absl::MutexLock lock(&print_mu);
  std::string out = line;
  for (char& c : out) {
    if (c == '\n') c = ' ';
  }
  out += "\n";
  ssize_t unused = write(STDOUT_FILENO, out.data(), out.size());
  (void)unused;
}

std::string Describe(const absl::Status& s) {
  return absl::StrCat(cohort::StatusCodeName(s.code()), " ", s.message());
}

void WaitForStdinClose() {
  char buf[256];
  while (read(STDIN_FILENO, buf, sizeof(buf)) > 0) {
  }
}

std::map<std::string, std::string> ParseFlags(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string key = argv[i];
    if (key.rfind("--", 0) == 0) flags[key.substr(2)] = argv[i + 1];
  }
  return flags;
}

int Serve(std::map<std::string, std::string> flags) {
  cohort::coord::CoordinationServerOptions options;
  for (absl::string_view job : absl::StrSplit(flags["jobs"], ',')) {
    std::pair<std::string, std::string> kv = absl::StrSplit(job, '=');
    int n = 0;
    if (!absl::SimpleAtoi(kv.second, &n)) return 2;
    options.service.jobs[kv.first] = n;
  }
  int timeout_ms = 1000;
  if (flags.count("heartbeat-timeout-ms")) {
    if (!absl::SimpleAtoi(flags["heartbeat-timeout-ms"], &timeout_ms)) {
      timeout_ms = 1000;
    }
  }
  options.service.heartbeat_timeout = absl::Milliseconds(timeout_ms);
  if (flags.count("recoverable-jobs")) {
    options.service.recoverable_jobs.insert(flags["recoverable-jobs"]);
  }
  options.security.job_token = flags["token"];
  options.address =
      absl::StrCat("127.0.0.1:", flags.count("port") ? flags["port"] : "0");
  auto server = cohort::coord::CoordinationServer::Start(options);
  if (!server.ok()) {
    Print(absl::StrCat("SERVE_ERROR ", Describe(server.status())));
    return 1;
  }
  Print(absl::StrCat("PORT ", (*server)->port()));
  WaitForStdinClose();
  (*server)->Stop();
  return 0;
}

int Task(std::map<std::string, std::string> flags) {
  std::pair<std::string, std::string> task = absl::StrSplit(flags["task"], ':');
  cohort::coord::CoordinationAgentOptions options;
  options.task = TaskId{task.first, 0};
  if (!absl::SimpleAtoi(task.second, &options.task.index)) return 2;
  cohort::SetLogTaskPrefix(flags["task"]);
  int timeout_ms = 1000;
  if (flags.count("heartbeat-timeout-ms")) {
    if (!absl::SimpleAtoi(flags["heartbeat-timeout-ms"], &timeout_ms)) {
      timeout_ms = 1000;
    }
  }
  options.heartbeat_timeout = absl::Milliseconds(timeout_ms);
  options.register_timeout = absl::Seconds(20);
  options.error_callback = [](const absl::Status& s) {
    Print(absl::StrCat("AGENT_ERROR ", Describe(s)));
  };
  cohort::rpc::TransportSecurity security;
  security.job_token = flags["token"];
  auto client =
      cohort::coord::NewGrpcCoordinationClient(flags["coordinator"], security);
  if (!client.ok()) return 2;
  auto agent =
      cohort::coord::CoordinationAgent::Create(options, std::move(*client));
  if (!agent.ok()) return 2;
  absl::Status connected = (*agent)->Connect();
  if (!connected.ok()) {
    Print(absl::StrCat("CONNECT_ERROR ", Describe(connected)));
    return 0;
  }
  Print(absl::StrCat("CONNECTED ", (*agent)->incarnation()));
  for (absl::string_view action :
       absl::StrSplit(flags["actions"], ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(action, ':');
    if (parts[0] == "barrier") {
      int ms = 10000;
      if (parts.size() > 2 && !absl::SimpleAtoi(parts[2], &ms)) {
        ms = 10000;
      }
      absl::Status s =
          (*agent)->WaitAtBarrier(parts[1], absl::Milliseconds(ms));
      Print(absl::StrCat("BARRIER ", parts[1], " ",
                         s.ok() ? "OK" : absl::StrCat("ERROR ", Describe(s))));
    } else if (parts[0] == "set") {
      absl::Status s = (*agent)->InsertKeyValue(parts[1], parts[2], true);
      Print(absl::StrCat("SET ", parts[1], " ", s.ok() ? "OK" : Describe(s)));
    } else if (parts[0] == "get") {
      int ms = 10000;
      if (parts.size() > 2 && !absl::SimpleAtoi(parts[2], &ms)) {
        ms = 10000;
      }
      auto v = (*agent)->GetKeyValue(parts[1], absl::Milliseconds(ms));
      Print(absl::StrCat(
          "GET ", parts[1], " ",
          v.ok() ? *v : absl::StrCat("ERROR ", Describe(v.status()))));
    } else if (parts[0] == "shutdown") {
      absl::Status s = (*agent)->Shutdown();
      Print(absl::StrCat("SHUTDOWN ",
                         s.ok() ? "OK" : absl::StrCat("ERROR ", Describe(s))));
    } else if (parts[0] == "wait") {
      WaitForStdinClose();
    }
  }
  Print("DONE");
  return 0;
}

}  // namespace

int Set(std::map<std::string, std::string> flags) {
  cohort::rpc::TransportSecurity security;
  security.job_token = flags["token"];
  auto client =
      cohort::coord::NewGrpcCoordinationClient(flags["coordinator"], security);
  if (!client.ok()) return 2;
  cohort::coord::InsertKeyValueRequest request;
  request.mutable_kv()->set_key(flags["key"]);
  request.mutable_kv()->set_value(flags["value"]);
  request.set_allow_overwrite(true);
  cohort::coord::InsertKeyValueResponse response;
  cohort::coord::CallOptions options;
  options.timeout = absl::Seconds(10);
  absl::Status s = (*client)->InsertKeyValue(request, &response, options);
  Print(absl::StrCat("SET ", flags["key"], " ", s.ok() ? "OK" : Describe(s)));
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string mode = argv[1];
  auto flags = ParseFlags(argc, argv);
  if (mode == "serve") return Serve(flags);
  if (mode == "task") return Task(flags);
  if (mode == "set") return Set(flags);
  return 2;
}
