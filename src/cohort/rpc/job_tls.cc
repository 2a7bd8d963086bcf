#include "cohort/rpc/job_tls.h"

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/x509.h"
#include "openssl/bio.h"
#include "openssl/bn.h"
#include "openssl/err.h"
#include "openssl/evp.h"
#include "openssl/hmac.h"
#include "openssl/pem.h"
#include "openssl/rand.h"
#include "openssl/x509.h"
#include "openssl/x509v3.h"

namespace cohort::rpc {
namespace {

// Labels bind each derived value to its use: the CA key's seed and the
// cache key are different HMACs of the token, and neither is any other HMAC
// cohort computes (the framed handshake uses labels of its own).
constexpr char kCaSeedLabel[] = "cohort job tls: CA key v1";
constexpr char kCacheKeyLabel[] = "cohort job tls: cache key v1";
constexpr char kCaName[] = "cohort job CA";
constexpr int kSeedBytes = 32;

using x509::Cert;
using x509::Pkey;

absl::Status OpenSslError(absl::string_view step) {
  return x509::OpenSslError("job TLS", step);
}

std::string Hmac(const std::string& token, const char* label) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(label), strlen(label), mac, &len);
  return std::string(reinterpret_cast<char*>(mac), len);
}

absl::Status SetName(X509_NAME* name, const std::string& cn) {
  if (X509_NAME_add_entry_by_txt(
          name, "CN", MBSTRING_ASC,
          reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0) != 1) {
    return OpenSslError("name a certificate");
  }
  return absl::OkStatus();
}

// The CA certificate is the same bytes in every process of the job: a fixed
// serial and validity, a name derived from the token, and Ed25519's
// deterministic signature. (Only its key and name have to agree for
// verification; identical bytes make that obvious.)
absl::StatusOr<Cert> MakeCaCert(EVP_PKEY* ca_key, const std::string& ca_name) {
  Cert cert(X509_new());
  if (cert == nullptr) return OpenSslError("allocate the CA certificate");
  X509* x = cert.get();
  if (X509_set_version(x, 2) != 1 ||
      ASN1_INTEGER_set(X509_get_serialNumber(x), 1) != 1 ||
      ASN1_TIME_set_string(X509_getm_notBefore(x), "20200101000000Z") != 1 ||
      ASN1_TIME_set_string(X509_getm_notAfter(x), "99991231235959Z") != 1 ||
      X509_set_pubkey(x, ca_key) != 1) {
    return OpenSslError("fill the CA certificate");
  }
  absl::Status named = SetName(X509_get_subject_name(x), ca_name);
  if (!named.ok()) return named;
  if (X509_set_issuer_name(x, X509_get_subject_name(x)) != 1) {
    return OpenSslError("set the CA certificate's issuer");
  }
  for (auto [nid, value] :
       {std::pair{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
        std::pair{NID_key_usage, "critical,keyCertSign"}}) {
    absl::Status added = x509::AddExtension(x, x, nid, value, "job TLS");
    if (!added.ok()) return added;
  }
  // Ed25519 signs the whole message itself: no digest.
  if (X509_sign(x, ca_key, nullptr) <= 0) return OpenSslError("sign the CA");
  return cert;
}

// This process's certificate: a fresh key, a random serial, valid from a day
// ago (clocks of a job's hosts differ) until the CA's end, usable as server
// and as client, named kJobTlsServerName.
absl::StatusOr<Cert> MakeLeafCert(EVP_PKEY* key, EVP_PKEY* ca_key, X509* ca) {
  Cert cert(X509_new());
  if (cert == nullptr) return OpenSslError("allocate a certificate");
  X509* x = cert.get();
  unsigned char serial_bytes[16];
  if (RAND_bytes(serial_bytes, sizeof(serial_bytes)) != 1) {
    return OpenSslError("draw a certificate serial");
  }
  serial_bytes[0] &= 0x7f;  // a positive INTEGER
  std::unique_ptr<BIGNUM, decltype(&BN_free)> serial(
      BN_bin2bn(serial_bytes, sizeof(serial_bytes), nullptr), BN_free);
  if (serial == nullptr || X509_set_version(x, 2) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(x)) == nullptr ||
      X509_gmtime_adj(X509_getm_notBefore(x), -24 * 3600) == nullptr ||
      ASN1_TIME_set_string(X509_getm_notAfter(x), "99991231235959Z") != 1 ||
      X509_set_pubkey(x, key) != 1 ||
      X509_set_issuer_name(x, X509_get_subject_name(ca)) != 1) {
    return OpenSslError("fill a certificate");
  }
  absl::Status named = SetName(X509_get_subject_name(x), kJobTlsServerName);
  if (!named.ok()) return named;
  const std::string san = absl::StrCat("DNS:", kJobTlsServerName);
  for (auto [nid, value] :
       {std::pair{NID_basic_constraints, "critical,CA:FALSE"},
        std::pair{NID_key_usage, "critical,digitalSignature"},
        std::pair{NID_ext_key_usage, "serverAuth,clientAuth"},
        std::pair{NID_subject_alt_name, san.c_str()}}) {
    absl::Status added = x509::AddExtension(x, ca, nid, value, "job TLS");
    if (!added.ok()) return added;
  }
  if (X509_sign(x, ca_key, nullptr) <= 0) {
    return OpenSslError("sign a certificate");
  }
  return cert;
}

}  // namespace

