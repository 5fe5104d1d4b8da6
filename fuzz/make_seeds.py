#!/usr/bin/env python3
"""Small hand-made seeds for the fuzz targets (fuzz/make_corpus.sh calls this): a GGUF of a few KiB with every
metadata value type and tiny tensors, a Hugging Face folder packed as fuzz_safetensors reads it, and inputs
for the tokenizer and chat-template targets. Usage: make_seeds.py CORPUS_DIR"""
import json
import os
import struct
import sys

out = sys.argv[1]


def put(target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data)


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(version=3, alignment=None):
    kvs = []

    def kv(key, vtype, payload):
        kvs.append(gstr(key) + struct.pack("<I", vtype) + payload)

    kv("general.architecture", 8, gstr("llama"))
    kv("general.name", 8, gstr("seed"))
    kv("llama.block_count", 4, struct.pack("<I", 1))
    kv("llama.embedding_length", 4, struct.pack("<I", 8))
    kv("llama.rope.freq_base", 6, struct.pack("<f", 10000.0))
    kv("a.u8", 0, b"\x01")
    kv("a.i8", 1, b"\xff")
    kv("a.u16", 2, struct.pack("<H", 2))
    kv("a.i16", 3, struct.pack("<h", -2))
    kv("a.i32", 5, struct.pack("<i", -3))
    kv("a.bool", 7, b"\x01")
    kv("a.u64", 10, struct.pack("<Q", 4))
    kv("a.i64", 11, struct.pack("<q", -4))
    kv("a.f64", 12, struct.pack("<d", 0.5))
    kv("a.nested", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 4, 2) + struct.pack("<II", 1, 2))
    tokens = ["<|im_start|>", "<|im_end|>", "a", "b", "ab", "\u0120", "\u0120a"]
    kv("tokenizer.ggml.model", 8, gstr("gpt2"))
    kv("tokenizer.ggml.pre", 8, gstr("smollm"))
    kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, len(tokens)) + b"".join(gstr(t) for t in tokens))
    kv("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, len(tokens)) + struct.pack("<7i", 3, 3, 1, 1, 1, 1, 1))
    kv("tokenizer.ggml.merges", 9, struct.pack("<IQ", 8, 2) + gstr("a b") + gstr("\u0120 a"))
    kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 0))
    kv("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", 1))
    kv("tokenizer.chat_template", 8, gstr("{% for message in messages %}<|im_start|>{% endfor %}"))
    align = alignment or 32
    if alignment:
        kv("general.alignment", 4, struct.pack("<I", alignment))
    # name, type, dims, bytes: F32 [8], F16 [8, 2], Q8_0 [32] (34 bytes), Q4_0 [32] (18 bytes)
    tensors = [("token_embd.weight", 1, [8, 2], 32), ("output_norm.weight", 0, [8], 32),
               ("blk.0.attn_q.weight", 8, [32], 34), ("blk.0.ffn_up.weight", 2, [32], 18)]
    infos, data = [], b""
    for name, ttype, dims, size in tensors:
        infos.append(gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<q", d) for d in dims)
                     + struct.pack("<IQ", ttype, len(data)))
        data += bytes((i * 7) & 0x3f for i in range(size))
        data += b"\0" * (-len(data) % align)
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs) + b"".join(infos)
    head += b"\0" * (-len(head) % align)
    return head + data


put("gguf", "small-v3.gguf", gguf())
put("gguf", "small-v2.gguf", gguf(version=2))
put("gguf", "small-align64.gguf", gguf(alignment=64))
put("gguf", "empty.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 0))

# Hugging Face folder: config.json, tokenizer.json, model.safetensors joined by fuzz_safetensors's separator.
sep = b"\n--8<--\n"
config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8, "num_hidden_layers": 1,
          "intermediate_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 4,
          "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
          "bos_token_id": 0, "eos_token_id": 1}
vocab = {"<s>": 0, "</s>": 1, "a": 2, "b": 3}
tokenizer = {"version": "1.0", "added_tokens": [{"id": 0, "content": "<s>", "special": True},
                                                 {"id": 1, "content": "</s>", "special": True}],
             "pre_tokenizer": {"type": "ByteLevel"},
             "model": {"type": "BPE", "vocab": vocab, "merges": ["a b"], "byte_fallback": False}}
shapes = {"model.embed_tokens.weight": [4, 8], "model.norm.weight": [8],
          "model.layers.0.self_attn.q_proj.weight": [8, 8], "model.layers.0.self_attn.k_proj.weight": [4, 8]}
