#include "cohort/rpc/transport.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "cohort/rpc/job_tls.h"
#include "cohort/rpc/socket.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace cohort::rpc {
namespace {

int ToMs(absl::Duration d) {
  return static_cast<int>(absl::ToInt64Milliseconds(d));
}

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read TLS ", what, " file ",
                                            path, ": check the path"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

grpc::ChannelArguments DefaultChannelArguments(int max_message_bytes) {
  grpc::ChannelArguments args;
  // Large KV values, status listings and tensors; no compression on
  // loopback.
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  // Keepalive pings find a silently partitioned connection (packets dropped,
  // no reset) even while a long poll is parked on it, within
  // kKeepaliveTime + kKeepaliveTimeout, below the default heartbeat timeout.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, ToMs(kKeepaliveTime));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, ToMs(kKeepaliveTimeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Reconnect quickly to a peer that restarts (a task rejoining its job).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // gRPC also takes this as the time one connection attempt (TCP, TLS
  // handshake, HTTP/2 settings) may last. It was 100 ms once, and a TLS
  // handshake on a busy machine (or under a sanitizer) then failed as
  // "connection attempt timed out before receiving SETTINGS frame". 2 s is
  // ample for a handshake and still bounds an attempt to a silent host.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 2000);
  return args;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(
    const std::string& target, const TransportSecurity& security,
    int max_message_bytes, Keepalive keepalive) {
  grpc::ChannelArguments args = DefaultChannelArguments(max_message_bytes);
  if (keepalive == Keepalive::kExternal) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (security.tls()) {
    grpc::SslCredentialsOptions options;
    auto ca = ReadPem(security.ca_cert_file, "CA certificate");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    if (!security.cert_file.empty()) {
      auto cert = ReadPem(security.cert_file, "certificate");
      if (!cert.ok()) return cert.status();
      auto key = ReadPem(security.key_file, "private key");
      if (!key.ok()) return key.status();
      options.pem_cert_chain = *cert;
      options.pem_private_key = *key;
    }
    if (!security.server_name_override.empty()) {
      args.SetSslTargetNameOverride(security.server_name_override);
    }
    credentials = grpc::SslCredentials(options);
  } else if (!security.job_token.empty()) {
    // Job TLS (job_tls.h): the token is sent only inside a connection whose
    // server proved, with a certificate from the token's CA, that it holds
    // the token too.
    absl::StatusOr<const JobTlsIdentity*> identity =
        JobTlsIdentityFor(security.job_token);
    if (!identity.ok()) return identity.status();
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = (*identity)->ca_pem;
    options.pem_cert_chain = (*identity)->cert_pem;
    options.pem_private_key = (*identity)->key_pem;
    args.SetSslTargetNameOverride(kJobTlsServerName);
    credentials = grpc::SslCredentials(options);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  return grpc::CreateCustomChannel(target, credentials, args);
}

void AttachJobToken(grpc::ClientContext* context,
                    const TransportSecurity& security) {
  if (!security.job_token.empty()) {
    context->AddMetadata(kJobTokenMetadataKey, security.job_token);
  }
}

absl::Status CheckJobToken(const grpc::ServerContextBase& context,
                           const std::string& expected_token) {
  return CheckJobTokenMetadata(context.client_metadata(), expected_token);
}

absl::Status CheckJobTokenMetadata(
    const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
    const std::string& expected_token) {
  if (expected_token.empty()) return absl::OkStatus();
  auto it = metadata.find(kJobTokenMetadataKey);
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "no job token on this call: the service requires the job's token "
        "(check --token-file or COHORT_JOB_TOKEN of the caller)");
  }
  const grpc::string_ref& got = it->second;
  // Constant-time comparison over the expected length.
  unsigned char diff = got.size() == expected_token.size() ? 0 : 1;
  for (size_t i = 0; i < expected_token.size(); ++i) {
    const unsigned char c = i < got.size() ? got.data()[i] : 0;
    diff |= c ^ static_cast<unsigned char>(expected_token[i]);
  }
  if (diff != 0) {
    return absl::UnauthenticatedError(
        "wrong job token on this call: the caller belongs to another job or "
        "has a stale token (check --token-file or COHORT_JOB_TOKEN)");
  }
  return absl::OkStatus();
}

namespace {

// Checks the token on a call's headers, before gRPC reads its message: a
// caller without the token cannot make a server parse (or decompress) a
// request of any size. Services still check it themselves (CheckJobToken),
// so a server that lost this processor would still refuse.
class JobTokenProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit JobTokenProcessor(std::string token) : token_(std::move(token)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata,
                       grpc::AuthContext* /*context*/,
                       OutputMetadata* /*consumed_auth_metadata*/,
                       OutputMetadata* /*response_metadata*/) override {
    absl::Status status = CheckJobTokenMetadata(auth_metadata, token_);
    if (status.ok()) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        std::string(status.message()));
  }

