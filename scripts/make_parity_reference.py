#!/usr/bin/env python3
"""Writes tests/data/parity/<model>.json: llama.cpp's tokens and logits for one of the real models below
(SmolLM2-135M-Instruct Q4_1, Gemma-3-270M Q4_K_M), the reference cellm's tokenizer, chat template and forward
pass are checked against.

For each prompt: the prompt's token ids, 32 greedy tokens (argmax, no penalties; stops early after the
end-of-turn token), and the top-20 (id, logit) pairs at every position of prompt + generated tokens (position
i's logits predict token i + 1), all kept (logits_all) from one pass that evaluates the prompt as one batch and
then feeds the generated tokens one at a time, as an engine does. So each greedy token is the first of its
position's top-20. llama.cpp's numerics depend on the batch size: batch_vs_decode_max_abs_diff is the largest
logit difference between that pass and a single batch over the whole sequence, a measure of its rounding noise.

Run with the venv that has llama-cpp-python and jinja2:
    /root/.cache/cellm/venv/bin/python scripts/make_parity_reference.py [smollm2-135m | gemma3-270m] [MODEL.gguf]
The model file defaults to its name in $CELLM_MODELS (~/.cache/cellm/models), where scripts/fetch_models.sh
puts it.
"""
import hashlib
import json
import os
import sys
from pathlib import Path

import jinja2.sandbox
import llama_cpp
import numpy as np

GENERATED_TOKENS = 32
TOP = 20
SAMPLE = 64  # token ids whose logits are kept at every position too, for a whole-vocabulary cosine estimate
N_CTX = 512
N_THREADS = 2

# name: (file in $CELLM_MODELS, reference written under tests/data/parity, chat template for files without one)
MODELS = {
    "smollm2-135m": ("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-q4_1.json", None),
    # The Gemma-3-270M file carries no tokenizer.chat_template: Gemma 3's own, less the leading bos_token that
    # llama.cpp's tokenize(add_bos=True) adds (tokenizer.ggml.add_bos_token is true).
    "gemma3-270m": ("gemma-3-270m-q4_k_m.gguf", "gemma3-270m-q4_k_m.json",
                    "{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
                    "{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
                    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"),
}

PROMPTS = [
    {"text": "What is the capital of France?", "chat": True},
    {"text": "Write a haiku about the sea.", "chat": True},
    {"text": "Explain in one sentence what a CPU does.", "chat": True},
    {"text": "Once upon a time, in a small village by the mountains,", "chat": False},
    {"text": 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n', "chat": False},
    {"text": "The Eiffel Tower is located in", "chat": False},
]


def render_chat(template_source, question, bos, eos):
    """Renders the GGUF's tokenizer.chat_template the way Hugging Face transformers does."""
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.globals["raise_exception"] = raise_exception
    template = env.from_string(template_source)
    return template.render(messages=[{"role": "user", "content": question}], add_generation_prompt=True,
                           bos_token=bos, eos_token=eos)


def plain_cpu_weights():
    """Keeps weights in their file layout: no AMX or repacked buffers. Those change the numerics (and AMX tiles
    fault with SIGILL where the kernel does not grant them), while the plain CPU path is what cellm reproduces."""
    default_params = llama_cpp.llama_cpp.llama_model_default_params

    def without_extra_buffers():
        params = default_params()
        params.use_extra_bufts = False
        return params

    llama_cpp.llama_cpp.llama_model_default_params = without_extra_buffers


def top_pairs(row):
    """The TOP highest logits, highest first, lower id first among equals."""
    ids = np.argpartition(-row, TOP)[:TOP]
    ids = sorted(ids.tolist(), key=lambda i: (-float(row[i]), i))
    return [[i, round(float(row[i]), 4)] for i in ids]


def greedy(llm, prompt_ids, eos):
    """Prompt as one batch, then one token at a time. Returns the tokens and the logits of every position."""
    llm.reset()
    llm.eval(prompt_ids)
    generated = []
    while True:
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))  # first maximum: lowest id wins ties
        generated.append(token)
        if token == eos or len(generated) == GENERATED_TOKENS:
            break
        llm.eval([token])
    # The last token's own logits (predicting the token after it) complete the rows.
    llm.eval([generated[-1]])
    return generated, llm.scores[:llm.n_tokens].copy()


