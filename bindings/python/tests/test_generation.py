"""Greedy results against cellm-host, streaming, the OpenAI dict shapes, forks: on the synthetic model."""

from __future__ import annotations

import pytest

import cellm
from conftest import host_run

FINISH = {"eog": "stop", "stop": "stop", "length": "length", "context": "length"}


@pytest.mark.parametrize("form", ["text", "chat", "tokens"])
def test_greedy_equals_cellm_host(engine, manifest, form):
    prompt = "the cat sat on the mat"
    want = host_run(prompt, 24, manifest=manifest, chat=form == "chat")
    with engine.session(temperature=0, max_tokens=24) as session:
        if form == "text":
            session.submit(prompt)
        elif form == "chat":
            session.submit([{"role": "user", "content": prompt}])
        else:
            session.submit(engine.tokenize(prompt))
        assert session.wait() == want["finish_reason"]
        assert session.tokens == want["tokens"]
        assert session.stats.prompt_tokens == want["prompt_tokens"]


def test_completion_dicts_equal_cellm_host(engine, manifest):
    want_chat = host_run("hello there", 20, manifest=manifest, chat=True)
    reply = engine.create_chat_completion([{"role": "user", "content": "hello there"}], temperature=0, max_tokens=20)
    assert reply["choices"][0]["message"]["content"] == want_chat["text"]
    assert reply["choices"][0]["finish_reason"] == FINISH[want_chat["finish_reason"]]
    assert reply["usage"]["completion_tokens"] == len(want_chat["tokens"])

    want_text = host_run("once upon a time", 20, manifest=manifest)
    reply = engine.create_completion("once upon a time", temperature=0, max_tokens=20)
    assert reply["choices"][0]["text"] == want_text["text"]
    assert reply["usage"]["prompt_tokens"] == want_text["prompt_tokens"]


def _check_common(d: dict, prefix: str, obj: str) -> None:
    assert d["id"].startswith(prefix) and d["object"] == obj
    assert isinstance(d["created"], int) and isinstance(d["model"], str) and d["model"]
    assert len(d["choices"]) == 1 and d["choices"][0]["index"] == 0 and d["choices"][0]["logprobs"] is None


def test_chat_completion_shape(engine):
    reply = engine.create_chat_completion([{"role": "system", "content": "You are terse."},
                                           {"role": "user", "content": "hi"}], temperature=0, max_tokens=12)
    _check_common(reply, "chatcmpl-", "chat.completion")
    assert set(reply) == {"id", "object", "created", "model", "choices", "usage"}
    choice = reply["choices"][0]
    assert set(choice) == {"index", "message", "logprobs", "finish_reason"}
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    usage = reply["usage"]
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 12
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert reply["model"] == engine.info.model_path
    assert engine.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=1,
                                         model="my-model")["model"] == "my-model"


def test_completion_shape(engine):
    reply = engine.create_completion("the dog", temperature=0, max_tokens=10)
    _check_common(reply, "cmpl-", "text_completion")
    assert set(reply["choices"][0]) == {"text", "index", "logprobs", "finish_reason"}
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 10
    # llama-cpp-python's llm(prompt) and token-id prompts.
    assert engine("the dog", temperature=0, max_tokens=10)["choices"][0]["text"] == reply["choices"][0]["text"]
    by_ids = engine.create_completion(engine.tokenize("the dog"), temperature=0, max_tokens=10)
    assert by_ids["choices"][0]["text"] == reply["choices"][0]["text"]


def test_chat_stream_chunks(engine):
    messages = [{"role": "user", "content": "tell me a story"}]
    whole = engine.create_chat_completion(messages, temperature=0, max_tokens=40)
    chunks = list(engine.create_chat_completion(messages, stream=True, temperature=0, max_tokens=40))
    ident = chunks[0]["id"]
    for c in chunks:
        _check_common(c, "chatcmpl-", "chat.completion.chunk")
        assert c["id"] == ident and set(c["choices"][0]) == {"index", "delta", "logprobs", "finish_reason"}
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == whole["choices"][0]["message"]["content"]


