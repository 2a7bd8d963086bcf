#include "cohort/coord/coordination_rpc_handler.h"

#include <memory>

#include "absl/strings/cord.h"

namespace cohort::coord {

TaskId FromProto(const CoordinatedTask& task) {
  return TaskId{task.job_name(), task.task_id()};
}

CoordinatedTask ToProto(const TaskId& task) {
  CoordinatedTask out;
  out.set_job_name(task.job);
  out.set_task_id(task.index);
  return out;
}

void ToProto(const TaskStateSnapshot& s, TaskStateInfo* info) {
  *info->mutable_task() = ToProto(s.task);
  switch (s.state) {
    case TaskState::kDisconnected:
      info->set_state(TASK_STATE_DISCONNECTED);
      break;
    case TaskState::kConnected:
      info->set_state(TASK_STATE_CONNECTED);
      break;
    case TaskState::kError:
      info->set_state(TASK_STATE_ERROR);
      break;
  }
  info->set_incarnation(s.incarnation);
  info->set_error_code(static_cast<int>(s.error.code()));
  info->set_error_message(std::string(s.error.message()));
  info->set_heartbeat_age_ms(s.heartbeat_age == absl::InfiniteDuration()
                                 ? -1
                                 : absl::ToInt64Milliseconds(s.heartbeat_age));
  info->set_error_time_unix_ms(s.error_time == absl::InfinitePast()
                                   ? 0
                                   : absl::ToUnixMillis(s.error_time));
  info->set_recoverable(s.recoverable);
  info->set_shut_down(s.shut_down);
}

namespace {

std::vector<TaskId> FromProto(
    const google::protobuf::RepeatedPtrField<CoordinatedTask>& tasks) {
  std::vector<TaskId> out;
  for (const auto& t : tasks) out.push_back(FromProto(t));
  return out;
}

void FillJobStatus(const JobStatus& status, WatchJobStateResponse* response) {
  for (const auto& t : status.tasks) ToProto(t, response->add_task_state());
  response->set_version_number(status.version);
}

}  // namespace

CoordinationRpcHandler::CoordinationRpcHandler(CoordinationService* service)
    : service_(service),
      env_(service->options().env != nullptr ? service->options().env
                                             : Env::Default()) {}

absl::Status CoordinationRpcHandler::Mark(absl::Status status) const {
  if (status.ok() || IsServiceError(status)) return status;
  CoordinationServiceError payload;
  payload.set_service_incarnation(service_->incarnation());
  status.SetPayload(kCoordinationErrorUrl,
                    absl::Cord(payload.SerializeAsString()));
  return status;
}

absl::Time CoordinationRpcHandler::DeadlineFromMs(int64_t timeout_ms) const {
  return timeout_ms <= 0 ? absl::InfiniteFuture()
                         : env_->Now() + absl::Milliseconds(timeout_ms);
}

void CoordinationRpcHandler::RegisterTask(const RegisterTaskRequest& request,
                                          RegisterTaskResponse* response,
                                          StatusCallback done) {
  service_->RegisterTaskAsync(
      FromProto(request.source_task()), request.incarnation(),
      [this, response, done = std::move(done)](absl::StatusOr<uint64_t> r) {
        if (r.ok()) response->set_service_incarnation(*r);
        done(Mark(r.status()));
      });
}

void CoordinationRpcHandler::Heartbeat(const HeartbeatRequest& request,
                                       HeartbeatResponse* response,
                                       StatusCallback done) {
  auto r =
      service_->Heartbeat(FromProto(request.source_task()),
                          request.incarnation(), request.service_incarnation());
  if (r.ok()) response->set_service_incarnation(*r);
  done(Mark(r.status()));
}

void CoordinationRpcHandler::ShutdownTask(const ShutdownTaskRequest& request,
                                          ShutdownTaskResponse* response,
                                          StatusCallback done) {
  service_->ShutdownTaskAsync(
      FromProto(request.source_task()),
      [this, done = std::move(done)](absl::Status s) { done(Mark(s)); },
      request.incarnation());
}

void CoordinationRpcHandler::ResetTask(const ResetTaskRequest& request,
                                       ResetTaskResponse* response,
                                       StatusCallback done) {
  done(Mark(service_->ResetTask(FromProto(request.source_task()))));
}

void CoordinationRpcHandler::ReportErrorToService(
    const ReportErrorToServiceRequest& request,
    ReportErrorToServiceResponse* response, StatusCallback done) {
  done(Mark(service_->ReportErrorToService(
      FromProto(request.source_task()),
      absl::Status(static_cast<absl::StatusCode>(request.error_code()),
                   request.error_message()),
      request.incarnation())));
}

void CoordinationRpcHandler::GetTaskState(const GetTaskStateRequest& request,
                                          GetTaskStateResponse* response,
                                          StatusCallback done) {
  auto r = service_->GetTaskState(FromProto(request.source_task()));
  if (r.ok()) {
    for (const auto& s : *r) ToProto(s, response->add_task_state());
  }
  done(Mark(r.status()));
}

void CoordinationRpcHandler::WatchJobState(const WatchJobStateRequest& request,
                                           WatchJobStateResponse* response,
                                           StatusCallback done) {
  service_->WatchJobStateAsync(
      request.version_number(), DeadlineFromMs(request.timeout_ms()),
      [this, response, done = std::move(done)](absl::StatusOr<JobStatus> r) {
        if (r.ok()) FillJobStatus(*r, response);
        done(Mark(r.status()));
      });
}

void CoordinationRpcHandler::GetJobStatus(const GetJobStatusRequest& request,
                                          GetJobStatusResponse* response,
                                          StatusCallback done) {
  ToProto(service_->GetJobStatus(), response);
  done(absl::OkStatus());
}

void ToProto(const JobStatus& status, GetJobStatusResponse* response) {
  response->set_service_incarnation(status.service_incarnation);
  response->set_version_number(status.version);
  response->set_job_state(status.job_state);
  for (const auto& t : status.tasks) ToProto(t, response->add_task_state());
  for (const auto& b : status.barriers) {
    BarrierStatusInfo* info = response->add_barrier();
    info->set_barrier_id(b.id);
    info->set_counter(b.counter);
    *info->mutable_initiator() = ToProto(b.initiator);
    for (const auto& t : b.arrived) *info->add_arrived() = ToProto(t);
    for (const auto& t : b.missing) *info->add_missing() = ToProto(t);
    info->set_remaining_ms(absl::ToInt64Milliseconds(b.remaining));
  }
}

void CoordinationRpcHandler::InsertKeyValue(
    const InsertKeyValueRequest& request, InsertKeyValueResponse* response,
    StatusCallback done) {
  done(Mark(service_->InsertKeyValue(request.kv().key(), request.kv().value(),
                                     request.allow_overwrite())));
}

void CoordinationRpcHandler::GetKeyValue(const GetKeyValueRequest& request,
                                         GetKeyValueResponse* response,
                                         StatusCallback done) {
  std::string key = request.key();
  service_->GetKeyValueAsync(
      key, DeadlineFromMs(request.timeout_ms()),
      [this, key, response,
       done = std::move(done)](absl::StatusOr<std::string> r) {
        if (r.ok()) {
          response->mutable_kv()->set_key(key);
          response->mutable_kv()->set_value(std::move(*r));
        }
        done(Mark(r.status()));
      });
}

void CoordinationRpcHandler::TryGetKeyValue(
    const TryGetKeyValueRequest& request, TryGetKeyValueResponse* response,
    StatusCallback done) {
  auto r = service_->TryGetKeyValue(request.key());
  if (r.ok()) {
    response->mutable_kv()->set_key(request.key());
    response->mutable_kv()->set_value(std::move(*r));
  }
  done(Mark(r.status()));
}

void CoordinationRpcHandler::IncrementKeyValue(
    const IncrementKeyValueRequest& request,
    IncrementKeyValueResponse* response, StatusCallback done) {
  auto r = service_->IncrementKeyValue(request.key(), request.increment());
  if (r.ok()) response->set_value(*r);
  done(Mark(r.status()));
}

void CoordinationRpcHandler::CompareAndSwapKeyValue(
    const CompareAndSwapKeyValueRequest& request,
    CompareAndSwapKeyValueResponse* response, StatusCallback done) {
  std::optional<std::string> expected;
  if (request.has_expected()) expected = request.expected();
  auto r = service_->CompareAndSwapKeyValue(request.key(), expected,
                                            request.desired());
  if (r.ok()) {
    response->set_swapped(r->swapped);
    if (r->stored.has_value()) response->set_stored(*r->stored);
  }
  done(Mark(r.status()));
}

void CoordinationRpcHandler::GetKeyValueDir(
    const GetKeyValueDirRequest& request, GetKeyValueDirResponse* response,
    StatusCallback done) {
  auto entries = service_->ListKeyValueDir(request.directory_key());
  if (!entries.ok()) {
    done(Mark(entries.status()));
    return;
  }
  for (auto& [key, value] : *entries) {
    KeyValueEntry* entry = response->add_kv();
    entry->set_key(key);
    entry->set_value(std::move(value));
  }
  done(absl::OkStatus());
}

void CoordinationRpcHandler::DeleteKeyValue(
    const DeleteKeyValueRequest& request, DeleteKeyValueResponse* response,
    StatusCallback done) {
  done(Mark(service_->DeleteKeyValue(request.key(), request.is_directory())));
}

void CoordinationRpcHandler::WatchKeyValue(const WatchKeyValueRequest& request,
                                           WatchKeyValueResponse* response,
                                           StatusCallback done) {
  service_->WatchKeyValueAsync(request.key(), request.after_version(),
                               DeadlineFromMs(request.timeout_ms()),
                               [this, response, done = std::move(done)](
                                   absl::StatusOr<KeyValueWatchResult> r) {
                                 if (r.ok()) {
                                   response->set_present(r->present);
                                   response->set_value(std::move(r->value));
                                   response->set_version(r->version);
                                 }
                                 done(Mark(r.status()));
                               });
}

void CoordinationRpcHandler::Barrier(const BarrierRequest& request,
                                     BarrierResponse* response,
                                     StatusCallback done) {
  const absl::Duration timeout = request.timeout_ms() <= 0
                                     ? absl::InfiniteDuration()
                                     : absl::Milliseconds(request.timeout_ms());
  service_->BarrierAsync(
      request.barrier_id(), request.counter(), timeout,
      FromProto(request.source_task()), FromProto(request.tasks()),
      [this, response, done = std::move(done)](absl::StatusOr<int64_t> r) {
        if (r.ok()) response->set_counter(*r);
        done(Mark(r.status()));
      },
      request.incarnation());
}

void CoordinationRpcHandler::CancelBarrier(const CancelBarrierRequest& request,
                                           CancelBarrierResponse* response,
                                           StatusCallback done) {
  done(Mark(service_->CancelBarrier(request.barrier_id(), request.counter(),
                                    FromProto(request.source_task()),
                                    request.incarnation())));
}

void CoordinationRpcHandler::GetAliveTasks(const GetAliveTasksRequest& request,
                                           GetAliveTasksResponse* response,
                                           StatusCallback done) {
  service_->GetAliveTasksAsync(
      FromProto(request.requesting_task()), FromProto(request.tasks()),
      DeadlineFromMs(request.timeout_ms()),
      [this, response,
       done = std::move(done)](absl::StatusOr<std::vector<AliveTask>> r) {
        if (r.ok()) {
          for (const AliveTask& t : *r) {
            *response->add_alive_tasks() = ToProto(t.task);
            response->add_incarnations(t.incarnation);
          }
        }
        done(Mark(r.status()));
      });
}

void CoordinationRpcHandler::PollForError(const PollForErrorRequest& request,
                                          PollForErrorResponse* response,
                                          StatusCallback done) {
  service_->PollForErrorAsync(
      FromProto(request.source_task()), request.incarnation(),
      [this, done = std::move(done)](absl::Status s) { done(Mark(s)); },
      request.service_incarnation());
}

}  // namespace cohort::coord
