#!/usr/bin/env bash
# Fetches the text that `cellm-host perplexity` is measured and tested on into ${CELLM_CACHE:-~/.cache/cellm}/text:
# John Milton's Paradise Lost (1667, public domain), Project Gutenberg's February 1992 etext (plrabn12.txt, of the
# Canterbury corpus), as the sdist of the PyPI package Brotli 1.2.1 ships it among its test data. `pip download`
# fetches the sdist without installing anything. The CRLF line ends, trailing spaces and the DOS end-of-file marks
# (^Z) are taken out; the result is 459,767 bytes of English verse, 121,413 tokens for SmolLM2 and 116,926 for
# Gemma 3. Prints the file's path. Idempotent: a file with the expected checksum is kept.
set -euo pipefail

readonly package="Brotli==1.2.1"
readonly sdist_name="brotli-1.2.1.tar.gz"
readonly member="brotli-1.2.1/tests/testdata/plrabn12.txt"
readonly member_sha256="07e2e0b461af78c7c647cb53dab39de560198e16f799b4516eccf0fbd69f764c"
readonly text_sha256="1da0b3b493f6350cc93ec6492aa26b8b0567d3bed272bc4b6a4d16b45c217866"
cache="${CELLM_CACHE:-$HOME/.cache/cellm}"
target="$cache/text/paradise-lost.txt"

is_valid() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$text_sha256" ]]; }

if is_valid "$target"; then
  echo "$target"
  exit 0
fi

if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "fetch_text.sh: python3 -m pip is not available; install it (Debian: apt-get install python3-pip)" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sdist="$cache/dl/$sdist_name"
if [[ ! -f "$sdist" ]]; then
  echo "fetch_text.sh: downloading the $package sdist (about 7 MB, once)" >&2
  mkdir -p "$cache/dl"
  python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$work" "$package" >&2
  mv "$work/$sdist_name" "$sdist"
fi
tar -xzf "$sdist" --no-same-owner -C "$work" "$member"
if [[ "$(sha256sum "$work/$member" | cut -d' ' -f1)" != "$member_sha256" ]]; then
  echo "fetch_text.sh: $member in $sdist is not the expected file (sha256 $member_sha256)" >&2
  exit 1
fi
mkdir -p "$(dirname "$target")"
tr -d '\r\032' < "$work/$member" | sed -e 's/[[:space:]]*$//' > "$target.partial"
if ! is_valid "$target.partial"; then
  rm -f "$target.partial"
  echo "fetch_text.sh: the cleaned text does not have the expected sha256 $text_sha256" >&2
  exit 1
fi
mv "$target.partial" "$target"
echo "$target"
