"""Compare KV-cache encodings on the real Q/K/V rows of one model's forward pass over text.txt.

    python compare.py --model smollm2 [--no-e2e] [--out results_smollm2.json]

Per encoding: bits/value; relative MSE of K and V; attention KL(exact || K-quantized) and the relative
error of the attention output (K and V quantized), per layer (mean over heads/positions, causal and SWA
masks as the model uses); end to end: the forward pass re-run with every layer's cache replaced by its
reconstruction (errors propagate as in a real quantized cache), perplexity and KL of the final
next-token distributions against the exact run.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import time
from pathlib import Path

import numpy as np

import forward as F
import kvcodec as C


def attn_logp(q, k, scale, mask):
    s = (q @ k.T) * np.float32(scale)
    s = np.where(mask, s, -np.inf)
    s -= s.max(1, keepdims=True)
    return s - np.log(np.exp(s).sum(1, keepdims=True))


def outlier_stats(x, rot):
    """x: (T, Hkv, d). Channel spread (max/median channel RMS, worst head) and the kurtosis of the
    row-normalised coordinates before and after the rotation (Gaussian: 3)."""
    ch = np.sqrt((x ** 2).mean(0))  # (Hkv, d)
    spread = float((ch.max(1) / np.median(ch, 1)).max())
    def kurt(z):
        z = z / np.sqrt((z ** 2).mean(-1, keepdims=True))
        return float((z ** 4).mean())
    rows = x.reshape(-1, x.shape[-1])
    crest = np.abs(rows.reshape(-1, 32)).max(1) / np.sqrt((rows.reshape(-1, 32) ** 2).mean(1) + 1e-30)
    return dict(chan_spread=spread, kurt=kurt(rows), kurt_rot=kurt(rot.fwd(rows)), block_crest=float(crest.mean()))


SMOOTH_ALPHA = float(os.environ.get("KV_SMOOTH_ALPHA", "0.75"))
TIE_PAIRS = os.environ.get("KV_TIE_PAIRS", "0") == "1"


def calibrate(cfg, w, name, max_tokens=1024, rec=None):
    """Per layer and KV head, from the forward pass over calib.txt (a different text from the one
    measured): mu_k, mu_v = mean K / V row (position 0 left out: it is the attention sink), and the
    smoothing vector a = (rms_q / rms_k) ** (alpha / 2) per post-RoPE channel (rms_k of the centred K,
    q averaged over the heads of the group), geometric mean 1; alpha = KV_SMOOTH_ALPHA (0.75).
    The cache stores (k - mu_k) * a and the query is divided by a: q.k changes by q.mu_k, the same for
    every key of a query, which softmax ignores. KV_TIE_PAIRS=1 ties a across each RoPE pair (then it
    commutes with RoPE and could be folded into the q/k weights; measured worse)."""
    if rec is None:
        ids, _ = F.tokenize(name, (F.HERE / "calib.txt").read_text(), max_tokens)
        _, rec = F.forward(cfg, w, ids, record=True)
    d, neox = cfg["head_dim"], cfg["arch"] == "gemma3"
    cal = []
    for q, k, v in zip(rec["q"], rec["k"], rec["v"]):
        q, k, v = q[1:], k[1:], v[1:]
        hk = k.shape[1]
        mu_k, mu_v = k.mean(0), v.mean(0)  # (Hkv, d)
        ms_q = (q.reshape(len(q), hk, -1, d) ** 2).mean((0, 2))
        ms_k = ((k - mu_k) ** 2).mean(0)
        ms_q = np.maximum(ms_q, 1e-6 * ms_q.max(1, keepdims=True))
        ms_k = np.maximum(ms_k, 1e-6 * ms_k.max(1, keepdims=True))
        a = (ms_q / ms_k) ** (SMOOTH_ALPHA / 4)  # alpha 1: sqrt of the rms ratio (balances q and k)
        if TIE_PAIRS:
            p = (lambda m: np.concatenate([np.sqrt(m[:, : d // 2] * m[:, d // 2:])] * 2, 1)) if neox else \
                (lambda m: np.repeat(np.sqrt(m[:, 0::2] * m[:, 1::2]), 2, axis=1))
            a = p(a)
        a /= np.exp(np.log(a).mean(1, keepdims=True))
        cal.append(dict(mu_k=mu_k.astype(np.float32), mu_v=mu_v.astype(np.float32), a=a.astype(np.float32)))
    return cal


def make_encodings(d, K, V, seed, cal):
    """name -> (bits/value, k_fn(layer, K), v_fn(layer, V)); the fns return the reconstruction."""
    rot = C.Rotation(d, seed)
    rot_nosign = C.Rotation(d, signs=False)
    g16, g8 = C.gaussian_table(16), C.gaussian_table(8)
    # data tables: Lloyd on the rotated unit coordinates of this model's own K (resp. V) rows, all layers
    rng = np.random.default_rng(0)
    def fit(rows, init):
        z = C.rotated_unit_coords(rows, rot).ravel()
        z = z[rng.permutation(len(z))[:4_000_000]]
        return C.lloyd_fit_samples(z, init)
    tables = {"gauss16": g16, "gauss8": g8,
              "K16": fit(K, g16), "V16": fit(V, g16), "K8": fit(K, g8), "V8": fit(V, g8)}
    rb = 16.0 / d
    plain = lambda f: lambda il, x: f(x)
    same = lambda f: (plain(f), plain(f))
    def cs_k(f):  # centre + smooth K (calibrated), then f
        return lambda il, x: f((x - cal[il]["mu_k"]) * cal[il]["a"]) / cal[il]["a"] + cal[il]["mu_k"]
    def c_v(f):  # centre V: o = sum p (v - mu) + mu exactly
        return lambda il, x: f(x - cal[il]["mu_v"]) + cal[il]["mu_v"]
    def s_k(f):  # smooth only
        return lambda il, x: f(x * cal[il]["a"]) / cal[il]["a"]
    def c_k(f):  # centre only
        return lambda il, x: f(x - cal[il]["mu_k"]) + cal[il]["mu_k"]
    cs = lambda f: (cs_k(f), plain(f))
    r4, r3 = C.rot_codec(g16, rot), C.rot_codec(g8, rot)
    r4ls, r3ls = C.rot_codec(g16, rot, ls_scale=True), C.rot_codec(g8, rot, ls_scale=True)
    rq4, rq3 = C.rot_block(C.q4_0, rot), C.rot_block(C.q3_0, rot)
    enc = {
        "f16": (16, *same(C.f16)),
        "q8_row": (8 + 32.0 / d, *same(C.q8_row)),
        "q8_0": (8.5, *same(C.q8_0)),
        "rot+q8 row": (8 + 32.0 / d, *same(C.rot_block(C.q8_row, rot))),
        "q4_0": (4.5, *same(C.q4_0)),
        "q4_0 +cs": (4.5, *cs(C.q4_0)),
        "rot+q4_0": (4.5, *same(rq4)),
        "rot+q4_0 +cs": (4.5, *cs(rq4)),
        "rot+q4 row": (4 + rb, *same(C.rot_block(lambda y: C.q4_0(y, d), rot))),
        "rot+q4 row +cs": (4 + rb, *cs(C.rot_block(lambda y: C.q4_0(y, d), rot))),
        "r4 gauss": (4 + rb, *same(r4)),
        "r4 gauss ls": (4 + rb, *same(r4ls)),
        "r4 gauss nosign": (4 + rb, *same(C.rot_codec(g16, rot_nosign))),
        "r4 gauss g32": (4.5, *same(C.rot_codec(C.sphere_table(16, 32), rot, group=32))),
        "r4 data": (4 + rb, plain(C.rot_codec(tables["K16"], rot)), plain(C.rot_codec(tables["V16"], rot))),
        "r4 gauss +cs": (4 + rb, *cs(r4)),
        "r4 gauss ls +cs": (4 + rb, *cs(r4ls)),
        "r4 gauss +c": (4 + rb, c_k(r4), plain(r4)),
        "r4 gauss +s": (4 + rb, s_k(r4), plain(r4)),
        "r4 gauss +cs +cv": (4 + rb, cs_k(r4), c_v(r4)),
        "q3_0": (3.5, *same(C.q3_0)),
        "rot+q3_0": (3.5, *same(rq3)),
        "rot+q3_0 +cs": (3.5, *cs(rq3)),
        "rot+q3 row": (3 + rb, *same(C.rot_block(lambda y: C.q3_0(y, d), rot))),
        "r3 gauss": (3 + rb, *same(r3)),
        "r3 gauss ls": (3 + rb, *same(r3ls)),
        "r3 gauss g32": (3.5, *same(C.rot_codec(C.sphere_table(8, 32), rot, group=32))),
        "r3 data": (3 + rb, plain(C.rot_codec(tables["K8"], rot)), plain(C.rot_codec(tables["V8"], rot))),
        "r3 gauss +cs": (3 + rb, *cs(r3)),
        "r3 gauss ls +cs": (3 + rb, *cs(r3ls)),
        "K q8_0 / V r4 gauss": (6.25 + rb / 2, plain(C.q8_0), plain(r4)),
        "K r4 gauss / V q8_0": (6.25 + rb / 2, plain(r4), plain(C.q8_0)),
        "K r4 gauss +cs / V q8_0": (6.25 + rb / 2, cs_k(r4), plain(C.q8_0)),
        "K q8_0 / V r3 gauss": (5.75 + rb / 2, plain(C.q8_0), plain(r3)),
        "K r4 / V r3 gauss +cs": (3.5 + rb, cs_k(r4ls), plain(r3ls)),
    }
    return enc, tables, rot


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=F.FILES, required=True)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--seed", type=lambda s: int(s, 0), default=0x6B76)
    ap.add_argument("--no-e2e", action="store_true")
    ap.add_argument("--only", help="comma-separated encoding names")
    ap.add_argument("--calib", default="calib.txt",
                    help="calib.txt (default: a different text) or first:N (the first N tokens of the measured text)")
    ap.add_argument("--out")
    args = ap.parse_args()

    cfg, w = F.load(args.model)
    ids, _ = F.tokenize(args.model, (F.HERE / "text.txt").read_text(), args.max_tokens)
    T, L, d = len(ids), cfg["n_layer"], cfg["head_dim"]
    t0 = time.time()
    h_ref, rec = F.forward(cfg, w, ids, record=True)
    ref = F.logprobs_stats(w, h_ref, ids)
    print(f"exact: {T} tokens, ppl {ref['ppl']:.3f}, top1 {ref['top1']:.3f} ({time.time() - t0:.0f}s)", flush=True)

    K = np.concatenate([k.reshape(-1, d) for k in rec["k"]])
    V = np.concatenate([v.reshape(-1, d) for v in rec["v"]])
    if args.calib.startswith("first:"):  # online: from the first N tokens of the measured text itself
        n = int(args.calib.split(":")[1])
        cal = calibrate(cfg, w, args.model, rec={t: [x[:n] for x in rec[t]] for t in "qkv"})
    else:
        cal = calibrate(cfg, w, args.model)
    enc, tables, rot = make_encodings(d, K, V, args.seed, cal)
    if args.only:
        enc = {n: enc[n] for n in args.only.split(",")}
    res = dict(model=args.model, tokens=T, head_dim=d, exact=ref, seed=args.seed,
               tables={n: t.tolist() for n, t in tables.items()},
               outliers=dict(K=[outlier_stats(rec["k"][il], rot) for il in range(L)],
                             V=[outlier_stats(rec["v"][il], rot) for il in range(L)]),
               enc={n: dict(bits=e[0], layers=[]) for n, e in enc.items()})

    masks = {s: F.attn_mask(T, cfg["n_swa"] if s else 0) for s in (False, True)}
    scale = 1.0 / np.sqrt(d)
    t0 = time.time()
    for il in range(L):
        q, k, v = rec["q"][il], rec["k"][il], rec["v"][il]
        mask = masks[cfg["is_swa"][il]]
        H, g = q.shape[1], q.shape[1] // k.shape[1]
        exact = []
        for h in range(H):
            lp = attn_logp(q[:, h], k[:, h // g], scale, mask)
            exact.append((lp, np.exp(lp) @ v[:, h // g]))
        for name, (bits, ek, ev) in enc.items():
            kq, vq = ek(il, k), ev(il, v)
            kl, num, den = 0.0, 0.0, 0.0
            for h in range(H):
                lp, o = exact[h]
                lpq = attn_logp(q[:, h], kq[:, h // g], scale, mask)
                with np.errstate(invalid="ignore"):  # -inf - -inf where masked
                    kl += np.where(mask, np.exp(lp) * (lp - lpq), 0).sum() / T
                oq = np.exp(lpq) @ vq[:, h // g]
                num += ((oq - o) ** 2).sum()
                den += (o ** 2).sum()
            res["enc"][name]["layers"].append(dict(
                k_mse=float(((kq - k) ** 2).sum() / (k ** 2).sum()),
                v_mse=float(((vq - v) ** 2).sum() / (v ** 2).sum()),
                attn_kl=float(kl / H), out_err=float(np.sqrt(num / den))))
        print(f"layer {il} done ({time.time() - t0:.0f}s)", flush=True)

    for name, e in res["enc"].items():
        lay = e["layers"]
        for m in ("k_mse", "v_mse", "attn_kl", "out_err"):
            vals = np.array([x[m] for x in lay])
            e[m + "_mean"], e[m + "_worst"], e[m + "_worst_layer"] = float(vals.mean()), float(vals.max()), int(vals.argmax())
    if not args.no_e2e:
        for name, (bits, ek, ev) in enc.items():
            t1 = time.time()
            h, _ = F.forward(cfg, w, ids, kv_hook=lambda il, k, v: (ek(il, k), ev(il, v)))
            res["enc"][name]["e2e"] = F.logprobs_stats(w, h, ids, ref_h=h_ref)
            s = res["enc"][name]["e2e"]
            print(f"e2e {name:18} ppl {s['ppl']:.3f} kl {s['kl_mean']:.5f} ({time.time() - t1:.0f}s)", flush=True)

    out = Path(args.out or F.CACHE / f"results_{args.model}.json")
    out.write_text(json.dumps(res, indent=1))
    print_tables(res)
    print(f"wrote {out}")


def print_tables(res):
    print(f"\n### {res['model']} (head_dim {res['head_dim']}, {res['tokens']} tokens, exact ppl {res['exact']['ppl']:.3f})\n")
    e2e = any("e2e" in e for e in res["enc"].values())
    hdr = "| encoding | bits/value | K rel MSE | V rel MSE | attn KL mean | attn KL worst (layer) | out rel err mean | out rel err worst (layer) |"
    if e2e:
        hdr += " ppl | d ppl | logits KL mean | logits KL p99 | top-1 agree |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for n, e in res["enc"].items():
        row = (f"| {n} | {e['bits']:.3f} | {e['k_mse_mean']:.2e} | {e['v_mse_mean']:.2e} | {e['attn_kl_mean']:.2e} | "
               f"{e['attn_kl_worst']:.2e} ({e['attn_kl_worst_layer']}) | {e['out_err_mean']:.4f} | "
               f"{e['out_err_worst']:.4f} ({e['out_err_worst_layer']}) |")
        if "e2e" in e:
            s = e["e2e"]
            row += (f" {s['ppl']:.3f} | {s['ppl'] - res['exact']['ppl']:+.3f} | {s['kl_mean']:.4f} | {s['kl_p99']:.3f} | "
                    f"{s.get('top1_agree', float('nan')):.3f} |")
        print(row)


if __name__ == "__main__":
    main()
