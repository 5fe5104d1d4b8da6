"""tests/data/hf/smolvlm-tiny as llama.cpp ships a SmolVLM: a text GGUF and an mmproj GGUF. Tooling only.
    ~/.cache/cellm/venv-hf/bin/python scripts/hf_reference/smolvlm_gguf.py [--out DIR] [--check-against DIR]
(the venv that setup_venv.sh makes, with the `gguf` package; a few seconds).

Writes DIR (default tests/data/gguf-smolvlm-tiny/):
  smolvlm-tiny-F32.gguf         the text model as `convert_hf_to_gguf.py smolvlm-tiny --outtype f32` writes it:
                                general.architecture "llama", llama.* keys, Q/K rows permuted, every tensor F32,
                                the byte-level BPE tokenizer as tokenizer.ggml.*.
  mmproj-smolvlm-tiny-F16.gguf  the vision tower as `convert_hf_to_gguf.py smolvlm-tiny --mmproj` writes it (the
                                default --outtype auto is f16 for a float32 checkpoint): general.architecture
                                "clip", clip.projector_type "idefics3", clip.vision.* (image_mean and image_std,
                                preproc_image_size from the processor's size.longest_edge), v.* and mm.* tensors.
                                Matrices are F16; 1-D tensors and everything under ".embeddings." (the 4-D patch
                                convolution [p, p, 3, d], its bias, the position table) are F32.
  reference.json                what the F16 rounding of the vision matrices costs in transformers itself: the
                                worst cosine of the image embeddings and logits of smolvlm-tiny's "image" case
                                over the F16-rounded weights against its float32 ones, and those logits. Then run
                                smolvlm_gguf_llamacpp.py, which adds llama.cpp's own image embeddings of the pair.

The script mirrors llama.cpp's converter (conversion/base.py, llama.py, smolvlm.py of ggml-org/llama.cpp@0c1e57098,
the commit llama-cpp-python 0.3.36 vendors) call for call through the same `gguf` writer, so the files are the
converter's byte for byte; --check-against DIR compares with files the real converter wrote into DIR (see
docs/vision.md). Three things differ from running the converter on the folder, because the folder is a tiny
transformers 5 save: its text_config has no "architectures" (real SmolVLM configs say VLlama3ForCausalLM, which is
what picks llama's converter); its tokenizer (256 bytes, no merges) is not in the converter's list of known
pre-tokenizer hashes, and it splits with GPT-2's regex, so tokenizer.ggml.pre is "gpt-2" (a real SmolVLM's SmolLM2
tokenizer is recognised as "smollm"); and for that tokenizer the converter writes no tokenizer.ggml.merges at all,
which llama.cpp and cellm both refuse to load, so the text file carries an empty list there.
"""
import argparse
import importlib.metadata
import json
import pathlib
import sys

import gguf
import numpy as np
import torch
import transformers
from transformers import AutoTokenizer

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from common import DATA, REPO  # noqa: E402

SOURCE = DATA / "smolvlm-tiny"
OUT = REPO / "tests" / "data" / "gguf-smolvlm-tiny"
TEXT_FILE = "smolvlm-tiny-F32.gguf"
MMPROJ_FILE = "mmproj-smolvlm-tiny-F16.gguf"


def read_safetensors(path: pathlib.Path) -> list:
    """(name, float32 array) in the file's header order, as gguf.utility.SafetensorsLocal lists them."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    out = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (name, info["dtype"])
        begin, end = info["data_offsets"]
        data = np.frombuffer(raw[8 + n + begin:8 + n + end], dtype="<f4").reshape(info["shape"])
        out.append((name, data.copy()))
    return out


def permute(w: np.ndarray, n_head: int, n_head_kv) -> np.ndarray:
    """LlamaModel.permute: each head's rotated halves interleaved, so RoPE pairs are adjacent rows."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class Writer(gguf.GGUFWriter):
    """The gguf package's writer, but it also writes an empty array, which GGUF allows and the package refuses."""

    def _pack_val(self, val, vtype, add_vtype, sub_type=None) -> bytes:
        if vtype == gguf.GGUFValueType.ARRAY and isinstance(val, list) and not val:
            return (self._pack("I", vtype) if add_vtype else b"") + self._pack("I", sub_type) + self._pack("Q", 0)
        return super()._pack_val(val, vtype, add_vtype, sub_type)


