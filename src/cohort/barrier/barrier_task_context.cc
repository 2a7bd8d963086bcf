#include "cohort/barrier/barrier_task_context.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cohort/barrier.grpc.pb.h"
#include "cohort/barrier/barrier_framed_handler.h"
#include "cohort/base/backoff.h"
#include "cohort/base/status.h"
#include "cohort/rpc/status_conversion.h"
#include "cohort/rpc/transport.h"
#include "grpcpp/grpcpp.h"

namespace cohort::barrier {
namespace {

// Extra time the RPC waits beyond the coordinator's timeout, so that the
// coordinator's message (which names the missing partitions) wins the race.
constexpr absl::Duration kRpcDeadlineMargin = absl::Seconds(30);

std::atomic<BarrierTaskContext*> g_context{nullptr};

absl::Status MissingVar(const char* name) {
  return absl::FailedPreconditionError(absl::StrCat(
      "barrier task context: environment variable ", name,
      " is not set; run this program as a task of `cohort launch` (which "
      "sets COHORT_BARRIER_ADDRESS, COHORT_PARTITION_ID, COHORT_NUM_TASKS, "
      "...)"));
}

absl::StatusOr<int64_t> IntVar(Env* env, const char* name,
                               std::optional<int64_t> fallback) {
  std::optional<std::string> value = env->GetVar(name);
  if (!value.has_value()) {
    if (fallback.has_value()) return *fallback;
    return MissingVar(name);
  }
  int64_t parsed;
  if (!absl::SimpleAtoi(*value, &parsed)) {
    return absl::FailedPreconditionError(
        absl::StrCat("barrier task context: environment variable ", name,
                     " must be an integer, got \"", *value, "\""));
  }
  return parsed;
}

// Overwrites the epoch file in place with one fixed-width pwrite (the epoch,
// space-padded to 20 characters, then a newline): one syscall per sync, and
// the file never changes size, so a reader sees the old or the new value.
absl::Status WriteEpochFile(int* fd, const std::string& path, int64_t epoch) {
  if (*fd < 0) {
    *fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot write barrier epoch file ", path, ": ", strerror(errno)));
    }
  }
  char text[32];
  const int len =
      snprintf(text, sizeof(text), "%-20lld\n", static_cast<long long>(epoch));
  if (pwrite(*fd, text, static_cast<size_t>(len), 0) != len) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot write barrier epoch file ", path, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// Connects to the barrier coordinator's framed transport. Unavailable is
// retried with backoff (a few times, within `deadline`): the server drops
// the oldest pending handshakes when a flood of connections arrives, and a
// task caught in one must not fail its job for it. Other errors
// (Unauthenticated, a peer that is not a coordinator) are final.
absl::StatusOr<std::unique_ptr<rpc::FramedClient>> ConnectWithRetries(
    const std::string& address, const std::string& token, absl::Time deadline) {
  Backoff backoff(absl::Milliseconds(20), absl::Seconds(1));
  for (int attempt = 1;; ++attempt) {
    absl::StatusOr<std::unique_ptr<rpc::FramedClient>> client =
        rpc::FramedClient::Connect(address, token, deadline,
                                   rpc::kDefaultMaxFrame, kBarrierTcpIdentity);
    if (client.ok() || !absl::IsUnavailable(client.status()) || attempt == 8 ||
        absl::Now() + backoff.current() >= deadline) {
      return client;
    }
    absl::SleepFor(backoff.Next());
  }
}

}  // namespace

struct BarrierTaskContext::StubHolder {
  std::unique_ptr<cohort::BarrierCoordinatorService::Stub> stub;
};

absl::StatusOr<BarrierTaskContext*> BarrierTaskContext::Get() {
  static const auto* context =
      new absl::StatusOr<std::unique_ptr<BarrierTaskContext>>(
          FromEnv(Env::Default()));
  if (!context->ok()) return context->status();
  BarrierTaskContext* ctx = context->value().get();
  g_context.store(ctx);
  return ctx;
}

absl::StatusOr<std::unique_ptr<BarrierTaskContext>> BarrierTaskContext::FromEnv(
    Env* env) {
  Options options;
  std::optional<std::string> address = env->GetVar(kEnvBarrierAddress);
  if (!address.has_value() || address->empty()) {
    // Under an etcd control plane the launchers serve no gang service (the
    // gang barrier lives in task 0's launcher); say so rather than "not
    // under cohort launch".
    if (absl::StartsWith(
            env->GetVar("COHORT_COORDINATION_SERVICE_ADDRESS").value_or(""),
            "etcd://")) {
      return absl::FailedPreconditionError(
          "barrier task context: barrier execution mode has no gang service "
          "on an etcd control plane (--rendezvous etcd://...) yet; use the "
          "coordination API's named barriers (cohort.coordination_client()."
          "barrier(name), docs/etcd.md) or the built-in control plane");
    }
    return MissingVar(kEnvBarrierAddress);
  }
  options.coordinator_address = *address;
  COHORT_ASSIGN_OR_RETURN(int64_t partition,
                          IntVar(env, kEnvPartitionId, std::nullopt));
  COHORT_ASSIGN_OR_RETURN(int64_t num_tasks,
                          IntVar(env, kEnvNumTasks, std::nullopt));
  COHORT_ASSIGN_OR_RETURN(int64_t attempt, IntVar(env, kEnvAttemptNumber, 0));
  COHORT_ASSIGN_OR_RETURN(int64_t stage, IntVar(env, kEnvStageId, 0));
  COHORT_ASSIGN_OR_RETURN(
      int64_t task_attempt_id,
      IntVar(env, kEnvTaskAttemptId, attempt * num_tasks + partition));
  options.partition_id = static_cast<int>(partition);
  options.num_tasks = static_cast<int>(num_tasks);
  options.attempt_number = static_cast<int>(attempt);
  options.stage_id = stage;
  options.task_attempt_id = task_attempt_id;
  if (std::optional<std::string> addrs = env->GetVar(kEnvTaskAddresses);
      addrs.has_value() && !addrs->empty()) {
    options.task_addresses = absl::StrSplit(*addrs, ',');
  }
  if (std::optional<std::string> t = env->GetVar(kEnvBarrierTcpAddress);
      t.has_value()) {
    options.tcp_address = *t;
  }
  if (std::optional<std::string> f = env->GetVar(kEnvEpochFile);
      f.has_value()) {
    options.epoch_file = *f;
  }
  options.job_token = env->GetVar(rpc::kJobTokenEnvVar).value_or("");
  if (std::optional<std::string> t = env->GetVar(kEnvTimeout); t.has_value()) {
    double seconds;
    if (!absl::SimpleAtod(*t, &seconds) || !(seconds > 0) ||
        !std::isfinite(seconds)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "barrier task context: environment variable ", kEnvTimeout,
          " must be a positive number of seconds, got \"", *t, "\""));
    }
    options.sync_timeout = absl::Seconds(seconds);
  }
  return Create(std::move(options));
}

