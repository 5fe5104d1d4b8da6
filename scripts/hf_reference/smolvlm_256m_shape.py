"""A random-weight SmolVLM with SmolVLM-256M's vision geometry (512-pixel tiles of 16-pixel patches, a 12-layer,
768-wide SigLIP with 12 heads and a 3072 MLP, pixel shuffle by 4 into 64 tokens a tile) over a small Llama, for
timing cellm's vision encoder at real size and checking it there against transformers. Tooling only; the folder
(about 350 MB of float32) goes outside the repo:
    ~/.cache/cellm/venv-hf/bin/python scripts/hf_reference/smolvlm_256m_shape.py [OUT]
OUT defaults to ~/.cache/cellm/models/smolvlm-256m-shape. Beside the model it writes reference.json: for one
image (tests/data/vision/smolvlm_rgb_20x48.png resized by the processor: 4 x 2 tiles of 512 and the global one, 9
frames) the prompt's ids, the connector's output (embeddings.f32) and transformers' time to encode them.
"""
import json
import pathlib
import sys
import time

import torch
import transformers
from transformers.models.idefics3 import Idefics3Processor
from transformers.models.smolvlm import SmolVLMImageProcessorPil

from common import REPO, randomize
import smolvlm

OUT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path.home() / ".cache/cellm/models/smolvlm-256m-shape"


def main() -> None:
    base = smolvlm.make_processor()
    images = SmolVLMImageProcessorPil(size={"longest_edge": 2048}, max_image_size={"longest_edge": 512},
                                      do_image_splitting=True)
    processor = Idefics3Processor(images, base.tokenizer, image_seq_len=64)
    config = transformers.SmolVLMConfig(
        vision_config=dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                           image_size=512, patch_size=16, layer_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh"),
        text_config=dict(model_type="llama", vocab_size=len(processor.tokenizer), hidden_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, intermediate_size=128, rms_norm_eps=1e-5,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                         max_position_embeddings=2048, tie_word_embeddings=False, bos_token_id=None,
                         eos_token_id=None, pad_token_id=None),
        scale_factor=4, image_token_id=processor.image_token_id, tie_word_embeddings=False, pad_token_id=None)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.SmolVLMForConditionalGeneration(config)
    # transformers' own scale (0.02) keeps 12 layers of 768 in range; norms get 1 + noise, their biases small noise.
    randomize(model, seed=7, std=0.02)
    model = model.to(torch.float32).eval()
    OUT.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)
    processor.save_pretrained(OUT)
    (OUT / "generation_config.json").unlink(missing_ok=True)

    image = REPO / "tests/data/vision/smolvlm_rgb_20x48.png"
    from PIL import Image
    inputs = processor(text="<image>What is in this picture?", images=[[Image.open(image)]], return_tensors="pt")
    with torch.no_grad():
        start = time.perf_counter()
        features = model.model.get_image_features(pixel_values=inputs["pixel_values"],
                                                  pixel_attention_mask=inputs.get("pixel_attention_mask"))
        seconds = time.perf_counter() - start
    features = features.pooler_output if hasattr(features, "pooler_output") else features
    features = torch.cat(list(features)) if isinstance(features, (list, tuple)) else features.reshape(-1, 64)
    (OUT / "embeddings.f32").write_bytes(features.to(torch.float32).contiguous().numpy().tobytes())
    reference = {"image": str(image.relative_to(REPO)), "prompt": "<image>What is in this picture?",
                 "input_ids": inputs["input_ids"][0].tolist(), "frames": int(inputs["pixel_values"].shape[1]),
                 "embeddings_shape": list(features.shape), "transformers_encode_seconds": seconds,
                 "torch_threads": torch.get_num_threads(), "source": f"transformers {transformers.__version__}"}
    (OUT / "reference.json").write_text(json.dumps(reference, indent=1))
    print(json.dumps({k: v for k, v in reference.items() if k != "input_ids"}))


if __name__ == "__main__":
    main()
