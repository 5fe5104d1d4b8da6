#!/usr/bin/env bash
# Makes the SmolLM2-135M-Instruct types that the ARM measurements compare, from the Q4_1 file that
# scripts/fetch_models.sh fetches: Q4_0, Q8_0 and Q4_K_M in ${CELLM_MODELS:-~/.cache/cellm/models}/arm64/,
# with the host llama-quantize that scripts/arm64/build_llamacpp.sh builds (--allow-requantize: the source is
# already quantized, so these are requantized copies, fine for counting instructions, not for quality).
# Prints each file's path. Idempotent: an existing file is kept.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${CELLM_CACHE:-$HOME/.cache/cellm}"
models="${CELLM_MODELS:-$cache/models}"
quantize="${LLAMA_QUANTIZE:-$cache/llamacpp-x86/bin/llama-quantize}"
source_model="$models/SmolLM2-135M-Instruct.Q4_1.gguf"

[[ -f "$source_model" ]] || "$repo/scripts/fetch_models.sh" >/dev/null
if [[ ! -x "$quantize" ]]; then
  echo "make_models.sh: no $quantize; run scripts/arm64/build_llamacpp.sh first" >&2
  exit 1
fi

mkdir -p "$models/arm64"
for type in Q4_0 Q8_0 Q4_K_M; do
  out="$models/arm64/SmolLM2-135M-Instruct.$type.gguf"
  if [[ ! -f "$out" ]]; then
    "$quantize" --allow-requantize "$source_model" "$out.partial" "$type" >"$out.log" 2>&1 \
      || { echo "make_models.sh: llama-quantize $type failed, see $out.log" >&2; exit 1; }
    mv "$out.partial" "$out"
  fi
  echo "$out"
done
