"""SmolLM2-135M-Instruct Q4_1 against cellm-host; skipped when the model file is missing (ctest python_real_model,
label real-model)."""

from __future__ import annotations

import pytest

import cellm
from conftest import REPO, host_run

pytestmark = pytest.mark.real_model
MANIFEST = str(REPO / "config/smollm2-135m.toml")


@pytest.fixture(scope="module")
def smol(smollm2):
    with cellm.Engine(manifest=MANIFEST, model=smollm2) as engine:
        yield engine


def test_greedy_equals_cellm_host(smol, smollm2):
    assert smol.info.backend == "openblas"
    question = "What is the capital of France?"
    want = host_run(question, 24, manifest=MANIFEST, model=smollm2, chat=True)
    reply = smol.create_chat_completion([{"role": "user", "content": question}], temperature=0, max_tokens=24)
    assert reply["choices"][0]["message"]["content"] == want["text"]
    assert reply["usage"]["completion_tokens"] == len(want["tokens"])
    with smol.session(temperature=0, max_tokens=16) as session:
        session.generate("The capital of France is")
        assert session.tokens == host_run("The capital of France is", 16, manifest=MANIFEST, model=smollm2)["tokens"]


def test_stream_with_emoji_and_cjk(smol, smollm2):
    question = "Repeat exactly: 🐱 猫 ねこ 😺"
    messages = [{"role": "user", "content": question}]
    whole = smol.create_chat_completion(messages, temperature=0, max_tokens=40)["choices"][0]["message"]["content"]
    chunks = list(smol.create_chat_completion(messages, stream=True, temperature=0, max_tokens=40))
    pieces = [c["choices"][0]["delta"].get("content", "") for c in chunks]
    assert "".join(pieces).encode() == whole.encode()  # byte for byte
    assert "🐱" in whole and "猫" in whole and "ねこ" in whole and "\ufffd" not in whole, whole
    assert whole == host_run(question, 40, manifest=MANIFEST, model=smollm2, chat=True)["text"]


def test_stream_cut_inside_an_emoji(smol):
    """max_tokens ends this reply inside an emoji's bytes: the stream and the whole text agree on the U+FFFD."""
    messages = [{"role": "user", "content": "Give me three emoji for a party."}]
    with smol.session(temperature=0, max_tokens=40) as session:
        pieces = list(session.stream(messages))
        assert "".join(pieces) == session.text
        assert session.finish_reason == "length"
