"""Tool calling through the official openai client: `tools` with `tool_choice` required, a named function and auto;
a call, its result and the final answer; streamed delta.tool_calls reassembled equal to the whole answer; calls
among concurrent plain requests; and the 400s that name the field of a bad tool, choice or tool message.

Whatever the model, a call asked for with "required" or a name always parses and its arguments validate against
the function's schema (the grammar engine constrains them); with "auto" the model may answer in text, and a call
it makes parses too. Run on SmolLM2-135M (server_openai_tests) and on Gemma-3-270M (server_tools_gemma3): neither
template renders tools, so the prompt is cellm's documented one for the family (docs/server.md, Tool calling)."""
import concurrent.futures
import json

import httpx
import jsonschema
import openai
import pytest

MAX_TOKENS = 96

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 24},
                                  "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a time zone",
    "parameters": {"type": "object",
                   "properties": {"zone": {"type": "string", "maxLength": 24}},
                   "required": ["zone"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]


def chat(client, model_id, **kwargs):
    args = {"model": model_id, "messages": ASK, "max_tokens": MAX_TOKENS, "temperature": 0, "tools": TOOLS}
    args.update(kwargs)
    return client.chat.completions.create(**args)


def assert_valid_calls(message, names=None):
    assert message.tool_calls, f"no tool calls in {message}"
    for call in message.tool_calls:
        assert call.type == "function"
        assert call.id.startswith("call_")
        assert call.function.name in (names or SCHEMAS)
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert len({c.id for c in message.tool_calls}) == len(message.tool_calls)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_required_always_gives_a_valid_call(client, model_id, seed):
    response = chat(client, model_id, tool_choice="required", temperature=0.9, seed=seed)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert_valid_calls(choice.message)
    assert choice.message.content in (None, "")


@pytest.mark.parametrize("name", ["get_weather", "get_time"])
def test_named_function_is_the_one_called(client, model_id, name):
    response = chat(client, model_id, tool_choice={"type": "function", "function": {"name": name}})
    assert response.choices[0].finish_reason == "tool_calls"
    assert_valid_calls(response.choices[0].message, names=[name])
    assert {c.function.name for c in response.choices[0].message.tool_calls} == {name}


def test_parallel_tool_calls_false_makes_one_call(client, model_id):
    response = chat(client, model_id, tool_choice="required", parallel_tool_calls=False)
    assert_valid_calls(response.choices[0].message)
    assert len(response.choices[0].message.tool_calls) == 1


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_auto_answers_in_text_or_with_a_valid_call(client, model_id, seed):
    response = chat(client, model_id, tool_choice="auto", temperature=0.9, seed=seed)
    choice = response.choices[0]
    if choice.message.tool_calls:
        assert choice.finish_reason == "tool_calls"
        assert_valid_calls(choice.message)
    else:
        assert choice.finish_reason in ("stop", "length")
        assert choice.message.content


def test_none_answers_in_text(client, model_id):
    response = chat(client, model_id, tool_choice="none")
    assert not response.choices[0].message.tool_calls
    assert response.choices[0].finish_reason in ("stop", "length")


def test_call_result_and_final_answer(client, model_id):
    first = chat(client, model_id, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = first.choices[0].message.tool_calls[0]
    history = ASK + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18, "sky": "cloudy"})},
    ]
    final = chat(client, model_id, messages=history, tool_choice="none")
    assert final.choices[0].finish_reason in ("stop", "length")
    assert final.choices[0].message.content
    # The whole conversation went into the prompt: it is longer than the question alone.
    alone = client.chat.completions.create(model=model_id, messages=ASK, max_tokens=1)
    assert final.usage.prompt_tokens > alone.usage.prompt_tokens


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_streamed_deltas_reassemble_to_the_whole_answer(client, model_id, tool_choice):
    whole = chat(client, model_id, tool_choice=tool_choice).choices[0]
    calls, content, finish = {}, "", None
    for chunk in chat(client, model_id, tool_choice=tool_choice, stream=True):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for piece in delta.tool_calls or []:
            if piece.index not in calls:
                # OpenAI's incremental form: the name (and id) first, then the arguments in pieces.
                assert piece.id and piece.function.name and piece.function.arguments == ""
                calls[piece.index] = {"id": piece.id, "name": piece.function.name, "arguments": ""}
            else:
                assert piece.id is None and piece.function.name is None
                calls[piece.index]["arguments"] += piece.function.arguments
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" == whole.finish_reason
    streamed = [calls[i] for i in sorted(calls)]
    assert [(c["name"], c["arguments"]) for c in streamed] == \
        [(c.function.name, c.function.arguments) for c in whole.message.tool_calls]
    assert content == (whole.message.content or "")


def test_tool_requests_among_concurrent_plain_ones(client, model_id):
    def one(i):
        if i % 2:
            return "plain", client.chat.completions.create(model=model_id, messages=ASK, max_tokens=24)
        return "tool", chat(client, model_id, tool_choice="required", temperature=0.9, seed=i)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    for kind, response in results:
        if kind == "tool":
            assert_valid_calls(response.choices[0].message)
        else:
            assert not response.choices[0].message.tool_calls
            assert response.choices[0].message.content


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


BAD = {
    "parameters not a schema": ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "yes"}}]},
                                "tools[0].function.parameters"),
    "parameters schema the grammar refuses": (
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}]},
        "tools[0].function.parameters"),
    "bad function name": ({"tools": [{"type": "function", "function": {"name": "no spaces"}}]},
                          "tools[0].function.name"),
    "not a function tool": ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    "tools not an array": ({"tools": {"type": "function"}}, "tools"),
    "named function not among the tools": (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "launch"}}}, "tool_choice"),
    "tool_choice without tools": ({"tool_choice": "required"}, "tool_choice"),
    "tool message answering no call": (
        {"tools": TOOLS, "messages": ASK + [{"role": "tool", "tool_call_id": "call_x", "content": "18C"}]},
        "messages[1].tool_call_id"),
    "call arguments not JSON": (
        {"tools": TOOLS, "messages": ASK + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{zone"}}]}]},
        "messages[1].tool_calls[0].function.arguments"),
    "tools and response_format": ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "tools"),
    "chat_template_kwargs not an object": ({"chat_template_kwargs": [1]}, "chat_template_kwargs"),
    "chat_template_kwargs setting messages": ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_tools_are_400_naming_the_field(http, model_id, case):
    extra, param = BAD[case]
    body = {"model": model_id, "messages": ASK, "max_tokens": 4, **extra}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param, error
    assert param.split("[")[0] in error["message"]
    # The server keeps serving.
    assert http.post("/v1/chat/completions", json={"model": model_id, "messages": ASK,
                                                   "max_tokens": 2}).status_code == 200


def test_tools_on_text_completions_are_refused(http, model_id):
    response = http.post("/v1/completions", json={"model": model_id, "prompt": "hi", "max_tokens": 2,
                                                  "tools": TOOLS})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "tools"
