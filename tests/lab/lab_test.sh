#!/usr/bin/env bash
# Tests across the multi-host lab (scripts/lab.sh, docs/lab.md): hosts made
# of network namespaces, one task per host, traffic over the lab's links.
#
#   tests/lab/lab_test.sh script|collective|ps BIN_DIR [PS_HIDDEN]
#
# PS_HIDDEN: the PS job's hidden units (default 1024; the sanitizer builds
# pass 64).
#
# Exit 0: passed; 77: skipped (no root or no network namespaces here: the
# reason is printed); anything else: failed, with the tasks' logs. Each test
# brings the lab up and takes it down again (also on failure); ctest runs
# them one at a time (RESOURCE_LOCK lab).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
LAB="$ROOT/scripts/lab.sh"
TEST="${1:?usage: lab_test.sh script|collective|ps BIN_DIR}"
BIN="${2:?usage: lab_test.sh $TEST BIN_DIR}"
PS_HIDDEN="${3:-1024}"
bash "$LAB" check || { echo "SKIPPED: the lab cannot run here (reason above)"; exit 77; }
WORK="$(mktemp -d "${TMPDIR:-/tmp}/cohort-lab-test.XXXXXX")"
cleanup() { bash "$LAB" down; rm -rf "$WORK"; }
trap cleanup EXIT