def finish(writer: gguf.GGUFWriter, path: pathlib.Path) -> None:
    writer.write_header_to_file(path=path)
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def meta_model(writer: gguf.GGUFWriter, kind: str) -> None:
    """ModelBase.prepare_metadata up to set_gguf_parameters: general.type, name and size label."""
    total, shared, expert, expert_count = writer.get_total_parameter_count()
    metadata = gguf.Metadata.load(None, SOURCE, None, total)
    if metadata.name is None:
        metadata.name = SOURCE.name
    if metadata.size_label is None and total > 0:
        metadata.size_label = gguf.size_label(total, shared, expert, expert_count)
    writer.add_type(kind)
    metadata.set_gguf_meta_model(writer)


def write_text(config: dict, tensors: list, path: pathlib.Path) -> None:
    """LlamaModel (VLlama3ForCausalLM) with --outtype f32."""
    hp = {**config, **config["text_config"]}
    n_layer = hp["num_hidden_layers"]
    writer = Writer(path=None, arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layer)
    for name, data in tensors:
        name = name.replace("text_model.", "")  # LlamaModel.filter_tensors, "for SmolVLM"
        if "vision_" in name or "model.connector." in name:  # TextModel.filter_tensors skips the vision tower
            continue
        if name.endswith(("q_proj.weight", "q_proj.bias")):
            data = permute(data, hp["num_attention_heads"], hp["num_attention_heads"])
        if name.endswith(("k_proj.weight", "k_proj.bias")):
            data = permute(data, hp["num_attention_heads"], hp["num_key_value_heads"])
        new_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert new_name is not None, name
        writer.add_tensor(new_name, data.astype(np.float32), raw_dtype=gguf.GGMLQuantizationType.F32)

    meta_model(writer, gguf.GGUFType.MODEL)
    # TextModel.set_gguf_parameters for the keys this config has, then LlamaModel's.
    writer.add_block_count(n_layer)
    writer.add_context_length(hp["max_position_embeddings"])
    writer.add_embedding_length(hp["hidden_size"])
    writer.add_feed_forward_length(hp["intermediate_size"])
    writer.add_head_count(hp["num_attention_heads"])
    writer.add_head_count_kv(hp["num_key_value_heads"])
    rope = hp["rope_parameters"]
    assert rope["rope_type"] == "default", rope  # the converter logs "Unknown RoPE type" and adds no scaling
    writer.add_rope_freq_base(rope["rope_theta"])
    writer.add_layer_norm_rms_eps(hp["rms_norm_eps"])
    writer.add_key_length(hp["head_dim"])
    writer.add_value_length(hp["head_dim"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(hp["vocab_size"])
    writer.add_rope_dimension_count(hp.get("head_dim") or hp["hidden_size"] // hp["num_attention_heads"])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    # TextModel._set_vocab_gpt2 (sentencepiece and LlamaHfVocab find nothing for this folder).
    tokenizer = AutoTokenizer.from_pretrained(SOURCE)
    vocab_size = hp["vocab_size"]
    reverse = {i: t for t, i in tokenizer.vocab.items()}
    added = tokenizer.get_added_vocab()
    decoder = tokenizer.added_tokens_decoder
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        token = reverse[i]
        if token in added:
            if not decoder[i].normalized:
                token = tokenizer.decode(tokenizer.encode(token, add_special_tokens=False))
            special = decoder[i].special or (token.startswith("<|") and token.endswith("|>"))
            types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(token)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(SOURCE, load_merges=True)
    assert not special.merges
    special.add_to_gguf(writer)
    # The one key the converter leaves out: it writes no merges for a tokenizer without any (this one's 256 bytes),
    # and llama.cpp and cellm both refuse a BPE vocabulary without the key, so the file says "none" outright.
    writer.add_key_value(gguf.Keys.Tokenizer.MERGES, [], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.STRING)
    finish(writer, path)


def f16_stored(hf_name: str, data: np.ndarray) -> bool:
    """Whether the mmproj stores this tensor in F16 (SmolVLMModel.tensor_force_quant and prepare_tensors):
    ".embeddings." tensors and 1-D tensors are F32, every other weight takes the file type, F16."""
    return ".embeddings." not in hf_name and data.ndim > 1 and hf_name.endswith(".weight")


def write_mmproj(config: dict, processor: dict, tensors: list, path: pathlib.Path) -> None:
    """SmolVLMModel (MmprojModel) with --outtype auto, which is f16 for a float32 checkpoint."""
    vision = config["vision_config"]
    writer = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.MMPROJ])
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, vision["num_hidden_layers"])
    for name, data in tensors:
        if not ("vision_tower" in name or "vision_model" in name or "model.connector" in name):
            continue
        new_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert new_name is not None, name
        if f16_stored(name, data):
            writer.add_tensor(new_name, data.astype(np.float16), raw_dtype=gguf.GGMLQuantizationType.F16)
        else:
            writer.add_tensor(new_name, data.astype(np.float32), raw_dtype=gguf.GGMLQuantizationType.F32)

    meta_model(writer, gguf.GGUFType.MMPROJ)
    # MmprojModel.set_gguf_parameters, then SmolVLMModel's.
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_clip_has_vision_encoder(True)
    writer.add_vision_projection_dim(config["text_config"]["hidden_size"])
    writer.add_vision_image_size(vision["image_size"])
    writer.add_vision_patch_size(vision["patch_size"])
    writer.add_vision_embedding_length(vision["hidden_size"])
    writer.add_vision_feed_forward_length(vision["intermediate_size"])
    writer.add_vision_block_count(vision["num_hidden_layers"])
    writer.add_vision_head_count(vision["num_attention_heads"])
    writer.add_vision_image_mean(processor["image_mean"])
    writer.add_vision_image_std(processor["image_std"])
    writer.add_clip_projector_type(gguf.VisionProjectorType.IDEFICS3)
    writer.add_vision_attention_layernorm_eps(vision.get("layer_norm_eps", 1e-5))
    writer.add_vision_projector_scale_factor(config.get("scale_factor", 2))
    writer.add_vision_use_gelu(True)
    writer.add_vision_preproc_image_size(processor.get("size", {}).get("longest_edge", vision["image_size"]))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    finish(writer, path)


