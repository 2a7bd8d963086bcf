// The job's status (GetJobStatus: every task's state and each barrier in
// progress) as JSON: the shape `cohort status --format json` prints and the
// job page's API serves (docs/ui.md documents the fields).
//
// Thread safety: pure functions.
#ifndef COHORT_COORD_JOB_STATUS_JSON_H_
#define COHORT_COORD_JOB_STATUS_JSON_H_

#include <string>

#include "cohort/base/json.h"
#include "cohort/coordination.pb.h"

namespace cohort::coord {

// "worker:1".
std::string TaskNameOf(const CoordinatedTask& t);
// "connected", "error", "not_registered", "shut_down".
std::string TaskStateName(const TaskStateInfo& t);
// {"service_incarnation", "version", "job_state", "tasks": [{"task",
// "state", "incarnation", "heartbeat_age_ms" (null: never), "recoverable",
// and on error "error_code", "error", "error_time_unix_ms"}], "barriers":
// [{"id", "counter", "initiator", "arrived", "missing", "remaining_ms"}]}.
Json JobStatusJson(const GetJobStatusResponse& r);

}  // namespace cohort::coord

#endif  // COHORT_COORD_JOB_STATUS_JSON_H_
