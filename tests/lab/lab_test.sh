#!/usr/bin/env bash
# Tests across the multi-host lab (scripts/lab.sh, docs/lab.md): hosts made
# of network namespaces, one task per host, traffic over the lab's links.
#
#   tests/lab/lab_test.sh script|collective|collective4|ps|partition_ps|partition_worker|
#                         partition_control|host_dies|stall|restart_task|
#                         elastic_partition BIN_DIR [PS_HIDDEN]
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
PIDS=()
# The launchers first (SIGTERM through `timeout`: each stops its program),
# then the lab, whose `down` kills whatever still runs in its hosts.
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  bash "$LAB" down; rm -rf "$WORK"
}
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
# program after --), started in the background: PIDS[i] and their logs
# $WORK/<type><index>.log. LAUNCH_FLAGS: more flags for every launcher.
start_per_host() {
  local cluster="$1"; shift
  local tasks=()
  while [[ "$1" != -- ]]; do tasks+=("$1"); shift; done
  shift
  PIDS=()
  local t type index host
  for t in "${tasks[@]}"; do
    type="${t%%:*}"; index="${t#*:}"; index="${index%@*}"; host="${t#*@}"
    # shellcheck disable=SC2086 # LAUNCH_FLAGS is a list of flags
    timeout 240 bash "$LAB" exec "$host" -- env \
      TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"$type\", \"index\": $index}}" \
      "$BIN/cohort" launch --engine tf_config --token-file "$WORK/token" \
      --rendezvous-timeout 60 --no-progress ${LAUNCH_FLAGS:-} -- "$@" \
      >"$WORK/$type$index.log" 2>&1 &
    PIDS+=($!)
  done
}

# Waits for every launcher start_per_host started; the last failure's status.
wait_per_host() {
  local rc=0 pid
  for pid in "${PIDS[@]}"; do wait "$pid" || rc=$?; done
  return $rc
}

launch_per_host() { start_per_host "$@"; wait_per_host; }

# Until file $1 has a line matching $2 (grep -E), at most $3 seconds.
await_line() {
  local deadline=$((SECONDS + $3))
  until grep -qE -- "$2" "$1" 2>/dev/null; do
    (( SECONDS < deadline )) || return 1
    sleep 0.2
  done
}

