#!/usr/bin/env bash
# What each KV cache encoding costs in prediction quality, cellm's beside llama.cpp's, on the same text, model and
# context (docs/benchmarks.md, "KV cache encodings"): perplexity, and KL divergence and top-1 agreement against the
# same engine's f16 cache. cellm: f16, q8, r4, r3; llama.cpp's llama-perplexity (bench/build_llamacpp_tool.sh,
# flash attention on): f16, q8_0, q4_0 for both K and V.
#   bench/kv_perplexity.sh MANIFEST MODEL [CONTEXT] [CHUNKS]
# Writes logits files to ${OUT:-/tmp/cellm-kv-perplexity} and prints each run's summary lines. SKIP_CELLM=1 or
# SKIP_LLAMA=1 leaves out one engine's runs; CELLM_KV_TYPES (default "q8 r4 r3") the cellm types measured.
set -euo pipefail
cd "$(dirname "$0")/.."
manifest="$1" model="$2" context="${3:-2048}" chunks="${4:-8}"
out="${OUT:-/tmp/cellm-kv-perplexity}"
mkdir -p "$out"
text="$(scripts/fetch_text.sh)"
name="$(basename "$model" .gguf)-$context"
summary() { grep -E "Final estimate|Mean PPL\(Q\)/PPL\(base\)|Mean    KLD|99.0%   KLD|Same top p" || true; }

if [[ "${SKIP_CELLM:-0}" != 1 ]]; then
echo "== cellm f16"
build/bin/cellm-host perplexity --manifest "$manifest" --file "$text" --context "$context" --chunks "$chunks" \
  --kv-type f16 --save-logits "$out/$name-cellm-f16.bin" 2>&1 | summary
for kv in ${CELLM_KV_TYPES:-q8 r4 r3}; do
  echo "== cellm $kv"
  build/bin/cellm-host perplexity --manifest "$manifest" --file "$text" --context "$context" --chunks "$chunks" \
    --kv-type "$kv" --kl-divergence "$out/$name-cellm-f16.bin" 2>&1 | summary
done
fi

if [[ "${SKIP_LLAMA:-0}" == 1 ]]; then exit 0; fi
ppl="$(bench/build_llamacpp_tool.sh llama-perplexity)"
llama=("$ppl" -m "$model" -f "$text" -c "$context" --chunks "$chunks" -t "${THREADS:-2}" -fa on --no-repack)
echo "== llama.cpp f16"
"${llama[@]}" -ctk f16 -ctv f16 --kl-divergence-base "$out/$name-llama-f16.bin" 2>&1 | summary
for kv in q8_0 q4_0; do
  echo "== llama.cpp $kv"
  "${llama[@]}" -ctk "$kv" -ctv "$kv" --kl-divergence-base "$out/$name-llama-f16.bin" --kl-divergence 2>&1 | summary
done
