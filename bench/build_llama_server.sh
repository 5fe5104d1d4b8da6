#!/usr/bin/env bash
# Builds llama.cpp's own HTTP server, llama-server, for bench/serve_load --llama-server: the llama.cpp that the
# sdist of llama-cpp-python (LLAMA_CPP_PYTHON_VERSION, default 0.3.36) vendors, fetched and unpacked by
# scripts/arm64/build_llamacpp.sh's rules into ${CELLM_CACHE:-~/.cache/cellm}/llamacpp-src. Native CPU kernels
# (GGML_NATIVE=ON, as llama.cpp's own default), its default OpenMP thread pool, no curl, no OpenSSL.
# Prints the binary's path. Idempotent; nothing enters the repository.
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${CELLM_CACHE:-$HOME/.cache/cellm}"
sdist="$cache/dl/llama_cpp_python-$version.tar.gz"
src="$cache/llamacpp-src/llama_cpp_python-$version/vendor/llama.cpp"
build="$cache/llamacpp-x86-server"

if [[ ! -f "$src/CMakeLists.txt" ]]; then
  if [[ ! -f "$sdist" ]]; then
    echo "build_llama_server.sh: downloading the llama-cpp-python $version sdist (about 75 MB, once)" >&2
    mkdir -p "$cache/dl"
    python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$cache/dl" "llama-cpp-python==$version" >&2
  fi
  mkdir -p "$cache/llamacpp-src"
  tar -xzf "$sdist" --no-same-owner -C "$cache/llamacpp-src" "llama_cpp_python-$version/vendor/llama.cpp"
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "${launcher[@]}" >&2
fi
cmake --build "$build" --target llama-server -j"${JOBS:-2}" >&2
echo "$build/bin/llama-server"
