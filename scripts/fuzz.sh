#!/usr/bin/env bash
# Runs each libFuzzer target for FUZZ_SECONDS (default 10) from its seed
# corpus in fuzz/corpus/<name>/. The targets live in the ASan+UBSan build
# (build-asan/, see scripts/sanitize.sh, which runs this after the sanitized
# tests); run alone, this configures that build and builds only the fuzzers.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${FUZZ_BUILD_DIR:-build-asan}"
targets=$(cd fuzz/corpus && ls | sed 's/^/fuzz_/')
if [ -z "${FUZZ_BUILD_DIR:-}" ]; then
  bash scripts/setup.sh
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCOHORT_BUILD_TESTS=ON -DCOHORT_SANITIZE=address,undefined \
    -DCOHORT_FUZZ=ON >/dev/null
  # shellcheck disable=SC2086
  cmake --build "$build" -j"$(nproc)" --target $targets
fi
seconds="${FUZZ_SECONDS:-10}"
jobs="${FUZZ_JOBS:-$(nproc)}"

# fuzz_one NAME: one fuzzer for $seconds from a copy of its corpus; its log
# is printed only when it fails. Exit status 1 on a crash, hang or leak.
fuzz_one() {
  local name="$1"
  local fuzzer="$build/bin/fuzz_${name}" work
  work="$(mktemp -d)"
  cp -r "fuzz/corpus/${name}/." "$work/"
  # -timeout: an input running this long is a hang (a failure, like a crash);
  # -artifact_prefix: a failing input is written next to the log.
  if ! "$fuzzer" -max_total_time="$seconds" -timeout=25 \
      -artifact_prefix="$work." -print_final_stats=1 "$work" \
      >"$work.log" 2>&1; then
    tail -40 "$work.log"
    echo "fuzz: fuzz_${name} FAILED (crash input saved next to $work.log)"
    return 1
  fi
  echo "fuzz: fuzz_${name} ran ${seconds}s:" \
    "$(grep -E "stat::number_of_executed_units" "$work.log" || true)"
  rm -rf "$work" "$work.log"
}

# The fuzzers are single-threaded: run $jobs at a time (one per core), and
# fail when any of them failed.
status=0
running=0
for name in $(ls fuzz/corpus); do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
  echo "fuzz: fuzz_${name} for ${seconds}s"
  fuzz_one "$name" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
exit "$status"
