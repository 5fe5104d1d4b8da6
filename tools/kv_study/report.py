"""Markdown tables from compare.py's results JSON files.

    python report.py ~/.cache/cellm/kvstudy/results_smollm2.json ~/.cache/cellm/kvstudy/results_gemma3.json
"""
import sys
import json

import numpy as np


def tables(res):
    ex = res["exact"]
    print(f"\n### {res['model']} (head_dim {res['head_dim']}, {res['tokens']} tokens; exact ppl {ex['ppl']:.3f}, "
          f"top-1 {ex['top1']:.3f})\n")
    print("| encoding | bits/value | K rel MSE | V rel MSE | attn KL mean | attn KL worst (layer) | "
          "out rel err mean | out rel err worst (layer) | ppl | logits KL mean | KL p99 | top-1 agree |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n, e in res["enc"].items():
        s = e.get("e2e")
        tail = (f"{s['ppl']:.2f} ({s['ppl'] - ex['ppl']:+.2f}) | {s['kl_mean']:.4f} | {s['kl_p99']:.3f} | "
                f"{s['top1_agree']:.3f} |") if s else " | | | |"
        print(f"| {n} | {e['bits']:.3f} | {e['k_mse_mean']:.2e} | {e['v_mse_mean']:.2e} | {e['attn_kl_mean']:.4f} | "
              f"{e['attn_kl_worst']:.4f} ({e['attn_kl_worst_layer']}) | {e['out_err_mean']:.3f} | "
              f"{e['out_err_worst']:.3f} ({e['out_err_worst_layer']}) | " + tail)


def outliers(res):
    print(f"\n{res['model']}: per layer, max/median channel RMS (worst KV head), kurtosis of row-normalised "
          "coordinates before -> after the rotation (Gaussian 3; sphere marginal 3d/(d+2)):\n")
    for t in "KV":
        o = res["outliers"][t]
        sp = np.array([x["chan_spread"] for x in o])
        ku = np.array([x["kurt"] for x in o])
        kr = np.array([x["kurt_rot"] for x in o])
        print(f"- {t}: channel spread median {np.median(sp):.1f}, max {sp.max():.1f} (layer {sp.argmax()}); "
              f"kurtosis median {np.median(ku):.1f}, max {ku.max():.1f} -> after rotation median {np.median(kr):.2f}, "
              f"max {kr.max():.2f}")


def main():
    for p in sys.argv[1:]:
        res = json.load(open(p))
        tables(res)
        outliers(res)
        print("\nfitted tables (sqrt(d) * rotated unit coordinate):")
        for n, t in res["tables"].items():
            print(f"- {n}: " + ", ".join(f"{x:+.3f}" for x in t))


if __name__ == "__main__":
    main()