header, blob = {"__metadata__": {"format": "pt"}}, b""
for i, (name, shape) in enumerate(shapes.items()):
    n = 1
    for d in shape:
        n *= d
    dtype = ["F32", "F16", "BF16", "F32"][i]
    size = n * (4 if dtype == "F32" else 2)
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + size]}
    blob += bytes((j * 5) & 0x3f for j in range(size))
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
st = struct.pack("<Q", len(text)) + text + blob
put("safetensors", "llama-folder", json.dumps(config).encode() + sep + json.dumps(tokenizer).encode() + sep + st)
put("safetensors", "no-tokenizer", json.dumps(config).encode() + sep + sep + st)
put("safetensors", "header-only", st)


def tok_input(flags, text, ids):
    b = text.encode()
    return bytes([flags]) + struct.pack("<H", len(b)) + b + b"".join(struct.pack("<H", i) for i in ids)


texts = ["Hello world! The quick brown fox.", "<|im_start|>user\nhi there<|im_end|>\n", "  spaces\t\ttabs\n\nnew",
         "caf\u00e9 \U0001F600 \u4e2d\u6587 12345 don't I'm", "<start_of_turn>user\nhello<end_of_turn>", ""]
for i, t in enumerate(texts):
    for flags in (0, 3, 4 | 1, 8 | 2, 12):
        for target in ("bpe", "spm"):
            put(target, "text%d-%d" % (i, flags), tok_input(flags, t, [0, 1, 2, 100, 300, 511, 65535, 260]))

chat = {
    "chatml": b"\x04system\x01Be brief.\x02user\x01Hi\x02assistant\x01Hello!\x02user\x01What is 2+2?",
    "llama3": b"\x05user\x01Hi\x02assistant\x01Hello\x02user\x01Again",
    "gemma": b"\x06system\x01Rules\x02user\x01Hi\x02assistant\x01Yo\x02user\x01Bye",
    "gemma-bad": b"\x02user\x01a\x02user\x01b",
    "plain": b"\x07user\x01just text\x03default system",
    "jinja-chatml": b"\x00{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    "jinja-llama3": b"\x01<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n<|eot_id|>",
    "jinja-gemma": b"\x02<start_of_turn>{{ role }}\n<end_of_turn>",
}
for name, data in chat.items():
    put("chat_template", name, data)

# Grammars: the text, a NUL, then text to feed byte by byte.
gbnf = {
    "json": b'root ::= object\nvalue ::= object | array | string | number | ("true" | "false" | "null") ws\n'
            b'object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws\n'
            b'array ::= "[" ws ( value ("," ws value)* )? "]" ws\n'
            b'string ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\\"" ws\n'
            b'number ::= "-"? [0-9]+ ("." [0-9]+)? ws\nws ::= | " " | "\\n" [ \\t]{0,20}\n\0{"a": [1, true, "\xc3\xa9"]}',
    "repeat": b'root ::= ("ab" | [x-z]){2,5} "."? # comment\n\0abxy.',
    "classes": b'root ::= [^a-z\\u00e9]+ | .\n\0\xe2\x82\xac!',
    "rules": b'root ::= a b\na ::= "x"\n  | "y" a\nb ::= ("" )* "z"\n\0yyxz',
}
for name, data in gbnf.items():
    put("grammar", name, data)
schemas = {
    "object": (b'{"type":"object","properties":{"name":{"type":"string","minLength":1},"age":{"type":"integer",'
               b'"minimum":0,"maximum":150},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},'
               b'"required":["name"],"additionalProperties":false}\0{"name":"Al","age":42,"tags":["a"]}'),
    "refs": (b'{"$defs":{"node":{"type":"object","properties":{"v":{"type":["number","null"]},"next":{"$ref":"#/$defs/node"}}}},'
             b'"$ref":"#/$defs/node"}\0{"v":1.5,"next":{"v":null}}'),
    "formats": (b'{"anyOf":[{"type":"string","format":"date-time"},{"type":"string","pattern":"^[A-Z]{2}-\\\\d+$"},'
                b'{"const":true}]}\0"AB-12"'),
    "refused": b'{"not":{"type":"string"}}',
}
for name, data in schemas.items():
    put("json_schema", name, data)