absl::StatusOr<std::unique_ptr<BarrierTaskContext>> BarrierTaskContext::Create(
    Options options) {
  if (options.coordinator_address.empty()) {
    return absl::InvalidArgumentError(
        "barrier task context: the coordinator address is empty");
  }
  if (options.num_tasks <= 0 || options.partition_id < 0 ||
      options.partition_id >= options.num_tasks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "barrier task context: partition id ", options.partition_id,
        " is out of range for ", options.num_tasks,
        " task(s); check COHORT_PARTITION_ID and COHORT_NUM_TASKS"));
  }
  if (!options.task_addresses.empty() &&
      static_cast<int>(options.task_addresses.size()) != options.num_tasks) {
    return absl::InvalidArgumentError(
        absl::StrCat("barrier task context: ", options.task_addresses.size(),
                     " task address(es) for ", options.num_tasks,
                     " task(s); check COHORT_TASK_ADDRESSES"));
  }
  rpc::TransportSecurity security;
  security.job_token = options.job_token;
  COHORT_ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::Channel> channel,
      rpc::CreateChannel(options.coordinator_address, security));
  std::unique_ptr<BarrierTaskContext> ctx(
      new BarrierTaskContext(std::move(options)));
  ctx->channel_ = std::move(channel);
  ctx->security_ = std::move(security);
  ctx->stub_ = std::make_unique<StubHolder>();
  ctx->stub_->stub = cohort::BarrierCoordinatorService::NewStub(ctx->channel_);
  if (!ctx->options_.epoch_file.empty()) {
    absl::StatusOr<std::string> text =
        Env::Default()->ReadFile(ctx->options_.epoch_file);
    if (text.ok()) {
      int64_t epoch;
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &epoch) ||
          epoch < 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "barrier task context: epoch file ", ctx->options_.epoch_file, " (",
            kEnvEpochFile, ") does not hold a barrier epoch: \"", *text, "\""));
      }
      absl::MutexLock lock(&ctx->mu_);
      ctx->epoch_ = epoch;
    } else if (!absl::IsNotFound(text.status())) {
      return text.status();
    }
  }
  if (ctx->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat(
        "barrier task context: eventfd failed: ", strerror(errno)));
  }
  BarrierTaskContext* raw = ctx.get();
  ctx->watcher_ = std::thread([raw] { raw->WatchForCancel(); });
  return ctx;
}

