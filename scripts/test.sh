#!/usr/bin/env bash
# The project's test command: configure and build build/ (Release), fetch the reference model, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
scripts/fetch_models.sh
ctest --test-dir build --output-on-failure
