"""include/cellm/cellm.h as ctypes declarations, and the loading of libcellm.

A direct mapping of the header, nothing more: every struct is laid out as cellm.h declares it (struct_size
first), every function gets its argument and result types. The Pythonic layer (engine.py, session.py) is the only
user. ctypes.CDLL releases the GIL during every foreign call, so a thread waiting in cellm_session_poll lets the
others run.

Which libcellm: $CELLM_LIBRARY (the file, or the folder holding it) when set, else the copy installed inside
this package (cellm/_native/lib, laid out as `cmake --install` lays out a prefix, so libcellm finds its plugins in
cellm/_native/lib/cellm/plugins), else the system's (ctypes.util.find_library).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

# ---- Results, finish reasons, events ------------------------------------------------------------------------

SUCCESS = 0
E_INVALID_ARGUMENT = 1
E_MANIFEST = 2
E_LOAD = 3
E_PROMPT = 4
E_BUSY = 5
E_CLOSED = 6
E_TIMEOUT = 7
E_INTERNAL = 8
E_TOO_LONG = 9
E_GRAMMAR = 10  # since 1.4

FINISH_NONE = 0
FINISH_EOG = 1
FINISH_STOP = 2
FINISH_LENGTH = 3
FINISH_CONTEXT = 4
FINISH_CANCELLED = 5
FINISH_ERROR = 6
FINISH_TOOL_CALLS = 7

EVENT_TEXT = 1
EVENT_DONE = 2
EVENT_TOOL_CALL = 3

# ---- Structs --------------------------------------------------------------------------------------------------


class cellm_engine_options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("manifest_path", ctypes.c_char_p),
        ("manifest_text", ctypes.c_char_p),
        ("model_path", ctypes.c_char_p),
        ("backend", ctypes.c_char_p),
        ("threads", ctypes.c_int32),
        ("context_length", ctypes.c_int32),
        ("max_sessions", ctypes.c_int32),
        ("plugin_path", ctypes.c_char_p),
        ("mmproj_path", ctypes.c_char_p),  # since 1.1
        ("precision", ctypes.c_char_p),  # since 1.2
        ("kv_type", ctypes.c_char_p),  # since 1.6
        ("memory_budget_mib", ctypes.c_int32),  # since 1.6
    ]


class cellm_engine_info(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("model_name", ctypes.c_char_p),
        ("model_path", ctypes.c_char_p),
        ("arch", ctypes.c_char_p),
        ("backend", ctypes.c_char_p),
        ("chat_template", ctypes.c_char_p),
        ("n_vocab", ctypes.c_int32),
        ("context_length", ctypes.c_int32),
        ("max_sessions", ctypes.c_int32),
        ("kv_blocks", ctypes.c_int32),
        ("kv_block_size", ctypes.c_int32),
        ("kv_bytes_per_token", ctypes.c_int64),
        ("model_has_chat_template", ctypes.c_int32),
        ("model_takes_images", ctypes.c_int32),  # since 1.1
        ("weights_bytes", ctypes.c_int64),  # since 1.6
        ("scratch_bytes", ctypes.c_int64),
        ("kv_pool_bytes", ctypes.c_int64),
    ]


class cellm_engine_stats(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("sessions", ctypes.c_int32),
        ("running", ctypes.c_int32),
        ("waiting", ctypes.c_int32),
        ("kv_blocks", ctypes.c_int32),
        ("kv_blocks_used", ctypes.c_int32),
        ("kv_blocks_free", ctypes.c_int32),
        ("prefix_hit_tokens", ctypes.c_int64),
        ("steps", ctypes.c_int64),
        ("batched_tokens", ctypes.c_int64),
        ("preemptions", ctypes.c_int64),
        ("copied_blocks", ctypes.c_int64),
        ("kv_bytes_committed", ctypes.c_int64),  # since 1.6
    ]


class cellm_event(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("kind", ctypes.c_int),  # cellm_event_kind
        ("text", ctypes.c_void_p),  # read with text_len: ctypes.string_at, never as a C string
        ("text_len", ctypes.c_size_t),
        ("generated_tokens", ctypes.c_int32),
        ("finish_reason", ctypes.c_int),  # cellm_finish_reason
        # Since 1.5.
        ("tool_call_index", ctypes.c_int32),
        ("tool_call_id", ctypes.c_char_p),
        ("tool_name", ctypes.c_char_p),
    ]


# The event callback type. The binding never installs one (it would take the GIL on the scheduler thread); the
# field is declared so that the struct has the header's layout.
cellm_event_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(cellm_event), ctypes.c_void_p)


class cellm_session_options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("repeat_penalty", ctypes.c_float),
        ("repeat_last_n", ctypes.c_int32),
        ("frequency_penalty", ctypes.c_float),
        ("presence_penalty", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("max_tokens", ctypes.c_int32),
        ("stop", ctypes.POINTER(ctypes.c_char_p)),
        ("n_stop", ctypes.c_size_t),
        ("priority", ctypes.c_int32),
        ("on_event", cellm_event_fn),
        ("user_data", ctypes.c_void_p),
        # Since 1.4.
        ("grammar", ctypes.c_char_p),
        ("json_schema", ctypes.c_char_p),
        ("logit_bias", ctypes.c_void_p),  # cellm_logit_bias*
        ("n_logit_bias", ctypes.c_size_t),
        ("logprobs", ctypes.c_int32),
        ("top_logprobs", ctypes.c_int32),
        # Since 1.5.
        ("tools", ctypes.c_char_p),
        ("tool_choice", ctypes.c_char_p),
        ("parallel_tool_calls", ctypes.c_int32),
        ("chat_template_kwargs", ctypes.c_char_p),
    ]


class cellm_logit_bias(ctypes.Structure):
    _fields_ = [("token", ctypes.c_int32), ("bias", ctypes.c_float)]


class cellm_logprob(ctypes.Structure):
    _fields_ = [("token", ctypes.c_int32), ("logprob", ctypes.c_float)]


class cellm_session_stats(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("busy", ctypes.c_int32),
        ("prompt_tokens", ctypes.c_int32),
        ("cached_tokens", ctypes.c_int32),
        ("generated_tokens", ctypes.c_int32),
        ("preemptions", ctypes.c_int32),
        ("ttft_ms", ctypes.c_double),
        ("prefill_tok_s", ctypes.c_double),
        ("decode_tok_s", ctypes.c_double),
        ("finish_reason", ctypes.c_int),
        ("error", ctypes.c_char_p),
    ]


class cellm_message(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class cellm_image(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


# ---- Functions ------------------------------------------------------------------------------------------------

_p = ctypes.POINTER
_handle = ctypes.c_void_p  # cellm_engine* and cellm_session*: opaque
_result = ctypes.c_int  # cellm_result

_PROTOTYPES = {
    "cellm_last_error": (ctypes.c_char_p, []),
    "cellm_result_name": (ctypes.c_char_p, [ctypes.c_int]),
    "cellm_version": (None, [_p(ctypes.c_int32), _p(ctypes.c_int32)]),
    "cellm_engine_options_init_size": (None, [_p(cellm_engine_options), ctypes.c_size_t]),
    "cellm_engine_open": (_result, [_p(cellm_engine_options), _p(_handle)]),
    "cellm_engine_close": (None, [_handle]),
    "cellm_engine_get_info": (_result, [_handle, _p(cellm_engine_info)]),
    "cellm_engine_get_stats": (_result, [_handle, _p(cellm_engine_stats)]),
    "cellm_engine_tokenize": (
        _result,
        [_handle, ctypes.c_char_p, ctypes.c_int32, _p(ctypes.c_int32), ctypes.c_size_t, _p(ctypes.c_size_t)],
    ),
    "cellm_engine_detokenize": (
        _result,
        [_handle, _p(ctypes.c_int32), ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, _p(ctypes.c_size_t)],
    ),
    "cellm_finish_reason_name": (ctypes.c_char_p, [ctypes.c_int]),
    "cellm_session_options_init_size": (_result, [_handle, _p(cellm_session_options), ctypes.c_size_t]),
    "cellm_session_create": (_result, [_handle, _p(cellm_session_options), _p(_handle)]),
    "cellm_session_configure": (_result, [_handle, _p(cellm_session_options)]),
    "cellm_session_fork": (_result, [_handle, _p(_handle)]),
    "cellm_session_submit_text": (_result, [_handle, ctypes.c_char_p]),
    "cellm_session_submit_chat": (_result, [_handle, _p(cellm_message), ctypes.c_size_t]),
    "cellm_session_submit_chat_json": (_result, [_handle, ctypes.c_char_p]),
    "cellm_session_submit_tokens": (_result, [_handle, _p(ctypes.c_int32), ctypes.c_size_t]),
    "cellm_session_submit_text_images": (_result, [_handle, ctypes.c_char_p, _p(cellm_image), ctypes.c_size_t]),
    "cellm_session_submit_chat_images": (
        _result,
        [_handle, _p(cellm_message), ctypes.c_size_t, _p(cellm_image), ctypes.c_size_t],
    ),
    "cellm_session_poll": (_result, [_handle, ctypes.c_int32, _p(cellm_event)]),
    "cellm_session_wait": (_result, [_handle, ctypes.c_int32]),
    "cellm_session_cancel": (_result, [_handle]),
    "cellm_session_get_stats": (_result, [_handle, _p(cellm_session_stats)]),
    "cellm_session_get_text": (_result, [_handle, _p(ctypes.c_void_p), _p(ctypes.c_size_t)]),
    "cellm_session_get_tool_calls": (_result, [_handle, _p(ctypes.c_void_p), _p(ctypes.c_size_t)]),
    "cellm_session_get_tokens": (_result, [_handle, _p(_p(ctypes.c_int32)), _p(ctypes.c_size_t)]),
    "cellm_session_get_logprobs": (
        _result,
        [_handle, _p(_p(cellm_logprob)), _p(ctypes.c_size_t), _p(ctypes.c_size_t)],
    ),
    "cellm_session_destroy": (None, [_handle]),
}

# ---- Loading --------------------------------------------------------------------------------------------------

_SONAME = "libcellm.so.1"
_PACKAGED = Path(__file__).resolve().parent / "_native" / "lib"

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def library_path() -> str:
    """The libcellm file this process loads (or would load)."""
    env = os.environ.get("CELLM_LIBRARY")
    if env:
        path = Path(env)
        if path.is_dir():
            for name in (_SONAME, "libcellm.so"):
                if (path / name).exists():
                    return str(path / name)
            raise OSError(f"CELLM_LIBRARY={env}: no {_SONAME} in that folder")
        return env
    for name in (_SONAME, "libcellm.so"):
        if (_PACKAGED / name).exists():
            return str(_PACKAGED / name)
    found = ctypes.util.find_library("cellm")
    if found:
        return found
    raise OSError(
        "libcellm not found: install the package with `pip install ./bindings/python` from the cellm repository, "
        "or point CELLM_LIBRARY at a build's libcellm.so (build/bin/libcellm.so)"
    )


def lib() -> ctypes.CDLL:
    """libcellm with every function declared; loaded on first use."""
    global _lib
    with _lock:
        if _lib is None:
            loaded = ctypes.CDLL(library_path())
            for name, (restype, argtypes) in _PROTOTYPES.items():
                function = getattr(loaded, name)
                function.restype = restype
                function.argtypes = argtypes
            major, minor = ctypes.c_int32(), ctypes.c_int32()
            loaded.cellm_version(ctypes.byref(major), ctypes.byref(minor))
            if major.value != 1 or minor.value < 2:
                raise OSError(f"{library_path()} is libcellm {major.value}.{minor.value}; this binding needs 1.x, "
                              "x >= 2")
            _lib = loaded
        return _lib


def version() -> tuple[int, int]:
    """libcellm's SDK version (major, minor)."""
    major, minor = ctypes.c_int32(), ctypes.c_int32()
    lib().cellm_version(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value
