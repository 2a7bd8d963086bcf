#include "cohort/cluster/cluster_spec.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/status.h"

namespace cohort {
namespace {

// Python-repr-like quoting for DebugString: 'text'.
std::string Quote(absl::string_view s) { return absl::StrCat("'", s, "'"); }

bool IsDense(const ClusterSpec::TaskMap& tasks) {
  int expected = 0;
  for (const auto& [index, address] : tasks) {
    if (index != expected) return false;
    ++expected;
  }
  return !tasks.empty();
}

}  // namespace

namespace {

// Error messages render values through Json.
const Json& AsJson(const Json& value) { return value; }
Json AsJson(const nlohmann::ordered_json& value) {
  return Json::parse(value.dump());
}

template <typename J>
absl::StatusOr<ClusterSpec> ClusterSpecFromJson(const J& json,
                                                absl::string_view what) {
  if (json.is_null()) return ClusterSpec();
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what,
        ": the cluster must be a JSON object mapping job names to a list "
        "of \"host:port\" addresses or to an object from task index to "
        "address, got ",
        JsonTypeName(AsJson(json)), " ", JsonPreview(AsJson(json))));
  }
  ClusterSpec spec;
  for (const auto& [job, value] : json.items()) {
    ClusterSpec::TaskMap tasks;
    if (value.is_array()) {
      int index = 0;
      for (const auto& address : value) {
        if (!address.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": task ", index, " of job '", job,
                           "' must be a \"host:port\" string, got ",
                           JsonTypeName(AsJson(address)), " ",
                           JsonPreview(AsJson(address))));
        }
        tasks[index++] = address.template get<std::string>();
      }
    } else if (value.is_object()) {
      for (const auto& [key, address] : value.items()) {
        int index = 0;
        if (!absl::SimpleAtoi(key, &index) || index < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, ": job '", job, "' has task key \"", key,
              "\"; a sparse job must be keyed by non-negative decimal task "
              "indices such as \"3\""));
        }
        if (!address.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": task ", index, " of job '", job,
                           "' must be a \"host:port\" string, got ",
                           JsonTypeName(AsJson(address)), " ",
                           JsonPreview(AsJson(address))));
        }
        if (tasks.count(index) != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, ": job '", job, "' defines task index ", index, " twice"));
        }
        tasks[index] = address.template get<std::string>();
      }
    } else {
      // TensorFlow raises TypeError "The tasks for job %r must be a list or a
      // dictionary from integers to strings."
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the tasks for job '", job,
          "' must be a list or a dictionary from integers to strings, got ",
          JsonTypeName(AsJson(value)), " ", JsonPreview(AsJson(value))));
    }
    spec.SetJob(job, std::move(tasks));
  }
  return spec;
}

}  // namespace

absl::StatusOr<ClusterSpec> ClusterSpec::FromJson(const Json& json,
                                                  absl::string_view what) {
  return ClusterSpecFromJson(json, what);
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromJson(
    const nlohmann::ordered_json& json, absl::string_view what) {
  return ClusterSpecFromJson(json, what);
}

absl::StatusOr<ClusterSpec> ClusterSpec::FromClusterDef(const ClusterDef& def) {
  ClusterSpec spec;
  for (const JobDef& job : def.job()) {
    if (spec.HasJob(job.name())) {
      return absl::InvalidArgumentError(
          absl::StrCat("ClusterDef names job '", job.name(),
                       "' more than once; each job must appear exactly once"));
    }
    TaskMap tasks;
    for (const auto& [index, address] : job.tasks()) tasks[index] = address;
    spec.SetJob(job.name(), std::move(tasks));
  }
  return spec;
}

void ClusterSpec::SetJob(const std::string& job,
                         const std::vector<std::string>& addresses) {
  TaskMap tasks;
  for (size_t i = 0; i < addresses.size(); ++i) {
    tasks[static_cast<int>(i)] = addresses[i];
  }
  SetJob(job, std::move(tasks));
}

void ClusterSpec::SetJob(const std::string& job, TaskMap tasks) {
  for (auto& entry : jobs_) {
    if (entry.first == job) {
      entry.second = std::move(tasks);
      return;
    }
  }
  jobs_.emplace_back(job, std::move(tasks));
}

std::vector<std::string> ClusterSpec::jobs() const {
  std::vector<std::string> names;
  names.reserve(jobs_.size());
  for (const auto& entry : jobs_) names.push_back(entry.first);
  return names;
}

bool ClusterSpec::HasJob(absl::string_view job) const {
  return tasks(job) != nullptr;
}

const ClusterSpec::TaskMap* ClusterSpec::tasks(absl::string_view job) const {
  for (const auto& entry : jobs_) {
    if (entry.first == job) return &entry.second;
  }
  return nullptr;
}

namespace {
absl::Status NoSuchJob(absl::string_view job) {
  return absl::InvalidArgumentError(
      absl::StrCat("No such job in cluster: '", job, "'"));
}
}  // namespace

absl::StatusOr<int> ClusterSpec::num_tasks(absl::string_view job) const {
  const TaskMap* t = tasks(job);
  if (t == nullptr) return NoSuchJob(job);
  return static_cast<int>(t->size());
}

absl::StatusOr<std::vector<int>> ClusterSpec::task_indices(
    absl::string_view job) const {
  const TaskMap* t = tasks(job);
  if (t == nullptr) return NoSuchJob(job);
  std::vector<int> indices;
  for (const auto& entry : *t) indices.push_back(entry.first);
  return indices;
}

absl::StatusOr<std::string> ClusterSpec::task_address(absl::string_view job,
                                                      int index) const {
  const TaskMap* t = tasks(job);
  if (t == nullptr) return NoSuchJob(job);
  auto it = t->find(index);
  if (it == t->end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("No task with index ", index, " in job '", job, "'"));
  }
  return it->second;
}

