// ClusterSpec: the jobs of a training cluster and the address of every task,
// and ServerDef inference for one task of it.
//
// A job maps task indices to "host:port" addresses. A job is *dense* when its
// indices are exactly 0..n-1 and *sparse* otherwise. The JSON form is
// TensorFlow's `as_dict`: a dense job is a list, a sparse job an object keyed
// by the decimal index, a job with no tasks `{}`:
//   {"ps": ["ps0:2222"], "worker": {"0": "w0:2222", "3": "w3:2222"}}
//
// Equality compares job -> index -> address. `jobs()` keeps insertion order;
// the ClusterDef form sorts jobs by name and tasks by index.
//
// Thread safety: a const ClusterSpec may be shared; mutation needs exclusion.
#ifndef COHORT_CLUSTER_CLUSTER_SPEC_H_
#define COHORT_CLUSTER_CLUSTER_SPEC_H_

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cohort/base/json.h"
#include "cohort/cluster.pb.h"

namespace cohort {

class ClusterSpec {
 public:
  // index -> address, sorted by index.
  using TaskMap = std::map<int, std::string>;

  // An empty spec (no jobs; `empty()` is true).
  ClusterSpec() = default;

  // Parses the `as_dict` JSON form. Job values must be a list of strings or an
  // object whose keys are decimal task indices ("3"); anything else is
  // InvalidArgument naming `what`, the job and the offending value.
  static absl::StatusOr<ClusterSpec> FromJson(const Json& json,
                                              absl::string_view what);
  // The same from an order-preserving JSON value: jobs() then follows the
  // object's key order (Json objects are sorted by key).
  static absl::StatusOr<ClusterSpec> FromJson(
      const nlohmann::ordered_json& json, absl::string_view what);
  // Parses a ClusterDef. A job named twice is InvalidArgument.
  static absl::StatusOr<ClusterSpec> FromClusterDef(const ClusterDef& def);

  // Adds (or replaces) a dense job: addresses[i] is task i.
  void SetJob(const std::string& job,
              const std::vector<std::string>& addresses);
  // Adds (or replaces) a job from an index -> address map.
  void SetJob(const std::string& job, TaskMap tasks);

  // True when there are no jobs. A job with zero tasks still counts as a job.
  bool empty() const { return jobs_.empty(); }
  // Job names in insertion order.
  std::vector<std::string> jobs() const;
  bool HasJob(absl::string_view job) const;
  // The tasks of `job`, or nullptr when there is no such job.
  const TaskMap* tasks(absl::string_view job) const;

  // InvalidArgument "No such job in cluster: 'x'" for an unknown job.
  absl::StatusOr<int> num_tasks(absl::string_view job) const;
  // Defined indices, ascending.
  absl::StatusOr<std::vector<int>> task_indices(absl::string_view job) const;
  // InvalidArgument "No task with index 2 in job 'sparse'" for an unknown
  // index.
  absl::StatusOr<std::string> task_address(absl::string_view job,
                                           int index) const;
  // Dense list padded with nullopt up to the largest index:
  // {0:a, 3:b} -> [a, -, -, b]. A job with no tasks gives an empty list.
  absl::StatusOr<std::vector<std::optional<std::string>>> job_tasks(
      absl::string_view job) const;

  // The `as_dict` JSON form (see the file comment).
  Json ToJson() const;
  // Jobs sorted by name, tasks by index.
  ClusterDef ToClusterDef() const;
  // "ClusterSpec({'ps': ['ps0:1111'], 'worker': {0: 'w0:1'}})", jobs sorted.
  std::string DebugString() const;

  friend bool operator==(const ClusterSpec& a, const ClusterSpec& b);
  friend bool operator!=(const ClusterSpec& a, const ClusterSpec& b) {
    return !(a == b);
  }

 private:
  // Insertion-ordered jobs.
  std::vector<std::pair<std::string, TaskMap>> jobs_;
};

// Builds the ServerDef of one task (TensorFlow's _make_server_def rules):
// - no job name: the cluster's only job, else InvalidArgument
//   "Must specify an explicit `job_name`."
// - no task index: the job's only task (even a sparse index such as 3), else
//   InvalidArgument "Must specify an explicit `task_index`."
//   An unknown job there is InvalidArgument "No such job in cluster: 'x'".
// - protocol defaults to "grpc".
// Nothing else is checked, as in TensorFlow: an explicit job or task index
// the cluster lacks, an address without a port, port 0 in a cluster of
// several tasks are the server's to refuse (runtime::Server::CheckServerDef),
// so that ServerDef.port can still supply the port and a single-task cluster
// may ask for an ephemeral one ("localhost:0", TF's create_local_server).
absl::StatusOr<ServerDef> MakeServerDef(
    const ClusterSpec& cluster, std::optional<std::string> job_name,
    std::optional<int> task_index, std::optional<std::string> protocol = {});

}  // namespace cohort

#endif  // COHORT_CLUSTER_CLUSTER_SPEC_H_
