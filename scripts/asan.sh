#!/usr/bin/env bash
# The CTest suite again, built with AddressSanitizer and UndefinedBehaviorSanitizer (GCC, the
# compiler of the main build) in build-asan/, one slice at a time: each slice builds only what
# its tests need. Any heap or stack overflow, use-after-free, leak, or undefined behaviour
# (signed overflow, a misaligned access, an out-of-range shift, a bad vptr) stops the process
# that hit it, so its test fails. Run by scripts/test.sh (one slice per run, in rotation:
# docs/testing.md); needs `scripts/setup.sh --tests`. Arguments after the slice go to ctest:
#
#   ./scripts/asan.sh all                         # every slice, one after the other
#   ./scripts/asan.sh server                      # common, fraud, storage, pipelines, service
#   ./scripts/asan.sh llm                         # llm, accelerator, the CPU kernels (libtorch)
#   ./scripts/asan.sh end-to-end                  # the txscore executable and the tests that run it
#   ./scripts/asan.sh end-to-end-1                # the first half of those tests (same build), or
#   ./scripts/asan.sh end-to-end-2                # the other half: scripts/test.sh takes them in turn
#   ./scripts/asan.sh server -R 'RpcServer|Tls'   # a part of a slice
#
# What is not checked here: code inside Debian's libraries (libtorch, RocksDB, Thrift, XGBoost,
# OpenSSL) is not instrumented, so only txscore's own accesses are checked (LeakSanitizer
# still sees every allocation). Two tests skip themselves here, saying why: one checks glibc
# malloc's behaviour (ASan replaces malloc), one scans all writable memory for a card number
# (ASan's shadow memory maps terabytes); and the tests' peak-memory bounds are not checked
# (freed memory waits in ASan's quarantine). Two end-to-end tests are left out: the s390x
# kernels run under qemu from a cross build of their own, and qemu cannot host ASan's shadow
# memory for the x86 levels test; neither runs txscore's instrumented build.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each slice: the targets it builds, and the labels of the tests it runs (tests/CMakeLists.txt
# labels each test with its binary's name, and the scripts that drive txscore end_to_end).
slice_targets() {
  case "$1" in
    end-to-end-1 | end-to-end-2) slice_targets end-to-end ;;
    server)
      echo common_test fraud_test storage_test pipelines_test service_test integration_test tls_security_level_test \
        hot_reload_test remote_llm_test thrift_request_fuzz_replay pipeline_yaml_fuzz_replay claims_rows_fuzz_replay \
        ubjson_check_fuzz_replay openai_request_fuzz_replay
      ;;
    llm)
      echo llm_test llm_decoder_test llm_worker_pool_test llm_cpu_kernels_test accelerator_test accelerator_torch_test \
        backend_library_test cpu_kernels_selfcheck safetensors_header_fuzz_replay tokenizer_fuzz_replay \
        chat_template_fuzz_replay
      ;;
    end-to-end)
      echo txscore txscore_python_bindings txscore_emulated_device txscore_test_undescribed_backend openai_api_test prepare_once_test \
        durability_test backend_plan_test
      ;;
  esac
}
slice_label_regex() {
  local labels
  case "$1" in
    end-to-end | end-to-end-1 | end-to-end-2)
      labels="openai_api_test prepare_once_test durability_test backend_plan_test end_to_end"
      ;;
    *) labels=$(slice_targets "$1") ;;
  esac
  echo "^(${labels// /|})\$"
}
# The end-to-end tests take 17 minutes under the sanitizers on 2 cores, more than any other
# slice's: scripts/test.sh runs them in two halves of about the same time (figures from
# build-asan/Testing/Temporary/CTestCostData.txt, 2026-12-07), each on its own commits. The first
# half is these tests; the second, every other end-to-end test.
end_to_end_first_half='^(cli_test|tokenizer_reference_test|dashboard_browser_test|chat_template_reference_test|batch_shard_test|batch_resume_test|kubernetes_manifest_test|python_model_test|sentencepiece_reference_test|Durability/.*)$'
never_run_here='cpu_kernels_s390x_test|cpu_kernels_x86_levels_test'

# Tests no slice runs, on purpose (see above); the grep for log calls, the check of the source
# tree's shape, this check of the slices and the configure-only check of the serving build run
# no txscore code.
unsliced_on_purpose="cpu_kernels_s390x_test cpu_kernels_x86_levels_test every_log_call_names_its_component
  source_shape_test every_test_is_in_a_sanitizer_slice serving_builds_without_test_packages"

