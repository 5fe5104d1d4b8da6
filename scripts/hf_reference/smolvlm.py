"""A tiny random SmolVLM (Idefics3-style vision-language model) from transformers' own classes, the reference for
cellm's vision encoder, connector and image-token prompts. Tooling only.
    ~/.cache/cellm/venv-hf/bin/python scripts/hf_reference/smolvlm.py
(the venv that setup_venv.sh makes; about 20 seconds on two cores).

Writes tests/data/hf/smolvlm-tiny/: config.json and model.safetensors (float32) of a
SmolVLMForConditionalGeneration with a 2-layer SigLIP-style encoder (32-pixel tiles of 8-pixel patches, so 16
patches a tile, pixel-shuffled by 2 into 4 image tokens of 64) and a 2-layer llama; the whole processor as
save_pretrained writes it (tokenizer: common.py's 256-byte BPE plus SmolVLM's special tokens; image processor:
SmolVLMImageProcessorPil with longest edge 64 and 32-pixel tiles, so images split into at most 2 x 2 tiles); and
reference.json with the cases below, the larger tensors beside it as raw little-endian float32 (.f32, row-major).

  image      smolvlm_rgb_20x48.png (tall: a 2 x 1 grid, 3 frames), "<image>What is in this picture?": the
             expanded ids, the connector's output for every frame, the logits at every position, 8 greedy tokens.
  image2     the same image, another question: last-position logits (for an image-embedding cache).
  text       no image: last-position logits.
  one_tile   smolvlm_rgb_32x32.png with size {"longest_edge": 32} for that call (the saved processor's 64 always
             splits): a 0 x 0 grid, only the global frame.

The SmolVLM processor needs num2words (and torchvision for its video processor), which the venv lacks, so the
processor is Idefics3Processor with SmolVLMImageProcessorPil, as smolvlm_preprocess.py checks they build the same
prompts and pixels. Attention is eager (SDPA is compared under "checks").
"""
import json
import pathlib
import shutil

import numpy as np
import tokenizers
import torch
import transformers
from PIL import Image
from transformers import PreTrainedTokenizerFast
from transformers.models.idefics3 import Idefics3Processor
from transformers.models.smolvlm import SmolVLMImageProcessorPil

from common import DATA, REPO, randomize

OUT = DATA / "smolvlm-tiny"
VISION = REPO / "tests" / "data" / "vision"
IMAGE = "smolvlm_rgb_20x48.png"
SQUARE = "smolvlm_rgb_32x32.png"
SPECIAL = (["<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"]
           + [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)])
