"""Cross-check forward.py against the engine: top-5 next-token log-probs for a few prompts,
numpy forward pass vs `cellm-host run --raw --json --logprobs 5` (first generated token).

    python check_host.py --model smollm2
"""
import argparse
import json
import subprocess

import numpy as np

import forward as F

PROMPTS = [
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a",
    "The capital of France is",
    "Once upon a time, there was a little girl who lived in a village near the",
    "def fibonacci(n):\n    if n <",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=F.FILES, required=True)
    args = ap.parse_args()
    cfg, w = F.load(args.model)
    worst = 0.0
    for prompt in PROMPTS:
        ids, _ = F.tokenize(args.model, prompt, 10**6)
        h, _ = F.forward(cfg, w, ids)
        lg = h[-1] @ w["output.weight"].T
        lp = lg - lg.max()
        lp -= np.log(np.exp(lp).sum())
        out = subprocess.check_output(
            [str(F.REPO / "build/bin/cellm-host"), "run", "--model", str(F.FILES[args.model]), "--raw",
             "--prompt", prompt, "--max-tokens", "1", "--temperature", "0", "--json", "--logprobs", "5",
             "--threads", "1"], text=True, stderr=subprocess.DEVNULL)
        d = json.loads(out)
        host = d["logprobs"][0][1:]  # entry 0 is the chosen token, then the top 5
        ours = np.argsort(-lp)[:5]
        diff = max(abs(lp[e["token"]] - e["logprob"]) for e in host)
        worst = max(worst, diff)
        print(f"{prompt[:40]!r:44} host top5 {[e['token'] for e in host]} ours {ours.tolist()} "
              f"max |dlogprob| {diff:.3f} (prompt tokens host {d['prompt_tokens']}, ours {len(ids)})")
    print(f"worst |dlogprob| over top-5: {worst:.3f}")


if __name__ == "__main__":
    main()
