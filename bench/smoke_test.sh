#!/bin/sh
# Smoke test of one benchmark suite (ctest, label "bench"):
#   smoke_test.sh [--ratios RATIO[,RATIO...]] METRIC[,METRIC...] COMMAND [ARGS...]
# Runs COMMAND (e.g. `cohort bench coord ...` with its peer at tiny sizes)
# and fails when it exits non-zero, prints an "error" line, prints no
# measurement line (a JSON line with "metric" and "value"), or prints none
# of one of the METRICs. With --ratios it also fails when any ratio line
# (a measurement with unit "x": cohort's median over the peer's) has a
# value that is not a finite positive number, or when one of the RATIOs
# has no line at all: a peer that printed nothing comparable, or a ratio
# of NaN, fails instead of passing as a run without its peer.
set -u
ratios=""
if [ "${1:-}" = "--ratios" ]; then
  ratios=$2
  shift 2
fi
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
if [ -n "$ratios" ]; then
  # JSON parsed for real: grep cannot tell 0.8 from NaN, null or "inf".
  if ! python3 - "$out" "$ratios" <<'EOF'
import json
import math
import sys

path, wanted = sys.argv[1], [r for r in sys.argv[2].split(",") if r]
seen, bad = set(), []
with open(path) as f:
    for text in f:
        text = text.strip()
        if not text.startswith("{"):
            continue
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if not isinstance(line, dict) or line.get("unit") != "x":
            continue
        if "metric" not in line or "error" in line:
            continue
        seen.add(line["metric"])
        value = line.get("value")
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value <= 0):
            bad.append(text)
for text in bad:
    print("smoke: FAIL: a ratio that is not a finite positive number: " +
          text, file=sys.stderr)
missing = [r for r in wanted if r not in seen]
for r in missing:
    print('smoke: FAIL: no "%s" ratio line' % r, file=sys.stderr)
if not bad and not missing:
    print("smoke: ratios OK: %s" % ", ".join(sorted(seen)))
sys.exit(1 if bad or missing else 0)
EOF
  then
    fail=1
  fi
fi
[ "$fail" -eq 0 ] && echo "smoke: OK: $n measurement lines"
exit "$fail"
