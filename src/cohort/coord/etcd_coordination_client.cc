#include "cohort/coord/etcd_coordination_client.h"

#include <atomic>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "cohort/base/json.h"
#include "cohort/base/status.h"
#include "cohort/coord/coordination_rpc_handler.h"
#include "cohort/coord/coordination_service.h"
#include "cohort/coord/coordination_service_util.h"
#include "cohort/coord/key_value_store.h"
#include "cohort/rpc/job_token.h"

namespace cohort::coord {
namespace {

constexpr char kJobKey[] = "job";
constexpr char kTasksDir[] = "status/tasks/";
constexpr char kShutdownDir[] = "status/shutdown/";
constexpr char kErrorKey[] = "status/error";
constexpr char kStatusDir[] = "status/";

// How long a blocking call with no timeout of its own (GetKeyValue with
// timeout 0, a poll without a deadline) waits per watch before looking
// again: a watch is one stream, not a promise to wait forever.
constexpr absl::Duration kWatchSlice = absl::Minutes(5);
// Each of ShutdownTask's two calls: an election takes about a second.
constexpr absl::Duration kShutdownCallTimeout = absl::Seconds(4);
// How often a barrier's waiters list its arrivals while no result came.
constexpr absl::Duration kBarrierRecheck = absl::Seconds(1);
// Keys of the key-value store: as the built-in store's cap.
constexpr size_t kMaxKeyBytes = 4096;

// Fields of records read from etcd: anyone with access to the prefix can
// write them, so they are read leniently (base/json.h's JsonStringOr...).
Json ObjectField(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : Json();
}

absl::Duration Remaining(absl::Time deadline) {
  return std::max(absl::ZeroDuration(), deadline - absl::Now());
}

// The deadline of a call: its request's timeout (0: none) and the call's
// own, whichever comes first.
absl::Time DeadlineOf(int64_t timeout_ms, const CallOptions& options) {
  absl::Time deadline = absl::InfiniteFuture();
  if (timeout_ms > 0) deadline = absl::Now() + absl::Milliseconds(timeout_ms);
  if (options.timeout != absl::InfiniteDuration()) {
    deadline = std::min(deadline, absl::Now() + options.timeout);
  }
  return deadline;
}

class EtcdCoordinationClient : public CoordinationClient {
 public:
  EtcdCoordinationClient(std::shared_ptr<EtcdClient> etcd,
                         EtcdCoordinationOptions options, uint64_t incarnation)
      : etcd_(std::move(etcd)),
        options_(std::move(options)),
        incarnation_(incarnation) {
    for (const auto& [job, count] : options_.jobs) {
      for (int i = 0; i < count; ++i) all_tasks_.push_back({job, i});
    }
  }

