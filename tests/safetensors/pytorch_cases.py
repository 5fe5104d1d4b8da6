#!/usr/bin/env python3
"""PyTorch zip checkpoints written without torch (Python's standard library only), for the tests of the
safetensors plugin's PyTorch reader (pytorch_test.cpp) and the seeds of fuzz_pytorch.

    pytorch_cases.py cases DIR         one model folder per case under DIR/<case>/ (config.json and the checkpoint)
    pytorch_cases.py twin SRC DST      DST/: SRC's config.json, tokenizer.json and model.safetensors rewritten as
                                       pytorch_model.bin, laid out as torch.save lays it out
    pytorch_cases.py seeds DIR         fuzz seeds: data.pkl streams and whole archives

The pickles are written opcode by opcode in the shape torch.save gives a state dict (protocol 2, an OrderedDict
of torch._utils._rebuild_tensor_v2 calls over persistent-id storages), so the tests need no torch; the hostile
ones come from the standard pickle module or from the same writer with one thing changed.
"""
import json
import os
import pickle
import shutil
import struct
import sys
import tempfile
import zipfile

# The model the cases open: what tests/safetensors/corrupt_test.cpp uses (one layer, hidden size 8).
CONFIG = {"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1, "intermediate_size": 16,
          "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 32, "vocab_size": 4,
          "rms_norm_eps": 1e-5}

STORAGE = {"F32": ("FloatStorage", 4), "F16": ("HalfStorage", 2), "BF16": ("BFloat16Storage", 2)}


class Pickle:
    """Pickle opcodes, appended one by one."""

    def __init__(self):
        self.b = bytearray(b"\x80\x02")  # PROTO 2, as torch.save writes
        self.memo = {}

    def op(self, raw):
        self.b += raw
        return self

    def string(self, s):
        data = s.encode()
        return self.op(b"X" + struct.pack("<I", len(data)) + data)

    def int(self, v):
        if 0 <= v < 256:
            return self.op(b"K" + bytes([v]))
        if 0 <= v < 65536:
            return self.op(b"M" + struct.pack("<H", v))
        if -2**31 <= v < 2**31:
            return self.op(b"J" + struct.pack("<i", v))
        data = v.to_bytes(8, "little", signed=True)
        return self.op(b"\x8a\x08" + data)

    def glob(self, module, name):
        """GLOBAL, memoized the first time and fetched again with BINGET afterwards, as pickle does."""
        key = (module, name)
        if key in self.memo:
            return self.op(b"h" + bytes([self.memo[key]]))
        self.op(b"c" + f"{module}\n{name}\n".encode())
        self.memo[key] = len(self.memo)
        return self.op(b"q" + bytes([self.memo[key]]))

    def tuple(self, items):
        self.op(b"(")
        for v in items:
            self.int(v)
        return self.op(b"t")

    def tensor(self, storage_type, key, numel, offset, size, stride, rebuild="_rebuild_tensor_v2"):
        self.glob("torch._utils", rebuild).op(b"(")
        self.op(b"(").string("storage").glob("torch", storage_type).string(key).string("cpu").int(numel).op(b"tQ")
        self.int(offset).tuple(size).tuple(stride).op(b"\x89")  # NEWFALSE: requires_grad
        self.glob("collections", "OrderedDict").op(b")R")  # backward_hooks
        return self.op(b"tR")

    def stop(self):
        return bytes(self.b + b".")


def state_dict(tensors):
    """tensors: (name, storage_type, key, numel, offset, size, stride). The pickle torch.save writes for them."""
    p = Pickle()
    p.glob("collections", "OrderedDict").op(b")R").op(b"(")
    for name, storage_type, key, numel, offset, size, stride in tensors:
        p.string(name).tensor(storage_type, key, numel, offset, size, stride)
    return p.op(b"u").stop()


def contiguous_stride(size):
    stride, step = [], 1
    for n in reversed(size):
        stride.insert(0, step)
        step *= n
    return stride


