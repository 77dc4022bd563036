#!/usr/bin/env bash
# The concurrency tests under ThreadSanitizer: the hot reload under load (service/
# scoring_server.h), the audit trail's group commit (storage/audit_log.h), the pipeline's
# executor with concurrent requests and its LLM stage's dynamic batcher (pipelines/), and the
# server's claims job manager (service/claims_jobs.h), shard forwarding between replicas, the
# dashboard's reads and REVIEWs waiting for the LLM beside APPROVEs (tests/integration/
# sharding_test.cc, dashboard_test.cc, llm_beside_scoring_test.cc), and the LLM decode
# step's worker pool (llm/cpu_kernels/worker_pool.h). Builds only what those tests need (no
# libtorch code) with -fsanitize=thread in build-tsan/, and fails on any race report. Run by
# scripts/test.sh; needs `scripts/setup.sh --tests`.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
flags="-fsanitize=thread -fno-omit-frame-pointer"
# -O1 -g1: ThreadSanitizer's advice (-O1 or more) at the least compile time, line numbers in reports.
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
# GCC warns about every atomic_thread_fence in Boost.Asio under TSan: the log is kept, and
# shown only when the build fails.
. scripts/ccache-env.sh
if ! cmake --build build-tsan -j "$jobs" --target hot_reload_test storage_test pipelines_test integration_test \
    llm_worker_pool_test \
    >build-tsan/build.log 2>&1; then
  tail -50 build-tsan/build.log
  echo "tsan: the ThreadSanitizer build failed (full log: build-tsan/build.log)" >&2
  exit 1
fi
# halt_on_error: the first race fails the run; second_deadlock_stack: both stacks of a
# lock-order report; tests/tsan.supp: races inside uninstrumented Debian libraries only.
# OMP_NUM_THREADS=1: XGBoost's OpenMP (uninstrumented libgomp) starts no threads.
OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp ${TSAN_OPTIONS:-}" \
  ./build-tsan/tests/hot_reload_test --gtest_filter='HotReloadTest.*'
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp ${TSAN_OPTIONS:-}" \
  ./build-tsan/tests/storage_test --gtest_filter='AuditLog.*:Database.*'
OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp ${TSAN_OPTIONS:-}" \
  ./build-tsan/tests/pipelines_test \
  --gtest_filter='DynamicBatcher.*:ScoringPipelineTest.*:ForensicPipelineTest.*:PipelineGraphTest.*:ClaimsJobTest.*'
OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp ${TSAN_OPTIONS:-}" \
  ./build-tsan/tests/integration_test --gtest_filter='ClaimsJobsTest.*:ShardingTest.*:DashboardTest.*:LlmBesideScoringTest.*:ScoringServerDiskFull.*'
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp ${TSAN_OPTIONS:-}" \
  ./build-tsan/tests/llm_worker_pool_test
echo "tsan: the decode step's worker pool, the hot reload, the audit log, the database's recovery, the executor, the batcher, the job manager, shard forwarding, the dashboard and the LLM beside scoring are clean under ThreadSanitizer"
