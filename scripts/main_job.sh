#!/usr/bin/env bash
# The main job. Until the training job exists: build, then resolve an example
# TF_CONFIG cluster with `cohort resolve`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh -DCOHORT_BUILD_TESTS=OFF
TF_CONFIG="$(cat examples/tf_config_example.json)" build/bin/cohort resolve --resolver tf_config