def f16_rounding_reference(tensors: list) -> dict:
    """transformers' "image" case of smolvlm-tiny over the weights as the mmproj stores them (F16 matrices read
    back as float32) against the float32 weights."""
    reference = json.loads((SOURCE / "reference.json").read_text())
    case = reference["cases"]["image"]
    processor = transformers.AutoProcessor.from_pretrained(SOURCE)
    model = transformers.AutoModelForImageTextToText.from_pretrained(
        SOURCE, dtype=torch.float32, attn_implementation="eager").eval()
    inputs = processor(images=[[str(REPO / case["image"])]], text=[case["prompt"]], return_tensors="pt")
    assert inputs["input_ids"][0].tolist() == case["input_ids"]
    with torch.no_grad():
        want_features = model.model.get_image_features(inputs["pixel_values"],
                                                       inputs["pixel_attention_mask"]).pooler_output[0]
        want_logits = model(**inputs).logits[0]
        params = dict(model.named_parameters())
        rounded = 0
        for name, data in tensors:
            if ("vision_model" in name or "model.connector" in name) and f16_stored(name, data):
                p = params[name]
                p.copy_(p.to(torch.float16).to(torch.float32))
                rounded += 1
        got_features = model.model.get_image_features(inputs["pixel_values"],
                                                      inputs["pixel_attention_mask"]).pooler_output[0]
        got_logits = model(**inputs).logits[0]
    cos = torch.nn.functional.cosine_similarity
    return {
        "case": "image (tests/data/hf/smolvlm-tiny/reference.json)",
        "f16_tensors_rounded": rounded,
        "image_embeddings_worst_cosine_vs_f32": float(cos(got_features, want_features, dim=-1).min()),
        "logits_worst_cosine_vs_f32": float(cos(got_logits, want_logits, dim=-1).min()),
        "last_logits": [float(f"{v:.9g}") for v in got_logits[-1].tolist()],
    }