def write_archive(path, pkl, storages, top="archive", compress=(), byteorder=b"little"):
    """A zip laid out as torch.save lays it out: <top>/data.pkl, <top>/byteorder, <top>/data/<key> for each
    storage (key -> bytes), every entry stored and its data 64-byte aligned through padding in the local header's
    extra field, as PyTorch's writer pads. `compress`: keys to deflate instead."""
    with open(path, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
        entries = [(f"{top}/data.pkl", pkl), (f"{top}/byteorder", byteorder)]
        entries += [(f"{top}/data/{k}", v) for k, v in storages.items()]
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            key = name.rsplit("/", 1)[-1]
            if name.startswith(f"{top}/data/") and key in compress:
                info.compress_type = zipfile.ZIP_DEFLATED
            else:
                start = f.tell() + 30 + len(name.encode()) + 4
                info.extra = b"FB" + struct.pack("<H", (-start) % 64) + b"Z" * ((-start) % 64)
            z.writestr(info, data)


def folder(root, name, config=CONFIG):
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    return d


def norm_dict(size=(8,), stride=None, offset=0, numel=8, storage_type="FloatStorage"):
    return state_dict([("model.norm.weight", storage_type, "0", numel, offset, list(size),
                        stride if stride is not None else contiguous_stride(size))])


def norm_storage():
    return {"0": bytes(range(1, 33))}  # 8 F32 values; the valid cases check that the view serves these bytes


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def patch_central_size(path, entry, value):
    """Rewrites the sizes the central directory records for `entry` (compressed and uncompressed alike)."""
    data = bytearray(open(path, "rb").read())
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        name_len = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46:at + 46 + name_len].decode() == entry:
            struct.pack_into("<II", data, at + 20, value, value)
            break
        at = data.find(b"PK\x01\x02", at + 4)
    open(path, "wb").write(data)


