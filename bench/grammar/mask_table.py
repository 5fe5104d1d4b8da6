#!/usr/bin/env python3
"""The mask-time table of docs/benchmarks.md from grammar_mask_bench --times files (one or more shards each).

  mask_table.py LABEL=FILE[,FILE...] ...

One row per label (a vocabulary): schemas compiled, compile time (mean, p50, p99, max), masks timed, mask time
per token (mean, p50, p99, max), and the share of masks over 1 ms. Standard library only.
"""
import sys


def quantile(sorted_values, q):
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main():
    if len(sys.argv) < 2 or any("=" not in a for a in sys.argv[1:]):
        sys.exit(__doc__)
    print("| vocabulary | schemas compiled | compile mean / p50 / p99 / max (ms) | masks | mask mean | p50 | p99 "
          "| max | over 1 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for arg in sys.argv[1:]:
        label, files = arg.split("=", 1)
        compile_ms, mask_us = [], []
        for path in files.split(","):
            with open(path) as f:
                for line in f:
                    kind, value = line.split()[:2]
                    (compile_ms if kind == "compile" else mask_us).append(float(value))
        compile_ms.sort()
        mask_us.sort()
        mean_c = sum(compile_ms) / max(1, len(compile_ms))
        mean_m = sum(mask_us) / max(1, len(mask_us))
        slow = sum(1 for v in mask_us if v > 1000) / max(1, len(mask_us))
        print(f"| {label} | {len(compile_ms):,} | {mean_c:.1f} / {quantile(compile_ms, .5):.1f} / "
              f"{quantile(compile_ms, .99):.0f} / {compile_ms[-1] if compile_ms else 0:.0f} | {len(mask_us):,} | "
              f"{mean_m:.1f} us | {quantile(mask_us, .5):.1f} us | {quantile(mask_us, .99):.0f} us | "
              f"{mask_us[-1] / 1000 if mask_us else 0:.1f} ms | {100 * slow:.2f} % |")


if __name__ == "__main__":
    main()
