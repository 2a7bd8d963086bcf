#!/usr/bin/env bash
# Compiles the whole tree with clang 14, -Wthread-safety -Werror, and the
# libFuzzer targets; then runs each fuzzer briefly (FUZZ_SECONDS, default 20).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCOHORT_THREAD_SAFETY=ON -DCOHORT_FUZZ=ON >/dev/null
cmake --build build-clang -j"$(nproc)"
seconds="${FUZZ_SECONDS:-20}"
shopt -s nullglob
for fuzzer in build-clang/bin/fuzz_*; do
  corpus="fuzz/corpus/$(basename "$fuzzer" | sed 's/^fuzz_//')"
  work="$(mktemp -d)"
  echo "fuzz: $(basename "$fuzzer") for ${seconds}s"
  if [ -d "$corpus" ]; then cp -r "$corpus"/. "$work"/; fi
  "$fuzzer" -max_total_time="$seconds" -print_final_stats=0 "$work" >"$work.log" 2>&1 || {
    tail -40 "$work.log"; echo "fuzz: $(basename "$fuzzer") FAILED"; exit 1; }
  rm -rf "$work" "$work.log"
done