  ~EtcdCoordinationClient() override {
    std::vector<Worker> workers;
    {
      absl::MutexLock lock(&mu_);
      workers.swap(workers_);
    }
    for (Worker& w : workers) w.thread.join();
  }

#define COHORT_ETCD_COORD_METHOD_(Name)                                        \
  void Name##Async(const Name##Request& request, Name##Response* response,     \
                   const CallOptions& options, StatusCallback done) override { \
    Spawn([this, request, response, options, done = std::move(done)] {         \
      done(Do##Name(request, response, options));                              \
    });                                                                        \
  }                                                                            \
  absl::Status Name(const Name##Request& request, Name##Response* response,    \
                    const CallOptions& options) override {                     \
    return Do##Name(request, response, options);                               \
  }
  COHORT_COORDINATION_RPCS(COHORT_ETCD_COORD_METHOD_)
#undef COHORT_ETCD_COORD_METHOD_

 private:
  // One thread per asynchronous call; finished ones are joined by the next.
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  void Spawn(std::function<void()> run) {
    std::vector<Worker> finished;
    {
      absl::MutexLock lock(&mu_);
      for (auto it = workers_.begin(); it != workers_.end();) {
        if (it->done->load()) {
          finished.push_back(std::move(*it));
          it = workers_.erase(it);
        } else {
          ++it;
        }
      }
      auto done = std::make_shared<std::atomic<bool>>(false);
      workers_.push_back({std::thread([run = std::move(run), done] {
                            run();
                            done->store(true);
                          }),
                          done});
    }
    for (Worker& w : finished) w.thread.join();
  }

  std::string Space(absl::string_view rest) const {
    return absl::StrCat(options_.space, rest);
  }
  absl::Status Error(absl::StatusCode code, const std::string& message,
                     const TaskId* source = nullptr,
                     bool reported = false) const {
    return internal::ServiceError(code, message, incarnation_, source,
                                  reported);
  }
  absl::Status CheckTask(const TaskId& task) const {
    auto it = options_.jobs.find(task.job);
    if (it == options_.jobs.end() || task.index < 0 ||
        task.index >= it->second) {
      return Error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat("task ", task.ToString(),
                                " is not a task of this job (etcd space ",
                                etcd_->target().prefix, options_.space, ")"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> KvKey(absl::string_view key) const {
    std::string normal = KeyValueStore::NormalizeKey(key);
    if (normal.empty() || normal.size() > kMaxKeyBytes) {
      return Error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat("key-value call with an empty key or one over ",
                                kMaxKeyBytes, " bytes"));
    }
    return absl::StrCat(options_.space, "kv/", normal);
  }

  // --- Tasks, heartbeats, errors ---

  absl::Status DoRegisterTask(const RegisterTaskRequest& request,
                              RegisterTaskResponse* response,
                              const CallOptions&) {
    const TaskId task = FromProto(request.source_task());
    COHORT_RETURN_IF_ERROR(CheckTask(task));
    COHORT_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> error,
                            etcd_->Get(Space(kErrorKey)));
    if (error.has_value()) return JobError(error->value);
    COHORT_ASSIGN_OR_RETURN(
        int64_t lease, etcd_->GrantLease(std::max(absl::Seconds(2),
                                                  options_.heartbeat_timeout)));
    COHORT_RETURN_IF_ERROR(
        etcd_
            ->Put(Space(absl::StrCat(kTasksDir, task.ToString())),
                  JsonDump(Json{{"incarnation", request.incarnation()}}), lease)
            .status());
    // After the key: a poll in between would see neither and call the
    // task lost.
    COHORT_RETURN_IF_ERROR(
        etcd_->Delete(Space(absl::StrCat(kShutdownDir, task.ToString())))
            .status());
    {
      absl::MutexLock lock(&mu_);
      leases_[task.ToString()] = lease;
    }
    response->set_service_incarnation(incarnation_);
    return absl::OkStatus();
  }

  absl::Status DoHeartbeat(const HeartbeatRequest& request,
                           HeartbeatResponse* response,
                           const CallOptions& options) {
    const TaskId task = FromProto(request.source_task());
    int64_t lease = 0;
    {
      absl::MutexLock lock(&mu_);
      auto it = leases_.find(task.ToString());
      if (it != leases_.end()) lease = it->second;
    }
    if (lease == 0) {
      return Error(absl::StatusCode::kFailedPrecondition,
                   absl::StrCat("task ", task.ToString(),
                                " heartbeats without having registered "
                                "through this client"),
                   &task);
    }
    // Within the agent's own timeout, so it judges contact lost on time.
    absl::Status s = etcd_->KeepAlive(lease, options.timeout);
    if (absl::IsNotFound(s)) {
      return Error(
          absl::StatusCode::kUnavailable,
          absl::StrCat("task ", task.ToString(),
                       " was declared lost: its etcd lease expired (no "
                       "heartbeat reached etcd for ",
                       absl::FormatDuration(options_.heartbeat_timeout), ")"),
          &task);
    }
    COHORT_RETURN_IF_ERROR(s);
    response->set_service_incarnation(incarnation_);
    return absl::OkStatus();
  }

  absl::Status DoShutdownTask(const ShutdownTaskRequest& request,
                              ShutdownTaskResponse*, const CallOptions&) {
    const TaskId task = FromProto(request.source_task());
    COHORT_RETURN_IF_ERROR(CheckTask(task));
    // The marker first: a poll that sees the task's key go then knows it
    // left on purpose. Bounded: a task that shuts down after losing etcd
    // (its job over) must not wait for every member once more; without the
    // marker its lease is left to expire.
    COHORT_RETURN_IF_ERROR(
        etcd_
            ->Put(Space(absl::StrCat(kShutdownDir, task.ToString())), "", 0,
                  kShutdownCallTimeout)
            .status());
    int64_t lease = 0;
    {
      absl::MutexLock lock(&mu_);
      auto it = leases_.find(task.ToString());
      if (it != leases_.end()) {
        lease = it->second;
        leases_.erase(it);
      }
    }
    if (lease != 0) {
      absl::Status s = etcd_->RevokeLease(lease, kShutdownCallTimeout);
      if (!s.ok() && !absl::IsNotFound(s)) return s;
    }
    return absl::OkStatus();
  }

  absl::Status DoResetTask(const ResetTaskRequest&, ResetTaskResponse*,
                           const CallOptions&) {
    return Unserved("ResetTask");
  }

  absl::Status DoReportErrorToService(
      const ReportErrorToServiceRequest& request, ReportErrorToServiceResponse*,
      const CallOptions&) {
    const TaskId task = FromProto(request.source_task());
    COHORT_RETURN_IF_ERROR(CheckTask(task));
    // A recoverable task's failure is its launcher's to handle.
    if (options_.recoverable) return absl::OkStatus();
    Json record = {{"task", task.ToString()},
                   {"code", request.error_code()},
                   {"message", request.error_message().substr(0, 4096)},
                   {"reported", true}};
    return etcd_->Create(Space(kErrorKey), JsonDump(record)).status();
  }

  // The job's error as every task reads it.
  absl::Status JobError(const std::string& text) const {
    absl::StatusOr<Json> j = ParseJson(text, "the job's error record in etcd");
    if (!j.ok() || !j->is_object()) {
      return Error(absl::StatusCode::kInternal,
                   absl::StrCat("the job's error record in etcd (",
                                etcd_->target().prefix, Space(kErrorKey),
                                ") is unreadable"));
    }
    int code = static_cast<int>(JsonIntOr(*j, "code", 2));
    if (code <= 0 || code > 16) code = 2;
    absl::StatusOr<TaskId> source = TaskId::Parse(JsonStringOr(*j, "task"));
    return Error(static_cast<absl::StatusCode>(code),
                 JsonStringOr(*j, "message"), source.ok() ? &*source : nullptr,
                 JsonBoolOr(*j, "reported", false));
  }

  // Returns the job's error once there is one: reported by a task, or a
  // task's lease expired (recorded here, first writer wins). OK-less: a
  // poll ends with the error, DeadlineExceeded, or Cancelled. Losses are
  // found by listing the status directory after every change to it.
  absl::Status DoPollForError(const PollForErrorRequest&, PollForErrorResponse*,
                              const CallOptions& options) {
    const absl::Time deadline = DeadlineOf(0, options);
    while (true) {
      COHORT_ASSIGN_OR_RETURN(EtcdTaskLosses::Look look, losses_.Read());
      if (look.error.has_value()) return JobError(*look.error);
      if (!look.lost.empty() && !options_.recoverable) {
        const std::string& lost = look.lost.front();
        Json record = {
            {"task", lost},
            {"code", static_cast<int>(absl::StatusCode::kUnavailable)},
            {"message",
             absl::StrCat("task ", lost,
                          " was lost: no heartbeat reached etcd for ",
                          absl::FormatDuration(options_.heartbeat_timeout),
                          " and its lease expired, or its key was deleted; "
                          "check that task's host and process")},
            {"reported", false}};
        COHORT_RETURN_IF_ERROR(
            etcd_->Create(Space(kErrorKey), JsonDump(record)).status());
        continue;  // read whichever error won
      }
      absl::Status changed = losses_.AwaitChange(
          look.revision, std::min(Remaining(deadline), kWatchSlice),
          options.cancellation);
      if (absl::IsDeadlineExceeded(changed) && absl::Now() < deadline) {
        continue;
      }
      // Compacted past the revision: list again.
      if (absl::IsFailedPrecondition(changed)) continue;
      COHORT_RETURN_IF_ERROR(changed);
    }
  }

  absl::Status DoGetTaskState(const GetTaskStateRequest& request,
                              GetTaskStateResponse* response,
                              const CallOptions&) {
    for (const CoordinatedTask& t : request.source_task()) {
      const TaskId task = FromProto(t);
      COHORT_RETURN_IF_ERROR(CheckTask(task));
      COHORT_ASSIGN_OR_RETURN(
          std::optional<EtcdKeyValue> kv,
          etcd_->Get(Space(absl::StrCat(kTasksDir, task.ToString()))));
      TaskStateInfo* info = response->add_task_state();
      *info->mutable_task() = t;
      info->set_heartbeat_age_ms(-1);
      if (kv.has_value()) {
        info->set_state(TASK_STATE_CONNECTED);
        absl::StatusOr<Json> j = ParseJson(kv->value, "a task record");
        if (j.ok() && j->is_object()) {
          info->set_incarnation(JsonUintOr(*j, "incarnation", 0));
        }
      } else {
        info->set_state(TASK_STATE_DISCONNECTED);
      }
    }
    return absl::OkStatus();
  }

  absl::Status Unserved(absl::string_view what) const {
    return absl::UnimplementedError(
        absl::StrCat(what,
                     " is not served by the etcd control plane; `cohort "
                     "status` and the job page read the built-in one "
                     "(docs/etcd.md)"));
  }
  // Versions are etcd revisions of the status directory: every
  // registration, shutdown, loss and error makes a new one.
  absl::Status DoWatchJobState(const WatchJobStateRequest& request,
                               WatchJobStateResponse* response,
                               const CallOptions& options) {
    const absl::Time deadline = DeadlineOf(request.timeout_ms(), options);
    // Given a version, wait for a change to the status directory after it
    // (the store's revision also moves with every other write: key-value
    // sets, barriers, other jobs), then answer with the state as listed.
    while (request.version_number() >= 0 && absl::Now() < deadline) {
      absl::StatusOr<std::vector<EtcdEvent>> events = etcd_->Watch(
          Space(kStatusDir), request.version_number(),
          std::min(Remaining(deadline), kWatchSlice), options.cancellation);
      if (events.ok() || absl::IsFailedPrecondition(events.status())) break;
      if (absl::IsDeadlineExceeded(events.status())) continue;
      return events.status();
    }
    int64_t revision = 0;
    COHORT_ASSIGN_OR_RETURN(std::vector<EtcdKeyValue> status,
                            etcd_->List(Space(kStatusDir), &revision));
    FillStates(status, response->mutable_task_state());
    response->set_version_number(revision);
    return absl::OkStatus();
  }

  // Every task's state from a listing of the status directory: registered
  // (CONNECTED), the job's error's source (ERROR), else DISCONNECTED.
  void FillStates(
      const std::vector<EtcdKeyValue>& status,
      google::protobuf::RepeatedPtrField<TaskStateInfo>* out) const {
    std::map<std::string, uint64_t> connected;
    std::string failed, failure;
    for (const EtcdKeyValue& kv : status) {
      if (absl::StartsWith(kv.key, Space(kTasksDir))) {
        absl::StatusOr<Json> j = ParseJson(kv.value, "a task record");
        connected[kv.key.substr(Space(kTasksDir).size())] =
            j.ok() && j->is_object() ? JsonUintOr(*j, "incarnation", 0) : 0;
      } else if (kv.key == Space(kErrorKey)) {
        absl::StatusOr<Json> j = ParseJson(kv.value, "the job's error");
        if (j.ok() && j->is_object()) {
          failed = JsonStringOr(*j, "task");
          failure = JsonStringOr(*j, "message");
        }
      }
    }
    for (const TaskId& task : all_tasks_) {
      TaskStateInfo* info = out->Add();
      *info->mutable_task() = ToProto(task);
      info->set_heartbeat_age_ms(-1);
      const std::string name = task.ToString();
      if (name == failed) {
        info->set_state(TASK_STATE_ERROR);
        info->set_error_message(failure);
      } else if (auto it = connected.find(name); it != connected.end()) {
        info->set_state(TASK_STATE_CONNECTED);
        info->set_incarnation(it->second);
      } else {
        info->set_state(TASK_STATE_DISCONNECTED);
      }
    }
  }
  absl::Status DoGetJobStatus(const GetJobStatusRequest&, GetJobStatusResponse*,
                              const CallOptions&) {
    return Unserved("GetJobStatus");
  }
  absl::Status DoGetAliveTasks(const GetAliveTasksRequest&,
                               GetAliveTasksResponse*, const CallOptions&) {
    return Unserved("GetAliveTasks");
  }

  // --- The key-value store ---

  absl::Status DoInsertKeyValue(const InsertKeyValueRequest& request,
                                InsertKeyValueResponse*, const CallOptions&) {
    COHORT_ASSIGN_OR_RETURN(std::string key, KvKey(request.kv().key()));
    if (request.allow_overwrite()) {
      return etcd_->Put(key, request.kv().value()).status();
    }
    COHORT_ASSIGN_OR_RETURN(bool created,
                            etcd_->Create(key, request.kv().value()));
    if (!created) {
      return Error(
          absl::StatusCode::kAlreadyExists,
          absl::StrCat("key \"", request.kv().key(), "\" already exists (etcd ",
                       etcd_->target().prefix, key, ")"));
    }
    return absl::OkStatus();
  }

  absl::Status DoGetKeyValue(const GetKeyValueRequest& request,
                             GetKeyValueResponse* response,
                             const CallOptions& options) {
    COHORT_ASSIGN_OR_RETURN(std::string key, KvKey(request.key()));
    const absl::Time deadline = DeadlineOf(request.timeout_ms(), options);
    const absl::Time started = absl::Now();
    while (true) {
      int64_t revision = 0;
      COHORT_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> kv,
                              etcd_->Get(key, &revision));
      if (kv.has_value()) {
        response->mutable_kv()->set_key(request.key());
        response->mutable_kv()->set_value(kv->value);
        return absl::OkStatus();
      }
      if (absl::Now() >= deadline) break;
      absl::StatusOr<std::vector<EtcdEvent>> events = etcd_->Watch(
          key, revision, std::min(Remaining(deadline), kWatchSlice),
          options.cancellation);
      if (absl::IsDeadlineExceeded(events.status()) ||
          absl::IsFailedPrecondition(events.status())) {
        continue;  // read it again
      }
      COHORT_RETURN_IF_ERROR(events.status());
    }
    return Error(
        absl::StatusCode::kDeadlineExceeded,
        absl::StrCat("key \"", request.key(), "\" was not set in etcd within ",
                     absl::FormatDuration(absl::Now() - started), " (",
                     etcd_->target().prefix, key, ")"));
  }

  absl::Status DoTryGetKeyValue(const TryGetKeyValueRequest& request,
                                TryGetKeyValueResponse* response,
                                const CallOptions&) {
    COHORT_ASSIGN_OR_RETURN(std::string key, KvKey(request.key()));
    COHORT_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> kv, etcd_->Get(key));
    if (!kv.has_value()) {
      return Error(absl::StatusCode::kNotFound,
                   absl::StrCat("key \"", request.key(), "\" not found"));
    }
    response->mutable_kv()->set_key(request.key());
    response->mutable_kv()->set_value(kv->value);
    return absl::OkStatus();
  }

