#include "cohort/coord/etcd_client.h"

#include <algorithm>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/status.h"
#include "cohort/etcd.grpc.pb.h"
#include "cohort/rpc/status_conversion.h"
#include "cohort/rpc/transport.h"

namespace cohort::coord {
namespace {

using etcdserverpb::Compare;

// The end of the range holding every key that starts with `prefix`: the
// prefix with its last byte below 0xff incremented (etcd's convention).
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    unsigned char& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// Errors after which another member (or the same one, a moment later) may
// answer: the member is down or cut off, or the cluster is electing.
bool Retryable(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    // A member that loses its leader may end a watch stream as cancelled;
    // the caller's own cancellation is told apart (Call's `cancellation`).
    case grpc::StatusCode::CANCELLED:
      return true;
    default:
      break;
  }
  // etcd's own timeouts inside a member (a lease keep-alive that waits on
  // an election) come back as Unknown with its context's message.
  const std::string& m = s.error_message();
  return absl::StrContains(m, "context deadline exceeded") ||
         absl::StrContains(m, "etcdserver: no leader") ||
         absl::StrContains(m, "etcdserver: leader changed") ||
         absl::StrContains(m, "etcdserver: request timed out") ||
         absl::StrContains(m, "etcdserver: too many requests");
}

// Lets a CallCancellation cancel a call's context while this lives: the
// canceller may run on another thread at any time, even as the call ends.
class CancelBinding {
 public:
  CancelBinding(CallCancellation* cancellation, grpc::ClientContext* context)
      : state_(std::make_shared<State>()) {
    state_->context = context;
    if (cancellation != nullptr) {
      cancellation->SetCanceller([state = state_] {
        absl::MutexLock lock(&state->mu);
        if (state->context != nullptr) state->context->TryCancel();
      });
    }
  }
  ~CancelBinding() {
    absl::MutexLock lock(&state_->mu);
    state_->context = nullptr;
  }

 private:
  struct State {
    absl::Mutex mu;
    grpc::ClientContext* context ABSL_GUARDED_BY(mu) = nullptr;
  };
  std::shared_ptr<State> state_;
};

bool BadSegment(absl::string_view segment) {
  return segment.empty() || segment == "." || segment == "..";
}

}  // namespace

std::string EtcdTarget::ToString() const {
  return absl::StrCat(kEtcdScheme, absl::StrJoin(endpoints, ","),
                      absl::StripSuffix(prefix, "/"));
}

absl::StatusOr<EtcdTarget> ParseEtcdUrl(absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, kEtcdScheme)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", url, "' is not an etcd URL: expected etcd://HOST:PORT[,HOST:PORT",
        "...][/PREFIX]"));
  }
  EtcdTarget target;
  const size_t slash = rest.find('/');
  const absl::string_view hosts = rest.substr(0, slash);
  const absl::string_view prefix =
      slash == absl::string_view::npos ? "" : rest.substr(slash);
  for (absl::string_view endpoint : absl::StrSplit(hosts, ',')) {
    const size_t colon = endpoint.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(endpoint.substr(colon + 1), &port) || port < 1 ||
        port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint '", endpoint, "' in '", url,
                       "' is not HOST:PORT with a port in 1..65535"));
    }
    target.endpoints.emplace_back(endpoint);
  }
  target.prefix = "/cohort/";
  if (!prefix.empty() && prefix != "/") {
    for (char c : prefix) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the etcd prefix in '", url, "' holds a control character"));
      }
    }
    absl::string_view inner = absl::StripSuffix(prefix.substr(1), "/");
    for (absl::string_view segment : absl::StrSplit(inner, '/')) {
      if (BadSegment(segment)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the etcd prefix '", prefix, "' in '", url,
            "' has an empty, '.' or '..' segment; give /NAME[/NAME...]"));
      }
    }
    target.prefix = absl::StrCat("/", inner, "/");
  }
  return target;
}

absl::Status ReadEtcdCredentials(const std::string& path,
                                 EtcdClientOptions& options) {
  absl::StatusOr<std::string> text = [&]() -> absl::StatusOr<std::string> {
    FILE* f = fopen(path.c_str(), "r");
    if (f == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "cannot read the etcd credentials file ", path, ": check the path"));
    }
    std::string out;
    char buf[512];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0 && out.size() < 4096) {
      out.append(buf, n);
    }
    fclose(f);
    return out;
  }();
  COHORT_RETURN_IF_ERROR(text.status());
  absl::string_view line = absl::StripAsciiWhitespace(*text);
  const size_t colon = line.find(':');
  if (line.size() > 1024 || line.find('\n') != absl::string_view::npos ||
      colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the etcd credentials file ", path,
                     " must hold one line USER:PASSWORD (at most 1 KiB)"));
  }
  options.user = std::string(line.substr(0, colon));
  options.password = std::string(line.substr(colon + 1));
  return absl::OkStatus();
}

