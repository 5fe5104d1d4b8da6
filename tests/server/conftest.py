"""Fixtures for the tests of `cellm-host serve` through the official openai client.

Each test module gets its own server: cellm-host serve on 127.0.0.1, a port the OS picks (--port 0, the real
one read from the "serving MODEL on http://HOST:PORT" line on stderr), SmolLM2-135M on the openblas backend with
2 threads, a 512-token context (so an over-long prompt is cheap to build) and 16 sessions. The server is always
killed at teardown. Expected texts come from `cellm-host run --json` on the same model and settings, never from
strings written here.
"""
import functools
import json
import re
import subprocess
from pathlib import Path

import pytest

from support import CONTEXT, MANIFEST, REPO, Server


def pytest_addoption(parser):
    parser.addoption("--cellm-host", default=str(REPO / "build/bin/cellm-host"), help="cellm-host binary")
    parser.addoption("--model", default=str(Path.home() / ".cache/cellm/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
                     help="SmolLM2-135M-Instruct GGUF")


@pytest.fixture(scope="session")
def cellm_host(request):
    path = Path(request.config.getoption("--cellm-host"))
    if not path.is_file():
        pytest.fail(f"cellm-host not found at {path}")
    return str(path)


@pytest.fixture(scope="session")
def model_path(request):
    path = Path(request.config.getoption("--model")).expanduser()
    if not path.is_file():
        pytest.skip(f"model not found: {path} (scripts/fetch_models.sh)")
    return str(path)


@pytest.fixture
def start_server(cellm_host, model_path):
    """start_server(*extra_flags) -> a Server of its own for one test, killed when that test ends."""
    started = []

    def start(*extra_args):
        server = Server(cellm_host, model_path, extra_args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def server(request, cellm_host, model_path):
    """The module's server; a module may add flags with SERVER_FLAGS."""
    server = Server(cellm_host, model_path, getattr(request.module, "SERVER_FLAGS", ()))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


@pytest.fixture(scope="module")
def model_id(server):
    return server.model_id()


@pytest.fixture(scope="session")
def reference(cellm_host, model_path, tmp_path_factory):
    """reference(prompt, max_tokens, raw=False, temperature=0, seed=None, sampling=(), logprobs=None) ->
    `cellm-host run --json` on the same model, backend, threads and context: what the server must answer to the
    same request. `sampling` is ((key, value), ...) of the manifest's [sampling] section (top_k, top_p, min_p),
    which run has no flags for; they go into a copy of the manifest. `logprobs` N adds run's --logprobs N: the
    reply's "logprobs" is then a row per token, [{"token", "logprob"}, ...], the token first, then the N best."""
    manifests = tmp_path_factory.mktemp("manifests")

    @functools.lru_cache(maxsize=None)
    def run(prompt, max_tokens, raw=False, temperature=0.0, seed=None, sampling=(), logprobs=None):
        manifest = MANIFEST
        if sampling:
            text = MANIFEST.read_text()
            for key, value in sampling:
                text, count = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
                assert count == 1, f"{MANIFEST} has no single [sampling] line for {key}"
            # The copy lives elsewhere: point it at the plugins next to the binary.
            text = re.sub(r"(?m)^paths = .*$", f'paths = ["{Path(cellm_host).parent / "plugins"}"]', text)
            manifest = manifests / f"sampling-{len(list(manifests.iterdir()))}.toml"
            manifest.write_text(text)
        args = [cellm_host, "run", "--manifest", str(manifest), "--model", model_path, "--backend", "openblas",
                "--threads", "2", "--context", str(CONTEXT), "--prompt", prompt, "--temperature", str(temperature),
                "--max-tokens", str(max_tokens), "--json", "--raw" if raw else "--chat"]
        if seed is not None:
            args += ["--seed", str(seed)]
        if logprobs is not None:
            args += ["--logprobs", str(logprobs)]
        done = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stderr}"
        return json.loads(done.stdout)

    return run
