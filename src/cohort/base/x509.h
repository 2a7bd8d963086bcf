// Making X.509 certificates with OpenSSL: owning pointers for its objects,
// one error builder, PEM encoding and v3 extensions. Shared by the job's TLS
// identities (rpc/job_tls.cc) and the test CA of the resolvers' HTTPS fakes
// (cluster/resolvers/testing/test_certificates.cc), so that the two do not
// drift apart in how they build and check what OpenSSL returns.
//
// Every function returns Internal "<who>: OpenSSL failed to <step>: <reason>"
// with OpenSSL's first queued reason, and clears OpenSSL's error queue, so
// that a later, unrelated failure never reports a stale reason.
//
// Thread safety: stateless; OpenSSL's error queue is per thread.
#ifndef COHORT_BASE_X509_H_
#define COHORT_BASE_X509_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "openssl/evp.h"
#include "openssl/x509.h"

namespace cohort::x509 {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct CertFree {
  void operator()(X509* x) const { X509_free(x); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

// Internal "<who>: OpenSSL failed to <step>: <reason>"; clears the queue.
absl::Status OpenSslError(absl::string_view who, absl::string_view step);

// PEM text of a certificate / an unencrypted private key.
absl::StatusOr<std::string> CertPem(X509* cert, absl::string_view who);
absl::StatusOr<std::string> KeyPem(EVP_PKEY* key, absl::string_view who);

// Adds the v3 extension `nid` with OpenSSL's config-style `value` (e.g.
// "critical,CA:TRUE", "DNS:host,IP:127.0.0.1") to `cert`, issued by
// `issuer` (the cert itself when self-signed).
absl::Status AddExtension(X509* cert, X509* issuer, int nid,
                          const std::string& value, absl::string_view who);

}  // namespace cohort::x509

#endif  // COHORT_BASE_X509_H_