def cases(root):
    bin_name = "pytorch_model.bin"

    def case(name, pkl, storages=None, top="archive", file=bin_name, **kw):
        d = folder(root, name)
        write_archive(os.path.join(d, file), pkl, norm_storage() if storages is None else storages, top=top, **kw)
        return os.path.join(d, file)

    # Valid archives: the shapes torch.save writes, and the top folder named after the file as newer torch names it.
    case("valid", norm_dict())
    case("valid_top_folder", norm_dict(), top="pytorch_model")
    case("valid_pt", norm_dict(), file="model.pt")
    p = Pickle()
    p.glob("collections", "OrderedDict").op(b")R").op(b"(").string("model.norm.weight")
    p.glob("torch._utils", "_rebuild_parameter").op(b"(")
    p.tensor("FloatStorage", "0", 8, 0, [8], [1]).op(b"\x89").glob("collections", "OrderedDict").op(b")Rt").op(b"R")
    case("valid_parameter", p.op(b"u").stop())
    # torch.save of model.state_dict(): the OrderedDict's _metadata attribute arrives through BUILD.
    p = Pickle()
    p.glob("collections", "OrderedDict").op(b")R").op(b"q\x10(").string("model.norm.weight")
    p.tensor("FloatStorage", "0", 8, 0, [8], [1]).op(b"u")
    p.op(b"}").string("_metadata").glob("collections", "OrderedDict").op(b")R").op(b"(").string("")
    p.op(b"}").string("version").int(1).op(b"s").op(b"usb")
    case("valid_metadata", p.stop())
    # Sharded: two archives and pytorch_model.bin.index.json.
    d = folder(root, "valid_sharded")
    write_archive(os.path.join(d, "pytorch_model-00001-of-00002.bin"), norm_dict(), norm_storage())
    write_archive(os.path.join(d, "pytorch_model-00002-of-00002.bin"),
                  state_dict([("model.embed_tokens.weight", "FloatStorage", "0", 32, 0, [4, 8], [8, 1])]),
                  {"0": bytes(128)})
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 160}, "weight_map": {
            "model.norm.weight": "pytorch_model-00001-of-00002.bin",
            "model.embed_tokens.weight": "pytorch_model-00002-of-00002.bin"}}, f)

    # Hostile pickles: code execution through REDUCE, globals outside the state-dict set, unknown opcodes.
    case("os_system", pickle.dumps({"model.norm.weight": Evil()}, protocol=2))
    case("os_system_protocol4", pickle.dumps(Evil(), protocol=4))
    case("builtins_eval", Pickle().op(b"cbuiltins\neval\n(X\x05\x00\x00\x001+1+1tR").stop())
    case("reduce_storage_type", Pickle().glob("torch", "FloatStorage").op(b")R").stop())
    case("reduce_string", Pickle().string("os.system").op(b")R").stop())
    case("unknown_opcode", Pickle().op(b"\x81").stop())  # NEWOBJ
    case("inst_opcode", Pickle().op(b"ios\nsystem\n").stop())  # INST: a call by name
    case("not_a_dict", Pickle().op(b"]").stop())
    case("not_a_tensor", Pickle().op(b"}").string("model.norm.weight").int(5).op(b"s").stop())
    case("bad_persistent_id", Pickle().op(b"}").string("model.norm.weight").string("x").op(b"Qs").stop())
    case("memo_missing", Pickle().op(b"h\x07").stop())
    case("stack_underflow", Pickle().op(b"0").stop())
    # Broken structure: cut pickle, cut or missing storage, a storage viewed past its end, a view that is not
    # contiguous, a type cellm does not run.
    full = norm_dict()
    case("truncated_pickle", full[: len(full) // 2])
    case("truncated_storage", norm_dict(), {"0": bytes(20)})
    case("missing_storage", norm_dict(), {"1": bytes(32)})
    case("stride_past_storage", norm_dict(size=(8,), stride=[2]))
    case("offset_past_storage", norm_dict(offset=4))
    case("size_past_storage", norm_dict(size=(4, 4)))
    case("non_contiguous", norm_dict(size=(2, 4), stride=[1, 2]))
    case("long_storage", norm_dict(storage_type="LongStorage"), {"0": bytes(64)})
    case("zero_dims", norm_dict(size=(), stride=[]))
    case("five_dims", norm_dict(size=(1, 1, 1, 1, 8)))
    case("duplicate_name", state_dict([("model.norm.weight", "FloatStorage", "0", 8, 0, [8], [1])] * 2))
    # Broken archives: a storage entry claiming more bytes than the file, a compressed storage, no data.pkl, the
    # file cut before its central directory, a big-endian archive, a file that is no zip at all.
    path = case("entry_past_file", norm_dict())
    patch_central_size(path, "archive/data/0", 0x7FFFFFF0)
    case("compressed_storage", norm_dict(), compress=("0",))
    d = folder(root, "no_data_pkl")
    with zipfile.ZipFile(os.path.join(d, bin_name), "w") as z:
        z.writestr("archive/data/0", bytes(32))
        z.writestr("archive/version", b"3\n")
    path = case("truncated_file", norm_dict())
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) - 40])
    case("big_endian", norm_dict(), byteorder=b"big")
    d = folder(root, "legacy_pickle")
    open(os.path.join(d, bin_name), "wb").write(pickle.dumps({"model.norm.weight": [1.0] * 8}, protocol=2))
    d = folder(root, "two_pt_files")
    for n in ("a.pt", "b.pt"):
        write_archive(os.path.join(d, n), norm_dict(), norm_storage())


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack_from("<Q", data)[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return header, data[8 + n:]


def twin(src, dst):
    """SRC's safetensors weights as pytorch_model.bin: one storage per tensor, keys in header order."""
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(src):
        if name.endswith(".json") and name not in ("reference.json", "model.safetensors.index.json"):
            with open(os.path.join(src, name), "rb") as f_in, open(os.path.join(dst, name), "wb") as f_out:
                f_out.write(f_in.read())
    header, blob = read_safetensors(os.path.join(src, "model.safetensors"))
    tensors, storages = [], {}
    for i, (name, t) in enumerate(header.items()):
        storage_type, element = STORAGE[t["dtype"]]
        begin, end = t["data_offsets"]
        storages[str(i)] = blob[begin:end]
        tensors.append((name, storage_type, str(i), (end - begin) // element, 0, t["shape"],
                        contiguous_stride(t["shape"])))
    write_archive(os.path.join(dst, "pytorch_model.bin"), state_dict(tensors), storages)


def seeds(root):
    pkl = os.path.join(root, "pytorch")
    os.makedirs(pkl, exist_ok=True)
    tmp = tempfile.mkdtemp()
    cases(tmp)
    for case in sorted(os.listdir(tmp)):
        for name in os.listdir(os.path.join(tmp, case)):
            if name.endswith((".bin", ".pt")):
                data = open(os.path.join(tmp, case, name), "rb").read()
                open(os.path.join(pkl, f"{case}-{name}"), "wb").write(data)
                # The pickle alone too: the fuzzer reads input without a zip signature as data.pkl.
                if data.startswith(b"PK"):
                    try:
                        with zipfile.ZipFile(os.path.join(tmp, case, name)) as z:
                            for entry in z.namelist():
                                if entry.endswith("/data.pkl"):
                                    open(os.path.join(pkl, f"{case}-data.pkl"), "wb").write(z.read(entry))
                    except zipfile.BadZipFile:
                        pass
                else:
                    open(os.path.join(pkl, f"{case}-data.pkl"), "wb").write(data)
    open(os.path.join(pkl, "os_system-protocol0.pkl"), "wb").write(pickle.dumps(Evil(), protocol=0))
    shutil.rmtree(tmp)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "cases":
        cases(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "twin":
        twin(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "seeds":
        seeds(sys.argv[2])
    else:
        sys.exit(__doc__)
