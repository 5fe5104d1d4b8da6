"""Constrained decoding through the official openai client: response_format json_object and json_schema (OpenAI's),
grammar and json_schema (llama-server's). Every answer that ends by itself parses with json.loads and validates
with the jsonschema package, streamed or not, greedy or sampled, alone or among concurrent requests; a grammar
or schema the engine refuses is a 400 naming its field, and the server keeps serving.

The size limits are checked by the server before the engine sees anything, so those tests always run. The rest
needs the engine's grammar support: they are skipped while `cellm-host` accepts a grammar that does not parse
(the sign that the engine ignores grammars)."""
import concurrent.futures
import json

import httpx
import jsonschema
import openai
import pytest

from support import assert_ends_with_done, metric, recording_client, wait_for_metric

MAX_TOKENS = 200
PROMPT = "Describe a person as JSON."

# Small enough that the 135M model finishes each well within MAX_TOKENS: strings and arrays are bounded, so the
# grammar itself brings every answer to its end.
SCHEMAS = {
    "person": {"type": "object",
               "properties": {"name": {"type": "string", "maxLength": 16},
                              "age": {"type": "integer", "minimum": 0, "maximum": 120}},
               "required": ["name", "age"], "additionalProperties": False},
    "numbers": {"type": "array", "items": {"type": "integer", "minimum": -99, "maximum": 99},
                "minItems": 1, "maxItems": 5},
    "choice": {"type": "object",
               "properties": {"color": {"enum": ["red", "green", "blue"]}, "ok": {"type": "boolean"}},
               "required": ["color", "ok"], "additionalProperties": False},
    "tags": {"type": "object",
             "properties": {"title": {"type": "string", "minLength": 1, "maxLength": 12},
                            "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                     "maxItems": 3}},
             "required": ["title", "tags"], "additionalProperties": False},
    "point": {"type": "object",
              "properties": {"point": {"type": "object",
                                       "properties": {"x": {"type": "number", "minimum": -10, "maximum": 10},
                                                      "y": {"type": "number", "minimum": -10, "maximum": 10}},
                                       "required": ["x", "y"], "additionalProperties": False}},
              "required": ["point"], "additionalProperties": False},
}


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def engine_constrains(http, model_id):
    """Skips unless the engine honours grammars: one that does not parse must be refused."""
    response = http.post("/v1/completions", json={"model": model_id, "prompt": "hi", "max_tokens": 1,
                                                  "grammar": "root ::= ("})
    if response.status_code == 200:
        pytest.skip("cellm-host does not constrain decoding yet (a grammar that does not parse was accepted)")
    assert response.status_code == 400, response.text


def schema_format(name):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": True}}


def answer(client, model_id, response_format, temperature, stream=False, seed=7, **kwargs):
    """The text and finish reason of one chat request."""
    args = dict(model=model_id, messages=[{"role": "user", "content": PROMPT}], max_tokens=MAX_TOKENS,
                temperature=temperature, seed=seed, response_format=response_format, **kwargs)
    if not stream:
        choice = client.chat.completions.create(**args).choices[0]
        return choice.message.content, choice.finish_reason
    text, finish = "", None
    for chunk in client.chat.completions.create(**args, stream=True):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return text, finish


def assert_valid(text, finish_reason, schema):
    assert finish_reason == "stop", f"the answer did not end by itself ({finish_reason}): {text!r}"
    value = json.loads(text)
    jsonschema.validate(value, schema)
    return value


# ---- Limits the server checks itself ------------------------------------------------------------------------

def assert_refused(response, field):
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == field, error
    assert error["message"]


def test_grammar_over_256_kib_is_400(http, model_id):
    grammar = 'root ::= "' + "a" * 999_980 + '"'  # 1 MB: under the server's 1 MiB body limit, over 256 KiB
    assert_refused(http.post("/v1/chat/completions", json={"model": model_id, "grammar": grammar,
                                                           "messages": [{"role": "user", "content": "hi"}]}),
                   "grammar")
    assert http.get("/health").status_code == 200


def test_schema_over_256_kib_is_400(http, model_id):
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(12000)}}
    assert len(json.dumps(schema)) > 256 * 1024
    for body, field in [({"response_format": {"type": "json_schema", "json_schema": {"name": "big", "schema": schema}}},
                         "response_format"),
                        ({"json_schema": schema}, "json_schema")]:
        assert_refused(http.post("/v1/chat/completions", json={"model": model_id, **body,
                                                               "messages": [{"role": "user", "content": "hi"}]}),
                       field)
    assert http.get("/health").status_code == 200


