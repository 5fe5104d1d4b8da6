"""Many clients at once, clients that go away, and shutdown: 16 concurrent streams each give the text the same
request gets alone; a client that disconnects mid-stream frees its KV blocks at once; SIGTERM and SIGINT end
running streams properly and the server exits 0."""
import json
import signal
import threading
import time

import httpx
import pytest

from support import assert_ends_with_done, collect_stream, metric, recording_client, wait_for_metric

CLIENTS = 16
# A raw prompt whose greedy continuation (counting on) runs to max_tokens; checked against the reference.
COUNTING = "1, 2, 3, 4, 5,"
LONG = 480  # with the prompt's 14 tokens, just inside the 512-token context


def request(i, model_id):
    """Client i's request: chat for even i, completions for odd i, each with its own prompt and max_tokens."""
    max_tokens = 8 + i
    if i % 2 == 0:
        return "chat", dict(model=model_id, max_tokens=max_tokens, temperature=0,
                            messages=[{"role": "user", "content": f"Tell me one fact about the number {i}."}])
    return "text", dict(model=model_id, max_tokens=max_tokens, temperature=0,
                        prompt=f"Item {i} on the list of things to pack for a trip is")


def create(client, kind, args, **extra):
    endpoint = client.chat.completions if kind == "chat" else client.completions
    return endpoint.create(**args, **extra)


def test_concurrent_streams_equal_requests_served_alone(server, model_id):
    client = server.client()
    alone = []
    for i in range(CLIENTS):
        kind, args = request(i, model_id)
        response = create(client, kind, args)
        choice = response.choices[0]
        alone.append((choice.message.content if kind == "chat" else choice.text, choice.finish_reason,
                      response.usage.completion_tokens))

    barrier = threading.Barrier(CLIENTS)
    results, errors = [None] * CLIENTS, []

    def stream_one(i):
        try:
            kind, args = request(i, model_id)
            own_client, transport = recording_client(server)
            with own_client:
                barrier.wait()
                stream = create(own_client, kind, args, stream=True, stream_options={"include_usage": True})
                text, finish_reasons, usage = collect_stream(stream, kind)
            results[i] = (text, finish_reasons, usage, bytes(transport.bodies[-1]))
        except Exception as error:  # reported below with the client's number
            errors.append(f"client {i}: {error!r}")

    threads = [threading.Thread(target=stream_one, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    most_running = 0
    while any(thread.is_alive() for thread in threads):
        most_running = max(most_running, metric(server.metrics(), "cellm_sessions_running"))
        time.sleep(0.05)
    for thread in threads:
        thread.join()

    assert errors == []
    for i, (text, finish_reasons, usage, raw) in enumerate(results):
        assert text == alone[i][0], f"client {i}"
        assert finish_reasons == [alone[i][1]], f"client {i}"
        assert len(usage) == 1 and usage[0].completion_tokens == alone[i][2], f"client {i}"
        assert_ends_with_done(raw)
    assert most_running >= 2, "the streams never ran together"
    assert wait_for_metric(server, "cellm_kv_blocks_used", lambda v: v == 0) == 0
    assert metric(server.metrics(), "cellm_sessions_running") == 0


def read_events(lines, count=None):
    """The next `count` SSE data events (all that are left when None) from a response's iter_lines()."""
    events = []
    for line in lines:
        if line.startswith("data:"):
            events.append(line[len("data:"):].strip())
            if len(events) == count:
                break
    return events


def long_stream(http, model_id):
    return http.stream("POST", "/v1/completions", json={"model": model_id, "prompt": COUNTING, "max_tokens": LONG,
                                                        "temperature": 0, "stream": True})


@pytest.fixture(scope="module")
def counting_runs_long(reference):
    ref = reference(COUNTING, LONG, raw=True)
    assert ref["finish_reason"] == "length", "the counting prompt must run to max_tokens for these tests to mean " \
                                             "anything"


def test_disconnect_frees_kv_blocks(server, model_id, counting_runs_long):
    with httpx.Client(base_url=server.url, timeout=60) as http:
        with long_stream(http, model_id) as response:
            assert response.status_code == 200
            # Held until the close below: dropping a half-read line iterator closes the connection too.
            lines = response.iter_lines()
            assert len(read_events(lines, 2)) == 2
            during = {name: metric(server.metrics(), name) for name in
                      ("cellm_sessions_running", "cellm_sessions_waiting", "cellm_kv_blocks_used")}
            assert during["cellm_sessions_running"] == 1 and during["cellm_kv_blocks_used"] > 0, during
    # The connection is closed with hundreds of tokens still to go (seconds at this model's speed).
    assert wait_for_metric(server, "cellm_kv_blocks_used", lambda v: v == 0, timeout=1.5) == 0
    assert metric(server.metrics(), "cellm_sessions_running") == 0
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


# Shutdown lets running streams finish for a grace period (10 s in host/server), then cancels them. One stream
# ends within it; eight (about 3,800 tokens) take longer on 2 cores and are cut at its end. Either way each must
# end with a final chunk and [DONE].
@pytest.mark.parametrize("sig,streams", [(signal.SIGTERM, 1), (signal.SIGINT, 8)], ids=["SIGTERM", "SIGINT-8"])
def test_signal_ends_streams_and_exits_zero(start_server, counting_runs_long, sig, streams):
    server = start_server()
    model_id = server.model_id()
    started = threading.Barrier(streams + 1)
    events, errors = [[] for _ in range(streams)], []

    def stream_one(i):
        try:
            with httpx.Client(base_url=server.url, timeout=60) as http:
                with long_stream(http, model_id) as response:
                    assert response.status_code == 200
                    lines = response.iter_lines()
                    events[i] += read_events(lines, 2)
                    started.wait()
                    events[i] += read_events(lines)  # the rest, until the server closes the stream
        except Exception as error:  # reported below with the stream's number
            errors.append(f"stream {i}: {error!r}")
            started.abort()

    threads = [threading.Thread(target=stream_one, args=(i,)) for i in range(streams)]
    for thread in threads:
        thread.start()
    try:
        started.wait(60)
        server.proc.send_signal(sig)
    finally:
        for thread in threads:
            thread.join()
    assert errors == []
    for i, stream_events in enumerate(events):
        assert stream_events[-1] == "[DONE]", f"stream {i} did not end with [DONE]: {stream_events[-3:]}"
        last = json.loads(stream_events[-2])
        assert last["choices"] and last["choices"][0]["finish_reason"] is not None, f"stream {i}: {last}"
    assert server.proc.wait(timeout=30) == 0, server.log()
