"""MLX-quantized Qwen3 folders as mlx-lm writes them, the reference for reading MLX affine quantization.
    bash scripts/hf_reference/setup_mlx_venv.sh
    ~/.cache/cellm/venv-mlx/bin/python scripts/hf_reference/mlx_quantized.py

A tiny random Qwen3 (every matmul input dim 128 or 256, so every group size divides it) is built with transformers
and saved as an unquantized Hugging Face folder in bfloat16, as real checkpoints are; mlx-lm's own converter
(mlx_lm.convert) then quantizes it into tests/data/hf/qwen3-mlx-q<bits>-g<group>/. mlx-lm writes the folder
(config.json with "quantization" and "quantization_config", model.safetensors, tokenizer files); this script only
adds reference.json, in the schema of the transformers folders (common.save_reference).

MLX affine quantization of a [out, in] weight W, per row and per group of `group_size` consecutive input columns:
    W[o, i] = scales[o, i // group_size] * q[o, i] + biases[o, i // group_size]
with q an unsigned `bits`-bit code packed little-end first into uint32 words: .weight is uint32 [out, in * bits / 32]
and code i of a row sits in word i * bits // 32 at bit (i * bits) % 32. .scales and .biases are [out, in / group_size]
in the floating dtype the weights had (bfloat16 here; float16 for the -f16 folder). The embedding (a
QuantizedEmbedding, dequantized row by row) and lm_head are quantized like every linear; norms stay unquantized.

reference.json's logits are mlx-lm's own forward pass of the loaded quantized model on the CPU, with every floating
parameter (scales, biases, norm gains) widened to float32 first, which is exact, so the reference is the float32
forward pass over the weights exactly as stored, what cellm computes after widening. mlx-lm's native bfloat16
forward pass is compared in the note. The script also dequantizes the folder with numpy from the layout above, runs
transformers' Qwen3 in float32 on the result, and requires it to agree with mlx-lm, which checks the layout.
"""
import json
import pathlib
import shutil
import tempfile

import mlx.core as mx
import mlx_lm
import numpy as np
import safetensors.numpy
import torch
import transformers
from mlx.utils import tree_map

from common import DATA, REPO, TOKENS, randomize

SHAPE = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=32, max_position_embeddings=256, rms_norm_eps=1e-6,
             tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})

