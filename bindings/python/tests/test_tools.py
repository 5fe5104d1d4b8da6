"""Function calling through the binding (cellm.h 1.5). The calls need a prompt of some 300 tokens (the tools
offered in the system message), more than the synthetic model's context: they run on SmolLM2-135M-Instruct
(ctest python_real_model, skipped without the file). The checks made before any prompt (bad tools, keywords)
run on the synthetic model (python_binding)."""

from __future__ import annotations

import json

import pytest

import cellm
from conftest import REPO

MANIFEST = str(REPO / "config/smollm2-135m.toml")

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"],
           "additionalProperties": False}
TIME = {"type": "object", "properties": {"city": {"type": "string"}, "utc": {"type": "boolean"}},
        "required": ["city", "utc"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "The local time in a city",
                                           "parameters": TIME}}]
QUESTION = [{"role": "user", "content": "What is the weather in Oslo?"}]


def fits(arguments: str, schema: dict) -> dict:
    """The arguments parsed, checked against the (flat) schema: jsonschema where the test's Python has it."""
    value = json.loads(arguments)
    try:
        import jsonschema
    except ImportError:
        assert isinstance(value, dict) and set(schema["required"]) <= set(value), value
        if schema.get("additionalProperties") is False:
            assert set(value) <= set(schema["properties"]), value
        types = {"string": str, "boolean": bool}
        for key, item in value.items():
            want = schema["properties"][key]
            assert isinstance(item, types[want["type"]]), (key, item)
            assert "maxLength" not in want or len(item) <= want["maxLength"], (key, item)
    else:
        jsonschema.validate(value, schema)
    return value


def joined(chunks: list[dict]) -> tuple[str | None, list[dict], str]:
    """A stream's content, tool calls (OpenAI's incremental deltas put together) and finish reason."""
    content, calls, reason = None, [], None
    for chunk in chunks:
        choice = chunk["choices"][0]
        delta = choice["delta"]
        if delta.get("content"):
            content = (content or "") + delta["content"]
        for piece in delta.get("tool_calls", ()):
            if piece["index"] == len(calls):  # a new call: its first delta has id, type and name
                assert set(piece) == {"index", "id", "type", "function"} and piece["function"]["arguments"] == ""
                calls.append({"id": piece["id"], "type": piece["type"],
                              "function": {"name": piece["function"]["name"], "arguments": ""}})
            else:
                assert set(piece) == {"index", "function"} and set(piece["function"]) == {"arguments"}, piece
                calls[piece["index"]]["function"]["arguments"] += piece["function"]["arguments"]
        reason = choice["finish_reason"] or reason
    return content, calls, reason


@pytest.fixture(scope="module")
def smol(smollm2):
    with cellm.Engine(manifest=MANIFEST, model=smollm2) as engine:
        yield engine


@pytest.mark.real_model
def test_required_call_fits_the_schema(smol):
    reply = smol.create_chat_completion(QUESTION, tools=TOOLS, tool_choice="required", temperature=0,
                                        max_tokens=64)
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["role"] == "assistant" and message["content"] is None, message
    assert message["tool_calls"], message
    for call in message["tool_calls"]:
        assert call["type"] == "function" and call["id"]
        name = call["function"]["name"]
        assert name in ("get_weather", "get_time")
        fits(call["function"]["arguments"], WEATHER if name == "get_weather" else TIME)
    assert len({call["id"] for call in message["tool_calls"]}) == len(message["tool_calls"])


