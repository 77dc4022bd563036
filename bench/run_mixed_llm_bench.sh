#!/usr/bin/env bash
# Do REVIEW decisions waiting for the LLM hold up APPROVE decisions, and do they get their
# findings? Issue 30, item 3's load: `txscore serve` with the demo pipeline (fraud model, REVIEW
# at 0.5 or by a rule on the amount, the LLM stage on llm-tiny with its 1500 ms budget) and
# score() at a fixed offered rate; the load generator reports latency by decision and how many
# REVIEWs came with findings. Alternates, RUNS times, two loads on the same server settings:
#   A = score() alone (the LLM writes findings for the REVIEWs only)
#   B = the same, with STREAMS OpenAI-API streams generating beside it on the same engine
#       (each a loop of chat completions of TOKENS tokens)
# and prints each run and the medians of APPROVE's and REVIEW's p50/p99 and of the REVIEWs'
# share with findings, for A and B. Beside that mixed client, on connections of its own, an
# APPROVE-only client (APPROVE_RATE calls/s, default 100, of other cards and amounts below the
# rule's) measures what the issue measured: an APPROVE-only client's p99 beside REVIEWs (on a
# connection of the mixed client, an APPROVE sent after a REVIEW waits for it: one call at a
# time per connection). A REVIEW waiting for the LLM holds no server thread (it is
# parked: service/rpc_server.h), so neither load should hold up APPROVEs by taking workers.
#
#   ./bench/run_mixed_llm_bench.sh [rate]          e.g.  ./bench/run_mixed_llm_bench.sh 100
#   env: RUNS (default 5), SECONDS_PER_RUN (10), WARMUP (2), CONNECTIONS (16, each client), STREAMS (32), APPROVE_RATE (100),
#        TOKENS (256), WORKERS (8), REVIEW_AMOUNT (400: a rule sends transactions of this amount
#        or more to REVIEW; the load generator's transactions are nearly all genuine and score
#        low, so the model alone would make almost none REVIEW)
#
# Needs ./scripts/setup.sh to have run (build, demo models, llm-tiny) and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-100}
runs=${RUNS:-5}
seconds=${SECONDS_PER_RUN:-10}
warmup=${WARMUP:-2}
connections=${CONNECTIONS:-16}
streams=${STREAMS:-32}
tokens=${TOKENS:-256}
workers=${WORKERS:-8}
review_amount=${REVIEW_AMOUNT:-400}
approve_rate=${APPROVE_RATE:-100}

work=$(mktemp -d)
server_pid=""
stream_pids=()
stop_streams() {
  for pid in "${stream_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${stream_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  stream_pids=()
}
stop_server() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=""
}
trap 'stop_streams; stop_server; rm -rf "$work"' EXIT
(umask 077 && openssl rand -out "$work/card.key" 32)
cat > "$work/pipeline.yaml" <<YAML
pipeline: {name: bench, version: "bench"}
stages:
  - {name: features, kind: features}
  - {name: fraud, kind: xgboost, after: features, model: $PWD/var/models/fraud.ubj}
  - {name: rules, kind: rules, after: features, rules: [{id: BENCH, when: "amount >= $review_amount", decision: REVIEW}]}
  - {name: decision, kind: decision, after: [fraud, rules], review_threshold: 0.5, decline_threshold: 0.9}
  - {name: forensic, kind: llm_findings, after: decision, model: $PWD/var/models/llm-tiny, threads: 1,
     max_new_tokens: 96, budget_ms: 1500, placement: cpu, max_batch: 8}
YAML

# start_server: a fresh database each time, so both loads see the same cards.
start_server() {
  rm -rf "$work/db" "$work/serve.out"
  cat > "$work/txscore.yaml" <<YAML
pipeline: pipeline.yaml
server: {host: 127.0.0.1, port: 0, workers: $workers, plaintext: true}
admin: {host: 127.0.0.1, port: 0, plaintext: true}
storage: {path: db, durability: wal}
security: {card_key_file: card.key}
YAML
  ./build/txscore serve --config "$work/txscore.yaml" --log-level error > "$work/serve.out" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
  port=$(sed -n 's/.*thrift_port=\([0-9]*\).*/\1/p' "$work/serve.out")
  admin=$(sed -n 's/.*admin_port=\([0-9]*\).*/\1/p' "$work/serve.out")
  [ -n "$port" ] || { echo "the server did not start:" >&2; cat "$work/serve.out" >&2; exit 1; }
}

