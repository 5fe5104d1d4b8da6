"""cellm.Engine(model=FILE) without a manifest: the model's own defaults (libcellm 1.3: cellm_engine_options with
manifest_path and manifest_text both NULL). ctest python_no_manifest."""

from __future__ import annotations

import pytest

import cellm
from conftest import host_run

pytestmark = pytest.mark.no_manifest


def test_model_alone(model):
    with cellm.Engine(model=model, n_ctx=128) as engine:
        assert engine.info.model_path.endswith(".gguf") and engine.info.context_length == 128
        reply = engine.create_completion("the cat sat", temperature=0, max_tokens=12)
        want = host_run("the cat sat", 12, model=model)
        assert reply["choices"][0]["text"] == want["text"]
        with engine.session(temperature=0, max_tokens=12) as session:
            session.generate("the cat sat")
            assert session.tokens == want["tokens"]


def test_stdout_stays_the_applications(model):
    # libcellm logs nothing on the embedding program's stdout: its default logger would print info lines (the
    # openblas backend's note on repacked weights, among them) there; warnings and errors go to stderr.
    import subprocess
    import sys
    program = ("import cellm\n"
               f"with cellm.Engine(model={model!r}, n_ctx=128) as engine:\n"
               "    engine.create_completion('the cat sat', temperature=0, max_tokens=4)\n"
               "print('only this')\n")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert out.stdout == "only this\n", out.stdout
