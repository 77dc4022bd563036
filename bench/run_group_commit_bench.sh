#!/usr/bin/env bash
# Group commit under durability sync: one `txscore serve` (demo model, plaintext, sync) scored
# at a fixed offered rate from 1, 4 and 16 connections in turn (1 4 16 1 4 16 ...), RUNS times
# each; for each run the load generator's p50/p99, and from the server's metrics the decisions,
# the database writes that carried them and the WAL syncs (fsyncs) they cost. Prints medians.
#
#   ./bench/run_group_commit_bench.sh [rate]        e.g.  ./bench/run_group_commit_bench.sh 1000
#   env: RUNS (default 5), SECONDS_PER_RUN (5), WARMUP (1), CLIENTS ("1 4 16")
#
# Needs ./scripts/setup.sh to have run (build and demo model).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bench_lib.sh
rate=${1:-1000}
runs=${RUNS:-5}
seconds=${SECONDS_PER_RUN:-5}
warmup=${WARMUP:-1}
read -r -a clients <<< "${CLIENTS:-1 4 16}"

work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
write_scoring_pipeline "$work" sync
./build/txscore serve --config "$work/txscore.yaml" --log-level warn > "$work/serve.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*thrift_port=\([0-9]*\).*/\1/p' "$work/serve.out")
admin=$(sed -n 's/.*admin_port=\([0-9]*\).*/\1/p' "$work/serve.out")
[ -n "$port" ] || { echo "bench: the server did not start:" >&2; cat "$work/serve.out" >&2; exit 1; }

# decisions writes syncs, from the server's counters now.
counters() {
  curl -s "http://127.0.0.1:$admin/metrics" | awk '
    /^txscore_requests_total\{method="score",outcome="ok"\} / { d = $2 }
    /^txscore_audit_writes_total / { w = $2 }
    /^txscore_wal_syncs_total / { s = $2 }
    END { print d + 0, w + 0, s + 0 }'
}

echo "durability=sync rate=${rate}/s runs=$runs x ${seconds}s (+${warmup}s warm-up) on $(nproc) cores," \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); database in $work ($(df -T "$work" | awk 'NR==2 {print $2}'))"
for run in $(seq "$runs"); do
  for n in "${clients[@]}"; do
    read -r d0 w0 s0 < <(counters)
    line=$(./build/bench/rpc_loadgen --server "127.0.0.1:$port" --rate "$rate" --seconds "$seconds" \
             --warmup "$warmup" --connections "$n" --method score || true)
    read -r d1 w1 s1 < <(counters)
    echo "clients $n: $line; decisions $((d1 - d0)) writes $((w1 - w0)) syncs $((s1 - s0))" | tee -a "$work/results.txt"
  done
done
echo "--- medians over $runs runs (latency in us; the counters include the warm-up) ---"
/usr/bin/python3 - "$work/results.txt" <<'PY'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"clients (\d+): .*completed (\d+)/s, errors (\d+); .* p50 (\d+) p90 \d+ p99 (\d+).*"
                 r"decisions (\d+) writes (\d+) syncs (\d+)", line)
    if m:
        n, completed, errors, p50, p99, d, w, s = map(int, m.groups())
        runs.setdefault(n, []).append((p50, p99, completed, errors, d / max(w, 1), s / max(d, 1)))
for n, v in sorted(runs.items()):
    print(f"clients {n:2}: p50 {statistics.median(x[0] for x in v):.0f}  p99 {statistics.median(x[1] for x in v):.0f}  "
          f"completed {statistics.median(x[2] for x in v):.0f}/s  errors {sum(x[3] for x in v)}  "
          f"decisions/write {statistics.median(x[4] for x in v):.2f}  fsyncs/decision {statistics.median(x[5] for x in v):.3f}"
          f"  ({len(v)} runs)")
PY
