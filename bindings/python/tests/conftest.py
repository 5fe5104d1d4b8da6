"""Fixtures of the binding's tests. ctest (bindings/python/CMakeLists.txt) sets the environment:

  CELLM_LIBRARY     the build tree's libcellm.so (the package loads it instead of its own copy)
  CELLM_HOST        the build tree's cellm-host, the reference every greedy result is compared with
  CELLM_TEST_MODEL  the synthetic model (cellm-make-model --type q8_0), written by the python_make_model fixture

Greedy tokens are never written into a test: `cellm-host run --json` gives them for the same model and prompt.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import cellm

REPO = Path(__file__).resolve().parents[3]
SMOLLM2 = Path(os.environ.get("CELLM_MODELS", Path.home() / ".cache/cellm/models")) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def pytest_configure(config):
    config.addinivalue_line("markers", "real_model: needs SmolLM2-135M-Instruct Q4_1 (ctest python_real_model)")
    config.addinivalue_line("markers", "no_manifest: Engine(model=FILE) alone, libcellm 1.3 (ctest python_no_manifest)")


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"${name} is not set: run these tests through ctest (ctest -R python_), see conftest.py")
    return value


@pytest.fixture(scope="session")
def model() -> str:
    return _env("CELLM_TEST_MODEL")


@pytest.fixture(scope="session")
def manifest(model: str, tmp_path_factory) -> str:
    """A manifest for the synthetic model, as tests/sdk writes it."""
    path = tmp_path_factory.mktemp("manifest") / "tiny.toml"
    path.write_text(f'[model]\npath = "{model}"\n[backend]\nname = "scalar"\nthreads = 1\n'
                    '[context]\nlength = 128\n[sampling]\ntemperature = 0.8\nmax_tokens = 24\n')
    return str(path)


@pytest.fixture(scope="module")
def engine(manifest: str):
    with cellm.Engine(manifest=manifest) as e:
        yield e


def host_run(prompt: str, max_tokens: int, *, manifest: str | None = None, model: str | None = None,
             chat: bool = False, images: tuple[str, ...] = ()) -> dict:
    """`cellm-host run --json`, greedy: one JSON object (tokens, text, finish_reason, ...)."""
    command = [_env("CELLM_HOST"), "run", "--prompt", prompt, "--chat" if chat else "--raw", "--temperature", "0",
               "--max-tokens", str(max_tokens), "--json"]
    if manifest is not None:
        command += ["--manifest", manifest]
    if model is not None:
        command += ["--model", model]
    for image in images:
        command += ["--image", image]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stderr}"
    return json.loads(done.stdout)


@pytest.fixture(scope="session")
def smollm2() -> str:
    if not SMOLLM2.exists():
        pytest.skip(f"{SMOLLM2} is missing (scripts/fetch_models.sh fetches it)")
    return str(SMOLLM2)
