#!/usr/bin/env bash
# Fails when a tracked C++ file differs from the repository's .clang-format
# (the .clang-format is the style: docs/architecture.md). Fix with:
#   git ls-files '*.cc' '*.h' | xargs clang-format-14 -i
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mapfile -t files < <(git ls-files '*.cc' '*.h' 2>/dev/null || find src tools tests examples bench fuzz -name '*.cc' -o -name '*.h')
if ! clang-format-14 --dry-run --Werror "${files[@]}" 2>/tmp/cohort-format.$$; then
  grep -E "^[^ ].*: (error|warning):" /tmp/cohort-format.$$ | cut -d: -f1 | sort -u |
    sed 's/^/format: differs from .clang-format: /'
  rm -f /tmp/cohort-format.$$
  echo "format: run  git ls-files '*.cc' '*.h' | xargs clang-format-14 -i" >&2
  exit 1
fi
rm -f /tmp/cohort-format.$$
echo "format: ${#files[@]} files match .clang-format"
