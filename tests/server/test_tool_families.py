"""Tool calling in the call formats of families whose own chat templates render tools: Qwen 2.5 / 3 / 3.5
(`<tool_call>` JSON, the Hermes format) and Llama 3.x (`{"name", "parameters"}`), each through the model's real
template from llama.cpp's models/templates (llama-cpp-python 0.3.36's sources, fetched at test time by
scripts/fetch_llamacpp_source.sh, never committed) put into a copy of the tiny random-weight Qwen3 folder.

Random weights say nothing sensible, which is the point: with "required" or a name, the grammar alone must bring
every answer to a call that parses and fits its schema, rendered by the template and read back by the family's
parser; the history of a call and its result must render through the template too."""
import json
import subprocess
from pathlib import Path

import jsonschema
import pytest

from support import REPO, Server

TEMPLATES = {
    "qwen2.5": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "qwen3.5": "Qwen3.5-4B.jinja",
    "llama3.2": "meta-llama-Llama-3.2-3B-Instruct.jinja",
}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                                    "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                   "required": ["city", "days"], "additionalProperties": False}}},
         {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}},
                                       "required": ["zone"], "additionalProperties": False}}}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "Weather in Oslo?"}]


@pytest.fixture(scope="module")
def templates():
    source = subprocess.run([str(REPO / "scripts/fetch_llamacpp_source.sh")], check=True, capture_output=True,
                            text=True).stdout.strip()
    return Path(source)


@pytest.fixture(scope="module", params=sorted(TEMPLATES))
def family_server(request, cellm_host, templates, tmp_path_factory):
    name, template_file = request.param, TEMPLATES[request.param]
    folder = tmp_path_factory.mktemp(name.replace(".", "_"))
    tiny = REPO / "tests/data/hf/qwen3-tiny"
    for file in ("model.safetensors", "tokenizer.json"):
        (folder / file).symlink_to(tiny / file)
    # Room for the template's tool prompt in this byte-level vocabulary, and an end token (byte 255) so that a
    # finished call can end the answer.
    config = json.loads((tiny / "config.json").read_text())
    config["max_position_embeddings"] = 4096
    config["eos_token_id"] = 255
    (folder / "config.json").write_text(json.dumps(config))
    template = (templates / "models/templates" / template_file).read_text()
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    server = Server(cellm_host, folder, context=4096)
    yield name, server
    server.stop()


def ask(server, **kwargs):
    args = {"model": server.model_id(), "messages": ASK, "max_tokens": 400, "temperature": 0.9, "tools": TOOLS}
    args.update(kwargs)
    return server.client().chat.completions.create(**args)


def assert_valid(message, names=tuple(SCHEMAS)):
    assert message.tool_calls
    for call in message.tool_calls:
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_required_and_named_calls_parse_and_validate(family_server, seed):
    _, server = family_server
    # One call: random weights would go on adding calls to max_tokens where several may follow.
    response = ask(server, tool_choice="required", parallel_tool_calls=False, seed=seed)
    assert response.choices[0].finish_reason == "tool_calls", response
    assert_valid(response.choices[0].message)
    named = ask(server, tool_choice={"type": "function", "function": {"name": "get_time"}}, seed=seed)
    assert named.choices[0].finish_reason == "tool_calls"
    assert_valid(named.choices[0].message, names=("get_time",))


def test_streamed_call_equals_the_whole_one(family_server):
    _, server = family_server
    whole = ask(server, tool_choice="required", parallel_tool_calls=False, temperature=0).choices[0].message.tool_calls
    calls = {}
    for chunk in ask(server, tool_choice="required", parallel_tool_calls=False, temperature=0, stream=True):
        for piece in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(piece.index, {"name": piece.function.name, "arguments": ""})
            call["arguments"] += piece.function.arguments or ""
    assert [(c["name"], c["arguments"]) for _, c in sorted(calls.items())] == \
        [(c.function.name, c.function.arguments) for c in whole]


def test_chat_template_kwargs_reach_the_template(family_server):
    name, server = family_server
    if name != "qwen3":
        pytest.skip("Qwen 3's template is the one with enable_thinking")
    plain = ask(server, tools=None, max_tokens=1)
    # enable_thinking false: the template writes an empty <think></think> block after the generation prompt.
    off = ask(server, tools=None, max_tokens=1, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert off.usage.prompt_tokens == plain.usage.prompt_tokens + len("<think>\n\n</think>\n\n")


def test_call_and_result_render_through_the_template(family_server):
    _, server = family_server
    call = ask(server, tool_choice="required", parallel_tool_calls=False, temperature=0).choices[0].message.tool_calls[0]
    history = ASK + [{"role": "assistant", "content": "",
                      "tool_calls": [{"id": call.id, "type": "function",
                                      "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
                     {"role": "tool", "tool_call_id": call.id, "content": "{\"celsius\": 4}"}]
    response = ask(server, messages=history, tool_choice="auto", max_tokens=8)
    assert response.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert response.usage.prompt_tokens > 0
