// Device names of the distributed runtime, as TensorFlow writes them:
// "/job:ps/replica:0/task:0/device:CPU:0", with partial forms ("/job:ps",
// "/job:ps/task:1", "/task:1", "/device:CPU:0", "/cpu:0", "" = nothing
// specified) accepted where a node's `device` attr is read.
//
// Contract:
//  - Parse accepts the components in any subset, in TF's order, each at
//    most once; job names are [A-Za-z][A-Za-z0-9_]*; replica/task are
//    non-negative integers; the device part is "device:TYPE:ID",
//    "device:TYPE" (any id), or TF's legacy "cpu:ID" / "gpu:ID" in any case
//    ("/cpu:0" means CPU:0); TYPE is a name and is upper-cased. A value "*"
//    (TF's wildcard:
//    "/job:*", "/device:CPU:*") leaves that component unset. Anything else
//    (a missing leading '/', an empty, unknown, repeated or out-of-order
//    component, a negative or non-decimal index) is InvalidArgument
//    `invalid device string '<x>'` followed by the expected form.
//  - Complete fills what is missing from `defaults` (the placer passes only
//    the master's job, so: replica 0, task 0, CPU:0); FullName then prints
//    the canonical form; TaskName drops the device part
//    ("/job:ps/replica:0/task:0").
//  - Matches(filter) is TF's device filter rule: every component the
//    filter sets must be set and equal here; components the filter leaves
//    unset match anything.
//
// Thread safety: value type.
#ifndef COHORT_RUNTIME_DEVICE_NAME_H_
#define COHORT_RUNTIME_DEVICE_NAME_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cohort::runtime {

// TensorFlow's job name rule, [A-Za-z][A-Za-z0-9_]*: a name that can stand in
// "/job:NAME/..." and in "NAME:INDEX" without being mistaken for more.
bool IsValidJobName(absl::string_view name);

struct DeviceName {
  bool has_job = false;
  std::string job;
  bool has_replica = false;
  int replica = 0;
  bool has_task = false;
  int task = 0;
  bool has_type = false;
  std::string type;  // "CPU"
  bool has_id = false;
  int id = 0;

  static absl::StatusOr<DeviceName> Parse(absl::string_view name);
  // The full name of task `task` of `job`'s CPU:0.
  static DeviceName ForTask(absl::string_view job, int task);

  // A copy with every unset component taken from `defaults`, then replica
  // 0, task 0, CPU, 0. The job stays unset when neither has one.
  DeviceName Complete(const DeviceName& defaults) const;
  bool Matches(const DeviceName& filter) const;
  // "/job:J/replica:R/task:T/device:TYPE:ID"; unset parts are left out (an
  // id without a type prints as "/device:*:ID"). Parse(FullName()) gives
  // back the same components.
  std::string FullName() const;
  // "/job:J/replica:R/task:T" (unset parts left out).
  std::string TaskName() const;
};

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_DEVICE_NAME_H_
