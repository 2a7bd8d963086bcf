// A task for launch_test.cc's lost-heartbeat scenario: connects a
// CoordinationAgent to the job's coordination service (the address
// `cohort launch` gives), then partition 1 stops itself with SIGSTOP, so its
// heartbeats stop while its process lives on. The others wait, connected.
#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/coord/grpc_coordination_client.h"

int main() {
  const char* address = std::getenv(cohort::coord::kEnvCoordinationAddress);
  const char* name = std::getenv("COHORT_TASK_NAME");
  const char* partition = std::getenv("COHORT_PARTITION_ID");
  const char* heartbeat = std::getenv("TEST_HEARTBEAT_S");
  if (address == nullptr || name == nullptr || partition == nullptr) {
    std::cerr << "not started by cohort launch" << std::endl;
    return 2;
  }
  double heartbeat_s = 1;
  if (heartbeat != nullptr && !absl::SimpleAtod(heartbeat, &heartbeat_s)) {
    std::cerr << "TEST_HEARTBEAT_S is not a number: " << heartbeat << std::endl;
    return 2;
  }
  const std::string task_name(name);
  cohort::coord::CoordinationAgentOptions options;
  options.task.job = task_name.substr(0, task_name.find(':'));
  options.task.index =
      std::atoi(task_name.substr(task_name.find(':') + 1).c_str());
  options.heartbeat_timeout = absl::Seconds(heartbeat_s);
  options.register_timeout = absl::Seconds(10);
  cohort::rpc::TransportSecurity security;
  if (const char* token = std::getenv(cohort::rpc::kJobTokenEnvVar)) {
    security.job_token = token;
  }
  auto client = cohort::coord::NewGrpcCoordinationClient(address, security);
  if (!client.ok()) return 3;
  auto agent =
      cohort::coord::CoordinationAgent::Create(options, std::move(*client));
  if (!agent.ok()) return 4;
  if (absl::Status s = (*agent)->Connect(); !s.ok()) {
    std::cerr << "connect: " << s.message() << std::endl;
    return 5;
  }
  std::cout << "connected" << std::endl;
  if (std::string(partition) == "1") raise(SIGSTOP);  // heartbeats stop
  absl::SleepFor(absl::Seconds(30));
  return 0;
}
