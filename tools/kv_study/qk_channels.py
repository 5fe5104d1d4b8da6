"""Why rotation alone hurts Gemma-3 keys: per layer, where K's and Q's energy sit (post-RoPE channels),
and the RMS of the logit error q.(k^ - k)/sqrt(d) that q4_0 / q3_0 make with and without the rotation.

    python forward.py --model gemma3 --dump ~/.cache/cellm/kvstudy/gemma3_qkv.npz
    python qk_channels.py gemma3 2 5 11
"""
import sys

import numpy as np

import forward as F
import kvcodec as C

name, layers = sys.argv[1], [int(x) for x in sys.argv[2:]]
z = np.load(F.CACHE / f"{name}_qkv.npz")
rot = None
for il in layers:
    q, k = z[f"q{il}"], z[f"k{il}"]
    T, H, d = q.shape
    g = H // k.shape[1]
    rot = rot or C.Rotation(d)
    qh = q[:, :g]  # the query heads of KV head 0
    rq = np.sqrt((qh ** 2).mean((0, 1)))
    rk = np.sqrt((k[:, 0] ** 2).mean(0))
    print(f"layer {il}: corr(rms_q, rms_k) over channels {np.corrcoef(rq, rk)[0, 1]:+.2f}; "
          f"K channel RMS max {rk.max():.1f} (ch {rk.argmax()}) vs median {np.median(rk):.2f}, q RMS there "
          f"{rq[rk.argmax()]:.2f} (q max {rq.max():.1f} at ch {rq.argmax()})")
    sq = np.einsum("tgd,tge->de", qh, qh) / (T * g)
    for nm, f in [("q4_0", C.q4_0), ("rot+q4_0", C.rot_block(C.q4_0, rot)),
                  ("q3_0", C.q3_0), ("rot+q3_0", C.rot_block(C.q3_0, rot))]:
        e = f(k)[:, 0] - k[:, 0]
        se = e.T @ e / T
        print(f"   {nm:9} K rel MSE {(e ** 2).sum() / (k[:, 0] ** 2).sum():.4f}   "
              f"logit error RMS {np.sqrt(np.trace(sq @ se) / d):.3f}")
