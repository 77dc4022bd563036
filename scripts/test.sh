#!/usr/bin/env bash
# README command 2: set up, then run the test suite (CTest + GoogleTest). docs/testing.md says
# what each phase checks and how long it takes.
#
#   ./scripts/test.sh                    # everything CI runs: the whole suite, then one sanitizer slice
#   ./scripts/test.sh --quick            # the unit tests only (a few minutes after the build)
#   ./scripts/test.sh --slice tsan       # the whole suite, then the slice named (or: all, none)
#   ./scripts/test.sh -R Tls             # arguments it does not know go to ctest
#
# The sanitizer slices (AddressSanitizer + UndefinedBehaviorSanitizer on four parts of the
# suite, ThreadSanitizer on the concurrency tests, libFuzzer on every fuzz target) take turns:
# a run takes the slice at (number of commits in HEAD) modulo 6, so six consecutive commits
# cover them all and each commit's slice is known in advance (TXSCORE_SANITIZER_SLICE or
# --slice chooses another).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
slice=${TXSCORE_SANITIZER_SLICE:-}
ctest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --slice)
      [ $# -ge 2 ] || { echo "test: --slice needs a name (asan-server, asan-llm, asan-end-to-end-1, asan-end-to-end-2, tsan, fuzz, all, none)" >&2; exit 2; }
      slice=$2
      shift
      ;;
    *) ctest_args+=("$@"); break ;;
  esac
  shift
done
slices=(asan-server asan-llm asan-end-to-end-1 asan-end-to-end-2 tsan fuzz)
if [ -z "$slice" ]; then
  if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = true ]; then
    # A shallow clone counts the same few commits every time: the commit's hash picks instead.
    head=$(git rev-parse --short=7 HEAD)
    slice=${slices[$((16#$head % ${#slices[@]}))]}
    echo "test: commit $head (a shallow clone) runs the sanitizer slice $slice (picked by its hash: ${slices[*]})"
  else
    commits=$(git rev-list --count HEAD 2>/dev/null || echo 0)
    slice=${slices[$((commits % ${#slices[@]}))]}
    echo "test: commit $commits of this branch runs the sanitizer slice $slice (slices rotate by commit count: ${slices[*]})"
  fi
fi
case " ${slices[*]} all none " in
  *" $slice "*) ;;
  *) echo "test: unknown sanitizer slice '$slice' (asan-server, asan-llm, asan-end-to-end-1, asan-end-to-end-2, tsan, fuzz, all, none)" >&2; exit 2 ;;
esac

# Each phase's wall time, printed at the end (and after a failure, up to the phase that failed).
phase_names=()
phase_seconds=()
phase_start=0
phase() {
  phase_names+=("$1")
  phase_start=$SECONDS
  echo "test: === $1 ==="
}
phase_done() { phase_seconds+=($((SECONDS - phase_start))); }
summary() {
  local i
  for i in "${!phase_seconds[@]}"; do
    printf 'test: %-34s %4d min %02d s\n' "${phase_names[$i]}" $((phase_seconds[i] / 60)) $((phase_seconds[i] % 60))
  done
}
trap summary EXIT

phase "set-up and build (scripts/setup.sh)"
./scripts/setup.sh --tests
phase_done
# The checked-in .clang-format holds for every C++ file (clang-format as Debian ships it).
phase "format check"
./scripts/check_format.sh
phase_done

if [ "$quick" -eq 1 ]; then
  phase "unit tests (ctest -L unit)"
  (cd build && ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" -L '^unit$' "${ctest_args[@]}")
  phase_done
  echo "test: the unit tests passed; ./scripts/test.sh runs the whole suite and a sanitizer slice (what CI runs)"
  exit 0
fi

phase "the whole suite (ctest)"
(cd build && ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "${ctest_args[@]}")
phase_done

run_slice() {
  case "$1" in
    asan-server | asan-llm | asan-end-to-end-1 | asan-end-to-end-2)
      phase "sanitizer slice $1 (scripts/asan.sh)"
      ./scripts/asan.sh "${1#asan-}" "${ctest_args[@]}"
      ;;
    tsan)
      phase "sanitizer slice tsan (scripts/tsan.sh)"
      ./scripts/tsan.sh
      ;;
    fuzz)
      # libFuzzer on every target, 240 s shared (FUZZ_TOTAL_SECONDS), with ASan and UBSan.
      phase "sanitizer slice fuzz (scripts/fuzz.sh)"
      FUZZ_TOTAL_SECONDS="${FUZZ_TOTAL_SECONDS:-240}" ./scripts/fuzz.sh
      ;;
  esac
  phase_done
}
case "$slice" in
  none) ;;
  all) for one in "${slices[@]}"; do run_slice "$one"; done ;;
  *) run_slice "$slice" ;;
esac
echo "test: passed (sanitizer slice: $slice)"
