#include "cohort/coord/coordination_agent.h"

#include <random>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_rpc_handler.h"

namespace cohort::coord {
namespace {

uint64_t NewIncarnation() {
  std::random_device rd;
  uint64_t value = 0;
  while (value == 0) value = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return value;
}

std::optional<int64_t> BarrierCounterFromError(const absl::Status& status) {
  auto payload = status.GetPayload(kBarrierErrorUrl);
  if (!payload.has_value()) return std::nullopt;
  BarrierError error;
  if (!error.ParseFromString(std::string(*payload))) return std::nullopt;
  return error.counter();
}

int64_t ToMs(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return 0;
  return std::max<int64_t>(1, absl::ToInt64Milliseconds(d));
}

// Client deadline for a blocking call whose service-side timeout is `d`:
// later than the service's own answer.
absl::Duration Grace(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return d;
  return d + absl::Seconds(5);
}

// For a retried wait: the service waits what is left of the caller's
// timeout, and the RPC that much plus the grace.
template <typename Request>
void LeftUntil(absl::Time deadline, absl::Time now, Request* request,
               CallOptions* call) {
  const absl::Duration left =
      deadline == absl::InfiniteFuture()
          ? absl::InfiniteDuration()
          : std::max(deadline - now, absl::ZeroDuration());
  request->set_timeout_ms(ToMs(left));
  call->timeout = Grace(left);
}

// A failure of the network path (worth retrying), not an answer.
bool IsTransient(const absl::Status& s) {
  return !IsServiceError(s) &&
         (s.code() == absl::StatusCode::kUnavailable ||
          s.code() == absl::StatusCode::kDeadlineExceeded);
}

std::string Describe(const absl::Status& s) {
  return absl::StrCat(StatusCodeName(s.code()), ": ", s.message());
}

}  // namespace

const char* AgentStateName(CoordinationAgent::State state) {
  switch (state) {
    case CoordinationAgent::State::kDisconnected:
      return "disconnected";
    case CoordinationAgent::State::kConnected:
      return "connected";
    case CoordinationAgent::State::kError:
      return "error";
    case CoordinationAgent::State::kShutDown:
      return "shut_down";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<CoordinationAgent>> CoordinationAgent::Create(
    CoordinationAgentOptions options,
    std::unique_ptr<CoordinationClient> client) {
  if (options.task.job.empty()) {
    return absl::InvalidArgumentError(
        "coordination agent: the task has no job name (expected e.g. "
        "worker:0)");
  }
  if (client == nullptr) {
    return absl::InvalidArgumentError("coordination agent: no client");
  }
  if (options.heartbeat_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordination agent: heartbeat timeout must be positive, "
                     "got ",
                     absl::FormatDuration(options.heartbeat_timeout)));
  }
  return std::unique_ptr<CoordinationAgent>(
      new CoordinationAgent(std::move(options), std::move(client)));
}

CoordinationAgent::CoordinationAgent(CoordinationAgentOptions options,
                                     std::unique_ptr<CoordinationClient> client)
    : options_(std::move(options)),
      env_(options_.env != nullptr ? options_.env : Env::Default()),
      client_(std::move(client)),
      interval_(options_.heartbeat_interval > absl::ZeroDuration()
                    ? options_.heartbeat_interval
                    : options_.heartbeat_timeout / 2) {}

CoordinationAgent::~CoordinationAgent() {
  State s = state();
  if (s == State::kConnected || s == State::kError) {
    absl::Status status = Shutdown();
    if (!status.ok()) {
      COHORT_LOG(WARNING) << "coordination agent " << options_.task.ToString()
                          << ": shutdown at destruction: " << Describe(status);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (poll_thread_.joinable()) poll_thread_.join();
}

template <typename Request, typename Response>
absl::Status CoordinationAgent::Call(
    void (CoordinationClient::*method)(const Request&, Response*,
                                       const CallOptions&, StatusCallback),
    const Request& request, Response* response, CallOptions options) {
  struct Pending {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    absl::Status status ABSL_GUARDED_BY(mu);
    Response response;
  };
  auto pending = std::make_shared<Pending>();
  (client_.get()->*method)(request, &pending->response, options,
                           [pending](absl::Status s) {
                             absl::MutexLock lock(&pending->mu);
                             pending->status = std::move(s);
                             pending->done = true;
                           });
  absl::MutexLock lock(&pending->mu);
  pending->mu.Await(absl::Condition(&pending->done));
  if (response != nullptr) *response = std::move(pending->response);
  return pending->status;
}

CoordinationAgent::State CoordinationAgent::state() {
  absl::MutexLock lock(&mu_);
  return state_;
}

absl::Status CoordinationAgent::error() {
  absl::MutexLock lock(&mu_);
  return error_;
}

uint64_t CoordinationAgent::incarnation() {
  absl::MutexLock lock(&mu_);
  return incarnation_;
}

uint64_t CoordinationAgent::service_incarnation() {
  absl::MutexLock lock(&mu_);
  return service_incarnation_;
}

// Retries start at 50 ms and double up to half the heartbeat interval, each
// jittered by +-50%: after a coordinator restart, thousands of agents must
// not come back in lockstep.
Backoff CoordinationAgent::RetryBackoff() const {
  return Backoff(absl::Milliseconds(50),
                 std::max(interval_ / 2, absl::Milliseconds(50)),
                 /*jitter=*/0.5);
}

bool CoordinationAgent::WaitForStop(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || service_stopped_ || state_ == State::kError;
  };
  env_->AwaitWithDeadline(&mu_, absl::Condition(&stopped), deadline);
  return stopped();
}

template <typename Fn>
absl::Status CoordinationAgent::Retry(Fn fn, absl::Time deadline) {
  absl::Time first_failure = absl::InfinitePast();
  Backoff backoff = RetryBackoff();
  while (true) {
    absl::Status s = fn();
    if (s.ok() || IsServiceError(s) ||
        s.code() != absl::StatusCode::kUnavailable) {
      return s;
    }
    const absl::Time now = env_->Now();
    if (first_failure == absl::InfinitePast()) first_failure = now;
    if (now - first_failure >= options_.heartbeat_timeout) return s;
    if (now >= deadline) return s;
    if (WaitForStop(std::min(now + backoff.Next(), deadline))) return s;
    if (env_->Now() >= deadline) return s;
  }
}

CallOptions CoordinationAgent::RpcCallOptions() const {
  CallOptions call;
  call.timeout = options_.rpc_timeout;
  return call;
}

absl::Status CoordinationAgent::CheckUsable() {
  absl::MutexLock lock(&mu_);
  if (state_ == State::kError) {
    return absl::FailedPreconditionError(
        absl::StrCat("coordination agent of task ", options_.task.ToString(),
                     " is in error: ", error_.message()));
  }
  if (state_ == State::kShutDown) {
    return absl::FailedPreconditionError(
        absl::StrCat("coordination agent of task ", options_.task.ToString(),
                     " has shut down"));
  }
  if (service_stopped_) {
    return absl::FailedPreconditionError(
        "the coordination service stopped (the job is over)");
  }
  return absl::OkStatus();
}

absl::Status CoordinationAgent::Register(uint64_t incarnation,
                                         absl::Time deadline) {
  absl::Status last;
  Backoff backoff = RetryBackoff();
  while (true) {
    RegisterTaskRequest request;
    *request.mutable_source_task() = ToProto(options_.task);
    request.set_incarnation(incarnation);
    RegisterTaskResponse response;
    CallOptions call;
    // Not wait_for_ready: gRPC would then retry a refused TLS handshake (a
    // wrong job token) silently until the deadline. This loop retries what
    // is transient (the service not up yet) itself, and a refusal
    // (Unauthenticated) ends it at once.
    call.timeout =
        std::max(absl::Milliseconds(1),
                 std::min(deadline - env_->Now(), absl::Seconds(10)));
    last = client_->RegisterTask(request, &response, call);
    if (last.ok()) {
      absl::MutexLock lock(&mu_);
      incarnation_ = incarnation;
      service_incarnation_ = response.service_incarnation();
      last_contact_ = env_->Now();
      return absl::OkStatus();
    }
    if (!IsTransient(last)) return last;
    if (env_->Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "task ", options_.task.ToString(),
          " could not register with the coordination service within ",
          absl::FormatDuration(options_.register_timeout),
          "; last error: ", last.message()));
    }
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return absl::CancelledError("agent stopping");
    }
    env_->SleepFor(std::min(backoff.Next(), deadline - env_->Now()));
  }
}

