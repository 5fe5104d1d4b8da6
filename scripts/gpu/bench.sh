#!/usr/bin/env bash
# Benchmark cellm backends on the lent GPU machine (or locally), from the repo root, with what
# scripts/gpu/pack.sh put into .gpu-carry/ and the Vulkan loader debs in .gl/.
#
# Usage: scripts/gpu/bench.sh [BACKEND ...]        default: vulkan      e.g. scripts/gpu/bench.sh vulkan openblas
#
# Per backend it runs two `cellm-host bench --json` on a synthetic model (random weights, synthetic tokenizer) of
# a real file's exact tensor names, shapes and types, by default SmolLM2-135M-Instruct Q4_1 (CELLM_GPU_MODEL):
#   decode:   a 128-token prompt, then $CELLM_GPU_GEN greedy decode steps     -> $OUT/BACKEND-decode.json
#   prefill:  a 512-token prompt (one prefill), then 16 decode steps          -> $OUT/BACKEND-prefill512.json
# and logs everything (environment, plugin list, stderr) to $OUT/BACKEND.log; $OUT/summary.txt gets one table.
# The device tool returns at most 8 files, so name at most 2 backends per run (3 files each + summary).
#
# Environment (all optional):
#   CELLM_GPU_MODEL       the model's shape (default smollm2-135m):
#                           smollm2-135m  SmolLM2-135M-Instruct Q4_1: llama, 30 layers, n_embd 576, vocab 49152;
#                                         Q4_1 with a Q8_0 token_embd (tied), 98 MB
#                           gemma3-270m   Gemma-3-270M Q4_K_M: gemma3, 18 layers, n_embd 640, 4 heads and 1 KV
#                                         head of 256, window 512, vocab 262144; llama.cpp's Q4_K_M mix (Q4_K,
#                                         Q5_0, Q6_K, Q8_0 token_embd, tied), 254 MB, made in 3-4 s
#   OUT                   output folder (the device tool sets it; default /tmp/out)
#   CELLM_GPU_SETUP       1: unpack .gl/*.deb into / and ldconfig (the device README's loader step; root only)
#                         0: skip it. Default auto: do it when root, .gl/ exists and ldconfig knows no libvulkan
#   CELLM_GPU_REPS        repetitions per bench, median reported (default 5)
#   CELLM_GPU_GEN         decode steps of the decode bench (default 128)
#   CELLM_GPU_PREFILL     prompt tokens of the prefill bench (default 512)
#   CELLM_GPU_THREADS     --threads for the backend (default: the manifest's default, the physical cores)
#   CELLM_GPU_VERBOSE=1   cellm-host --verbose: backend logs (the vulkan profile with 'profile = 1') go to the log
#   CELLM_GPU_BACKEND_OPTS extra TOML lines for the manifest's [backend] table, e.g. 'device = 0'
#   CELLM_GPU_KV_TYPE     f32 | f16 | q8 for [context].kv_type (default: the host's default, f16)
#   CELLM_GPU_TIMEOUT     seconds per cellm-host bench before it is killed (default 120; 2 backends x 2 benches stay inside a 10-minute run)
#   CELLM_GPU_WORK        scratch folder: unpacked libs, the model, manifests (default /tmp/cellm-gpu)
#   CELLM_GPU_REGEN=1     regenerate the synthetic model even if it is there
set -euo pipefail

