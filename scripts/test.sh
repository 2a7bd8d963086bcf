#!/usr/bin/env bash
# Builds cohort and runs every test (unit, multi-process, conformance).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/check_format.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 300
