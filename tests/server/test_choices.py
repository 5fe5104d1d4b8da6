"""n > 1: one session per choice, seeded seed, seed + 1, ...; choice i equals a request of its own with seed + i,
streamed (chunks interleaved, each carrying its index) or not; usage counts the prompt once and sums the
completions; the KV pool is empty once the request is over."""
import json
from collections import defaultdict

from support import assert_ends_with_done, metric, recording_client, sse_events, wait_for_metric

PROMPT = "Write a short story about a cat who learns to fly."
MAX_TOKENS = 16
SEED = 1234


def chat(client, model_id, **kwargs):
    return client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": PROMPT}],
                                          max_tokens=MAX_TOKENS, temperature=1, **kwargs)


def assert_pool_empty(server):
    assert wait_for_metric(server, "cellm_kv_blocks_used", lambda v: v == 0) == 0
    assert metric(server.metrics(), "cellm_sessions_running") == 0


def test_three_choices_equal_three_seeded_requests(server, client, model_id):
    response = chat(client, model_id, n=3, seed=SEED)
    assert [c.index for c in response.choices] == [0, 1, 2]
    singles = [chat(client, model_id, seed=SEED + i) for i in range(3)]
    for choice, single in zip(response.choices, singles):
        assert choice.message.content == single.choices[0].message.content
        assert choice.finish_reason == single.choices[0].finish_reason
    texts = [c.message.content for c in response.choices]
    assert len(set(texts)) > 1, f"three seeds at temperature 1 gave the same answer: {texts[0]!r}"
    assert response.usage.prompt_tokens == singles[0].usage.prompt_tokens
    assert response.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens
    assert_pool_empty(server)


def test_completions_choices(server, client, model_id):
    response = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=8, temperature=1,
                                         n=4, seed=SEED, logprobs=1)
    assert [c.index for c in response.choices] == [0, 1, 2, 3]
    for choice in response.choices:
        assert "".join(choice.logprobs.tokens) == choice.text
    assert response.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in response.choices)
    assert_pool_empty(server)


def test_streamed_choices_equal_whole(server, client, model_id):
    whole = chat(client, model_id, n=3, seed=SEED)
    streaming, transport = recording_client(server)
    texts, finishes, usage = defaultdict(str), defaultdict(list), []
    for chunk in chat(streaming, model_id, n=3, seed=SEED, stream=True, stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage.append(chunk.usage)
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason is not None:
                finishes[choice.index].append(choice.finish_reason)
    assert sorted(texts) == [0, 1, 2]
    for choice in whole.choices:
        assert texts[choice.index] == choice.message.content
        assert finishes[choice.index] == [choice.finish_reason]
    assert len(usage) == 1 and usage[0].completion_tokens == whole.usage.completion_tokens
    raw = transport.bodies[-1]
    assert_ends_with_done(raw)
    # One role chunk per choice, before any of its text.
    roles = [json.loads(e)["choices"][0]["index"] for e in sse_events(raw)[:-1]
             if json.loads(e)["choices"] and json.loads(e)["choices"][0]["delta"].get("role")]
    assert sorted(roles) == [0, 1, 2]
    assert_pool_empty(server)


def test_client_gone_mid_stream_frees_every_choice(server, model_id):
    streaming, _ = recording_client(server)
    stream = streaming.chat.completions.create(model=model_id, messages=[{"role": "user", "content": PROMPT}],
                                               max_tokens=400, temperature=1, n=3, stream=True)
    for i, _ in enumerate(stream):
        if i == 10:
            break
    stream.close()
    assert_pool_empty(server)
