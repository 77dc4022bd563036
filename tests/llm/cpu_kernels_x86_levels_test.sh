#!/usr/bin/env bash
# The run-time choice of kernel set on x86 CPUs older than this one: the native selfcheck
# (every set this binary holds, each against plain loops) under qemu-user emulating a CPU
# with AVX2 but no AVX-512 (Haswell) and one with neither (Nehalem). Each must run exactly
# the sets its CPU has, with no illegal instruction from a wider set (which would kill the
# process: qemu raises SIGILL like the hardware).
#   tests/llm/cpu_kernels_x86_levels_test.sh BUILD/tests/cpu_kernels_selfcheck
set -euo pipefail
selfcheck=$1
# An AddressSanitizer build (scripts/asan.sh) cannot run under qemu-user: its shadow memory
# does not fit qemu's guest address space (the process is killed). The native selfcheck runs
# there; this test is for the main build. 77: CTest's skip (SKIP_RETURN_CODE).
# (ldd's output is read whole first: with pipefail, grep -q leaving early would make ldd's
# SIGPIPE fail the condition.)
libraries=$(ldd "$selfcheck")
if grep -q libasan <<<"$libraries"; then
  echo "skipped: $selfcheck is built with AddressSanitizer, which qemu-user cannot run"
  exit 77
fi
check() {
  local cpu=$1 expected=$2 out
  out=$(qemu-x86_64-static -cpu "$cpu" "$selfcheck")
  echo "--- $cpu"
  echo "$out"
  if grep -q "FAIL" <<<"$out"; then echo "a kernel disagrees with the plain loops on $cpu"; exit 1; fi
  local sets
  sets=$(grep ': ok$' <<<"$out" | grep -v '^worker pool' | cut -d: -f1 | xargs)
  if ! grep -q '^worker pool (3 threads): ok$' <<<"$out"; then echo "the worker pool's check did not pass on $cpu"; exit 1; fi
  if [ "$sets" != "$expected" ]; then
    echo "on $cpu the sets run were \"$sets\", expected \"$expected\""
    exit 1
  fi
}
check Haswell-v4 "portable avx2"
check Nehalem "portable"