# HTTP requests: a first byte choosing the read size, then requests as a client sends them.
http = {
    "chat": b"\x07POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
            b"Content-Length: 17\r\n\r\n{\"messages\": []}\n",
    "pipelined": b"\x00GET /health HTTP/1.1\r\n\r\nGET /v1/models/a%2Fb?x HTTP/1.0\nConnection: keep-alive\n\n",
    "chunked": b"\x03POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
               b"4;x=y\r\nabcd\r\n0\r\nT: v\r\n\r\n",
    "bad": b"\x3fGET / HTTP/2.0\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
}
for name, data in http.items():
    put("http_request", name, data)

# Chat templates for fuzz_jinja_template (host/jinja): the statements, filters and tests real templates use.
jinja = {
    "chatml": b"{{ bos_token }}{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
              b"message['content'] | trim + '<|im_end|>\\n' }}{%- endfor %}\n"
              b"{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}",
    "tools": b"{%- if tools %}{%- for tool in tools %}{{ tool | tojson(indent=2) }}\n{%- endfor %}{%- endif %}\n"
             b"{%- for m in messages if m.role != 'system' %}{%- if m.tool_calls is defined %}"
             b"{%- for tc in m.tool_calls %}{{ tc.function.name }}({{ tc.function.arguments | tojson }})"
             b"{%- endfor %}{%- elif m.role == 'tool' %}[{{ m.tool_call_id }}] {{ m.content }}"
             b"{%- else %}{{ m.role | upper }}: {{ m.content }}{% endif %}\n{%- endfor %}",
    "macros": b"{%- macro render(v, depth=0) -%}{{ caller() if caller is defined }}{%- if v is mapping -%}{%- for k, x in v | dictsort -%}"
              b"{{ '  ' * depth }}{{ k }}={{ render(x, depth + 1) }};{%- endfor -%}{%- elif v is iterable and v "
              b"is not string -%}[{{ v | map('string') | join(', ') }}]{%- else -%}{{ v }}{%- endif -%}"
              b"{%- endmacro -%}{{ render(tools[0]) }}{% call render(messages[0]) %}x{% endcall %}",
    "namespace": b"{%- set ns = namespace(last=none, n=0) -%}{%- for m in messages[::-1] -%}"
                 b"{%- if ns.last is none and m.role == 'user' -%}{%- set ns.last = loop.index0 -%}{%- endif -%}"
                 b"{%- set ns.n = ns.n + (m.content | length) -%}{%- if loop.last %}{% break %}{% endif -%}"
                 b"{%- endfor -%}{{ ns.last }} {{ ns.n }} {{ strftime_now('%d %b %Y') }}"
                 b"{{ raise_exception('bad role') if messages[0].role == 'x' }}",
    "strings": b"{% set c = messages[1].content %}{{ c.split(' ')[0].strip('?') }}|{{ c[::-1] }}|"
               b"{{ c.startswith(('W', 'x')) }}|{{ '{}-{}'.format(c | length, c | wordcount) }}|"
               b"{{ c | replace('Paris', 'Rome') | title }}{# comment #}{% raw %}{{ raw }}{% endraw %}",
}
for name, data in jinja.items():
    put("jinja_template", name, data)

# Generated text for fuzz_tool_call (host/tools): byte 0 picks the format (Hermes, Llama3, Gemma3, FunctionGemma,
# SmolLM2, QwenXml), the rest is what a model might write, calls and near-calls.
tool_text = {
    "hermes": b"\x00Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"a\\\"b\", \"n\": 3}}\n"
              b"</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"\xc3\xa9\"",
    "llama3": b"\x01```json\n{\"name\": \"f\", \"parameters\": {\"s\": \"x\", \"o\": {\"k\": [1, 2]}}}\n```",
    "gemma3": b"\x02{\"name\": \"f\", \"parameters\": {\"s\": \"x\"}} and then {\"name\"",
    "function_gemma": b"\x03<start_function_call>call:f{s:<escape>a,b<escape>,n:-4,b:true,o:{k:[1,2]}}"
                      b"<end_function_call><start_function_call>call:f{",
    "smollm2": b"\x04<tool_call>[{\"name\": \"f\", \"arguments\": {\"s\": \"x\"}}, {\"name\": \"f\"]</tool_call>",
    "qwen_xml": b"\x05<tool_call>\n<function=f>\n<parameter=s>\nline one\n</param\n</parameter>\n<parameter=n>\n7\n"
                b"</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=f>\n<parameter=b>\nTrue",
}
for name, data in tool_text.items():
    put("tool_call", name, data)
