"""A tiny safetensors reference folder (tests/data/hf/<name>) rewritten by torch.save itself, in three twins:
    DST/bin/pytorch_model.bin                     the whole state dict in one archive
    DST/sharded/pytorch_model-0000N-of-00002.bin  two archives and pytorch_model.bin.index.json
    DST/pt/model.pt                               model.state_dict()'s shape: an OrderedDict with _metadata
each beside the source's config.json and tokenizer.json. The weights are the same tensors, so cellm must give the
twins the very logits of the safetensors folder (tests/safetensors/pytorch_test.cpp runs this at test time).
A tied model's lm_head.weight is saved too, as the very tensor of the embedding, as torch.save of a tied model's
state dict saves it.

    ~/.cache/cellm/venv-torch/bin/python scripts/hf_reference/pytorch_bin.py SRC DST
Needs torch and safetensors only (setup_venv.sh's venv has both; so does a venv with `pip install torch safetensors`).
"""
import collections
import json
import pathlib
import shutil
import sys

import torch
from safetensors.torch import load_file


def copy_side_files(src: pathlib.Path, dst: pathlib.Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix == ".json" and f.name not in ("reference.json", "model.safetensors.index.json"):
            shutil.copy(f, dst / f.name)


def main(src: pathlib.Path, dst: pathlib.Path) -> None:
    tensors = load_file(str(src / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    text_config = config.get("text_config", config)
    tied = config.get("tie_word_embeddings", text_config.get("tie_word_embeddings", False))
    if tied and "lm_head.weight" not in tensors and "model.embed_tokens.weight" in tensors:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]

    copy_side_files(src, dst / "bin")
    torch.save(tensors, dst / "bin" / "pytorch_model.bin")

    copy_side_files(src, dst / "sharded")
    names = list(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, half in enumerate(halves):
        shard = f"pytorch_model-{i + 1:05d}-of-{len(halves):05d}.bin"
        torch.save({n: tensors[n] for n in half}, dst / "sharded" / shard)
        weight_map.update({n: shard for n in half})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (dst / "sharded" / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2))

    copy_side_files(src, dst / "pt")
    state = collections.OrderedDict(tensors)
    state._metadata = collections.OrderedDict({"": {"version": 1}})  # what nn.Module.state_dict() attaches
    torch.save(state, dst / "pt" / "model.pt")
    print(f"{dst}: bin, sharded, pt twins of {src.name} (torch {torch.__version__})")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
