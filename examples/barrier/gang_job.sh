#!/usr/bin/env bash
# A shell gang job: every task of `cohort launch` runs this script.
#
#   cohort launch -n 3 -- examples/barrier/gang_job.sh
#
# `cohort task` reads the environment `cohort launch` set, so any program
# can take part in the gang's barriers. `cohort launch` puts its own path in
# COHORT_BIN; outside it, `cohort` from PATH is used.
set -euo pipefail
COHORT="${COHORT_BIN:-cohort}"

info="$("$COHORT" task info)"
echo "I am $COHORT_TASK_NAME: $info"

# Every task prepares its part ...
sleep "0.$((COHORT_PARTITION_ID % 3))"
# ... and nobody goes on before all are ready.
"$COHORT" task barrier
echo "passed the barrier"

# Exchange one message per task; the JSON array is ordered by partition id.
all="$("$COHORT" task allgather "hello from $COHORT_TASK_NAME")"
echo "everyone said: $all"
