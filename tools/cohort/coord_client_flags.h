// Flags shared by the commands that talk to a coordination service
// (`cohort status`, `cohort kv`, `cohort coordinator`): the transport
// security and the job token.
//
//   --token T        (default: $COHORT_JOB_TOKEN)
//   --tls-ca FILE    turns TLS on; --tls-cert/--tls-key: own identity
#ifndef COHORT_TOOLS_COHORT_COORD_CLIENT_FLAGS_H_
#define COHORT_TOOLS_COHORT_COORD_CLIENT_FLAGS_H_

#include <cstdlib>
#include <string>

#include "CLI/CLI.hpp"
#include "cohort/rpc/transport.h"

namespace cohort::tools {

struct CoordSecurityFlags {
  std::string token;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;

  void Add(CLI::App* command) {
    command->add_option("--token", token,
                        "per-job token (default: $COHORT_JOB_TOKEN)");
    command->add_option("--tls-ca", tls_ca, "CA certificate (PEM): enables TLS");
    command->add_option("--tls-cert", tls_cert, "certificate (PEM)");
    command->add_option("--tls-key", tls_key, "private key (PEM)");
  }

  rpc::TransportSecurity Security() const {
    rpc::TransportSecurity security;
    security.job_token = token;
    if (security.job_token.empty()) {
      const char* env = std::getenv("COHORT_JOB_TOKEN");
      if (env != nullptr) security.job_token = env;
    }
    security.ca_cert_file = tls_ca;
    security.cert_file = tls_cert;
    security.key_file = tls_key;
    return security;
  }
};

}  // namespace cohort::tools

#endif  // COHORT_TOOLS_COHORT_COORD_CLIENT_FLAGS_H_
