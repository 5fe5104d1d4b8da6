#!/usr/bin/env bash
# The llama.cpp sources that the sdist of llama-cpp-python (LLAMA_CPP_PYTHON_VERSION, default 0.3.36) vendors,
# fetched from PyPI with pip and unpacked into ${CELLM_CACHE:-~/.cache/cellm}/llamacpp-src, for the tests that
# read its reference files at test time (models/templates/*.jinja, the vocabulary tests). Prints the llama.cpp
# folder. Idempotent; nothing enters the repository.
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${CELLM_CACHE:-$HOME/.cache/cellm}"
sdist="$cache/dl/llama_cpp_python-$version.tar.gz"
src="$cache/llamacpp-src/llama_cpp_python-$version/vendor/llama.cpp"

if [[ ! -f "$src/CMakeLists.txt" ]]; then
  if [[ ! -f "$sdist" ]]; then
    echo "fetch_llamacpp_source.sh: downloading the llama-cpp-python $version sdist (about 75 MB, once)" >&2
    mkdir -p "$cache/dl"
    python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$cache/dl" "llama-cpp-python==$version" >&2
  fi
  mkdir -p "$cache/llamacpp-src"
  tar -xzf "$sdist" --no-same-owner -C "$cache/llamacpp-src" "llama_cpp_python-$version/vendor/llama.cpp"
fi
echo "$src"