absl::Status EtcdSecurityFromEnv(Env* env, EtcdClientOptions& options) {
  auto var = [env](const char* name) { return env->GetVar(name).value_or(""); };
  if (!var(kEnvEtcdCa).empty()) options.ca_file = var(kEnvEtcdCa);
  if (!var(kEnvEtcdCert).empty()) options.cert_file = var(kEnvEtcdCert);
  if (!var(kEnvEtcdKey).empty()) options.key_file = var(kEnvEtcdKey);
  if (!var(kEnvEtcdCredentials).empty()) {
    return ReadEtcdCredentials(var(kEnvEtcdCredentials), options);
  }
  return absl::OkStatus();
}

std::vector<std::string> EtcdSecurityEnv(const EtcdClientOptions& options,
                                         const std::string& credentials_file) {
  std::vector<std::string> out;
  if (!options.ca_file.empty()) {
    out.push_back(absl::StrCat(kEnvEtcdCa, "=", options.ca_file));
  }
  if (!options.cert_file.empty()) {
    out.push_back(absl::StrCat(kEnvEtcdCert, "=", options.cert_file));
    out.push_back(absl::StrCat(kEnvEtcdKey, "=", options.key_file));
  }
  if (!credentials_file.empty()) {
    out.push_back(absl::StrCat(kEnvEtcdCredentials, "=", credentials_file));
  }
  return out;
}

struct EtcdClient::Impl {
  struct Endpoint {
    std::string address;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Watch::Stub> watch;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Auth::Stub> auth;
  };

  EtcdClientOptions options;
  std::vector<Endpoint> endpoints;
  absl::Mutex mu;
  size_t preferred ABSL_GUARDED_BY(mu) = 0;
  std::string token ABSL_GUARDED_BY(mu);

  // " /prefix/key" for messages; "" for calls without a key (leases).
  std::string Named(absl::string_view key) const {
    return key.empty() ? "" : absl::StrCat(" ", Full(std::string(key)));
  }
  std::string Full(const std::string& key) const {
    return absl::StrCat(options.target.prefix, key);
  }
  std::string Relative(const std::string& key) const {
    return std::string(absl::StripPrefix(key, options.target.prefix));
  }
  EtcdKeyValue FromProto(const etcdserverpb::KeyValue& kv) const {
    EtcdKeyValue out;
    out.key = Relative(kv.key());
    out.value = kv.value();
    out.create_revision = kv.create_revision();
    out.mod_revision = kv.mod_revision();
    out.lease = kv.lease();
    return out;
  }

