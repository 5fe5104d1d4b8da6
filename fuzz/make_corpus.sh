#!/usr/bin/env bash
# Writes seed corpora for the fuzz targets into DIR/TARGET (nothing binary is committed):
#   gguf         synthetic models from cellm-make-model (q4_0 tiny / qwen2-tiny / qwen3-tiny, f32 tiny) plus
#                hand-made GGUFs of a few KiB (fuzz/make_seeds.py)
#   cellm        those GGUFs converted by cellm-host convert (plain and --quantize int4)
#   safetensors  a small Hugging Face folder packed as fuzz_safetensors reads it (make_seeds.py), and tests/data/hf's
#   pytorch      the checkpoints and data.pkl streams of tests/safetensors/pytorch_cases.py (valid and hostile)
#   manifest     config/*.toml and the manifests of tests/
#   bpe, spm     texts with flags and token ids (make_seeds.py)
#   chat_template  conversations and the template sources (make_seeds.py)
#   jinja_template, tool_call  chat templates and generated text with tool calls (make_seeds.py)
#   image        the PNG and JPEG test images of tests/data/vision
# Usage: fuzz/make_corpus.sh DIR. CELLM_BIN names the folder holding cellm-make-model and cellm-host
# (default build/bin).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:?usage: $0 DIR}
bin=${CELLM_BIN:-$root/build/bin}
mkdir -p "$out"/{gguf,cellm,safetensors,manifest,bpe,spm,chat_template,image}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 "$root/fuzz/make_seeds.py" "$out"
python3 "$root/tests/safetensors/pytorch_cases.py" seeds "$out"

for spec in tiny:q4_0 qwen2-tiny:q4_0 qwen3-tiny:q4_0 tiny:q8_0; do
  preset=${spec%%:*} type=${spec##*:}
  "$bin/cellm-make-model" --out "$tmp/$preset-$type.gguf" --preset "$preset" --type "$type"
  cp "$tmp/$preset-$type.gguf" "$out/gguf/"
done
for f in "$tmp/tiny-q4_0.gguf" "$out/gguf/small-v3.gguf"; do
  name=$(basename "$f" .gguf)
  "$bin/cellm-host" convert --input "$f" --output "$out/cellm/$name.cellm" >/dev/null 2>&1 ||
    echo "make_corpus: cellm-host convert $name failed (seed skipped)" >&2
done
"$bin/cellm-host" convert --input "$tmp/tiny-q4_0.gguf" --output "$out/cellm/tiny-int4.cellm" --quantize int4 \
  --backend scalar >/dev/null 2>&1 || echo "make_corpus: cellm-host convert --quantize int4 failed (seed skipped)" >&2

cp "$root"/tests/data/vision/*.png "$root"/tests/data/vision/*.jpg "$out/image/"
# The transformers-made folders of tests/data/hf (every model type the plugin reads), packed as fuzz_safetensors
# takes a folder: config.json, tokenizer.json and model.safetensors joined by its separator.
# An Idefics3 folder's processor_config.json goes last.
for d in "$root"/tests/data/hf/*/; do
  { cat "$d/config.json"; printf '\n--8<--\n'; cat "$d/tokenizer.json"; printf '\n--8<--\n'; cat "$d/model.safetensors"
    if [[ -f $d/processor_config.json ]]; then printf '\n--8<--\n'; cat "$d/processor_config.json"; fi; } \
    >"$out/safetensors/hf-$(basename "$d")"
done
for f in "$root"/config/*.toml; do cp "$f" "$out/manifest/"; done
find "$root/tests" -name '*.toml' -exec cp {} "$out/manifest/" \; 2>/dev/null || true
cat >"$out/manifest/every-key.toml" <<'TOML'
[model]
path = "${CELLM_FUZZ_DIR}/m.gguf"
format = "gguf"
arch = "llama"
[backend]
name = "openblas"
threads = 2
[context]
length = 512
block_size = 32
kv_type = "q8"
kv_memory_mib = 64
prefix_cache = false
[sampling]
temperature = 0.0
top_k = 10
top_p = 0.9
min_p = 0.1
repeat_penalty = 1.1
repeat_last_n = 32
seed = 42
max_tokens = 16
stop = ["\n\n", "User:"]
[chat]
template = "chatml"
system_prompt = "Be brief."
[scheduler]
token_budget = 128
max_running = 4
[policy]
max_batch = 2
max_tokens_per_second = 10.5
[plugins]
paths = ["~/plugins", "rel/plugins"]
[[session]]
name = "a"
prompt = "Hi"
priority = "background"
chat = false
temperature = 0.5
[[session]]
name = "b"
prompt = "Hello"
priority = 7
stop = ["x"]
TOML
for t in gguf cellm safetensors pytorch manifest bpe spm chat_template image; do
  echo "make_corpus: $t: $(ls "$out/$t" | wc -l) seeds"
done
