#!/usr/bin/env bash
# cellm's vulkan backend and llama.cpp's Vulkan build side by side on the lent GPU machine, on the same synthetic
# GGUF files (scripts/gpu/bench.sh makes them), in one run. Carry [".gl", ".gpu-carry", ".gpu-llama"]
# (scripts/gpu/README.md says how to make them).
#
# Usage: scripts/gpu/side_by_side.sh [MODEL ...]     MODEL: smollm2-135m (default), gemma3-270m
#
# Per model:
#   cellm, precision fast and exact: bench.sh vulkan (decode after a 128-token prompt, a 512-token prefill);
#   cellm fast with 8 and 32 sessions: cellm-host bench --sessions N (aggregate decode, inter-token latency);
#   cellm fast with 'profile = 1': dispatches, barriers and GPU time per op kind of the decode steps;
#   llama.cpp: bench_llamacpp.sh (pp512, tg128, tg128 after 512 tokens).
# $OUT/side_by_side.txt gets every table; $OUT/logs.tar.gz every log.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/out}
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(smollm2-135m)
scratch=$(mktemp -d /tmp/side-by-side.XXXXXX)
report="$OUT/side_by_side.txt"
mkdir -p "$OUT"
: >"$report"
status=0
for model in "${models[@]}"; do
    case $model in
        smollm2-135m) file=/tmp/cellm-gpu/smollm2-135m-synthetic.Q4_1.gguf ;;
        gemma3-270m) file=/tmp/cellm-gpu/gemma3-270m-synthetic.Q4_K_M.gguf ;;
        *) echo "side_by_side.sh: unknown model '$model' (smollm2-135m, gemma3-270m)" >&2; exit 2 ;;
    esac
    for precision in fast exact; do
        echo "== $model: cellm vulkan, precision $precision" >>"$report"
        if OUT="$scratch/$model-$precision" CELLM_GPU_MODEL=$model CELLM_GPU_REPS=${CELLM_GPU_REPS:-5} \
            CELLM_GPU_BACKEND_OPTS="precision = \"$precision\"" scripts/gpu/bench.sh vulkan; then :; else status=1; fi
        cat "$scratch/$model-$precision/summary.txt" >>"$report" || true
        if [ $precision = fast ]; then cp /tmp/cellm-gpu/bench-vulkan.toml "$scratch/$model-fast.toml"; fi
    done
    # Many sessions on the scheduler (fast precision): aggregate decode tok/s and inter-token latency.
    for sessions in 8 32; do
        echo "== $model: cellm vulkan fast, $sessions sessions (128-token prompts, 64 decode steps each)" >>"$report"
        if LD_LIBRARY_PATH=/tmp/cellm-gpu/lib VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json \
            timeout 300 .gpu-carry/bin/cellm-host bench --manifest "$scratch/$model-fast.toml" --sessions $sessions \
            --prompt-tokens 128 --gen-tokens 64 --repetitions 3 >>"$report" 2>"$scratch/$model-sessions$sessions.log"; then :
        else status=1; fi
    done
    echo "== $model: cellm vulkan fast, profiled (timestamps after every dispatch; slower than unprofiled)" >>"$report"
    if OUT="$scratch/$model-profile" CELLM_GPU_MODEL=$model CELLM_GPU_REPS=1 CELLM_GPU_GEN=64 CELLM_GPU_VERBOSE=1 \
        CELLM_GPU_BACKEND_OPTS='profile = 1' scripts/gpu/bench.sh vulkan; then :; else status=1; fi
    grep -h 'vulkan profile' "$scratch/$model-profile/vulkan.log" | sed 's/; /;\n    /g' >>"$report" || true
    echo "== $model: llama.cpp Vulkan" >>"$report"
    if OUT="$scratch/$model-llama" scripts/gpu/bench_llamacpp.sh "$file"; then :; else status=1; fi
    cat "$scratch/$model-llama/llamacpp.md" >>"$report" || true
done
tar -czf "$OUT/logs.tar.gz" -C "$scratch" .
cat "$report"
exit $status