  absl::Status DoIncrementKeyValue(const IncrementKeyValueRequest& request,
                                   IncrementKeyValueResponse* response,
                                   const CallOptions&) {
    COHORT_ASSIGN_OR_RETURN(std::string key, KvKey(request.key()));
    // Optimistic: read, then swap only if nobody wrote meanwhile.
    for (int tries = 0; tries < 1000; ++tries) {
      COHORT_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> kv, etcd_->Get(key));
      int64_t current = 0;
      std::optional<std::string> expected;
      if (kv.has_value()) {
        if (kv->value.size() != 8) {
          return Error(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("cannot increment key \"", request.key(),
                                    "\": its value has ", kv->value.size(),
                                    " bytes, not the 8-byte big-endian "
                                    "integer that increment creates"));
        }
        current = DecodeInt64(kv->value);
        expected = kv->value;
      }
      const int64_t next =
          static_cast<int64_t>(static_cast<uint64_t>(current) +
                               static_cast<uint64_t>(request.increment()));
      COHORT_ASSIGN_OR_RETURN(
          std::optional<std::string> held,
          etcd_->CompareAndSwap(key, expected, EncodeInt64(next)));
      if (held == expected) {
        response->set_value(next);
        return absl::OkStatus();
      }
    }
    return Error(absl::StatusCode::kAborted,
                 absl::StrCat("increment of key \"", request.key(),
                              "\" lost 1000 races in a row"));
  }