start_streams() {
  local body
  body='{"model": "llm-tiny", "messages": [{"role": "user", "content": "Summarise the case."}], "max_tokens": '$tokens', "stream": true}'
  for _ in $(seq "$streams"); do
    (while :; do curl -sN -m 120 -H 'Content-Type: application/json' -d "$body" \
        "http://127.0.0.1:$admin/v1/chat/completions" > /dev/null || true; done) &
    stream_pids+=($!)
  done
  sleep 1  # the streams are generating when the load starts
}

echo "rate=$rate/s connections=$connections workers=$workers REVIEW from amount $review_amount, streams=$streams x $tokens tokens," \
     "runs=$runs x ${seconds}s (+${warmup}s warm-up); $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for run in $(seq "$runs"); do
  for phase in A B; do
    start_server
    label="score() alone"
    if [ "$phase" = B ]; then
      start_streams
      label="with $streams API streams"
    fi
    echo "$phase ($label)" | tee -a "$work/results.txt"
    # The APPROVE-only client: its own cards, no amount the rule sends to REVIEW, its own
    # connections, so a REVIEW's wait for its findings never sits in front of its calls.
    ./build/bench/rpc_loadgen --server "127.0.0.1:$port" --rate "$approve_rate" --seconds "$seconds" \
      --warmup "$warmup" --connections "$connections" --seed 456 --below-amount "$review_amount" \
      > "$work/approve.txt" 2>&1 &
    approve_pid=$!
    ./build/bench/rpc_loadgen --server "127.0.0.1:$port" --rate "$rate" --seconds "$seconds" --warmup "$warmup" \
      --connections "$connections" --by-decision | tee -a "$work/results.txt" || true
    wait "$approve_pid" || true
    sed 's/^score:/approve-only client:/' "$work/approve.txt" | grep -v 'answered once' | tee -a "$work/results.txt"
    stop_streams
    stop_server
  done
done
echo "--- medians over $runs runs (latency in us) ---"
/usr/bin/python3 - "$work/results.txt" <<'PY'
import re, statistics, sys
phase, runs = None, {}
for line in open(sys.argv[1]):
    m = re.match(r"(A|B) \(", line)
    if m:
        phase = m[1]
        continue
    m = re.match(r"score: offered .* completed (\d+)/s", line)
    if m:
        runs.setdefault((phase, "completed/s"), []).append(int(m[1]))
    m = re.match(r"approve-only client: .* latency us p50 (\d+) p90 \d+ p99 (\d+)", line)
    if m:
        runs.setdefault((phase, "approve-only"), []).append((int(m[1]), int(m[2])))
    m = re.match(r"\s+(APPROVE|REVIEW|DECLINE): (\d+) calls, (\d+) with findings; latency us p50 (\d+) p99 (\d+)", line)
    if m:
        runs.setdefault((phase, m[1]), []).append((int(m[4]), int(m[5]), int(m[3]) / max(1, int(m[2]))))
for p in ("A", "B"):
    print(f"{p}: completed {statistics.median(runs.get((p, 'completed/s'), [0])):.0f}/s", end="")
    v = runs.get((p, "approve-only"), [])
    if v:
        print(f"; approve-only client p50 {statistics.median(x[0] for x in v):.0f} p99 {statistics.median(x[1] for x in v):.0f}"
              f" (p99s {[x[1] for x in v]})", end="")
    for d in ("APPROVE", "REVIEW"):
        v = runs.get((p, d), [])
        if v:
            print(f"; {d} p50 {statistics.median(x[0] for x in v):.0f} p99 {statistics.median(x[1] for x in v):.0f}"
                  f" (p99s {[x[1] for x in v]})", end="")
            if d == "REVIEW":
                print(f", with findings {statistics.median(x[2] for x in v):.0%}"
                      f" ({[f'{x[2]:.0%}' for x in v]})", end="")
    print()
a, b = runs.get(("A", "approve-only"), []), runs.get(("B", "approve-only"), [])
if a and b:
    print(f"approve-only client p99 B / A: {statistics.median(x[1] for x in b) / statistics.median(x[1] for x in a):.2f}")
PY
