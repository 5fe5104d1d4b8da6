"""Reference data for cellm's SmolVLM / Idefics3 image preprocessing (host/vision; tooling only).

Writes small test images to tests/data/vision/ (PNG of every colour type cellm decodes, JPEG in RGB, grayscale and
CMYK, a JPEG with an EXIF orientation) and, for processors configured with small sizes, what transformers makes of
them: the pixel tensors (raw little-endian float32, [frames, 3, tile, tile]) and the prompt with each <image>
expanded. tests/vision compares cellm's output with it.

Files go through transformers' own loader (`load_image`: EXIF transpose, then PIL's convert("RGB")), the way the
processor treats a path. The image processor is the PIL backend, which transformers 5 picks for SmolVLM unless
torchvision >= 0.27 is installed (image_processing_auto.py, _LANCZOS_IMAGE_PROCESSORS).

    ~/.cache/cellm/venv-hf/bin/python scripts/hf_reference/smolvlm_preprocess.py
(the venv that setup_venv.sh makes).
"""
import json
import pathlib
import struct
import zlib

import numpy as np
import PIL
import tokenizers
import transformers
from PIL import Image
from transformers import PreTrainedTokenizerFast
from transformers.image_utils import load_image
from transformers.models.idefics3 import Idefics3ImageProcessorPil, Idefics3Processor
from transformers.models.smolvlm import SmolVLMImageProcessorPil
from transformers.models.smolvlm.processing_smolvlm import get_image_prompt_string

REPO = pathlib.Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "vision"
rng = np.random.default_rng(7)


def test_pattern(h: int, w: int, channels: int) -> np.ndarray:
    """Gradients, a hard-edged square (Lanczos overshoots past 0 and 255 there) and noise."""
    y, x = np.mgrid[0:h, 0:w]
    planes = []
    for c in range(channels):
        base = 255.0 * ((x / max(w - 1, 1)) * (c % 2) + (y / max(h - 1, 1)) * (1 - c % 2))
        base[h // 4 : h // 2, w // 3 : 2 * w // 3] = 255.0 * (c % 3 == 0)
        planes.append(np.clip(base + rng.normal(0, 25, (h, w)), 0, 255))
    return np.stack(planes, axis=-1).round().astype(np.uint8)


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_png16(path: pathlib.Path, pixels: np.ndarray, color_type: int) -> None:
    """PIL does not write 16-bit RGB or gray+alpha PNGs; this writes one by hand (filter 0 on every row)."""
    h, w = pixels.shape[:2]
    rows = b"".join(b"\x00" + pixels[r].astype(">u2").tobytes() for r in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, 16, color_type, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(rows))
                     + png_chunk(b"IEND", b""))


