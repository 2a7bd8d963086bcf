#include "cohort/cluster/resolvers/testing/test_certificates.h"

#include <arpa/inet.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/x509.h"
#include "openssl/bio.h"
#include "openssl/bn.h"
#include "openssl/err.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/rand.h"
#include "openssl/x509.h"
#include "openssl/x509v3.h"

namespace cohort::testing {
namespace {

using x509::Cert;
using x509::Pkey;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

// The step and OpenSSL's first queued reason, which is what a reader needs
// when a test cannot make its CA.
absl::Status OpenSslError(absl::string_view step) {
  return x509::OpenSslError("test CA", step);
}

absl::StatusOr<Pkey> NewKey() {
  Pkey key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (key == nullptr) return OpenSslError("make a P-256 key");
  return key;
}

// Fills the fields every certificate here shares: v3, a random positive
// serial (two certificates of one issuer must differ), a validity from a day
// ago (so a clock behind by hours still accepts it) for a year, the subject
// CN and the public key.
absl::Status FillCommon(X509* x, const std::string& common_name,
                        EVP_PKEY* key) {
  unsigned char serial_bytes[16];
  if (RAND_bytes(serial_bytes, sizeof(serial_bytes)) != 1) {
    return OpenSslError("draw a certificate serial");
  }
  serial_bytes[0] &= 0x7f;
  std::unique_ptr<BIGNUM, decltype(&BN_free)> serial(
      BN_bin2bn(serial_bytes, sizeof(serial_bytes), nullptr), BN_free);
  if (serial == nullptr || X509_set_version(x, 2) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(x)) == nullptr ||
      X509_gmtime_adj(X509_getm_notBefore(x), -24 * 3600) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(x), 365L * 24 * 3600) == nullptr ||
      X509_set_pubkey(x, key) != 1 ||
      X509_NAME_add_entry_by_txt(
          X509_get_subject_name(x), "CN", MBSTRING_UTF8,
          reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
          0) != 1) {
    return OpenSslError("fill a certificate");
  }
  return absl::OkStatus();
}

bool IsIpLiteral(const std::string& name) {
  unsigned char buf[16];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 ||
         inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

}  // namespace

absl::StatusOr<TestCertificateAuthority> TestCertificateAuthority::Create(
    const std::string& common_name) {
  absl::StatusOr<Pkey> key = NewKey();
  if (!key.ok()) return key.status();
  Cert cert(X509_new());
  if (cert == nullptr) return OpenSslError("allocate the CA certificate");
  X509* x = cert.get();
  absl::Status filled = FillCommon(x, common_name, key->get());
  if (!filled.ok()) return filled;
  if (X509_set_issuer_name(x, X509_get_subject_name(x)) != 1) {
    return OpenSslError("set the CA's issuer");
  }
  // A CA a verifier accepts as a trust anchor and as an issuer: basic
  // constraints CA:TRUE and keyCertSign (OpenSSL checks both in a chain).
  for (const auto& [nid, value] :
       {std::pair<int, std::string>{NID_basic_constraints, "critical,CA:TRUE"},
        {NID_key_usage, "critical,keyCertSign,cRLSign"},
        {NID_subject_key_identifier, "hash"}}) {
    absl::Status added = x509::AddExtension(x, x, nid, value, "test CA");
    if (!added.ok()) return added;
  }
  if (X509_sign(x, key->get(), EVP_sha256()) <= 0) {
    return OpenSslError("sign the CA certificate");
  }
  absl::StatusOr<std::string> cert_pem = x509::CertPem(x, "test CA");
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = x509::KeyPem(key->get(), "test CA");
  if (!key_pem.ok()) return key_pem.status();
  return TestCertificateAuthority(*std::move(cert_pem), *std::move(key_pem));
}

absl::StatusOr<TlsServerCertificate>
TestCertificateAuthority::IssueServerCertificate(
    const std::vector<std::string>& names) const {
  if (names.empty()) {
    return absl::InvalidArgumentError(
        "test CA: a server certificate needs at least one host name or IP");
  }
  // The CA's certificate and key are kept as PEM, so the authority stays a
  // plain copyable value; parsing them back costs microseconds per issue.
  Bio ca_bio(BIO_new_mem_buf(cert_pem_.data(), cert_pem_.size()));
  Cert ca(ca_bio ? PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr)
                 : nullptr);
  if (ca == nullptr) return OpenSslError("read the CA certificate");
  Bio key_bio(BIO_new_mem_buf(key_pem_.data(), key_pem_.size()));
  Pkey ca_key(key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr,
                                                nullptr)
                      : nullptr);
  if (ca_key == nullptr) return OpenSslError("read the CA key");

  absl::StatusOr<Pkey> key = NewKey();
  if (!key.ok()) return key.status();
  Cert cert(X509_new());
  if (cert == nullptr) return OpenSslError("allocate a certificate");
  X509* x = cert.get();
  absl::Status filled = FillCommon(x, names.front(), key->get());
  if (!filled.ok()) return filled;
  if (X509_set_issuer_name(x, X509_get_subject_name(ca.get())) != 1) {
    return OpenSslError("set a certificate's issuer");
  }
  std::vector<std::string> san;
  for (const std::string& name : names) {
    san.push_back(absl::StrCat(IsIpLiteral(name) ? "IP:" : "DNS:", name));
  }
  for (const auto& [nid, value] :
       {std::pair<int, std::string>{NID_basic_constraints, "critical,CA:FALSE"},
        {NID_key_usage, "critical,digitalSignature"},
        {NID_ext_key_usage, "serverAuth"},
        {NID_authority_key_identifier, "keyid"},
        {NID_subject_alt_name, absl::StrJoin(san, ",")}}) {
    absl::Status added = x509::AddExtension(x, ca.get(), nid, value, "test CA");
    if (!added.ok()) return added;
  }
  if (X509_sign(x, ca_key.get(), EVP_sha256()) <= 0) {
    return OpenSslError("sign a server certificate");
  }
  TlsServerCertificate out;
  absl::StatusOr<std::string> pem = x509::CertPem(x, "test CA");
  if (!pem.ok()) return pem.status();
  out.cert_pem = *std::move(pem);
  pem = x509::KeyPem(key->get(), "test CA");
  if (!pem.ok()) return pem.status();
  out.key_pem = *std::move(pem);
  return out;
}

}  // namespace cohort::testing
