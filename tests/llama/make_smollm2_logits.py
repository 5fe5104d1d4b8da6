#!/usr/bin/env python3
"""Reference logits of SmolLM2-135M-Instruct (Q4_1 GGUF) for smollm2_reference_test.cpp.

An independent forward in numpy, written the Hugging Face way: weights dequantized by gguf-py, Q/K rows
un-permuted back to Hugging Face's layout and rotated in halves (rotate_half), KV heads repeated for GQA.
Agreement with the C++ reference (GGUF's adjacent rope on permuted rows, cellm::blocks dequantization)
checks both. Writes, per position, the top 16 logits by value.

usage: make_smollm2_logits.py MODEL.gguf > data/smollm2_reference_logits.json
"""
import json
import sys

import gguf
import numpy as np

TOKENS = [504, 3575, 282, 4649, 314]  # "The capital of France is"
TOP = 16


def main(path):
    r = gguf.GGUFReader(path)
    tensors = {t.name: t for t in r.tensors}

    def meta(key):
        field = r.fields[key]
        return field.parts[field.data[0]][0]

    def weight(name):
        t = tensors[name]
        a = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float64)
        return a.reshape(int(t.shape[1]), -1) if len(t.shape) > 1 else a.reshape(-1)

    n_embd = int(meta("llama.embedding_length"))
    n_layer = int(meta("llama.block_count"))
    n_head = int(meta("llama.attention.head_count"))
    n_head_kv = int(meta("llama.attention.head_count_kv"))
    eps = float(meta("llama.attention.layer_norm_rms_epsilon"))
    base = float(meta("llama.rope.freq_base"))
    hd = n_embd // n_head
    n = len(TOKENS)

    def unpermute(w, heads):  # inverse of llama.cpp's convert permute: adjacent rows -> halves rows
        return w.reshape(heads, hd // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    angles = np.arange(n)[:, None] * base ** (-np.arange(0, hd, 2) / hd)[None]
    cos = np.cos(np.concatenate([angles, angles], -1))[:, None]
    sin = np.sin(np.concatenate([angles, angles], -1))[:, None]

    def rope(x):
        return x * cos + np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin

    emb = weight("token_embd.weight")
    x = emb[TOKENS]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for layer in range(n_layer):
        p = f"blk.{layer}."
        h = rms(x, weight(p + "attn_norm.weight"))
        q = rope((h @ unpermute(weight(p + "attn_q.weight"), n_head).T).reshape(n, n_head, hd))
        k = rope((h @ unpermute(weight(p + "attn_k.weight"), n_head_kv).T).reshape(n, n_head_kv, hd))
        v = (h @ weight(p + "attn_v.weight").T).reshape(n, n_head_kv, hd)
        k = np.repeat(k, n_head // n_head_kv, 1)
        v = np.repeat(v, n_head // n_head_kv, 1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        x = x + np.einsum("hqk,khd->qhd", s, v).reshape(n, n_embd) @ weight(p + "attn_output.weight").T
        h = rms(x, weight(p + "ffn_norm.weight"))
        g = h @ weight(p + "ffn_gate.weight").T
        x = x + (g / (1 + np.exp(-g)) * (h @ weight(p + "ffn_up.weight").T)) @ weight(p + "ffn_down.weight").T
    out = weight("output.weight") if "output.weight" in tensors else emb
    logits = rms(x, weight("output_norm.weight")) @ out.T

    rows = []
    for row in logits:
        top = np.argsort(-row)[:TOP]
        rows.append({"ids": [int(i) for i in top], "logits": [round(float(row[i]), 5) for i in top]})
    json.dump({"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "tokens": TOKENS, "positions": rows}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
