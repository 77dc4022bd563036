#!/usr/bin/env bash
# Runs libFuzzer on every fuzz target in tests/fuzz/ for FUZZ_SECONDS each (default 60), built
# with clang, AddressSanitizer and UndefinedBehaviorSanitizer in build-fuzz/. Each starts from
# its committed seed corpus (tests/fuzz/corpus/NAME) and keeps what it finds in
# build-fuzz/corpus/NAME (not committed; later runs go on from there). A crash, a leak, undefined
# behaviour, an input slower than 10 s or over 2 GiB of memory fails the run and leaves the input
# in build-fuzz/crashes/. Run by scripts/test.sh; needs `scripts/setup.sh --tests`.
#
#   ./scripts/fuzz.sh                      # every target, 60 s each
#   FUZZ_TOTAL_SECONDS=240 ./scripts/fuzz.sh   # 240 s shared by the targets (30 s each)
#   FUZZ_SECONDS=600 ./scripts/fuzz.sh tokenizer_fuzz
#   ./build-fuzz/tests/tokenizer_fuzz build-fuzz/crashes/tokenizer_fuzz-crash-...   # replay one input
set -euo pipefail
cd "$(dirname "$0")/.."
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(thrift_request_fuzz pipeline_yaml_fuzz safetensors_header_fuzz tokenizer_fuzz
                                     claims_rows_fuzz ubjson_check_fuzz chat_template_fuzz openai_request_fuzz)
# FUZZ_TOTAL_SECONDS, when set, is shared equally by the targets (at least 1 s each); otherwise
# each runs FUZZ_SECONDS.
if [ -n "${FUZZ_TOTAL_SECONDS:-}" ]; then
  seconds=$((FUZZ_TOTAL_SECONDS / ${#targets[@]}))
  [ "$seconds" -ge 1 ] || seconds=1
else
  seconds=${FUZZ_SECONDS:-60}
fi
jobs=$(nproc 2>/dev/null || echo 2)
. scripts/ccache-env.sh
# -fno-sanitize=enum: Thrift stores values off the wire in C++ enums before anything checks them
# (its protocol header's TType in readFieldBegin; the generated code's IDL enums, which
# txscore's handler then validates), and UBSan reports that load on the first mutated byte. So
# this build does not check out-of-range enum loads anywhere, txscore's own code included; the
# rest of UBSan is on.
sanitizers="-fsanitize=address,undefined -fno-sanitize=enum -fno-sanitize-recover=undefined"
# -O1 -g1: libFuzzer's usual optimisation, line numbers in reports, less compile time than -O2 -g.
cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_CXX_COMPILER=clang++ -DTXSCORE_FUZZ=ON \
  -DTXSCORE_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$sanitizers -fsanitize=fuzzer-no-link -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitizers" -DCMAKE_SHARED_LINKER_FLAGS="$sanitizers" >/dev/null
if ! cmake --build build-fuzz -j "$jobs" --target "${targets[@]}" >build-fuzz/build.log 2>&1; then
  tail -40 build-fuzz/build.log
  echo "fuzz: the build failed (full log: build-fuzz/build.log)" >&2
  exit 1
fi
mkdir -p build-fuzz/crashes
summary=()
for target in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$target"
  # Scratch directories the targets make (a database, a model) go here and are removed after.
  rm -rf build-fuzz/tmp && mkdir -p build-fuzz/tmp
  log="build-fuzz/$target.log"
  echo "fuzz: $target for ${seconds}s"
  # detect_leaks: a leak fails the run too. -timeout: an input slower than 10 s is a hang.
  if ! TMPDIR="$PWD/build-fuzz/tmp" ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0" \
      UBSAN_OPTIONS="print_stacktrace=1" \
      ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer \
      "./build-fuzz/tests/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/crashes/$target-" \
      "build-fuzz/corpus/$target" "tests/fuzz/corpus/$target" >"$log" 2>&1; then
    tail -60 "$log"
    echo "fuzz: $target FAILED; the input is in build-fuzz/crashes/ (full log: $log)" >&2
    exit 1
  fi
  rm -rf build-fuzz/tmp
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  corpus=$(find "build-fuzz/corpus/$target" -type f | wc -l)
  summary+=("$target: ${runs:-?} inputs run in ${seconds}s, no crash; corpus now $corpus inputs")
done
printf 'fuzz: %s\n' "${summary[@]}"
