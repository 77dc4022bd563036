#!/usr/bin/env bash
# Claims job throughput: `txscore batch run` over the same generated claims with the LLM stage
# on each DEVICE at each BATCH size (max_batch, which is also the chunk), the configurations
# interleaved run by run (A B C ... A B C ...), and the median claims/s of each.
#
#   ./bench/run_claims_bench.sh                      # cpu and emulated, batch 1 4 16
#   env: RUNS (default 3), CLAIMS (400), WHEN (the LLM stage's condition; default
#        "claims_model.score >= 0.3"), DEVICES ("cpu emulated"), BATCHES ("1 4 16"),
#        MODEL (the checkpoint; default var/models/llm-tiny), DTYPE (the CPU's; float32),
#        THREADS (the stage's threads; 1),
#        VARIANTS (the CPU decoder's, interleaved too; default "default": kernels = txscore's
#                  CPU kernels, libtorch = libtorch's ops (cpu_kernels: false), int8 = int8
#                  weights; the last two on the CPU only),
#        BINARIES (txscore binaries to compare, interleaved too; default "build/txscore", e.g.
#                  "/tmp/txscore.before build/txscore" for a before/after of a change)
#
# Needs ./scripts/setup.sh to have run (build, the claims model, llm-tiny).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/bench_lib.sh
runs=${RUNS:-3}
claims=${CLAIMS:-400}
when=${WHEN:-claims_model.score >= 0.3}
devices=(${DEVICES:-cpu emulated})
batches=(${BATCHES:-1 4 16})
binaries=(${BINARIES:-build/txscore})
model=$(realpath "${MODEL:-var/models/llm-tiny}")
cpu_dtype=${DTYPE:-float32}
threads=${THREADS:-1}
variants=(${VARIANTS:-default})
variant_keys() {
  case $1 in
    default|kernels) echo "" ;;
    libtorch) echo ", cpu_kernels: false" ;;
    int8) echo ", quantization: int8" ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(umask 077 && openssl rand -out "$work/card.key" 32)
./build/txscore data generate --kind claims --format jsonl --claims "$claims" --seed 21 --out "$work/claims.jsonl" 2>/dev/null
echo "$claims claims, LLM stage when \"$when\" ($(basename "$model"), greedy, up to 96 new tokens, $threads threads)," \
     "$runs runs per configuration," \
     "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for run in $(seq "$runs"); do
 for index in "${!binaries[@]}"; do
  binary=${binaries[$index]}
  label=$([ "${#binaries[@]}" -gt 1 ] && echo "$binary " || true)
  for device in "${devices[@]}"; do
   for variant in "${variants[@]}"; do
    [ "$variant" != default ] && [ "$device" != cpu ] && continue
    for batch in "${batches[@]}"; do
      name="$device-$variant-b$batch-r$run-x$index"
      cat > "$work/$name.settings.yaml" <<YAML
pipeline: $name.yaml
storage: {path: db-$name, durability: wal}
security: {card_key_file: card.key}
devices: {calibration_cache: profiles.json, backend_library: $(realpath "$(dirname "$binary")")/libtxscore_emulated_device.so}
YAML
      cat > "$work/$name.yaml" <<YAML
stages:
  - {name: features, kind: claim_features}
  - {name: claims_model, kind: xgboost, after: features, model: $PWD/var/models/claims.ubj}
  - {name: analysis, kind: llm_findings, after: claims_model, when: "$when", model: $model,
     threads: $threads, placement: $device, dtype: $([ "$device" = cpu ] && echo "$cpu_dtype" || echo bfloat16),
     max_batch: $batch$(variant_keys "$variant")}
  - {name: decision, kind: decision, after: [claims_model, analysis]}
YAML
      "$binary" batch run --config "$(config_for "$binary" "$work/$name.settings.yaml")" --input "$work/claims.jsonl" --output "$work/$name.out" \
        --quiet > /dev/null
      /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], \
'%.3f claims/s' % s['claims_per_s'], 'analysed', s['analysed'], 'llm %.2f s' % s['stages']['analysis']['seconds'])" \
        "$work/$name.out.summary.json" "$label$device$([ "$variant" != default ] && echo "-$variant" || true)" "$batch" \
        | tee -a "$work/results.txt"
    done
   done
  done
 done
done
echo "--- medians over $runs runs ---"
/usr/bin/python3 - "$work/results.txt" <<'PY'
import collections, statistics, sys
rates = collections.defaultdict(list)
for line in open(sys.argv[1]):
    *device, batch, rate = line.split()[:line.split().index("claims/s")]
    rates[(" ".join(device), int(batch))].append(float(rate))
for (device, batch), values in sorted(rates.items()):
    print(f"{device:13} batch {batch:3}: {statistics.median(values):7.2f} claims/s  "
          f"(min {min(values):.2f}, max {max(values):.2f}, runs {values})")
PY
