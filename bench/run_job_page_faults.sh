#!/usr/bin/env bash
# Page faults of a claims job: `txscore batch run` over the claims of run_job_priority_bench.sh
# (20000 generated claims, seed 9; the LLM stage on the CPU with llm-tiny, 1 thread,
# max_batch 8), counted with `perf stat -e page-faults` on the running process for a window
# that starts once it has loaded (START_SECONDS after launch) and lasts SECONDS_PER_RUN.
#
#   ./bench/run_job_page_faults.sh
#   env: TXSCORE (./build/txscore; e.g. a build of an older commit), START_SECONDS (2),
#        SECONDS_PER_RUN (5), CLAIMS (20000)
#
# Needs ./scripts/setup.sh to have run (build, demo models, llm-tiny) and perf.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bench_lib.sh
txscore=${TXSCORE:-./build/txscore}
start=${START_SECONDS:-2}
seconds=${SECONDS_PER_RUN:-5}
claims=${CLAIMS:-20000}

work=$(mktemp -d)
job_pid=""
trap '[ -n "$job_pid" ] && kill "$job_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
write_claims_pipeline "$work" 1
./build/txscore data generate --kind claims --format jsonl --claims "$claims" --seed 9 --out "$work/claims.jsonl" 2>/dev/null
"$txscore" batch run --config "$(config_for "$txscore" "$work/batch.yaml")" --input "$work/claims.jsonl" --output "$work/out.jsonl" \
  > "$work/job.out" 2>&1 &
job_pid=$!
sleep "$start"
kill -0 "$job_pid" 2>/dev/null || { echo "bench: the job ended before the window:" >&2; cat "$work/job.out" >&2; exit 1; }
echo "$txscore batch run, $claims claims: page faults from ${start}s after launch, for ${seconds}s, on $(nproc) cores"
rows_before=$(wc -l < "$work/out.jsonl" 2>/dev/null || echo 0)
perf stat -e page-faults -p "$job_pid" -- sleep "$seconds" 2>&1 | grep -E "page-faults|elapsed"
rows_after=$(wc -l < "$work/out.jsonl" 2>/dev/null || echo 0)
echo "rows written during the window: $((rows_after - rows_before)) (of them with LLM findings:" \
     "$(tail -n +$((rows_before + 1)) "$work/out.jsonl" | grep -c '"findings":{' || true))"
