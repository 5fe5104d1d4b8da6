"""BF16 copies of tiny reference models, the reference for the safetensors plugin's widening of BF16 tensors.
    ~/.cache/cellm/venv-hf/bin/python scripts/hf_reference/bf16_folder.py

Real checkpoints are stored in bfloat16. Each folder here is one of the float32 reference models
(tests/data/hf/qwen3-tiny, qwen3_5-tiny) saved by transformers in bfloat16 ("dtype": "bfloat16" in
config.json, every tensor BF16 in model.safetensors, norms included). cellm widens every BF16 tensor to F32 on
load, exactly, so the reference is transformers' float32 forward pass over the bf16-rounded weights: the saved
folder loaded again, cast to float32 and run. Logits in bfloat16 arithmetic would differ from that by far more
than the test's cosine bar allows, and would test transformers' rounding instead of cellm's loading.
"""
import json
import pathlib
import shutil

import torch
import transformers

from common import DATA, REPO, TOKENS, write_byte_tokenizer


def save_bf16_reference(source: str, name: str, skip_backends=None) -> pathlib.Path:
    """Saves tests/data/hf/<source>/'s model in bfloat16 as tests/data/hf/<name>/ with reference.json (the same
    schema as the float32 folders): transformers' float32 logits of the bf16-rounded weights."""
    out = DATA / name
    if out.exists():
        shutil.rmtree(out)
    model = transformers.AutoModelForCausalLM.from_pretrained(DATA / source, dtype=torch.float32)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").unlink(missing_ok=True)
    write_byte_tokenizer(out)

    with open(out / "model.safetensors", "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    dtypes = sorted({v["dtype"] for k, v in header.items() if k != "__metadata__"})
    assert dtypes == ["BF16"], f"{name}: expected only BF16 tensors, got {dtypes}"

    # What cellm computes: the weights as stored, widened to float32.
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).to(torch.float32).eval()
    for p in reloaded.parameters():
        assert p.dtype == torch.float32
    with torch.no_grad():
        logits = reloaded(torch.tensor([TOKENS])).logits[0].to(torch.float32)
        f32_logits = model.eval()(torch.tensor([TOKENS])).logits[0].to(torch.float32)
    cos = torch.nn.functional.cosine_similarity(logits, f32_logits, dim=-1)
    reference = {
        "source": f"transformers {transformers.__version__}, torch {torch.__version__}, {type(reloaded).__name__}",
        "note": f"tests/data/hf/{source} saved in bfloat16; logits in float32 from the bf16-rounded weights "
                f"(worst cosine to {source}'s float32 logits: {cos.min().item():.6f})",
        "tokens": list(TOKENS),
        "n_vocab": int(logits.shape[-1]),
        "logits": [[float(f"{v:.7g}") for v in row] for row in logits.tolist()],
    }
    if skip_backends:
        reference["skip_backends"] = skip_backends
    (out / "reference.json").write_text(json.dumps(reference, separators=(",", ":")) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"{out.relative_to(REPO)}: {size / 1024:.0f} KiB, worst cosine to the float32 model {cos.min().item():.6f}")
    return out


save_bf16_reference("qwen3-tiny", "qwen3-tiny-bf16")
# Qwen3.5's norm gains and A_log are rewritten on load (1 + w, -exp(A_log)): here from widened BF16.
save_bf16_reference("qwen3_5-tiny", "qwen3_5-tiny-bf16",
                    skip_backends={"vulkan": "declines the recurrent-state ops (SSM_CONV, DELTA_NET) of ABI 1.2"})
