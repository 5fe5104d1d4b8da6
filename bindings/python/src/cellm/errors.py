"""CellmError and one subclass per cellm_result, raised with cellm_last_error()'s message."""

from __future__ import annotations

from . import _capi


class CellmError(Exception):
    """A libcellm call failed. `code` is the cellm_result (an int), `name` its stable name ("CELLM_E_PROMPT"),
    and the message is cellm_last_error()'s line."""

    code = _capi.E_INTERNAL
    name = "CELLM_E_INTERNAL"

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code
            self.name = _NAMES.get(code, f"cellm_result {code}")


class InvalidArgumentError(CellmError, ValueError):
    """CELLM_E_INVALID_ARGUMENT: a value out of range (max_tokens 0, a negative temperature, ...)."""

    code, name = _capi.E_INVALID_ARGUMENT, "CELLM_E_INVALID_ARGUMENT"


class ManifestError(CellmError):
    """CELLM_E_MANIFEST: the manifest file or text does not parse or validate."""

    code, name = _capi.E_MANIFEST, "CELLM_E_MANIFEST"


class LoadError(CellmError):
    """CELLM_E_LOAD: plugins, model or backend could not be set up."""

    code, name = _capi.E_LOAD, "CELLM_E_LOAD"


class PromptError(CellmError):
    """CELLM_E_PROMPT: empty, a token outside the vocabulary, messages the template cannot render, bad images."""

    code, name = _capi.E_PROMPT, "CELLM_E_PROMPT"


class BusyError(CellmError):
    """CELLM_E_BUSY: the session is still generating its previous turn."""

    code, name = _capi.E_BUSY, "CELLM_E_BUSY"


class ClosedError(CellmError):
    """CELLM_E_CLOSED: the engine was closed (or, raised by the binding, the session was)."""

    code, name = _capi.E_CLOSED, "CELLM_E_CLOSED"


class CellmTimeoutError(CellmError, TimeoutError):
    """CELLM_E_TIMEOUT: a wait ran out of time; nothing is wrong with the session."""

    code, name = _capi.E_TIMEOUT, "CELLM_E_TIMEOUT"


class InternalError(CellmError):
    """CELLM_E_INTERNAL: anything else; the message says what."""


class TooLongError(CellmError):
    """CELLM_E_TOO_LONG: the prompt is longer than the context or the whole KV pool."""

    code, name = _capi.E_TOO_LONG, "CELLM_E_TOO_LONG"


class GrammarError(CellmError, ValueError):
    """CELLM_E_GRAMMAR: a grammar or JSON schema that does not parse, uses a keyword the engine cannot honour, or
    is too large; the message names the keyword or position."""

    code, name = _capi.E_GRAMMAR, "CELLM_E_GRAMMAR"


class GenerationError(CellmError):
    """A turn that started ended with finish reason "error"; the message is cellm_session_stats.error."""


_CLASSES = {
    cls.code: cls
    for cls in (InvalidArgumentError, ManifestError, LoadError, PromptError, BusyError, ClosedError,
                CellmTimeoutError, InternalError, TooLongError, GrammarError)
}
_NAMES = {code: cls.name for code, cls in _CLASSES.items()}


def check(result: int) -> None:
    """Raises the CellmError of a failed result, with this thread's cellm_last_error()."""
    if result == _capi.SUCCESS:
        return
    raw = _capi.lib().cellm_last_error()
    message = raw.decode("utf-8", "replace") if raw else ""
    raise _CLASSES.get(result, CellmError)(message or _NAMES.get(result, f"cellm_result {result}"), result)


def closed(what: str) -> ClosedError:
    return ClosedError(f"{what} is closed", _capi.E_CLOSED)