fail() {
  echo "FAILED: $*" >&2
  for f in "$WORK"/*.log; do
    [[ -f "$f" ]] && { echo "--- $f" >&2; tail -n 40 "$f" >&2; }
  done
  exit 1
}

# A TCP connection from host $1 to $2:$3 within $4 seconds: "ok" or the error.
connect() {
  bash "$LAB" exec "$1" -- python3 - "$2" "$3" "$4" <<'PY'
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("ok")
except OSError as e:
    print(type(e).__name__)
PY
}

# Serves one accept on host $1's address, port $2, in the background.
serve() {
  bash "$LAB" exec "$1" -- python3 -c "
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('$(bash "$LAB" addr "$1")', $2)); s.listen(4); s.settimeout(10)
for _ in range(20):
    try: s.accept()[0].close()
    except OSError: break
" &
  SERVER=$!
  # Until it listens (bounded): a connect from its own host succeeds.
  for _ in $(seq 50); do
    [[ "$(connect "$1" "$(bash "$LAB" addr "$1")" "$2" 1)" == ok ]] && return 0
    sleep 0.1
  done
  fail "the test server on $1 did not listen"
}

# The script itself: hosts, addresses, a link, a silent partition, heal, down.
test_script() {
  bash "$LAB" up 3 >"$WORK/up.log" 2>&1 || fail "lab up 3"
  bash "$LAB" up 3 >>"$WORK/up.log" 2>&1 || fail "lab up 3 again (idempotent)"
  [[ "$(bash "$LAB" addr h2)" == 10.77.0.3 ]] || fail "h2's address"
  [[ "$(ip netns list | grep -c '^cohort-h')" == 3 ]] || fail "3 host namespaces"
  serve h1 7100
  [[ "$(connect h0 10.77.0.2 7100 3)" == ok ]] || fail "h0 cannot reach h1"
  bash "$LAB" partition h1
  # Silent: the connect is not refused, it never completes.
  local cut; cut="$(connect h0 10.77.0.2 7100 1)"
  [[ "$cut" == TimeoutError || "$cut" == timeout ]] || fail "partitioned h1 answered: $cut"
  bash "$LAB" heal h1
  [[ "$(connect h0 10.77.0.2 7100 3)" == ok ]] || fail "h1 not back after heal"
  kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null
  bash "$LAB" down
  [[ "$(ip netns list | grep -c '^cohort-')" == 0 ]] || fail "namespaces left after down"
  echo "PASSED: lab script (3 hosts, link, silent partition, heal, down)"
}

# One `cohort launch --engine tf_config` per host, TF_CONFIG naming the lab
# addresses ($1: the cluster JSON; then "type:index@host" per task; the
# program after --). Waits for all; their logs go to $WORK/<type><index>.log.
launch_per_host() {
  local cluster="$1"; shift
  local tasks=()
  while [[ "$1" != -- ]]; do tasks+=("$1"); shift; done
  shift
  local pids=() t type index host
  for t in "${tasks[@]}"; do
    type="${t%%:*}"; index="${t#*:}"; index="${index%@*}"; host="${t#*@}"
    timeout 240 bash "$LAB" exec "$host" -- env \
      TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"$type\", \"index\": $index}}" \
      "$BIN/cohort" launch --engine tf_config --token-file "$WORK/token" \
      --rendezvous-timeout 60 --quiet -- "$@" >"$WORK/$type$index.log" 2>&1 &
    pids+=($!)
  done
  local rc=0 pid
  for pid in "${pids[@]}"; do wait "$pid" || rc=$?; done
  return $rc
}

# Synchronous training through the runtime across 2 hosts: the group is
# formed over the TCP ring (another network namespace is another host), the
# gradients cross the link, the parameters end identical.
test_collective() {
  bash "$LAB" up 2 >"$WORK/up.log" 2>&1 || fail "lab up 2"
  local before; before="$(bash "$LAB" bytes h1)"
  launch_per_host '{"chief": ["10.77.0.1:2222"], "worker": ["10.77.0.2:2222"]}' \
    chief:0@h0 worker:0@h1 -- "$BIN/train_collective" --steps 150 --log-every 50 \
    --target-loss 0.7 || fail "the job across 2 hosts failed"
  grep -q "\[chief:0\] parameters identical across 2 tasks" "$WORK/chief0.log" ||
    fail "no parameter check on the chief"
  grep -q "is rank 0 of 2 over tcp" "$WORK/chief0.log" || fail "chief's group not over tcp"
  grep -q "is rank 1 of 2 over tcp" "$WORK/worker0.log" || fail "worker's group not over tcp"
  local after rx tx
  after="$(bash "$LAB" bytes h1)"
  rx=$(( $(echo "$after" | awk '{print $2}') - $(echo "$before" | awk '{print $2}') ))
  tx=$(( $(echo "$after" | awk '{print $4}') - $(echo "$before" | awk '{print $4}') ))
  # 150 steps of 1,348 float gradients each way at least.
  (( rx > 150 * 1348 * 4 && tx > 150 * 1348 * 4 )) ||
    fail "too few bytes crossed h1's link (rx $rx, tx $tx)"
  echo "PASSED: collective across 2 hosts over tcp (h1's link: rx $rx B, tx $tx B)"
}

# The main PS job with its tasks on 4 hosts.
test_ps() {
  bash "$LAB" up 4 >"$WORK/up.log" 2>&1 || fail "lab up 4"
  local before; before="$(bash "$LAB" bytes h3)"
  launch_per_host '{"chief": ["10.77.0.1:2222"], "worker": ["10.77.0.2:2222", "10.77.0.3:2222"], "ps": ["10.77.0.4:2222"]}' \
    chief:0@h0 worker:0@h1 worker:1@h2 ps:0@h3 -- "$BIN/train_ps" --steps 300 \
    --hidden "$PS_HIDDEN" --log-every 100 --target-accuracy 0.6 \
    --checkpoint-dir "$WORK/ckpt" ||
    fail "the PS job across 4 hosts failed"
  grep -q "\[chief:0\] final: global_step" "$WORK/chief0.log" || fail "no final line on the chief"
  local after rx
  after="$(bash "$LAB" bytes h3)"
  rx=$(( $(echo "$after" | awk '{print $2}') - $(echo "$before" | awk '{print $2}') ))
  # Every step pushes the w2 gradient (hidden x hidden floats) to the ps.
  (( rx > 300 * PS_HIDDEN * PS_HIDDEN * 4 )) ||
    fail "too few bytes reached the ps's host (rx $rx)"
  echo "PASSED: the PS job across 4 hosts (ps host received $rx B)"
}

case "$TEST" in
  script) test_script ;;
  collective) test_collective ;;
  ps) test_ps ;;
  *) echo "unknown test $TEST" >&2; exit 2 ;;
esac
