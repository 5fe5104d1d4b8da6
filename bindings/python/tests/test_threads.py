"""Several Python threads on one engine, cancel, and close while a turn streams."""

from __future__ import annotations

import ctypes
import threading
import time

import pytest

import cellm
from cellm import _capi
from conftest import host_run

PROMPTS = ["the cat sat", "once upon a time", "hello there my friend", "a b c d e"]


def test_four_threads_each_equal_to_its_prompt_alone(engine, manifest):
    alone = [host_run(p, 32, manifest=manifest)["tokens"] for p in PROMPTS]
    steps_before = engine.stats.steps
    barrier = threading.Barrier(len(PROMPTS))
    results: list = [None] * len(PROMPTS)
    spans: list = [None] * len(PROMPTS)

    def run(i: int) -> None:
        with engine.session(temperature=0, max_tokens=32) as session:
            barrier.wait()
            start = time.monotonic()
            pieces = list(session.stream(PROMPTS[i]))
            spans[i] = (start, time.monotonic())
            results[i] = (session.tokens, "".join(pieces) == session.text)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i, prompt in enumerate(PROMPTS):
        assert results[i] is not None, f"thread {i} failed"
        assert results[i][0] == alone[i], f"{prompt!r} differs from cellm-host alone"
        assert results[i][1]
    # They overlapped in time and shared the scheduler's steps: far fewer steps than tokens computed.
    assert max(s[0] for s in spans) < min(s[1] for s in spans)
    steps = engine.stats.steps - steps_before
    generated = sum(len(a) for a in alone)
    assert steps < 0.75 * generated, f"{steps} steps for {generated} generated tokens: not batched"


def test_gil_is_released_while_waiting(engine):
    """A thread inside cellm_session_poll (an idle session: it waits the whole timeout) does not hold the GIL."""
    with engine.session() as session:
        event = _capi.cellm_event()
        event.struct_size = ctypes.sizeof(event)
        entered = threading.Event()

        def wait_in_c() -> None:
            entered.set()
            _capi.lib().cellm_session_poll(session._handle, 1500, ctypes.byref(event))

        waiter = threading.Thread(target=wait_in_c)
        waiter.start()
        entered.wait()
        time.sleep(0.05)
        start = time.monotonic()
        spins = 0
        while time.monotonic() - start < 0.2:  # pure Python: needs the GIL
            spins += 1
        elapsed = time.monotonic() - start
        still_waiting = waiter.is_alive()
        waiter.join()
        assert still_waiting and elapsed < 1.0, f"Python ran {elapsed:.2f} s while a thread waited in C"


def _long_session(engine):
    return engine.session(temperature=0, max_tokens=100)


def test_cancel_by_leaving_the_stream(engine):
    with _long_session(engine) as session:
        for n, _piece in enumerate(session.stream("x")):
            if n == 2:
                break
        assert session.finish_reason == "cancelled"
        assert not session.stats.busy
        # The session serves again, as a fresh one would.
        assert session.generate("the cat sat") == engine.create_completion(
            "the cat sat", temperature=0, max_tokens=100)["choices"][0]["text"]


def test_cancel_inside_the_stream_loop(engine):
    with _long_session(engine) as session:
        pieces = []
        for piece in session.stream("x"):
            pieces.append(piece)
            if len(pieces) == 2:
                session.cancel()
        assert session.finish_reason == "cancelled"
        assert len(session.tokens) < 100 and "".join(pieces) == session.text


def test_cancel_from_another_thread(engine):
    with _long_session(engine) as session:
        first = threading.Event()
        canceller = threading.Thread(target=lambda: (first.wait(30), session.cancel()))
        canceller.start()
        pieces = []
        for piece in session.stream("x"):
            pieces.append(piece)
            first.set()
        canceller.join()
        assert session.finish_reason == "cancelled"
        assert session.stats.generated_tokens < 100


def test_closing_a_completion_stream_cancels_it(engine):
    stream = engine.create_chat_completion([{"role": "user", "content": "x"}], stream=True, temperature=0,
                                           max_tokens=100)
    next(stream)
    next(stream)
    stream.close()
    stats = engine.stats
    assert stats.sessions == 0 and stats.running == 0 and stats.kv_blocks_used == 0


def test_engine_close_while_streaming(manifest):
    engine = cellm.Engine(manifest=manifest)
    session = engine.session(temperature=0, max_tokens=100)
    pieces = []
    closer = None
    for piece in session.stream("x"):
        pieces.append(piece)
        if closer is None:
            closer = threading.Thread(target=engine.close)
            closer.start()
    closer.join()
    assert len(pieces) < 100 and engine.closed
    assert session._done_reason == "cancelled"
    with pytest.raises(cellm.ClosedError):
        session.stats
    with pytest.raises(cellm.ClosedError):
        session.submit("again")
    session.close()


def test_session_close_while_another_thread_streams(engine):
    session = _long_session(engine)
    started = threading.Event()
    outcome: list = []

    def consume() -> None:
        try:
            for _ in session.stream("x"):
                started.set()
            outcome.append("ended")
        except cellm.ClosedError:
            outcome.append("closed")

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert started.wait(30)
    session.close()
    consumer.join(30)
    assert outcome in (["closed"], ["ended"])
    assert engine.stats.sessions == 0


def test_engine_close_during_a_completion_stream(manifest):
    engine = cellm.Engine(manifest=manifest)
    chunks = []
    closer = threading.Thread(target=engine.close)
    for chunk in engine.create_completion("x", stream=True, temperature=0, max_tokens=100):
        chunks.append(chunk)
        if len(chunks) == 1:
            closer.start()
    closer.join()
    assert chunks[-1]["choices"][0]["finish_reason"] == "cancelled" and len(chunks) < 100
