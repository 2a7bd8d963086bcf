#!/usr/bin/env bash
# The main job: build, then train a two-layer classifier data-parallel on a
# local gang of 2 processes started by `cohort launch` (docs/training.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the job runs, in the same configuration as scripts/test.sh: a
# build/ configured without tests would leave ctest running stale test
# binaries after the job.
COHORT_BUILD_TARGETS="cohort train_data_parallel" bash scripts/build.sh
run_dir="build/main_job"
rm -rf "$run_dir"
mkdir -p "$run_dir"
set +e
build/bin/cohort launch -n 2 --barrier-timeout 120 --log-dir "$run_dir/logs" -- \
  build/bin/train_data_parallel --steps 300 --log-every 50 \
  --checkpoint-dir "$run_dir/checkpoint"
status=$?
set -e
echo "main job: exit status $status (task logs in $run_dir/logs)"
exit "$status"
