#!/usr/bin/env bash
# Configures and builds cohort into build/ (binaries in build/bin/).
# The build uses clang 14 with -Wthread-safety -Werror=thread-safety, so every
# build checks the lock annotations. Extra arguments go to the configure step,
# e.g. -DCOHORT_BUILD_TESTS=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCOHORT_THREAD_SAFETY=ON -DCOHORT_BUILD_TESTS=ON "$@" >/dev/null
# COHORT_BUILD_TARGETS (space-separated) builds only those targets.
# shellcheck disable=SC2086
cmake --build build -j"$(nproc)" ${COHORT_BUILD_TARGETS:+--target $COHORT_BUILD_TARGETS}
