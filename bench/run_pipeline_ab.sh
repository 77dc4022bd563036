#!/usr/bin/env bash
# The in-process pipeline benchmark of two builds side by side: A B A B ..., after one
# warm-up run of each, ROUNDS rounds (default 5); prints every run and the medians.
#
#   bench/run_pipeline_ab.sh OLD/score_bench NEW/score_bench [ROUNDS] [FILTER]
#
# FILTER (default 'BM_PipelineScore/wal / tree_ensemble$') picks the benchmark; both binaries read
# var/models/fraud.ubj. Each run: --benchmark_min_time=2, one repetition; the figure is its
# real time per request.
set -euo pipefail
a=$1 b=$2 rounds=${3:-5} filter=${4:-'BM_PipelineScore/wal / tree_ensemble$'}
run() {
  "$1" --model var/models/fraud.ubj --benchmark_filter="$filter" --benchmark_min_time=2 \
    --benchmark_format=json 2>/dev/null |
    python3 -c 'import json,sys; b=json.load(sys.stdin)["benchmarks"][0]; print(b["real_time"], b["time_unit"])'
}
run "$a" >/dev/null
run "$b" >/dev/null
declare -a ra rb
for i in $(seq 1 "$rounds"); do
  ra+=("$(run "$a")")
  rb+=("$(run "$b")")
  echo "round $i: A ${ra[-1]}   B ${rb[-1]}"
done
python3 - "${ra[@]}" -- "${rb[@]}" <<'PY'
import statistics, sys
args = sys.argv[1:]
cut = args.index("--")
def values(xs): return [float(x.split()[0]) for x in xs]
a, b = values(args[:cut]), values(args[cut + 1:])
unit = args[0].split()[1]
ma, mb = statistics.median(a), statistics.median(b)
print(f"median A {ma:.2f} {unit} (min {min(a):.2f}, max {max(a):.2f})")
print(f"median B {mb:.2f} {unit} (min {min(b):.2f}, max {max(b):.2f})")
print(f"B / A = {mb / ma:.3f}")
PY
