#!/usr/bin/env bash
# Configures and builds cohort into build/ (binaries in build/bin/).
# Extra arguments go to the configure step, e.g. -DCOHORT_BUILD_TESTS=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build build -j"$(nproc)"
