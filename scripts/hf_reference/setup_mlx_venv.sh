#!/usr/bin/env bash
# Makes the virtual environment that scripts/hf_reference/mlx_quantized.py runs in, outside the repo (tooling only):
# mlx with its CPU backend for Linux (mlx[cpu] pulls the mlx-cpu wheel), mlx-lm's converter, and transformers to
# build the unquantized model it converts. torch's CPU wheel index is tried once; where it cannot be reached, plain
# PyPI torch (which brings CUDA libraries it never uses here) is the fallback.
set -euo pipefail
venv="${CELLM_MLX_VENV:-$HOME/.cache/cellm/venv-mlx}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q --retries 0 --timeout 10 torch==2.15.0 --index-url https://download.pytorch.org/whl/cpu \
  2>/dev/null || "$venv/bin/pip" install -q torch==2.15.0
"$venv/bin/pip" install -q "mlx[cpu]==0.32.4" mlx-lm==0.32.2 transformers==5.23.0 safetensors==0.8.0 numpy==2.4.6
"$venv/bin/python" -c "import mlx.core as mx; print('mlx', mx.__version__, mx.default_device())"
echo "$venv/bin/python"