absl::Status CoordinationAgent::Connect() {
  uint64_t incarnation = NewIncarnation();
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kConnected) return absl::OkStatus();
    if (state_ != State::kDisconnected) {
      return absl::FailedPreconditionError(absl::StrCat(
          "coordination agent of task ", options_.task.ToString(), " is ",
          AgentStateName(state_), "; create a new agent to connect again"));
    }
  }
  COHORT_RETURN_IF_ERROR(
      Register(incarnation, env_->Now() + options_.register_timeout));
  {
    absl::MutexLock lock(&mu_);
    state_ = State::kConnected;
    stop_ = false;
  }
  COHORT_LOG(INFO) << "task " << options_.task.ToString()
                   << " registered with the coordination service (incarnation "
                   << incarnation << ")";
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
  if (options_.poll_for_errors) {
    poll_thread_ = std::thread([this] { PollLoop(); });
  }
  return absl::OkStatus();
}

void CoordinationAgent::SetError(absl::Status error) {
  std::function<void(const absl::Status&)> callback;
  std::shared_ptr<CallCancellation> poll;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kError || state_ == State::kShutDown) return;
    state_ = State::kError;
    error_ = error;
    callback = options_.error_callback;
    poll = poll_cancel_;
  }
  COHORT_LOG(ERROR) << "task " << options_.task.ToString()
                    << ": coordination error: " << Describe(error);
  if (poll) poll->Cancel();
  if (callback) callback(error);
}

