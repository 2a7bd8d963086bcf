// Mutual TLS keyed by the job token: what every gRPC channel and server of a
// job with a token (and no TLS files of its own) speaks.
//
//   COHORT_ASSIGN_OR_RETURN(const JobTlsIdentity* id,
//                           JobTlsIdentityFor(token));
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
// neither finish the handshake as a server nor as a client and sees only a
// TLS ClientHello; a relay in the middle of a gRPC connection sees only
// ciphertext. No files, no provisioning: every engine (one machine, Slurm,
// Kubernetes, TF_CONFIG) gets it from the token it already hands out.
// (Anyone who can start a handshake sees a certificate signed by the CA and
// can test token guesses against it offline, as against a framed
// handshake: the token must be random; `cohort launch` makes 256 bits.)
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

// A new identity for `token`: the job's CA (the same bytes for every call
// with the same token) and a certificate with a fresh key. InvalidArgument
// for an empty token; Internal only when OpenSSL fails (no entropy, out of
// memory).
absl::StatusOr<JobTlsIdentity> MakeJobTlsIdentity(const std::string& token);

// This process's identity for `token`, made by MakeJobTlsIdentity on first
// use and kept.
absl::StatusOr<const JobTlsIdentity*> JobTlsIdentityFor(
    const std::string& token);

}  // namespace cohort::rpc

#endif  // COHORT_RPC_JOB_TLS_H_