# (bits, group_size, conversion dtype, folder suffix)
VARIANTS = [(4, 32, "bfloat16", ""), (4, 64, "bfloat16", ""), (4, 128, "bfloat16", ""), (8, 64, "bfloat16", ""),
            (4, 64, "float16", "-f16")]


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def read_safetensors(path: pathlib.Path):
    """Returns (header, tensors as float32/uint32 numpy arrays); bf16 is widened by hand since numpy lacks it."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        buf = data[begin:end]
        if info["dtype"] == "BF16":
            a = (np.frombuffer(buf, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(buf, dtype={"F16": np.float16, "F32": np.float32, "U32": np.uint32}[info["dtype"]])
        out[name] = a.reshape(info["shape"]).astype(np.float32 if info["dtype"] != "U32" else np.uint32)
    return header, out


def unpack(words: np.ndarray, bits: int) -> np.ndarray:
    """uint32 [rows, n_words] -> codes [rows, n_words * 32 / bits], code j of a word at bits [j*bits, (j+1)*bits)."""
    per = 32 // bits
    shifts = (np.arange(per, dtype=np.uint32) * bits)
    codes = (words[..., None] >> shifts) & np.uint32((1 << bits) - 1)
    return codes.reshape(words.shape[0], -1)


def dequantize_folder(folder: pathlib.Path, bits: int, group: int) -> dict:
    _, t = read_safetensors(folder / "model.safetensors")
    out = {}
    for name, a in t.items():
        if name.endswith((".scales", ".biases")):
            continue
        if a.dtype == np.uint32:
            base = name[: -len(".weight")]
            q = unpack(a, bits).astype(np.float32)
            s = np.repeat(t[base + ".scales"], group, axis=1)
            b = np.repeat(t[base + ".biases"], group, axis=1)
            out[name] = s * q + b
        else:
            out[name] = a
    return out


def describe(folder: pathlib.Path) -> str:
    with open(folder / "model.safetensors", "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    quantized = sorted(k[: -len(".scales")] for k in header if k.endswith(".scales"))
    # One layer's names stand for all layers.
    kinds = sorted({k.replace("model.layers.0.", "model.layers.N.") for k in quantized if ".layers.1." not in k})
    plain = sorted({k.replace("model.layers.0.", "model.layers.N.") for k in header
                    if k != "__metadata__" and header[k]["dtype"] != "U32" and not k.endswith((".scales", ".biases"))
                    and ".layers.1." not in k})

    def dt(suffix):
        return sorted({v["dtype"] for k, v in header.items() if k.endswith(suffix)})

    return (f"quantized (U32 .weight + {'/'.join(dt('.scales'))} .scales + {'/'.join(dt('.biases'))} .biases): "
            f"{', '.join(kinds)}; unquantized ({'/'.join(sorted({header[k.replace('.N.', '.0.')]['dtype'] for k in plain}))}): "
            f"{', '.join(plain)}")


# cellm serves MLX's 4-bit weights as Q4A blocks, for which the Vulkan shaders have no dequantization.
VULKAN_Q4A = "has no shader for Q4A weights (MLX 4-bit folders); it declines them"


def main() -> None:
    torch.manual_seed(0)
    model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**SHAPE))
    randomize(model, seed=7)
    model = model.to(torch.float32).eval()
    with torch.no_grad():
        f32_logits = model(torch.tensor([TOKENS])).logits[0].numpy()

    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / "hf"
        model.to(torch.bfloat16).save_pretrained(src, safe_serialization=True)
        (src / "generation_config.json").unlink(missing_ok=True)
        shutil.copy(DATA / "qwen3-tiny" / "tokenizer.json", src / "tokenizer.json")
        # Without a tokenizer_config.json, transformers picks Qwen2Tokenizer for model_type qwen3 and rewrites
        # tokenizer.json on save (Qwen2's split regex, NFC, an added <|endoftext|> as id 256, past the vocabulary).
        # The plain fast tokenizer class saves the byte-level tokenizer back as it is.
        (src / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}) + "\n")

        for bits, group, dtype, suffix in VARIANTS:
            name = f"qwen3-mlx-q{bits}-g{group}{suffix}"
            out = DATA / name
            if out.exists():
                shutil.rmtree(out)
            staged = pathlib.Path(tmp) / name
            mlx_lm.convert(hf_path=str(src), mlx_path=str(staged), quantize=True, q_group_size=group, q_bits=bits,
                           dtype=dtype)
            shutil.copytree(staged, out)

            with mx.stream(mx.cpu):
                qmodel, _ = mlx_lm.load(str(out))
                native = np.array(qmodel(mx.array([TOKENS]))[0].astype(mx.float32))
                qmodel.update(tree_map(lambda v: v.astype(mx.float32) if mx.issubdtype(v.dtype, mx.floating) else v,
                                       qmodel.parameters()))
                logits = np.array(qmodel(mx.array([TOKENS]))[0].astype(mx.float32))

            # Independent check of the layout: numpy dequantization into transformers' float32 Qwen3.
            check = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**SHAPE)).to(torch.float32).eval()
            weights = dequantize_folder(out, bits, group)
            missing, unexpected = check.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()},
                                                        strict=False)
            assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
            with torch.no_grad():
                hf_logits = check(torch.tensor([TOKENS])).logits[0].numpy()
            cos_hf = cosine_rows(logits, hf_logits).min()
            cos_native = cosine_rows(logits, native).min()
            cos_f32 = cosine_rows(logits, f32_logits).min()
            assert cos_hf > 0.99999, f"{name}: numpy dequantization disagrees with mlx-lm (cosine {cos_hf})"

            config = json.loads((out / "config.json").read_text())
            reference = {
                "source": f"mlx-lm {mlx_lm.__version__}, mlx {mx.__version__} (cpu), mlx_lm.convert(quantize=True, "
                          f"q_bits={bits}, q_group_size={group}, dtype={dtype}) of a random transformers "
                          f"{transformers.__version__} Qwen3ForCausalLM",
                "note": f"MLX affine {bits}-bit, group {group}, config quantization {json.dumps(config['quantization'])}; "
                        f"{describe(out)}; logits from mlx-lm's forward pass with floating parameters widened to "
                        f"float32 (worst cosine to mlx-lm's native {dtype} forward pass {cos_native:.6f}, to numpy "
                        f"dequantization run by transformers in float32 {cos_hf:.7f}, to the unquantized float32 "
                        f"model {cos_f32:.4f})",
                "tokens": list(TOKENS),
                "n_vocab": int(logits.shape[-1]),
                "logits": [[float(f"{v:.7g}") for v in row] for row in logits.tolist()],
            }
            if bits == 4:
                reference["skip_backends"] = {"vulkan": VULKAN_Q4A}
            (out / "reference.json").write_text(json.dumps(reference, separators=(",", ":")) + "\n")
            size = sum(f.stat().st_size for f in out.iterdir())
            print(f"{out.relative_to(REPO)}: {size / 1024:.0f} KiB; cosine to numpy+transformers {cos_hf:.7f}, "
                  f"to native {dtype} {cos_native:.6f}, to unquantized {cos_f32:.4f}")


if __name__ == "__main__":
    main()
