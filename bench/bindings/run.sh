#!/usr/bin/env bash
# The binding-overhead benchmark (docs/benchmarks.md, "Bindings"): the same greedy work through the C SDK, the
# Java binding and the Python binding, on one model, at 1 and 8 sessions, each language in its own process
# one after the other, rounds interleaved so that a machine's drift falls on all three alike.
#   bench/bindings/run.sh [MODEL] [TOKENS] [REPETITIONS] [ROUNDS]
# Needs build/ configured with the benchmarks and the Java binding (the default) and built.
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-${CELLM_MODELS:-$HOME/.cache/cellm/models}/SmolLM2-135M-Instruct.Q4_1.gguf}
tokens=${2:-128}
repetitions=${3:-3}
rounds=${4:-3}
bin=build/bin
for round in $(seq "$rounds"); do
  for sessions in 1 8; do
    "$bin/sdk_throughput" "$model" "$sessions" "$tokens" "$repetitions" 2>/dev/null
    java -Djava.library.path="$bin" -cp "$bin/cellm.jar:$bin/cellm-throughput.jar" SdkThroughput \
      "$model" "$sessions" "$tokens" "$repetitions" 2>/dev/null
    CELLM_LIBRARY="$bin/libcellm.so" PYTHONPATH=bindings/python/src \
      python3 bench/bindings/sdk_throughput.py "$model" "$sessions" "$tokens" "$repetitions" 2>/dev/null
  done
done
