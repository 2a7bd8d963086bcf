#!/bin/sh
# One task of the job page's browser test (page_test.py), run by
# `cohort launch -n 4`: publishes one training-metrics point in the format
# of coord/task_metrics.h, waits at the gang's barrier (worker:3 only once
# $PAGE_TEST_HOLD exists), then stays up until $PAGE_TEST_DONE exists (at
# most 60 s) so that the page still has a job to show.
set -eu
cohort="$PAGE_TEST_BIN/cohort"
now_ms=$(date +%s%3N)
index=${COHORT_TASK_NAME#*:}
"$cohort" kv set --overwrite --coordinator "$COHORT_COORDINATION_SERVICE_ADDRESS" \
  "cohort/metrics/$COHORT_TASK_NAME" \
  "{\"task\":\"$COHORT_TASK_NAME\",\"global_step\":$((10 + index)),\"loss\":0.5,\"examples_per_sec\":100,\"global_steps_per_sec\":10,\"last_step\":100,\"time_unix_ms\":$now_ms}"
if [ "$COHORT_TASK_NAME" = "worker:3" ]; then
  i=0
  while [ ! -e "$PAGE_TEST_HOLD" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
fi
"$cohort" task barrier
i=0
while [ ! -e "$PAGE_TEST_DONE" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
