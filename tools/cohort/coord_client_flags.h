// Flags shared by the commands that talk to or serve a coordination service
// (`cohort status`, `cohort kv`, `cohort coordinator`, `cohort launch`): the
// transport security and the job token.
//
//   --token-file F   the job token, read from a file (first line)
//   --token T        the same, but visible to every local user in `ps`:
//                    accepted with a warning
//   (neither)        $COHORT_JOB_TOKEN, as `cohort launch` gives its tasks
//   --tls-ca FILE    turns TLS on; --tls-cert/--tls-key: own identity
//   --tls-client-certs  (servers) require client certificates from the CA
//   --insecure       (servers) allow listening beyond loopback with neither
//                    a token nor TLS
#ifndef COHORT_TOOLS_COHORT_COORD_CLIENT_FLAGS_H_
#define COHORT_TOOLS_COHORT_COORD_CLIENT_FLAGS_H_

#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/env.h"
#include "cohort/base/status.h"
#include "cohort/rpc/job_token.h"
#include "cohort/rpc/transport.h"

namespace cohort::tools {

struct CoordSecurityFlags {
  std::string token;
  std::string token_file;
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  bool tls_client_certs = false;
  bool insecure = false;

  // `server`: also the flags only a server has.
  void Add(CLI::App* command, bool server = false) {
    command->add_option("--token-file", token_file,
                        "file holding the per-job token (default: "
                        "$COHORT_JOB_TOKEN)");
    command->add_option("--token", token,
                        "per-job token; visible in `ps`, prefer --token-file");
    command->add_option("--tls-ca", tls_ca,
                        "CA certificate (PEM): enables TLS");
    command->add_option("--tls-cert", tls_cert, "certificate (PEM)");
    command->add_option("--tls-key", tls_key, "private key (PEM)");
    if (server) {
      command->add_flag("--tls-client-certs", tls_client_certs,
                        "require client certificates signed by --tls-ca");
      command->add_flag("--insecure", insecure,
                        "allow serving beyond loopback with neither a token "
                        "nor TLS");
    }
  }

  // The security the flags ask for. InvalidArgument when both token flags
  // are given or the token is weak; the errors of rpc::ReadJobTokenFile for
  // a token file (unreadable, not private, empty).
  absl::StatusOr<rpc::TransportSecurity> Security(
      Env* env = Env::Default()) const {
    rpc::TransportSecurity security;
    if (!token.empty() && !token_file.empty()) {
      return absl::InvalidArgumentError(
          "give the job token once: --token-file or --token, not both");
    }
    if (!token_file.empty()) {
      COHORT_ASSIGN_OR_RETURN(security.job_token,
                              rpc::ReadJobTokenFile(token_file));
    } else if (!token.empty()) {
      std::cerr << "warning: --token puts the job token in the process list "
                   "(`ps`) for every local user to read; use --token-file "
                   "or $COHORT_JOB_TOKEN\n";
      COHORT_RETURN_IF_ERROR(rpc::CheckJobTokenStrength(token, "--token"));
      security.job_token = token;
    } else {
      security.job_token = env->GetVar(rpc::kJobTokenEnvVar).value_or("");
      if (!security.job_token.empty()) {
        COHORT_RETURN_IF_ERROR(rpc::CheckJobTokenStrength(
            security.job_token, rpc::kJobTokenEnvVar));
      }
    }
    security.ca_cert_file = tls_ca;
    security.cert_file = tls_cert;
    security.key_file = tls_key;
    security.require_client_cert = tls_client_certs;
    security.insecure = insecure;
    return security;
  }
};

}  // namespace cohort::tools

#endif  // COHORT_TOOLS_COHORT_COORD_CLIENT_FLAGS_H_
