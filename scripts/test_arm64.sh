#!/usr/bin/env bash
# cellm on ARM64 without ARM hardware: cross-builds build-arm64/ with Debian's aarch64 toolchain
# (cmake/aarch64-linux-gnu.cmake) and runs the CPU suites under qemu-user on three CPU models, the feature levels
# phones have, so that every ARM kernel table is tested where a core would pick it:
#   cortex-a53     ARMv8.0, no dot product (the oldest phones still sold): the "neon" table
#   cortex-a76     with SDOT: "neon-dotprod"
#   max,sve=off    with SDOT and SMMLA (i8mm): "neon-i8mm"
# What differs between the tables runs on all three: the kernels against the scalar reference, the repacked
# products, and every backend op of the openblas backend. The rest runs once, on max,sve=off, since it does not
# depend on the CPU model: the scalar backend's ops, the fast activations (one NEON table for every model),
# blocks, the KV pool and plugin host, the scheduler, the engine, the SDK, and one real-model greedy parity run
# of SmolLM2 against the committed llama.cpp reference. The Vulkan, server,
# binding and fuzz suites stay x86-only. Only the programs these suites need are built.
#   scripts/test_arm64.sh            installs what is missing (as root, apt), builds, tests
#   scripts/test_arm64.sh --full     builds everything and runs the whole CPU suite on every model
# CPU models can be narrowed with CELLM_ARM64_CPUS="cortex-a53 max,sve=off" (the last one runs every suite).
set -euo pipefail
cd "$(dirname "$0")/.."

full=0
case "${1:-}" in
  "") ;;
  --full) full=1 ;;
  *) echo "usage: scripts/test_arm64.sh [--full]" >&2; exit 2 ;;
esac

# The arm64 -dev packages beside the build machine's own (multiarch), the cross compiler and qemu-user.
packages=(g++-aarch64-linux-gnu qemu-user cmake make pkg-config python3 python3-pip nlohmann-json3-dev libcli11-dev
          glslang-tools libtomlplusplus-dev:arm64 libspdlog-dev:arm64 libfmt-dev:arm64 libopenblas-dev:arm64
          libgtest-dev:arm64 libgmock-dev:arm64 libbenchmark-dev:arm64 libpcre2-dev:arm64
          libpng-dev:arm64 libjpeg62-turbo-dev:arm64)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
  if [[ $(id -u) != 0 ]]; then
    echo "test_arm64.sh: missing packages (run as root to install them): ${missing[*]}" >&2
    exit 1
  fi
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# The benchmarks are x86 work (docs/benchmarks.md measures ARM in instructions, scripts/arm64/), and so is the
# Vulkan backend: its plugin is left out of the cross build.
cmake -S . -B build-arm64 -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DCELLM_BUILD_BENCH=OFF -DCMAKE_DISABLE_FIND_PACKAGE_Vulkan=ON "${launcher[@]}"
# The programs the suites below run (with --full, everything): the plugins, the host and the tools the tests
# start, and the test programs of those suites.
targets=(cellm_plugins cellm-host cellm-make-model openblas_kernels_test openblas_repacked_test
         openblas_activations_fast_test backend_ops_test blocks_test host_tests hf_parity_tests e2e_tests parity_tests
         sdk_test sdk_example)
if ((full)); then
  cmake --build build-arm64 -j2
else
  cmake --build build-arm64 -j2 --target "${targets[@]}"
fi
scripts/fetch_models.sh >/dev/null

# ctest names (gtest's Suite.Test, the backend after a slash); the Vulkan cases are left out.
kernels='^(OpenblasKernels|RepackedProducts)\.|^EveryBackend/BackendOps\..*/openblas'
above='^(OpenblasActivationsFast|EveryBackend/BackendOps|Blocks|BlockPool|KvLayers|PluginRegistry|Scheduler|Engine'
above+='|BackendPlugins)\.|^sdk_'
above+='|^EveryBackend/Parity\.GreedyGenerationsMatchLlamaCpp/openblas_precision_fast'
# The greedy run takes fast precision: under qemu every float operation is a call into soft-float, and the
# exact products' eight float lanes per block made that run twice as long (7 minutes on cortex-a76). Exact
# precision's bit equality with the scalar backend is what the backend-op suite checks, on every CPU model.
read -r -a cpus <<<"${CELLM_ARM64_CPUS:-cortex-a53 cortex-a76 max,sve=off}"
last=$((${#cpus[@]} - 1))
status=0
for i in "${!cpus[@]}"; do
  cpu=${cpus[$i]}
  echo "== qemu-aarch64 -cpu $cpu"
  # qemu-user reads the CPU model from QEMU_CPU, which the wrappers and every child inherit.
  if ((full)); then
    QEMU_CPU=$cpu ctest --test-dir build-arm64 --output-on-failure -j2 -LE install -E vulkan || status=1
  elif ((i == last)); then
    # -FS: the greedy run compares with llama.cpp alone, so the parity files' setup test (the scalar backend's
    # logits, an hour under qemu) is left out. The SDK's SmolLM2 cases (real model, tools) run natively only:
    # under qemu a 300-token tool prompt outlasts their poll timeout.
    QEMU_CPU=$cpu ctest --test-dir build-arm64 --output-on-failure -j2 -R "$kernels|$above" \
      -E 'vulkan|sdk_real_model|sdk_tools' \
      -FS scalar_logits || status=1
  else
    QEMU_CPU=$cpu ctest --test-dir build-arm64 --output-on-failure -j2 -R "$kernels" -E vulkan || status=1
  fi
done
exit $status
