#!/usr/bin/env bash
# Builds the libFuzzer targets (clang 14, ASan) into build-fuzz/ and runs each
# for FUZZ_SECONDS (default 15) from its seed corpus in fuzz/corpus/<name>/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCOHORT_FUZZ=ON -DCOHORT_BUILD_TESTS=OFF >/dev/null
targets=$(cd fuzz/corpus && ls | sed 's/^/fuzz_/')
# shellcheck disable=SC2086
cmake --build build-fuzz -j"$(nproc)" --target $targets
seconds="${FUZZ_SECONDS:-15}"
for name in $(ls fuzz/corpus); do
  fuzzer="build-fuzz/bin/fuzz_${name}"
  work="$(mktemp -d)"
  cp -r "fuzz/corpus/${name}/." "$work/"
  echo "fuzz: fuzz_${name} for ${seconds}s"
  # -timeout: an input running this long is a hang (a failure, like a crash);
  # -artifact_prefix: a failing input is written next to the log.
  if ! "$fuzzer" -max_total_time="$seconds" -timeout=25 \
      -artifact_prefix="$work." -print_final_stats=1 "$work" \
      >"$work.log" 2>&1; then
    tail -40 "$work.log"
    echo "fuzz: fuzz_${name} FAILED (crash input saved next to $work.log)"
    exit 1
  fi
  grep -E "stat::number_of_executed_units" "$work.log" || true
  grep -E "^#[0-9]+ +DONE" "$work.log" || true
  rm -rf "$work" "$work.log"
done