  absl::Status DoCompareAndSwapKeyValue(
      const CompareAndSwapKeyValueRequest& request,
      CompareAndSwapKeyValueResponse* response, const CallOptions&) {
    COHORT_ASSIGN_OR_RETURN(std::string key, KvKey(request.key()));
    std::optional<std::string> expected;
    if (request.has_expected()) expected = request.expected();
    COHORT_ASSIGN_OR_RETURN(
        std::optional<std::string> held,
        etcd_->CompareAndSwap(key, expected, request.desired()));
    const bool swapped = held == expected;
    response->set_swapped(swapped);
    if (swapped) {
      response->set_stored(request.desired());
    } else if (held.has_value()) {
      response->set_stored(*held);
    }
    return absl::OkStatus();
  }

  absl::Status DoGetKeyValueDir(const GetKeyValueDirRequest& request,
                                GetKeyValueDirResponse* response,
                                const CallOptions&) {
    COHORT_ASSIGN_OR_RETURN(std::string dir, KvKey(request.directory_key()));
    COHORT_ASSIGN_OR_RETURN(std::vector<EtcdKeyValue> kvs,
                            etcd_->List(absl::StrCat(dir, "/")));
    const std::string kv_prefix = Space("kv/");
    for (const EtcdKeyValue& kv : kvs) {
      KeyValueEntry* e = response->add_kv();
      e->set_key(kv.key.substr(kv_prefix.size()));
      e->set_value(kv.value);
    }
    return absl::OkStatus();
  }