  absl::Status Authenticate(const Endpoint& e, absl::Time deadline) {
    if (options.user.empty()) return absl::OkStatus();
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(
        std::min(deadline, absl::Now() + kEtcdAttemptTimeout)));
    etcdserverpb::AuthenticateRequest request;
    request.set_name(options.user);
    request.set_password(options.password);
    etcdserverpb::AuthenticateResponse response;
    grpc::Status s = e.auth->Authenticate(&context, request, &response);
    if (!s.ok()) {
      if (Retryable(s)) return rpc::FromGrpcStatus(s);
      return absl::UnauthenticatedError(
          absl::StrCat("etcd at ", e.address, " refused user '", options.user,
                       "': ", s.error_message(),
                       "; check the credentials file and that the user exists "
                       "(etcdctl user get)"));
    }
    absl::MutexLock lock(&mu);
    token = response.token();
    return absl::OkStatus();
  }

  // Runs `attempt(endpoint, context)` on one endpoint after another until
  // one answers or the call's deadline passes. `what` and `key` name the
  // call in errors. Cancelled once `cancellation` (may be null) is.
  template <typename F>
  absl::Status Call(absl::string_view what, absl::string_view key,
                    absl::Duration timeout, F attempt,
                    CallCancellation* cancellation = nullptr) {
    const absl::Time deadline = absl::Now() + timeout;
    size_t start;
    {
      absl::MutexLock lock(&mu);
      start = preferred;
    }
    grpc::Status last;
    std::string last_at;
    bool reauthenticated = false;
    for (size_t tries = 0;; ++tries) {
      const size_t index = (start + tries) % endpoints.size();
      const Endpoint& e = endpoints[index];
      const absl::Time now = absl::Now();
      if (now >= deadline) break;
      grpc::ClientContext context;
      context.set_deadline(
          absl::ToChronoTime(std::min(deadline, now + kEtcdAttemptTimeout)));
      {
        absl::MutexLock lock(&mu);
        if (!token.empty()) context.AddMetadata("token", token);
      }
      grpc::Status s = attempt(e, context);
      if (s.ok()) {
        absl::MutexLock lock(&mu);
        preferred = index;
        return absl::OkStatus();
      }
      if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
          !options.user.empty() && !reauthenticated) {
        // Simple tokens expire (etcd's --auth-token-ttl): get a new one.
        reauthenticated = true;
        COHORT_RETURN_IF_ERROR(Authenticate(e, deadline));
        --tries;
        continue;
      }
      if (cancellation != nullptr && cancellation->cancelled()) {
        return absl::CancelledError(
            absl::StrCat("etcd ", what, Named(key), " cancelled"));
      }
      if (!Retryable(s)) {
        return absl::Status(
            rpc::FromGrpcStatus(s).code(),
            absl::StrCat("etcd at ", e.address, " refused ", what, Named(key),
                         ": ", s.error_message(),
                         s.error_code() == grpc::StatusCode::PERMISSION_DENIED
                             ? "; check the etcd user's role covers the "
                               "prefix (etcdctl role get)"
                             : ""));
      }
      last = s;
      last_at = e.address;
      if (tries % endpoints.size() == endpoints.size() - 1) {
        // Every member refused at once (all down, or electing): not a spin.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    return absl::UnavailableError(absl::StrCat(
        "etcd at ", absl::StrJoin(options.target.endpoints, ","),
        " did not answer ", what, Named(key), " within ",
        absl::FormatDuration(timeout),
        last_at.empty() ? ""
                        : absl::StrCat(" (last error, from ", last_at, ": ",
                                       last.error_message(), ")"),
        "; check that a majority of the etcd members are up and reachable "
        "from this host (etcdctl endpoint health)",
        TlsHint()));
  }

  // A refused TLS handshake reaches gRPC's caller as a closed connection,
  // so the files to check are named with every "did not answer".
  std::string TlsHint() const {
    if (options.ca_file.empty()) return "";
    return absl::StrCat(
        ", and, with TLS, that ", options.ca_file,
        " signed the members' certificates and that they accept ",
        options.cert_file.empty()
            ? std::string("a client without a certificate (members run "
                          "with --client-cert-auth refuse one)")
            : absl::StrCat("the client certificate ", options.cert_file));
  }

  // `retried`: true when an earlier try failed in a way that may have
  // applied it (a lost answer), so the caller checks what it finds. Every
  // branch of cohort's transactions reads the key first: a response
  // without that read is refused.
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(
      absl::string_view what, const std::string& key,
      const etcdserverpb::TxnRequest& request, bool* retried) {
    etcdserverpb::TxnResponse response;
    int tries = 0;
    COHORT_RETURN_IF_ERROR(
        Call(what, key, options.call_timeout,
             [&](const Endpoint& e, grpc::ClientContext& context) {
               ++tries;
               response.Clear();
               return e.kv->Txn(&context, request, &response);
             }));
    *retried = tries > 1;
    if (response.responses_size() == 0 ||
        !response.responses(0).has_response_range()) {
      return absl::InternalError(
          absl::StrCat("etcd answered ", what, Named(key),
                       " without the read it asked for"));
    }
    return response;
  }
};