say() { echo "== bench.sh: $*"; }
die() { echo "bench.sh: error: $*" >&2; exit 1; }

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
backends=("$@")
[ ${#backends[@]} -gt 0 ] || backends=(vulkan)
[ ${#backends[@]} -le 2 ] || echo "bench.sh: warning: ${#backends[@]} backends write $((3 * ${#backends[@]} + 1)) files; the device tool returns 8" >&2

OUT=${OUT:-/tmp/out}
work=${CELLM_GPU_WORK:-/tmp/cellm-gpu}
reps=${CELLM_GPU_REPS:-5}
gen=${CELLM_GPU_GEN:-128}
prefill=${CELLM_GPU_PREFILL:-512}
timeout_s=${CELLM_GPU_TIMEOUT:-120}
model_name=${CELLM_GPU_MODEL:-smollm2-135m}
case $model_name in
    smollm2-135m) model="$work/smollm2-135m-synthetic.Q4_1.gguf" ;;
    gemma3-270m) model="$work/gemma3-270m-synthetic.Q4_K_M.gguf" ;;
    *) die "CELLM_GPU_MODEL=$model_name: not smollm2-135m or gemma3-270m" ;;
esac
carry="$root/.gpu-carry"
mkdir -p "$OUT" "$work"

[ -x "$carry/bin/cellm-host" ] && [ -x "$carry/bin/cellm-make-model" ] ||
    die "$carry/bin has no cellm-host/cellm-make-model: run scripts/gpu/pack.sh BUILD_DIR here and carry .gpu-carry"

# --- 1. The Vulkan loader (and GL libs) from .gl (scripts/gpu/loader.sh). --------------------------------------
# shellcheck source=scripts/gpu/loader.sh
. "$root/scripts/gpu/loader.sh"
setup_vulkan_loader

# --- 2. Shared libraries: .gpu-carry/lib (xz-compressed ones unpacked), lib-compat only when needed. --------
use_carried_libraries "$carry" "$work/lib" "$carry/bin/cellm-host" "$carry/bin/cellm-make-model" "$carry"/bin/plugins/*.so

host="$carry/bin/cellm-host"
{
    say "host: $(uname -srm), $(nproc) CPUs, $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
    if command -v nvidia-smi >/dev/null; then
        say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | paste -sd ';')"
    else
        say "GPU: no nvidia-smi here"
    fi
    say "VK_DRIVER_FILES=${VK_DRIVER_FILES:-(unset: no NVIDIA ICD found)}"
    say "libvulkan: $(ldconfig -p 2>/dev/null | grep -m1 'libvulkan\.so\.1' | sed 's/.*=> //' || true)"
    say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    say "model: $model_name (CELLM_GPU_MODEL), synthetic: $model"
    if [ -f "$carry/PACKED" ]; then head -3 "$carry/PACKED" | sed 's/^/   .gpu-carry\/PACKED: /'; fi
} | tee "$work/env.txt"

# --- 3. The synthetic model. --------------------------------------------------------------------------------
# SmolLM2-135M Q4_1: cellm-make-model's --type q4_1 writes every 2-D tensor in Q4_1; the real Q4_1 file keeps
# token_embd.weight (tied, so also the 49152x576 classifier) in Q8_0. Same preset and seed give the same values
# in every type, so the Q8_0 token_embd of a second file is spliced in (scripts/gpu/gguf_tool.py, python3's
# standard library only).
# Gemma-3-270M Q4_K_M: --type q4_k_m gives each tensor the type llama.cpp's Q4_K_M gives it, as in the real file.
if [ "$model_name" = gemma3-270m ] && { [ "${CELLM_GPU_REGEN:-0}" = 1 ] || [ ! -s "$model" ]; }; then
    say "generating the synthetic Gemma-3-270M model into $work"
    gen_start=$SECONDS
    "$carry/bin/cellm-make-model" --preset gemma3-270m --type q4_k_m --seed 1 --out "$model.tmp"
    mv "$model.tmp" "$model"
    say "model generated in $((SECONDS - gen_start)) s"
elif [ "${CELLM_GPU_REGEN:-0}" = 1 ] || [ ! -s "$model" ]; then
    say "generating the synthetic SmolLM2-135M model into $work"
    gen_start=$SECONDS
    "$carry/bin/cellm-make-model" --preset smollm2-135m --type q4_1 --seed 1 --out "$work/q4_1.gguf"
    if command -v python3 >/dev/null; then
        "$carry/bin/cellm-make-model" --preset smollm2-135m --type q8_0 --seed 1 --out "$work/q8_0.gguf"
        python3 scripts/gpu/gguf_tool.py splice --base "$work/q4_1.gguf" --take "$work/q8_0.gguf" \
            --tensor token_embd.weight --out "$model.tmp"
        rm -f "$work/q4_1.gguf" "$work/q8_0.gguf"
    else
        echo "bench.sh: warning: no python3: token_embd.weight stays Q4_1 (the real file has it in Q8_0)" >&2
        mv "$work/q4_1.gguf" "$model.tmp"
    fi
    mv "$model.tmp" "$model"
    say "model generated in $((SECONDS - gen_start)) s"
fi
if command -v python3 >/dev/null; then
    say "model tensors: $(python3 scripts/gpu/gguf_tool.py list "$model" | tail -1 | sed 's/^# //')"
fi
say "model: $model_name, $(($(stat -c %s "$model") / 1048576)) MiB"

# --- 4. The benches. ---------------------------------------------------------------------------------------
verbose_arg=()
if [ "${CELLM_GPU_VERBOSE:-0}" = 1 ]; then verbose_arg=(--verbose); fi
threads_arg=()
if [ -n "${CELLM_GPU_THREADS:-}" ]; then threads_arg=(--threads "$CELLM_GPU_THREADS"); fi
status=0
summary="$OUT/summary.txt"
echo "model: $model_name (synthetic, ${model##*/})" >"$summary"
printf '%-10s %-14s %8s %8s %5s %12s %12s %10s %9s\n' backend bench prompt gen reps prefill_tok/s decode_tok/s ttft_ms rss_MiB \
    >>"$summary"
