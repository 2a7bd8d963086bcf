#include "cohort/runtime/collective_resolver.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cohort/base/logging.h"
#include "cohort/base/status.h"
#include "cohort/collective/collective_group.h"
#include "cohort/collective/graph_groups.h"

namespace cohort::runtime {
namespace {

// The transport deadline of a call to the leader is this much later than
// the wait asked of it (timeout_ms), so its answer naming who is missing
// arrives before the transport gives up.
constexpr absl::Duration kLeaderGrace = absl::Seconds(2);

int64_t TimeoutMs(absl::Time deadline, Env* env) {
  return std::max<int64_t>(1, absl::ToInt64Milliseconds(deadline - env->Now()));
}

absl::Status Annotated(const absl::Status& s, int64_t group_key,
                       const std::string& leader) {
  if (s.ok()) return s;
  return absl::Status(
      s.code(),
      absl::StrCat("resolving collective group ", group_key,
                   " through the group leader ", leader, ": ", s.message()));
}

absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> Resolve(
    const GroupResolverOptions& o, int64_t group_key, int group_size,
    const std::string& hint, absl::Time deadline) {
  COHORT_ASSIGN_OR_RETURN(WorkerInterface * leader,
                          o.workers->GetWorker(o.leader));
  CompleteGroupRequest request;
  request.set_group_key(group_key);
  request.set_group_size(group_size);
  request.set_task(o.task);
  request.set_incarnation(o.incarnation);
  CompleteGroupResponse members;
  // The leader's server may not be up yet (each task of a between-graph job
  // starts its own): Unavailable is tried again, backing off, until the
  // deadline; the last error is returned.
  absl::Duration backoff = absl::Milliseconds(20);
  for (;;) {
    request.set_timeout_ms(TimeoutMs(deadline, o.env));
    CallOptions opts;
    opts.set_deadline(deadline + kLeaderGrace);
    members.Clear();
    absl::Status s = WaitFor([&](StatusCallback done) {
      leader->CompleteGroupAsync(&opts, &request, &members, std::move(done));
    });
    if (!absl::IsUnavailable(s) || o.env->Now() + backoff >= deadline) {
      COHORT_RETURN_IF_ERROR(s);
      break;
    }
    o.env->SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
  const auto me =
      std::find(members.task().begin(), members.task().end(), o.task);
  if (members.task_size() != group_size || me == members.task().end()) {
    return absl::InternalError(absl::StrCat(
        "the leader answered ", members.task_size(), " members (",
        absl::StrJoin(members.task(), ", "), ") without ", o.task,
        " for group_size ", group_size,
        ": check that every task names the same collective_group_leader and "
        "runs the same cohort version"));
  }
  collective::GroupOptions group;
  group.name = absl::StrCat("group ", group_key);
  group.rank = static_cast<int>(me - members.task().begin());
  group.size = group_size;
  group.task = o.task;
  group.host = o.host;
  group.job_token = o.job_token;
  group.env = o.env;
  group.transport = hint == "ring" ? collective::Transport::kTcp
                                   : collective::Transport::kAuto;
  group.setup_timeout = std::max(absl::ZeroDuration(), deadline - o.env->Now());
  const int64_t generation = members.generation();
  int64_t round = 0;
  collective::Exchange exchange =
      [&](const std::string& mine,
          absl::Time until) -> absl::StatusOr<std::vector<std::string>> {
    CompleteInstanceRequest r;
    r.set_group_key(group_key);
    r.set_generation(generation);
    r.set_round(round++);
    r.set_task(o.task);
    r.set_payload(mine);
    r.set_timeout_ms(TimeoutMs(until, o.env));
    CompleteInstanceResponse all;
    CallOptions opts;
    opts.set_deadline(until + kLeaderGrace);
    COHORT_RETURN_IF_ERROR(WaitFor([&](StatusCallback done) {
      leader->CompleteInstanceAsync(&opts, &r, &all, std::move(done));
    }));
    if (all.payload_size() != group_size) {
      return absl::InternalError(absl::StrCat(
          "set-up round ", r.round(), " answered ", all.payload_size(),
          " payloads for ", group_size, " members"));
    }
    return std::vector<std::string>(all.payload().begin(), all.payload().end());
  };
  COHORT_ASSIGN_OR_RETURN(std::unique_ptr<collective::CollectiveGroup> formed,
                          collective::CollectiveGroup::Create(group, exchange));
  COHORT_LOG(INFO) << "collective group " << group_key << ": " << o.task
                   << " is rank " << group.rank << " of " << group_size
                   << " over " << formed->transport() << " (leader " << o.leader
                   << ", generation " << generation << ")";
  return collective::GroupForGraphs(std::move(formed));
}

}  // namespace

CollectiveGroups::Resolver MakeGroupResolver(GroupResolverOptions options) {
  if (options.env == nullptr) options.env = Env::Default();
  return [o = std::move(options)](int64_t group_key, int group_size,
                                  const std::string& hint, absl::Time deadline)
             -> absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> {
    absl::StatusOr<std::shared_ptr<CollectiveGroups::Group>> group =
        Resolve(o, group_key, group_size, hint, deadline);
    if (!group.ok()) return Annotated(group.status(), group_key, o.leader);
    return group;
  };
}

}  // namespace cohort::runtime
