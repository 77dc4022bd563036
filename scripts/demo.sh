#!/usr/bin/env bash
# README command 1: set up, then serve fraud scores on the demo pipeline in the foreground.
# Try it from a second shell:  ./build/txscore score --server 127.0.0.1:9090
# Stop with Ctrl-C (in-flight requests finish, the database closes cleanly).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec ./build/txscore serve --config config/txscore.yaml "$@"
