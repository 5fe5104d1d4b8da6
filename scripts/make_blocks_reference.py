#!/usr/bin/env python3
"""Writes tests/data/blocks/reference.bin: stored blocks and their dequantized values according to the `gguf`
package (ggml's reference layouts), for cellm's blocks tests. Run once; the output is committed.

Types gguf can quantize are quantized from fixed random floats; for the K-quants (dequantize only in gguf) the
blocks are random bytes with finite fp16 scales, which exercises every bit of the layout.

File format (little endian): b"CBLK", u32 record count; per record: u32 type, u32 n_elements, u32 n_bytes,
the block bytes, then n_elements float32 values.
"""
import pathlib
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

QUANTIZED = [(T.F16, 64), (T.BF16, 64), (T.Q8_0, 64), (T.Q4_0, 64), (T.Q4_1, 64), (T.Q5_0, 64), (T.Q5_1, 64)]
RANDOM_BYTES = [(T.Q4_K, 256), (T.Q5_K, 256), (T.Q6_K, 256)]
# Byte offsets of the fp16 scales inside each K-quant block, so random bytes still decode to finite values.
HALF_FIELDS = {T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}


def main() -> None:
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/blocks/reference.bin")
    rng = np.random.default_rng(20240611)
    records = []
    for qtype, n in QUANTIZED:
        x = (rng.standard_normal(n) * 2.0).astype(np.float32)
        x[3] = 0.0  # exact zero and a value needing rounding in every row
        x[5] = 1.0 / 3.0
        blocks = x.astype(np.float16).view(np.uint8) if qtype == T.F16 else quants.quantize(x, qtype)
        records.append((qtype, n, blocks))
    for qtype, n in RANDOM_BYTES:
        blocks = rng.integers(0, 256, size=quants.GGML_QUANT_SIZES[qtype][1] * (n // 256), dtype=np.uint8)
        for at in HALF_FIELDS[qtype]:
            blocks[at:at + 2] = np.array([rng.uniform(0.001, 0.05)], dtype=np.float16).view(np.uint8)
        records.append((qtype, n, blocks))

    data = bytearray(b"CBLK" + struct.pack("<I", len(records)))
    for qtype, n, blocks in records:
        raw = np.ascontiguousarray(blocks, dtype=np.uint8).tobytes()
        values = quants.dequantize(np.frombuffer(raw, dtype=np.uint8), qtype).astype(np.float32).reshape(-1)
        assert values.size == n, (qtype, values.size)
        data += struct.pack("<III", int(qtype), n, len(raw)) + raw + values.astype("<f4").tobytes()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(bytes(data))
    print(f"wrote {out} ({len(data)} bytes, {len(records)} records)")


if __name__ == "__main__":
    main()
