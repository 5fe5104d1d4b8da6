#!/usr/bin/env python3
"""cellm's Python binding and llama-cpp-python side by side: the same create_chat_completion calls, greedy, on the
same GGUF (SmolLM2-135M-Instruct Q4_1 by default), and the replies compared.

llama-cpp-python is built from its PyPI source distribution into a venv outside the repository (several minutes
on 2 cores); the cellm binding comes from this checkout, over a build's libcellm:

  python3 -m venv ~/.cache/cellm/venv-llama-cpp-python
  CMAKE_BUILD_PARALLEL_LEVEL=2 ~/.cache/cellm/venv-llama-cpp-python/bin/pip install --no-binary llama-cpp-python \
      llama-cpp-python==0.3.36
  ~/.cache/cellm/venv-llama-cpp-python/bin/python scripts/bindings/compare_llama_cpp_python.py --cellm-library build/bin

(or `pip install ./bindings/python` into that venv and leave --cellm-library out). Both run the model's own chat
template (tokenizer.chat_template) at temperature 0 with max_tokens each; the report gives, per conversation,
the prompt token counts (equal when both rendered the template alike) and where the replies first differ. Greedy
decoding follows the arg-max, so two engines whose logits differ in the last bits (other summation orders) may
pick another token where the two best are nearly tied; everything after such a point differs. Exit status 1 when
a reply differs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = Path.home() / ".cache/cellm/models/SmolLM2-135M-Instruct.Q4_1.gguf"

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "List three primary colors."}],
    [{"role": "user", "content": "What is 12 times 12?"},
     {"role": "assistant", "content": "12 times 12 is 144."},
     {"role": "user", "content": "And 13 times 13?"}],
    [{"role": "user", "content": "Repeat exactly: 🐱 猫 ねこ 😺"}],
]


def first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n if len(a) != len(b) else -1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--cellm-library", help="libcellm.so, or the folder holding it (sets CELLM_LIBRARY)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--backend", help="cellm backend (default: the fastest found)")
    parser.add_argument("--precision", choices=["exact", "fast"], help="cellm backend precision")
    args = parser.parse_args()

    if args.cellm_library:
        os.environ["CELLM_LIBRARY"] = str(Path(args.cellm_library).resolve())
    try:
        import cellm
    except ImportError:
        sys.path.insert(0, str(REPO / "bindings/python/src"))
        import cellm
    try:
        from llama_cpp import Llama, __version__ as llama_cpp_version
    except ImportError:
        print("llama-cpp-python is not installed in this interpreter; see this script's docstring", file=sys.stderr)
        return 2
    if not args.model.exists():
        print(f"{args.model} is missing (scripts/fetch_models.sh fetches it)", file=sys.stderr)
        return 2

    # The same model, context, threads and greedy settings on both sides. The calls are the same, word for word.
    engine = cellm.Engine(model=args.model, n_ctx=args.n_ctx, threads=args.threads, backend=args.backend,
                          precision=args.precision)
    llama = Llama(model_path=str(args.model), n_ctx=args.n_ctx, n_threads=args.threads, verbose=False)
    print(f"cellm {cellm.library_path()} ({engine.info.backend}, chat template {engine.info.chat_template}); "
          f"llama-cpp-python {llama_cpp_version}; {args.model.name}; max_tokens {args.max_tokens}\n")

    sampling = dict(temperature=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, max_tokens=args.max_tokens,
                    seed=0)
    differing = 0
    for messages in CONVERSATIONS:
        replies = {}
        for name, runner in (("cellm", engine), ("llama-cpp-python", llama)):
            start = time.monotonic()
            reply = runner.create_chat_completion(messages=messages, **sampling)
            replies[name] = (reply, time.monotonic() - start)
        (ours, our_s), (theirs, their_s) = replies["cellm"], replies["llama-cpp-python"]
        a = ours["choices"][0]["message"]["content"]
        b = theirs["choices"][0]["message"]["content"]
        at = first_difference(a, b)
        print(f"> {messages[-1]['content']}")
        print(f"  prompt tokens: cellm {ours['usage']['prompt_tokens']}, "
              f"llama-cpp-python {theirs['usage']['prompt_tokens']}; completion tokens: cellm "
              f"{ours['usage']['completion_tokens']} ({ours['choices'][0]['finish_reason']}, {our_s:.2f} s), "
              f"llama-cpp-python {theirs['usage']['completion_tokens']} "
              f"({theirs['choices'][0]['finish_reason']}, {their_s:.2f} s)")
        if at < 0:
            print(f"  same reply: {a!r}\n")
            continue
        differing += 1
        print(f"  replies differ from character {at}:\n    cellm:            {a!r}\n"
              f"    llama-cpp-python: {b!r}\n")
    print(f"{len(CONVERSATIONS) - differing} of {len(CONVERSATIONS)} replies the same")
    engine.close()
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
