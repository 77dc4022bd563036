#!/usr/bin/env bash
# A good client's latency while strangers flood the Thrift port with TLS handshakes.
#
# Starts `txscore serve` with mutual TLS on a scratch database, then alternates, RUNS times
# each (A B C A B C ...): the load generator's score() at RATE/s over CONNECTIONS persistent
# mutual-TLS connections (the good client; the flood starts in its warm-up, once every one of
# its connections has been answered, its handshakes done) with
#   none     no flood;
#   x25519   FLOOD `openssl s_time -new` loops, each a fresh handshake after the last, offering
#            X25519 and presenting no client certificate (each costs the server a key exchange
#            and a signature, then is refused);
#   ffdhe    FLOOD shell loops of `openssl s_client -groups ffdhe8192`, one hello after another
#            (about 130 ms of server CPU each where a server accepts the group; txscore offers
#            X25519/P-256/P-384 only and refuses them at once). s_time cannot do this one: it
#            stops at the first handshake that fails.
#   spawn    the same shell loops aimed at a port nothing listens on: what the flood's own
#            processes cost the machine without the server doing anything (the reference for
#            ffdhe on a machine this small).
# Prints the median p50/p99 of each, the handshakes the flood made, and the server's
# handshake counters.
#
#   ./bench/run_handshake_flood_bench.sh
#   env: RUNS (default 5), SECONDS_PER_RUN (5), WARMUP (1), RATE (500), CONNECTIONS (32), FLOOD (16)
#
# The flood's clients run on the same machine: on a 2-core VM they take CPU from the server
# whatever it does. Needs ./scripts/setup.sh to have run (build and demo model).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bench_lib.sh
runs=${RUNS:-5}
seconds=${SECONDS_PER_RUN:-5}
warmup=${WARMUP:-1}
rate=${RATE:-500}
connections=${CONNECTIONS:-32}
flood=${FLOOD:-16}

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
TLS=1 write_scoring_pipeline "$work" sync
./build/txscore serve --config "$work/txscore.yaml" --log-level warn > "$work/serve.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*thrift_port=\([0-9]*\).*/\1/p' "$work/serve.out")
admin_port=$(sed -n 's/.*admin_port=\([0-9]*\).*/\1/p' "$work/serve.out")
[ -n "$port" ] || { echo "bench: the server did not start:" >&2; cat "$work/serve.out" >&2; exit 1; }
echo "rate=$rate/s connections=$connections flood=$flood runs=$runs x ${seconds}s (+${warmup}s warm-up) on $(nproc)" \
     "cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"

# FLOOD loops for SECONDS (+ warm-up) offering GROUPS; prints the hellos they sent (ffdhe8192:
# each refused) or the handshakes s_time made (X25519).
run_flood() {
  local groups=$1 target=${2:-$port} total=$((seconds + warmup)) flood_pids=() made=0
  local until=$(($(date +%s) + total))
  for i in $(seq "$flood"); do
    if [ "$groups" != X25519 ]; then
      (n=0
       while [ "$(date +%s)" -lt "$until" ]; do
         openssl s_client -connect "127.0.0.1:$target" -groups "$groups" -CAfile "$work/pki/ca.crt" \
           < /dev/null > /dev/null 2>&1 || true
         n=$((n + 1))
       done
       echo "$n connections in $total real seconds") > "$work/flood-$i.out" 2>&1 &
    else
      # s_time takes no -groups: an OpenSSL configuration file sets the groups it offers.
      OPENSSL_CONF="$work/groups-$groups.cnf" openssl s_time -connect "127.0.0.1:$port" -new -time "$total" \
        -CAfile "$work/pki/ca.crt" > "$work/flood-$i.out" 2>&1 &
    fi
    flood_pids+=($!)
  done
  wait "${flood_pids[@]}" 2>/dev/null || true
  for i in $(seq "$flood"); do
    made=$((made + $(sed -n 's/^\([0-9]*\) connections in .* real seconds.*/\1/p' "$work/flood-$i.out" | head -1 | grep . || echo 0)))
  done
  echo "$made"
}
for groups in X25519; do
  cat > "$work/groups-$groups.cnf" <<CNF
openssl_conf = conf
[conf]
ssl_conf = ssl
[ssl]
system_default = groups
[groups]
Groups = $groups
CNF
done

for run in $(seq "$runs"); do
  for kind in none x25519 ffdhe spawn; do
    flood_out="$work/flood-made-$kind-$run"
    ./build/bench/rpc_loadgen --server "127.0.0.1:$port" --rate "$rate" --seconds "$seconds" --warmup "$warmup" \
      --connections "$connections" --method score --tls-dir "$work/pki/client" > "$work/run.out" 2>&1 &
    loadgen=$!
    for _ in $(seq 200); do grep -q "every connection has been answered once" "$work/run.out" && break; sleep 0.05; done
    case $kind in
      x25519) run_flood X25519 > "$flood_out" & flooder=$! ;;
      ffdhe) run_flood ffdhe8192 > "$flood_out" & flooder=$! ;;
      spawn) run_flood ffdhe8192 1 > "$flood_out" & flooder=$! ;;
      *) flooder= ;;
    esac
    wait "$loadgen" || true
    grep -v -e '^Thrift: ' -e 'every connection has been answered' "$work/run.out" | sed "s/^/$kind /" \
      | tee -a "$work/results.txt"
    if [ -n "$flooder" ]; then
      wait "$flooder"
      echo "$kind flood: $(cat "$flood_out") connections" | tee -a "$work/results.txt"
    fi
  done
done
echo "--- server counters ---"
curl -s --cacert "$work/pki/ca.crt" --cert "$work/pki/admin/tls.crt" --key "$work/pki/admin/tls.key" \
  "https://127.0.0.1:$admin_port/metrics" | grep -E '^txscore_rpc_(handshake|tls)' || true
echo "--- medians over $runs runs (latency in us) ---"
/usr/bin/python3 - "$work/results.txt" <<'PY'
import re, statistics, sys
runs, floods = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) (\w+): offered (\d+)/s .* completed (\d+)/s, errors (\d+); .* p50 (\d+) p90 \d+ p99 (\d+)", line)
    if m:
        runs.setdefault(m[1], []).append((int(m[6]), int(m[7]), int(m[4]), int(m[5])))
    m = re.match(r"(\S+) flood: (\d+) connections", line)
    if m:
        floods.setdefault(m[1], []).append(int(m[2]))
for kind in ("none", "x25519", "ffdhe", "spawn"):
    values = runs.get(kind, [])
    if not values:
        continue
    made = f"  flood connections {statistics.median(floods[kind]):.0f}/run" if kind in floods else ""
    print(f"{kind:7}: p50 {statistics.median(v[0] for v in values):.0f}  p99 {statistics.median(v[1] for v in values):.0f}"
          f"  completed {statistics.median(v[2] for v in values):.0f}/s  errors {sum(v[3] for v in values)}"
          f"  ({len(values)} runs){made}")
PY
