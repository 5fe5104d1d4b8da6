"""Shared by the transformers reference generators in this folder (tooling only; cellm never needs Python).

Each generator builds a tiny random-weight model of one architecture with the `transformers` package, saves it as
a Hugging Face folder under tests/data/hf/<name>/ (config.json and model.safetensors in float32) and writes
reference.json beside it: the token ids fed to the model and transformers' logits at every position. The
hf_parity_tests suite (tests/hf) runs every such folder through cellm and compares.

Run a generator with the virtual environment that scripts/hf_reference/setup_venv.sh makes outside the repo:
    ~/.cache/cellm/venv-hf/bin/python scripts/hf_reference/qwen3.py
"""
import json
import pathlib
import shutil

import tokenizers
import torch
import transformers

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "hf"

# Long enough to cross a KV block (16 slots) and a sliding window the generators may set small.
TOKENS = [1, 17, 42, 99, 3, 120, 7, 64, 5, 11, 200, 33, 90, 4, 150, 77, 18, 230, 61, 9, 140, 2, 88, 45]


def randomize(model: torch.nn.Module, seed: int, std: float = 0.15, norm=lambda w: 1.0 + 0.1 * w) -> None:
    """Draws every parameter again, larger than transformers' 0.02 initialisation, so that the logits carry
    signal. `norm` maps a standard normal draw to a norm gain (1 + noise for gains multiplied directly; Gemma 3's
    stored w, used as 1 + w, wants plain noise)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            draw = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            p.copy_(norm(draw) if "norm" in name and p.dim() == 1 else std * draw)


def write_byte_tokenizer(out: pathlib.Path) -> None:
    """A GPT-2 style byte-level BPE over the 256 bytes and no merges: every model needs a tokenizer to load,
    and the tests feed token ids, so the smallest real tokenizer.json does."""
    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.save(str(out / "tokenizer.json"))


def save_reference(model: torch.nn.Module, name: str, tokens=TOKENS, note: str = "") -> pathlib.Path:
    """Saves `model` as tests/data/hf/<name>/ with a byte-level tokenizer.json and reference.json. Returns the
    folder. The model's vocabulary must hold at least the tokenizer's 256 tokens."""
    out = DATA / name
    if out.exists():
        shutil.rmtree(out)
    model = model.to(torch.float32).eval()
    model.save_pretrained(out, safe_serialization=True)
    for extra in ("generation_config.json",):
        (out / extra).unlink(missing_ok=True)
    write_byte_tokenizer(out)
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0].to(torch.float32)
    reference = {
        "source": f"transformers {transformers.__version__}, torch {torch.__version__}, {type(model).__name__}",
        "note": note,
        "tokens": list(tokens),
        "n_vocab": int(logits.shape[-1]),
        "logits": [[float(f"{v:.7g}") for v in row] for row in logits.tolist()],
    }
    (out / "reference.json").write_text(json.dumps(reference, separators=(",", ":")) + "\n")
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"{out.relative_to(REPO)}: {size / 1024:.0f} KiB")
    return out
