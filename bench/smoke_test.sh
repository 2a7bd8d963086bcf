#!/bin/sh
# Smoke test of one benchmark suite (ctest, label "bench"):
#   smoke_test.sh METRIC[,METRIC...] COMMAND [ARGS...]
# Runs COMMAND (e.g. `cohort bench coord --no-peer ...`) and fails when it
# exits non-zero, prints an "error" line, prints no measurement line (a JSON
# line with "metric" and "value"), or prints none of one of the METRICs.
set -u
metrics=$1
shift
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
"$@" >"$out"
rc=$?
cat "$out"
fail=0
if [ "$rc" -ne 0 ]; then
  echo "smoke: FAIL: '$*' exited with status $rc" >&2
  fail=1
fi
if grep -q '"error"' "$out"; then
  echo "smoke: FAIL: the suite printed an error line" >&2
  fail=1
fi
n=$(grep '"metric"' "$out" | grep '"value"' | grep -vc '"error"')
if [ "$n" -eq 0 ]; then
  echo "smoke: FAIL: no measurement line" >&2
  fail=1
fi
for m in $(echo "$metrics" | tr ',' ' '); do
  if ! grep -q "\"metric\": *\"$m\"" "$out"; then
    echo "smoke: FAIL: no \"$m\" measurement" >&2
    fail=1
  fi
done
[ "$fail" -eq 0 ] && echo "smoke: OK: $n measurement lines"
exit "$fail"
