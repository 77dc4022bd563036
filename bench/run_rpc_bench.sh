#!/usr/bin/env bash
# Loopback RPC benchmark: starts `txscore serve` on a scratch database with the demo model,
# then, for each offered rate, alternates score() with health() (the same Thrift round trip
# without scoring: the reference) RUNS times each, and prints the median p50/p99 of each.
#
#   ./bench/run_rpc_bench.sh [durability] [rates...]     e.g.  ./bench/run_rpc_bench.sh sync 500 1000 2000
#   env: RUNS (default 5), SECONDS_PER_RUN (5), WARMUP (1), CONNECTIONS (32),
#        BINARIES ("txscore=./build/txscore"): NAME=PATH pairs; with two or more, each build
#        serves from its own scratch database and they alternate run by run (A B A B), e.g.
#        BINARIES="old=/tmp/txscore-old new=./build/txscore" to compare two builds side by side;
#        TLS=1: every server serves mutual TLS (bench_lib.sh) and the load generator connects with
#        a client certificate; TRANSPORTS="plain tls" with one binary: one server each, alternating.
#
# Needs ./scripts/setup.sh to have run (build and demo model).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bench_lib.sh
durability=${1:-sync}
shift || true
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(500 1000 2000)
runs=${RUNS:-5}
seconds=${SECONDS_PER_RUN:-5}
warmup=${WARMUP:-1}
connections=${CONNECTIONS:-32}
read -r -a binaries <<< "${BINARIES:-txscore=./build/txscore}"
read -r -a transports <<< "${TRANSPORTS:-}"
if [ ${#transports[@]} -gt 0 ]; then
  # One binary, one server per transport: NAME is the transport (plain or tls).
  first=${binaries[0]#*=}
  binaries=()
  for t in "${transports[@]}"; do binaries+=("$t=$first"); done
fi

work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"' EXIT
names=()
ports=()
client_tls=()
for entry in "${binaries[@]}"; do
  name=${entry%%=*}
  binary=${entry#*=}
  dir="$work/$name"
  mkdir -p "$dir"
  tls=${TLS:-0}
  [ ${#transports[@]} -gt 0 ] && { [ "$name" = tls ] && tls=1 || tls=0; }
  TLS=$tls write_scoring_pipeline "$dir" "$durability"
  if [ "$tls" = 1 ]; then client_tls+=("--tls-dir $dir/pki/client"); else client_tls+=(""); fi
  "$binary" serve --config "$(config_for "$binary" "$dir/txscore.yaml")" --log-level warn > "$dir/serve.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q listening "$dir/serve.out" 2>/dev/null && break; sleep 0.1; done
  port=$(sed -n 's/.*thrift_port=\([0-9]*\).*/\1/p' "$dir/serve.out")
  [ -n "$port" ] || { echo "bench: $binary did not start:" >&2; cat "$dir/serve.out" >&2; exit 1; }
  names+=("$name")
  ports+=("$port")
done
echo "durability=$durability connections=$connections runs=$runs x ${seconds}s (+${warmup}s warm-up) on $(nproc) cores," \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); builds: ${binaries[*]}"
for rate in "${rates[@]}"; do
  for run in $(seq "$runs"); do
    for i in "${!names[@]}"; do
      for method in health score; do
        # A run with errors (e.g. connections a server never serves) still reports; keep going.
        ./build/bench/rpc_loadgen --server "127.0.0.1:${ports[$i]}" --rate "$rate" --seconds "$seconds" \
          --warmup "$warmup" --connections "$connections" --method "$method" ${client_tls[$i]} | sed "s/^/${names[$i]} /" \
          | tee -a "$work/results.txt" || true
      done
    done
  done
done
echo "--- medians over $runs runs (latency in us) ---"
/usr/bin/python3 - "$work/results.txt" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) (\w+): offered (\d+)/s .* completed (\d+)/s, errors (\d+); .* p50 (\d+) p90 \d+ p99 (\d+)", line)
    if m:
        runs.setdefault((int(m[3]), m[1], m[2]), []).append((int(m[6]), int(m[7]), int(m[4]), int(m[5])))
for (rate, build, method), values in sorted(runs.items()):
    print(f"rate {rate}/s {build:8} {method:6}: p50 {statistics.median(v[0] for v in values):.0f}  "
          f"p99 {statistics.median(v[1] for v in values):.0f}  completed {statistics.median(v[2] for v in values):.0f}/s  "
          f"errors {sum(v[3] for v in values)}  ({len(values)} runs)")
PY
