"""Generation through the official openai client: the server's text equals `cellm-host run` on the same model
for greedy requests, streaming and not, chat and completions, with consistent usage; stop strings, max_tokens,
seeds, sampling fields, the prefix cache and /metrics."""
import time

import httpx

from support import OPENAI_FINISH, assert_ends_with_done, collect_stream, metric, recording_client

# Prompts whose greedy answers run past MAX_TOKENS (asserted where it matters, from the reference).
CHAT_PROMPT = "Write a short story about a cat who learns to fly."
COMPLETION_PROMPT = "Once upon a time"
MAX_TOKENS = 16


def chat(client, model_id, prompt, **kwargs):
    return client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": prompt}], **kwargs)


def assert_usage(usage, prompt_tokens, completion_tokens):
    assert usage.prompt_tokens == prompt_tokens
    assert usage.completion_tokens == completion_tokens
    assert usage.total_tokens == prompt_tokens + completion_tokens
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens is not None
    assert 0 <= usage.prompt_tokens_details.cached_tokens <= prompt_tokens


def test_serving_line_health_and_models(server, client, model_id):
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
    models = client.models.list().data
    assert [m.id for m in models] == [model_id]
    assert model_id == server.served_name, "stderr's 'serving MODEL' and /v1/models disagree"


def test_chat_greedy_equals_run(client, model_id, reference):
    ref = reference(CHAT_PROMPT, MAX_TOKENS)
    response = chat(client, model_id, CHAT_PROMPT, max_tokens=MAX_TOKENS, temperature=0)
    assert response.object == "chat.completion"
    assert response.model == model_id
    assert len(response.choices) == 1
    choice = response.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == ref["text"]
    assert choice.finish_reason == OPENAI_FINISH[ref["finish_reason"]]
    assert_usage(response.usage, ref["prompt_tokens"], ref["generated_tokens"])


def test_chat_stream_greedy_equals_run(server, model_id, reference):
    ref = reference(CHAT_PROMPT, MAX_TOKENS)
    client, transport = recording_client(server)
    stream = chat(client, model_id, CHAT_PROMPT, max_tokens=MAX_TOKENS, temperature=0, stream=True,
                  stream_options={"include_usage": True})
    text, finish_reasons, usage = collect_stream(stream, "chat")
    assert text == ref["text"]
    assert finish_reasons == [OPENAI_FINISH[ref["finish_reason"]]]
    assert len(usage) == 1, "include_usage asks for exactly one usage chunk"
    assert_usage(usage[0], ref["prompt_tokens"], ref["generated_tokens"])
    assert_ends_with_done(transport.bodies[-1])


def test_chat_stream_without_include_usage_has_no_usage(client, model_id):
    stream = chat(client, model_id, CHAT_PROMPT, max_tokens=4, temperature=0, stream=True)
    _, finish_reasons, usage = collect_stream(stream, "chat")
    assert finish_reasons and usage == []


def test_completion_greedy_equals_run_raw(client, model_id, reference):
    ref = reference(COMPLETION_PROMPT, MAX_TOKENS, raw=True)
    response = client.completions.create(model=model_id, prompt=COMPLETION_PROMPT, max_tokens=MAX_TOKENS,
                                         temperature=0)
    assert response.object == "text_completion"
    assert response.model == model_id
    assert len(response.choices) == 1
    assert response.choices[0].text == ref["text"]
    assert response.choices[0].finish_reason == OPENAI_FINISH[ref["finish_reason"]]
    assert_usage(response.usage, ref["prompt_tokens"], ref["generated_tokens"])


def test_completion_stream_greedy_equals_run_raw(server, model_id, reference):
    ref = reference(COMPLETION_PROMPT, MAX_TOKENS, raw=True)
    client, transport = recording_client(server)
    stream = client.completions.create(model=model_id, prompt=COMPLETION_PROMPT, max_tokens=MAX_TOKENS,
                                       temperature=0, stream=True, stream_options={"include_usage": True})
    text, finish_reasons, usage = collect_stream(stream, "text")
    assert text == ref["text"]
    assert finish_reasons == [OPENAI_FINISH[ref["finish_reason"]]]
    assert len(usage) == 1
    assert_usage(usage[0], ref["prompt_tokens"], ref["generated_tokens"])
    assert_ends_with_done(transport.bodies[-1])