def teacher_forced(llm, ids):
    """All logits rows of one batch pass over `ids`."""
    llm.reset()
    llm.eval(ids)
    return llm.scores[:len(ids)].copy()


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_json(path, reference):
    """Indented JSON with one line per position, so diffs of the reference stay readable."""
    tables = [(p.pop("top"), p.pop("sample")) for p in reference["prompts"]]
    text = json.dumps(reference, indent=2, ensure_ascii=False)
    for prompt_top, prompt_sample in tables:
        for marker, table in (('"__top__"', prompt_top), ('"__sample__"', prompt_sample)):
            rows = ",\n".join("        " + json.dumps(row, separators=(",", ":")) for row in table)
            text = text.replace(marker, "[\n" + rows + "\n      ]", 1)
    path.write_text(text + "\n", encoding="utf-8")


def agreement(reference, full_rows, other):
    """How far one other llama.cpp run lands from the reference run. `full_rows` are the reference run's logits,
    `other` holds (greedy ids, logits rows) per prompt from the other run; compared where the token sequences
    agree."""
    top1 = positions = greedy_same = below = 0
    worst_top20, worst_cosine, max_diff = 1.0, 1.0, 0.0
    for prompt, full, (greedy_ids, rows) in zip(reference["prompts"], full_rows, other):
        greedy_same += greedy_ids == prompt["greedy_ids"]
        shared = len(prompt["prompt_ids"]) + next(
            (i for i, (a, b) in enumerate(zip(greedy_ids, prompt["greedy_ids"])) if a != b), len(greedy_ids))
        for pos in range(min(shared, len(prompt["top"]))):
            ids = [i for i, _ in prompt["top"][pos]]
            ref = np.array([v for _, v in prompt["top"][pos]])
            got = rows[pos][ids]
            worst_top20 = min(worst_top20, float(ref @ got / np.linalg.norm(ref) / np.linalg.norm(got)))
            a, b = full[pos].astype(np.float64), rows[pos].astype(np.float64)
            cosine = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
            worst_cosine = min(worst_cosine, cosine)
            below += cosine < 0.999
            max_diff = max(max_diff, float(np.max(np.abs(ref - got))))
            top1 += int(np.argmax(rows[pos])) == ids[0]
            positions += 1
    return {"greedy_identical": greedy_same, "prompts": len(other), "top1_agreement": round(top1 / positions, 4),
            "worst_top20_cosine": round(worst_top20, 5), "worst_cosine": round(worst_cosine, 6),
            "positions": positions, "positions_below_0.999": below, "max_abs_diff_top20": round(max_diff, 4)}