def make_images() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    Image.fromarray(test_pattern(23, 37, 3), "RGB").save(OUT / "rgb_37x23.png")
    Image.fromarray(test_pattern(50, 80, 4), "RGBA").save(OUT / "rgba_80x50.png")
    Image.fromarray(test_pattern(120, 50, 1)[..., 0], "L").save(OUT / "gray_50x120.png")
    Image.fromarray(test_pattern(40, 24, 2), "LA").save(OUT / "gray_alpha_24x40.png")
    palette = Image.fromarray(test_pattern(30, 45, 3), "RGB").quantize(colors=16)
    palette.save(OUT / "palette_45x30.png", transparency=3)
    Image.fromarray(test_pattern(17, 33, 1)[..., 0] > 128).save(OUT / "bilevel_33x17.png")
    gray16 = (test_pattern(14, 20, 1)[..., 0].astype(np.uint16) * 257 // 3).astype(np.uint16)
    gray16[:, :4] = np.arange(4 * 14, dtype=np.uint16).reshape(14, 4) * 5  # values below 256 survive PIL's clip
    Image.fromarray(gray16).save(OUT / "gray16_20x14.png")
    write_png16(OUT / "rgb16_30x20.png", test_pattern(20, 30, 3).astype(np.uint16) * 257 + rng.integers(0, 257, (20, 30, 3)), 2)
    write_png16(OUT / "gray_alpha16_26x18.png", test_pattern(18, 26, 2).astype(np.uint16) * 257, 4)
    Image.fromarray(test_pattern(90, 120, 3), "RGB").save(OUT / "photo_120x90.jpg", quality=90)
    Image.fromarray(test_pattern(30, 40, 1)[..., 0], "L").save(OUT / "gray_40x30.jpg", quality=85)
    Image.fromarray(test_pattern(40, 30, 3), "RGB").convert("CMYK").save(OUT / "cmyk_30x40.jpg", quality=90)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: the stored image is turned; load_image turns it upright (24 wide, 40 high)
    Image.fromarray(test_pattern(24, 40, 3), "RGB").save(OUT / "exif_rotated_40x24.jpg", quality=90, exif=exif)
    for orientation, name in [(3, "exif3_30x20.jpg"), (5, "exif5_30x20.jpg"), (8, "exif8_30x20.png")]:
        exif[0x0112] = orientation
        Image.fromarray(test_pattern(20, 30, 3), "RGB").save(OUT / name, exif=exif)
    # Colour keys (tRNS): PIL keeps them through convert("RGB") and the processor paints those pixels white.
    gray = test_pattern(20, 30, 1)[..., 0]
    Image.fromarray(gray, "L").save(OUT / "gray_key_30x20.png", transparency=int(gray[5, 5]))
    rgb = test_pattern(20, 30, 3)
    rgb[2:6, 3:9] = (10, 200, 30)
    Image.fromarray(rgb, "RGB").save(OUT / "rgb_key_30x20.png", transparency=(10, 200, 30))


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE with no merges: decoding gives back the processor's text exactly."""
    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def run_case(name, images, text, longest_edge, tile, split, image_seq_len, store_pixels=True):
    kwargs = dict(size={"longest_edge": longest_edge}, max_image_size={"longest_edge": tile},
                  do_image_splitting=split)
    smolvlm = SmolVLMImageProcessorPil(**kwargs)
    processor = Idefics3Processor(smolvlm, byte_tokenizer(), image_seq_len=image_seq_len)
    paths = [str(OUT / f) for f in images]
    out = processor(images=[paths], text=[text], return_tensors="np")
    pixels = out["pixel_values"][0].astype("<f4")
    assert (out["pixel_attention_mask"] == 1).all()  # one sample: every frame is a whole tile, nothing padded
    expanded = processor.tokenizer.decode(out["input_ids"][0], clean_up_tokenization_spaces=False)

    # SmolVLM's processor builds the same prompt text as Idefics3's, and its image processor the same pixels.
    meta = smolvlm([load_image(p) for p in paths], return_row_col_info=True, return_tensors="np")
    pieces = text.split("<image>")
    smolvlm_text = pieces[0]
    for i, piece in enumerate(pieces[1:]):
        smolvlm_text += get_image_prompt_string(meta["rows"][0][i], meta["cols"][0][i], image_seq_len,
                                                "<fake_token_around_image>", "<image>", "<global-img>") + piece
    assert smolvlm_text == expanded, name
    idefics3 = Idefics3ImageProcessorPil(**kwargs)([load_image(p) for p in paths], return_tensors="np")
    assert np.array_equal(idefics3["pixel_values"], meta["pixel_values"]), name
    assert np.array_equal(meta["pixel_values"][0], pixels), name

    case = {"name": name, "images": images, "longest_edge": longest_edge, "tile": tile, "split": split,
            "image_seq_len": image_seq_len, "rows": [int(r) for r in meta["rows"][0]],
            "cols": [int(c) for c in meta["cols"][0]], "shape": list(pixels.shape), "text": text,
            "expanded": expanded}
    if store_pixels:
        case["pixels"] = f"{name}.f32"
        (OUT / case["pixels"]).write_bytes(pixels.tobytes())
    else:
        case["fnv1a64"] = fnv1a64(pixels.tobytes())
    return case


def main() -> None:
    make_images()
    prompt = "<|im_start|>User:<image>Describe this image.<end_of_utterance>\nAssistant:"
    cases = []
    for f in ["rgb_37x23.png", "rgba_80x50.png", "gray_50x120.png", "gray_alpha_24x40.png", "palette_45x30.png",
              "bilevel_33x17.png", "gray16_20x14.png", "rgb16_30x20.png", "gray_alpha16_26x18.png",
              "photo_120x90.jpg", "gray_40x30.jpg", "cmyk_30x40.jpg", "exif_rotated_40x24.jpg"]:
        cases.append(run_case(f.rsplit(".", 1)[0], [f], prompt, 32, 16, True, 9))
    cases.append(run_case("single_tile", ["rgb_37x23.png"], prompt, 16, 16, True, 9))
    for f in ["exif3_30x20.jpg", "exif5_30x20.jpg", "exif8_30x20.png", "gray_key_30x20.png", "rgb_key_30x20.png"]:
        cases.append(run_case(f.rsplit(".", 1)[0], [f], prompt, 16, 16, True, 9))
    cases.append(run_case("no_split", ["photo_120x90.jpg"], prompt, 32, 16, False, 9))
    cases.append(run_case("two_images", ["rgb_37x23.png", "gray_50x120.png"],
                          "<|im_start|>User:<image>and<image>: which is brighter?<end_of_utterance>\nAssistant:",
                          32, 16, True, 4))
    # SmolVLM-256M-Instruct's sizes (longest edge 2048, 512-pixel tiles, 64 tokens per tile): a hash only.
    cases.append(run_case("smolvlm_256m_sizes", ["photo_120x90.jpg"], prompt, 2048, 512, True, 64,
                          store_pixels=False))
    reference = {"source": f"transformers {transformers.__version__}, Pillow {PIL.__version__}, "
                           "SmolVLMImageProcessorPil + Idefics3Processor", "cases": cases}
    (OUT / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    size = sum(f.stat().st_size for f in OUT.iterdir())
    print(f"{OUT.relative_to(REPO)}: {len(cases)} cases, {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
