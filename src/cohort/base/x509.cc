#include "cohort/base/x509.h"

#include "absl/strings/str_cat.h"
#include "openssl/bio.h"
#include "openssl/err.h"
#include "openssl/pem.h"
#include "openssl/x509v3.h"

namespace cohort::x509 {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

// PEM_write_bio_* into memory, then the bytes out.
template <typename Write>
absl::StatusOr<std::string> ToPem(Write write, absl::string_view who,
                                  absl::string_view step) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || write(bio.get()) != 1) return OpenSslError(who, step);
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

}  // namespace

absl::Status OpenSslError(absl::string_view who, absl::string_view step) {
  const unsigned long code = ERR_get_error();
  char reason[256] = "no reason queued";
  if (code != 0) ERR_error_string_n(code, reason, sizeof(reason));
  ERR_clear_error();
  return absl::InternalError(
      absl::StrCat(who, ": OpenSSL failed to ", step, ": ", reason));
}

absl::StatusOr<std::string> CertPem(X509* cert, absl::string_view who) {
  return ToPem([cert](BIO* bio) { return PEM_write_bio_X509(bio, cert); }, who,
               "write a certificate");
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key, absl::string_view who) {
  return ToPem(
      [key](BIO* bio) {
        return PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr,
                                        nullptr);
      },
      who, "write a private key");
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid,
                          const std::string& value, absl::string_view who) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) {
    return OpenSslError(who,
                        absl::StrCat("make the extension \"", value, "\""));
  }
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) return OpenSslError(who, "add a certificate extension");
  return absl::OkStatus();
}

}  // namespace cohort::x509
