#!/usr/bin/env bash
# Installs the Debian 12 packages cohort builds with, when any is missing.
# Idempotent and non-interactive; needs root (or sudo) only when installing.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config clang-14 clang-format-14 libclang-rt-14-dev lld-14
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libeigen3-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
  libssl-dev libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-dev python3-numpy python3-pytest pybind11-dev
  libopenblas0-pthread
  # The benchmark suites' peers (bench/peers: TCPStore and gloo from torch
  # 1.13, run with /usr/bin/python3; one iperf3 stream): the bench smoke
  # tests run every suite with its peer.
  python3-torch
  iperf3
  # The multi-host lab (scripts/lab.sh): ip, tc and bridge.
  iproute2
  # The job page's test in a real browser (tests/ui/page_test.py).
  chromium
  # The etcd control plane's tests (scripts/etcd_local.sh: 3 members).
  etcd-server etcd-client
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