def self_agreement(variants):
    """The noise floor any independent implementation is measured against: how far llama.cpp moves from its own
    reference run under evaluation orders that are just as valid (flash attention off; the whole sequence as
    one batch, which is what cellm's teacher-forced test runs). Each bar is the worst over the variants;
    greedy_identical comes from the flash-attention run, the only one that generates."""
    worst = {
        "greedy_identical": variants["flash_attn_off"]["greedy_identical"],
        "prompts": variants["flash_attn_off"]["prompts"],
        "top1_agreement": min(v["top1_agreement"] for v in variants.values()),
        "worst_top20_cosine": min(v["worst_top20_cosine"] for v in variants.values()),
        "worst_cosine": min(v["worst_cosine"] for v in variants.values()),
        "positions": max(v["positions"] for v in variants.values()),
        "positions_below_0.999": max(v["positions_below_0.999"] for v in variants.values()),
        "max_abs_diff_top20": max(v["max_abs_diff_top20"] for v in variants.values()),
    }
    return {**worst, "variants": variants}


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m"
    if name not in MODELS:
        sys.exit(f"unknown model '{name}' (known: {', '.join(MODELS)})")
    file_name, out_name, fallback_template = MODELS[name]
    models = os.environ.get("CELLM_MODELS", os.path.expanduser("~/.cache/cellm/models"))
    model_path = Path(sys.argv[2] if len(sys.argv) > 2 else os.path.join(models, file_name))
    out = Path(__file__).resolve().parent.parent / "tests/data/parity" / out_name

    plain_cpu_weights()
    # Flash attention: without it this llama.cpp build's batch pass and token-by-token decode disagree by up to
    # ~1 logit once a sequence passes ~20 tokens; with it they agree exactly on short sequences.
    llm = llama_cpp.Llama(str(model_path), n_ctx=N_CTX, n_threads=N_THREADS, logits_all=True, flash_attn=True,
                          verbose=False)
    metadata = llm.metadata
    bos, eos = llm.token_bos(), llm.token_eos()
    detok = lambda t: llm.detokenize([t], special=True).decode("utf-8", errors="replace")

    sample_ids = sorted(np.random.default_rng(0).choice(llm.n_vocab(), SAMPLE, replace=False).tolist())
    prompts, full_rows, batch_runs = [], [], []
    for prompt in PROMPTS:
        text = prompt["text"]
        if prompt["chat"]:
            template = metadata.get("tokenizer.chat_template", fallback_template)
            text = render_chat(template, text, detok(bos), detok(eos))
        # add_bos=True asks for the model's own rule (tokenizer.ggml.add_bos_token), which llama.cpp applies.
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        generated, rows = greedy(llm, ids, eos)
        full_rows.append(rows)
        batch_rows = teacher_forced(llm, ids + generated)
        batch_runs.append((generated, batch_rows))
        batch_diff = float(np.max(np.abs(batch_rows - rows)))
        prompts.append({
            "text": prompt["text"],
            "chat": prompt["chat"],
            "rendered": text,
            "prompt_ids": ids,
            "greedy_ids": generated,
            "greedy_text": llm.detokenize(generated, special=True).decode("utf-8", errors="replace"),
            "batch_vs_decode_max_abs_diff": round(batch_diff, 4),
            "top": [top_pairs(row) for row in rows],
            "top20": "__top__",
            "sample": [[round(float(row[i]), 3) for i in sample_ids] for row in rows],
            "sample_logits": "__sample__",
        })
        print(f"{prompt['text'][:40]!r}: {len(ids)} prompt + {len(generated)} generated tokens", file=sys.stderr)

    # The same prompts through llama.cpp's other attention path, to measure its own rounding noise.
    other = llama_cpp.Llama(str(model_path), n_ctx=N_CTX, n_threads=N_THREADS, logits_all=True, flash_attn=False,
                            verbose=False)
    other_runs = [greedy(other, p["prompt_ids"], eos) for p in prompts]

    reference = {
        "model": {
            "file": model_path.name,
            "sha256": sha256(model_path),
            "n_vocab": llm.n_vocab(),
            "bos_id": bos,
            "eos_id": eos,
            "add_bos": metadata.get("tokenizer.ggml.add_bos_token", "unset"),
        },
        "generator": {
            "llama_cpp_python": llama_cpp.__version__,
            "n_ctx": N_CTX,
            "n_threads": N_THREADS,
            "extra_buffer_types": False,
            "flash_attn": True,
            "greedy_tokens": GENERATED_TOKENS,
            "top": TOP,
            "logit_decimals": 4,
        },
        "sample_ids": sample_ids,
        "llama_cpp_self_agreement": None,
        "prompts": prompts,
    }
    reference["llama_cpp_self_agreement"] = self_agreement({
        "flash_attn_off": agreement(reference, full_rows, other_runs),
        "one_batch": agreement(reference, full_rows, batch_runs),
    })
    print("llama.cpp vs itself:", reference["llama_cpp_self_agreement"], file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, reference)
    print(out)


if __name__ == "__main__":
    main()
