#!/usr/bin/env python3
"""Passkey retrieval grid: how many (length, depth) cells each KV cache type retrieves.

For each prompt length L (tokens, measured with `cellm-host tokenize`) and each depth (a share of the filler),
builds a prompt of the classic form: filler sentences ("The grass is green. The sky is blue. ...") with one
sentence "The pass key is NNNNN. Remember it. NNNNN is the pass key." inserted at that depth, ending with
"What is the pass key? The pass key is". It runs `cellm-host run --raw --temperature 0` on it once per KV type
and counts the cell as retrieved when the generated text contains the number. Every KV type sees the same
prompts (the pass keys come from a seeded RNG, one per cell), so the comparison between types is paired.

Prints a table (rows: KV type; columns: lengths; cells: retrieved / depths; a total per type) and, with
--json, writes every cell's result. Standard library only; one cellm-host process at a time.

Example:
  nice -n 10 scripts/passkey_grid.py --model ~/.cache/cellm/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --json passkey-smollm2.json
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time

FILLER = [
    "The grass is green.",
    "The sky is blue.",
    "The sun is yellow.",
    "Here we go.",
    "There and back again.",
]
QUESTION = "What is the pass key? The pass key is"


def needle(key):
    return f"The pass key is {key}. Remember it. {key} is the pass key."


def build_prompt(n_sentences, depth, key):
    """n_sentences filler sentences (cycling through FILLER), the needle after round(depth * n) of them."""
    sentences = [FILLER[i % len(FILLER)] for i in range(n_sentences)]
    at = round(depth * n_sentences)
    sentences.insert(at, needle(key))
    return " ".join(sentences) + " " + QUESTION


class Host:
    def __init__(self, args):
        self.binary = args.binary
        self.model = args.model
        self.env = dict(os.environ)
        if not args.no_lib_path:
            # A copied cellm-host still carries the build tree's RUNPATH for libcellm.so, and libcellm.so finds
            # the plugins next to itself; LD_LIBRARY_PATH comes before RUNPATH, so the copy's own library and
            # plugins are used.
            lib_dir = os.path.dirname(os.path.abspath(self.binary))
            old = self.env.get("LD_LIBRARY_PATH", "")
            self.env["LD_LIBRARY_PATH"] = lib_dir + (":" + old if old else "")
        self.token_cache = {}

    def count_tokens(self, text):
        if text in self.token_cache:
            return self.token_cache[text]
        out = subprocess.run([self.binary, "tokenize", "--model", self.model, "--text", text, "--json"],
                             env=self.env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"passkey_grid: tokenize failed (rc {out.returncode}): {out.stderr.strip()}")
        n = len(json.loads(out.stdout)["ids"])
        self.token_cache[text] = n
        return n

    def run(self, prompt, kv_type, args):
        cmd = [self.binary, "run", "--model", self.model, "--prompt", prompt, "--raw", "--temperature", "0",
               "--seed", "0", "--max-tokens", str(args.max_tokens), "--kv-type", kv_type,
               "--context", str(args.context), "--json"]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        if args.manifest:
            cmd += ["--manifest", args.manifest]
        cmd += args.extra
        start = time.monotonic()
        out = subprocess.run(cmd, env=self.env, capture_output=True, text=True)
        wall = time.monotonic() - start
        if out.returncode != 0:
            return {"error": out.stderr.strip()[-2000:] or f"rc {out.returncode}", "wall_s": wall}
        try:
            result = json.loads(out.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": "unreadable output: " + out.stdout[-500:], "wall_s": wall}
        if not result.get("error"):  # run --json always has an "error" field, empty on success
            result.pop("error", None)
        result["wall_s"] = wall
        return result


def calibrate(host, target):
    """The number of filler sentences whose prompt (needle at depth 0, a 5-digit key) comes nearest to target
    tokens without exceeding it."""
    def tokens(n):
        return host.count_tokens(build_prompt(n, 0.0, 12345))

    lo_n, hi_n = 10, 200
    lo_t, hi_t = tokens(lo_n), tokens(hi_n)
    per = (hi_t - lo_t) / (hi_n - lo_n)  # tokens per sentence; tokenizing the repeated text is nearly linear
    n = max(1, round(lo_n + (target - lo_t) / per))
    for _ in range(5):
        step = round((target - tokens(n)) / per)
        if step == 0:
            break
        n = max(1, n + step)
    while tokens(n) > target and n > 1:
        n -= 1
    while tokens(n + 1) <= target:
        n += 1
    return n, tokens(n)


def table(cells, kv_types, lengths):
    """Rows = KV type, columns = lengths, cells = retrieved / cells run; a total per type."""
    lines = ["| KV type | " + " | ".join(str(L) for L in lengths) + " | total |", "|---" * (len(lengths) + 2) + "|"]
    summary = {}
    for kv in kv_types:
        row, total, count = [], 0, 0
        for L in lengths:
            these = [c for c in cells if c["kv_type"] == kv and c["length"] == L]
            got = sum(c["retrieved"] for c in these)
            row.append(f"{got}/{len(these)}" if these else "-")
            total += got
            count += len(these)
        summary[kv] = {"retrieved": total, "cells": count}
        lines.append(f"| {kv} | " + " | ".join(row) + f" | {total}/{count} |")
    return lines, summary


def parse_list(text, kind):
    return [kind(x) for x in text.split(",") if x.strip()]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--model", help="model file or folder passed to cellm-host")
    p.add_argument("--manifest", help="optional manifest passed to cellm-host run (its settings, --model wins)")
    p.add_argument("--kv-types", default="f16,q8,r4,r3", help="comma-separated KV types (default f16,q8,r4,r3)")
    p.add_argument("--lengths", default="1024,2048,4096,8000",
                   help="comma-separated prompt lengths in tokens (default 1024,2048,4096,8000)")
    p.add_argument("--depths", type=int, default=10,
                   help="number of depths, evenly spaced from 0 to 100%% of the filler (default 10: 0, 11, ..., 100%%)")
    p.add_argument("--depth-percents", help="comma-separated depths in percent of the filler (instead of --depths)")
    p.add_argument("--binary", default="build/bin/cellm-host", help="cellm-host (default build/bin/cellm-host)")
    p.add_argument("--context", type=int, default=8192,
                   help="engine context length (cellm-host run --context; default 8192); every prompt plus "
                        "--max-tokens must fit")
    p.add_argument("--max-tokens", type=int, default=8, help="tokens generated per cell (default 8)")
    p.add_argument("--threads", type=int, default=1, help="backend threads, cellm-host run --threads (default 1; "
                                                           "0 leaves it to the model or manifest)")
    p.add_argument("--seed", type=int, default=1234, help="seed of the pass-key RNG (default 1234)")
    p.add_argument("--json", metavar="OUT", help="write every cell's result here (rewritten after each cell)")
    p.add_argument("--time-limit", type=float, default=0,
                   help="seconds; start no new (length, depth) cell after this, so every KV type has the same "
                        "cells (default 0: no limit)")
    p.add_argument("--table", metavar="JSON", nargs="+",
                   help="only print the table of earlier runs' JSON files (merged) and exit")
    p.add_argument("--no-lib-path", action="store_true",
                   help="do not put the binary's folder on LD_LIBRARY_PATH (see Host.__init__)")
    p.add_argument("extra", nargs="*", help="after --: further arguments for cellm-host run")
    args = p.parse_args()

    if args.table:
        cells, kv_types, lengths = [], [], []
        for path in args.table:
            with open(path) as f:
                r = json.load(f)
            cells += r["cells"]
            kv_types += [k for k in r["kv_types"] if k not in kv_types]
            lengths += [L for L in r["lengths"] if L not in lengths and any(c["length"] == L for c in r["cells"])]
        print("\n".join(table(cells, kv_types, sorted(lengths))[0]))
        return 0
    if not args.model:
        p.error("--model is required")

    kv_types = parse_list(args.kv_types, str)
    lengths = parse_list(args.lengths, int)
    if args.depth_percents:
        depths = [d / 100.0 for d in parse_list(args.depth_percents, float)]
    else:
        n = args.depths
        depths = [i / (n - 1) for i in range(n)] if n > 1 else [0.0]

    host = Host(args)
    rng = random.Random(args.seed)
    keys = {(L, d): rng.randint(10000, 99999) for L in lengths for d in range(len(depths))}

    grid_start = time.monotonic()
    report = {
        "model": args.model, "binary": args.binary, "kv_types": kv_types, "lengths": lengths,
        "depths": depths, "context": args.context, "max_tokens": args.max_tokens, "threads": args.threads,
        "seed": args.seed, "extra": args.extra, "calibration": {}, "cells": [],
    }

    def save():
        report["wall_s"] = time.monotonic() - grid_start
        if args.json:
            tmp = args.json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(report, f, indent=1)
            os.replace(tmp, args.json)

    # Lengths outermost, then depths, then KV types: a grid stopped early (--time-limit) has every KV type at
    # the same cells.
    stopped = False
    for L in lengths:
        if stopped:
            break
        n_sent, n_tok = calibrate(host, L)
        report["calibration"][str(L)] = {"filler_sentences": n_sent, "prompt_tokens": n_tok}
        print(f"# length {L}: {n_sent} filler sentences, {n_tok} prompt tokens (tokenize, without BOS)",
              file=sys.stderr, flush=True)
        for di, depth in enumerate(depths):
            if args.time_limit and time.monotonic() - grid_start > args.time_limit:
                print(f"# time limit of {args.time_limit:.0f} s reached: stopping before length {L}, depth "
                      f"{depth * 100:.1f}%", file=sys.stderr, flush=True)
                report["stopped_early"] = {"length": L, "depth": depth}
                stopped = True
                break
            key = keys[(L, di)]
            prompt = build_prompt(n_sent, depth, key)
            for kv in kv_types:
                r = host.run(prompt, kv, args)
                text = r.get("text", "")
                ok = "error" not in r and str(key) in text
                cell = {
                    "kv_type": kv, "length": L, "depth": depth, "depth_index": di, "key": key,
                    "retrieved": ok, "text": text, "prompt_tokens": r.get("prompt_tokens"),
                    "generated_tokens": r.get("generated_tokens"), "finish_reason": r.get("finish_reason"),
                    "prefill_tok_s": r.get("prefill_tok_s"), "wall_s": round(r["wall_s"], 3),
                }
                if "error" in r:
                    cell["error"] = r["error"]
                pt = r.get("prompt_tokens")
                if pt is not None and pt + args.max_tokens > args.context:
                    cell["warning"] = f"prompt {pt} + {args.max_tokens} tokens exceeds context {args.context}"
                report["cells"].append(cell)
                save()
                mark = "ok  " if ok else ("ERR " if "error" in r else "miss")
                print(f"{mark} {kv:>4} L={L:<5} depth={depth * 100:5.1f}% key={key} "
                      f"prompt={pt} {r['wall_s']:6.1f}s text={text!r}"
                      + (f" error={r['error'][-200:]!r}" if "error" in r else ""), file=sys.stderr, flush=True)

    lines, report["summary"] = table(report["cells"], kv_types, lengths)
    save()
    print("\n".join(lines))
    print(f"# wall time {report['wall_s']:.0f} s", file=sys.stderr)
    errors = [c for c in report["cells"] if "error" in c]
    if errors:
        print(f"# {len(errors)} cells failed to run (see the JSON's error fields)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
