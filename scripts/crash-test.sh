#!/usr/bin/env bash
# The crash test at full length: `txscore serve` killed with SIGKILL at random moments under
# load, KILLS times (default 20) for each durability (sync, wal), every acknowledged decision
# checked after each kill (tests/integration/durability_test.cc; CTest runs 3 kills each).
# Needs scripts/setup.sh. SEED=N replays a run's random moments.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target durability_test txscore >/dev/null
TXSCORE_CRASH_KILLS="${KILLS:-20}" TXSCORE_CRASH_SEED="${SEED:-$(date +%s)}" \
  ./build/tests/durability_test --gtest_filter='Durability/CrashTest.*'
