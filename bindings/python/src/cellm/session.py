"""Session: one conversation on an engine (cellm_session), driven by polling.

Events are taken with cellm_session_poll in short waits. ctypes releases the GIL during each wait, so sessions
driven from several Python threads generate at once in the engine's shared steps; no callback ever enters Python
from the scheduler thread. The short waits also keep Ctrl-C working and let other threads reach the session
between two of them.
"""

from __future__ import annotations

import base64
import codecs
import ctypes
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from . import _capi
from .errors import CellmTimeoutError, GenerationError, check, closed

_WAIT_SLICE_MS = 100

# The sampling keywords a session takes: llama-cpp-python's names, and cellm's repeat_last_n, priority and name;
# the constraints: grammar (GBNF text), json_schema (a dict or JSON text), logit_bias ({token id: bias}); and
# function tools: tools (OpenAI's list, or JSON text), tool_choice, parallel_tool_calls.
SAMPLING_KEYS = frozenset(
    {"temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "frequency_penalty",
     "presence_penalty", "seed", "max_tokens", "stop", "priority", "name", "grammar", "json_schema", "logit_bias",
     "tools", "tool_choice", "parallel_tool_calls"}
)


@dataclass(frozen=True)
class SessionStats:
    """cellm_session_stats: the current or last turn. finish_reason is "" while none has ended, else one of "eog",
    "stop", "length", "context", "cancelled", "error", "tool_calls"."""

    busy: bool
    prompt_tokens: int
    cached_tokens: int
    generated_tokens: int
    preemptions: int
    ttft_ms: float
    prefill_tok_s: float
    decode_tok_s: float
    finish_reason: str
    error: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a function call as Session.events() streams it (CELLM_EVENT_TOOL_CALL): the answer's index-th
    call, its id and function name. The first delta of a call announces it with arguments ""; the next ones carry
    pieces of its arguments' JSON text, which join to the call's "arguments" in Session.tool_calls."""

    index: int
    id: str
    name: str
    arguments: str


def finish_reason_name(reason: int) -> str:
    return _capi.lib().cellm_finish_reason_name(reason).decode()


def session_options(engine_handle: int, context_length: int, sampling: dict[str, Any]):
    """cellm_session_options from the engine's defaults (cellm_session_options_init: the manifest's [sampling])
    with the given keywords set; None keeps a default. Returns the struct and what its pointers point into."""
    unknown = set(sampling) - SAMPLING_KEYS
    if unknown:
        raise TypeError(f"unknown sampling keyword(s): {', '.join(sorted(unknown))}")
    options = _capi.cellm_session_options()
    # Sized: the library fills exactly the struct declared here (1.5's), whatever its own version.
    check(_capi.lib().cellm_session_options_init_size(engine_handle, ctypes.byref(options), ctypes.sizeof(options)))
    keep: list[Any] = []
    for key in ("temperature", "top_p", "min_p", "repeat_penalty", "frequency_penalty", "presence_penalty"):
        if sampling.get(key) is not None:
            setattr(options, key, float(sampling[key]))
    for key in ("top_k", "repeat_last_n", "priority"):
        if sampling.get(key) is not None:
            setattr(options, key, int(sampling[key]))
    seed = sampling.get("seed")
    if seed is not None and seed != -1:  # -1: a random seed, as in llama-cpp-python
        options.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    max_tokens = sampling.get("max_tokens")
    if max_tokens is not None:
        # llama-cpp-python: <= 0 means "until the context is full".
        options.max_tokens = int(max_tokens) if max_tokens > 0 else context_length
    stop = sampling.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else list(stop)
        array = (ctypes.c_char_p * max(len(stops), 1))(*[s.encode() for s in stops])
        keep.append(array)
        options.stop = ctypes.cast(array, ctypes.POINTER(ctypes.c_char_p))
        options.n_stop = len(stops)
    # Compiled by the library in cellm_session_create/configure (GrammarError when refused), cached by text.
    for key in ("grammar", "json_schema"):
        value = sampling.get(key)
        if value is None:
            continue
        if key == "json_schema" and not isinstance(value, str):
            value = json.dumps(value)
        if not isinstance(value, str):
            raise TypeError(f"{key} is text (GBNF for grammar, a dict or JSON text for json_schema)")
        text = value.encode()
        keep.append(text)
        setattr(options, key, text)
    bias = sampling.get("logit_bias")
    if bias:
        entries = (_capi.cellm_logit_bias * len(bias))(*[(int(t), float(b)) for t, b in bias.items()])
        keep.append(entries)
        options.logit_bias = ctypes.cast(entries, ctypes.c_void_p)
        options.n_logit_bias = len(bias)
    # Function tools (cellm.h 1.5), checked by the library in cellm_session_create/configure: a malformed tool or
    # tool_choice raises InvalidArgumentError naming the field ("tools[0].function.parameters: ...").
    tools = sampling.get("tools")
    if tools is not None and not isinstance(tools, str):
        if not isinstance(tools, (list, tuple)):
            raise TypeError("tools is OpenAI's list of {'type': 'function', 'function': {...}} (or its JSON text)")
        tools = json.dumps(list(tools)) if tools else None  # []: no tools, as llama-cpp-python reads it
    choice = sampling.get("tool_choice")
    if choice is not None and not isinstance(choice, str):
        if not isinstance(choice, dict):
            raise TypeError('tool_choice is "auto", "none", "required", a function\'s name or OpenAI\'s '
                            '{"type": "function", "function": {"name": ...}}')
        choice = json.dumps(choice)
    for key, value in (("tools", tools), ("tool_choice", choice)):
        if value is not None:
            text = value.encode()
            keep.append(text)
            setattr(options, key, text)
    if sampling.get("parallel_tool_calls") is not None:
        options.parallel_tool_calls = int(bool(sampling["parallel_tool_calls"]))
    if sampling.get("name") is not None:
        name = str(sampling["name"]).encode()
        keep.append(name)
        options.name = name
    return options, keep


# ---- Prompts --------------------------------------------------------------------------------------------------


def image_bytes(image: Any) -> bytes:
    """An image as PNG or JPEG file bytes: bytes-like, a path, a file:// URL or a data: URL (base64)."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    if isinstance(image, os.PathLike):
        return Path(image).read_bytes()
    if isinstance(image, str):
        if image.startswith("data:"):
            header, _, payload = image.partition(",")
            if not header.endswith(";base64"):
                raise ValueError("a data: image URL must be base64")
            return base64.b64decode(payload)
        if image.startswith("file://"):
            return Path(image[len("file://"):]).read_bytes()
        if "://" in image:
            raise ValueError(f"cellm does not fetch images from URLs: {image[:60]}")
        return Path(image).read_bytes()
    raise TypeError(f"an image is bytes, a path or a data: URL, not {type(image).__name__}")


