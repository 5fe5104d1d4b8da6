#!/usr/bin/env bash
# Builds the llama.cpp that scripts/arm64/count_instructions.sh measures against:
#  - aarch64 (cross, with Debian's aarch64-linux-gnu-gcc/g++): llama-bench, in
#    ${CELLM_CACHE:-~/.cache/cellm}/llamacpp-arm64/bin;
#  - x86-64 (host): llama-quantize, in ${CELLM_CACHE}/llamacpp-x86/bin (scripts/arm64/make_models.sh).
# Prints the two bin folders. Idempotent; ccache makes a rebuild after a wiped build folder cheap.
#
# Source: llama.cpp as vendored in the sdist of the PyPI package llama-cpp-python (LLAMA_CPP_PYTHON_VERSION,
# default 0.3.36), fetched and unpacked by scripts/fetch_llamacpp_source.sh. Nothing of it enters the repository.
#
# CPU kernels chosen at run time, like a phone build: GGML_BACKEND_DL=ON with GGML_CPU_ALL_VARIANTS=ON builds
# the CPU backend once per feature level as libggml-cpu-<variant>.so beside the program, and ggml loads the
# one with the best score for the CPU's HWCAPs (ggml-cpu/arch/arm/cpu-feats.cpp). GGML_BACKEND_DL needs
# BUILD_SHARED_LIBS=ON, so libllama/libggml are shared too (found through the build RPATH).
# The variant list is Android's (what llama.cpp builds for phones), not Linux's: Linux's only i8mm variant
# also requires SVE, so on an i8mm CPU without SVE (qemu's max,sve=off; Apple M2+, Qualcomm Oryon) a Linux
# build falls back to the dotprod kernels, while Android's list has android_armv8.6_1 = dotprod+fp16+i8mm.
# The build folder's copy of ggml/src/CMakeLists.txt is patched for that (option CELLM_PHONE_VARIANTS).
# Built: android_armv8.0_1, _armv8.2_1 (dotprod), _armv8.2_2 (+fp16), _armv8.6_1 (+i8mm), _armv9.0_1 (+sve2);
# the two SME variants are dropped because Debian 12's gcc 12 rejects -march=armv9.2-a.
# OpenMP is off (ggml's own thread pool); the measurement runs one thread, so there are no worker threads.
set -euo pipefail

cache="${CELLM_CACHE:-$HOME/.cache/cellm}"
jobs="${JOBS:-2}"
arm_build="$cache/llamacpp-arm64"
x86_build="$cache/llamacpp-x86"

log() { echo "build_llamacpp.sh: $*" >&2; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# --- source ---------------------------------------------------------------------------------------------
src="$("$(dirname "$0")/../fetch_llamacpp_source.sh")"

# Android's CPU variant list on Linux too (see the header). Idempotent: the marker option is added once.
cmake_ggml="$src/ggml/src/CMakeLists.txt"
if ! grep -q CELLM_PHONE_VARIANTS "$cmake_ggml"; then
  grep -q 'ggml_add_cpu_backend_variant(android_armv8.6_1' "$cmake_ggml" \
    || { log "no android_armv8.6_1 variant in $cmake_ggml: the patch below needs updating"; exit 1; }
  python3 - "$cmake_ggml" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
arm = 'elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")\n'
linux = 'if (CMAKE_SYSTEM_NAME MATCHES "Linux")\n'
android = 'elseif (CMAKE_SYSTEM_NAME MATCHES "Android")\n'
at = text.index(arm)
i = text.index(linux, at)
j = text.index(android, i)
k = text.index('endif()', j)
# gcc 12 knows no -march=armv9.2-a, so the SME variants are left out.
phone = ''.join(line for line in text[j + len(android):k].splitlines(True) if ' SME)' not in line)
text = (text[:i] + 'if (CMAKE_SYSTEM_NAME MATCHES "Linux" AND NOT CELLM_PHONE_VARIANTS)\n' + text[i + len(linux):j]
        + 'elseif (CMAKE_SYSTEM_NAME MATCHES "Android" OR CELLM_PHONE_VARIANTS)\n' + phone + text[k:])
open(path, 'w').write(text)
PY
  [[ "$(grep -c CELLM_PHONE_VARIANTS "$cmake_ggml")" == 2 ]] || { log "patching $cmake_ggml failed"; exit 1; }
fi

common=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DGGML_OPENMP=OFF)

# --- aarch64 llama-bench ----------------------------------------------------------------------------------
if [[ ! -f "$arm_build/CMakeCache.txt" ]]; then
  cmake -S "$src" -B "$arm_build" "${common[@]}" "${launcher[@]}" \
    -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
    -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
    -DCMAKE_FIND_ROOT_PATH=/usr/aarch64-linux-gnu -DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER \
    -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY \
    -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DCELLM_PHONE_VARIANTS=ON \
    -DGGML_CPU_KLEIDIAI=OFF >"$arm_build.configure.log" 2>&1 \
    || { log "aarch64 configure failed: $arm_build.configure.log"; exit 1; }
fi
# libggml depends on every variant, so llama-bench brings them all.
cmake --build "$arm_build" -j "$jobs" --target llama-bench >&2

# --- x86-64 llama-quantize --------------------------------------------------------------------------------
if [[ ! -f "$x86_build/CMakeCache.txt" ]]; then
  cmake -S "$src" -B "$x86_build" "${common[@]}" "${launcher[@]}" -DBUILD_SHARED_LIBS=OFF \
    >"$x86_build.configure.log" 2>&1 || { log "x86-64 configure failed: $x86_build.configure.log"; exit 1; }
fi
cmake --build "$x86_build" -j "$jobs" --target llama-quantize >&2

echo "$arm_build/bin"
echo "$x86_build/bin"
