// The gang a data-parallel task trains in, when it runs under `cohort
// launch`: the barrier task context for the parameter checks and a
// collective group for the gradients, which resolves through the gang's
// all-gather and moves data between the tasks directly (shared memory on
// one host, TCP with the job token otherwise).
//
//   COHORT_ASSIGN_OR_RETURN(LaunchedGang gang, JoinLaunchedGang());
//   RunDataParallelTraining(options, gang.collective, std::cout);
//
// Under `cohort launch --elastic MIN:MAX` (COHORT_ELASTIC in the
// environment) the gang is an ElasticGang (elastic_gang.h) instead: the
// Collective's elastic hooks are set, and its partition and size change
// with the membership.
//
// Errors: FailedPrecondition naming the missing COHORT_* variable outside a
// launch; the collective group's errors (collective_group.h); ElasticGang's.
//
// Thread safety: thread-compatible.
#ifndef COHORT_TRAINING_DATA_PARALLEL_GANG_H_
#define COHORT_TRAINING_DATA_PARALLEL_GANG_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cohort/collective/collective_group.h"
#include "cohort/coord/coordination_agent.h"
#include "cohort/training/data_parallel.h"
#include "cohort/training/elastic_gang.h"

namespace cohort::training {

struct LaunchedGang {
  Collective collective;  // Uses the members below; valid while this lives.
  std::unique_ptr<collective::CollectiveGroup> group;  // fixed gang
  std::unique_ptr<coord::CoordinationAgent> agent;     // elastic gang
  std::unique_ptr<ElasticGang> elastic;
  const char* transport() const {
    return elastic != nullptr ? elastic->transport() : group->transport();
  }
};

// `timeout`: for joining the group and for each all-reduce.
absl::StatusOr<LaunchedGang> JoinLaunchedGang(
    collective::Transport transport = collective::Transport::kAuto,
    absl::Duration timeout = absl::Minutes(5));

}  // namespace cohort::training

#endif  // COHORT_TRAINING_DATA_PARALLEL_GANG_H_