absl::StatusOr<std::vector<std::optional<std::string>>> ClusterSpec::job_tasks(
    absl::string_view job) const {
  const TaskMap* t = tasks(job);
  if (t == nullptr) return NoSuchJob(job);
  std::vector<std::optional<std::string>> out;
  // TensorFlow fails on a job with no tasks (max of an empty set); an empty
  // list is the sensible answer.
  if (t->empty()) return out;
  out.resize(static_cast<size_t>(t->rbegin()->first) + 1);
  for (const auto& [index, address] : *t) out[index] = address;
  return out;
}

Json ClusterSpec::ToJson() const {
  Json out = Json::object();
  for (const auto& [job, tasks] : jobs_) {
    if (IsDense(tasks)) {
      Json list = Json::array();
      for (const auto& entry : tasks) list.push_back(entry.second);
      out[job] = std::move(list);
    } else {
      Json map = Json::object();
      for (const auto& [index, address] : tasks) {
        map[std::to_string(index)] = address;
      }
      out[job] = std::move(map);
    }
  }
  return out;
}

ClusterDef ClusterSpec::ToClusterDef() const {
  std::vector<const std::pair<std::string, TaskMap>*> sorted;
  for (const auto& entry : jobs_) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  ClusterDef def;
  for (const auto* entry : sorted) {
    JobDef* job = def.add_job();
    job->set_name(entry->first);
    for (const auto& [index, address] : entry->second) {
      (*job->mutable_tasks())[index] = address;
    }
  }
  return def;
}

std::string ClusterSpec::DebugString() const {
  std::vector<const std::pair<std::string, TaskMap>*> sorted;
  for (const auto& entry : jobs_) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  std::vector<std::string> parts;
  for (const auto* entry : sorted) {
    const TaskMap& tasks = entry->second;
    std::vector<std::string> items;
    std::string value;
    if (IsDense(tasks)) {
      for (const auto& t : tasks) items.push_back(Quote(t.second));
      value = absl::StrCat("[", absl::StrJoin(items, ", "), "]");
    } else {
      for (const auto& t : tasks) {
        items.push_back(absl::StrCat(t.first, ": ", Quote(t.second)));
      }
      value = absl::StrCat("{", absl::StrJoin(items, ", "), "}");
    }
    parts.push_back(absl::StrCat(Quote(entry->first), ": ", value));
  }
  return absl::StrCat("ClusterSpec({", absl::StrJoin(parts, ", "), "})");
}

bool operator==(const ClusterSpec& a, const ClusterSpec& b) {
  if (a.jobs_.size() != b.jobs_.size()) return false;
  for (const auto& [job, tasks] : a.jobs_) {
    const ClusterSpec::TaskMap* other = b.tasks(job);
    if (other == nullptr || *other != tasks) return false;
  }
  return true;
}

absl::StatusOr<ServerDef> MakeServerDef(const ClusterSpec& cluster,
                                        std::optional<std::string> job_name,
                                        std::optional<int> task_index,
                                        std::optional<std::string> protocol) {
  if (!job_name.has_value()) {
    std::vector<std::string> jobs = cluster.jobs();
    if (jobs.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("Must specify an explicit `job_name`. The cluster has ",
                       jobs.size(), " jobs (", absl::StrJoin(jobs, ", "),
                       "); only a single-job cluster implies the job name."));
    }
    job_name = jobs[0];
  }
  if (!task_index.has_value()) {
    const ClusterSpec::TaskMap* tasks = cluster.tasks(*job_name);
    if (tasks == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "No such job in cluster: '", *job_name,
          "'; the server's job must be one of the cluster's jobs: ",
          absl::StrJoin(cluster.jobs(), ", ")));
    }
    if (tasks->size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Must specify an explicit `task_index`. Job '", *job_name, "' has ",
          tasks->size(), " tasks; only a single-task job implies the index."));
    }
    task_index = tasks->begin()->first;
  }
  ServerDef def;
  *def.mutable_cluster() = cluster.ToClusterDef();
  def.set_job_name(*job_name);
  def.set_task_index(*task_index);
  def.set_protocol(protocol.has_value() && !protocol->empty() ? *protocol
                                                              : "grpc");
  return def;
}

}  // namespace cohort
