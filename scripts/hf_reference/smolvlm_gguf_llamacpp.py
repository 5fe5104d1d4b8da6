"""llama.cpp's own image embeddings for tests/data/gguf-smolvlm-tiny, through llama-cpp-python's mtmd bindings.
Tooling only; run with the venv that bench/compare_llamacpp makes (llama-cpp-python 0.3.36 from PyPI):
    ~/.cache/cellm/venv-bench/bin/python scripts/hf_reference/smolvlm_gguf_llamacpp.py

llama.cpp (mtmd, ggml-org/llama.cpp@0c1e57098) loads the text GGUF and the mmproj, preprocesses
tests/data/hf/smolvlm-tiny's "image" case (its own idefics3 tiling and Lanczos, stb_image decoding) and encodes
each tile; the embeddings of the image chunks, in prompt order (tiles row by row, then the global image), go to
llamacpp_image_embeddings.f32 (raw little-endian float32, [rows, 64]) and their provenance to reference.json's
"llamacpp" entry. The tiny tokenizer has no "\\n\\n" token, so llama.cpp's text between the tiles and the global
image is one token short of transformers' (it looks "\\n\\n" up as one token); the embeddings do not depend on it.
"""
import ctypes
import importlib.metadata
import json
import pathlib

import numpy as np
import llama_cpp
from llama_cpp import mtmd_cpp as mtmd

REPO = pathlib.Path(__file__).resolve().parents[2]
PAIR = REPO / "tests" / "data" / "gguf-smolvlm-tiny"
FOLDER = REPO / "tests" / "data" / "hf" / "smolvlm-tiny"


def main() -> None:
    reference = json.loads((FOLDER / "reference.json").read_text())
    case = reference["cases"]["image"]
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(str(PAIR / "smolvlm-tiny-F32.gguf").encode(),
                                                 llama_cpp.llama_model_default_params())
    assert model is not None
    params = mtmd.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = 1
    ctx = mtmd.mtmd_init_from_file(str(PAIR / "mmproj-smolvlm-tiny-F16.gguf").encode(), model, params)
    assert ctx is not None
    data = (REPO / case["image"]).read_bytes()
    bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(ctx, (ctypes.c_uint8 * len(data)).from_buffer_copy(data),
                                                   len(data), False)
    assert bitmap is not None
    prompt = case["prompt"].replace("<image>", mtmd.mtmd_default_marker().decode()).encode()
    text = mtmd.mtmd_input_text()
    text.text, text.text_len, text.add_special, text.parse_special = prompt, len(prompt), False, True
    chunks = mtmd.mtmd_input_chunks_init()
    assert mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(text), (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap), 1) == 0
    rows = []
    for i in range(mtmd.mtmd_input_chunks_size(chunks)):
        chunk = mtmd.mtmd_input_chunks_get(chunks, i)
        if mtmd.mtmd_input_chunk_get_type(chunk) != mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE:
            continue
        n = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
        assert mtmd.mtmd_encode_chunk(ctx, chunk) == 0
        rows.append(np.ctypeslib.as_array(mtmd.mtmd_get_output_embd(ctx), shape=(n * 64,)).reshape(n, 64).copy())
    embeddings = np.concatenate(rows).astype("<f4")
    (PAIR / "llamacpp_image_embeddings.f32").write_bytes(embeddings.tobytes())

    want = np.fromfile(FOLDER / case["image_embeddings"]["file"], dtype="<f4").reshape(-1, 64)
    cos = (embeddings * want).sum(1) / np.linalg.norm(embeddings, axis=1) / np.linalg.norm(want, axis=1)
    pair_reference = json.loads((PAIR / "reference.json").read_text())
    pair_reference["llamacpp"] = {
        "source": f"llama-cpp-python {importlib.metadata.version('llama_cpp_python')} (mtmd, "
                  "ggml-org/llama.cpp@0c1e57098), 1 thread, CPU",
        "case": "image (tests/data/hf/smolvlm-tiny/reference.json)",
        "image_embeddings": {"file": "llamacpp_image_embeddings.f32", "shape": list(embeddings.shape)},
        "image_embeddings_worst_cosine_vs_transformers_f32": float(cos.min()),
    }
    (PAIR / "reference.json").write_text(json.dumps(pair_reference, indent=1) + "\n")
    print(f"llama.cpp: {embeddings.shape[0]} image rows, worst cosine against transformers {cos.min():.9f}")
    mtmd.mtmd_input_chunks_free(chunks)
    mtmd.mtmd_bitmap_free(bitmap)
    mtmd.mtmd_free(ctx)
    llama_cpp.llama_model_free(model)


if __name__ == "__main__":
    main()