PATCHES = (32 // 8) ** 2  # patches per tile
IMAGE_SEQ_LEN = PATCHES // 2**2  # image tokens per tile after the pixel shuffle


def write_images() -> None:
    """Gradients, a hard-edged block and noise, different in each channel (so an RGB order mistake shows)."""
    rng = np.random.default_rng(11)
    for name, (w, h) in [(IMAGE, (20, 48)), (SQUARE, (32, 32))]:
        y, x = np.mgrid[0:h, 0:w]
        planes = [255.0 * x / (w - 1), 255.0 * y / (h - 1), 255.0 * (x + y) / (w + h - 2)]
        planes[0][h // 4 : h // 2, w // 3 : 2 * w // 3] = 255.0
        pixels = np.stack([p + rng.normal(0, 25, (h, w)) for p in planes], axis=-1)
        Image.fromarray(np.clip(pixels, 0, 255).round().astype(np.uint8), "RGB").save(VISION / name)


def make_processor() -> Idefics3Processor:
    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok)
    assert [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL] == list(range(256, 256 + len(SPECIAL)))
    images = SmolVLMImageProcessorPil(size={"longest_edge": 64}, max_image_size={"longest_edge": 32},
                                      do_image_splitting=True)
    return Idefics3Processor(images, tokenizer, image_seq_len=IMAGE_SEQ_LEN)


def make_model(vocab: int, image_token_id: int) -> transformers.SmolVLMForConditionalGeneration:
    config = transformers.SmolVLMConfig(
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                           image_size=32, patch_size=8, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh"),
        # No BOS/EOS: llama's defaults (1, 2) are byte tokens here and EOS would stop generate early.
        text_config=dict(model_type="llama", vocab_size=vocab, hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, rms_norm_eps=1e-5,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                         max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=None,
                         eos_token_id=None, pad_token_id=None),
        scale_factor=2, image_token_id=image_token_id, tie_word_embeddings=False, pad_token_id=None)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.SmolVLMForConditionalGeneration(config)
    randomize(model, seed=5)
    # randomize takes every 1-D "norm" parameter for a gain; LayerNorm biases (layer_norm1.bias,
    # post_layernorm.bias) want small noise around 0 instead.
    gen = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    model.generation_config.bos_token_id = model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = None
    return model.to(torch.float32).eval()


def f32(name: str, t: torch.Tensor) -> dict:
    """Writes t as raw little-endian float32 beside reference.json; returns {file, shape}."""
    a = t.detach().to(torch.float32).contiguous().numpy().astype("<f4")
    (OUT / name).write_bytes(a.tobytes())
    return {"file": name, "shape": list(a.shape)}


def floats(t: torch.Tensor) -> list:
    return [float(f"{v:.9g}") for v in t.to(torch.float32).tolist()]  # 9 digits: float32 exact


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def greedy(model, inputs, steps=8) -> list:
    out = model.generate(**inputs, do_sample=False, max_new_tokens=steps, min_new_tokens=steps)
    ids = out[0, inputs["input_ids"].shape[1]:].tolist()
    # The same without the KV cache: the whole sequence again each step, argmax of the last position.
    seq = inputs["input_ids"]
    for _ in range(steps):
        extra = {k: v for k, v in inputs.items() if k != "input_ids" and k != "attention_mask"}
        nxt = model(input_ids=seq, **extra).logits[0, -1].argmax()
        seq = torch.cat([seq, nxt.view(1, 1)], dim=1)
    assert seq[0, inputs["input_ids"].shape[1]:].tolist() == ids, "generate differs from a full recompute"
    return ids


def image_case(model, processor, name, image, text, call_kwargs=None, all_logits=False, embeddings=False,
               generate=False, position_ids=None):
    inputs = processor(images=[[str(VISION / image)]], text=[text], return_tensors="pt", **(call_kwargs or {}))
    ids = inputs["input_ids"][0]
    pixels = inputs["pixel_values"]  # [1, frames, 3, 32, 32]
    assert (inputs["pixel_attention_mask"] == 1).all()
    frames = pixels.shape[1]
    meta = processor.image_processor([str(VISION / image)], return_row_col_info=True, **(call_kwargs or {}))
    rows, cols = int(meta["rows"][0][0]), int(meta["cols"][0][0])
    assert frames == (rows * cols + 1 if rows else 1)
    assert int((ids == model.config.image_token_id).sum()) == frames * IMAGE_SEQ_LEN
    case = {"image": f"tests/data/vision/{image}", "prompt": text,
            "expanded": processor.tokenizer.decode(ids, clean_up_tokenization_spaces=False),
            "input_ids": ids.tolist(), "n_tokens": len(ids), "pixel_values_shape": list(pixels.shape),
            "pixel_values_fnv1a64": fnv1a64(pixels.numpy().astype("<f4").tobytes()), "frames": frames,
            "grid": [rows, cols]}
    if call_kwargs:
        case["processor_kwargs"] = call_kwargs
    with torch.no_grad():
        features = model.model.get_image_features(pixels, inputs["pixel_attention_mask"]).pooler_output[0]
        assert features.shape == (frames * IMAGE_SEQ_LEN, 64)
        if position_ids is not None:
            position_ids.clear()
        logits = model(**inputs).logits[0]
        if embeddings:
            case["image_embeddings"] = f32(f"{name}_embeddings.f32", features)
        if all_logits:
            case["logits"] = f32(f"{name}_logits.f32", logits)
        else:
            case["last_logits"] = floats(logits[-1])
        if generate:
            case["greedy"] = greedy(model, inputs)
    return case, inputs, features, logits


def pixel_shuffle_check(connector) -> bool:
    """Token (R, C) of the 2 x 2 output is patches (2R, 2C), (2R, 2C+1), (2R+1, 2C), (2R+1, 2C+1) concatenated."""
    d = 3
    x = torch.arange(16 * d, dtype=torch.float32).view(1, 16, d)
    y = connector.pixel_shuffle(x, 2)[0]
    want = torch.stack([torch.cat([x[0, (2 * R + dr) * 4 + 2 * C + dc] for dr in (0, 1) for dc in (0, 1)])
                        for R in (0, 1) for C in (0, 1)])
    return bool(torch.equal(y, want))


def main() -> None:
    write_images()
    processor = make_processor()
    vocab = len(processor.tokenizer)
    model = make_model(vocab, processor.image_token_id)

    if OUT.exists():
        shutil.rmtree(OUT)
    model.save_pretrained(OUT, safe_serialization=True)
    processor.save_pretrained(OUT)
    (OUT / "generation_config.json").unlink(missing_ok=True)

    # The vision embeddings' position ids, as transformers computes them, caught on their way into the table.
    position_ids = []
    model.model.vision_model.embeddings.position_embedding.register_forward_hook(
        lambda module, args, out: position_ids.append(args[0].clone()))

    cases = {}
    cases["image"], inputs, features, logits = image_case(
        model, processor, "image", IMAGE, "<image>What is in this picture?", all_logits=True, embeddings=True,
        generate=True, position_ids=position_ids)
    tile_position_ids = position_ids[0]
    assert all(torch.equal(row, torch.arange(PATCHES)) for row in tile_position_ids), tile_position_ids
    std = logits.std(dim=-1)
    assert (std > 0.5).all(), f"logits near constant: {std.min()}"

    cases["image2"], inputs2, features2, _ = image_case(model, processor, "image2", IMAGE,
                                                        "<image>Which colour is the block?")
    assert torch.equal(features, features2)  # the image's embeddings do not depend on the question

    text = "What is in this picture?"
    text_inputs = processor(text=[text], return_tensors="pt")
    with torch.no_grad():
        text_logits = model(**text_inputs).logits[0]
    cases["text"] = {"prompt": text, "input_ids": text_inputs["input_ids"][0].tolist(),
                     "last_logits": floats(text_logits[-1])}

    cases["one_tile"], _, _, _ = image_case(model, processor, "one_tile", SQUARE, "<image>Describe it.",
                                            call_kwargs={"size": {"longest_edge": 32}}, embeddings=True,
                                            generate=True)
    assert cases["one_tile"]["grid"] == [0, 0] and cases["one_tile"]["frames"] == 1

    with torch.no_grad():
        # The image matters: the same prompt with the pixels moved changes the last logits.
        moved = model(**{**inputs, "pixel_values": inputs["pixel_values"] + 0.5}).logits[0, -1]
        image_effect = float((moved - logits[-1]).abs().max())
        assert image_effect > 0.1, image_effect
        model.set_attn_implementation("sdpa")
        sdpa = float((model(**inputs).logits[0] - logits).abs().max())
        model.set_attn_implementation("eager")

    # The folder loads back through the Auto classes with the same prompts, pixels and logits.
    processor2 = transformers.AutoProcessor.from_pretrained(OUT)
    model2 = transformers.AutoModelForImageTextToText.from_pretrained(OUT, attn_implementation="eager").eval()
    inputs3 = processor2(images=[[str(VISION / IMAGE)]], text=["<image>What is in this picture?"],
                         return_tensors="pt")
    assert torch.equal(inputs3["input_ids"], inputs["input_ids"])
    assert torch.equal(inputs3["pixel_values"], inputs["pixel_values"])
    with torch.no_grad():
        assert torch.equal(model2(**inputs3).logits[0], logits)

    config = json.loads((OUT / "config.json").read_text())
    reference = {
        "source": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                  f"{type(model).__name__} (attn eager), {type(processor).__name__} + "
                  f"{type(processor.image_processor).__name__}",
        "note": ".f32 files are raw little-endian float32, row-major with the given shape; image_embeddings are "
                "the connector's output, frames in processor order (tiles row by row, then the global image), "
                "image_seq_len tokens each, in the order the <image> tokens take them",
        "n_vocab": vocab,
        "image_token_id": processor.image_token_id,
        "image_seq_len": IMAGE_SEQ_LEN,
        "special_tokens": {t: processor.tokenizer.convert_tokens_to_ids(t) for t in SPECIAL[:4]},
        "cases": cases,
        "checks": {
            "model_type": config["model_type"],
            "text_model_type": config["text_config"]["model_type"],
            "vision_model_type": config["vision_config"]["model_type"],
            "vision_position_ids_full_tile": tile_position_ids[0].tolist(),
            "vision_position_ids_arange_every_frame": True,
            "pixel_shuffle_2x2_blocks": pixel_shuffle_check(model.model.connector),
            "generate_equals_full_recompute": True,
            "image_embeddings_same_for_second_question": True,
            "max_abs_logit_change_when_pixels_move": image_effect,
            "max_abs_logit_diff_sdpa_vs_eager": sdpa,
            "reload_with_auto_classes_identical": True,
            "min_logit_std_per_position": float(std.min()),
        },
    }
    (OUT / "reference.json").write_text(json.dumps(reference, separators=(",", ":")) + "\n")
    for f in sorted(OUT.iterdir()):
        print(f"{f.stat().st_size:8d} {f.relative_to(REPO)}")
    print(f"{sum(f.stat().st_size for f in OUT.iterdir()) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
