#!/usr/bin/env bash
# The LLM on the CPU against the machine's own limits (docs/performance.md, "The LLM on the CPU"):
# decode steps at batch 1 against the memory-bandwidth floor (weight bytes / streaming read
# rate), prefill against the bfloat16 matrix-multiply peak, all measured in one run of
# bench/llm_bench with the benchmarks' repetitions randomly interleaved, so that the machine's
# drift falls on all of them alike. Prints a Markdown table: medians, spread (min..max) and
# each ratio to its floor or peak, twice: against the median streaming read (and matmul), and
# against the fastest repetition of each. On a shared machine a slow repetition of the
# reference makes the median-based ratio look better than it is; the second is the strict one.
#
#   ./bench/run_llm_floor.sh
#   env: MODEL (default var/models/qwen3-0.5b, made here when missing), THREADS (2),
#        REPS (7), MIN_TIME (1, seconds per repetition)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${MODEL:-var/models/qwen3-0.5b}
threads=${THREADS:-2}
reps=${REPS:-7}
min_time=${MIN_TIME:-1}
if [ ! -f "$model/config.json" ]; then
  ./build/txscore llm make-checkpoint --family qwen3 --size 0.5b --out "$model" > /dev/null
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
filter='BM_MemoryBandwidthFloor|BM_MatmulPeak/bfloat16|BM_DecodeStep/(bfloat16|bfloat16_libtorch|int8)/|BM_DecodeProducts/(bfloat16|int8)/|BM_Prefill/(bfloat16|int8)/'
echo "command: MODEL=$model THREADS=$threads REPS=$reps ./bench/run_llm_floor.sh"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u +%Y-%m-%d)"
./build/bench/llm_bench --model "$model" --threads "$threads" --benchmark_filter="$filter" \
  --benchmark_min_time="$min_time" --benchmark_repetitions="$reps" --benchmark_enable_random_interleaving=true \
  --benchmark_format=json --benchmark_out="$out" --benchmark_out_format=json > /dev/null
/usr/bin/python3 - "$out" "$threads" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type") != "iteration":
        continue
    if b.get("error_occurred"):
        sys.exit(f"{b['name']}: {b.get('error_message')}")
    runs[b["run_name"].replace("/real_time", "")].append(b)
threads = sys.argv[2]

def stat(name, field):
    values = [b[field] for b in runs[name]]
    return statistics.median(values), min(values), max(values), len(values)

bandwidth, bw_lo, bw_hi, n = stat("BM_MemoryBandwidthFloor", "GB_per_s")
peak, pk_lo, pk_hi, _ = stat("BM_MatmulPeak/bfloat16", "GFLOP_per_s")
print(f"\n{threads} threads, medians of {n} interleaved repetitions (min..max); the strict ratio uses the"
      f" fastest streaming read ({bw_hi:.1f} GB/s) and multiply ({pk_hi:.0f} GFLOP/s) of the run\n")
print("| measure | median | spread | floor / peak (median) | ratio | strict ratio | target |")
print("|---|---|---|---|---|---|---|")
print(f"| memory bandwidth (streaming read) | {bandwidth:.1f} GB/s | {bw_lo:.1f}..{bw_hi:.1f} | | | | |")
print(f"| bfloat16 matmul peak (1024^3) | {peak:.0f} GFLOP/s | {pk_lo:.0f}..{pk_hi:.0f} | | | | |")
for name, label, target in [("BM_DecodeStep/bfloat16", "decode step, bfloat16, txscore kernels", "<= 1.3x"),
                            ("BM_DecodeStep/bfloat16_libtorch", "decode step, bfloat16, libtorch ops", ""),
                            ("BM_DecodeStep/int8", "decode step, int8 weights, txscore kernels", "<= 1.3x"),
                            ("BM_DecodeProducts/bfloat16", "  its products alone, bfloat16 (no norms, attention, logits)", ""),
                            ("BM_DecodeProducts/int8", "  its products alone, int8", "")]:
    ms, lo, hi, _ = stat(name, "real_time")
    floor_ms = runs[name][0]["weight_GB"] / bandwidth * 1e3
    strict_ms = runs[name][0]["weight_GB"] / bw_hi * 1e3
    print(f"| {label} | {ms:.1f} ms | {lo:.1f}..{hi:.1f} | {floor_ms:.1f} ms ({runs[name][0]['weight_GB']:.3f} GB) "
          f"| {ms / floor_ms:.2f}x | {ms / strict_ms:.2f}x | {target} |")
for name, label, target in [("BM_Prefill/bfloat16", "prefill 128 tokens, bfloat16", ">= 50 %"),
                            ("BM_Prefill/int8", "prefill 128 tokens, int8 weights", "")]:
    rate, lo, hi, _ = stat(name, "GFLOP_per_s")
    tokens = statistics.median(b["tokens_per_s"] for b in runs[name])
    print(f"| {label} | {rate:.0f} GFLOP/s ({tokens:.0f} tokens/s) | {lo:.0f}..{hi:.0f} | {peak:.0f} GFLOP/s "
          f"| {100 * rate / peak:.0f} % | {100 * rate / pk_hi:.0f} % | {target} |")
PY
