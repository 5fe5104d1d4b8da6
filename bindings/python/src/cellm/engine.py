"""Engine: a model loaded with its backend, KV cache and scheduler thread (cellm_engine)."""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from typing import Any, Iterator

from . import _capi, completions
from .errors import check, closed
from .session import Session, session_options


@dataclass(frozen=True)
class EngineInfo:
    """cellm_engine_info: what was loaded."""

    model_name: str
    model_path: str
    arch: str
    backend: str
    chat_template: str  # "chatml", "llama3", "gemma" or "plain"
    n_vocab: int
    context_length: int  # tokens per session
    max_sessions: int
    kv_blocks: int
    kv_block_size: int
    kv_bytes_per_token: int
    model_has_chat_template: bool
    model_takes_images: bool
    # Where the memory goes, measured at load (docs/memory.md).
    weights_bytes: int
    scratch_bytes: int
    kv_pool_bytes: int  # at full use; the CPU backends commit it as blocks come into use


@dataclass(frozen=True)
class EngineStats:
    """cellm_engine_stats: a snapshot between two scheduler steps."""

    sessions: int
    running: int
    waiting: int
    kv_blocks: int
    kv_blocks_used: int
    kv_blocks_free: int
    prefix_hit_tokens: int
    steps: int
    batched_tokens: int
    preemptions: int
    copied_blocks: int
    kv_bytes_committed: int  # KV pool bytes with memory behind them now


def _path(value: Any) -> bytes | None:
    return None if value is None else os.fsencode(value)