void CoordinationAgent::HeartbeatLoop() {
  Backoff backoff = RetryBackoff();
  bool lost_contact_logged = false;
  absl::Time next = env_->Now() + interval_;
  while (!WaitForStop(next)) {
    HeartbeatRequest request;
    uint64_t known_service;
    {
      absl::MutexLock lock(&mu_);
      *request.mutable_source_task() = ToProto(options_.task);
      request.set_incarnation(incarnation_);
      request.set_service_incarnation(service_incarnation_);
      known_service = service_incarnation_;
    }
    HeartbeatResponse response;
    CallOptions call;
    call.timeout = std::max(interval_, absl::Milliseconds(100));
    absl::Status s = client_->Heartbeat(request, &response, call);
    const absl::Time now = env_->Now();
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
    }
    if (s.ok()) {
      if (response.service_incarnation() != known_service) {
        SetError(absl::AbortedError(
            absl::StrCat("the coordination service restarted (incarnation ",
                         known_service, " -> ", response.service_incarnation(),
                         "): its state is lost; task ",
                         options_.task.ToString(), " must restart")));
        return;
      }
      absl::MutexLock lock(&mu_);
      last_contact_ = now;
      backoff.Reset();
      lost_contact_logged = false;
      next = now + interval_;
      continue;
    }
    if (IsServiceStopped(s)) {
      absl::MutexLock lock(&mu_);
      service_stopped_ = true;
      return;
    }
    if (!IsTransient(s)) {
      if (IsServiceError(s) && options_.reconnect_after_heartbeat_timeout &&
          s.code() != absl::StatusCode::kInvalidArgument) {
        const uint64_t incarnation = NewIncarnation();
        absl::Status r =
            Register(incarnation, now + options_.heartbeat_timeout);
        if (r.ok()) {
          COHORT_LOG(WARNING) << "task " << options_.task.ToString()
                              << " re-registered with new incarnation "
                              << incarnation << " after: " << s.message();
          backoff.Reset();
          lost_contact_logged = false;
          next = env_->Now() + interval_;
          continue;
        }
        s = Annotate(
            r, absl::StrCat("reconnect after \"", s.message(), "\" failed"));
      }
      SetError(s);
      return;
    }
    // Transport blip: retry until the heartbeat timeout passes unheard.
    absl::Duration silent;
    {
      absl::MutexLock lock(&mu_);
      silent = now - last_contact_;
    }
    if (silent >= options_.heartbeat_timeout &&
        options_.reconnect_after_heartbeat_timeout) {
      // A stall (SIGSTOP, a swapping host) or a partition long enough for
      // the service to declare this task dead is survivable: keep trying,
      // and once the service answers again it refuses this incarnation and
      // the branch above registers a new one, so the task is watched again.
      // Giving up here left a task serving with no heartbeat, in ERROR for
      // good, and a second stall went unseen.
      if (!lost_contact_logged) {
        COHORT_LOG(WARNING)
            << "task " << options_.task.ToString()
            << " lost contact with the coordination service for "
            << absl::FormatDuration(silent) << " (heartbeat timeout "
            << absl::FormatDuration(options_.heartbeat_timeout)
            << "); it keeps trying and re-registers when the service "
               "answers: "
            << s.message();
        lost_contact_logged = true;
      }
      next = now + std::min(backoff.Next(), interval_);
      continue;
    }
    if (silent >= options_.heartbeat_timeout) {
      SetError(absl::UnavailableError(
          absl::StrCat("task ", options_.task.ToString(),
                       " lost contact with the coordination service for ",
                       absl::FormatDuration(silent), " (heartbeat timeout ",
                       absl::FormatDuration(options_.heartbeat_timeout),
                       "): ", s.message())));
      return;
    }
    next = now + std::min(backoff.Next(), options_.heartbeat_timeout - silent);
  }
}

