#include "cohort/coord/job_status_json.h"

#include "absl/strings/str_cat.h"
#include "cohort/base/status.h"

namespace cohort::coord {

std::string TaskNameOf(const CoordinatedTask& t) {
  return absl::StrCat(t.job_name(), ":", t.task_id());
}

namespace {

const char* StateName(CoordinatedTaskState s) {
  switch (s) {
    case TASK_STATE_CONNECTED:
      return "connected";
    case TASK_STATE_ERROR:
      return "error";
    case TASK_STATE_DISCONNECTED:
      return "disconnected";
    default:
      return "unknown";
  }
}

}  // namespace

std::string TaskStateName(const TaskStateInfo& t) {
  if (t.state() == TASK_STATE_DISCONNECTED) {
    if (t.shut_down()) return "shut_down";
    return "not_registered";
  }
  return StateName(t.state());
}

Json JobStatusJson(const GetJobStatusResponse& r) {
  Json out;
  out["service_incarnation"] = std::to_string(r.service_incarnation());
  out["version"] = r.version_number();
  out["job_state"] = r.job_state();
  out["tasks"] = Json::array();
  for (const auto& t : r.task_state()) {
    Json task;
    task["task"] = TaskNameOf(t.task());
    task["state"] = TaskStateName(t);
    task["incarnation"] = std::to_string(t.incarnation());
    task["heartbeat_age_ms"] =
        t.heartbeat_age_ms() < 0 ? Json(nullptr) : Json(t.heartbeat_age_ms());
    task["recoverable"] = t.recoverable();
    if (t.error_code() != 0) {
      task["error_code"] =
          StatusCodeName(static_cast<absl::StatusCode>(t.error_code()));
      task["error"] = t.error_message();
      task["error_time_unix_ms"] = t.error_time_unix_ms();
    }
    out["tasks"].push_back(task);
  }
  out["barriers"] = Json::array();
  for (const auto& b : r.barrier()) {
    Json barrier;
    barrier["id"] = b.barrier_id();
    barrier["counter"] = b.counter();
    barrier["initiator"] = TaskNameOf(b.initiator());
    barrier["arrived"] = Json::array();
    for (const auto& t : b.arrived())
      barrier["arrived"].push_back(TaskNameOf(t));
    barrier["missing"] = Json::array();
    for (const auto& t : b.missing())
      barrier["missing"].push_back(TaskNameOf(t));
    barrier["remaining_ms"] = b.remaining_ms();
    out["barriers"].push_back(barrier);
  }
  return out;
}

}  // namespace cohort::coord
