#!/usr/bin/env python3
"""Writes tests/data/tokenizer/smollm2.json and gemma3.json, the references the tokenizer tests compare against.

- token ids from llama.cpp (llama-cpp-python, vocab only) on the real SmolLM2 GGUF, for texts covering ASCII,
  accents, CJK, emoji with ZWJ sequences, whitespace runs, long numbers, code and special tokens;
- the pieces llama.cpp prints for those ids;
- chat prompts rendered by jinja2 from the SmolLM2 template (read from the GGUF) and the official Llama 3 and
  Gemma 3 templates (below), with their ids where the vocabulary is SmolLM2's;
- HF `tokenizers` splits of the texts for every pre-tokenizer pattern set cellm implements, so each variant is
  checked without its model;
- for Gemma 3's SentencePiece vocabulary (gemma3.json): llama.cpp's ids for the same texts plus Gemma's own
  special tokens, with and without BOS and special-token parsing, its detokenization of those ids, the pieces,
  and Gemma 3's chat template rendered by jinja2 with the ids of each prompt.

Run with /root/.cache/cellm/venv/bin/python scripts/make_tokenizer_reference.py [smollm2.gguf [gemma3.gguf]]
"""
import ctypes
import json
import os
import re
import sys
from pathlib import Path

import jinja2.sandbox
import llama_cpp
from tokenizers import Regex, pre_tokenizers

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/tokenizer/smollm2.json"
GEMMA_OUT = ROOT / "tests/data/tokenizer/gemma3.json"
MODELS = Path(os.environ.get("CELLM_MODELS", Path.home() / ".cache/cellm/models"))
MODEL = Path(sys.argv[1]) if len(sys.argv) > 1 else MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_MODEL = Path(sys.argv[2]) if len(sys.argv) > 2 else MODELS / "gemma-3-270m-q4_k_m.gguf"

TEXTS = [
    "Hello, world! How's it going? I'm fine, they'll say we've done it, you'd think. DON'T SHOUT.",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe \u00e5ngstr\u00f6m \u00c9COLE \u0141\u00f3d\u017a",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\ud55c\uad6d\uc5b4 \u0645\u0631\u062d\u0628\u0627 "
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u03b1\u03b2\u03b3",
    "Emoji: \U0001f600\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 "
    "\U0001f3f3\ufe0f\u200d\U0001f308 \u2764\ufe0f done",
    "a  b   c    d\t\te\n\nf\n\n\n  g \t \n h    \n\n\n\n   end   ",
    "1 12 123 1234 12345 3.14159 1,000,000 2024-01-01 007 9876543210123456789",
    "def add(a, b):\n    return a + b  # sum\n\nif __name__ == '__main__':\n\tprint(add(1, 2))\n"
    "int main() { return x->y[0] <= 3 && !z; }",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<|endoftext|>x<|im_end|>",
    "   leading spaces and trailing newline\n",
    "",
]

# The patterns cellm's pre-tokenizer runs for each name (host/pretokenizer.cpp), one split after another.
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| "
          r"?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| "
         r"?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?"
         r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
         r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")
CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
PRE_PATTERNS = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
    "llama-bpe": [LLAMA3],
    "deepseek-llm": [
        "[\r\n]",
        "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
        "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
        "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
        "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d"
        "\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
        "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
        "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
        "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a"
        "\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2"
        "\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
        "\\s+$",
        CJK,
        "\\p{N}+",
    ],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK, r"\p{N}"],
    "deepseek-v3": [
        r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
        "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    ],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
    "smollm": [r"\p{N}", GPT2],
    "gpt-2": [GPT2],
    "qwen2": [QWEN2],
    "bloom": [" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"],
    "viking": [" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+", r"\p{N}"],
    "gpt-4o": [GPT4O],
}

SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

# Meta-Llama-3-8B-Instruct's tokenizer_config.json chat_template.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

# Gemma 3's chat_template (google/gemma-3-*-it tokenizer_config.json); the 270m GGUF carries none.
GEMMA_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "  Hi!\n"}],
    [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "Caf\u00e9 \U0001f600 and \u4f60\u597d"}],
]


def render(source, messages, bos_token):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)
    # The environment HF transformers renders chat templates with.
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source).render(messages=messages, add_generation_prompt=True, bos_token=bos_token)


# Gemma's own turn and control tokens, as the SmolLM2 texts carry SmolLM2's.
GEMMA_SPECIAL_TEXT = "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n<eos>x<end_of_turn><bos>  y"

GEMMA_CONVERSATIONS = CONVERSATIONS + [
    [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Sky colour?"},
     {"role": "assistant", "content": " Blue. "}, {"role": "user", "content": "And grass?\n"}],
]


