#!/usr/bin/env bash
# README command 2: set up, then run the whole test suite (CTest + GoogleTest).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cd build
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