 private:
  const std::string token_;
};

}  // namespace

absl::StatusOr<GrpcServer> StartGrpcServer(
    const std::string& address, const std::vector<grpc::Service*>& services,
    const TransportSecurity& security, int max_message_bytes) {
  const std::string host = address.substr(0, address.rfind(':'));
  if (security.job_token.empty() && !security.tls() && !security.insecure &&
      !IsLoopbackHost(host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing to serve on ", address,
        " (beyond loopback) with neither a job token nor TLS: anyone who "
        "can reach it could join or change the job. Set a token "
        "(COHORT_JOB_TOKEN or --token-file), TLS (--tls-ca/--tls-cert/"
        "--tls-key), or pass --insecure"));
  }
  // Server-only TLS proves the server to its clients, not the clients to the
  // server: without a token or client certificates, anyone could call it.
  if (security.tls() && !security.require_client_cert &&
      security.job_token.empty() && !security.insecure) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing to serve on ", address,
        " with server-only TLS and no job token: TLS without client "
        "certificates does not check who calls. Set a token (COHORT_JOB_TOKEN "
        "or --token-file), require client certificates (--tls-client-certs), "
        "or pass --insecure"));
  }
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (security.tls()) {
    grpc::SslServerCredentialsOptions options(
        security.require_client_cert
            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
            : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    auto ca = ReadPem(security.ca_cert_file, "CA certificate");
    if (!ca.ok()) return ca.status();
    auto cert = ReadPem(security.cert_file, "server certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(security.key_file, "server private key");
    if (!key.ok()) return key.status();
    options.pem_root_certs = *ca;
    options.pem_key_cert_pairs.push_back({*key, *cert});
    credentials = grpc::SslServerCredentials(options);
  } else if (!security.job_token.empty()) {
    // Job TLS, mutual (job_tls.h): a client that does not hold the token
    // cannot finish the handshake, so it sends no request at all.
    absl::StatusOr<const JobTlsIdentity*> identity =
        JobTlsIdentityFor(security.job_token);
    if (!identity.ok()) return identity.status();
    grpc::SslServerCredentialsOptions options(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    options.pem_root_certs = (*identity)->ca_pem;
    options.pem_key_cert_pairs.push_back(
        {(*identity)->key_pem, (*identity)->cert_pem});
    credentials = grpc::SslServerCredentials(options);
  } else {
    credentials = grpc::InsecureServerCredentials();
  }
  if (!security.job_token.empty()) {
    credentials->SetAuthMetadataProcessor(
        std::make_shared<JobTokenProcessor>(security.job_token));
  }
  grpc::ServerBuilder builder;
  GrpcServer result;
  builder.AddListeningPort(address, credentials, &result.port);
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  builder.SetMaxSendMessageSize(max_message_bytes);
  // gRPC sets SO_REUSEPORT by default, so a second server (any process of
  // the same user) could bind a port in use and take half its connections.
  // A port in use must be an error naming it instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Clients ping every kKeepaliveTime; accept that, and ping them in turn so
  // that a vanished client's parked calls are cancelled.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ToMs(kKeepaliveTime));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             ToMs(kKeepaliveTimeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      ToMs(kKeepaliveTime / 2));
  // A connection that has not finished its TLS handshake (or, without TLS,
  // sent its HTTP/2 preface) by then is closed: gRPC 1.51 has no cap on
  // connections, so this bounds how long a peer without the token can hold
  // one (the default is 120 s).
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             ToMs(kServerHandshakeTimeout));
  // Bounds on what one peer can hold: streams per connection, and the
  // memory all connections together may use for their buffers.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             kMaxConcurrentStreams);
  grpc::ResourceQuota quota("cohort-grpc-server");
  quota.Resize(kServerMemoryQuotaBytes);
  builder.SetResourceQuota(quota);
  for (grpc::Service* service : services) builder.RegisterService(service);
  result.server = builder.BuildAndStart();
  if (result.server == nullptr || result.port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address,
        ": the port is in use or the address is not local (check --port)"));
  }
  return result;
}

}  // namespace cohort::rpc
