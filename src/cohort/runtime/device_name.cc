#include "cohort/runtime/device_name.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cohort::runtime {
namespace {

absl::Status InvalidDeviceString(absl::string_view name) {
  return absl::InvalidArgumentError(absl::StrCat(
      "invalid device string '", name,
      "'; expected /job:<name>/replica:<n>/task:<n>/device:<TYPE>:<n> or a "
      "part of it, e.g. /job:ps/task:0 or /device:CPU:0"));
}

bool IsLetter(char c) { return absl::ascii_isalpha(c); }
bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// [A-Za-z][A-Za-z0-9_]*: TensorFlow's job name rule, also used for device
// types (CPU, GPU, TPU).
bool IsName(absl::string_view s) {
  if (s.empty() || !IsLetter(s[0])) return false;
  for (char c : s) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

}  // namespace

bool IsValidJobName(absl::string_view name) { return IsName(name); }

namespace {

// A non-negative decimal integer. SimpleAtoi alone would also take "+1",
// " 1" and "-0"; a device string never has those.
bool ParseIndex(absl::string_view s, int* out) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return absl::SimpleAtoi(s, out);
}

// One "/key:value" component's value: "*" (TF's wildcard) leaves the
// component unset.
bool ParseIndexComponent(absl::string_view value, bool* has, int* out) {
  if (value == "*") {
    *has = false;
    return true;
  }
  *has = true;
  return ParseIndex(value, out);
}

// "TYPE:ID", "TYPE:*" or "TYPE" (the last only after "device:"). The type
// is upper-cased: TF's legacy "/cpu:0" and "/device:CPU:0" name the same
// device, and comparing names must not depend on how a user spelled it.
bool ParseDevicePart(absl::string_view part, bool id_required,
                     DeviceName* out) {
  std::vector<absl::string_view> pieces = absl::StrSplit(part, ':');
  if (pieces.size() > 2 || (id_required && pieces.size() != 2)) return false;
  if (pieces[0] == "*") {
    out->has_type = false;
  } else {
    if (!IsName(pieces[0])) return false;
    out->has_type = true;
    out->type = absl::AsciiStrToUpper(pieces[0]);
  }
  if (pieces.size() == 2) {
    return ParseIndexComponent(pieces[1], &out->has_id, &out->id);
  }
  return true;
}

bool IsLegacyType(absl::string_view part) {
  absl::string_view type = part.substr(0, part.find(':'));
  return absl::EqualsIgnoreCase(type, "cpu") ||
         absl::EqualsIgnoreCase(type, "gpu");
}

}  // namespace

absl::StatusOr<DeviceName> DeviceName::Parse(absl::string_view name) {
  DeviceName out;
  if (name.empty()) return out;
  if (name[0] != '/') return InvalidDeviceString(name);
  // Components must come in TensorFlow's order; `stage` is the index of the
  // next component allowed (0 job, 1 replica, 2 task, 3 device), so a
  // repeated or out-of-order one is refused.
  int stage = 0;
  std::vector<absl::string_view> parts = absl::StrSplit(name.substr(1), '/');
  for (absl::string_view part : parts) {
    bool ok = false;
    if (absl::ConsumePrefix(&part, "job:")) {
      ok = stage <= 0;
      stage = 1;
      if (part == "*") {
        out.has_job = false;
      } else {
        ok = ok && IsName(part);
        out.has_job = true;
        out.job = std::string(part);
      }
    } else if (absl::ConsumePrefix(&part, "replica:")) {
      ok = stage <= 1 &&
           ParseIndexComponent(part, &out.has_replica, &out.replica);
      stage = 2;
    } else if (absl::ConsumePrefix(&part, "task:")) {
      ok = stage <= 2 && ParseIndexComponent(part, &out.has_task, &out.task);
      stage = 3;
    } else if (absl::ConsumePrefix(&part, "device:")) {
      ok = stage <= 3 && ParseDevicePart(part, /*id_required=*/false, &out);
      stage = 4;
    } else {
      // Legacy "/cpu:0", "/GPU:1": only the two types TensorFlow's legacy
      // form knows, and always with an id, so that a typo such as
      // "/job:ps/tsk:0" or "/ps" is an error rather than a device type.
      ok = stage <= 3 && IsLegacyType(part) &&
           ParseDevicePart(part, /*id_required=*/true, &out);
      stage = 4;
    }
    if (!ok) return InvalidDeviceString(name);
  }
  return out;
}

DeviceName DeviceName::ForTask(absl::string_view job, int task) {
  DeviceName d;
  d.has_job = true;
  d.job = std::string(job);
  d.has_replica = true;
  d.replica = 0;
  d.has_task = true;
  d.task = task;
  d.has_type = true;
  d.type = "CPU";
  d.has_id = true;
  d.id = 0;
  return d;
}

DeviceName DeviceName::Complete(const DeviceName& defaults) const {
  DeviceName d = *this;
  if (!d.has_job && defaults.has_job) {
    d.has_job = true;
    d.job = defaults.job;
  }
  // Replica, task, type and id: the default's when it has one, else the
  // first task's CPU:0 (reference §1.8: missing task -> 0, missing device
  // -> CPU:0).
  if (!d.has_replica) {
    d.has_replica = true;
    d.replica = defaults.has_replica ? defaults.replica : 0;
  }
  if (!d.has_task) {
    d.has_task = true;
    d.task = defaults.has_task ? defaults.task : 0;
  }
  if (!d.has_type) {
    d.has_type = true;
    d.type = defaults.has_type ? defaults.type : "CPU";
  }
  if (!d.has_id) {
    d.has_id = true;
    d.id = defaults.has_id ? defaults.id : 0;
  }
  return d;
}

bool DeviceName::Matches(const DeviceName& filter) const {
  if (filter.has_job && (!has_job || job != filter.job)) return false;
  if (filter.has_replica && (!has_replica || replica != filter.replica)) {
    return false;
  }
  if (filter.has_task && (!has_task || task != filter.task)) return false;
  if (filter.has_type && (!has_type || type != filter.type)) return false;
  if (filter.has_id && (!has_id || id != filter.id)) return false;
  return true;
}

std::string DeviceName::TaskName() const {
  std::string out;
  if (has_job) absl::StrAppend(&out, "/job:", job);
  if (has_replica) absl::StrAppend(&out, "/replica:", replica);
  if (has_task) absl::StrAppend(&out, "/task:", task);
  return out;
}

std::string DeviceName::FullName() const {
  std::string out = TaskName();
  if (has_type || has_id) {
    absl::StrAppend(&out, "/device:", has_type ? type : "*");
    if (has_id) absl::StrAppend(&out, ":", id);
  }
  return out;
}

}  // namespace cohort::runtime