def test_list_forms_of_prompt_and_content(client, model_id, reference):
    # What clients send besides plain strings: a prompt list of one string, chat content as text parts.
    completion = client.completions.create(model=model_id, prompt=[COMPLETION_PROMPT], max_tokens=MAX_TOKENS,
                                           temperature=0)
    assert completion.choices[0].text == reference(COMPLETION_PROMPT, MAX_TOKENS, raw=True)["text"]
    parts = client.chat.completions.create(model=model_id, max_tokens=MAX_TOKENS, temperature=0, messages=[
        {"role": "user", "content": [{"type": "text", "text": CHAT_PROMPT}]}])
    assert parts.choices[0].message.content == reference(CHAT_PROMPT, MAX_TOKENS)["text"]


def test_max_tokens_and_max_completion_tokens_end_with_length(client, model_id, reference):
    ref = reference(CHAT_PROMPT, MAX_TOKENS)
    assert ref["finish_reason"] == "length", "the reference must run into max_tokens for this test to mean anything"
    for limit in ({"max_tokens": 5}, {"max_completion_tokens": 5}):
        response = chat(client, model_id, CHAT_PROMPT, temperature=0, **limit)
        assert response.choices[0].finish_reason == "length", limit
        assert response.usage.completion_tokens == 5, limit
        # The first 5 greedy tokens are a prefix of the 16-token reference.
        assert ref["text"].startswith(response.choices[0].message.content), limit


