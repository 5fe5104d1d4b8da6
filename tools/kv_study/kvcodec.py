"""KV-row encodings compared by compare.py. Every function maps rows x (..., d) float32 to their
reconstruction (what attention would read after decode), with scales/norms rounded to fp16 as stored.

Block family (llama.cpp ggml-quants.c reference quantizers):
  q8_0   32-value blocks, fp16 d = amax/127, int8 codes             8.5 bits/value
  q4_0   32-value blocks, fp16 d = max/-8, codes 0..15 -> (q-8)*d    4.5 bits/value
  q3_0   3-bit analogue: d = max/-4, codes 0..7 -> (q-4)*d          3.5 bits/value (no such llama.cpp type)
  q8_row cellm's current q8 KV: one fp32 scale amax/127 per (token, KV head) row
Rotated family (TurboQuant-style, simplified):
  y = H D x / sqrt(d)   (D = seeded +-1 signs, H = Walsh-Hadamard: orthogonal, so q.k = (Rq).(Rk))
  store idx_i = nearest level of table[] to u_i = sqrt(d) * y_i / ||y|| and one fp16 scale n
  (||y||, or with ls_scale the least-squares ||y|| * <u, c>/<c, c>)
  decode x^ = R^T (n / sqrt(d) * table[idx])                       b + 16/d bits/value
"""
import numpy as np

F16 = np.float16


def _blocks(x, bs=32):
    return x.reshape(-1, bs)


def q8_0(x):
    b = _blocks(x)
    amax = np.abs(b).max(1, keepdims=True)
    d = amax / 127.0
    idv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0)
    q = np.clip(np.round(b * idv), -127, 127)
    return (q * d.astype(F16).astype(np.float32)).reshape(x.shape).astype(np.float32)


def _q_sym(x, nlev, bs=32):
    """llama.cpp q4_0 recipe generalised: d = (signed value of largest |x|) / -(nlev/2),
    q = min(nlev-1, floor(x/d + nlev/2 + 0.5)), decode (q - nlev/2) * fp16(d)."""
    b = _blocks(x, bs)
    half = nlev // 2
    i = np.abs(b).argmax(1)
    mx = b[np.arange(len(b)), i][:, None]
    d = mx / -half
    idv = np.where(d != 0, 1.0 / np.where(d != 0, d, 1), 0)
    q = np.minimum(nlev - 1, np.floor(b * idv + half + 0.5))
    return ((q - half) * d.astype(F16).astype(np.float32)).reshape(x.shape).astype(np.float32)


def q4_0(x, bs=32):
    return _q_sym(x, 16, bs)


def q3_0(x, bs=32):
    return _q_sym(x, 8, bs)


def q8_row(x):
    d = np.abs(x).max(-1, keepdims=True) / 127.0
    q = np.round(x / np.where(d > 0, d, 1))
    return (q * d).astype(np.float32)


def f16(x):
    return x.astype(F16).astype(np.float32)


# ---------------------------------------------------------------- rotation

