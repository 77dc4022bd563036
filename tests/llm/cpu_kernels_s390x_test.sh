#!/usr/bin/env bash
# The portable CPU kernels on a big-endian CPU: cross-built for s390x (IBM Z) and run under
# qemu-user (scripts/setup.sh installs both), against the same plain loops as natively.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
s390x-linux-gnu-g++ -std=c++20 -O2 -static -I. llm/cpu_kernels/portable.cc tests/llm/cpu_kernels_selfcheck.cc \
  -o "$work/selfcheck"
qemu-s390x-static "$work/selfcheck" | tee "$work/out.txt"
grep -qx "byte order: big-endian" "$work/out.txt"
grep -qx "portable: ok" "$work/out.txt"
# Only the portable set is built for s390x.
test "$(grep -c ': ok$' "$work/out.txt")" -eq 1
