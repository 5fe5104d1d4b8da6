#!/usr/bin/env bash
# Benchmark llama.cpp's Vulkan backend (llama-bench) on the lent GPU machine (or locally), from the repo root,
# with what scripts/gpu/pack_llamacpp.sh put into .gpu-llama/ and the Vulkan loader debs in .gl/: the
# side-by-side reference for scripts/gpu/bench.sh (cellm).
#
# Usage: scripts/gpu/bench_llamacpp.sh MODEL.gguf [more llama-bench args]
#   e.g. scripts/gpu/bench_llamacpp.sh /tmp/cellm-gpu/smollm2-135m-synthetic.Q4_1.gguf
#        scripts/gpu/bench_llamacpp.sh model.gguf -p 32 -n 8 -r 1 -fa 1
#
# What it measures (all layers offloaded, -ngl 99; llama-bench reports mean +- stddev tokens/s over -r runs):
#   1. llama-bench -m MODEL -ngl 99 -p 512 -n 128 -r 5 -o md
#        pp512: prefill of a 512-token prompt in one batch; tg128: 128 decode steps from an empty context
#   2. llama-bench -m MODEL -ngl 99 -p 0 -n 128 -d 512 -r 5 -o md
#        tg128 @ d512: 128 decode steps after a 512-token context (cellm's decode bench reads a 128-token prompt
#        first); a llama-bench without -d/--n-depth runs -pg 512,128 instead (prompt + decode together)
# -p, -n, -r, -d and -ngl given among the extra args replace those defaults (in both runs; -d 0 skips run 2);
# every other argument goes to both runs as is. Output: $OUT/llamacpp.md (machine, GPU, the Vulkan device line,
# both tables) and $OUT/llamacpp.log (everything, stderr included).
#
# Environment (all optional):
#   OUT                 output folder (the device tool sets it; default /tmp/out)
#   CELLM_GPU_SETUP     1: unpack .gl/*.deb into / and ldconfig (root only); 0: skip it. Default auto: do it when
#                       root, .gl/ exists and ldconfig knows no libvulkan (as scripts/gpu/bench.sh does)
#   LLAMA_GPU_TIMEOUT   seconds per llama-bench run before it is killed (default 240)
#   LLAMA_GPU_WORK      scratch folder for the unpacked binary and libraries (default /tmp/llama-gpu)
#   GGML_VK_*           llama.cpp's own switches pass through, e.g. GGML_VK_VISIBLE_DEVICES=0 (needed for a
#                       CPU-type device such as Mesa's lavapipe, which llama.cpp skips otherwise) or
#                       GGML_VK_DISABLE_COOPMAT2=1
set -euo pipefail

say() { echo "== bench_llamacpp.sh: $*"; }
die() { echo "bench_llamacpp.sh: error: $*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: scripts/gpu/bench_llamacpp.sh MODEL.gguf [more llama-bench args]"
model=$1
shift
[ -f "$model" ] || die "no model file $model"
model=$(cd "$(dirname "$model")" && pwd)/$(basename "$model")

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/out}
work=${LLAMA_GPU_WORK:-/tmp/llama-gpu}
timeout_s=${LLAMA_GPU_TIMEOUT:-240}
carry="$root/.gpu-llama"
mkdir -p "$OUT" "$work"

[ -x "$carry/bin/llama-bench" ] ||
    die "$carry/bin has no llama-bench: run scripts/gpu/pack_llamacpp.sh BUILD_DIR here and carry .gpu-llama"

# --- The arguments: defaults, replaced by the caller's -p/-n/-r/-d/-ngl; the rest passes through. -----------
prompt=512 gen=128 reps=5 depth=512 ngl=99
extra=()
while [ $# -gt 0 ]; do
    case $1 in
        -p|--n-prompt|-n|--n-gen|-r|--repetitions|-d|--n-depth|-ngl|--n-gpu-layers|-o|--output|-m|--model)
            [ $# -ge 2 ] || die "$1 needs a value"
            case $1 in
                -p|--n-prompt) prompt=$2 ;;
                -n|--n-gen) gen=$2 ;;
                -r|--repetitions) reps=$2 ;;
                -d|--n-depth) depth=$2 ;;
                -ngl|--n-gpu-layers) ngl=$2 ;;
                -o|--output) die "the output format is always md ($1 $2 given)" ;;
                -m|--model) die "give the model as the first argument, not $1" ;;
            esac
            shift 2 ;;
        *) extra+=("$1"); shift ;;
    esac
done

# --- 1. The Vulkan loader (and GL libs) from .gl (scripts/gpu/loader.sh). --------------------------------------
# shellcheck source=scripts/gpu/loader.sh
. "$root/scripts/gpu/loader.sh"
setup_vulkan_loader

