#!/usr/bin/env python3
"""Renders real models' chat templates with Python's jinja2, exactly as transformers' apply_chat_template sets it
up, and with cellm's interpreter (jinja_render), and compares the two byte for byte. This comparison defines
"correct" for host/jinja.

The templates are llama.cpp's models/templates/ from the llama-cpp-python 0.3.36 source distribution, found in or
fetched into ${CELLM_CACHE:-~/.cache/cellm} by scripts/fetch_llamacpp_source.sh (never committed).

A template counts as identical when every conversation renders to the same bytes, or fails in both (jinja2
raising, e.g. a template that refuses a system role, and cellm raising TemplateError). Fails when a template
outside KNOWN_DIFFERENCES differs, or when one inside it has started to match.

Usage: compare_templates.py --render build/bin/jinja_render [--templates DIR] [--verbose]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

LLAMA_CPP_PYTHON = "0.3.36"

# Templates that may differ, each with why. Keep it honest: a listed template that matches fails the test.
KNOWN_DIFFERENCES = {
}

NOW = 1752537600  # 2025-07-15 00:00:00 UTC, strftime_now()'s clock on both sides (TZ=UTC)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city's name, e.g. 'Paris'"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_web",
            "description": "Search the web & return the top results",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for"},
                    "max_results": {"type": "integer", "description": "How many results (1-10)"},
                    "safe": {"type": "boolean", "description": "Filter adult content"},
                },
                "required": ["query"],
            },
        },
    },
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "Hello! What can you do?"}
MULTI_TURN = [
    SYSTEM,
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
    {"role": "user", "content": "And what's a good caf\u00e9 there? \u2615"},
]
THINKING = [
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?"},
    {"role": "user", "content": "Tell me a joke."},
]


# Multimodal content as OpenAI sends it: a list of typed parts.
CONTENT_PARTS = [
    SYSTEM,
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this picture?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "A cat on a mat."}]},
    {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]},
]


def tool_call(arguments, content=""):
    # Mistral's templates insist on 9 alphanumerics for an id.
    return [
        {"role": "user", "content": "What's the weather in Paris?"},
        {
            "role": "assistant",
            "content": content,
            "tool_calls": [{"id": "a1b2c3d4e", "type": "function",
                            "function": {"name": "get_weather", "arguments": arguments}}],
        },
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "name": "get_weather",
         "content": "{\"temperature\": 18, \"sky\": \"clear\"}"},
    ]


# (name, messages, tools, add_generation_prompt)
CONVERSATIONS = [
    ("user", [USER], None, True),
    ("system+user", [SYSTEM, USER], None, True),
    ("multi-turn", MULTI_TURN, None, False),
    ("multi-turn+prompt", MULTI_TURN, None, True),
    ("tools", [SYSTEM, {"role": "user", "content": "What is the weather in Paris?"}], TOOLS, True),
    ("thinking", THINKING, None, True),
    ("tool-call", tool_call({"city": "Paris", "unit": "celsius"}), TOOLS, True),
    ("tool-call-json-arguments", tool_call('{"city": "Paris", "unit": "celsius"}'), TOOLS, True),
    ("tool-call-null-content", tool_call({"city": "Paris"}, None), TOOLS, False),
    ("content-parts", CONTENT_PARTS, None, True),
]


def context(messages, tools, add_generation_prompt):
    # What apply_chat_template passes: messages, tools, documents, add_generation_prompt, and the special tokens.
    return {
        "messages": messages,
        "tools": tools,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
        "bos_token": "<s>",
        "eos_token": "</s>",
    }


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker as far as rendering goes: {% generation %}...{% endgeneration %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def jinja2_environment():
    # transformers' _cached_compile_jinja_template (src/transformers/utils/chat_template_utils.py).
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.fromtimestamp(NOW).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def find_templates():
    """llama.cpp's models/templates, from the sources scripts/fetch_llamacpp_source.sh fetches (once) and names."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../scripts/fetch_llamacpp_source.sh")
    env = dict(os.environ, LLAMA_CPP_PYTHON_VERSION=LLAMA_CPP_PYTHON)
    source = subprocess.run([script], check=True, capture_output=True, text=True, env=env).stdout.strip()
    return os.path.join(source, "models/templates")


