"""Helpers of the `cellm-host serve` tests: the server process, /metrics parsing, raw SSE checks."""
import ctypes
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import openai

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "config/smollm2-135m.toml"
CONTEXT = 512
MAX_SESSIONS = 16
SERVING_LINE = re.compile(r"cellm-host: serving (.+) on http://([^\s:]+):(\d+)")


def die_with_parent():
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Server:
    """One cellm-host serve process. stderr is drained by a thread (kept for failure messages) so the server
    never blocks on a full pipe."""

    def __init__(self, binary, model, extra_args=(), backend="openblas", manifest=MANIFEST, context=CONTEXT):
        self.args = [binary, "serve", "--manifest", str(manifest), "--model", str(model), "--backend", backend,
                     "--threads", "2", "--context", str(context), "--max-sessions", str(MAX_SESSIONS),
                     "--host", "127.0.0.1", "--port", "0", *extra_args]
        # CELLM_API_KEY would stand in for --api-key; the server dies with the tests (PR_SET_PDEATHSIG) even if
        # they are killed before teardown.
        env = {k: v for k, v in os.environ.items() if k != "CELLM_API_KEY"}
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace", env=env,
                                     preexec_fn=die_with_parent)
        self.stderr_lines = []
        self.served_name = None
        self.url = None
        listening = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.stderr_lines.append(line.rstrip("\n"))
                match = SERVING_LINE.search(line)
                if match and not listening.is_set():
                    self.served_name = match.group(1)
                    self.url = f"http://{match.group(2)}:{match.group(3)}"
                    listening.set()
            listening.set()  # stderr closed: the process ended

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()
        if not listening.wait(60) or self.url is None:
            self.stop()
            raise RuntimeError(f"cellm-host serve did not report its address; exit {self.proc.poll()}; "
                               f"stderr:\n{self.log()}")
        if self.url.endswith(":0"):
            self.stop()
            raise RuntimeError(f"--port 0 printed port 0 instead of the real one: {self.url}")
        self.base_url = self.url + "/v1"

    def log(self):
        return "\n".join(self.stderr_lines[-40:])

    def stop(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join(5)

    def client(self, api_key="unused", **kwargs):
        """The official client, without retries (a failure must show, not be retried away)."""
        return openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, timeout=120, **kwargs)

    def model_id(self):
        """The id /v1/models gives: what requests name as their model."""
        return httpx.get(self.base_url + "/models", timeout=10).json()["data"][0]["id"]

    def metrics(self):
        response = httpx.get(self.url + "/metrics", timeout=10)
        response.raise_for_status()
        return parse_metrics(response.text)


def parse_metrics(text):
    """Prometheus text format -> {(name, frozenset of (label, value))): value}."""
    samples = {}
    line_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
    label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = line_re.match(line.strip())
        assert match, f"not a Prometheus sample line: {line!r}"
        labels = frozenset(label_re.findall(match.group(2) or ""))
        samples[(match.group(1), labels)] = float(match.group(3))
    return samples


def metric(samples, name, **labels):
    """The sum of every sample of `name` whose labels match `labels`: each a value, or a predicate on the value
    (0 when none matches)."""
    def matches(label_set):
        found = dict(label_set)
        return all(key in found and (want(found[key]) if callable(want) else found[key] == want)
                   for key, want in labels.items())

    return sum(v for (n, ls), v in samples.items() if n == name and matches(ls))


def wait_for_metric(server, name, predicate, timeout=5.0):
    """Polls /metrics until predicate(value of name) holds; returns the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = metric(server.metrics(), name)
        if predicate(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


class RecordingTransport(httpx.HTTPTransport):
    """Keeps the raw bytes of every response body read through it: the openai client stops iterating a stream
    at `data: [DONE]` and also when the connection just ends, so only the bytes tell the two apart."""

    def __init__(self):
        super().__init__()
        self.bodies = []

    def handle_request(self, request):
        response = super().handle_request(request)
        body = bytearray()
        self.bodies.append(body)
        inner = response.stream

        class Tee(httpx.SyncByteStream):
            def __iter__(self):
                for chunk in inner:
                    body.extend(chunk)
                    yield chunk

            def close(self):
                inner.close()

        response.stream = Tee()
        return response


def recording_client(server):
    transport = RecordingTransport()
    return server.client(http_client=httpx.Client(transport=transport, timeout=120)), transport


def sse_events(raw):
    """The data fields of an SSE body, in order."""
    text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
    return [line[len("data:"):].strip() for line in text.splitlines() if line.startswith("data:")]


def assert_ends_with_done(raw):
    events = sse_events(raw)
    assert events and events[-1] == "[DONE]", f"stream did not end with data: [DONE]; last events: {events[-3:]}"
    for event in events[:-1]:
        json.loads(event)  # every other event is one JSON chunk


# cellm-host run's finish reasons as the OpenAI API names them.
OPENAI_FINISH = {"eog": "stop", "stop": "stop", "length": "length"}


def collect_stream(stream, kind):
    """Text, finish reasons and usage of a streamed chat ("chat") or completion ("text") response."""
    text, finish_reasons, usage, ids = "", [], [], set()
    for chunk in stream:
        ids.add(chunk.id)
        assert chunk.object == ("chat.completion.chunk" if kind == "chat" else "text_completion")
        if chunk.usage is not None:
            assert chunk.choices == [], "the usage chunk has empty choices"
            usage.append(chunk.usage)
        for choice in chunk.choices:
            assert choice.index == 0
            text += (choice.delta.content or "") if kind == "chat" else choice.text
            if choice.finish_reason is not None:
                finish_reasons.append(choice.finish_reason)
    assert len(ids) == 1, f"chunks of one stream carry different ids: {ids}"
    return text, finish_reasons, usage