def stop_strings(text):
    """Two stop strings taken from the reference text (at a third and at two thirds), so generation must meet
    them; the text is cut at the first occurrence of either."""
    a = text[len(text) // 3:len(text) // 3 + 3]
    b = text[2 * len(text) // 3:2 * len(text) // 3 + 3]
    assert a.strip() and b.strip(), f"reference text too short for stop strings: {text!r}"
    return a, b


def test_stop_string_cuts_text(client, model_id, reference):
    ref = reference(CHAT_PROMPT, 32)
    stop, _ = stop_strings(ref["text"])
    response = chat(client, model_id, CHAT_PROMPT, max_tokens=32, temperature=0, stop=stop)
    assert response.choices[0].message.content == ref["text"][:ref["text"].index(stop)]
    assert response.choices[0].finish_reason == "stop"
    assert 0 < response.usage.completion_tokens <= 32


def test_stop_list_cuts_text_streaming(client, model_id, reference):
    ref = reference(COMPLETION_PROMPT, 32, raw=True)
    a, b = stop_strings(ref["text"])
    cut = min(ref["text"].index(a), ref["text"].index(b))
    stream = client.completions.create(model=model_id, prompt=COMPLETION_PROMPT, max_tokens=32, temperature=0,
                                       stop=["\u2603never\u2603", b, a], stream=True)
    text, finish_reasons, _ = collect_stream(stream, "text")
    # Streamed text never shows a stop string, not even the start of one that was held back.
    assert text == ref["text"][:cut]
    assert finish_reasons == ["stop"]


def test_end_of_generation_is_stop(client, model_id, reference):
    prompt = "Name three colors of the rainbow."
    ref = reference(prompt, 48)
    assert ref["finish_reason"] == "eog", "this prompt must end by itself within 48 tokens for the test to mean anything"
    response = chat(client, model_id, prompt, max_tokens=48, temperature=0)
    assert response.choices[0].message.content == ref["text"]
    assert response.choices[0].finish_reason == "stop"
    # cellm counts generated tokens without the ending end-of-generation token.
    assert response.usage.completion_tokens == ref["generated_tokens"]


def test_seed_reproducible_and_equal_to_run(client, model_id, reference):
    # The other sampling fields are omitted, so the manifest's [sampling] defaults apply, as in cellm-host run.
    ref = reference(CHAT_PROMPT, MAX_TOKENS, temperature=0.8, seed=1234)
    first = chat(client, model_id, CHAT_PROMPT, max_tokens=MAX_TOKENS, temperature=0.8, seed=1234)
    second = chat(client, model_id, CHAT_PROMPT, max_tokens=MAX_TOKENS, temperature=0.8, seed=1234)
    assert first.choices[0].message.content == second.choices[0].message.content
    assert first.choices[0].message.content == ref["text"]


def test_top_k_top_p_min_p_equal_run_with_them_in_the_manifest(client, model_id, reference):
    sampling = (("top_k", 8), ("top_p", 0.7), ("min_p", 0.1))
    ref = reference(COMPLETION_PROMPT, MAX_TOKENS, raw=True, temperature=1.2, seed=99, sampling=sampling)
    response = client.completions.create(model=model_id, prompt=COMPLETION_PROMPT, max_tokens=MAX_TOKENS,
                                         temperature=1.2, seed=99, top_p=0.7, extra_body={"top_k": 8, "min_p": 0.1})
    assert response.choices[0].text == ref["text"]


def test_top_k_one_is_greedy(client, model_id, reference):
    ref = reference(CHAT_PROMPT, MAX_TOKENS)
    response = chat(client, model_id, CHAT_PROMPT, max_tokens=MAX_TOKENS, temperature=1.5, seed=7,
                    extra_body={"top_k": 1})
    assert response.choices[0].message.content == ref["text"]


def test_neutral_penalties_keep_greedy_text(client, model_id, reference):
    # cellm-host run has no penalty settings to compare a real penalty against; these check that the fields are
    # accepted and that their neutral values change nothing.
    ref = reference(CHAT_PROMPT, MAX_TOKENS)
    response = chat(client, model_id, CHAT_PROMPT, max_tokens=MAX_TOKENS, temperature=0, frequency_penalty=0.0,
                    presence_penalty=0.0, top_p=1.0, extra_body={"min_p": 0.0})
    assert response.choices[0].message.content == ref["text"]
    penalized = chat(client, model_id, CHAT_PROMPT, max_tokens=MAX_TOKENS, temperature=0, frequency_penalty=1.0,
                     presence_penalty=1.0)
    assert penalized.choices[0].finish_reason in ("stop", "length")


def test_prefix_cache_reports_cached_tokens(client, model_id):
    system = " ".join(f"Rule {i}: answer politely, briefly and only about the question asked." for i in range(12))
    usages = []
    for question in ("What is two plus two?", "Which planet is the largest?"):
        response = client.chat.completions.create(
            model=model_id, max_tokens=2, temperature=0,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])
        usages.append(response.usage)
    shared_at_least = usages[0].prompt_tokens - 32  # the system part, less the questions and a partial block
    assert usages[1].prompt_tokens_details.cached_tokens > 0
    assert usages[1].prompt_tokens_details.cached_tokens >= shared_at_least - 16, usages


def is_chat(endpoint):
    return "chat" in endpoint


def test_metrics_count_a_request(server, client, model_id):
    before = server.metrics()
    stream = chat(client, model_id, CHAT_PROMPT, max_tokens=8, temperature=0, stream=True,
                  stream_options={"include_usage": True})
    _, _, usage = collect_stream(stream, "chat")

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)

    # The server may count the request just after its last chunk: give it a moment.
    deadline = time.monotonic() + 2
    while True:
        after = server.metrics()
        if delta("cellm_requests_total", code="200", endpoint=is_chat) >= 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert delta("cellm_requests_total", code="200", endpoint=is_chat) == 1
    assert delta("cellm_prompt_tokens_total") == usage[0].prompt_tokens
    assert delta("cellm_generation_tokens_total") == usage[0].completion_tokens
    assert delta("cellm_time_to_first_token_seconds_count") == 1
    assert delta("cellm_inter_token_latency_seconds_count") >= 1
    assert delta("cellm_time_to_first_token_seconds_sum") > 0
    for gauge in ("cellm_sessions_running", "cellm_sessions_waiting", "cellm_kv_blocks_used",
                  "cellm_kv_blocks_free", "cellm_prefix_cache_hit_tokens_total"):
        assert any(n == gauge for n, _ in after), f"/metrics has no {gauge}"
    assert metric(after, "cellm_kv_blocks_free") > 0
