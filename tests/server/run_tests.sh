#!/usr/bin/env bash
# Runs the `cellm-host serve` tests (tests/server/test_*.py) with the official openai Python client.
# Usage: tests/server/run_tests.sh [CELLM_HOST [MODEL]] [pytest arguments...]
#   CELLM_HOST defaults to build/bin/cellm-host, MODEL to SmolLM2-135M-Instruct Q4_1 from scripts/fetch_models.sh
#   (a MODEL without a folder is looked up where that script puts models: $CELLM_MODELS, else ~/.cache/cellm/models).
# The Python packages live in a virtual environment outside the repository (CELLM_SERVER_VENV, default
# ~/.cache/cellm/venv-server), created on first use and reused while its pinned versions match.
# Exits 77 (ctest's skip code) when the model file is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

cellm_host="$repo/build/bin/cellm-host"
models="${CELLM_MODELS:-$HOME/.cache/cellm/models}"
model="$models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ $# -gt 0 && "$1" != -* ]]; then cellm_host="$1"; shift; fi
if [[ $# -gt 0 && "$1" != -* ]]; then model="$1"; shift; fi
[[ $model == */* ]] || model="$models/$model"  # a bare name: where scripts/fetch_models.sh puts models

if [[ ! -f "$model" ]]; then
  echo "skipped: model $model not found (scripts/fetch_models.sh fetches it)"
  exit 77
fi
if [[ ! -x "$cellm_host" ]]; then
  echo "cellm-host not found at $cellm_host" >&2
  exit 1
fi
cellm_host="$(readlink -f "$cellm_host")"  # pytest runs from this folder
model="$(readlink -f "$model")"

venv="${CELLM_SERVER_VENV:-$HOME/.cache/cellm/venv-server}"
requirements="openai==3.57.0 pytest==8.4.2 httpx==0.28.1 jsonschema==4.26.0"
if [[ ! -x "$venv/bin/python" || "$(cat "$venv/.cellm-requirements" 2>/dev/null)" != "$requirements" ]]; then
  echo "setting up $venv ($requirements)"
  python3 -m venv "$venv"
  # shellcheck disable=SC2086  # the pins are separate words
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $requirements
  echo "$requirements" > "$venv/.cellm-requirements"
fi

cd "$here"
exec "$venv/bin/python" -m pytest -p no:cacheprovider -v "$here" --cellm-host="$cellm_host" --model="$model" "$@"