def hf_split(patterns, text):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(p), behavior="isolated") for p in patterns])
    return [piece for piece, _ in pre.pre_tokenize_str(text)]


def write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, ensure_ascii=False, indent=1)
    # Lists of ids and pieces on one line each keep the file small and its diffs readable.
    text = re.sub(r"\[\n\s*([^\[\]{}]*?)\n\s*\]", lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text)
    path.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def write_gemma3():
    if not GEMMA_MODEL.exists():
        sys.exit(f"{GEMMA_MODEL} is missing: run scripts/fetch_models.sh")
    llm = llama_cpp.Llama(model_path=str(GEMMA_MODEL), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)

    def ids(text, add_bos, special):
        return llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)

    def detokenize(tokens):
        # llama.cpp's own detokenizer, special tokens written out (llama-cpp-python's wrapper drops a space).
        array = (llama_cpp.llama_token * max(len(tokens), 1))(*tokens)
        buf = ctypes.create_string_buffer(16 * len(tokens) + 64)
        n = llama_cpp.llama_detokenize(vocab, array, len(tokens), buf, len(buf), False, True)
        assert n >= 0
        return buf.raw[:n].decode("utf-8")

    def piece(token):
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
        assert 0 <= n <= len(buf)
        return buf.raw[:n].hex()

    encode = []
    for text in TEXTS + [GEMMA_SPECIAL_TEXT]:
        for add_bos in (False, True):
            for special in (False, True):
                tokens = ids(text, add_bos, special)
                encode.append({"text": text, "add_bos": add_bos, "parse_special": special, "ids": tokens,
                               "decoded": detokenize(tokens)})
    all_ids = sorted({i for entry in encode for i in entry["ids"]} | set(range(8)) | set(range(236, 300)))

    chat = []
    for messages in GEMMA_CONVERSATIONS:
        rendered = render(GEMMA_TEMPLATE, messages, "<bos>")
        chat.append({"template": "gemma", "messages": messages, "rendered": rendered,
                     "ids": ids(rendered, False, True)})

    write_json(GEMMA_OUT, {
        "model": GEMMA_MODEL.name,
        "tokenizer": {"model": llm.metadata.get("tokenizer.ggml.model"), "n_vocab": llm.n_vocab(),
                      "bos": llm.token_bos(), "eos": llm.token_eos(),
                      "add_bos": llm.metadata.get("tokenizer.ggml.add_bos_token") == "true",
                      "chat_template": llm.metadata.get("tokenizer.chat_template", "")},
        "encode": encode,
        "pieces_hex": {str(i): piece(i) for i in all_ids},
        "chat": chat,
    })


def main():
    if not MODEL.exists():
        sys.exit(f"{MODEL} is missing: run scripts/fetch_models.sh")
    llm = llama_cpp.Llama(model_path=str(MODEL), vocab_only=True, verbose=False)
    smollm_template = llm.metadata["tokenizer.chat_template"]

    def ids(text, special=True):
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    encode = []
    for text in TEXTS:
        encode.append({"text": text, "parse_special": True, "ids": ids(text)})
    encode.append({"text": TEXTS[-3], "parse_special": False, "ids": ids(TEXTS[-3], special=False)})
    all_ids = sorted({i for entry in encode for i in entry["ids"]} | set(range(17)))
    pieces = {str(i): llm.detokenize([i], special=True).hex() for i in all_ids}

    chat = []
    for messages in CONVERSATIONS:
        rendered = render(smollm_template, messages, "<|im_start|>")
        chat.append({"template": "chatml", "default_system_prompt": SMOLLM2_DEFAULT_SYSTEM, "messages": messages,
                     "rendered": rendered, "ids": ids(rendered)})
        chat.append({"template": "llama3", "messages": messages,
                     "rendered": render(LLAMA3_TEMPLATE, messages, "<|begin_of_text|>")})
        chat.append({"template": "gemma", "messages": messages, "rendered": render(GEMMA_TEMPLATE, messages, "<bos>")})

    splits = []
    for pre, patterns in PRE_PATTERNS.items():
        for text in TEXTS[:-3]:
            splits.append({"pre": pre, "text": text, "pieces": hf_split(patterns, text)})

    data = {
        "model": MODEL.name,
        "tokenizer": {"pre": llm.metadata.get("tokenizer.ggml.pre"), "n_vocab": llm.n_vocab(),
                      "bos": llm.token_bos(), "eos": llm.token_eos(), "chat_template": smollm_template},
        "encode": encode,
        "pieces_hex": pieces,
        "chat": chat,
        "splits": splits,
    }
    write_json(OUT, data)
    write_gemma3()


if __name__ == "__main__":
    main()
