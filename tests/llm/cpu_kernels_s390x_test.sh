#!/usr/bin/env bash
# The portable CPU kernels on a big-endian CPU: cross-built for s390x (IBM Z) and run under
# qemu-user (`scripts/setup.sh --tests` installs both), against the same plain loops as natively.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
s390x-linux-gnu-g++ -std=c++20 -O2 -static -pthread -I. llm/cpu_kernels/portable.cc llm/cpu_kernels/worker_pool.cc \
  tests/llm/cpu_kernels_selfcheck.cc -o "$work/selfcheck"
# The decode step's own code (norms, RoPE, attention) compiles for s390x; it is not run there
# (it needs a model: tests/llm/cpu_kernels_test.cc runs it natively).
s390x-linux-gnu-g++ -std=c++20 -O2 -Wall -Werror -I. -c llm/cpu_kernels/decode_step.cc -o "$work/decode_step.o"
qemu-s390x-static "$work/selfcheck" | tee "$work/out.txt"
grep -qx "byte order: big-endian" "$work/out.txt"
grep -qx "portable: ok" "$work/out.txt"
grep -qx "worker pool (3 threads): ok" "$work/out.txt"
# Only the portable set is built for s390x (the pool's line besides).
test "$(grep -c ': ok$' "$work/out.txt")" -eq 2
