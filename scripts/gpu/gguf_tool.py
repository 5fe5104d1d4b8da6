#!/usr/bin/env python3
"""Small stdlib-only GGUF helper for scripts/gpu (runs on the GPU machine's python3 as well as here).

  gguf_tool.py list FILE
      one line per tensor: name, type, shape; then a count per type.
  gguf_tool.py splice --base A --take B --tensor NAME [--tensor NAME ...] --out OUT
      write OUT = A, except that each named tensor (type and bytes) comes from B. A and B must list the same
      tensors with the same shapes (e.g. two `cellm-make-model` files of one preset and seed but different
      --type: the generator draws the same values for every type, so the spliced tensor is the same weights,
      only quantized differently). Metadata is copied from A verbatim; offsets are recomputed.
  gguf_tool.py vocab FILE --out OUT
      write OUT = FILE's metadata (the tokenizer among it) and no tensors: what a tokenizer-only tool needs
      (bench/grammar/mask_bench.cpp), small enough to carry to the GPU machine.

Why splice: cellm-make-model writes every 2-D tensor in one type, while the real SmolLM2-135M Q4_1 file keeps
token_embd.weight (tied: also the classifier) in Q8_0.
"""
import argparse
import struct
import sys
from collections import Counter

TYPE_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
              10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 30: "BF16"}
# GGUF metadata value types: fixed sizes of the scalar ones.
SCALAR_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, data, path):
        self.data, self.pos, self.path = data, 0, path

    def take(self, n):
        if self.pos + n > len(self.data):
            sys.exit(f"{self.path}: truncated GGUF (wanted {n} bytes at {self.pos})")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return bytes(self.take(self.u64())).decode("utf-8", "replace")

    def skip_value(self, vtype):
        if vtype == STRING:
            self.take(self.u64())
        elif vtype == ARRAY:
            item, n = self.u32(), self.u64()
            if item in SCALAR_SIZE:
                self.take(SCALAR_SIZE[item] * n)
            else:
                for _ in range(n):
                    self.skip_value(item)
        elif vtype in SCALAR_SIZE:
            self.take(SCALAR_SIZE[vtype])
        else:
            sys.exit(f"{self.path}: unknown metadata value type {vtype}")


def parse(path):
    with open(path, "rb") as f:
        data = f.read()
    r = Reader(memoryview(data), path)
    if bytes(r.take(4)) != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    version = r.u32()
    if version < 2:
        sys.exit(f"{path}: GGUF version {version} is not supported")
    n_tensors, n_kv = r.u64(), r.u64()
    kv_start = r.pos
    alignment = 32
    for _ in range(n_kv):
        key = r.string()
        vtype = r.u32()
        if key == "general.alignment" and vtype == 4:
            alignment = struct.unpack("<I", bytes(r.take(4)))[0]
        else:
            r.skip_value(vtype)
    kv_end = r.pos
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        dims = [r.u64() for _ in range(r.u32())]
        ttype, offset = r.u32(), r.u64()
        tensors.append({"name": name, "dims": dims, "type": ttype, "offset": offset})
    data_start = (r.pos + alignment - 1) // alignment * alignment
    # A tensor's size: up to the next tensor's offset (or the end), less the alignment padding, which we
    # do not need to know exactly: copy up to the next offset and let the writer re-pad. To be exact we
    # sort by offset and take the distance; padding bytes are zeros and harmless to keep.
    order = sorted(range(len(tensors)), key=lambda i: tensors[i]["offset"])
    end = len(data) - data_start
    for k in reversed(order):
        tensors[k]["size"] = end - tensors[k]["offset"]
        end = tensors[k]["offset"]
    return {"path": path, "data": data, "version": version, "n_kv": n_kv, "kv": data[kv_start:kv_end],
            "alignment": alignment, "tensors": tensors, "data_start": data_start}


def type_name(t):
    return TYPE_NAMES.get(t, f"type{t}")


def cmd_list(args):
    g = parse(args.file)
    for t in g["tensors"]:
        print(f"{t['name']:32s} {type_name(t['type']):6s} {'x'.join(map(str, t['dims']))}")
    counts = Counter(type_name(t["type"]) for t in g["tensors"])
    print(f"# {len(g['tensors'])} tensors: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))


def pack_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def cmd_splice(args):
    a, b = parse(args.base), parse(args.take)
    b_by_name = {t["name"]: t for t in b["tensors"]}
    a_names = {t["name"] for t in a["tensors"]}
    for name in args.tensor:
        if name not in a_names or name not in b_by_name:
            sys.exit(f"tensor {name} is not in both {args.base} and {args.take}")
    align = a["alignment"]
    out_tensors = []  # (name, dims, type, source file, source tensor)
    for t in a["tensors"]:
        if t["name"] in args.tensor:
            s = b_by_name[t["name"]]
            if s["dims"] != t["dims"]:
                sys.exit(f"{t['name']}: shapes differ ({t['dims']} vs {s['dims']})")
            out_tensors.append((t["name"], t["dims"], s["type"], b, s))
        else:
            out_tensors.append((t["name"], t["dims"], t["type"], a, t))
    header = bytearray(b"GGUF" + struct.pack("<IQQ", a["version"], len(out_tensors), a["n_kv"]))
    header += a["kv"]
    offset = 0
    for name, dims, ttype, _, src in out_tensors:
        header += pack_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        header += struct.pack("<IQ", ttype, offset)
        offset = (offset + src["size"] + align - 1) // align * align
    header += b"\0" * ((-len(header)) % align)
    with open(args.out, "wb") as f:
        f.write(header)
        written = 0
        for _, _, _, g, src in out_tensors:
            start = g["data_start"] + src["offset"]
            f.write(g["data"][start:start + src["size"]])
            written += src["size"]
            pad = (-written) % align
            f.write(b"\0" * pad)
            written += pad
    print(f"wrote {args.out}: " + ", ".join(f"{n} from {args.take}" for n in args.tensor))


def cmd_vocab(args):
    g = parse(args.file)
    header = bytearray(b"GGUF" + struct.pack("<IQQ", g["version"], 0, g["n_kv"])) + g["kv"]
    header += b"\0" * ((-len(header)) % g["alignment"])
    with open(args.out, "wb") as f:
        f.write(header)
    print(f"wrote {args.out}: {len(header)} bytes of metadata, no tensors")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="list tensors and their types")
    ls.add_argument("file")
    ls.set_defaults(func=cmd_list)
    sp = sub.add_parser("splice", help="replace tensors of one file with those of another")
    sp.add_argument("--base", required=True)
    sp.add_argument("--take", required=True)
    sp.add_argument("--tensor", action="append", required=True)
    sp.add_argument("--out", required=True)
    sp.set_defaults(func=cmd_splice)
    vo = sub.add_parser("vocab", help="copy the metadata alone (the tokenizer), no tensors")
    vo.add_argument("file")
    vo.add_argument("--out", required=True)
    vo.set_defaults(func=cmd_vocab)
    args = p.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
