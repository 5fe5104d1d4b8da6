"""create_chat_completion and create_completion: cellm sessions in the dict shapes of the OpenAI API, as
llama-cpp-python returns them.

Each call runs one turn on a session of its own, so calls from several threads are batched together. finish_reason
is OpenAI's: "stop" for the model's end of generation and for a stop string, "length" for max_tokens and for a full
context, "tool_calls" for an answer that calls functions. A stream whose turn Engine.close ended (from another
thread) ends with "cancelled", which OpenAI does not have; a call without stream raises ClosedError then. A turn
that failed raises GenerationError.

Function calling (chat, cellm.h 1.5): tools, tool_choice and parallel_tool_calls go to the session; the calls come
back as message.tool_calls (content None when the answer is only calls), or streamed as delta.tool_calls in
OpenAI's incremental form: a call's first chunk has its index, id, type, function.name and arguments "", the next
ones {index, function: {arguments: piece}}.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Iterator

from .session import SAMPLING_KEYS, Session, ToolCallDelta

FINISH_REASONS = {"eog": "stop", "stop": "stop", "length": "length", "context": "length", "cancelled": "cancelled",
                  "tool_calls": "tool_calls"}

# Chat keywords: a text completion takes them only at their "off" value (_NEUTRAL).
_TOOL_KEYS = frozenset({"tools", "tool_choice", "parallel_tool_calls"})

# llama-cpp-python keywords cellm has no counterpart for, with the value that means "not used": accepted at that
# value so that calls move over unchanged, refused otherwise.
_NEUTRAL = {
    "logprobs": (None, False),
    "top_logprobs": (None,),
    "echo": (False,),
    "suffix": (None,),
    "typical_p": (1.0,),
    "tfs_z": (1.0,),
    "mirostat_mode": (0,),
    "mirostat_tau": None,  # any value: unused while mirostat_mode is 0
    "mirostat_eta": None,
    "logits_processor": (None,),
    "stopping_criteria": (None,),
    "tools": (None, []),
    "tool_choice": (None,),
    "parallel_tool_calls": (None, True, False),
    "functions": (None, []),
    "function_call": (None,),
    "stream_options": (None,),
}


def _response_format_schema(value: Any) -> Any:
    """The JSON schema a response_format asks for: llama-cpp-python's {"type": "json_object", "schema": ...} and
    OpenAI's {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}; None for text."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return value.get("schema") or {"type": "object"}
    if kind == "json_schema":
        inner = value.get("json_schema")
        if not isinstance(inner, dict):
            raise ValueError('response_format json_schema needs "json_schema": {"name", "schema"}')
        return inner.get("schema") or {}
    raise ValueError(f"response_format type must be text, json_object or json_schema, not {kind!r}")


def _sampling(kwargs: dict[str, Any], chat: bool) -> dict[str, Any]:
    sampling = {}
    for key, value in kwargs.items():
        if key in SAMPLING_KEYS and (chat or key not in _TOOL_KEYS):
            sampling[key] = value
        elif key == "response_format":
            schema = _response_format_schema(value)
            if schema is not None:
                sampling["json_schema"] = schema
        elif key == "grammar":
            if value is not None and not isinstance(value, str):
                raise TypeError("grammar is GBNF text (llama.cpp's grammar format)")
            sampling["grammar"] = value
        elif key == "logit_bias":
            # OpenAI's keys are strings of token ids, llama-cpp-python's ints.
            sampling["logit_bias"] = {int(token): float(bias) for token, bias in (value or {}).items()}
        elif key in _NEUTRAL:
            allowed = _NEUTRAL[key]
            if allowed is not None and value not in allowed:
                raise NotImplementedError(f"cellm does not support {key}={value!r}")
        else:
            raise TypeError(f"unexpected keyword argument {key!r}")
    return sampling