# --- 2. llama-bench and its libraries, .xz ones unpacked; lib-compat only when needed. ----------------------
rm -rf "${work:?}/bin"
mkdir -p "$work/bin"
cp -a "$carry/bin/llama-bench" "$work/bin/"
bench="$work/bin/llama-bench"
use_carried_libraries "$carry" "$work/lib" "$bench"

# --- 3. The machine, the GPU, the Vulkan device llama.cpp sees. ----------------------------------------------
md="$OUT/llamacpp.md"
log="$OUT/llamacpp.log"
: >"$log"
{
    say "host: $(uname -srm), $(nproc) CPUs, $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
    if command -v nvidia-smi >/dev/null; then
        say "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | paste -sd ';')"
    else
        say "GPU: no nvidia-smi here"
    fi
    say "VK_DRIVER_FILES=${VK_DRIVER_FILES:-(unset: no NVIDIA ICD found)}"
    say "libvulkan: $(ldconfig -p 2>/dev/null | grep -m1 'libvulkan\.so\.1' | sed 's/.*=> //' || true)"
    env | grep '^GGML_VK_' | sed 's/^/== bench_llamacpp.sh: env: /' || true
    if [ -f "$carry/PACKED" ]; then sed 's/^/   .gpu-llama\/PACKED: /' "$carry/PACKED"; fi
    say "model: $model ($(( $(stat -c %s "$model") / 1024 / 1024 )) MiB)"
} | tee "$md.head" | tee -a "$log"

say "llama-bench --list-devices:" | tee -a "$log"
devices=$(timeout 60 "$bench" --list-devices 2>>"$log") || die "llama-bench --list-devices failed (see $log)"
echo "$devices" | tee -a "$log"
echo "$devices" | grep -q 'Vulkan[0-9]' ||
    die "llama.cpp sees no Vulkan device (a CPU-type one such as lavapipe needs GGML_VK_VISIBLE_DEVICES=0)"

# One short verbose run: checks that the model loads and offloads, and shows ggml_vulkan's device line
# (fp16, int dot, matrix cores: NV_coopmat2 / KHR_coopmat / none).
say "probe: a 1-token verbose run" | tee -a "$log"
probe="$work/probe.log"
if ! timeout "$timeout_s" "$bench" -m "$model" -ngl "$ngl" -p 0 -n 1 -r 1 --no-warmup -v -o md "${extra[@]}" \
        >"$probe" 2>&1; then
    cat "$probe" >>"$log"
    tail -n 25 "$probe" >&2
    die "the probe run failed (above; all of it in $log)"
fi
cat "$probe" >>"$log"
{
    cat "$md.head"
    grep -E '^ggml_vulkan: [0-9]+ = |offloaded [0-9]+/[0-9]+ layers' "$probe" | sed 's/^/== llama-bench: /' || true
} >"$md"
rm -f "$md.head"
grep -E '^ggml_vulkan: [0-9]+ = |offloaded [0-9]+/[0-9]+ layers' "$probe" | sed 's/^/== llama-bench: /' || true

# --- 4. The benches. ------------------------------------------------------------------------------------------
runs=("-p $prompt -n $gen")
if [ "$depth" != 0 ]; then
    help=$("$bench" --help 2>&1 || true)  # not piped into grep -q: pipefail would see llama-bench's SIGPIPE
    if grep -q -- '--n-depth' <<<"$help"; then
        runs+=("-p 0 -n $gen -d $depth")
    else
        runs+=("-p 0 -n 0 -pg $depth,$gen")
    fi
fi
status=0
for r in "${runs[@]}"; do
    # shellcheck disable=SC2206  # $r is our own list of flags and numbers
    cmd=("$bench" -m "$model" -ngl "$ngl" $r -r "$reps" -o md "${extra[@]}")
    say "${cmd[*]#"$work"/bin/}" | tee -a "$log"
    echo | tee -a "$md"
    echo "\`${cmd[*]#"$work"/bin/}\`" >>"$md"
    echo >>"$md"
    start=$SECONDS
    if timeout "$timeout_s" "${cmd[@]}" 2>>"$log" | tee -a "$md"; then
        say "done in $((SECONDS - start)) s" | tee -a "$log"
    else
        rc=${PIPESTATUS[0]}
        status=1
        if [ "$rc" = 124 ]; then echo "bench_llamacpp.sh: killed after ${timeout_s}s (LLAMA_GPU_TIMEOUT)" | tee -a "$log" >&2; fi
        echo "bench_llamacpp.sh: llama-bench failed (exit $rc); the end of $log:" >&2
        tail -n 25 "$log" >&2
        echo "FAILED (exit $rc), see llamacpp.log" >>"$md"
    fi
done
say "results in $md, log in $log"
exit $status
