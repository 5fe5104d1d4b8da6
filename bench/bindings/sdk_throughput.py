"""The Python side of the binding-overhead benchmark: the work of bench/bindings/sdk_throughput.c (SESSIONS greedy
sessions on one engine, a prompt each, every piece of text received) through the cellm package, one Python thread
per session streaming its turn. One JSON line per repetition after a warm-up.

    python3 sdk_throughput.py MODEL SESSIONS TOKENS REPETITIONS
"""
import json
import sys
import threading
import time

import cellm


def main() -> int:
    if len(sys.argv) != 5:
        print("usage: sdk_throughput.py MODEL SESSIONS TOKENS REPETITIONS", file=sys.stderr)
        return 2
    model, sessions, tokens, repetitions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    with cellm.Engine(model=model, max_sessions=sessions) as engine:
        for rep in range(repetitions + 1):
            open_sessions = [engine.session(temperature=0, max_tokens=tokens) for _ in range(sessions)]
            characters = [0] * sessions

            def run(i: int) -> None:
                for piece in open_sessions[i].stream(f"Once upon a time, in village number {i}, there lived"):
                    characters[i] += len(piece)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(sessions)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - start
            generated = sum(s.stats.generated_tokens for s in open_sessions)
            for s in open_sessions:
                s.close()
            if rep > 0:
                print(json.dumps({"binding": "python", "sessions": sessions, "generated_tokens": generated,
                                  "seconds": round(seconds, 4), "tok_s": round(generated / seconds, 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
