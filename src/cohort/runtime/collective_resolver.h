// The members' half of collective group resolution (the leader's is
// collective_leader.h): what a worker installs in a session's
// CollectiveGroups (graph/collective.h) when the session config names a
// collective group leader, so that CollectiveReduce, CollectiveBcastSend/
// Recv and CollectiveGather run across tasks with no hand registration.
//
//   groups->SetResolver(MakeGroupResolver(options));
//   // a step's CollectiveReduce(group_key 7, group_size 2) then:
//   //   CompleteGroup at the leader -> members in rank order, generation
//   //   CollectiveGroup::Create, its set-up exchanges as CompleteInstance
//   //   rounds at the leader -> shared memory when every member is on this
//   //   host (same boot, PID namespace and /dev/shm), else the TCP ring
//   //   between the members' own endpoints (job-token checked)
//
// Errors name the group key and the leader, around the leader's and the
// transport's own (collective_leader.h, collective/collective_group.h):
// NotFound when the leader is not a task of the cluster; DeadlineExceeded
// naming who did not join.
//
// Thread safety: the resolver is thread-safe (CollectiveGroups runs one at a
// time anyway).
#ifndef COHORT_RUNTIME_COLLECTIVE_RESOLVER_H_
#define COHORT_RUNTIME_COLLECTIVE_RESOLVER_H_

#include <cstdint>
#include <string>

#include "cohort/base/env.h"
#include "cohort/graph/collective.h"
#include "cohort/runtime/worker_interface.h"

namespace cohort::runtime {

struct GroupResolverOptions {
  // This task ("/job:worker/replica:0/task:1") and its device incarnation.
  std::string task;
  uint64_t incarnation = 0;
  // The collective group leader's task name.
  std::string leader;
  // Reaches the leader (this task's own worker in process when it leads).
  // Not owned; must outlive the resolver's calls.
  WorkerCache* workers = nullptr;
  // Where this task's ring endpoint listens (an address the other members
  // reach it by: its host in the cluster spec) and the token it requires.
  std::string host = "127.0.0.1";
  std::string job_token;
  Env* env = nullptr;  // nullptr: Env::Default().
};

CollectiveGroups::Resolver MakeGroupResolver(GroupResolverOptions options);

}  // namespace cohort::runtime

#endif  // COHORT_RUNTIME_COLLECTIVE_RESOLVER_H_
