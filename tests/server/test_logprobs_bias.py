"""logprobs and logit_bias through the official openai client. The server's log-probabilities must equal those of
`cellm-host run --json --logprobs N` (the SDK's rows, printed by another program) token for token, in both APIs'
shapes, streamed and not; a -100 bias bans greedy's choice (the second best comes, with its unbiased
log-probability) and a +100 bias forces a token at every step."""
import math

import httpx
import pytest

from support import assert_ends_with_done, recording_client

PROMPT = "Once upon a time"
CHAT_PROMPT = "Write a short story about a cat who learns to fly."
MAX_TOKENS = 12


def piece_of(server, token):
    """A token's text as the server shows it (its bytes, invalid UTF-8 replaced)."""
    response = httpx.post(server.url + "/detokenize", json={"tokens": [token]}, timeout=30)
    response.raise_for_status()
    return response.json()["content"]


def test_completion_logprobs_equal_run(server, client, model_id, reference):
    ref = reference(PROMPT, MAX_TOKENS, raw=True, logprobs=5)
    response = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0,
                                         logprobs=5)
    choice = response.choices[0]
    assert choice.text == ref["text"]
    logprobs = choice.logprobs
    rows = ref["logprobs"]
    assert len(rows) == len(ref["tokens"]) == len(logprobs.tokens) == len(logprobs.token_logprobs)
    assert len(logprobs.top_logprobs) == len(logprobs.text_offset) == len(rows)
    offset = 0
    for i, row in enumerate(rows):
        assert len(row) == 6, "the token, then the 5 best"
        assert row[0]["token"] == ref["tokens"][i]
        piece = piece_of(server, row[0]["token"])
        assert logprobs.tokens[i] == piece
        assert logprobs.token_logprobs[i] == pytest.approx(row[0]["logprob"], abs=1e-6)
        want = {piece_of(server, e["token"]): e["logprob"] for e in row[1:]}
        want.setdefault(piece, row[0]["logprob"])
        assert logprobs.top_logprobs[i] == pytest.approx(want, abs=1e-6)
        assert logprobs.text_offset[i] == offset
        offset += len(piece)
        # Greedy: the chosen token is the best one.
        assert row[1]["token"] == row[0]["token"] and row[1]["logprob"] == row[0]["logprob"]
    assert "".join(logprobs.tokens) == choice.text


def test_chat_logprobs_equal_run(server, client, model_id, reference):
    ref = reference(CHAT_PROMPT, MAX_TOKENS, logprobs=3)
    response = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": CHAT_PROMPT}],
                                              max_tokens=MAX_TOKENS, temperature=0, logprobs=True, top_logprobs=3)
    choice = response.choices[0]
    assert choice.message.content == ref["text"]
    content = choice.logprobs.content
    assert len(content) == len(ref["logprobs"]) == len(ref["tokens"]) == response.usage.completion_tokens
    for entry, row in zip(content, ref["logprobs"]):
        assert entry.token == piece_of(server, row[0]["token"])
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token
        assert entry.logprob == pytest.approx(row[0]["logprob"], abs=1e-6)
        assert [(t.token, t.logprob) for t in entry.top_logprobs] == [
            (piece_of(server, e["token"]), pytest.approx(e["logprob"], abs=1e-6)) for e in row[1:]]
        assert entry.logprob <= 0 and sum(math.exp(t.logprob) for t in entry.top_logprobs) <= 1 + 1e-5


def test_chat_logprobs_without_top(client, model_id):
    response = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": CHAT_PROMPT}],
                                              max_tokens=4, temperature=0, logprobs=True)
    content = response.choices[0].logprobs.content
    assert len(content) == response.usage.completion_tokens
    assert all(entry.top_logprobs == [] for entry in content)
    plain = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": CHAT_PROMPT}],
                                           max_tokens=4, temperature=0)
    assert plain.choices[0].logprobs is None


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_streamed_logprobs_equal_whole(server, client, model_id, endpoint):
    streaming, transport = recording_client(server)
    if endpoint == "chat":
        args = dict(model=model_id, messages=[{"role": "user", "content": CHAT_PROMPT}], max_tokens=MAX_TOKENS,
                    temperature=0, logprobs=True, top_logprobs=2)
        whole = client.chat.completions.create(**args).choices[0].logprobs.content
        streamed, text = [], ""
        for chunk in streaming.chat.completions.create(**args, stream=True):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                if choice.logprobs is not None:
                    streamed += choice.logprobs.content
        assert [(e.token, e.logprob, [t.token for t in e.top_logprobs]) for e in streamed] == \
               [(e.token, e.logprob, [t.token for t in e.top_logprobs]) for e in whole]
    else:
        args = dict(model=model_id, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0, logprobs=2)
        whole = client.completions.create(**args).choices[0].logprobs
        tokens, token_logprobs, offsets = [], [], []
        for chunk in streaming.completions.create(**args, stream=True):
            for choice in chunk.choices:
                if choice.logprobs is not None:
                    tokens += choice.logprobs.tokens
                    token_logprobs += choice.logprobs.token_logprobs
                    offsets += choice.logprobs.text_offset
        assert (tokens, token_logprobs, offsets) == (whole.tokens, whole.token_logprobs, whole.text_offset)
    assert_ends_with_done(transport.bodies[-1])


def test_bias_bans_and_forces(server, client, model_id, reference):
    ref = reference(PROMPT, MAX_TOKENS, raw=True, logprobs=5)
    first = ref["logprobs"][0]
    best, second, fourth = first[1], first[2], first[4]

    # -100 on greedy's first token: the second best comes first, with its unbiased log-probability.
    banned = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0,
                                       logprobs=0, logit_bias={str(best["token"]): -100})
    lp = banned.choices[0].logprobs
    assert lp.tokens[0] == piece_of(server, second["token"])
    assert lp.token_logprobs[0] == pytest.approx(second["logprob"], abs=1e-4)

    # +100 on the fourth best: it comes at every step, whatever the temperature.
    forced_piece = piece_of(server, fourth["token"])
    for temperature in (0, 1):
        forced = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=6, temperature=temperature,
                                           seed=3, logprobs=0, logit_bias={str(fourth["token"]): 100})
        assert forced.choices[0].logprobs.tokens == [forced_piece] * 6
        assert forced.choices[0].finish_reason == "length"
    # The log-probabilities stay the unbiased model's.
    assert forced.choices[0].logprobs.token_logprobs[0] == pytest.approx(fourth["logprob"], abs=1e-4)

    # Chat takes the same field.
    chat = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": CHAT_PROMPT}],
                                          max_tokens=5, temperature=0, logprobs=True,
                                          logit_bias={str(fourth["token"]): 100})
    assert [e.token for e in chat.choices[0].logprobs.content] == [forced_piece] * 5