class Engine:
    """A cellm engine. Open it from a model file (the model's own defaults), a manifest file or manifest text
    (the TOML that cellm-host runs), with cellm-host's overrides:

        engine = cellm.Engine(model="SmolLM2-135M-Instruct.Q4_1.gguf")
        engine = cellm.Engine(manifest="config/smollm2-135m.toml", threads=2)

    n_ctx is llama-cpp-python's name for context_length. Loading takes time. Every method may be called from any
    thread; sessions on one engine (several Python threads each with its own) are batched in the same steps.
    """

    def __init__(self, model: str | os.PathLike | None = None, manifest: str | os.PathLike | None = None,
                 manifest_text: str | None = None, backend: str | None = None, threads: int | None = None,
                 n_ctx: int | None = None, context_length: int | None = None, max_sessions: int | None = None,
                 precision: str | None = None, plugin_path: str | os.PathLike | None = None,
                 mmproj: str | os.PathLike | None = None, kv_type: str | None = None,
                 memory_budget_mib: int | None = None):
        self._handle: int | None = None
        self._lock = threading.Lock()  # engine calls against close()
        if manifest is not None and manifest_text is not None:
            raise ValueError("give manifest or manifest_text, not both")
        if model is None and manifest is None and manifest_text is None:
            raise ValueError("give a model, a manifest or manifest_text")
        if n_ctx and context_length and n_ctx != context_length:
            raise ValueError(f"n_ctx={n_ctx} and context_length={context_length} disagree")
        options = _capi.cellm_engine_options()
        lib = _capi.lib()
        lib.cellm_engine_options_init_size(ctypes.byref(options), ctypes.sizeof(options))
        options.manifest_path = _path(manifest)
        options.manifest_text = None if manifest_text is None else manifest_text.encode()
        options.model_path = _path(model)
        options.backend = None if backend is None else backend.encode()
        options.threads = threads or 0
        options.context_length = context_length or n_ctx or 0
        options.max_sessions = max_sessions or 0
        options.plugin_path = _path(plugin_path)
        options.mmproj_path = _path(mmproj)
        options.precision = None if precision is None else precision.encode()
        options.kv_type = None if kv_type is None else kv_type.encode()
        options.memory_budget_mib = memory_budget_mib or 0
        handle = ctypes.c_void_p()
        check(lib.cellm_engine_open(ctypes.byref(options), ctypes.byref(handle)))
        self._handle = handle.value
        self.info = self._read_info()

    def __repr__(self) -> str:
        if self._handle is None:
            return "<cellm.Engine closed>"
        return f"<cellm.Engine {self.info.model_name!r} ({self.info.arch}) on {self.info.backend}>"

    def _require(self) -> int:
        if self._handle is None:
            raise closed("the engine")
        return self._handle

    def _read_info(self) -> EngineInfo:
        i = _capi.cellm_engine_info()
        i.struct_size = ctypes.sizeof(i)
        check(_capi.lib().cellm_engine_get_info(self._handle, ctypes.byref(i)))
        text = lambda b: (b or b"").decode("utf-8", "replace")  # noqa: E731
        return EngineInfo(text(i.model_name), text(i.model_path), text(i.arch), text(i.backend),
                          text(i.chat_template), i.n_vocab, i.context_length, i.max_sessions, i.kv_blocks,
                          i.kv_block_size, i.kv_bytes_per_token, bool(i.model_has_chat_template),
                          bool(i.model_takes_images), i.weights_bytes, i.scratch_bytes, i.kv_pool_bytes)

    @property
    def stats(self) -> EngineStats:
        with self._lock:
            s = _capi.cellm_engine_stats()
            s.struct_size = ctypes.sizeof(s)
            check(_capi.lib().cellm_engine_get_stats(self._require(), ctypes.byref(s)))
            return EngineStats(*(getattr(s, name) for name, _ in s._fields_[1:]))

    def tokenize(self, text: str | bytes, add_bos: bool = True) -> list[int]:
        """Token ids of `text`: BOS as the model asks when add_bos, special-token text read as those tokens."""
        data = text.encode() if isinstance(text, str) else bytes(text)
        lib = _capi.lib()
        with self._lock:
            handle = self._require()
            n = ctypes.c_size_t()
            check(lib.cellm_engine_tokenize(handle, data, int(add_bos), None, 0, ctypes.byref(n)))
            ids = (ctypes.c_int32 * max(n.value, 1))()
            check(lib.cellm_engine_tokenize(handle, data, int(add_bos), ids, n.value, ctypes.byref(n)))
            return ids[: n.value]

    def session(self, **sampling: Any) -> Session:
        """A new idle Session. Sampling keywords (llama-cpp-python's names): temperature (0: greedy), top_k, top_p,
        min_p, repeat_penalty, frequency_penalty, presence_penalty, seed, max_tokens (<= 0: until the context is
        full), stop (a str or a list); and cellm's repeat_last_n, priority, name. Constraints: json_schema, grammar,
        logit_bias. Function tools: tools (OpenAI's list), tool_choice ("auto", "none", "required", a name or
        OpenAI's object), parallel_tool_calls. Unnamed ones take the engine's defaults (the manifest's
        [sampling], or the model's own)."""
        with self._lock:
            handle = self._require()
            options, _keep = session_options(handle, self.info.context_length, sampling)
            out = ctypes.c_void_p()
            check(_capi.lib().cellm_session_create(handle, ctypes.byref(options), ctypes.byref(out)))
            return Session(self, out.value, self.info.context_length, options.tools is not None)

    # -- OpenAI / llama-cpp-python shapes (completions.py) --

    def create_chat_completion(self, messages: list[dict[str, Any]], stream: bool = False, *,
                               tools: list[dict[str, Any]] | None = None, tool_choice: str | dict | None = None,
                               parallel_tool_calls: bool = True, images: list[Any] | None = None,
                               model: str | None = None, **kwargs: Any) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """An OpenAI chat completion (a dict), or with stream=True an iterator of chat.completion.chunk dicts;
        closing the iterator early cancels the turn. Keywords as Engine.session; with tools=, the answer's calls
        are message.tool_calls (delta.tool_calls when streaming) and finish_reason "tool_calls"."""
        kwargs.update(tools=tools, tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls)
        return completions.chat(self, messages, stream, images, model, kwargs)

    def create_completion(self, prompt: str | list[int], stream: bool = False, *, images: list[Any] | None = None,
                          model: str | None = None, **kwargs: Any) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """An OpenAI text completion of `prompt` (text as is, or token ids), or with stream=True an iterator of
        its chunks. Keywords as Engine.session."""
        return completions.complete(self, prompt, stream, images, model, kwargs)

    chat = create_chat_completion
    complete = create_completion
    __call__ = create_completion  # llama-cpp-python's llm(prompt, ...)

    # -- lifetime --

    def close(self) -> None:
        """Ends every running turn (finish reason "cancelled"), stops the scheduler and frees the model. Sessions
        stay valid objects whose calls raise ClosedError. Idempotent."""
        with self._lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                _capi.lib().cellm_engine_close(handle)

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
