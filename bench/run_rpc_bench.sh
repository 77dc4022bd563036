#!/usr/bin/env bash
# Loopback RPC benchmark: starts `txscore serve` on a scratch database with the demo model,
# then, for each offered rate, alternates score() with health() (the same Thrift round trip
# without scoring: the reference) RUNS times each, and prints the median p50/p99 of each.
#
#   ./bench/run_rpc_bench.sh [durability] [rates...]     e.g.  ./bench/run_rpc_bench.sh sync 500 1000 2000
#   env: RUNS (default 5), SECONDS_PER_RUN (5), WARMUP (1), CONNECTIONS (4)
#
# Needs ./scripts/setup.sh to have run (build and demo model).
set -euo pipefail
cd "$(dirname "$0")/.."
durability=${1:-sync}
shift || true
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(500 1000 2000)
runs=${RUNS:-5}
seconds=${SECONDS_PER_RUN:-5}
warmup=${WARMUP:-1}
connections=${CONNECTIONS:-4}

work=$(mktemp -d)
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
(umask 077 && openssl rand -out "$work/card.key" 32)
cat > "$work/pipeline.yaml" <<YAML
pipeline: {name: bench, version: "bench"}
server: {host: 127.0.0.1, port: 0, workers: 8}
admin: {host: 127.0.0.1, port: 0}
storage: {path: db, durability: $durability}
security: {card_key_file: card.key}
stages:
  - {name: features, kind: features}
  - {name: fraud, kind: xgboost, after: features, model: $PWD/var/models/fraud.ubj}
  - {name: decision, kind: decision, after: fraud}
YAML
./build/txscore serve --config "$work/pipeline.yaml" --log-level warn > "$work/serve.out" &
server_pid=$!
for _ in $(seq 100); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*thrift_port=\([0-9]*\).*/\1/p' "$work/serve.out")
echo "durability=$durability connections=$connections runs=$runs x ${seconds}s (+${warmup}s warm-up) on $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for rate in "${rates[@]}"; do
  for run in $(seq "$runs"); do
    for method in health score; do
      ./build/bench/rpc_loadgen --server "127.0.0.1:$port" --rate "$rate" --seconds "$seconds" --warmup "$warmup" \
        --connections "$connections" --method "$method" | tee -a "$work/results.txt"
    done
  done
done
echo "--- medians over $runs runs (latency in us) ---"
/usr/bin/python3 - "$work/results.txt" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+): offered (\d+)/s .* p50 (\d+) p90 \d+ p99 (\d+)", line)
    if m:
        runs.setdefault((int(m[2]), m[1]), []).append((int(m[3]), int(m[4])))
for (rate, method), values in sorted(runs.items()):
    print(f"rate {rate}/s {method:6}: p50 {statistics.median(v[0] for v in values):.0f}  "
          f"p99 {statistics.median(v[1] for v in values):.0f}  ({len(values)} runs)")
PY