# Synchronous training through the runtime across $1 hosts (2 or 4): the
# group is formed over the TCP ring (another network namespace is another
# host), the gradients cross the links, the parameters end identical.
test_collective() {
  local n="$1" i workers=() tasks=(chief:0@h0)
  bash "$LAB" up "$n" >"$WORK/up.log" 2>&1 || fail "lab up $n"
  for (( i = 1; i < n; i++ )); do
    workers+=("\"10.77.0.$((i + 1)):2222\"")
    tasks+=("worker:$((i - 1))@h$i")
  done
  local before; before="$(bash "$LAB" bytes h1)"
  launch_per_host "{\"chief\": [\"10.77.0.1:2222\"], \"worker\": [$(IFS=,; echo "${workers[*]}")]}" \
    "${tasks[@]}" -- "$BIN/train_collective" --steps 150 --log-every 50 \
    --target-loss 0.7 || fail "the job across $n hosts failed"
  grep -q "\[chief:0\] parameters identical across $n tasks" "$WORK/chief0.log" ||
    fail "no parameter check on the chief"
  grep -q "is rank 0 of $n over tcp" "$WORK/chief0.log" || fail "chief's group not over tcp"
  for (( i = 1; i < n; i++ )); do
    grep -q "is rank $i of $n over tcp" "$WORK/worker$((i - 1)).log" ||
      fail "worker:$((i - 1))'s group not over tcp"
  done
  local after rx tx
  after="$(bash "$LAB" bytes h1)"
  rx=$(( $(echo "$after" | awk '{print $2}') - $(echo "$before" | awk '{print $2}') ))
  tx=$(( $(echo "$after" | awk '{print $4}') - $(echo "$before" | awk '{print $4}') ))
  # Every step's ring all-reduce moves 2(n-1)/n of the 1,348 float
  # gradients through each member's link each way: at least that.
  local least=$(( 150 * 1348 * 4 * 2 * (n - 1) / n ))
  (( rx > least && tx > least )) ||
    fail "too few bytes crossed h1's link (rx $rx, tx $tx; at least $least each way)"
  echo "PASSED: collective across $n hosts over tcp (h1's link: rx $rx B, tx $tx B)"
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

# The PS job's cluster on 4 hosts: chief h0, workers h1 h2, ps h3.
PS_CLUSTER='{"chief": ["10.77.0.1:2222"], "worker": ["10.77.0.2:2222", "10.77.0.3:2222"], "ps": ["10.77.0.4:2222"]}'
PS_TASKS=(chief:0@h0 worker:0@h1 worker:1@h2 ps:0@h3)
# Steps of the partition tests' PS job: while the ps is cut off nobody steps,
# so the job is still running when the link comes back however fast it is.
PART_HIDDEN=$(( PS_HIDDEN < 256 ? PS_HIDDEN : 256 ))
PART_STEPS=20000

# Starts the PS job on the 4 hosts with launcher flags $1 and $2 steps,
# checkpointing, and waits for worker:0's first logged step.
start_ps_job() {
  LAUNCH_FLAGS="$1" start_per_host "$PS_CLUSTER" "${PS_TASKS[@]}" -- \
    "$BIN/train_ps" --steps "$2" --hidden "$PART_HIDDEN" --log-every 500 \
    --checkpoint-dir "$WORK/ckpt" --save-checkpoint-steps 1000
  await_line "$WORK/worker0.log" "worker:0: global_step [0-9]+ loss" 120 || fail "the job never stepped"
}

# After the job: it succeeded in its first attempt, no task restarted (a
# restart was allowed: the job's roles make it --restart task).
expect_one_attempt() {
  wait_per_host || fail "the job did not survive $1"
  grep -q "attempt 1" "$WORK"/*.log && fail "the gang was restarted after $1"
  grep -q "restarted alone" "$WORK"/*.log && fail "a task was restarted after $1"
  return 0
}

# Behaviour 4 (docs/lab.md): the ps's host is cut off mid-training until the
# workers give it up.
# The steps fail once the data plane gives the ps up (TCP keepalive and user
# timeout, ~13 s), naming the ps and its address; the launchers name it at
# the heartbeat timeout and wait (--partition-grace); after the heal the
# workers' MonitoredSession recovery carries on: one attempt, no restart.
test_partition_ps() {
  bash "$LAB" up 4 >"$WORK/up.log" 2>&1 || fail "lab up 4"
  # The grace (120 s) outlasts the waits below (30 s + 60 s); a restart
  # would be allowed (--max-restarts 1), so "one attempt" can fail.
  start_ps_job "--heartbeat-timeout 5 --partition-grace 120 --max-restarts 1" "$PART_STEPS"
  bash "$LAB" partition h3
  await_line "$WORK/chief0.log" "launcher:1 \(ps:0\) on 10.77.0.4 has sent no heartbeat" 30 ||
    fail "task 0's launcher did not name the silent ps"
  await_line "$WORK/worker0.log" "An error was raised.*/job:ps/replica:0/task:0 \(10\.77\.0\.4:[0-9]+\) is unavailable" 60 ||
    fail "worker:0's steps did not fail naming the ps while it was cut off"
  bash "$LAB" heal h3
  expect_one_attempt "the ps's partition"
  grep -qE "\[chief:0\] final: global_step [0-9]+" "$WORK/chief0.log" || fail "no final line"
  echo "PASSED: the ps's host cut off; the workers recovered it, one attempt"
}

# Behaviour 3: a worker's host is cut off mid-training. Its launcher is
# named at the heartbeat timeout; the others train on; its own steps fail;
# after the heal it recovers and the job ends at the requested step in one
# attempt, its latest checkpoint whole (a fresh local run restores it).
test_partition_worker() {
  bash "$LAB" up 4 >"$WORK/up.log" 2>&1 || fail "lab up 4"
  start_ps_job "--heartbeat-timeout 5 --partition-grace 120 --max-restarts 1" "$PART_STEPS"
  bash "$LAB" partition h1
  await_line "$WORK/chief0.log" "launcher:2 \(worker:0\) on 10.77.0.2 has sent no heartbeat" 30 ||
    fail "task 0's launcher did not name the silent worker's host"
  # Cut off until worker:0's own steps fail on the unreachable ps (its
  # sockets give up: keepalive, TCP_USER_TIMEOUT), then healed: without
  # MonitoredSession's recovery that error would end worker:0 and the job.
  await_line "$WORK/worker0.log" "An error was raised.*/job:ps/replica:0/task:0 \(10\.77\.0\.4:[0-9]+\) is unavailable" 60 ||
    fail "worker:0's steps did not fail while its host was cut off"
  bash "$LAB" heal h1
  expect_one_attempt "the worker's partition"
  local final
  final="$(grep -oE "\[chief:0\] final: global_step [0-9]+" "$WORK/chief0.log" | grep -oE "[0-9]+$")"
  [[ -n "$final" ]] && (( final >= PART_STEPS )) || fail "the job ended at step '${final}'"
  # The latest checkpoint is whole: a local run restores it.
  "$BIN/train_ps" --steps "$PART_STEPS" --hidden "$PART_HIDDEN" --log-every 0 \
    --checkpoint-dir "$WORK/ckpt" >"$WORK/restore.log" 2>&1 || fail "restoring the checkpoint"
  grep -qE "restored from .*global step [0-9]+" "$WORK/restore.log" ||
    fail "the latest checkpoint was not restored"
  echo "PASSED: a worker's host cut off; it recovered, step $final, one attempt"
}

# Expects every launcher in PIDS to exit non-zero within $1 seconds.
expect_all_exit_within() {
  local deadline=$((SECONDS + $1)) pid
  for pid in "${PIDS[@]}"; do
    while kill -0 "$pid" 2>/dev/null; do
      (( SECONDS < deadline )) || fail "a launcher still runs $1 s later (hang)"
      sleep 0.2
    done
    wait "$pid" && fail "a launcher exited 0 after losing its job"
  done
  return 0
}

# Behaviour 5: the host serving the control plane (task 0's launcher) is cut
# off for good. Every other launcher stops its program and exits within
# heartbeat timeout + grace + stop grace, naming the control plane.
test_partition_control() {
  bash "$LAB" up 4 >"$WORK/up.log" 2>&1 || fail "lab up 4"
  start_ps_job "--heartbeat-timeout 3 --partition-grace 5 --stop-grace 2" 100000000
  bash "$LAB" partition h0
  local others=("${PIDS[@]:1}") chief="${PIDS[0]}"
  PIDS=("${others[@]}")
  expect_all_exit_within 40
  local f
  for f in worker0 worker1 ps0; do
    grep -q "the launchers lost each other (control plane at 10.77.0.1:2222" "$WORK/$f.log" ||
      fail "$f's launcher did not name the lost control plane"
    grep -qE "stopped (worker|ps):[0-9]; the job failed" "$WORK/$f.log" ||
      fail "$f's launcher did not say it stopped its program"
  done
  bash "$LAB" heal h0
  PIDS=("$chief")
  expect_all_exit_within 40
  echo "PASSED: the control plane's host cut off; every launcher stopped and named it"
}

# Behaviour 6: a worker's host dies (every process in it SIGKILLed, its
# link down). Task 0's launcher names it and its address at the heartbeat
# timeout; after the grace the job ends everywhere, naming the lost
# launcher and its host. No hang.
test_host_dies() {
  bash "$LAB" up 4 >"$WORK/up.log" 2>&1 || fail "lab up 4"
  start_ps_job "--heartbeat-timeout 3 --partition-grace 5 --stop-grace 2" 100000000
  bash "$LAB" kill h1
  local dead="${PIDS[1]}"
  wait "$dead" 2>/dev/null  # killed with its host
  PIDS=("${PIDS[0]}" "${PIDS[@]:2}")
  expect_all_exit_within 40
  # Engine tasks are in job-name order (chief, ps, worker, worker): worker:0
  # on h1 is launcher:2.
  grep -q "launcher:2 (worker:0) on 10.77.0.2 has sent no heartbeat" "$WORK/chief0.log" ||
    fail "task 0's launcher did not name the dead host's launcher"
  local f
  for f in chief0 worker1 ps0; do
    grep -q "(launcher:2 runs on 10.77.0.2)" "$WORK/$f.log" ||
      fail "$f's launcher did not name the dead host at the job's end"
  done
  echo "PASSED: a dead host was named, and every other launcher ended"
}

# Behaviour 8 (docs/fault_tolerance.md): worker:0's program on h1 is killed
# (kill -9; its host and launcher live on). The TF_CONFIG cluster has roles,
# so the job restarts that task alone (--restart task): h1's launcher names
# the kill and restarts it; the restarted worker is held before training
# until the chief has logged a step past the kill's (the others train on
# across the links meanwhile); then it trains again; the job ends in its
# first attempt.
test_restart_task() {
  bash "$LAB" up 4 >"$WORK/up.log" 2>&1 || fail "lab up 4"
  # worker:0's first restart waits for $WORK/go (at most 120 s).
  local hold="if [ \"\$COHORT_TASK_NAME\" = worker:0 ] && [ \"\$COHORT_TASK_RESTART\" = 1 ]; then
    echo held down; i=0; while [ ! -e $WORK/go ]; do i=\$((i+1)); [ \$i -gt 1200 ] && exit 7; sleep 0.1; done; fi
    exec \"\$0\" \"\$@\""
  LAUNCH_FLAGS="--max-restarts 1" start_per_host "$PS_CLUSTER" "${PS_TASKS[@]}" -- \
    /bin/sh -c "$hold" "$BIN/train_ps" --steps "$PART_STEPS" --hidden "$PART_HIDDEN" \
    --log-every 500 --checkpoint-dir "$WORK/ckpt" --save-checkpoint-steps 1000
  await_line "$WORK/worker0.log" "worker:0: global_step [0-9]+ loss" 120 || fail "the job never stepped"
  # worker:0's train_ps: among h1's processes only (other jobs, other
  # tests, may run train_ps tasks named worker:0 on this machine).
  local pid p
  for p in $(ip netns pids cohort-h1); do
    [[ "$(readlink "/proc/$p/exe" 2>/dev/null)" == "$(readlink -f "$BIN/train_ps")" ]] || continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "COHORT_TASK_NAME=worker:0" && pid=$p
  done
  [[ -n "${pid:-}" ]] || fail "no train_ps process of worker:0"
  kill -9 "$pid"
  await_line "$WORK/worker0.log" "worker:0 \(pid $pid on 10\.77\.0\.2\) killed by signal 9 \(SIGKILL\).*restarted alone \(restart 1 of 1\)" 30 ||
    fail "h1's launcher did not restart worker:0 alone"
  await_line "$WORK/worker0.log" "\[worker:0\] held down" 30 || fail "the restarted worker:0 did not start"
  # While worker:0 is down the chief's global step passes its last one by
  # at least one more logged window (--log-every 500).
  local last
  last="$(grep -oE "chief:0: global_step [0-9]+" "$WORK/chief0.log" | tail -1 | grep -oE "[0-9]+$")"
  local deadline=$((SECONDS + 90)) now=0
  until (( now > ${last:-0} )); do
    (( SECONDS < deadline )) || fail "the chief stopped stepping while worker:0 was down (at ${last:-none})"
    sleep 0.2
    now="$(grep -oE "chief:0: global_step [0-9]+" "$WORK/chief0.log" | tail -1 | grep -oE "[0-9]+$")"
  done
  touch "$WORK/go"
  wait_per_host || fail "the job failed after worker:0's restart"
  grep -q "1 task restart(s) in attempt 0:" "$WORK/worker0.log" || fail "no restart summary on h1"
  grep -q "attempt 1" "$WORK"/*.log && fail "the gang was restarted"
  local after
  after="$(sed -n '/held down/,$p' "$WORK/worker0.log" | grep -c "worker:0: global_step")"
  (( after > 0 )) || fail "the restarted worker:0 never trained"
  echo "PASSED: worker:0 killed on h1, restarted alone; the chief stepped from $last to $now meanwhile"
}

# Behaviour 9: an elastic data-parallel job (--elastic 3:4, one worker per
# host, the gradients over the TCP ring across the links) with h2 cut off
# mid-training. Its member is silent, not gone: its connections never
# break. The programs' service misses its heartbeats (10 s); task 0's
# launcher removes worker:2 from the membership, and the three others'
# collective, blocked on it, is cancelled: they go on as generation 1 across
# their links. After the heal h2's launcher finds worker:2 removed, restarts
# it, and it joins again as generation 2; the job ends in its first attempt
# with identical parameters on all four.
ELASTIC_STEPS=24000
test_elastic_partition() {
  bash "$LAB" up 4 >"$WORK/up.log" 2>&1 || fail "lab up 4"
  # The launchers' grace (120 s) outlasts every wait below while h2 is cut
  # off; the member there is lost after 10 s (an elastic job's programs).
  LAUNCH_FLAGS="--elastic 3:4 --max-restarts 1 --heartbeat-timeout 3 --partition-grace 120" \
    start_per_host '{"worker": ["10.77.0.1:2222", "10.77.0.2:2222", "10.77.0.3:2222", "10.77.0.4:2222"]}' \
    worker:0@h0 worker:1@h1 worker:2@h2 worker:3@h3 -- \
    "$BIN/train_data_parallel" --steps "$ELASTIC_STEPS" --log-every 500 --target-loss 0.7
  await_line "$WORK/worker0.log" "\[worker:0\] step [0-9]+/" 120 || fail "the job never stepped"
  grep -q "all-reduced over tcp between 4 tasks" "$WORK/worker0.log" || fail "the group is not over tcp"
  bash "$LAB" partition h2
  await_line "$WORK/worker0.log" "worker:2 \(on 10\.77\.0\.3\) was failed by the coordination service.*elastic: removed from the membership, its launcher stops it; 3 task\(s\) train on \(worker:0, worker:1, worker:3\)" 40 ||
    fail "task 0's launcher did not remove the cut-off worker:2"
  await_line "$WORK/worker0.log" "\[worker:0\] elastic generation 1: worker:0, worker:1, worker:3: 3 task\(s\) go on from step" 30 ||
    fail "the others did not go on without worker:2"
  # Generation 1 trains across its links while h2 is cut off: two more
  # logged windows.
  local from last=0 deadline=$((SECONDS + 60))
  from="$(grep -oE "elastic generation 1: .* go on from step [0-9]+" "$WORK/worker0.log" | grep -oE "[0-9]+$")"
  until (( last >= from + 1000 )); do
    (( SECONDS < deadline )) || fail "generation 1 did not train (from step $from, at ${last})"
    sleep 0.2
    last="$(grep -oE "\[worker:0\] step [0-9]+/" "$WORK/worker0.log" | tail -1 | grep -oE "[0-9]+/" | tr -d /)"
  done
  bash "$LAB" heal h2
  await_line "$WORK/worker0.log" "\[worker:0\] elastic generation 2: worker:0, worker:1, worker:2, worker:3: 4 task\(s\) go on from step" 90 ||
    fail "worker:2 did not join again after the heal"
  wait_per_host || fail "the elastic job did not survive h2's partition"
  grep -q "restarted alone (restart 1 of 1)" "$WORK/worker2.log" || fail "h2's launcher did not restart worker:2"
  grep -q "\[worker:0\] parameters identical across 4 tasks" "$WORK/worker0.log" ||
    fail "no final parameter check across 4 tasks"
  grep -q "attempt 1" "$WORK"/*.log && fail "the gang was restarted"
  echo "PASSED: h2 cut off; the others went on from step $from (at $last when it healed); worker:2 joined again"
}

# Behaviour 7: a 64 MiB reply crossing from h1 to h0 on 200 Mbit/s links,
# cut mid-frame. Both ends give the connection up within the sockets' bound
# (keepalive on the reader, TCP_USER_TIMEOUT on the writer: about 13 s), the
# reader's error names the server's address, and the server is left with no
# open connection.
test_stall() {
  bash "$LAB" up 2 --rate 200mbit >"$WORK/up.log" 2>&1 || fail "lab up 2"
  COHORT_JOB_TOKEN="$(head -c 24 /dev/urandom | base64)"  # the environment, not argv
  export COHORT_JOB_TOKEN
  bash "$LAB" exec h1 -- "$BIN/lab_stall_probe" serve 10.77.0.2 7200 >"$WORK/serve.log" 2>&1 &
  PIDS+=($!)
  await_line "$WORK/serve.log" "^serving" 30 || fail "the probe server did not start"
  local before; before="$(bash "$LAB" bytes h1 | awk '{print $4}')"
  bash "$LAB" exec h0 -- "$BIN/lab_stall_probe" fetch 10.77.0.2:7200 >"$WORK/fetch.log" 2>&1 &
  local fetch=$!
  PIDS+=("$fetch")
  # Mid-frame: once 8 MiB of the reply left h1 (the 64 take ~2.7 s).
  local deadline=$((SECONDS + 30)) sent=0
  while (( sent < (8 << 20) )); do
    (( SECONDS < deadline )) || fail "the reply never started"
    sent=$(( $(bash "$LAB" bytes h1 | awk '{print $4}') - before ))
    sleep 0.05
  done
  bash "$LAB" partition h1
  local cut=$SECONDS
  wait "$fetch" && fail "the fetch succeeded across a cut link: $(cat "$WORK/fetch.log")"
  (( SECONDS - cut <= 40 )) || fail "the fetch took $((SECONDS - cut)) s to give up"
  grep -qE "^error: UNAVAILABLE: .*10\.77\.0\.2:7200" "$WORK/fetch.log" ||
    fail "the fetch's error did not name the server: $(cat "$WORK/fetch.log")"
  await_line "$WORK/serve.log" "^closed 10\.77\.0\.1:[0-9]+: 0 open connection" 40 ||
    fail "the server kept the stalled connection"
  echo "PASSED: a 64 MiB reply cut mid-frame: both ends gave up within $((SECONDS - cut)) s, named, nothing left open"
}

case "$TEST" in
  script) test_script ;;
  collective) test_collective 2 ;;
  collective4) test_collective 4 ;;
  ps) test_ps ;;
  partition_ps) test_partition_ps ;;
  partition_worker) test_partition_worker ;;
  partition_control) test_partition_control ;;
  host_dies) test_host_dies ;;
  stall) test_stall ;;
  restart_task) test_restart_task ;;
  elastic_partition) test_elastic_partition ;;
  *) echo "unknown test $TEST" >&2; exit 2 ;;
esac
