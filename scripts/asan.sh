#!/usr/bin/env bash
# The whole CTest suite again, built with AddressSanitizer and UndefinedBehaviorSanitizer (GCC,
# the compiler of the main build) in build-asan/: every test binary, the txscore executable the
# end-to-end tests start, and the backend libraries they load. Any heap or stack overflow,
# use-after-free, leak, or undefined behaviour (signed overflow, a misaligned access, an
# out-of-range shift, a bad vptr) stops the process that hit it, so its test fails. Run by
# scripts/test.sh; needs scripts/setup.sh. Arguments go to ctest:
#
#   ./scripts/asan.sh                      # everything
#   ./scripts/asan.sh -R 'RpcServer|Tls'   # a part
#
# What is not checked here: code inside Debian's libraries (libtorch, RocksDB, Thrift, XGBoost,
# OpenSSL) is not instrumented, so only txscore's own accesses are checked (LeakSanitizer
# still sees every allocation). Two tests skip themselves here, saying why: one checks glibc
# malloc's behaviour (ASan replaces malloc), one scans all writable memory for a card number
# (ASan's shadow memory maps terabytes); and the tests' peak-memory bounds are not checked
# (freed memory waits in ASan's quarantine).
set -euo pipefail
cd "$(dirname "$0")/.."
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
# -O1 -g1: about half the compile time of the main build's -O2 -g, with line numbers in every
# report.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DTXSCORE_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="$sanitizers -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="$sanitizers" -DCMAKE_SHARED_LINKER_FLAGS="$sanitizers" >/dev/null
if ! cmake --build build-asan -j "$jobs" >build-asan/build.log 2>&1; then
  tail -40 build-asan/build.log
  echo "asan: the build failed (full log: build-asan/build.log)" >&2
  exit 1
fi
# The reference tokenizers the tests compare against (scripts/test.sh installs them in build/).
if [ -d build/npm ] && [ ! -e build-asan/npm ]; then ln -s ../build/npm build-asan/npm; fi
# abort_on_error/halt_on_error: the first report ends the process with a failure.
# detect_container_overflow=0: std::vector's annotations only hold when every library that
# touches a vector is instrumented; vectors filled inside libtorch and read here would be
# reported falsely.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_container_overflow=0:strict_string_checks=1:detect_stack_use_after_return=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
(cd build-asan && ctest --output-on-failure -j "$jobs" "$@")
echo "asan: the CTest suite is clean under AddressSanitizer and UndefinedBehaviorSanitizer"
