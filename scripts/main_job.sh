#!/usr/bin/env bash
# The main job: build, then train a 1.07M-parameter classifier with
# asynchronous parameter-server training on a local cluster of processes
# started by `cohort launch`: a chief, 2 workers and a ps, each task run by
# the distribute coordinator from its TF_CONFIG (docs/training.md). The
# chief exits 2 (and so does the job) when held-out accuracy ends below 0.9;
# 2000 steps reach about 0.95.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the job runs, in the same configuration as scripts/test.sh: a
# build/ configured without tests would leave ctest running stale test
# binaries after the job.
COHORT_BUILD_TARGETS="cohort train_ps" bash scripts/build.sh
run_dir="build/main_job"
rm -rf "$run_dir"
mkdir -p "$run_dir"
set +e
# --ui: the job's live page while it trains (its URL, with the token, is
# printed first; docs/ui.md).
build/bin/cohort launch --chief --workers 2 --ps 1 --log-dir "$run_dir/logs" \
  --ui 127.0.0.1:0 -- \
  build/bin/train_ps --steps 2000 --checkpoint-dir "$run_dir/checkpoint" \
  --save-checkpoint-steps 500 --wait-steps-per-worker 100 --log-every 250 \
  --target-accuracy 0.9
status=$?
set -e
echo "main job: exit status $status (task logs in $run_dir/logs, checkpoints and TensorBoard event files in $run_dir/checkpoint)"
exit "$status"
