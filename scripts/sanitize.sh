#!/usr/bin/env bash
# Builds cohort under the sanitizers and runs the tests there (issue 9):
#   asan  build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer, every test,
#                      then every fuzzer (scripts/fuzz.sh) from the same build
#   tsan  build-tsan/  ThreadSanitizer, the threaded areas only (TSAN_AREAS,
#                      default "rpc coord barrier launch collective runtime
#                      distribute training":
#                      their unit tests and multi-process tests, and the
#                      binaries those start)
#   all   both (the default)
# cmake/CohortSanitize.cmake holds the flags and the runtime options; a test's
# area is the directory that holds it (see cohort_test in CohortHelpers.cmake).
# Every sanitizer report, also one from a child process whose test did not
# notice, is written under <build>/sanitizer-reports/ and printed at the end;
# any report fails the run. Suppressions (third-party code only) live in
# scripts/{tsan,ubsan,lsan}.supp.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-all}"
case "$mode" in
  asan | tsan | all) ;;
  *)
    echo "usage: $0 [asan|tsan|all]" >&2
    exit 2
    ;;
esac
TSAN_AREAS="${TSAN_AREAS:-rpc coord barrier launch collective runtime distribute training}"
jobs="$(nproc)"

bash scripts/setup.sh

# configure DIR SANITIZERS [cmake args...]
configure() {
  local dir="$1" sanitizers="$2"
  shift 2
  # RelWithDebInfo keeps NDEBUG as in the tested release build; the sanitizer
  # module replaces its -O2 -g with -O1 -gline-tables-only.
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCOHORT_BUILD_TESTS=ON -DCOHORT_SANITIZE="$sanitizers" "$@" >/dev/null
}

# run_tests DIR [ctest args...]: ctest with every sanitizer report going to a
# file (log_exe_name: the file names the binary), then those files printed.
# All runtimes get the same log_path: under TSan the UBSan options are parsed
# too and the last log_path read wins.
run_tests() {
  local dir="$1"
  shift
  local reports="$PWD/$dir/sanitizer-reports"
  rm -rf "$reports"
  mkdir -p "$reports"
  local status=0
  (
    local log="log_path=$reports/report:log_exe_name=1"
    export ASAN_OPTIONS="$log" UBSAN_OPTIONS="$log" TSAN_OPTIONS="$log" LSAN_OPTIONS="$log"
    cd "$dir"
    # Per-test timeouts are the tests' own times COHORT_TEST_TIMEOUT_SCALE;
    # --timeout covers tests that set none.
    ctest --output-on-failure -j"$jobs" --timeout 900 "$@"
  ) || status=$?
  local files
  files="$(find "$reports" -type f | sort)"
  if [ -n "$files" ]; then
    for f in $files; do
      echo "==== sanitizer report ${f#"$PWD"/}"
      cat "$f"
    done
    echo "sanitize: $(echo "$files" | wc -l) sanitizer report file(s) in $dir (above)"
    status=1
  fi
  return "$status"
}

# Abseil's synchronization code, compiled with TSan into the TSan build (see
# CohortSanitize.cmake): the source of exactly the installed libabsl-dev,
# fetched with apt-get source into build-tsan/_deps/ with a private source
# list, so the machine's apt configuration is left as it is.
fetch_abseil_source() {
  local deps="$PWD/build-tsan/_deps"
  local src_pkg version
  src_pkg="$(dpkg-query -W -f='${source:Package}' libabsl-dev)" || return
  version="$(dpkg-query -W -f='${source:Version}' libabsl-dev)" || return
  local stamp="$deps/abseil-source.version"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$src_pkg=$version" ]; then
    return
  fi
  rm -rf "$deps/apt" "$deps/abseil"
  mkdir -p "$deps/apt/sources" "$deps/apt/lists/partial" "$deps/apt/cache" "$deps/abseil"
  # The Debian release the machine installs from, from its own source list.
  local suite
  suite="$(. /etc/os-release && echo "$VERSION_CODENAME")"
  cat >"$deps/apt/sources/debian-src.sources" <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  local apt_opts=(
    -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$deps/apt/sources"
    -o "Dir::State::Lists=$deps/apt/lists" -o "Dir::Cache=$deps/apt/cache"
    -o "APT::Sandbox::User=root" -qq
  )
  apt-get "${apt_opts[@]}" update || return
  (cd "$deps/abseil" && apt-get "${apt_opts[@]}" source "$src_pkg=$version" >/dev/null) ||
    return
  rm -rf "$deps/apt"
  echo "$src_pkg=$version" >"$stamp"
}

# phase NAME COMMAND...: runs and times one step. (The callers run under
# `||`, where set -e does not apply, so every status is passed on by hand.)
phase() {
  local name="$1" start=$SECONDS rc=0
  shift
  echo "sanitize: $name"
  "$@" || rc=$?
  echo "sanitize: $name took $((SECONDS - start)) s (exit $rc)"
  return "$rc"
}

run_asan() {
  # One build for the sanitized test suite and the fuzzers (COHORT_FUZZ adds
  # libFuzzer's coverage instrumentation and the fuzz_* targets).
  phase "asan configure" configure build-asan address,undefined -DCOHORT_FUZZ=ON || return
  phase "asan build" cmake --build build-asan -j"$jobs" || return
  phase "asan test" run_tests build-asan || return
  phase "fuzz" env FUZZ_BUILD_DIR=build-asan bash scripts/fuzz.sh
}

run_tsan() {
  phase "tsan fetch abseil source" fetch_abseil_source || return
  local absl
  absl="$(find "$PWD/build-tsan/_deps/abseil" -mindepth 1 -maxdepth 1 -type d | head -1)"
  # The cluster resolvers and the benchmarks are linked into the `cohort`
  # binary that the multi-process tests start, but no TSan test runs them
  # across threads: they are compiled without TSan, which saves build time.
  # The graph engine is instrumented: the runtime's steps run its executor
  # on several threads, and TSan reports false races wherever an
  # uninstrumented reference count or atomic orders what instrumented code
  # does (a tensor buffer freed by one thread after another sent it).
  phase "tsan configure" configure build-tsan thread \
    -DCOHORT_TSAN_ABSEIL_SOURCE_DIR="$absl" \
    -DCOHORT_SANITIZE_EXCLUDE="src/cohort/cluster;bench" || return
  # Only the test binaries of the threaded areas (and what they start).
  local targets=() regex=() area
  for area in $TSAN_AREAS; do
    if ninja -C build-tsan -t query "cohort_tests_$area" >/dev/null 2>&1; then
      targets+=("cohort_tests_$area")
      regex+=("$area")
    fi
  done
  if [ ${#targets[@]} -eq 0 ]; then
    echo "sanitize: no tests in areas: $TSAN_AREAS" >&2
    return 1
  fi
  phase "tsan build (${targets[*]})" \
    cmake --build build-tsan -j"$jobs" --target "${targets[@]}" || return
  local labels
  labels="$(
    IFS='|'
    echo "${regex[*]}"
  )"
  phase "tsan test" run_tests build-tsan -L "^area:($labels)\$"
}

status=0
if [ "$mode" = asan ] || [ "$mode" = all ]; then
  run_asan || status=1
fi
if [ "$mode" = tsan ] || [ "$mode" = all ]; then
  run_tsan || status=1
fi
exit "$status"
