#!/usr/bin/env bash
# Measures the parameter-server job's throughput with 1 and with 2 workers
# (one ps, worker:0 as chief, no start delay), back to back in one run, and
# prints one JSON line per configuration (the format of bench/results-*):
# examples/s summed over the training tasks, each task's own rate taken
# over its whole training loop. Usage: scripts/measure_ps_job.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-1500}"
COHORT_BUILD_TARGETS="cohort train_ps" bash scripts/build.sh >&2
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
read -r l1 _ < /proc/loadavg
echo "{\"bench\":\"ps_training\",\"date\":\"$(date -u +%FT%TZ)\",\"loadavg_1m\":$l1,\"nproc\":$(nproc),\"suite\":\"env\",\"when\":\"start\"}"
for workers in 1 2; do
  out="$dir/run-$workers.log"
  build/bin/cohort launch --workers "$workers" --ps 1 --quiet \
    --log-dir "$dir/logs-$workers" -- build/bin/train_ps --steps "$steps" \
    --checkpoint-dir "$dir/ckpt-$workers" --save-checkpoint-steps 500 \
    --log-every 0 > "$out" 2>&1 || { cat "$out" >&2; exit 1; }
  # "[worker:1] worker:1: trained 712 steps (1554 examples/s)"
  total=$(grep -o 'trained [0-9]* steps ([0-9.]* examples/s)' "$out" |
    sed 's/.*(\([0-9.]*\) examples.*/\1/' | awk '{s += $1} END {print s}')
  accuracy=$(grep -o 'heldout_accuracy [0-9.]*' "$out" | awk '{print $2}')
  [ -n "$total" ] && [ -n "$accuracy" ] || { cat "$out" >&2; exit 1; }
  echo "{\"metric\":\"examples_per_second\",\"params\":{\"workers\":$workers,\"ps\":1,\"parameters\":1071108,\"batch\":64,\"steps\":$steps},\"heldout_accuracy\":$accuracy,\"suite\":\"ps_training\",\"unit\":\"examples/s\",\"value\":$total}"
done
