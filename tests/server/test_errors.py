"""Bad requests: each gets the right status and the OpenAI error shape {"error": {message, type, param, code}},
and the server stays healthy after it. The openai client sends what it can express; raw HTTP (httpx) sends the
rest (malformed JSON, wrong types, oversized bodies, unknown paths)."""
import httpx
import openai
import pytest

MAX_BODY_BYTES = 65536
SERVER_FLAGS = ("--max-body-bytes", str(MAX_BODY_BYTES))
# Far more tokens than the 512-token context, in a few kilobytes (well under the body limit).
TOO_LONG = "word " * 700


def assert_error(response, status, code=None, field=None):
    assert response.status_code == status, f"expected {status}, got {response.status_code}: {response.text[:300]}"
    body = response.json()
    assert isinstance(body.get("error"), dict), f"no error object: {body}"
    error = body["error"]
    for key in ("message", "type", "param", "code"):
        assert key in error, f"error has no {key!r}: {error}"
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    if code is not None:
        assert error["code"] == code, error
    if field is not None:
        assert error["param"] == field or field in error["message"], f"error does not name {field!r}: {error}"


@pytest.fixture
def http(server):
    """Raw HTTP to the module's server; /health must still answer after every test that uses it."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client
        assert client.get("/health").status_code == 200


# (endpoint, body as JSON or raw bytes, status, error code, field named). {model} stands for the served id.
RAW_CASES = {
    "malformed JSON": ("/v1/chat/completions", b'{"model": "x", "messages": [', 400, None, None),
    "body not an object": ("/v1/chat/completions", b"[1, 2, 3]", 400, None, None),
    "messages not a list": ("/v1/chat/completions", {"messages": "hello"}, 400, None, "messages"),
    "content not a string": ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, 400, None,
                             None),
    "max_tokens a string": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                     "max_tokens": "ten"}, 400, None, "max_tokens"),
    "temperature a string": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                      "temperature": "hot"}, 400, None, "temperature"),
    "stream a string": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                 "stream": "yes"}, 400, None, "stream"),
    "stop a number": ("/v1/completions", {"prompt": "hi", "stop": 5}, 400, None, "stop"),
    "seed a string": ("/v1/completions", {"prompt": "hi", "seed": "abc"}, 400, None, "seed"),
    "missing messages": ("/v1/chat/completions", {}, 400, None, "messages"),
    "missing prompt": ("/v1/completions", {}, 400, None, "prompt"),
    "prompt a number": ("/v1/completions", {"prompt": 5}, 400, None, "prompt"),
    "negative max_tokens": ("/v1/completions", {"prompt": "hi", "max_tokens": -3}, 400, None, "max_tokens"),
    "negative temperature": ("/v1/completions", {"prompt": "hi", "temperature": -1}, 400, None, "temperature"),
    "n a string": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": "two"}, 400, None,
                   "n"),
    "logit_bias a list": ("/v1/completions", {"prompt": "hi", "logit_bias": [1, 2]}, 400, None, "logit_bias"),
    "logit_bias bias a string": ("/v1/completions", {"prompt": "hi", "logit_bias": {"1": "x"}}, 400, None,
                                 "logit_bias"),
    "completions logprobs true": ("/v1/completions", {"prompt": "hi", "logprobs": True}, 400, None, "logprobs"),
    "chat logprobs a number": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                        "logprobs": 3}, 400, None, "logprobs"),
    "completions top_logprobs": ("/v1/completions", {"prompt": "hi", "top_logprobs": 3}, 400, None, "top_logprobs"),
    "response_format a string": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                          "response_format": "json"}, 400, None, "response_format"),
    "grammar a number": ("/v1/completions", {"prompt": "hi", "grammar": 5}, 400, None, "grammar"),
    "json_schema a string": ("/v1/completions", {"prompt": "hi", "json_schema": "{}"}, 400, None, "json_schema"),
}


@pytest.mark.parametrize("case", RAW_CASES)
def test_raw_bad_request(http, model_id, case):
    endpoint, body, status, code, field = RAW_CASES[case]
    if isinstance(body, dict):
        response = http.post(endpoint, json={"model": model_id, **body})
    else:
        response = http.post(endpoint, content=body, headers={"Content-Type": "application/json"})
    assert_error(response, status, code, field)


def test_body_over_limit_is_413(http, model_id):
    body = {"model": model_id, "messages": [{"role": "user", "content": "x" * (2 * MAX_BODY_BYTES)}]}
    assert_error(http.post("/v1/chat/completions", json=body), 413)


def test_unknown_path_is_404(http):
    assert_error(http.get("/v1/nonexistent"), 404)


def chat_args(model_id):
    return dict(model=model_id, messages=[{"role": "user", "content": "hi"}], max_tokens=4)


# Requests the openai client can express: (endpoint, extra arguments, error code, field named).
CLIENT_CASES = {
    "empty messages": ("chat", {"messages": []}, None, "messages"),
    "n=0": ("chat", {"n": 0}, None, "n"),
    "n=100": ("chat", {"n": 100}, None, "n"),
    "completions n=9": ("completions", {"n": 9}, None, "n"),
    "top_logprobs 21": ("chat", {"logprobs": True, "top_logprobs": 21}, None, "top_logprobs"),
    "top_logprobs without logprobs": ("chat", {"top_logprobs": 2}, None, "top_logprobs"),
    "completions logprobs 6": ("completions", {"logprobs": 6}, None, "logprobs"),
    "logit_bias id past the vocabulary": ("chat", {"logit_bias": {"49152": 1}}, None, "logit_bias"),
    "logit_bias negative id": ("chat", {"logit_bias": {"-1": 1}}, None, "logit_bias"),
    "logit_bias id not a number": ("completions", {"logit_bias": {"hello": 1}}, None, "logit_bias"),
    "logit_bias bias over 100": ("chat", {"logit_bias": {"42": 101}}, None, "logit_bias"),
    "response_format unknown type": ("chat", {"response_format": {"type": "xml"}}, None, "response_format"),
    "response_format json_schema without it": ("chat", {"response_format": {"type": "json_schema"}}, None,
                                               "response_format"),
    "grammar and response_format": ("chat", {"response_format": {"type": "json_object"},
                                             "extra_body": {"grammar": 'root ::= "a"'}}, None, "grammar"),
    "grammar and json_schema": ("completions", {"extra_body": {"grammar": 'root ::= "a"',
                                                               "json_schema": {"type": "object"}}}, None,
                                "json_schema"),
    "functions (deprecated)": ("chat", {"extra_body": {"functions": [{"name": "f"}]}}, None, "functions"),
    "echo": ("completions", {"echo": True}, None, "echo"),
    "suffix": ("completions", {"suffix": " end"}, None, "suffix"),
    "chat prompt over the context": ("chat", {"messages": [{"role": "user", "content": TOO_LONG}]},
                                     "context_length_exceeded", None),
    "completion prompt over the context": ("completions", {"prompt": TOO_LONG}, "context_length_exceeded", None),
}


@pytest.mark.parametrize("case", CLIENT_CASES)
def test_client_bad_request(client, http, model_id, case):
    endpoint, extra, code, field = CLIENT_CASES[case]
    with pytest.raises(openai.BadRequestError) as raised:
        if endpoint == "chat":
            client.chat.completions.create(**{**chat_args(model_id), **extra})
        else:
            client.completions.create(**{"model": model_id, "prompt": "hi", "max_tokens": 4, **extra})
    assert_error(raised.value.response, 400, code, field)


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_unknown_model_is_404(client, http, endpoint):
    with pytest.raises(openai.NotFoundError) as raised:
        if endpoint == "chat":
            client.chat.completions.create(**chat_args("no-such-model"))
        else:
            client.completions.create(model="no-such-model", prompt="hi", max_tokens=4)
    assert raised.value.code == "model_not_found"
    assert_error(raised.value.response, 404, "model_not_found")


def test_api_key_and_model_alias(start_server):
    server = start_server("--api-key", "sekret-key", "--model-alias", "smol")
    with pytest.raises(openai.AuthenticationError) as raised:
        server.client(api_key="wrong-key").chat.completions.create(**chat_args("smol"))
    assert_error(raised.value.response, 401)
    assert_error(httpx.post(server.base_url + "/chat/completions", json=chat_args("smol"), timeout=60), 401)

    client = server.client(api_key="sekret-key")
    assert [m.id for m in client.models.list().data] == ["smol"]
    response = client.chat.completions.create(**chat_args("smol"))
    assert response.model == "smol"
    assert response.usage.completion_tokens >= 1
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