  absl::Status DoDeleteKeyValue(const DeleteKeyValueRequest& request,
                                DeleteKeyValueResponse*, const CallOptions&) {
    COHORT_ASSIGN_OR_RETURN(std::string key, KvKey(request.key()));
    COHORT_RETURN_IF_ERROR(etcd_->Delete(key).status());
    if (request.is_directory()) {
      COHORT_RETURN_IF_ERROR(etcd_->DeleteDir(absl::StrCat(key, "/")).status());
    }
    return absl::OkStatus();
  }

  // Versions are etcd's modification revisions: they only grow, for a key
  // deleted and set again too.
  absl::Status DoWatchKeyValue(const WatchKeyValueRequest& request,
                               WatchKeyValueResponse* response,
                               const CallOptions& options) {
    COHORT_ASSIGN_OR_RETURN(std::string key, KvKey(request.key()));
    const absl::Time deadline = DeadlineOf(request.timeout_ms(), options);
    int64_t revision = 0;
    COHORT_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> kv,
                            etcd_->Get(key, &revision));
    if (kv.has_value() && kv->mod_revision > request.after_version()) {
      response->set_present(true);
      response->set_value(kv->value);
      response->set_version(kv->mod_revision);
      return absl::OkStatus();
    }
    // From the caller's version when it has one: a delete since then (the
    // key absent now) is a change to report at once.
    int64_t after =
        request.after_version() > 0 ? request.after_version() : revision;
    const absl::Time started = absl::Now();
    while (true) {
      absl::StatusOr<std::vector<EtcdEvent>> events =
          etcd_->Watch(key, after, std::min(Remaining(deadline), kWatchSlice),
                       options.cancellation);
      if (absl::IsDeadlineExceeded(events.status()) && absl::Now() < deadline) {
        continue;
      }
      if (absl::IsDeadlineExceeded(events.status())) {
        return Error(absl::StatusCode::kDeadlineExceeded,
                     absl::StrCat("key \"", request.key(),
                                  "\" did not change in etcd within ",
                                  absl::FormatDuration(absl::Now() - started)));
      }
      if (absl::IsFailedPrecondition(events.status())) {
        // etcd compacted the history since `after`: report the key as it
        // is now, which is newer than the caller's version.
        COHORT_ASSIGN_OR_RETURN(kv, etcd_->Get(key, &revision));
        response->set_present(kv.has_value());
        if (kv.has_value()) response->set_value(kv->value);
        response->set_version(kv.has_value() ? kv->mod_revision : revision);
        return absl::OkStatus();
      }
      COHORT_RETURN_IF_ERROR(events.status());
      const EtcdEvent& last = events->back();
      response->set_present(!last.deleted);
      if (!last.deleted) response->set_value(last.kv.value);
      response->set_version(last.kv.mod_revision);
      return absl::OkStatus();
    }
  }

  // --- Barriers ---

  // Barrier ids may hold '/' ("cohort/launch/start"): escaped, so an id is
  // one path segment.
  std::string BarrierDir(const std::string& id, int64_t counter) const {
    const std::string segment =
        absl::StrReplaceAll(id, {{"%", "%25"}, {"/", "%2F"}});
    return Space(absl::StrCat("barriers/", segment, "/", counter, "/"));
  }

  absl::Status BarrierOutcome(const std::string& id, int64_t counter,
                              const std::string& result) const {
    if (result == "passed") return absl::OkStatus();
    absl::StatusOr<Json> j = ParseJson(result, "a barrier's result");
    int code = 2;
    std::string message = "unreadable barrier result";
    if (j.ok() && j->is_object()) {
      code = static_cast<int>(JsonIntOr(*j, "code", 2));
      if (code <= 0 || code > 16) code = 2;
      message = JsonStringOr(*j, "message", message);
    }
    return internal::WithBarrierPayload(
        Error(static_cast<absl::StatusCode>(code), message), id, counter);
  }

  absl::Status DoBarrier(const BarrierRequest& request,
                         BarrierResponse* response,
                         const CallOptions& options) {
    const std::string& id = request.barrier_id();
    const int64_t counter = request.counter();
    const TaskId me = FromProto(request.source_task());
    COHORT_RETURN_IF_ERROR(CheckTask(me));
    if (id.empty() || id.size() > 256) {
      return Error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat("barrier id \"", id.substr(0, 64),
                                "\" must be 1..256 characters"));
    }
    std::set<std::string> members;
    if (request.tasks().empty()) {
      for (const TaskId& t : all_tasks_) members.insert(t.ToString());
    } else {
      for (const CoordinatedTask& t : request.tasks()) {
        const TaskId task = FromProto(t);
        COHORT_RETURN_IF_ERROR(CheckTask(task));
        members.insert(task.ToString());
      }
    }
    if (members.count(me.ToString()) == 0) {
      return Error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat("task ", me.ToString(),
                                " is not one of barrier '", id, "''s tasks"));
    }
    const std::string dir = BarrierDir(id, counter);
    COHORT_RETURN_IF_ERROR(
        etcd_->Put(absl::StrCat(dir, "arrived/", me.ToString()), "").status());
    const absl::Time deadline = DeadlineOf(request.timeout_ms(), CallOptions());
    while (true) {
      int64_t revision = 0;
      COHORT_ASSIGN_OR_RETURN(std::vector<EtcdKeyValue> kvs,
                              etcd_->List(dir, &revision));
      std::set<std::string> missing = members;
      for (const EtcdKeyValue& kv : kvs) {
        if (kv.key == absl::StrCat(dir, "result")) {
          response->set_counter(counter);
          return BarrierOutcome(id, counter, kv.value);
        }
        missing.erase(kv.key.substr(dir.size() + sizeof("arrived/") - 1));
      }
      if (missing.empty()) {
        COHORT_RETURN_IF_ERROR(
            etcd_->Create(absl::StrCat(dir, "result"), "passed").status());
        continue;  // read whichever result won
      }
      if (absl::Now() >= deadline) {
        std::set<TaskId> waiting;
        for (const std::string& name : missing) {
          absl::StatusOr<TaskId> t = TaskId::Parse(name);
          if (t.ok()) waiting.insert(*t);
        }
        Json failed = {
            {"code", static_cast<int>(absl::StatusCode::kDeadlineExceeded)},
            {"message",
             absl::StrCat(
                 "barrier '", id, "' (#", counter,
                 ") timed out: ", waiting.size(), " of ", members.size(),
                 " task(s) had not arrived: ", internal::TaskList(waiting))}};
        COHORT_RETURN_IF_ERROR(
            etcd_->Create(absl::StrCat(dir, "result"), JsonDump(failed))
                .status());
        continue;
      }
      // Only the result is watched, not every arrival (n waiters woken n
      // times each). Its writer is normally the arrival etcd committed
      // last: reads are linearizable, so the listing after it holds every
      // other arrival.
      // At least every second the arrivals are listed again anyway: the
      // last arrival's writer may have died before writing the result.
      absl::StatusOr<std::vector<EtcdEvent>> events = etcd_->Watch(
          absl::StrCat(dir, "result"), revision,
          std::min(Remaining(deadline), kBarrierRecheck), options.cancellation);
      if (absl::IsDeadlineExceeded(events.status()) ||
          absl::IsFailedPrecondition(events.status())) {
        continue;
      }
      COHORT_RETURN_IF_ERROR(events.status());
    }
  }

  absl::Status DoCancelBarrier(const CancelBarrierRequest& request,
                               CancelBarrierResponse*, const CallOptions&) {
    const TaskId me = FromProto(request.source_task());
    COHORT_RETURN_IF_ERROR(CheckTask(me));
    Json cancelled = {
        {"code", static_cast<int>(absl::StatusCode::kCancelled)},
        {"message", absl::StrCat("barrier '", request.barrier_id(), "' (#",
                                 request.counter(), ") was cancelled by task ",
                                 me.ToString())}};
    return etcd_
        ->Create(
            absl::StrCat(BarrierDir(request.barrier_id(), request.counter()),
                         "result"),
            JsonDump(cancelled))
        .status();
  }

  const std::shared_ptr<EtcdClient> etcd_;
  const EtcdCoordinationOptions options_;
  const uint64_t incarnation_;
  std::vector<TaskId> all_tasks_;
  absl::Mutex mu_;
  std::map<std::string, int64_t> leases_ ABSL_GUARDED_BY(mu_);
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  // Every task this client's error polls have seen registered.
  EtcdTaskLosses losses_{etcd_, options_.space};
};

}  // namespace