def first_difference(a, b):
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    return i


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--render", required=True, help="the jinja_render program")
    ap.add_argument("--templates", help="folder of .jinja templates (default: found or fetched)")
    ap.add_argument("--verbose", action="store_true", help="show both outputs around each difference")
    args = ap.parse_args()

    os.environ["TZ"] = "UTC"
    time.tzset()
    folder = args.templates or find_templates()
    names = sorted(n for n in os.listdir(folder) if n.endswith(".jinja"))
    if not names:
        print(f"compare_templates: no templates in {folder}", file=sys.stderr)
        return 1

    env = jinja2_environment()
    cases, expected = [], []
    for name in names:
        path = os.path.join(folder, name)
        with open(path, encoding="utf-8") as f:
            source = f.read()
        try:
            template = env.from_string(source)
        except Exception as e:  # noqa: BLE001 (any compile error counts as the template failing)
            template, compile_error = None, f"{type(e).__name__}: {e}"
        for conv, messages, tools, agp in CONVERSATIONS:
            ctx = context(messages, tools, agp)
            cases.append({"template_path": path, "context": ctx, "now": NOW, "name": name, "conversation": conv})
            if template is None:
                expected.append({"error": compile_error})
                continue
            try:
                expected.append({"output": template.render(**json.loads(json.dumps(ctx)))})
            except Exception as e:  # noqa: BLE001
                expected.append({"error": f"{type(e).__name__}: {e}"})

    with tempfile.TemporaryDirectory() as tmp:
        cases_path = os.path.join(tmp, "cases.json")
        results_path = os.path.join(tmp, "results.json")
        with open(cases_path, "w", encoding="utf-8") as f:
            json.dump([{k: c[k] for k in ("template_path", "context", "now")} for c in cases], f, ensure_ascii=False)
        run = subprocess.run([args.render, cases_path, results_path], env=dict(os.environ, TZ="UTC"))
        if run.returncode != 0:
            print(f"compare_templates: {args.render} exited with {run.returncode}", file=sys.stderr)
            return 1
        with open(results_path, encoding="utf-8") as f:
            actual = json.load(f)

    per_template = {}
    for case, want, got in zip(cases, expected, actual):
        problems = per_template.setdefault(case["name"], [])
        if "error" in want and "error" in got:
            continue
        if want.get("output") == got.get("output") and "output" in want:
            continue
        conv = case["conversation"]
        if "error" in want:
            problems.append(f"{conv}: jinja2 fails ({want['error'][:120]}) but cellm renders")
        elif "error" in got:
            problems.append(f"{conv}: cellm fails ({got['error'][:160]}) but jinja2 renders")
        else:
            w, g = want["output"], got["output"]
            at = first_difference(w, g)
            line = f"{conv}: outputs differ at char {at}: jinja2 {w[max(0, at - 30):at + 40]!r} vs cellm {g[max(0, at - 30):at + 40]!r}"
            problems.append(line)
            if args.verbose:
                problems.append(f"--- jinja2\n{w}\n--- cellm\n{g}\n---")

    identical = 0
    failures = []
    for name in names:
        problems = per_template[name]
        errors_both = sum(1 for c, w, g in zip(cases, expected, actual) if c["name"] == name and "error" in w and "error" in g)
        note = f" ({errors_both} of {len(CONVERSATIONS)} conversations fail in both)" if errors_both else ""
        if not problems:
            identical += 1
            if name in KNOWN_DIFFERENCES:
                print(f"MATCH-BUT-LISTED {name}{note}")
                failures.append(f"{name} is listed in KNOWN_DIFFERENCES but now renders identically: remove it")
            else:
                print(f"ok    {name}{note}")
            continue
        reason = KNOWN_DIFFERENCES.get(name)
        print(f"{'known' if reason else 'DIFF '} {name}{note}" + (f" -- {reason}" if reason else ""))
        for p in problems:
            print(f"        {p}")
        if not reason:
            failures.append(f"{name} differs from jinja2")

    print(f"\n{identical} of {len(names)} templates render identically in all cases "
          f"({len(CONVERSATIONS)} conversations each, jinja2 {jinja2.__version__})")
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