def splitmix64_signs(d, seed):
    """d signs from the splitmix64 stream: word j = splitmix64(seed + (j+1)*golden), bit i%64 of word i//64;
    bit 1 -> -1. Easy to reproduce in C: the same stream as java.util.SplittableRandom / the usual splitmix64."""
    M = (1 << 64) - 1
    out = np.empty(d, np.float32)
    s = seed & M
    for j in range((d + 63) // 64):
        s = (s + 0x9E3779B97F4A7C15) & M
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        z ^= z >> 31
        for i in range(min(64, d - 64 * j)):
            out[64 * j + i] = -1.0 if (z >> i) & 1 else 1.0
    return out


def fwht(x):
    """Unnormalised fast Walsh-Hadamard transform over the last axis (Sylvester order)."""
    d = x.shape[-1]
    y = x.reshape(-1, d).astype(np.float32, copy=True)
    h = 1
    while h < d:
        y = y.reshape(-1, d // (2 * h), 2, h)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = np.stack([a + b, a - b], axis=2)
        h *= 2
    return y.reshape(x.shape)


class Rotation:
    def __init__(self, d, seed=0x6B76, signs=True):
        self.d = d
        self.s = splitmix64_signs(d, seed) if signs else np.ones(d, np.float32)

    def fwd(self, x):  # R x = H D x / sqrt(d)
        return fwht(x * self.s) / np.float32(np.sqrt(self.d))

    def inv(self, y):  # R^T y = D H y / sqrt(d)
        return fwht(y) / np.float32(np.sqrt(self.d)) * self.s


def quantize_to_table(z, table):
    t = np.sort(np.asarray(table, np.float32))
    mids = (t[1:] + t[:-1]) / 2
    return t[np.searchsorted(mids, z)]


def rot_codec(table, rot, ls_scale=False, group=None):
    """Rotated coding with a unit-variance table (levels for sqrt(g) * coordinate of the unit vector).
    ls_scale: store the least-squares scale <u, c>/<c, c> * ||x|| instead of ||x|| (same bits).
    group: one norm per `group` rotated coordinates instead of one per row (default: the whole row)."""
    def enc(x):
        d = x.shape[-1]
        g = group or d
        y = rot.fwd(x).reshape(*x.shape[:-1], d // g, g)
        n = np.linalg.norm(y, axis=-1, keepdims=True)
        u = y / np.where(n > 0, n, 1) * np.float32(np.sqrt(g))
        c = quantize_to_table(u, table)
        if ls_scale:
            n = n * (u * c).sum(-1, keepdims=True) / np.maximum((c * c).sum(-1, keepdims=True), 1e-30)
        n = n.astype(F16).astype(np.float32)
        return rot.inv((c * (n / np.float32(np.sqrt(g)))).reshape(x.shape)).astype(np.float32)
    return enc


def rot_block(block_fn, rot):
    """Rotation followed by a block quantizer (isolates the rotation from the codebook)."""
    return lambda x: rot.inv(block_fn(rot.fwd(x))).astype(np.float32)


# ---------------------------------------------------------------- Lloyd-Max tables

def lloyd_max_density(n, pdf, lo=-8.0, hi=8.0, grid=400001, iters=3000):
    """Lloyd-Max levels for a density on [lo, hi] (numeric integration on a fine grid)."""
    t = np.linspace(lo, hi, grid)
    p = pdf(t)
    p /= p.sum()
    cp, ctp = np.cumsum(p), np.cumsum(p * t)
    lev = np.linspace(-2, 2, n) if n > 2 else np.array([-0.8, 0.8])
    for _ in range(iters):
        mids = (lev[1:] + lev[:-1]) / 2
        k = np.searchsorted(t, mids)
        edges = np.concatenate([[0], k, [grid]])
        m = np.diff(np.concatenate([[0], cp])[edges])
        s = np.diff(np.concatenate([[0], ctp])[edges])
        new = s / np.maximum(m, 1e-300)
        if np.max(np.abs(new - lev)) < 1e-10:
            break
        lev = new
    return lev


def gaussian_table(n):
    return lloyd_max_density(n, lambda t: np.exp(-t * t / 2))


def sphere_table(n, d):
    """Exact marginal of sqrt(d) * (coordinate of a uniform unit vector in d dims): ~ (1 - z^2/d)^((d-3)/2)."""
    r = np.sqrt(d)
    return lloyd_max_density(n, lambda z: np.where(np.abs(z) < r, np.clip(1 - z * z / d, 0, None) ** ((d - 3) / 2), 0),
                             lo=-min(8.0, r), hi=min(8.0, r))


def lloyd_fit_samples(z, init, iters=200):
    """1-D k-means (Lloyd) on samples z, started from init."""
    z = np.sort(np.asarray(z, np.float64).ravel())
    cz = np.concatenate([[0], np.cumsum(z)])
    lev = np.sort(np.asarray(init, np.float64))
    for _ in range(iters):
        k = np.searchsorted(z, (lev[1:] + lev[:-1]) / 2)
        edges = np.concatenate([[0], k, [len(z)]])
        cnt = np.diff(edges)
        new = np.where(cnt > 0, np.diff(cz[edges]) / np.maximum(cnt, 1), lev)
        if np.max(np.abs(new - lev)) < 1e-9:
            break
        lev = new
    return lev


def rotated_unit_coords(x, rot):
    """sqrt(d) * coordinates of the rotated, normalised rows (what the table codes)."""
    y = rot.fwd(x.reshape(-1, x.shape[-1]))
    n = np.linalg.norm(y, axis=-1, keepdims=True)
    return y / np.where(n > 0, n, 1) * np.sqrt(x.shape[-1])
