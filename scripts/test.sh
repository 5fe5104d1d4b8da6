#!/usr/bin/env bash
# The project's test command: configure and build build/ (Release), fetch the reference models, the perplexity
# text (scripts/fetch_text.sh) and llama.cpp's sources for its reference files (scripts/fetch_llamacpp_source.sh),
# run every test, two at a time (most tests use one core; CI machines have two).
#   scripts/test.sh          what CI runs
#   scripts/test.sh --full   also the checks that take minutes and that others imply (CELLM_TEST_FULL=1):
#                            the Vulkan backend's real-model q8-cache and greedy runs on lavapipe, and the
#                            Python binding's `pip install` into a venv (python_pip, label pip: it compiles
#                            cellm again, about 8 minutes on 2 cores; its pytest suite runs either way), every
#                            jsonschemabench file in the grammar tests, and the token-by-token mask checks through
#                            SmolLM2's and Gemma 3's tokenizers (grammar_masks_*, label long)
set -euo pipefail
cd "$(dirname "$0")/.."

exclude=(-LE "pip|long")
case "${1:-}" in
  "") ;;
  --full) export CELLM_TEST_FULL=1; exclude=() ;;
  *) echo "usage: scripts/test.sh [--full]" >&2; exit 2 ;;
esac

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
scripts/fetch_models.sh
scripts/fetch_text.sh
scripts/fetch_llamacpp_source.sh >/dev/null
ctest --test-dir build --output-on-failure -j2 "${exclude[@]}"