def _message_content(content: Any, images: list[bytes]) -> str:
    """A message's content as text; OpenAI content parts become text, and images become "<image>" markers whose
    bytes are appended to `images`."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    text = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            text.append(part["text"])
        elif kind == "image_url":
            url = part["image_url"]
            images.append(image_bytes(url["url"] if isinstance(url, dict) else url))
            text.append("<image>")
        else:
            raise ValueError(f"unsupported content part type {kind!r}")
    return "".join(text)


def _needs_json(messages: Sequence[dict[str, Any]]) -> bool:
    """Whether chat messages need cellm_session_submit_chat_json: a tool result, or an assistant's calls."""
    return any(m.get("role") == "tool" or m.get("tool_calls") for m in messages)


def _json_messages(messages: Sequence[dict[str, Any]]) -> bytes:
    """OpenAI messages as the JSON text cellm_session_submit_chat_json reads: content parts joined into text (it
    takes a string, or null beside tool_calls), every other field as given (tool_calls, tool_call_id, ...)."""
    out = []
    for m in messages:
        message = dict(m)
        if message.get("content") is not None:
            images: list[bytes] = []
            message["content"] = _message_content(message["content"], images)
            if images:
                raise ValueError("images cannot go with tools or tool messages (libcellm has no "
                                 "cellm_session_submit_chat_json with images)")
        out.append(message)
    return json.dumps(out, ensure_ascii=False).encode()


def _prompt_form(prompt: Any) -> str:
    if isinstance(prompt, str):
        return "text"
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(m, dict) for m in prompt):
        return "chat"
    if isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
        return "tokens"
    raise TypeError("a prompt is a str (text as is), a list of {'role', 'content'} dicts (chat) or a list of "
                    "token ids")


# ---- Session ---------------------------------------------------------------------------------------------------