EtcdTaskLosses::EtcdTaskLosses(std::shared_ptr<EtcdClient> etcd,
                               std::string space)
    : etcd_(std::move(etcd)), space_(std::move(space)) {}

void EtcdTaskLosses::AssumeRegistered(const std::vector<std::string>& tasks) {
  absl::MutexLock lock(&mu_);
  seen_registered_.insert(tasks.begin(), tasks.end());
}

// Listing (not reading the changes) misses no loss that happens while a
// change is being handled.
absl::StatusOr<EtcdTaskLosses::Look> EtcdTaskLosses::Read() {
  const std::string tasks_dir = absl::StrCat(space_, kTasksDir);
  const std::string shutdown_dir = absl::StrCat(space_, kShutdownDir);
  Look look;
  COHORT_ASSIGN_OR_RETURN(
      std::vector<EtcdKeyValue> status,
      etcd_->List(absl::StrCat(space_, kStatusDir), &look.revision));
  std::set<std::string> present, shut_down;
  for (const EtcdKeyValue& kv : status) {
    if (kv.key == absl::StrCat(space_, kErrorKey)) look.error = kv.value;
    if (absl::StartsWith(kv.key, tasks_dir)) {
      present.insert(kv.key.substr(tasks_dir.size()));
    }
    if (absl::StartsWith(kv.key, shutdown_dir)) {
      shut_down.insert(kv.key.substr(shutdown_dir.size()));
    }
  }
  look.present.assign(present.begin(), present.end());
  absl::MutexLock lock(&mu_);
  seen_registered_.insert(present.begin(), present.end());
  for (const std::string& name : seen_registered_) {
    if (!present.count(name) && !shut_down.count(name)) {
      look.lost.push_back(name);
    }
  }
  return look;
}