def test_text_format_constrains_nothing(client, model_id):
    text, finish = answer(client, model_id, {"type": "text"}, 0)
    plain = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": PROMPT}],
                                           max_tokens=MAX_TOKENS, temperature=0)
    assert text == plain.choices[0].message.content


# ---- Constrained answers --------------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("temperature", [0, 1])
@pytest.mark.parametrize("name", SCHEMAS)
def test_json_schema_answers_validate(engine_constrains, client, model_id, name, temperature, stream):
    text, finish = answer(client, model_id, schema_format(name), temperature, stream)
    assert_valid(text, finish, SCHEMAS[name])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("temperature", [0, 1])
def test_json_object_answers_are_objects(engine_constrains, client, model_id, temperature, stream):
    # An open object may go on for long at temperature 1: a shorter answer is asked for, and only one that
    # ended by itself is parsed.
    text, finish = answer(client, model_id, {"type": "json_object"}, temperature, stream)
    if finish == "stop":
        assert isinstance(json.loads(text), dict)
    else:
        assert text.startswith("{")


def test_streamed_equals_whole(engine_constrains, server, client, model_id):
    whole = answer(client, model_id, schema_format("person"), 1, seed=11)
    streaming, transport = recording_client(server)
    assert answer(streaming, model_id, schema_format("person"), 1, stream=True, seed=11) == whole
    assert_ends_with_done(transport.bodies[-1])


def test_llama_server_fields(engine_constrains, client, model_id):
    completion = client.completions.create(model=model_id, prompt="The answer is", max_tokens=8, temperature=1,
                                           extra_body={"grammar": 'root ::= "yes" | "no"'})
    assert completion.choices[0].text in ("yes", "no")
    assert completion.choices[0].finish_reason == "stop"
    text, finish = answer(client, model_id, None, 1, extra_body={"json_schema": SCHEMAS["choice"]})
    assert_valid(text, finish, SCHEMAS["choice"])


def test_choices_each_validate(engine_constrains, server, client, model_id):
    response = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": PROMPT}],
                                              max_tokens=MAX_TOKENS, temperature=1, seed=5, n=3,
                                              response_format=schema_format("tags"))
    for choice in response.choices:
        assert_valid(choice.message.content, choice.finish_reason, SCHEMAS["tags"])
    assert wait_for_metric(server, "cellm_kv_blocks_used", lambda v: v == 0) == 0


def test_eight_concurrent_mixed_requests(engine_constrains, server, client, model_id):
    names = list(SCHEMAS) + ["person", "choice", None]  # None: no constraint in the same batch
    def one(i):
        name = names[i]
        fmt = schema_format(name) if name else None
        text, finish = answer(client, model_id, fmt, i % 2, stream=i % 3 == 0, seed=100 + i)
        return name, text, finish

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    for name, text, finish in results:
        if name is not None:
            assert_valid(text, finish, SCHEMAS[name])
    assert wait_for_metric(server, "cellm_kv_blocks_used", lambda v: v == 0) == 0
    assert metric(server.metrics(), "cellm_sessions_running") == 0


# ---- What the engine refuses ----------------------------------------------------------------------------------

REFUSED = {
    "unsupported schema keyword": ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "u", "schema": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}}}},
        "response_format", "uniqueItems"),
    "unsupported keyword in llama-server's json_schema": (
        {"json_schema": {"type": "object", "not": {"required": ["a"]}}}, "json_schema", "not"),
    "GBNF syntax error": ({"grammar": 'root ::= "a" | ('}, "grammar", None),
    "GBNF undefined rule": ({"grammar": "root ::= missing"}, "grammar", "missing"),
}


@pytest.mark.parametrize("case", REFUSED)
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_refused_grammar_is_400(engine_constrains, http, client, model_id, case, endpoint):
    body, field, named = REFUSED[case]
    with pytest.raises(openai.BadRequestError) as raised:
        if endpoint == "chat":
            client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=4, extra_body=body)
        else:
            client.completions.create(model=model_id, prompt="hi", max_tokens=4, extra_body=body)
    error = raised.value.response.json()["error"]
    assert raised.value.response.status_code == 400
    assert error["type"] == "invalid_request_error" and error["param"] == field, error
    if named:
        assert named in error["message"], error
    # Still serving, and nothing left behind.
    assert client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=2).choices
    assert http.get("/health").status_code == 200