class Session:
    """A conversation on an Engine; create it with Engine.session(**sampling).

    Each submit gives the whole conversation so far (text, chat messages or token ids); what earlier turns left in
    the KV cache is reused. Use a session from one thread at a time; cancel() may be called from any thread.
    """

    def __init__(self, engine: Any, handle: int, context_length: int, tools: bool = False):
        self._engine = engine  # keeps the Engine (and its scheduler) alive as long as its sessions
        self._handle: int | None = handle
        self._context_length = context_length
        self._tools = tools  # its settings have tools: chat prompts go through cellm_session_submit_chat_json
        self._lock = threading.RLock()  # one C call on this session at a time
        self._handle_lock = threading.Lock()  # held by close() and cancel(): the handle outlives any cancel
        self._done_reason = ""  # of the last DONE stream() read: still known after the engine closed

    def __repr__(self) -> str:
        return f"<cellm.Session {'closed' if self._handle is None else hex(self._handle)}>"

    def _require(self) -> int:
        if self._handle is None:
            raise closed("the session")
        return self._handle

    # -- settings and turns --

    def configure(self, **sampling: Any) -> None:
        """New sampling settings for the next turn (keywords as Engine.session); unnamed ones return to the
        engine's defaults. BusyError while a turn runs."""
        with self._lock:
            handle = self._require()
            with self._engine._lock:
                options, _keep = session_options(self._engine._require(), self._context_length, sampling)
            check(_capi.lib().cellm_session_configure(handle, ctypes.byref(options)))
            self._tools = options.tools is not None

    def submit(self, prompt: Any, *, images: Sequence[Any] | None = None) -> None:
        """Starts a turn and returns at once. `prompt` is the whole conversation: a str (text as is, BOS as the
        model asks), a list of {"role", "content"} messages (rendered with the chat template) or a list of token
        ids. `images` (PNG or JPEG bytes, paths or data: URLs) go to a model that takes them, one per "<image>" in
        the text; OpenAI image_url content parts are taken too. Chat messages may carry OpenAI's tool_calls
        (assistant) and role "tool" results; they, and every chat prompt of a session with tools, go through
        cellm_session_submit_chat_json, which takes no images."""
        form = _prompt_form(prompt)
        pictures = [image_bytes(i) for i in images or ()]
        if form == "tokens" and pictures:
            raise ValueError("images go with a text or chat prompt, not token ids")
        if form == "chat" and (self._tools or _needs_json(prompt)):
            if pictures:
                raise ValueError("images cannot go with tools or tool messages (libcellm has no "
                                 "cellm_session_submit_chat_json with images)")
            text = _json_messages(prompt)
            with self._lock:
                check(_capi.lib().cellm_session_submit_chat_json(self._require(), text))
            return
        if form == "chat":
            part_images: list[bytes] = []
            contents = [_message_content(m.get("content"), part_images) for m in prompt]
            if part_images and pictures:
                raise ValueError("give images either as image_url content parts or as images=, not both")
            pictures = pictures or part_images
            messages = (_capi.cellm_message * len(prompt))(
                *[_capi.cellm_message(str(m["role"]).encode(), c.encode()) for m, c in zip(prompt, contents)])
        # The image bytes stay in `pictures` (bytes objects) for the call; the array points into them.
        image_array = (_capi.cellm_image * len(pictures))(
            *[_capi.cellm_image(ctypes.cast(ctypes.c_char_p(p), ctypes.c_void_p), len(p)) for p in pictures])
        lib = _capi.lib()
        with self._lock:
            handle = self._require()
            if form == "tokens":
                ids = (ctypes.c_int32 * max(len(prompt), 1))(*prompt)
                check(lib.cellm_session_submit_tokens(handle, ids, len(prompt)))
            elif form == "text" and not pictures:
                check(lib.cellm_session_submit_text(handle, prompt.encode()))
            elif form == "text":
                check(lib.cellm_session_submit_text_images(handle, prompt.encode(), image_array, len(pictures)))
            elif not pictures:
                check(lib.cellm_session_submit_chat(handle, messages, len(prompt)))
            else:
                check(lib.cellm_session_submit_chat_images(handle, messages, len(prompt), image_array, len(pictures)))

    def stream(self, prompt: Any = None, *, images: Sequence[Any] | None = None,
               timeout: float | None = None) -> Iterator[str]:
        """The text of the running turn as it is generated, piece by piece; the pieces join to Session.text.
        With a prompt, submits it first (at this call, not at the first next()). Ends when the turn does; a turn
        that failed raises GenerationError. Closing the iterator early (break, close(), garbage collection)
        cancels the turn. `timeout` (seconds) bounds each wait for the next piece: CellmTimeoutError."""
        if prompt is not None:
            self.submit(prompt, images=images)
        else:
            self._require()
        return self._text(self._events(timeout))

    def events(self, prompt: Any = None, *, images: Sequence[Any] | None = None,
               timeout: float | None = None) -> Iterator[str | ToolCallDelta]:
        """As stream(), with the function calls of a session with tools too: text pieces (str, joining to
        Session.text, the answer without the calls' markup) and ToolCallDelta pieces, in the order generated."""
        if prompt is not None:
            self.submit(prompt, images=images)
        else:
            self._require()
        return self._events(timeout)

    @staticmethod
    def _text(events: Iterator[str | ToolCallDelta]) -> Iterator[str]:
        try:
            for piece in events:
                if isinstance(piece, str):
                    yield piece
        finally:
            events.close()  # at once: an abandoned stream cancels its turn when it is closed

    def _events(self, timeout: float | None) -> Iterator[str | ToolCallDelta]:
        # Each TEXT event is whole UTF-8 characters (libcellm writes what a model generates that is not UTF-8 as
        # U+FFFD), so the pieces decode one by one and join to Session.text. cellm.h promises no such thing for a
        # call's argument pieces: each call gets its own incremental decoder.
        ended = False
        decoders: dict[int, Any] = {}
        try:
            while True:
                kind, data, reason, call = self._next_event(timeout)
                if kind == _capi.EVENT_DONE:
                    ended = True
                    self._done_reason = finish_reason_name(reason)
                    self._raise_if_failed(reason)
                    return
                if kind == _capi.EVENT_TOOL_CALL and call is not None:
                    index, ident, name = call
                    if index not in decoders:
                        decoders[index] = codecs.getincrementaldecoder("utf-8")("replace")
                        yield ToolCallDelta(index, ident, name, "")
                    arguments = decoders[index].decode(data) if data else ""
                    if arguments:
                        yield ToolCallDelta(index, ident, name, arguments)
                elif kind == _capi.EVENT_TEXT and data:
                    yield data.decode("utf-8")
        finally:
            if not ended:
                self._cancel_and_drain()

    def _next_event(self, timeout: float | None) -> tuple[int, bytes, int, tuple[int, str, str] | None]:
        deadline = None if timeout is None else time.monotonic() + timeout
        lib = _capi.lib()
        event = _capi.cellm_event()
        while True:
            with self._lock:
                handle = self._require()
                event.struct_size = ctypes.sizeof(event)
                result = lib.cellm_session_poll(handle, _WAIT_SLICE_MS, ctypes.byref(event))
                if result == _capi.SUCCESS:
                    # Copied before the lock goes: the next poll ends the text's life.
                    data = ctypes.string_at(event.text, event.text_len) if event.text_len else b""
                    call = None
                    if event.kind == _capi.EVENT_TOOL_CALL:
                        call = (event.tool_call_index, (event.tool_call_id or b"").decode("utf-8", "replace"),
                                (event.tool_name or b"").decode("utf-8", "replace"))
                    return event.kind, data, event.finish_reason, call
            if result == _capi.E_CLOSED and self._turn_ended_by_close():
                continue  # its DONE is queued now
            if result != _capi.E_TIMEOUT:
                check(result)
            if deadline is not None and time.monotonic() >= deadline:
                raise CellmTimeoutError(f"no event within {timeout} s", _capi.E_TIMEOUT)

    def _turn_ended_by_close(self) -> bool:
        """While Engine.close runs on another thread, libcellm's poll can answer CELLM_E_CLOSED before the close
        has queued the DONE of the turn it ends. True when such a turn was running and has ended since."""
        with self._lock:
            return self._handle is not None and _capi.lib().cellm_session_wait(self._handle, 10000) == _capi.SUCCESS

    def _raise_if_failed(self, reason: int) -> None:
        if reason == _capi.FINISH_ERROR:
            raise GenerationError(self.stats.error or "the turn failed")

    def _cancel_and_drain(self) -> None:
        """Ends the turn an abandoned stream leaves running; its remaining events are dropped."""
        if self._handle is None:
            return
        try:
            self.cancel()
            with self._lock:
                if self._handle is not None:
                    _capi.lib().cellm_session_wait(self._handle, -1)
        except Exception:  # closed engine or session: nothing runs any more
            pass

    def wait(self, timeout: float | None = None) -> str:
        """Waits until the running turn ends (at once when idle) and returns its finish reason ("eog", "stop",
        "length", "context", "cancelled", "tool_calls"); a failed turn raises GenerationError. Queued text stays
        for stream()."""
        deadline = None if timeout is None else time.monotonic() + timeout
        lib = _capi.lib()
        while True:
            # Never past the deadline: a wait(timeout=0) only looks.
            slice_ms = _WAIT_SLICE_MS if deadline is None else \
                max(0, min(_WAIT_SLICE_MS, int((deadline - time.monotonic()) * 1000)))
            with self._lock:
                result = lib.cellm_session_wait(self._require(), slice_ms)
            if result == _capi.SUCCESS:
                break
            if result != _capi.E_TIMEOUT:
                check(result)
            if deadline is not None and time.monotonic() >= deadline:
                raise CellmTimeoutError(f"the turn did not end within {timeout} s", _capi.E_TIMEOUT)
        stats = self.stats
        if stats.finish_reason == "error":
            raise GenerationError(stats.error or "the turn failed")
        return stats.finish_reason

    def generate(self, prompt: Any, *, images: Sequence[Any] | None = None) -> str:
        """submit(), wait(), and the turn's text."""
        self.submit(prompt, images=images)
        self.wait()
        return self.text

    def cancel(self) -> None:
        """Ends the running turn now (finish reason "cancelled"); nothing when idle. Any thread, any time."""
        with self._handle_lock:
            if self._handle is None:
                return
            check(_capi.lib().cellm_session_cancel(self._handle))

    def fork(self) -> "Session":
        """A new idle session with this one's settings and cached context (shared copy-on-write). This session
        must be idle."""
        with self._lock:
            out = ctypes.c_void_p()
            check(_capi.lib().cellm_session_fork(self._require(), ctypes.byref(out)))
            return Session(self._engine, out.value, self._context_length, self._tools)

    # -- results --

    @property
    def stats(self) -> SessionStats:
        with self._lock:
            s = _capi.cellm_session_stats()
            s.struct_size = ctypes.sizeof(s)
            check(_capi.lib().cellm_session_get_stats(self._require(), ctypes.byref(s)))
            return SessionStats(bool(s.busy), s.prompt_tokens, s.cached_tokens, s.generated_tokens, s.preemptions,
                                s.ttft_ms, s.prefill_tok_s, s.decode_tok_s, finish_reason_name(s.finish_reason),
                                (s.error or b"").decode("utf-8", "replace"))

    @property
    def finish_reason(self) -> str:
        """The last turn's finish reason; "" while none has ended."""
        return self.stats.finish_reason

    @property
    def text(self) -> str:
        """The text generated in the current or last turn so far (stop strings excluded); what the model generated
        that is not UTF-8 reads as U+FFFD, as in stream()."""
        with self._lock:
            pointer, length = ctypes.c_void_p(), ctypes.c_size_t()
            check(_capi.lib().cellm_session_get_text(self._require(), ctypes.byref(pointer), ctypes.byref(length)))
            return ctypes.string_at(pointer, length.value).decode("utf-8", "replace") if length.value else ""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The function calls of the current or last turn (a session with tools), as OpenAI's message.tool_calls:
        [{"id", "type": "function", "function": {"name", "arguments": JSON text}}]; [] when none. Session.text is
        then the rest of the answer."""
        with self._lock:
            pointer, length = ctypes.c_void_p(), ctypes.c_size_t()
            check(_capi.lib().cellm_session_get_tool_calls(self._require(), ctypes.byref(pointer),
                                                           ctypes.byref(length)))
            return json.loads(ctypes.string_at(pointer, length.value)) if length.value else []

    @property
    def tokens(self) -> list[int]:
        """The token ids of the current or last turn (an ending end-of-generation token excluded)."""
        with self._lock:
            pointer, n = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
            check(_capi.lib().cellm_session_get_tokens(self._require(), ctypes.byref(pointer), ctypes.byref(n)))
            return pointer[: n.value] if n.value else []

    # -- lifetime --

    def close(self) -> None:
        """Cancels a running turn and frees the session; later calls raise ClosedError. Idempotent."""
        with self._lock, self._handle_lock:
            handle, self._handle = self._handle, None
            if handle is not None:
                _capi.lib().cellm_session_destroy(handle)

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