EtcdClient::EtcdClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() = default;

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Connect(
    EtcdClientOptions options) {
  if (options.target.endpoints.empty()) {
    return absl::InvalidArgumentError("no etcd endpoint given");
  }
  if (options.call_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the etcd call timeout must be positive");
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "an etcd client certificate needs both its certificate and its key "
        "file");
  }
  if (!options.cert_file.empty() && options.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "an etcd client certificate needs the etcd CA file too");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  rpc::TransportSecurity security;
  security.ca_cert_file = impl->options.ca_file;
  security.cert_file = impl->options.cert_file;
  security.key_file = impl->options.key_file;
  for (const std::string& address : impl->options.target.endpoints) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = rpc::CreateChannel(
        address, security, kEtcdMaxResponseBytes, rpc::Keepalive::kExternal);
    if (!channel.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd TLS: ", channel.status().message()));
    }
    Impl::Endpoint e;
    e.address = address;
    e.kv = etcdserverpb::KV::NewStub(*channel);
    e.watch = etcdserverpb::Watch::NewStub(*channel);
    e.lease = etcdserverpb::Lease::NewStub(*channel);
    e.auth = etcdserverpb::Auth::NewStub(*channel);
    impl->endpoints.push_back(std::move(e));
  }
  if (!impl->options.user.empty()) {
    Impl* i = impl.get();
    absl::Status last;
    const absl::Time deadline = absl::Now() + i->options.call_timeout;
    for (size_t k = 0; absl::Now() < deadline; ++k) {
      last = i->Authenticate(i->endpoints[k % i->endpoints.size()], deadline);
      if (last.ok() || absl::IsUnauthenticated(last)) break;
      if (k % i->endpoints.size() == i->endpoints.size() - 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    if (!last.ok()) {
      if (absl::IsUnauthenticated(last)) return last;
      return absl::UnavailableError(absl::StrCat(
          "no etcd member at ", absl::StrJoin(i->options.target.endpoints, ","),
          " answered the login of user '", i->options.user, "' within ",
          absl::FormatDuration(i->options.call_timeout), " (", last.message(),
          "); check that a majority of the etcd members are up"));
    }
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

const EtcdTarget& EtcdClient::target() const { return impl_->options.target; }

absl::StatusOr<int64_t> EtcdClient::Put(const std::string& key,
                                        const std::string& value, int64_t lease,
                                        absl::Duration timeout) {
  etcdserverpb::PutRequest request;
  request.set_key(impl_->Full(key));
  request.set_value(value);
  request.set_lease(lease);
  etcdserverpb::PutResponse response;
  COHORT_RETURN_IF_ERROR(
      impl_->Call("put", key, std::min(timeout, impl_->options.call_timeout),
                  [&](const Impl::Endpoint& e, grpc::ClientContext& context) {
                    return e.kv->Put(&context, request, &response);
                  }));
  return response.header().revision();
}

absl::StatusOr<std::optional<EtcdKeyValue>> EtcdClient::Get(
    const std::string& key, int64_t* revision) {
  etcdserverpb::RangeRequest request;
  request.set_key(impl_->Full(key));
  etcdserverpb::RangeResponse response;
  COHORT_RETURN_IF_ERROR(
      impl_->Call("get", key, impl_->options.call_timeout,
                  [&](const Impl::Endpoint& e, grpc::ClientContext& context) {
                    return e.kv->Range(&context, request, &response);
                  }));
  if (revision != nullptr) *revision = response.header().revision();
  if (response.kvs_size() == 0) return std::nullopt;
  return impl_->FromProto(response.kvs(0));
}

absl::StatusOr<std::vector<EtcdKeyValue>> EtcdClient::List(
    const std::string& dir, int64_t* revision) {
  etcdserverpb::RangeRequest request;
  request.set_key(impl_->Full(dir));
  request.set_range_end(PrefixEnd(impl_->Full(dir)));
  request.set_limit(impl_->options.max_keys);
  etcdserverpb::RangeResponse response;
  COHORT_RETURN_IF_ERROR(
      impl_->Call("list", dir, impl_->options.call_timeout,
                  [&](const Impl::Endpoint& e, grpc::ClientContext& context) {
                    return e.kv->Range(&context, request, &response);
                  }));
  if (response.more()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("etcd directory ", impl_->Full(dir), " holds ",
                     response.count(), " keys, more than the ",
                     impl_->options.max_keys, " a listing may return"));
  }
  if (revision != nullptr) *revision = response.header().revision();
  std::vector<EtcdKeyValue> out;
  out.reserve(response.kvs_size());
  for (const etcdserverpb::KeyValue& kv : response.kvs()) {
    out.push_back(impl_->FromProto(kv));
  }
  return out;
}

absl::StatusOr<bool> EtcdClient::Create(const std::string& key,
                                        const std::string& value,
                                        int64_t lease) {
  etcdserverpb::TxnRequest request;
  Compare* absent = request.add_compare();
  absent->set_key(impl_->Full(key));
  absent->set_target(Compare::CREATE);
  absent->set_result(Compare::EQUAL);
  absent->set_create_revision(0);
  // Both branches read the key first (Txn checks for that read).
  request.add_success()->mutable_request_range()->set_key(impl_->Full(key));
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(impl_->Full(key));
  put->set_value(value);
  put->set_lease(lease);
  request.add_failure()->mutable_request_range()->set_key(impl_->Full(key));
  bool retried = false;
  COHORT_ASSIGN_OR_RETURN(etcdserverpb::TxnResponse response,
                          impl_->Txn("create", key, request, &retried));
  if (response.succeeded()) return true;
  // A first try whose answer was lost may have written it: the key then
  // holds this very value (and lease).
  const etcdserverpb::RangeResponse& held =
      response.responses(0).response_range();
  return retried && held.kvs_size() == 1 && held.kvs(0).value() == value &&
         held.kvs(0).lease() == lease;
}

absl::StatusOr<std::optional<std::string>> EtcdClient::CompareAndSwap(
    const std::string& key, const std::optional<std::string>& expected,
    const std::string& desired) {
  etcdserverpb::TxnRequest request;
  Compare* c = request.add_compare();
  c->set_key(impl_->Full(key));
  c->set_result(Compare::EQUAL);
  if (expected.has_value()) {
    c->set_target(Compare::VALUE);
    c->set_value(*expected);
  } else {
    c->set_target(Compare::CREATE);
    c->set_create_revision(0);
  }
  // Both branches read the key first: the answer is the value it held.
  request.add_success()->mutable_request_range()->set_key(impl_->Full(key));
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(impl_->Full(key));
  put->set_value(desired);
  request.add_failure()->mutable_request_range()->set_key(impl_->Full(key));
  bool retried = false;
  COHORT_ASSIGN_OR_RETURN(
      etcdserverpb::TxnResponse response,
      impl_->Txn("compare-and-swap", key, request, &retried));
  const etcdserverpb::RangeResponse& held =
      response.responses(0).response_range();
  std::optional<std::string> before;
  if (held.kvs_size() > 0) before = held.kvs(0).value();
  // A first try whose answer was lost may have swapped: the key then holds
  // `desired`, and the value before it was `expected`.
  if (!response.succeeded() && retried && before == desired) return expected;
  return before;
}

absl::StatusOr<int64_t> EtcdClient::Delete(const std::string& key) {
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(impl_->Full(key));
  etcdserverpb::DeleteRangeResponse response;
  COHORT_RETURN_IF_ERROR(
      impl_->Call("delete", key, impl_->options.call_timeout,
                  [&](const Impl::Endpoint& e, grpc::ClientContext& context) {
                    return e.kv->DeleteRange(&context, request, &response);
                  }));
  return response.deleted();
}

absl::StatusOr<int64_t> EtcdClient::DeleteDir(const std::string& dir) {
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(impl_->Full(dir));
  request.set_range_end(PrefixEnd(impl_->Full(dir)));
  etcdserverpb::DeleteRangeResponse response;
  COHORT_RETURN_IF_ERROR(
      impl_->Call("delete", dir, impl_->options.call_timeout,
                  [&](const Impl::Endpoint& e, grpc::ClientContext& context) {
                    return e.kv->DeleteRange(&context, request, &response);
                  }));
  return response.deleted();
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(absl::Duration ttl) {
  const int64_t seconds =
      absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1)));
  if (seconds < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("an etcd lease needs a TTL of at least 1s, got ",
                     absl::FormatDuration(ttl)));
  }
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(seconds);
  etcdserverpb::LeaseGrantResponse response;
  COHORT_RETURN_IF_ERROR(
      impl_->Call("lease grant", "", impl_->options.call_timeout,
                  [&](const Impl::Endpoint& e, grpc::ClientContext& context) {
                    return e.lease->LeaseGrant(&context, request, &response);
                  }));
  if (!response.error().empty()) {
    return absl::InternalError(
        absl::StrCat("etcd granted no lease: ", response.error()));
  }
  return response.id();
}