def _usage(session: Session) -> dict[str, int]:
    stats = session.stats
    completion = len(session.tokens)
    return {"prompt_tokens": stats.prompt_tokens, "completion_tokens": completion,
            "total_tokens": stats.prompt_tokens + completion}


def _run(engine: Any, prompt: Any, images: Any,
         sampling: dict[str, Any]) -> tuple[str, list[dict[str, Any]], str, dict[str, int]]:
    """One turn: its text, its function calls, OpenAI's finish reason and usage."""
    with engine.session(**sampling) as session:
        session.submit(prompt, images=images)
        reason = session.wait()
        return session.text, session.tool_calls, FINISH_REASONS.get(reason, reason), _usage(session)


def _tool_call_delta(delta: ToolCallDelta, first: bool) -> dict[str, Any]:
    """A piece of a call in OpenAI's incremental form: the first one names the call, the next ones add to its
    arguments."""
    if first:
        return {"index": delta.index, "id": delta.id, "type": "function",
                "function": {"name": delta.name, "arguments": delta.arguments}}
    return {"index": delta.index, "function": {"arguments": delta.arguments}}


def _stream(engine: Any, prompt: Any, images: Any, sampling: dict[str, Any], first: dict | None,
            chunk) -> Iterator[dict[str, Any]]:
    """Chunks of one turn: `first` (if any), one per piece of text or of a function call, and a last one with the
    finish reason. The turn starts now, so a bad prompt raises here; closing the iterator early cancels it and
    frees the session."""
    session = engine.session(**sampling)
    try:
        pieces = session.events(prompt, images=images)
    except BaseException:
        session.close()
        raise

    def chunks() -> Iterator[dict[str, Any]]:
        try:
            if first is not None:
                yield first
            announced: set[int] = set()
            try:
                for piece in pieces:
                    if isinstance(piece, ToolCallDelta):
                        call = _tool_call_delta(piece, piece.index not in announced)
                        announced.add(piece.index)
                        yield chunk({"tool_calls": [call]}, "", None)
                    else:
                        yield chunk({"content": piece}, piece, None)
            finally:
                pieces.close()
            reason = session._done_reason
            yield chunk({}, "", FINISH_REASONS.get(reason, reason))
        finally:
            session.close()

    return chunks()


def chat(engine: Any, messages: list[dict[str, Any]], stream: bool, images: Any, model: str | None,
         kwargs: dict[str, Any]) -> dict[str, Any] | Iterator[dict[str, Any]]:
    sampling = _sampling(kwargs, chat=True)
    ident, created = f"chatcmpl-{uuid.uuid4()}", int(time.time())
    model = model if model is not None else engine.info.model_path

    if not stream:
        text, calls, reason, usage = _run(engine, list(messages), images, sampling)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message.update(content=text or None, tool_calls=calls)
        return {"id": ident, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reason}],
                "usage": usage}

    def chunk(delta: dict[str, Any], _text: str, reason: str | None) -> dict[str, Any]:
        return {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]}

    return _stream(engine, list(messages), images, sampling, chunk({"role": "assistant"}, "", None), chunk)


def complete(engine: Any, prompt: str | list[int], stream: bool, images: Any, model: str | None,
             kwargs: dict[str, Any]) -> dict[str, Any] | Iterator[dict[str, Any]]:
    sampling = _sampling(kwargs, chat=False)
    ident, created = f"cmpl-{uuid.uuid4()}", int(time.time())
    model = model if model is not None else engine.info.model_path
    if not isinstance(prompt, str):
        prompt = [int(t) for t in prompt]

    if not stream:
        text, _calls, reason, usage = _run(engine, prompt, images, sampling)
        return {"id": ident, "object": "text_completion", "created": created, "model": model,
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": reason}],
                "usage": usage}

    def chunk(_delta: dict[str, Any], text: str, reason: str | None) -> dict[str, Any]:
        return {"id": ident, "object": "text_completion", "created": created, "model": model,
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": reason}]}

    return _stream(engine, prompt, images, sampling, None, chunk)
