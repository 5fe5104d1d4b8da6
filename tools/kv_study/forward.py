"""Small numpy forward pass for SmolLM2 (llama arch) and Gemma-3 (gemma3 arch) GGUF files.

Follows llama.cpp's graphs (src/models/llama.cpp, src/models/gemma3.cpp): weights are dequantized
with gguf-py to float32; everything is computed in float32. The KV "cache" is the post-RoPE K rows and
the V rows of every layer; `kv_hook(layer, K, V) -> (K', V')` lets a caller replace what attention reads
(that is what a quantized cache does: llama.cpp attends over the cache view, also during prefill).

Usage as a script (sanity check + dump of Q/K/V for compare.py):
    python forward.py --model smollm2 --dump ~/.cache/cellm/kvstudy/smollm2_qkv.npz
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import subprocess
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MODELS = Path.home() / ".cache/cellm/models"
CACHE = Path.home() / ".cache/cellm/kvstudy"
FILES = {
    "smollm2": MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": MODELS / "gemma-3-270m-q4_k_m.gguf",
}


def _gguf():
    try:
        import gguf  # noqa: F401
    except ImportError:  # fall back to the llama.cpp sources fetched by scripts/fetch_llamacpp_source.sh
        import sys
        src = subprocess.check_output(["bash", str(REPO / "scripts/fetch_llamacpp_source.sh")], text=True).strip()
        sys.path.insert(0, src + "/gguf-py")
    import gguf
    return gguf


def load(name):
    """Returns (cfg, weights) with weights as float32 arrays (out, in); cached as .npz in CACHE."""
    path = FILES[name]
    npz = CACHE / f"{name}_weights.npz"
    gguf = _gguf()
    r = gguf.GGUFReader(str(path))
    arch = r.fields["general.architecture"].contents()
    kv = lambda k, d=None: r.fields[f"{arch}.{k}"].contents() if f"{arch}.{k}" in r.fields else d
    cfg = dict(
        arch=arch,
        n_layer=kv("block_count"),
        n_embd=kv("embedding_length"),
        n_head=kv("attention.head_count"),
        n_head_kv=kv("attention.head_count_kv"),
        eps=kv("attention.layer_norm_rms_epsilon"),
        rope_base=kv("rope.freq_base"),
        n_swa=kv("attention.sliding_window", 0),
    )
    cfg["head_dim"] = kv("attention.key_length", cfg["n_embd"] // cfg["n_head"])
    if arch == "gemma3":
        cfg["rope_base_swa"] = 10000.0  # llama.cpp default (file has no rope.freq_base_swa)
        cfg["is_swa"] = [il % 6 < 5 for il in range(cfg["n_layer"])]  # set_swa_pattern(6)
    else:
        cfg["is_swa"] = [False] * cfg["n_layer"]
    if npz.exists():
        w = dict(np.load(npz))
    else:
        w = {}
        for t in r.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            w[t.name] = a.reshape(-1) if len(t.shape) == 1 else a
        CACHE.mkdir(parents=True, exist_ok=True)
        np.savez(npz, **w)
    if "output.weight" not in w:
        w["output.weight"] = w["token_embd.weight"]
    return cfg, w


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, base, neox):
    """x: (T, H, d). llama arch: adjacent pairs (GGUF q/k are permuted for it); gemma3: NEOX halves."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    cos = np.cos(ang).astype(np.float32)[:, None, :]
    sin = np.sin(ang).astype(np.float32)[:, None, :]
    if neox:
        a, b = x[..., : d // 2], x[..., d // 2:]
    else:
        a, b = x[..., 0::2], x[..., 1::2]
    ra, rb = a * cos - b * sin, a * sin + b * cos
    out = np.empty_like(x)
    if neox:
        out[..., : d // 2], out[..., d // 2:] = ra, rb
    else:
        out[..., 0::2], out[..., 1::2] = ra, rb
    return out


def attn_mask(T, n_swa):
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    m = j <= i
    if n_swa:
        m &= (i - j) < n_swa  # llama.cpp LLAMA_SWA_TYPE_STANDARD
    return m


def attention(q, k, v, scale, mask):
    """q: (T, H, d), k/v: (T, Hkv, d). Returns (T, H, d)."""
    T, H, d = q.shape
    g = H // k.shape[1]
    out = np.empty_like(q)
    for h in range(H):
        s = (q[:, h] @ k[:, h // g].T) * scale
        s = np.where(mask, s, -np.inf)
        s -= s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=1, keepdims=True)
        out[:, h] = p @ v[:, h // g]
    return out


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.float32(0.7978845608) * (x + np.float32(0.044715) * x * x * x)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def forward(cfg, w, ids, kv_hook=None, record=False):
    """Returns (final normed hidden (T, n_embd), rec) where rec = {'q','k','v'}: lists per layer."""
    ids = np.asarray(ids)
    T = len(ids)
    pos = np.arange(T)
    L, H, Hkv, d, eps = cfg["n_layer"], cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"], cfg["eps"]
    gemma = cfg["arch"] == "gemma3"
    x = w["token_embd.weight"][ids].copy()
    if gemma:
        x *= np.float32(np.sqrt(cfg["n_embd"]))
    masks = {False: attn_mask(T, 0), True: attn_mask(T, cfg["n_swa"])}
    rec = {"q": [], "k": [], "v": []}
    for il in range(L):
        p = f"blk.{il}."
        hcur = rms_norm(x, w[p + "attn_norm.weight"], eps)
        q = (hcur @ w[p + "attn_q.weight"].T).reshape(T, H, d)
        k = (hcur @ w[p + "attn_k.weight"].T).reshape(T, Hkv, d)
        v = (hcur @ w[p + "attn_v.weight"].T).reshape(T, Hkv, d)
        if gemma:
            q = rms_norm(q, w[p + "attn_q_norm.weight"], eps)
            k = rms_norm(k, w[p + "attn_k_norm.weight"], eps)
            base = cfg["rope_base_swa"] if cfg["is_swa"][il] else cfg["rope_base"]
        else:
            base = cfg["rope_base"]
        q = rope(q, pos, base, neox=gemma)
        k = rope(k, pos, base, neox=gemma)
        scale = 1.0 / np.sqrt(d)  # gemma3 (non-27B): f_attention_scale = 1/sqrt(head_dim) = 1/sqrt(query_pre_attn_scalar)
        if record:
            rec["q"].append(q)
            rec["k"].append(k)
            rec["v"].append(v)
        if kv_hook is not None:
            k, v = kv_hook(il, k, v)
        a = attention(q, k, v, scale, masks[cfg["is_swa"][il]]).reshape(T, H * d)
        a = a @ w[p + "attn_output.weight"].T
        if gemma:
            a = rms_norm(a, w[p + "post_attention_norm.weight"], eps)
        x = x + a
        hcur = rms_norm(x, w[p + "ffn_norm.weight"], eps)
        gate = hcur @ w[p + "ffn_gate.weight"].T
        up = hcur @ w[p + "ffn_up.weight"].T
        f = ((gelu_tanh(gate) if gemma else silu(gate)) * up) @ w[p + "ffn_down.weight"].T
        if gemma:
            f = rms_norm(f, w[p + "post_ffw_norm.weight"], eps)
        x = x + f
    return rms_norm(x, w["output_norm.weight"], eps), rec


def logprobs_stats(w, h, ids, ref_h=None, chunk=128):
    """Next-token NLL/top-1 of h on ids; with ref_h also KL(ref || h) of the final distributions.
    Computed in chunks so the (T, vocab) logits never exist at once."""
    out = w["output.weight"]
    nll, top1, kl, agree = [], [], [], []
    for s in range(0, len(ids) - 1, chunk):
        e = min(s + chunk, len(ids) - 1)
        lg = h[s:e] @ out.T
        lp = lg - lg.max(1, keepdims=True)
        lp -= np.log(np.exp(lp).sum(1, keepdims=True))
        tgt = np.asarray(ids[s + 1:e + 1])
        nll.append(-lp[np.arange(e - s), tgt])
        top1.append(lp.argmax(1) == tgt)
        if ref_h is not None:
            lr = ref_h[s:e] @ out.T
            lr -= lr.max(1, keepdims=True)
            lr -= np.log(np.exp(lr).sum(1, keepdims=True))
            kl.append((np.exp(lr) * (lr - lp)).sum(1))
            agree.append(lr.argmax(1) == lp.argmax(1))
    nll = np.concatenate(nll)
    res = dict(ppl=float(np.exp(nll.mean())), nll=float(nll.mean()), top1=float(np.concatenate(top1).mean()))
    if ref_h is not None:
        kl = np.concatenate(kl)
        res.update(kl_mean=float(kl.mean()), kl_p99=float(np.percentile(kl, 99)), kl_max=float(kl.max()),
                   top1_agree=float(np.concatenate(agree).mean()))
    return res


def tokenize(name, text, max_tokens):
    """Token ids from cellm-host (the engine's own tokenizer). Gemma gets its BOS (add_bos_token=true);
    SmolLM2's GGUF says add_bos_token=false."""
    cmd = [str(REPO / "build/bin/cellm-host"), "tokenize", "--model", str(FILES[name]), "--text", text, "--json"]
    if name == "gemma3":
        cmd.append("--add-bos")
    d = json.loads(subprocess.check_output(cmd, text=True))
    return d["ids"][:max_tokens], d["pieces"][:max_tokens]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=FILES, required=True)
    ap.add_argument("--text", default=str(HERE / "text.txt"))
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--dump", help="write ids, Q, K, V (post-RoPE/norm) and final hidden to this .npz")
    args = ap.parse_args()
    cfg, w = load(args.model)
    ids, pieces = tokenize(args.model, Path(args.text).read_text(), args.max_tokens)
    t0 = time.time()
    h, rec = forward(cfg, w, ids, record=bool(args.dump))
    st = logprobs_stats(w, h, ids)
    print(json.dumps(dict(model=args.model, tokens=len(ids), seconds=round(time.time() - t0, 1), **st)))
    # a few greedy predictions, for eyeballing
    lg = h[:40] @ w["output.weight"].T
    print("next-token argmax ids:", [(pieces[i], int(lg[i].argmax()), ids[i + 1]) for i in range(0, 40, 4)])
    if args.dump:
        Path(args.dump).parent.mkdir(parents=True, exist_ok=True)
        np.savez(args.dump, ids=np.array(ids), h=h,
                 **{f"{t}{il}": rec[t][il].astype(np.float32) for t in "qkv" for il in range(cfg["n_layer"])})


if __name__ == "__main__":
    main()