absl::Status EtcdClient::KeepAlive(int64_t lease, absl::Duration timeout) {
  etcdserverpb::LeaseKeepAliveResponse response;
  COHORT_RETURN_IF_ERROR(impl_->Call(
      "lease keep-alive", "", std::min(timeout, impl_->options.call_timeout),
      [&](const Impl::Endpoint& e, grpc::ClientContext& context) {
        auto stream = e.lease->LeaseKeepAlive(&context);
        etcdserverpb::LeaseKeepAliveRequest request;
        request.set_id(lease);
        if (!stream->Write(request) || !stream->Read(&response)) {
          grpc::Status s = stream->Finish();
          return s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                       "the keep-alive stream closed")
                        : s;
        }
        context.TryCancel();
        stream->Finish().ok();  // the cancellation's status
        return grpc::Status::OK;
      }));
  if (response.ttl() <= 0) {
    return absl::NotFoundError(
        absl::StrCat("etcd lease ", lease,
                     " has expired: the keys attached to it are gone"));
  }
  return absl::OkStatus();
}

absl::Status EtcdClient::RevokeLease(int64_t lease, absl::Duration timeout) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  return impl_->Call(
      "lease revoke", "", std::min(timeout, impl_->options.call_timeout),
      [&](const Impl::Endpoint& e, grpc::ClientContext& context) {
        return e.lease->LeaseRevoke(&context, request, &response);
      });
}