for backend in "${backends[@]}"; do
    manifest="$work/bench-$backend.toml"
    {
        echo "# written by scripts/gpu/bench.sh"
        echo "[model]"
        echo "path = \"$model\""
        echo "[backend]"
        echo "name = \"$backend\""
        if [ -n "${CELLM_GPU_BACKEND_OPTS:-}" ]; then printf '%s\n' "$CELLM_GPU_BACKEND_OPTS"; fi
        echo "[context]"
        echo "length = 2048"
        echo "block_size = 16"
        if [ -n "${CELLM_GPU_KV_TYPE:-}" ]; then echo "kv_type = \"$CELLM_GPU_KV_TYPE\""; fi
        echo "[sampling]"
        echo "temperature = 0"
        echo "[plugins]"
        echo "paths = [\"$carry/bin/plugins\"]"
    } >"$manifest"
    log="$OUT/$backend.log"
    {
        cat "$work/env.txt"
        say "manifest $manifest:"
        cat "$manifest"
        say "cellm-host plugins:"
        "$host" --verbose plugins --path "$carry/bin/plugins" 2>&1 || true
    } >"$log"

    for kind in decode prefill; do
        if [ $kind = decode ]; then p=128 g=$gen name=decode; else p=$prefill g=16 name=prefill$prefill; fi
        json="$OUT/$backend-$name.json"
        cmd=("$host" "${verbose_arg[@]}" bench --manifest "$manifest" "${threads_arg[@]}" --prompt-tokens "$p" --gen-tokens "$g"
             --repetitions "$reps" --json)
        say "$backend $name: ${cmd[*]#"$root"/}" | tee -a "$log"
        start=$SECONDS
        if timeout "$timeout_s" "${cmd[@]}" >"$json" 2>>"$log"; then
            say "$backend $name: done in $((SECONDS - start)) s: $(cat "$json")" | tee -a "$log"
            if command -v python3 >/dev/null; then
                python3 - "$json" "$backend" "$name" >>"$summary" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:10s} {sys.argv[3]:14s} {r['prompt_tokens']:8d} {r['gen_tokens']:8d} {r['repetitions']:5d} "
      f"{r['prefill_tok_s']:12.1f} {r['decode_tok_s']:12.1f} {r['ttft_ms']:10.2f} {r['peak_rss_mb']:9.1f}")
EOF
            fi
        else
            rc=$?
            status=1
            if [ $rc = 124 ]; then
                echo "bench.sh: $backend $name: killed after ${timeout_s}s (CELLM_GPU_TIMEOUT)" | tee -a "$log" >&2
            fi
            echo "bench.sh: $backend $name failed (exit $rc); the end of $log:" >&2
            tail -n 25 "$log" >&2
            printf '%-10s %-14s FAILED (exit %d), see %s.log\n' "$backend" "$name" "$rc" "$backend" >>"$summary"
            [ -s "$json" ] || rm -f "$json"
            break  # the prefill bench would most likely fail the same way
        fi
    done
done

say "summary ($OUT/summary.txt):"
cat "$summary"
exit $status
