#!/usr/bin/env bash
# Builds cohort under the sanitizers and runs the tests there (issue 9):
#   asan  build-asan/  AddressSanitizer + UndefinedBehaviorSanitizer, every test,
#                      then every fuzzer (scripts/fuzz.sh) from the same build
#   tsan  build-tsan/  ThreadSanitizer, the threaded areas only (TSAN_AREAS,
#                      default: every area in tsan_areas below): their unit
#                      tests and multi-process tests, and the binaries those
#                      start. An area named that has no tests in the build
#                      fails the run, and so does an area of the build that
#                      is neither in tsan_areas nor in tsan_skipped_areas
#                      (with its reason): no area drops out unnoticed.
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
# The threaded areas: each runs threads of its own in the code under test
# (an executor's or a service's threads, timers, loop threads), or its tests
# start binaries that do. `examples` holds distribute_context (a stopper
# thread) and train_data_parallel (multi-threaded sessions); `train` is the
# parameter-server job (tests/train/ps_job_test: train_ps and `cohort`
# processes). `graph` is the executor, rendezvous and cancellation. The job
# page's threads (its server, the metrics sampler) run under TSan in `rpc`
# (HttpGetServerTest) and `launch` (JobPageTest); tests/ui drives binaries
# with Chromium and runs in the plain and ASan builds.
tsan_areas="base rpc coord barrier launch collective graph runtime distribute training examples train"
# The areas left out, each with why: TSan would find nothing there that the
# areas above do not already run, and each would cost build time.
declare -A tsan_skipped_areas=(
  [cluster]="the resolvers run on the caller's thread (only their test fakes serve on threads); compiled without TSan, see COHORT_SANITIZE_EXCLUDE"
  [cli]="one-shot \`cohort resolve\` processes on the cluster resolvers"
  [bench]="benchmarks: their smoke tests time code that the areas above test; compiled without TSan"
  [python]="the extension loads into the system's uninstrumented python3, which cannot host the TSan runtime"
)
TSAN_AREAS="${TSAN_AREAS:-$tsan_areas}"
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

# The areas of the TSan build: the cohort_tests_<area> targets that
# cohort_test() (cmake/CohortHelpers.cmake) makes, one per area with tests.
build_areas() {
  ninja -C build-tsan -t targets all |
    sed -n 's/^cohort_tests_\([A-Za-z0-9_]*\): phony$/\1/p' | sort -u
}

# Fails when an area asked for has no tests in the build (a test dir renamed,
# or its tests behind an if() that was false: it would otherwise run nothing
# and pass), or when the build has an area that is neither TSan-tested nor
# left out with a reason (a new threaded area).
check_tsan_areas() {
  local areas area rc=0
  areas="$(build_areas)" || return
  for area in $TSAN_AREAS; do
    if ! grep -qx "$area" <<<"$areas"; then
      echo "sanitize: TSan area '$area' has no tests in build-tsan (no target" \
        "cohort_tests_$area): check that src/cohort/$area or tests/$area still" \
        "exists and that its cohort_test() calls are not skipped by an if()" \
        "in its CMakeLists.txt" >&2
      rc=1
    fi
  done
  for area in $areas; do
    if ! grep -qwx "$area" <<<"${tsan_areas// /$'\n'}" &&
      [ -z "${tsan_skipped_areas[$area]:-}" ]; then
      echo "sanitize: area '$area' has tests but is neither in tsan_areas nor" \
        "in tsan_skipped_areas in scripts/sanitize.sh: add it to one (a" \
        "skipped area needs its reason)" >&2
      rc=1
    fi
  done
  return "$rc"
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
  phase "tsan areas" check_tsan_areas || return
  # Only the test binaries of the threaded areas (and what they start).
  local targets=() regex=() area
  for area in $TSAN_AREAS; do
    targets+=("cohort_tests_$area")
    regex+=("$area")
  done
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