absl::StatusOr<std::vector<EtcdEvent>> EtcdClient::Watch(
    const std::string& key_or_dir, int64_t after, absl::Duration timeout,
    CallCancellation* cancellation) {
  etcdserverpb::WatchRequest request;
  etcdserverpb::WatchCreateRequest* create = request.mutable_create_request();
  create->set_key(impl_->Full(key_or_dir));
  if (absl::EndsWith(key_or_dir, "/")) {
    create->set_range_end(PrefixEnd(impl_->Full(key_or_dir)));
  }
  create->set_start_revision(after + 1);
  std::vector<EtcdEvent> events;
  std::string compacted;
  std::string ended;  // why etcd cancelled the watch
  bool timed_out = false;
  const absl::Time deadline = absl::Now() + timeout;
  // Each endpoint gets the whole remaining time: a watch that waits is not
  // a member that fails, and one whose member dies ends with UNAVAILABLE and
  // goes on at the next, from the same revision.
  absl::Status s = impl_->Call(
      "watch", key_or_dir, timeout + kEtcdAttemptTimeout,
      [&](const Impl::Endpoint& e, grpc::ClientContext& context) {
        context.set_deadline(absl::ToChronoTime(deadline));
        // A member cut off from its leader would keep the stream open and
        // quiet; with this etcd ends it, and the next member is tried.
        context.AddMetadata("hasleader", "true");
        CancelBinding binding(cancellation, &context);
        auto stream = e.watch->Watch(&context);
        grpc::Status result = grpc::Status::OK;
        if (!stream->Write(request)) {
          result = stream->Finish();
        } else {
          etcdserverpb::WatchResponse response;
          while (stream->Read(&response)) {
            if (response.compact_revision() > 0) {
              compacted = absl::StrCat(response.compact_revision());
              break;
            }
            if (response.canceled()) {
              ended = response.cancel_reason().substr(0, 512);
              break;
            }
            for (const etcdserverpb::Event& ev : response.events()) {
              EtcdEvent out;
              out.deleted = ev.type() == etcdserverpb::Event::DELETE;
              out.kv = impl_->FromProto(ev.kv());
              events.push_back(std::move(out));
            }
            if (!events.empty()) break;
          }
          context.TryCancel();
          result = stream->Finish();
          // A member without a leader ends the watch (hasleader): another
          // member may have one.
          if (absl::StrContains(ended, "leader")) {
            ended.clear();
            return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                "the member has no leader");
          }
          if (!events.empty() || !compacted.empty() || !ended.empty()) {
            return grpc::Status::OK;
          }
        }
        if (cancellation != nullptr && cancellation->cancelled()) {
          return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
        }
        if (absl::Now() >= deadline) {
          timed_out = true;
          return grpc::Status::OK;
        }
        return result.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                          "the watch stream ended")
                           : result;
      },
      cancellation);
  COHORT_RETURN_IF_ERROR(s);
  if (!compacted.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("etcd can no longer report the changes to ",
                     impl_->Full(key_or_dir), " after revision ", after,
                     " (compacted: ", compacted, "); read it again"));
  }
  if (!ended.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("etcd ended the watch on ", impl_->Full(key_or_dir), ": ",
                     ended, "; check the etcd user's role covers the prefix"));
  }
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("no change to ", impl_->Full(key_or_dir), " in etcd at ",
                     absl::StrJoin(impl_->options.target.endpoints, ","),
                     " within ", absl::FormatDuration(timeout)));
  }
  return events;
}

}  // namespace cohort::coord