BarrierTaskContext::BarrierTaskContext(Options options)
    : options_(std::move(options)) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

BarrierTaskContext::~BarrierTaskContext() {
  BarrierTaskContext* self = this;
  g_context.compare_exchange_strong(self, nullptr);
  if (watcher_.joinable()) {
    shutting_down_.store(true);
    Wake();
    watcher_.join();
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoch_fd_ >= 0) close(epoch_fd_);
}

void BarrierTaskContext::WatchForCancel() {
  while (!shutting_down_.load()) {
    pollfd pfd{wake_fd_, POLLIN, 0};
    // Idle until a cancellation or the destructor writes to the eventfd.
    if (poll(&pfd, 1, -1) > 0) {
      uint64_t count;
      ssize_t ignored = read(wake_fd_, &count, sizeof(count));
      (void)ignored;
    }
    if (cancel_requested_.load()) CancelInFlight();
  }
}

void BarrierTaskContext::CancelInFlight() {
  absl::MutexLock lock(&mu_);
  if (current_rpc_ != nullptr) current_rpc_->TryCancel();
  // Wakes a TCP sync blocked in poll(); the server sees the connection end
  // and withdraws the request.
  if (tcp_in_flight_ && tcp_ != nullptr) tcp_->Shutdown();
}

int64_t BarrierTaskContext::epoch() const {
  absl::MutexLock lock(&mu_);
  return epoch_;
}

std::vector<TaskInfo> BarrierTaskContext::GetTaskInfos() const {
  std::vector<TaskInfo> infos;
  for (const std::string& a : options_.task_addresses) infos.push_back({a});
  return infos;
}

absl::Status BarrierTaskContext::Barrier() {
  return Sync(/*all_gather=*/false, std::string()).status();
}

absl::StatusOr<std::vector<std::string>> BarrierTaskContext::AllGather(
    const std::string& message) {
  return Sync(/*all_gather=*/true, message);
}

void BarrierTaskContext::Wake() {
  const uint64_t one = 1;
  // A full counter (never in practice) still leaves the fd readable.
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

void BarrierTaskContext::Cancel() {
  cancel_requested_.store(true);
  CancelInFlight();
}

void BarrierTaskContext::CancelFromSignalHandler() {
  BarrierTaskContext* ctx = g_context.load();
  if (ctx == nullptr) return;
  ctx->cancel_requested_.store(true);  // lock-free
  ctx->Wake();                         // write(2): the watcher cancels
}

absl::StatusOr<std::vector<std::string>> BarrierTaskContext::TcpSyncLocked(
    const std::string& where, const cohort::BarrierSyncRequest& request,
    absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  bool connected;
  {
    absl::MutexLock lock(&mu_);
    connected = tcp_ != nullptr;
  }
  if (!connected) {
    // Outside the lock (a cancel must not wait for a connect). Syncs are
    // sequential, so no other thread creates tcp_ meanwhile. Bounded by the
    // sync's own deadline: a coordinator that accepts but never answers the
    // handshake cannot hang the task.
    absl::StatusOr<std::unique_ptr<rpc::FramedClient>> client =
        ConnectWithRetries(options_.tcp_address, options_.job_token, deadline);
    if (!client.ok()) {
      return Annotate(client.status(),
                      absl::StrCat(where, ": barrier coordinator"));
    }
    absl::MutexLock lock(&mu_);
    tcp_ = std::move(client).value();
  }
  rpc::FramedClient* client;
  {
    absl::MutexLock lock(&mu_);
    client = tcp_.get();
    tcp_in_flight_ = true;
  }
  absl::StatusOr<std::string> reply =
      cancel_requested_.load()
          ? absl::CancelledError("cancelled")
          : client->Call(request.SerializeAsString(), deadline, wake_fd_);
  {
    absl::MutexLock lock(&mu_);
    tcp_in_flight_ = false;
    // A sync that did not get its answer leaves the stream unusable.
    if (client->broken()) tcp_.reset();
  }
  absl::StatusOr<std::vector<std::string>> result;
  if (reply.ok()) {
    cohort::BarrierSyncResponse response;
    if (!response.ParseFromString(*reply)) {
      absl::MutexLock lock(&mu_);
      tcp_.reset();
      return absl::DataLossError(absl::StrCat(
          where, ": the barrier coordinator at ", options_.tcp_address,
          " answered with bytes that are not a BarrierSyncResponse"));
    }
    result = std::vector<std::string>(response.messages().begin(),
                                      response.messages().end());
  } else {
    result = reply.status();
  }
  if (cancel_requested_.load()) {
    return absl::CancelledError(absl::StrCat(
        where,
        " was cancelled: the task is being stopped (the coordinator "
        "withdraws its request)"));
  }
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat(where, ": ", result.status().message()));
  }
  int64_t new_epoch;
  {
    absl::MutexLock lock(&mu_);
    new_epoch = ++epoch_;
  }
  if (!options_.epoch_file.empty()) {
    COHORT_RETURN_IF_ERROR(Annotate(
        WriteEpochFile(&epoch_fd_, options_.epoch_file, new_epoch), where));
  }
  return result;
}