def check_against(ours: pathlib.Path, theirs: pathlib.Path) -> None:
    """Every key (but the empty merges list, which the converter leaves out) and every tensor's type, shape and
    bytes equal in the files of the same name in `theirs`."""
    for file in (TEXT_FILE, MMPROJ_FILE):
        a, b = gguf.GGUFReader(ours / file), gguf.GGUFReader(theirs / file)
        keys_a = [k for k in a.fields if k != "GGUF.kv_count" and (k != gguf.Keys.Tokenizer.MERGES or a.fields[k].contents())]
        keys_b = [k for k in b.fields if k != "GGUF.kv_count"]
        assert keys_a == keys_b, (file, keys_a, keys_b)
        for k in keys_a:
            fa, fb = a.fields[k], b.fields[k]
            assert fa.types == fb.types and fa.contents() == fb.contents(), (file, k, fa.contents(), fb.contents())
        assert [t.name for t in a.tensors] == [t.name for t in b.tensors], file
        for ta, tb in zip(a.tensors, b.tensors):
            assert ta.tensor_type == tb.tensor_type and list(ta.shape) == list(tb.shape), (file, ta.name)
            assert ta.data.tobytes() == tb.data.tobytes(), (file, ta.name)
        print(f"{file}: {len(keys_a)} keys and {len(a.tensors)} tensors equal to {theirs / file}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    parser.add_argument("--check-against", type=pathlib.Path,
                        help=f"a folder with {TEXT_FILE} and {MMPROJ_FILE} from llama.cpp's converter")
    args = parser.parse_args()

    config = json.loads((SOURCE / "config.json").read_text())
    processor = json.loads((SOURCE / "processor_config.json").read_text())["image_processor"]
    tensors = read_safetensors(SOURCE / "model.safetensors")
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(config, tensors, args.out / TEXT_FILE)
    write_mmproj(config, processor, tensors, args.out / MMPROJ_FILE)
    rounding = f16_rounding_reference(tensors)
    reference = {
        "source": f"scripts/hf_reference/smolvlm_gguf.py from tests/data/hf/smolvlm-tiny; gguf {importlib.metadata.version('gguf')}"
                  f" (mirroring ggml-org/llama.cpp@0c1e57098's convert_hf_to_gguf.py), transformers "
                  f"{transformers.__version__}, torch {torch.__version__}",
        "text_model": TEXT_FILE,
        "mmproj": MMPROJ_FILE,
        "f16_rounding": rounding,
    }
    (args.out / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")
    size = sum((args.out / f).stat().st_size for f in (TEXT_FILE, MMPROJ_FILE, "reference.json"))
    print(f"wrote {args.out}: {size} bytes; F16 rounding: embeddings worst cosine "
          f"{rounding['image_embeddings_worst_cosine_vs_f32']:.9f}, logits {rounding['logits_worst_cosine_vs_f32']:.9f}")
    if args.check_against is not None:
        check_against(args.out, args.check_against)


if __name__ == "__main__":
    main()
