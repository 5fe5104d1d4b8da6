"""Errors: bad manifests and options, bad prompts, use after close. Each raises a CellmError with libcellm's
message and code; nothing crashes."""

from __future__ import annotations

import gc

import pytest

import cellm


@pytest.mark.parametrize("text, needle", [
    ("[model\npath = 'x'\n", ""),                                    # syntax
    ("[model]\npath = 'x.gguf'\nno_such_key = 1\n", "no_such_key"),  # unknown key
    ("[model]\npath = 'x.gguf'\n[backend]\nthreads = 'two'\n", "threads"),  # wrong type
])
def test_bad_manifest_text(text, needle):
    with pytest.raises(cellm.ManifestError) as error:
        cellm.Engine(manifest_text=text)
    assert error.value.code == 2 and error.value.name == "CELLM_E_MANIFEST"
    assert str(error.value) and needle in str(error.value)


def test_missing_manifest_file(tmp_path):
    with pytest.raises(cellm.ManifestError, match="no-such.toml"):
        cellm.Engine(manifest=tmp_path / "no-such.toml")


def test_load_errors(manifest, tmp_path):
    with pytest.raises(cellm.LoadError):
        cellm.Engine(manifest=manifest, model=tmp_path / "missing.gguf")
    with pytest.raises(cellm.LoadError, match="no-such-backend"):
        cellm.Engine(manifest=manifest, backend="no-such-backend")
    with pytest.raises(cellm.CellmError):
        cellm.Engine(manifest=manifest, precision="sloppy")


def test_bad_arguments(manifest):
    with pytest.raises(ValueError):
        cellm.Engine(manifest=manifest, manifest_text="[model]\n")
    with pytest.raises(ValueError):
        cellm.Engine()
    with pytest.raises(ValueError):
        cellm.Engine(manifest=manifest, n_ctx=64, context_length=128)
    with pytest.raises(cellm.InvalidArgumentError):
        cellm.Engine(manifest=manifest, threads=-1)


def test_overrides_reach_the_engine(manifest):
    with cellm.Engine(manifest=manifest, n_ctx=64, max_sessions=2, threads=1) as engine:
        assert engine.info.context_length == 64 and engine.info.max_sessions == 2
        info = engine.info
        assert info.weights_bytes > 0 and info.kv_pool_bytes >= info.kv_blocks * info.kv_block_size * info.kv_bytes_per_token
    # A budget of the weights, the scratch and 3 blocks: the pool holds those blocks and the context shrinks to them.
    block = info.kv_block_size * info.kv_bytes_per_token
    budget_mib = (info.weights_bytes + info.scratch_bytes + 3 * block + (1 << 20) - 1) >> 20
    with cellm.Engine(manifest=manifest, n_ctx=64, max_sessions=2, threads=1, kv_type="f16",
                      memory_budget_mib=budget_mib) as engine:
        expected_blocks = ((budget_mib << 20) - info.weights_bytes - info.scratch_bytes) // block
        assert engine.info.kv_blocks == expected_blocks
        assert engine.stats.kv_bytes_committed == 0, "nothing is committed before a prompt"
    with pytest.raises(cellm.LoadError, match="does not hold this model"):
        cellm.Engine(manifest=manifest, memory_budget_mib=max(1, info.weights_bytes >> 21))
    with pytest.raises(cellm.InvalidArgumentError, match="unknown KV type"):
        cellm.Engine(manifest=manifest, kv_type="q4")


def test_bad_prompts(engine):
    with engine.session(temperature=0, max_tokens=4) as session:
        with pytest.raises(cellm.PromptError):
            session.submit("")
        with pytest.raises(cellm.PromptError):
            session.submit([engine.info.n_vocab + 5])
        with pytest.raises((cellm.PromptError, cellm.TooLongError)):
            session.submit("word " * 400)
        with pytest.raises(cellm.PromptError):
            session.submit([{"role": "nobody", "content": "hi"}])
        with pytest.raises(cellm.PromptError):  # the synthetic model takes no images
            session.submit("<image>what?", images=[b"\x89PNG"])
        with pytest.raises(TypeError):
            session.submit(3.5)
        with pytest.raises(cellm.InvalidArgumentError):
            engine.session(max_tokens=4, temperature=-1.0)
        # The session still serves after the refusals.
        assert session.generate("the cat")


def test_busy(engine):
    with engine.session(temperature=0, max_tokens=100) as session:
        session.submit("x")
        with pytest.raises(cellm.BusyError):
            session.submit("y")
        with pytest.raises(cellm.BusyError):
            session.fork()
        session.cancel()
        session.wait()


def test_wait_timeout(engine):
    with engine.session(temperature=0, max_tokens=100) as session:
        session.submit("x")
        with pytest.raises(cellm.CellmTimeoutError):
            session.wait(timeout=0)
        session.cancel()
        assert session.wait() == "cancelled"


def test_use_after_close(manifest):
    engine = cellm.Engine(manifest=manifest)
    session = engine.session(temperature=0, max_tokens=4)
    session.generate("the cat")
    done = engine.session()
    done.close()
    done.close()  # idempotent
    for call in (lambda: done.submit("x"), lambda: done.text, lambda: done.tokens, lambda: done.stats,
                 lambda: done.fork(), lambda: done.wait(), lambda: list(done.stream()), lambda: done.configure()):
        with pytest.raises(cellm.ClosedError):
            call()
    done.cancel()  # nothing to cancel: no error

    engine.close()
    engine.close()
    assert engine.closed
    for call in (lambda: engine.session(), lambda: engine.tokenize("x"), lambda: engine.stats,
                 lambda: engine.create_completion("x"), lambda: engine.create_chat_completion([])):
        with pytest.raises(cellm.ClosedError):
            call()
    # A session of the closed engine: libcellm's CELLM_E_CLOSED.
    for call in (lambda: session.submit("x"), lambda: session.text, lambda: session.stats):
        with pytest.raises(cellm.ClosedError) as error:
            call()
        assert error.value.code == 6
    session.close()


def test_a_stream_starts_at_the_call(engine):
    with pytest.raises(cellm.PromptError):
        engine.create_completion("", stream=True)
    stream = engine.create_completion("x", stream=True, temperature=0, max_tokens=100)
    assert engine.stats.sessions == 1
    del stream  # never iterated: dropping it cancels the turn and frees the session
    gc.collect()
    assert engine.stats.sessions == 0 and engine.stats.kv_blocks_used == 0