absl::StatusOr<std::vector<std::string>> BarrierTaskContext::Sync(
    bool all_gather, const std::string& message) {
  const char* what = all_gather ? "allGather()" : "barrier()";
  int64_t epoch;
  {
    absl::MutexLock lock(&mu_);
    if (in_flight_) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " of partition ", options_.partition_id,
          ": another barrier()/allGather() of this task is still waiting; "
          "syncs of one task must be sequential"));
    }
    epoch = epoch_;
    in_flight_ = true;
  }
  grpc::ClientContext rpc;
  struct ClearInFlight {
    BarrierTaskContext* self;
    ~ClearInFlight() {
      absl::MutexLock lock(&self->mu_);
      self->in_flight_ = false;
      self->current_rpc_ = nullptr;
    }
  } clear_in_flight{this};
  {
    absl::MutexLock lock(&mu_);
    current_rpc_ = &rpc;
  }

  const std::string where =
      absl::StrCat(what, " of partition ", options_.partition_id, " (attempt ",
                   options_.attempt_number, ", barrier epoch ", epoch, ")");
  // Checked after current_rpc_ is published: a Cancel() either sees the RPC
  // or is seen here.
  if (cancel_requested_.load()) {
    return absl::CancelledError(
        absl::StrCat(where, " was cancelled: the task is being stopped"));
  }

  cohort::BarrierSyncRequest request;
  request.set_num_tasks(options_.num_tasks);
  request.set_stage_id(options_.stage_id);
  request.set_stage_attempt(options_.attempt_number);
  request.set_task_attempt_id(options_.task_attempt_id);
  request.set_barrier_epoch(epoch);
  request.set_partition_id(options_.partition_id);
  request.set_method(all_gather ? cohort::ALL_GATHER : cohort::BARRIER);
  if (all_gather) request.set_message(message);
  cohort::BarrierSyncResponse response;

  const absl::Duration wait = options_.sync_timeout + kRpcDeadlineMargin;
  if (!options_.tcp_address.empty()) {
    return TcpSyncLocked(where, request, wait);
  }
  rpc.set_deadline(absl::ToChronoTime(absl::Now() + wait));
  rpc::AttachJobToken(&rpc, security_);
  // The synchronous call polls on this thread: no thread hand-off on the
  // hot path. The RPC deadline bounds the wait.
  const grpc::Status rpc_status = stub_->stub->Sync(&rpc, request, &response);
  const bool cancel_sent =
      cancel_requested_.load() &&
      rpc_status.error_code() == grpc::StatusCode::CANCELLED;
  if (cancel_sent) {
    return absl::CancelledError(absl::StrCat(
        where,
        " was cancelled: the task is being stopped (the coordinator "
        "withdraws its request)"));
  }
  if (!rpc_status.ok()) {
    absl::Status status = rpc::FromGrpcStatus(rpc_status);
    if (status.code() == absl::StatusCode::kUnavailable) {
      return absl::UnavailableError(absl::StrCat(
          where, ": cannot reach the barrier coordinator at ",
          options_.coordinator_address,
          " (is `cohort launch` still running?): ", status.message()));
    }
    if (status.code() == absl::StatusCode::kDeadlineExceeded &&
        status.message().find("coordinator didn't get") ==
            absl::string_view::npos) {
      return absl::DeadlineExceededError(
          absl::StrCat(where, ": no answer from the barrier coordinator at ",
                       options_.coordinator_address, " within ",
                       absl::FormatDuration(wait), ": ", status.message()));
    }
    return absl::Status(status.code(),
                        absl::StrCat(where, ": ", status.message()));
  }
  int64_t new_epoch;
  {
    absl::MutexLock lock(&mu_);
    new_epoch = ++epoch_;
  }
  if (!options_.epoch_file.empty()) {
    COHORT_RETURN_IF_ERROR(Annotate(
        WriteEpochFile(&epoch_fd_, options_.epoch_file, new_epoch), where));
  }
  std::vector<std::string> result(response.messages().begin(),
                                  response.messages().end());
  return result;
}

}  // namespace cohort::barrier
