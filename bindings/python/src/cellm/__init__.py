"""cellm: Python binding of libcellm (include/cellm/cellm.h), shaped like llama-cpp-python.

    import cellm
    with cellm.Engine(model="SmolLM2-135M-Instruct.Q4_1.gguf") as engine:
        reply = engine.create_chat_completion([{"role": "user", "content": "Hi"}], temperature=0, max_tokens=32)
        print(reply["choices"][0]["message"]["content"])

Engine opens a model (or a manifest); create_chat_completion / create_completion return OpenAI dicts, or chunks
with stream=True; Engine.session() gives a Session for multi-turn conversations, forks, cancel and statistics.
Errors raise CellmError (a subclass per cellm_result). See bindings/python/README.md.
"""

from ._capi import library_path, version
from .engine import Engine, EngineInfo, EngineStats
from .errors import (BusyError, CellmError, CellmTimeoutError, ClosedError, GenerationError, GrammarError,
                     InternalError, InvalidArgumentError, LoadError, ManifestError, PromptError, TooLongError)
from .session import Session, SessionStats, ToolCallDelta

__version__ = "0.1.0"

__all__ = [
    "Engine", "EngineInfo", "EngineStats", "Session", "SessionStats", "ToolCallDelta", "CellmError",
    "InvalidArgumentError", "ManifestError", "LoadError", "PromptError", "BusyError", "ClosedError",
    "CellmTimeoutError", "InternalError", "TooLongError", "GrammarError", "GenerationError", "library_path",
    "version",
]