void CoordinationAgent::PollLoop() {
  Backoff backoff = RetryBackoff();
  while (true) {
    PollForErrorRequest request;
    std::shared_ptr<CallCancellation> cancel =
        std::make_shared<CallCancellation>();
    {
      absl::MutexLock lock(&mu_);
      if (stop_ || service_stopped_ || state_ == State::kError) return;
      poll_cancel_ = cancel;
      *request.mutable_source_task() = ToProto(options_.task);
      request.set_incarnation(incarnation_);
      request.set_service_incarnation(service_incarnation_);
    }
    PollForErrorResponse response;
    CallOptions call;
    call.cancellation = cancel.get();
    call.timeout = options_.poll_timeout;
    absl::Status s =
        Call(&CoordinationClient::PollForErrorAsync, request, &response, call);
    {
      absl::MutexLock lock(&mu_);
      if (stop_ || state_ == State::kError) return;
    }
    if (IsServiceStopped(s)) {
      COHORT_LOG(INFO) << "task " << options_.task.ToString()
                       << ": the coordination service stopped (job over)";
      absl::MutexLock lock(&mu_);
      service_stopped_ = true;
      return;
    }
    if (!s.ok() && !IsTransient(s) &&
        s.code() != absl::StatusCode::kCancelled) {
      auto source = ErrorSourceTask(s);
      const bool about_me = source.has_value() && *source == options_.task;
      if (!(options_.reconnect_after_heartbeat_timeout && about_me)) {
        SetError(s);
        return;
      }
    }
    // Transport blip, a replaced poll, our own reconnect, or the poll's own
    // deadline (normal for a quiet job): poll again.
    if (s.ok() || IsServiceError(s) ||
        s.code() == absl::StatusCode::kDeadlineExceeded) {
      backoff.Reset();
    }
    if (WaitForStop(env_->Now() + backoff.Next())) return;
  }
}

absl::Status CoordinationAgent::Shutdown() {
  bool was_connected;
  bool service_stopped;
  std::shared_ptr<CallCancellation> poll;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kShutDown) return absl::OkStatus();
    was_connected = state_ == State::kConnected || state_ == State::kError;
    stop_ = true;
    poll = poll_cancel_;
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  {
    absl::MutexLock lock(&mu_);
    service_stopped = service_stopped_;
  }
  absl::Status result;
  if (was_connected && !service_stopped) {
    ShutdownTaskRequest request;
    *request.mutable_source_task() = ToProto(options_.task);
    request.set_incarnation(incarnation());
    ShutdownTaskResponse response;
    CallOptions call;
    call.timeout = options_.shutdown_timeout;
    result = client_->ShutdownTask(request, &response, call);
    if (IsServiceStopped(result)) result = absl::OkStatus();
  }
  if (poll) poll->Cancel();
  if (poll_thread_.joinable()) poll_thread_.join();
  {
    absl::MutexLock lock(&mu_);
    state_ = State::kShutDown;
  }
  return result;
}

absl::Status CoordinationAgent::ReportError(const absl::Status& error) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  ReportErrorToServiceRequest request;
  *request.mutable_source_task() = ToProto(options_.task);
  request.set_error_code(static_cast<int>(error.code()));
  request.set_error_message(std::string(error.message()));
  // The service refuses it if this process's registration is not the
  // task's current one (an ended attempt's process); 0 before registering.
  request.set_incarnation(incarnation());
  ReportErrorToServiceResponse response;
  absl::Status s =
      client_->ReportErrorToService(request, &response, RpcCallOptions());
  SetError(error);
  return s;
}