absl::StatusOr<JobTlsIdentity> MakeJobTlsIdentity(const std::string& token) {
  if (token.empty()) {
    return absl::InvalidArgumentError("job TLS needs a job token");
  }
  const std::string seed = Hmac(token, kCaSeedLabel).substr(0, kSeedBytes);
  Pkey ca_key(EVP_PKEY_new_raw_private_key(
      EVP_PKEY_ED25519, nullptr,
      reinterpret_cast<const unsigned char*>(seed.data()), seed.size()));
  if (ca_key == nullptr) return OpenSslError("derive the job's CA key");
  // One name for every job's CA: a name derived from the token would let
  // anyone who starts a handshake test token guesses with one HMAC each.
  absl::StatusOr<Cert> ca = MakeCaCert(ca_key.get(), kCaName);
  if (!ca.ok()) return ca.status();
  Pkey key(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  if (key == nullptr) return OpenSslError("make this process's key");
  absl::StatusOr<Cert> leaf = MakeLeafCert(key.get(), ca_key.get(), ca->get());
  if (!leaf.ok()) return leaf.status();
  JobTlsIdentity identity;
  absl::StatusOr<std::string> pem = x509::CertPem(ca->get(), "job TLS");
  if (!pem.ok()) return pem.status();
  identity.ca_pem = *std::move(pem);
  pem = x509::CertPem(leaf->get(), "job TLS");
  if (!pem.ok()) return pem.status();
  identity.cert_pem = *std::move(pem);
  pem = x509::KeyPem(key.get(), "job TLS");
  if (!pem.ok()) return pem.status();
  identity.key_pem = *std::move(pem);
  return identity;
}

namespace {

struct IdentityCache {
  absl::Mutex mu;
  // Keyed by an HMAC of the token, so the cache holds no second copy of it.
  absl::flat_hash_map<std::string, std::unique_ptr<JobTlsIdentity>> by_token
      ABSL_GUARDED_BY(mu);
};

IdentityCache& Cache() {
  static auto* cache = new IdentityCache;  // never destroyed: used at exit
  return *cache;
}

}  // namespace

absl::StatusOr<const JobTlsIdentity*> JobTlsIdentityFor(
    const std::string& token) {
  if (token.empty()) {
    return absl::InvalidArgumentError("job TLS needs a job token");
  }
  const std::string key = Hmac(token, kCacheKeyLabel);
  IdentityCache& cache = Cache();
  absl::MutexLock lock(&cache.mu);
  auto it = cache.by_token.find(key);
  if (it != cache.by_token.end()) return it->second.get();
  // Made under the lock: a few hundred microseconds, once per token.
  absl::StatusOr<JobTlsIdentity> made = MakeJobTlsIdentity(token);
  if (!made.ok()) return made.status();
  auto [inserted, unused] = cache.by_token.emplace(
      key, std::make_unique<JobTlsIdentity>(*std::move(made)));
  return inserted->second.get();
}

}  // namespace cohort::rpc
