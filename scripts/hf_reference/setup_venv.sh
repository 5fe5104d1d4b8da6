#!/usr/bin/env bash
# Makes the virtual environment the transformers reference generators run in, outside the repo (tooling only).
set -euo pipefail
venv="${CELLM_HF_VENV:-$HOME/.cache/cellm/venv-hf}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q transformers==5.23.0 torch safetensors numpy pillow gguf==0.19.0
echo "$venv/bin/python"