absl::Status CoordinationAgent::InsertKeyValue(const std::string& key,
                                               const std::string& value,
                                               bool allow_overwrite) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  InsertKeyValueRequest request;
  request.mutable_kv()->set_key(key);
  request.mutable_kv()->set_value(value);
  request.set_allow_overwrite(allow_overwrite);
  InsertKeyValueResponse response;
  if (!allow_overwrite) {
    return client_->InsertKeyValue(request, &response, RpcCallOptions());
  }
  return Retry([&] {
    return client_->InsertKeyValue(request, &response, RpcCallOptions());
  });
}

void CoordinationAgent::InsertKeyValueAsync(const std::string& key,
                                            const std::string& value,
                                            bool allow_overwrite,
                                            StatusCallback done) {
  if (absl::Status usable = CheckUsable(); !usable.ok()) {
    done(usable);
    return;
  }
  InsertKeyValueRequest request;
  request.mutable_kv()->set_key(key);
  request.mutable_kv()->set_value(value);
  request.set_allow_overwrite(allow_overwrite);
  auto response = std::make_shared<InsertKeyValueResponse>();
  client_->InsertKeyValueAsync(
      request, response.get(), RpcCallOptions(),
      [response, done = std::move(done)](absl::Status s) { done(s); });
}

absl::StatusOr<std::string> CoordinationAgent::GetKeyValue(
    const std::string& key, absl::Duration timeout) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  GetKeyValueRequest request;
  request.set_key(key);
  GetKeyValueResponse response;
  CallOptions call;
  const absl::Time deadline = env_->Now() + timeout;
  COHORT_RETURN_IF_ERROR(Retry(
      [&] {
        LeftUntil(deadline, env_->Now(), &request, &call);
        return client_->GetKeyValue(request, &response, call);
      },
      deadline));
  return response.kv().value();
}

absl::StatusOr<std::string> CoordinationAgent::TryGetKeyValue(
    const std::string& key) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  TryGetKeyValueRequest request;
  request.set_key(key);
  TryGetKeyValueResponse response;
  COHORT_RETURN_IF_ERROR(Retry([&] {
    return client_->TryGetKeyValue(request, &response, RpcCallOptions());
  }));
  return response.kv().value();
}

absl::StatusOr<int64_t> CoordinationAgent::IncrementKeyValue(
    const std::string& key, int64_t delta) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  IncrementKeyValueRequest request;
  request.set_key(key);
  request.set_increment(delta);
  IncrementKeyValueResponse response;
  COHORT_RETURN_IF_ERROR(
      client_->IncrementKeyValue(request, &response, RpcCallOptions()));
  return response.value();
}

absl::StatusOr<CompareAndSwapResult> CoordinationAgent::CompareAndSwapKeyValue(
    const std::string& key, const std::optional<std::string>& expected,
    const std::string& desired) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  CompareAndSwapKeyValueRequest request;
  request.set_key(key);
  if (expected.has_value()) request.set_expected(*expected);
  request.set_desired(desired);
  CompareAndSwapKeyValueResponse response;
  COHORT_RETURN_IF_ERROR(
      client_->CompareAndSwapKeyValue(request, &response, RpcCallOptions()));
  CompareAndSwapResult result;
  result.swapped = response.swapped();
  if (response.has_stored()) result.stored = response.stored();
  return result;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
CoordinationAgent::GetKeyValueDir(const std::string& dir) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  GetKeyValueDirRequest request;
  request.set_directory_key(dir);
  GetKeyValueDirResponse response;
  COHORT_RETURN_IF_ERROR(Retry([&] {
    return client_->GetKeyValueDir(request, &response, RpcCallOptions());
  }));
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& kv : response.kv()) out.emplace_back(kv.key(), kv.value());
  return out;
}

absl::Status CoordinationAgent::DeleteKeyValue(const std::string& key) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  DeleteKeyValueRequest request;
  request.set_key(key);
  request.set_is_directory(true);
  DeleteKeyValueResponse response;
  return Retry([&] {
    return client_->DeleteKeyValue(request, &response, RpcCallOptions());
  });
}

