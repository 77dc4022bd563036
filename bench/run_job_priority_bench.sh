#!/usr/bin/env bash
# Does a claims job slow down score()? Starts `txscore serve` (the demo fraud model, no LLM
# stage on the request path) with a jobs section whose claims pipeline has the LLM stage on the
# CPU, then alternates, RUNS times: A = score() at a fixed offered rate with no job running,
# B = the same while a claims job runs (submitted, or resumed, before the load starts, and
# cancelled after it). Prints each run and the medians of p50/p99 for A and B, and the job's
# progress during the B runs.
#
#   ./bench/run_job_priority_bench.sh [rate] [priority]     e.g.  ./bench/run_job_priority_bench.sh 1000 idle
#   env: RUNS (default 5), SECONDS_PER_RUN (5), WARMUP (1), CONNECTIONS (4), CLAIMS (20000),
#        LLM (1; 0 drops the job's LLM stage, to tell its share of the effect from the rest),
#        SERVE_ENV (extra environment for the server only, e.g. GLIBC_TUNABLES=...),
#        BACKGROUND (what runs during B: job (default) = a claims job on the service;
#                    process = the same claims as `txscore batch run` in another process, in
#                    the idle class; spin = an idle-class shell busy loop, a control that
#                    touches no memory; faults = an idle-class process that maps 64 MiB,
#                    writes a byte per page and unmaps it, over and over, a control for the
#                    kernel's page-fault work)
#
# Needs ./scripts/setup.sh to have run (build, demo models, llm-tiny).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bench_lib.sh
rate=${1:-1000}
priority=${2:-idle}
runs=${RUNS:-5}
seconds=${SECONDS_PER_RUN:-5}
warmup=${WARMUP:-1}
connections=${CONNECTIONS:-4}
claims=${CLAIMS:-20000}
llm=${LLM:-1}
background=${BACKGROUND:-job}

work=$(mktemp -d)
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/in"
./build/txscore data generate --kind claims --format jsonl --claims "$claims" --seed 9 --out "$work/in/claims.jsonl" 2>/dev/null
write_claims_pipeline "$work" "$llm"
cat > "$work/txscore.yaml" <<YAML
pipeline: pipeline.yaml
server: {host: 127.0.0.1, port: 0, workers: 8, plaintext: true}
admin: {host: 127.0.0.1, port: 0, plaintext: true}
storage: {path: db, durability: wal}
security: {card_key_file: card.key}
devices: {calibration_cache: profiles.json}
jobs: {claims_pipeline: claims.yaml, input_dir: in, output_dir: out, priority: $priority}
YAML
cat > "$work/pipeline.yaml" <<YAML
pipeline: {name: bench, version: "bench"}
stages:
  - {name: features, kind: features}
  - {name: fraud, kind: xgboost, after: features, model: $PWD/var/models/fraud.ubj}
  - {name: decision, kind: decision, after: fraud}
YAML
env ${SERVE_ENV:-} ./build/txscore serve --config "$work/txscore.yaml" --log-level warn > "$work/serve.out" &
server_pid=$!
for _ in $(seq 300); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*thrift_port=\([0-9]*\).*/\1/p' "$work/serve.out")
server="127.0.0.1:$port"
job() { ./build/txscore job "$@" --server "$server" --plaintext; }
job_field() { job status --id "$1" | sed -n "s/^job [0-9a-f]* \([A-Z]*\): \([0-9]*\) of.*/\\$2/p"; }
echo "background=$background rate=$rate/s priority=$priority connections=$connections runs=$runs x ${seconds}s (+${warmup}s warm-up)," \
     "job: $claims claims, LLM stage $([ "$llm" = 1 ] && echo on cpu || echo none); $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
id=""
for run in $(seq "$runs"); do
  echo -n "A (nothing) "
  ./build/bench/rpc_loadgen --server "$server" --rate "$rate" --seconds "$seconds" --warmup "$warmup" \
    --connections "$connections" | sed 's/^score/A score/' | tee -a "$work/results.txt"
  case "$background" in
    job)
      id=$(job submit --input claims.jsonl | sed -n 's/^job \([0-9a-f]*\) .*/\1/p')
      for _ in $(seq 100); do [ "$(job_field "$id" 1)" = RUNNING ] && break; sleep 0.1; done
      before=$(job_field "$id" 2) ;;
    process)
      rm -rf "$work/batch-db" "$work/batch.out"*
      chrt --idle 0 ./build/txscore batch run --config "$work/batch.yaml" --input "$work/in/claims.jsonl" \
        --output "$work/batch.out" --quiet > /dev/null 2>&1 &
      background_pid=$!
      sleep 2 ;;
    spin)
      chrt --idle 0 sh -c 'while :; do :; done' &
      background_pid=$!
      sleep 0.5 ;;
    faults)
      chrt --idle 0 /usr/bin/python3 -c 'import mmap
size = 64 << 20
while True:
    region = mmap.mmap(-1, size)
    region[0:size:4096] = bytes(size // 4096)
    region.close()' &
      background_pid=$!
      sleep 0.5 ;;
    *) echo "BACKGROUND must be job, process, spin or faults" >&2; exit 2 ;;
  esac
  echo -n "B ($background) "
  ./build/bench/rpc_loadgen --server "$server" --rate "$rate" --seconds "$seconds" --warmup "$warmup" \
    --connections "$connections" | sed 's/^score/B score/' | tee -a "$work/results.txt"
  if [ "$background" = job ]; then
    state=$(job_field "$id" 1)
    after=$(job_field "$id" 2)
    echo "            job $id $state during the run: rows $before -> $after" | tee -a "$work/jobs.txt"
    [ "$state" = RUNNING ] || echo "            (the job was not running throughout: use more CLAIMS)"
    job cancel --id "$id" > /dev/null
    for _ in $(seq 600); do [[ "$(job_field "$id" 1)" =~ CANCELLED|DONE ]] && break; sleep 0.1; done
  else
    kill -"$([ "$background" = process ] && echo INT || echo TERM)" "$background_pid"; wait "$background_pid" 2>/dev/null || true
    [ "$background" = process ] && echo "            batch process wrote $(wc -l < "$work/batch.out") rows"
  fi
done
echo "--- medians over $runs runs (latency in us) ---"
/usr/bin/python3 - "$work/results.txt" "$background" <<'PY'
import re, statistics, sys
background = sys.argv[2]
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"(A|B) score: offered (\d+)/s .* p50 (\d+) p90 \d+ p99 (\d+)", line)
    if m:
        runs.setdefault(m[1], []).append((int(m[3]), int(m[4])))
for phase, values in sorted(runs.items()):
    print(f"{phase} {'without' if phase == 'A' else 'with   '} {background}: p50 {statistics.median(v[0] for v in values):.0f}  "
          f"p99 {statistics.median(v[1] for v in values):.0f}  ({len(values)} runs; p99s {[v[1] for v in values]})")
if "A" in runs and "B" in runs:
    a = statistics.median(v[1] for v in runs["A"]); b = statistics.median(v[1] for v in runs["B"])
    print(f"p99 with {background} / without: {b / a:.2f}")
PY