absl::Status EtcdTaskLosses::AwaitChange(int64_t revision,
                                         absl::Duration timeout,
                                         CallCancellation* cancellation) {
  return etcd_
      ->Watch(absl::StrCat(space_, kStatusDir), revision, timeout, cancellation)
      .status();
}

std::string JobIdOf(const std::string& job_token) {
  return rpc::DeriveFromToken(job_token, "cohort etcd job id").substr(0, 16);
}

absl::StatusOr<std::unique_ptr<CoordinationClient>> NewEtcdCoordinationClient(
    std::shared_ptr<EtcdClient> etcd, EtcdCoordinationOptions options) {
  if (etcd == nullptr) return absl::InvalidArgumentError("no etcd client");
  if (!options.space.empty() &&
      (options.space.back() != '/' || options.space.front() == '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd space '", options.space,
                     "' must be a relative directory ending in '/'"));
  }
  const std::string key = absl::StrCat(options.space, kJobKey);
  const std::string where =
      absl::StrCat(etcd->target().ToString(), "/", options.space);
  if (options.jobs.empty() != options.job_id.empty()) {
    return absl::InvalidArgumentError(
        "an etcd coordination space needs both jobs and a job id, or "
        "neither (to join)");
  }
  if (options.jobs.empty()) {
    COHORT_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> held, etcd->Get(key));
    absl::StatusOr<Json> record = held.has_value()
                                      ? ParseJson(held->value, "the job record")
                                      : absl::StatusOr<Json>(Json());
    if (!record.ok() || !record->is_object() ||
        !ObjectField(*record, "jobs").is_object()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no cohort job at etcd prefix ", where, " (its '", kJobKey,
          "' record is missing or unreadable): programs join the job that "
          "`cohort launch --rendezvous etcd://...` started there"));
    }
    int64_t total = 0;
    for (const auto& [job, count] : (*record)["jobs"].items()) {
      if (!count.is_number_integer() || count.get<int64_t>() < 1 ||
          count.get<int64_t>() > (1 << 20)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the job record at etcd prefix ", where, " gives job '", job,
            "' a task count that is not in 1..2^20"));
      }
      options.jobs[job] = count.get<int>();
      total += count.get<int64_t>();
    }
    if (total > (1 << 20)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the job record at etcd prefix ", where, " names ",
                       total, " tasks, more than 2^20"));
    }
    options.job_id = JsonStringOr(*record, "job_id");
    options.recoverable = JsonBoolOr(*record, "recoverable", false);
    const int64_t ttl_ms = JsonIntOr(*record, "heartbeat_timeout_ms", 0);
    if (ttl_ms > 0 && ttl_ms < int64_t{1} << 40) {
      options.heartbeat_timeout = absl::Milliseconds(ttl_ms);
    }
    if (options.jobs.empty() || options.job_id.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the job record at etcd prefix ", where,
                       " names no tasks or no job"));
    }
  }
  std::mt19937_64 random(std::random_device{}());
  const uint64_t incarnation = random() | 1;
  Json jobs = Json::object();
  for (const auto& [job, count] : options.jobs) jobs[job] = count;
  const Json mine = {{"job_id", options.job_id},
                     {"jobs", jobs},
                     {"incarnation", incarnation},
                     {"recoverable", options.recoverable},
                     {"heartbeat_timeout_ms",
                      absl::ToInt64Milliseconds(options.heartbeat_timeout)}};
  COHORT_RETURN_IF_ERROR(etcd->Create(key, JsonDump(mine)).status());
  COHORT_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> held, etcd->Get(key));
  absl::StatusOr<Json> theirs = held.has_value()
                                    ? ParseJson(held->value, "the job record")
                                    : absl::StatusOr<Json>(Json());
  if (!theirs.ok() || !theirs->is_object() ||
      JsonStringOr(*theirs, "job_id") != options.job_id ||
      ObjectField(*theirs, "jobs") != jobs) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd prefix ", where,
        " holds another job's control plane (a different job token or "
        "task list); give each job its own prefix "
        "(etcd://HOST:PORT/PREFIX) or remove the old job's keys (etcdctl "
        "del --prefix ",
        etcd->target().prefix, ")"));
  }
  return std::unique_ptr<CoordinationClient>(
      new EtcdCoordinationClient(std::move(etcd), std::move(options),
                                 JsonUintOr(*theirs, "incarnation", 1)));
}

absl::StatusOr<std::unique_ptr<CoordinationClient>> JoinEtcdCoordination(
    const std::string& url, Env* env) {
  EtcdClientOptions o;
  COHORT_ASSIGN_OR_RETURN(o.target, ParseEtcdUrl(url));
  COHORT_RETURN_IF_ERROR(EtcdSecurityFromEnv(env, o));
  COHORT_ASSIGN_OR_RETURN(std::unique_ptr<EtcdClient> etcd,
                          EtcdClient::Connect(std::move(o)));
  return NewEtcdCoordinationClient(std::move(etcd), EtcdCoordinationOptions());
}

}  // namespace cohort::coord
