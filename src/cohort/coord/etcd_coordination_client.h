// A CoordinationClient whose "service" is an etcd cluster: the coordination
// service's behaviour (registration, heartbeats, error propagation, the
// key-value store, barriers) kept in etcd keys by the clients themselves,
// so no process of the job is the control plane (docs/etcd.md).
//
//   std::shared_ptr<EtcdClient> etcd = ...;        // etcd_client.h
//   EtcdCoordinationOptions o;
//   o.space = "launchers/";                         // under the job prefix
//   o.jobs = {{"launcher", 4}};
//   o.job_id = JobIdOf(token);                      // the same on every task
//   auto client = NewEtcdCoordinationClient(etcd, o);
//   CoordinationAgent::Create(agent_options, *std::move(client));
//
// Layout, under the job prefix and `space`:
//   job                   {"jobs":..., "job_id":..., "incarnation":N}: written
//                         by the first client (first writer wins); a client
//                         of another job (other jobs or job_id) is refused
//   status/tasks/T        T registered: {"incarnation":I}, attached to T's
//                         lease (TTL: heartbeat_timeout); heartbeats renew it
//   status/shutdown/T     T shut down on purpose
//   status/error          the job's first error (first writer wins):
//                         reported by a task, or a task whose lease expired
//   kv/KEY                the key-value store (keys normalised as the
//                         built-in store does: "a//b/" is "a/b")
//   barriers/ID/N/arrived/T, barriers/ID/N/result
//                         instance N of barrier ID: who arrived, and its
//                         outcome ("passed" or the failure), first writer
//                         wins, so every task reads the same outcome
//
// Semantics, as the built-in service's (coordination_service.h), except:
//   - a task is lost when its lease expires (it did not heartbeat for
//     heartbeat_timeout): whichever client's error poll sees its key go
//     first records the job's error, naming it;
//   - a barrier that times out fails for every task with the same message
//     (the first to time out writes it), naming who had not arrived;
//   - WatchJobState's versions are etcd revisions; a task is CONNECTED
//     while its lease lives, ERROR when it is the job's error's source;
//   - ResetTask, GetJobStatus and GetAliveTasks answer Unimplemented
//     (`cohort status` and the job page read the built-in service; see
//     docs/etcd.md).
// Errors that are the service's answers carry the kCoordinationErrorUrl
// payload as the built-in service's do; errors reaching etcd are the etcd
// client's (Unavailable naming the endpoints), which agents treat as
// transport errors and retry.
//
// Thread safety: thread-safe. Async calls run on a thread of their own; the
// destructor waits for them (cancel long ones first).
#ifndef COHORT_COORD_ETCD_COORDINATION_CLIENT_H_
#define COHORT_COORD_ETCD_COORDINATION_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cohort/coord/coordination_client.h"
#include "cohort/coord/etcd_client.h"

namespace cohort::coord {

struct EtcdCoordinationOptions {
  // Under the job prefix, ending in "/" ("launchers/", "programs/3/"), or
  // empty: the prefix itself. One coordination service per space.
  std::string space;
  // The job's tasks: job name -> count. Empty (with job_id): join the job
  // whose record the space holds (a program started by `cohort launch`).
  std::map<std::string, int> jobs;
  // Names the job (the same on every task; not a secret): a prefix used by
  // another job is refused. JobIdOf(token) derives one from the job token.
  std::string job_id;
  // A registered task's lease TTL (rounded up to whole seconds, at least
  // 2 s): silent this long, it is lost.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // As the built-in service's recoverable jobs, for every task: a task's
  // loss or reported error is not the job's error (its launcher restarts
  // it). Joining clients read this and heartbeat_timeout from the record.
  bool recoverable = false;
};

// Follows the status directory of one space (as EtcdCoordinationOptions::
// space) and finds its lost tasks: registered, as this follower saw them,
// and gone without a shutdown marker (their lease expired or their key was
// deleted). The clients' error poll uses one; so does a launcher that must
// notice a lost peer in a recoverable space, where a loss is no job error.
//
// Thread safety: thread-safe.
class EtcdTaskLosses {
 public:
  EtcdTaskLosses(std::shared_ptr<EtcdClient> etcd, std::string space);

  struct Look {
    std::vector<std::string> lost;     // task names ("launcher:2"), sorted
    std::vector<std::string> present;  // registered now, sorted
    std::optional<std::string> error;  // the space's error record, if any
    int64_t revision = 0;              // of the listing
  };
  // Counts `tasks` as registered before this follower first listed (a
  // caller that knows they registered: they passed a barrier with it), so
  // one lost before that listing is found too.
  void AssumeRegistered(const std::vector<std::string>& tasks);
  // Lists the status directory once (the etcd client's errors).
  absl::StatusOr<Look> Read();
  // Waits for a change to the directory after `revision`: OK when one
  // came, DeadlineExceeded after `timeout`, FailedPrecondition when etcd
  // compacted past `revision` (Read again), Cancelled.
  absl::Status AwaitChange(int64_t revision, absl::Duration timeout,
                           CallCancellation* cancellation);

 private:
  const std::shared_ptr<EtcdClient> etcd_;
  const std::string space_;
  absl::Mutex mu_;
  std::set<std::string> seen_registered_ ABSL_GUARDED_BY(mu_);
};

// A job id that names the job without revealing its token: the first 16
// hex digits of HMAC-SHA256(token, "cohort etcd job id").
std::string JobIdOf(const std::string& job_token);

// Checks `options` and writes (or checks) the space's job record.
// InvalidArgument for bad options; FailedPrecondition naming the prefix
// when it holds another job's record, or (joining) no record; the etcd
// client's errors otherwise.
absl::StatusOr<std::unique_ptr<CoordinationClient>> NewEtcdCoordinationClient(
    std::shared_ptr<EtcdClient> etcd, EtcdCoordinationOptions options);

// A client of the job whose record is at `url` ("etcd://HOST:PORT,.../
// PREFIX", the coordination address `cohort launch` gives its programs),
// with the credentials of EtcdSecurityFromEnv(env).
absl::StatusOr<std::unique_ptr<CoordinationClient>> JoinEtcdCoordination(
    const std::string& url, Env* env);

}  // namespace cohort::coord

#endif  // COHORT_COORD_ETCD_COORDINATION_CLIENT_H_
