// Mutual TLS keyed by the job token: what every gRPC channel and server of a
// job with a token (and no TLS files of its own) speaks.
//
//   COHORT_ASSIGN_OR_RETURN(const JobTlsIdentity* id,
//   JobTlsIdentityFor(token));
//   // id->ca_pem: the job's CA; id->cert_pem / id->key_pem: this process's
//   // certificate, issued by that CA, for both ends of a connection.
//
// Why: a gRPC client that sends the token as metadata hands it to whatever
// answers at the address it dials, so a process that binds a dead task's
// port would receive it. With job TLS the token never decides anything
// before both ends have proven it: the job's CA key is derived from the
// token (an Ed25519 key whose seed is HMAC-SHA256(token, label)), every
// process derives the same CA and issues itself a certificate with a fresh
// key, the client accepts only a server certificate from that CA, and the
// server only a client certificate from it. A squatter without the token can
// neither finish the handshake as a server nor as a client, sees only a TLS
// ClientHello, and a relaying man-in-the-middle sees only ciphertext. No
// files, no provisioning: every engine (one machine, Slurm, Kubernetes,
// TF_CONFIG) gets it from the token it already hands out.
//
// Thread safety: thread-safe. Identities are made once per token per process
// and live until the process exits.
#ifndef COHORT_RPC_JOB_TLS_H_
#define COHORT_RPC_JOB_TLS_H_

#include <string>

#include "absl/status/statusor.h"

namespace cohort::rpc {

// The name every job certificate carries (subjectAltName DNS) and every job
// client expects, whatever address it dialled: the identity that matters is
// "holds the job's CA", not a host name.
inline constexpr char kJobTlsServerName[] = "cohort-job";

struct JobTlsIdentity {
  std::string ca_pem;    // the job's CA certificate (same in every process)
  std::string cert_pem;  // this process's certificate, issued by the CA
  std::string key_pem;   // its private key (never leaves the process)
};

// This process's identity for `token` (non-empty), made on first use.
// Internal only when OpenSSL fails (no entropy, out of memory).
absl::StatusOr<const JobTlsIdentity*> JobTlsIdentityFor(
    const std::string& token);

}  // namespace cohort::rpc

#endif  // COHORT_RPC_JOB_TLS_H_
