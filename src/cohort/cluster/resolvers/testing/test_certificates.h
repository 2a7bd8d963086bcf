// TestCertificateAuthority: a certificate authority made in memory by a test,
// to serve the fake REST servers over HTTPS with a CA the test controls.
//
//   COHORT_ASSIGN_OR_RETURN(TestCertificateAuthority ca,
//                           TestCertificateAuthority::Create("cluster CA"));
//   COHORT_ASSIGN_OR_RETURN(TlsServerCertificate cert,
//                           ca.IssueServerCertificate({"127.0.0.1"}));
//   FakeKubernetesServer server("token", cert);   // speaks HTTPS
//   env.SetFile(".../ca.crt", ca.cert_pem());       // the client trusts it
//
// Keys are ECDSA P-256 and signatures SHA-256, what API servers commonly
// present. Each Create draws a fresh key, so two authorities never verify
// each other's certificates: a test proves "a wrong CA is refused" with a
// second one. Certificates are valid from a day before now for a year.
//
// Thread safety: thread-compatible; IssueServerCertificate is const and may
// run on several threads at once.
#ifndef COHORT_CLUSTER_RESOLVERS_TESTING_TEST_CERTIFICATES_H_
#define COHORT_CLUSTER_RESOLVERS_TESTING_TEST_CERTIFICATES_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cohort::testing {

// A server's certificate (issued by a TestCertificateAuthority) and its key.
struct TlsServerCertificate {
  std::string cert_pem;
  std::string key_pem;
};

class TestCertificateAuthority {
 public:
  // A self-signed CA named `common_name`. Internal when OpenSSL fails.
  static absl::StatusOr<TestCertificateAuthority> Create(
      const std::string& common_name);

  // The CA's certificate, PEM: what a client is told to trust.
  const std::string& cert_pem() const { return cert_pem_; }

  // A server certificate with a fresh key, usable for TLS server
  // authentication, naming each of `names` in subjectAltName: an IPv4 or
  // IPv6 literal becomes an IP entry, anything else a DNS entry.
  // InvalidArgument for no names; Internal when OpenSSL fails.
  absl::StatusOr<TlsServerCertificate> IssueServerCertificate(
      const std::vector<std::string>& names) const;

 private:
  TestCertificateAuthority(std::string cert_pem, std::string key_pem)
      : cert_pem_(std::move(cert_pem)), key_pem_(std::move(key_pem)) {}

  std::string cert_pem_;
  std::string key_pem_;  // the CA's private key, for issuing
};

}  // namespace cohort::testing

#endif  // COHORT_CLUSTER_RESOLVERS_TESTING_TEST_CERTIFICATES_H_
