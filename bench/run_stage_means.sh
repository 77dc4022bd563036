#!/usr/bin/env bash
# Server-side time per stage under load: starts `txscore serve` on a scratch database with the
# demo model (the pipeline of run_rpc_bench.sh), offers score() at a fixed rate open-loop with
# rpc_loadgen, then reads /metrics and prints each stage's mean, the _sum of
# txscore_stage_duration_seconds over its _count (every request of the run, warm-up included).
#
#   ./bench/run_stage_means.sh [durability] [rate]     e.g.  ./bench/run_stage_means.sh wal 1000
#   env: SECONDS_PER_RUN (default 5), WARMUP (1), CONNECTIONS (4), TXSCORE (./build/txscore)
#
# Needs ./scripts/setup.sh to have run (build and demo model).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bench_lib.sh
durability=${1:-wal}
rate=${2:-1000}
seconds=${SECONDS_PER_RUN:-5}
warmup=${WARMUP:-1}
connections=${CONNECTIONS:-4}
txscore=${TXSCORE:-./build/txscore}

work=$(mktemp -d)
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
write_scoring_pipeline "$work" "$durability"
"$txscore" serve --config "$(config_for "$txscore" "$work/txscore.yaml")" --log-level warn > "$work/serve.out" 2>&1 &
server_pid=$!
for _ in $(seq 100); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*thrift_port=\([0-9]*\).*/\1/p' "$work/serve.out")
admin=$(sed -n 's/.*admin_port=\([0-9]*\).*/\1/p' "$work/serve.out")
[ -n "$port" ] || { echo "bench: $txscore did not start:" >&2; cat "$work/serve.out" >&2; exit 1; }
echo "durability=$durability rate=$rate/s connections=$connections ${seconds}s (+${warmup}s warm-up) on $(nproc) cores"
./build/bench/rpc_loadgen --server "127.0.0.1:$port" --rate "$rate" --seconds "$seconds" --warmup "$warmup" \
  --connections "$connections" --method score
curl -s "127.0.0.1:$admin/metrics" | awk '
  /^txscore_stage_duration_seconds_sum\{/   { match($0, /stage="[^"]*"/); s = substr($0, RSTART + 7, RLENGTH - 8); sum[s] = $NF }
  /^txscore_stage_duration_seconds_count\{/ { match($0, /stage="[^"]*"/); s = substr($0, RSTART + 7, RLENGTH - 8); count[s] = $NF }
  END { for (s in sum) if (count[s] > 0) printf "stage %-10s mean %6.1f us over %d requests\n", s, 1e6 * sum[s] / count[s], count[s] }' \
  | sort
