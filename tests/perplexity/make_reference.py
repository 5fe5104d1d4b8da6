#!/usr/bin/env python3
"""Writes tests/perplexity/<model>-c<context>-k<chunks>.json: llama.cpp's perplexity of one of the real models
over the text of scripts/fetch_text.sh (Paradise Lost), the reference `cellm-host perplexity` is checked against
(tests/perplexity/CMakeLists.txt: within 0.5%).

llama-perplexity is the llama.cpp that llama-cpp-python 0.3.36's sdist vendors, built by
bench/build_llamacpp_tool.sh; it runs with an f16 KV cache (-ctk f16 -ctv f16, cellm's default [context].kv_type),
its weight repacking off (--no-repack: on this project's VMs the AMX repacking faults with SIGILL) and by default
flash attention off (-fa off): its CPU flash attention sums the f16 value rows in an f16 accumulator and moves
SmolLM2's perplexity by about 0.3%; without it attention rounds q and the attention weights to f16 for their
products with the cache and sums in float, as cellm's ATTENTION does (docs/correctness.md, What MATMUL means).

    tests/perplexity/make_reference.py smollm2-135m 512 4 [--threads 2] [--flash-attn on] [--kl-divergence-base FILE]

--kl-divergence-base also keeps llama.cpp's log-probabilities in FILE, for `cellm-host perplexity --kl-divergence
FILE` (cellm against llama.cpp position by position). Prints the JSON.
"""
import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODELS = Path(os.environ.get("CELLM_MODELS", Path.home() / ".cache/cellm/models")).expanduser()
# name: the file in $CELLM_MODELS (scripts/fetch_models.sh)
FILES = {"smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma3-270m": "gemma-3-270m-q4_k_m.gguf"}


def output_of(command):
    return subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", choices=sorted(FILES))
    ap.add_argument("context", type=int)
    ap.add_argument("chunks", type=int)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--flash-attn", choices=["on", "off"], default="off")
    ap.add_argument("--kl-divergence-base", type=Path)
    args = ap.parse_args()

    model = MODELS / FILES[args.model]
    if not model.is_file():
        sys.exit(f"make_reference.py: {model} is missing; run scripts/fetch_models.sh")
    text = Path(output_of([str(REPO / "scripts/fetch_text.sh")]))
    binary = output_of([str(REPO / "bench/build_llamacpp_tool.sh"), "llama-perplexity"])

    command = [binary, "-m", str(model), "-f", str(text), "-c", str(args.context), "--chunks", str(args.chunks),
               "-ctk", "f16", "-ctv", "f16", "-fa", args.flash_attn, "-t", str(args.threads), "--no-repack"]
    if args.kl_divergence_base:
        command += ["--kl-divergence-base", str(args.kl_divergence_base)]
    print("make_reference.py: " + shlex.join(command), file=sys.stderr)
    run = subprocess.run(command, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    final = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", run.stderr)
    chunks = re.findall(r"\[(\d+)\]([0-9.]+),", run.stdout)
    if final is None or len(chunks) != args.chunks:
        sys.exit("make_reference.py: llama-perplexity printed no final estimate for every chunk:\n" + run.stderr[-2000:])

    reference = {
        "model": model.name,
        "text": text.name,
        "text_sha256": hashlib.sha256(text.read_bytes()).hexdigest(),
        "context": args.context,
        "chunks": args.chunks,
        "kv_type": "f16",
        "flash_attn": args.flash_attn,
        "ppl": float(final.group(1)),
        "ppl_uncertainty": float(final.group(2)),
        "chunk_ppl": [float(v) for _, v in chunks],
        "reference": "llama-perplexity of llama-cpp-python 0.3.36's llama.cpp (bench/build_llamacpp_tool.sh)",
        "command": shlex.join([Path(binary).name] + [c if not c.startswith("/") else Path(c).name for c in command[1:]]),
    }
    suffix = "-fa" if args.flash_attn == "on" else ""
    out = REPO / "tests/perplexity" / f"{args.model}-c{args.context}-k{args.chunks}{suffix}.json"
    out.write_text(json.dumps(reference, indent=2) + "\n")
    print(json.dumps(reference, indent=2))


if __name__ == "__main__":
    main()
