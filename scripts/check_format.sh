#!/usr/bin/env bash
# Exit 1, naming the files, when a tracked C++ file differs from what clang-format (with the
# checked-in .clang-format) makes of it. Fix with: clang-format -i FILE...
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=()
while IFS= read -r file; do
  clang-format --dry-run --Werror "$file" >/dev/null 2>&1 || unformatted+=("$file")
done < <(git ls-files '*.cc' '*.h')
if [ ${#unformatted[@]} -gt 0 ]; then
  echo "check_format: ${#unformatted[@]} file(s) differ from clang-format's layout; run: clang-format -i ${unformatted[*]}" >&2
  exit 1
fi
echo "check_format: every C++ file follows .clang-format"
