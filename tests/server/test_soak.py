"""A soak (opt-in: CELLM_TEST_FULL=1, which `scripts/test.sh --full` sets): SOAK_SECONDS (600 by default) of mixed
load on one server: full streams, streams dropped midway, non-streamed requests, bad JSON and malformed HTTP,
stalled and trickling connections, health probes. Afterwards the server must be back where it started: no
connection, session or KV block left, no descriptor leaked (/proc/PID/fd), resident memory within 10% (plus
8 MiB) of what it was after a warm-up of the same load, and nothing on stderr but its start line."""
import asyncio
import json
import os
import random
import time

import pytest

from support import metric, wait_for_metric

pytestmark = pytest.mark.skipif(os.environ.get("CELLM_TEST_FULL") != "1",
                                reason="the soak runs with CELLM_TEST_FULL=1 (scripts/test.sh --full)")
SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", "600"))
WARM_UP_SECONDS = 30
SERVER_FLAGS = ("--header-timeout", "2", "--body-timeout", "2", "--idle-timeout", "1", "--max-waiting", "32")


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def resident_bytes(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def one_client(host, port, model_id, rng, until):
    """Loops over random kinds of client until `until` (monotonic seconds)."""
    while time.monotonic() < until:
        kind = rng.choice(["stream", "drop", "plain", "bad_json", "bad_http", "stall", "trickle", "health"])
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        try:
            if kind in ("stream", "drop", "plain", "bad_json"):
                body = {"model": model_id, "prompt": "1, 2, 3, 4, 5,", "max_tokens": rng.randint(4, 48),
                        "temperature": 0.7, "stream": kind != "plain"}
                data = b'{"model": ' if kind == "bad_json" else json.dumps(body).encode()
                writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                             f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
                await writer.drain()
                if kind == "drop":
                    await asyncio.wait_for(reader.readline(), 60)
                    await asyncio.sleep(rng.uniform(0, 0.5))
                else:
                    await asyncio.wait_for(read_answer(reader), 120)
            elif kind == "bad_http":
                writer.write(rng.choice([b"GARBAGE\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                                         b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n"]))
                await writer.drain()
                await asyncio.wait_for(reader.read(), 10)
            elif kind == "stall":
                writer.write(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
                await writer.drain()
                await asyncio.wait_for(reader.read(), 10)  # the server's 408, then its close
            elif kind == "trickle":
                for byte in b"GET /health HTTP/1.1\r\n":
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(0.5)
            else:
                writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                await writer.drain()
                await asyncio.wait_for(reader.readline(), 10)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass  # the server closing a bad or slow client is what is expected
        finally:
            writer.close()


async def read_answer(reader):
    """Until the end of one answer: its Content-Length, or the end of a chunked body."""
    length, chunked = 0, False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
        chunked = chunked or (name.lower() == "transfer-encoding" and "chunked" in value)
    if not chunked:
        await reader.readexactly(length)
        return
    while True:
        size = int((await reader.readline()).split(b";")[0], 16)
        await reader.readexactly(size + 2)
        if size == 0:
            return


def run_load(server, model_id, seconds, clients, seed):
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    rng = random.Random(seed)
    until = time.monotonic() + seconds

    async def run():
        await asyncio.gather(*[one_client(host, int(port), model_id, random.Random(rng.random()), until)
                               for _ in range(clients)])

    asyncio.run(run())


def settle(server):
    for name in ("cellm_http_connections_open", "cellm_kv_blocks_used", "cellm_sessions_running",
                 "cellm_sessions_waiting", "cellm_http_workers_busy"):
        limit = 1 if name == "cellm_http_connections_open" else 0  # the scrape's own connection
        assert wait_for_metric(server, name, lambda v: v <= limit, timeout=15) <= limit, name


def test_soak_mixed_load_returns_to_baseline(server, model_id):
    pid = server.proc.pid
    run_load(server, model_id, WARM_UP_SECONDS, 48, seed=1)
    settle(server)
    fds, rss = descriptors(pid), resident_bytes(pid)
    run_load(server, model_id, SOAK_SECONDS, 48, seed=2)
    settle(server)
    samples = server.metrics()
    assert metric(samples, "cellm_requests_total", code="200") > 0
    assert metric(samples, "cellm_http_requests_timed_out_total") > 0
    assert descriptors(pid) <= fds, f"descriptors: {fds} after the warm-up, {descriptors(pid)} after the soak"
    assert resident_bytes(pid) <= rss * 1.10 + 8 * 2**20, f"resident: {rss} -> {resident_bytes(pid)} bytes"
    assert server.proc.poll() is None
    assert [line for line in server.stderr_lines if "serving" not in line] == [], server.log()