absl::StatusOr<KeyValueWatchResult> CoordinationAgent::WatchKeyValue(
    const std::string& key, int64_t after_version, absl::Duration timeout) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  WatchKeyValueRequest request;
  request.set_key(key);
  request.set_after_version(after_version);
  WatchKeyValueResponse response;
  CallOptions call;
  const absl::Time deadline = env_->Now() + timeout;
  COHORT_RETURN_IF_ERROR(Retry(
      [&] {
        LeftUntil(deadline, env_->Now(), &request, &call);
        return client_->WatchKeyValue(request, &response, call);
      },
      deadline));
  KeyValueWatchResult result;
  result.present = response.present();
  result.value = response.value();
  result.version = response.version();
  return result;
}

absl::Status CoordinationAgent::WaitAtBarrier(
    const std::string& id, absl::Duration timeout,
    const std::vector<TaskId>& tasks) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  int64_t counter;
  {
    absl::MutexLock lock(&mu_);
    if (barriers_in_flight_.count(id) > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "task ", options_.task.ToString(), " is already waiting at barrier '",
          id, "' (from another thread)"));
    }
    auto it = barrier_counters_.find(id);
    counter = it == barrier_counters_.end() ? 0 : it->second + 1;
    barriers_in_flight_.insert(id);
  }
  BarrierRequest request;
  request.set_barrier_id(id);
  request.set_timeout_ms(ToMs(timeout));
  for (const TaskId& t : tasks) *request.add_tasks() = ToProto(t);
  *request.mutable_source_task() = ToProto(options_.task);
  request.set_counter(counter);
  BarrierResponse response;
  CallOptions call;
  const absl::Time deadline = env_->Now() + timeout;
  absl::Status s = Retry(
      [&] {
        LeftUntil(deadline, env_->Now(), &request, &call);
        // Read per try: a re-registration (reconnect) makes a new one. The
        // service refuses a call whose incarnation is not the task's
        // current one (a process of an ended attempt).
        request.set_incarnation(incarnation());
        return client_->Barrier(request, &response, call);
      },
      deadline);
  absl::MutexLock lock(&mu_);
  barriers_in_flight_.erase(id);
  if (s.ok()) {
    barrier_counters_[id] = response.counter();
  } else if (auto synced = BarrierCounterFromError(s); synced.has_value()) {
    barrier_counters_[id] = *synced;
  } else {
    barrier_counters_[id] = counter;
  }
  return s;
}

absl::Status CoordinationAgent::CancelBarrier(const std::string& id) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  int64_t counter;
  {
    absl::MutexLock lock(&mu_);
    auto it = barrier_counters_.find(id);
    counter = it == barrier_counters_.end() ? 0 : it->second + 1;
  }
  CancelBarrierRequest request;
  request.set_barrier_id(id);
  request.set_counter(counter);
  *request.mutable_source_task() = ToProto(options_.task);
  request.set_incarnation(incarnation());
  CancelBarrierResponse response;
  return client_->CancelBarrier(request, &response, RpcCallOptions());
}

absl::StatusOr<std::vector<AliveTask>> CoordinationAgent::GetAliveTasks(
    const std::vector<TaskId>& tasks, absl::Duration timeout) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  GetAliveTasksRequest request;
  *request.mutable_requesting_task() = ToProto(options_.task);
  for (const TaskId& t : tasks) *request.add_tasks() = ToProto(t);
  request.set_timeout_ms(ToMs(timeout));
  GetAliveTasksResponse response;
  CallOptions call;
  call.timeout = Grace(timeout);
  COHORT_RETURN_IF_ERROR(
      Retry([&] { return client_->GetAliveTasks(request, &response, call); }));
  std::vector<AliveTask> out;
  for (int i = 0; i < response.alive_tasks_size(); ++i) {
    out.push_back(AliveTask{
        FromProto(response.alive_tasks(i)),
        i < response.incarnations_size() ? response.incarnations(i) : 0});
  }
  return out;
}

absl::StatusOr<std::vector<TaskStateInfo>> CoordinationAgent::GetTaskState(
    const std::vector<TaskId>& tasks) {
  COHORT_RETURN_IF_ERROR(CheckUsable());
  GetTaskStateRequest request;
  for (const TaskId& t : tasks) *request.add_source_task() = ToProto(t);
  GetTaskStateResponse response;
  COHORT_RETURN_IF_ERROR(
      client_->GetTaskState(request, &response, RpcCallOptions()));
  return std::vector<TaskStateInfo>(response.task_state().begin(),
                                    response.task_state().end());
}

}  // namespace cohort::coord