slice=${1:-}
case "$slice" in
  server | llm | end-to-end | end-to-end-1 | end-to-end-2) shift ;;
  all)
    shift
    for one in server llm end-to-end; do "$0" "$one" "$@"; done
    exit 0
    ;;
  check-slices)
    # tests/CMakeLists.txt runs this on the main build: every test of the suite is in a slice
    # or left out on purpose, so a test added later cannot escape the sanitizers unnoticed.
    build_dir=${2:?"usage: $0 check-slices BUILD_DIR"}
    names() { (cd "$build_dir" && ctest -N "$@" | sed -n 's/^ *Test *#[0-9]*: //p'); }
    missing=$(comm -23 <(names | sort) <( {
      for one in server llm end-to-end; do names -L "$(slice_label_regex "$one")"; done
      printf '%s\n' $unsliced_on_purpose
    } | sort -u))
    if [ -n "$missing" ]; then
      echo "asan: these tests are in no sanitizer slice (add their binary to a slice in scripts/asan.sh):" >&2
      echo "$missing" >&2
      exit 1
    fi
    echo "asan: every test is in a sanitizer slice, or left out on purpose: $unsliced_on_purpose"
    exit 0
    ;;
  *)
    echo "usage: $0 server|llm|end-to-end|end-to-end-1|end-to-end-2|all [ctest arguments]" >&2
    exit 2
    ;;
esac
read -r -a targets <<<"$(slice_targets "$slice")"
label_regex=$(slice_label_regex "$slice")
jobs=$(nproc 2>/dev/null || echo 2)
. scripts/ccache-env.sh
# What UndefinedBehaviorSanitizer does not check here, and why:
# - null, nonnull-attribute, returns-nonnull-attribute: with them GCC 12 no longer sees a
#   function pointer as a constant, and libtorch's kernel registration headers
#   (static_assert(func != nullptr)) do not compile. A null dereference still stops the test:
#   AddressSanitizer reports the SEGV with its stack.
# - enum: Thrift's generated code loads a value off the wire into a C++ enum before anything
#   checks it (txscore's handler then refuses values off the IDL's list, and a test sends
#   them on purpose); scripts/fuzz.sh leaves it out for the same reason.
sanitizers="-fsanitize=address,undefined -fno-sanitize=null,nonnull-attribute,returns-nonnull-attribute,enum"
sanitizers+=" -fno-sanitize-recover=undefined"
# -O0 -g1: instrumented code costs more to compile than the main build's, file for file, and
# most of it is the optimiser (docs/testing.md, "How long it takes"); -g1 keeps line numbers in
# every report.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1 -DNDEBUG" \
  -DTXSCORE_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$sanitizers -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitizers" -DCMAKE_SHARED_LINKER_FLAGS="$sanitizers" >/dev/null
echo "asan: building the $slice slice (${#targets[@]} targets) in build-asan/"
if ! cmake --build build-asan -j "$jobs" --target "${targets[@]}" >build-asan/build.log 2>&1; then
  tail -40 build-asan/build.log
  echo "asan: the build failed (full log: build-asan/build.log)" >&2
  exit 1
fi
# The reference tokenizers the tests compare against (scripts/setup.sh --tests installs them in build/npm).
if [ -d build/npm ] && [ ! -e build-asan/npm ]; then ln -s ../build/npm build-asan/npm; fi
# abort_on_error/halt_on_error: the first report ends the process with a failure.
# detect_container_overflow=0: std::vector's annotations only hold when every library that
# touches a vector is instrumented; vectors filled inside libtorch and read here would be
# reported falsely.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_container_overflow=0:strict_string_checks=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
case "$slice" in
  end-to-end-1) select=(-R "$end_to_end_first_half" -E "^($never_run_here)\$") ;;
  end-to-end-2) select=(-E "^($never_run_here)\$|${end_to_end_first_half}") ;;
  *) select=(-E "^($never_run_here)\$") ;;
esac
(cd build-asan && ctest --output-on-failure -j "$jobs" -L "$label_regex" "${select[@]}" "$@")
echo "asan: the $slice slice of the CTest suite is clean under AddressSanitizer and UndefinedBehaviorSanitizer"
