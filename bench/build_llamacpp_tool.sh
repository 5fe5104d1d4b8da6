#!/usr/bin/env bash
# Builds one of llama.cpp's programs (a CMake target: llama-server, llama-perplexity, llama-bench, ...) from the
# llama.cpp that the sdist of llama-cpp-python (LLAMA_CPP_PYTHON_VERSION, default 0.3.36) vendors, fetched and
# unpacked by scripts/fetch_llamacpp_source.sh, into one build folder that every target shares. Native CPU
# kernels (GGML_NATIVE=ON, as llama.cpp's own default), its default OpenMP thread pool, no curl, no OpenSSL.
# JOBS (default 2) parallel compile jobs. Prints the binary's path. Idempotent; nothing enters the repository.
#
#   bench/build_llamacpp_tool.sh llama-perplexity
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 TARGET   (e.g. llama-server, llama-perplexity)" >&2
  exit 2
fi
target="$1"
cache="${CELLM_CACHE:-$HOME/.cache/cellm}"
src="$("$(dirname "$0")/../scripts/fetch_llamacpp_source.sh")"
build="$cache/llamacpp-x86-tools"

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "${launcher[@]}" >&2
fi
cmake --build "$build" --target "$target" -j"${JOBS:-2}" >&2
echo "$build/bin/$target"