@pytest.mark.real_model
@pytest.mark.parametrize("choice", ["get_time", {"type": "function", "function": {"name": "get_time"}}])
def test_named_call(smol, choice):
    """The question asks for the weather; tool_choice makes it get_time, arguments and all."""
    reply = smol.create_chat_completion(QUESTION, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False,
                                        temperature=0, max_tokens=64)
    calls = reply["choices"][0]["message"]["tool_calls"]
    assert [call["function"]["name"] for call in calls] == ["get_time"]
    fits(calls[0]["function"]["arguments"], TIME)
    assert reply["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.real_model
def test_streamed_deltas_reassemble_to_the_answer(smol):
    kwargs = dict(tools=TOOLS, tool_choice="required", temperature=0, max_tokens=64)
    whole = smol.create_chat_completion(QUESTION, **kwargs)["choices"][0]["message"]
    chunks = list(smol.create_chat_completion(QUESTION, stream=True, **kwargs))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    content, calls, reason = joined(chunks)
    assert reason == "tool_calls" and content is None
    # The same greedy answer; call ids are the turn's own.
    assert all(c["id"] for c in calls)
    strip = lambda cs: [{k: v for k, v in c.items() if k != "id"} for c in cs]  # noqa: E731
    assert strip(calls) == strip(whole["tool_calls"])


@pytest.mark.real_model
def test_session_events_and_tool_calls(smol):
    """Session level: events() gives the text and ToolCallDelta pieces; they join to tool_calls and text."""
    with smol.session(tools=TOOLS, tool_choice="required", temperature=0, max_tokens=64) as session:
        pieces = list(session.events(QUESTION))
        assert session.finish_reason == "tool_calls" and session.wait() == "tool_calls"
        calls = session.tool_calls
        deltas = [p for p in pieces if isinstance(p, cellm.ToolCallDelta)]
        assert "".join(p for p in pieces if isinstance(p, str)) == session.text == ""
        rebuilt = {}
        for delta in deltas:
            rebuilt.setdefault(delta.index, [delta.id, delta.name, ""])[2] += delta.arguments
        assert [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                for i, n, a in rebuilt.values()] == calls
        assert deltas[0].arguments == "" and deltas[0].index == 0
        # stream() is the text alone: none, here.
        assert list(session.stream(QUESTION)) == [] and session.tool_calls


@pytest.mark.real_model
def test_two_turn_conversation(smol):
    """A call, its result, and an answer in text with tool_choice "none"; the second turn reuses the first's
    context."""
    with smol.session(tools=TOOLS, tool_choice="get_weather", temperature=0, max_tokens=48) as session:
        session.submit(QUESTION)
        assert session.wait() == "tool_calls"
        calls = session.tool_calls
        assert len(calls) == 1 and calls[0]["function"]["name"] == "get_weather"
        city = fits(calls[0]["function"]["arguments"], WEATHER)["city"]
        conversation = QUESTION + [
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": calls[0]["id"], "content": json.dumps({"city": city, "celsius": 4})}]
        session.configure(tools=TOOLS, tool_choice="none", temperature=0, max_tokens=24)
        answer = session.generate(conversation)
        assert answer and session.finish_reason in ("eog", "length"), answer
        assert session.tool_calls == []
    # The same through the completion call, with the message the first reply gave, as llama-cpp-python users do.
    first = smol.create_chat_completion(QUESTION, tools=TOOLS, tool_choice="required", temperature=0,
                                        max_tokens=48)["choices"][0]["message"]
    result = {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "4 degrees"}
    reply = smol.create_chat_completion(QUESTION + [first, result], tools=TOOLS, tool_choice="none", temperature=0,
                                        max_tokens=24)["choices"][0]
    assert reply["finish_reason"] in ("stop", "length") and isinstance(reply["message"]["content"], str)
    assert "tool_calls" not in reply["message"]
    # Tool messages alone (no tools= any more) still go through cellm_session_submit_chat_json.
    reply = smol.create_chat_completion(QUESTION + [first, result], temperature=0, max_tokens=8)["choices"][0]
    assert reply["message"]["content"]


@pytest.mark.real_model
def test_auto_may_answer_in_text(smol):
    reply = smol.create_chat_completion([{"role": "user", "content": "Say hello."}], tools=TOOLS, temperature=0,
                                        max_tokens=16)
    choice = reply["choices"][0]
    if choice["finish_reason"] == "tool_calls":
        assert choice["message"]["tool_calls"]
    else:
        assert choice["message"]["content"] and "tool_calls" not in choice["message"]


# ---- Refusals, on the synthetic model: nothing here reaches a prompt ---------------------------------------------


@pytest.mark.parametrize("tools, field", [
    ([{"type": "function", "function": {"name": "f", "parameters": 3}}], "tools[0].function.parameters"),
    ([{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"parameters": {}}}],
     "tools[1].function.name"),
    ("[{", "tools"),
])
def test_bad_tools_name_the_field(engine, tools, field):
    with pytest.raises(cellm.InvalidArgumentError, match=field.replace("[", r"\[")) as refused:
        engine.create_chat_completion(QUESTION, tools=tools)
    assert isinstance(refused.value, ValueError) and refused.value.name == "CELLM_E_INVALID_ARGUMENT"
    with pytest.raises(cellm.InvalidArgumentError, match=field.replace("[", r"\[")):
        engine.session(tools=tools)


def test_bad_tool_choice_and_messages(engine):
    with pytest.raises(cellm.InvalidArgumentError, match="tool_choice"):
        engine.session(tools=TOOLS, tool_choice="launch_rocket")
    with pytest.raises(cellm.InvalidArgumentError, match="tool_choice"):
        engine.create_chat_completion(QUESTION, tool_choice="required")  # and no tools
    with pytest.raises(cellm.InvalidArgumentError, match="json_schema"):
        engine.session(tools=TOOLS, json_schema={"type": "object"})
    with engine.session(temperature=0, max_tokens=2) as session:
        with pytest.raises(cellm.InvalidArgumentError, match=r"messages\[1\].tool_call_id"):
            session.submit(QUESTION + [{"role": "tool", "tool_call_id": "nobody", "content": "1"}])
    with pytest.raises(TypeError):
        engine.session(tools={"type": "function"})
    with pytest.raises(TypeError):
        engine.session(tools=TOOLS, tool_choice=3)
    with pytest.raises(NotImplementedError):
        engine.create_completion("x", tools=TOOLS)  # a chat keyword


def test_no_tools_is_no_tools(engine):
    """tools=None and [] leave the prompt as it was: the greedy answer without them."""
    plain = engine.create_chat_completion(QUESTION, temperature=0, max_tokens=6)["choices"][0]["message"]
    for tools in (None, []):
        reply = engine.create_chat_completion(QUESTION, tools=tools, temperature=0, max_tokens=6)
        assert reply["choices"][0]["message"] == plain