def test_completion_stream_chunks(engine):
    whole = engine.create_completion("a b c", temperature=0, max_tokens=30)
    chunks = list(engine.create_completion("a b c", stream=True, temperature=0, max_tokens=30))
    for c in chunks:
        _check_common(c, "cmpl-", "text_completion")
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["choices"][0]["text"] == ""
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["choices"][0]["text"]


def test_stream_pieces_are_utf8_and_join_to_the_text(engine):
    with engine.session(temperature=0, max_tokens=64) as session:
        pieces = list(session.stream([{"role": "user", "content": "hello there"}]))
        assert len(pieces) > 1
        for piece in pieces:
            assert piece and isinstance(piece, str)
            piece.encode("utf-8")  # no lone surrogates: valid UTF-8
        assert "".join(pieces) == session.text
        assert session.stats.generated_tokens >= len(session.tokens) > 0
        # Sampled, not greedy: the same with a seed, and still joined exactly.
        sampled = list(session.stream("once upon", timeout=60))
        assert "".join(sampled) == session.text


def test_sampling_seed_repeats(engine):
    kwargs = dict(temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, frequency_penalty=0.1,
                  presence_penalty=0.1, seed=1234, max_tokens=20)
    a = engine.create_completion("the cat", **kwargs)["choices"][0]["text"]
    b = engine.create_completion("the cat", **kwargs)["choices"][0]["text"]
    assert a == b


def test_stop_string(engine, manifest):
    greedy = host_run("the cat sat", 24, manifest=manifest)
    text = greedy["text"].replace("\ufffd", "")
    stop = text[len(text) // 2:len(text) // 2 + 2]
    if len(stop) < 2:
        pytest.skip("the greedy text is too short to take a stop string from")
    reply = engine.create_completion("the cat sat", temperature=0, max_tokens=24, stop=[stop])
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert stop not in reply["choices"][0]["text"]
    with engine.session(temperature=0, max_tokens=24, stop=stop) as session:
        assert session.generate("the cat sat") == reply["choices"][0]["text"]
        assert session.finish_reason == "stop"


def test_unsupported_keywords(engine):
    messages = [{"role": "user", "content": "hi"}]
    engine.create_chat_completion(messages, max_tokens=2, logprobs=None, typical_p=1.0, tools=None, grammar=None)
    with pytest.raises(NotImplementedError):
        engine.create_chat_completion(messages, max_tokens=2, logprobs=True)
    with pytest.raises(TypeError):
        engine.create_chat_completion(messages, max_tokens=2, no_such_option=1)
    with pytest.raises(TypeError):
        engine.session(n_threads=2)


def test_turns_fork_and_stats(engine, manifest):
    with engine.session(temperature=0, max_tokens=8) as session:
        first = session.generate("the cat")
        assert session.stats.cached_tokens == 0
        conversation = "the cat" + first + " and"
        session.generate(conversation)
        assert session.stats.cached_tokens > 0  # the first turn's context was reused
        with session.fork() as fork:
            assert fork.generate(conversation + " then") == engine.create_completion(
                conversation + " then", temperature=0, max_tokens=8)["choices"][0]["text"]
            assert fork.stats.cached_tokens > 0
        assert engine.stats.sessions >= 1
    info = engine.info
    assert info.arch == "llama" and info.backend == "scalar" and info.context_length == 128
    with_bos, without = engine.tokenize("hi there"), engine.tokenize(b"hi there", add_bos=False)
    assert without and with_bos[len(with_bos) - len(without):] == without
    assert all(0 <= t < info.n_vocab for t in with_bos)
    assert engine.stats.sessions == 0 and engine.stats.kv_blocks_used == 0


def test_configure(engine):
    with engine.session(temperature=0, max_tokens=4) as session:
        assert len(session.generate("the") and session.tokens) == 4
        session.configure(temperature=0, max_tokens=6)
        session.generate("the")
        assert len(session.tokens) == 6
        with pytest.raises(cellm.InvalidArgumentError):
            session.configure(temperature=-1.0)
