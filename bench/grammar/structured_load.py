#!/usr/bin/env python3
"""Structured output through an OpenAI-compatible server, cellm-host serve or llama.cpp's llama-server, side by
side (docs/benchmarks.md, "Structured output against llama-server").

  structured_load.py --url http://127.0.0.1:PORT --schemas DIR [--subset PREFIX] [--count N]
                     [--concurrency C] [--max-tokens T] [--temperature X] [--label NAME]

Sends N chat requests, C at a time, each with `response_format` {"type": "json_schema"} for one schema of the
shared jsonschemabench set (files whose name starts with PREFIX, in name order), asking the model for an
instance. Reports one JSON line: requests answered, refused with a 4xx (the server would not take the schema),
failed otherwise; of the answered, how many parse as JSON and how many validate against the schema (Python's
jsonschema), how many stopped at max_tokens (unfinished JSON, which cannot validate); completion tokens over the
wall time; median and p95 request time. Standard library and jsonschema only (the server tests' venv has it).
"""
import argparse
import concurrent.futures
import json
import os
import sys
import time
import urllib.error
import urllib.request

import jsonschema


def load(schemas, subset, count):
    names = sorted(n for n in os.listdir(schemas) if n.startswith(subset) and n.endswith(".json"))
    cases = []
    for name in names:
        with open(os.path.join(schemas, name)) as f:
            schema = json.load(f)["schema"]
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.exceptions.SchemaError:
            continue
        cases.append((name, schema))
        if len(cases) == count:
            break
    return cases


def served_model(url):
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as response:
        return json.load(response)["data"][0]["id"]


def ask(url, name, schema, args):
    body = {
        "model": args.model,
        "messages": [{"role": "user", "content": "Reply with one JSON value that fits this JSON schema:\n" +
                      json.dumps(schema)}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}},
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "seed": 1,
    }
    request = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as e:
        return {"status": "refused" if 400 <= e.code < 500 else "failed", "seconds": time.monotonic() - start,
                "error": e.read()[:200].decode(errors="replace")}
    except (urllib.error.URLError, OSError) as e:
        return {"status": "failed", "seconds": time.monotonic() - start, "error": str(e)}
    seconds = time.monotonic() - start
    choice = answer["choices"][0]
    text = choice["message"].get("content") or ""
    out = {"status": "answered", "seconds": seconds, "tokens": answer.get("usage", {}).get("completion_tokens", 0),
           "length": choice.get("finish_reason") == "length", "parses": False, "valid": False}
    try:
        value = json.loads(text)
        out["parses"] = True
        jsonschema.validate(value, schema)
        out["valid"] = True
    except (ValueError, jsonschema.exceptions.ValidationError):
        pass
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--schemas", required=True)
    p.add_argument("--subset", default="")
    p.add_argument("--count", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--label", default="")
    args = p.parse_args()
    cases = load(args.schemas, args.subset, args.count)
    if not cases:
        sys.exit(f"structured_load.py: no schema in {args.schemas} starts with '{args.subset}'")
    args.model = served_model(args.url.rstrip("/"))
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        results = list(pool.map(lambda c: ask(args.url.rstrip("/"), c[0], c[1], args), cases))
    wall = time.monotonic() - start
    answered = [r for r in results if r["status"] == "answered"]
    times = sorted(r["seconds"] for r in answered)
    pick = lambda q: round(times[min(len(times) - 1, int(q * len(times)))], 3) if times else None
    tokens = sum(r["tokens"] for r in answered)
    print(json.dumps({
        "label": args.label, "subset": args.subset, "requests": len(results), "answered": len(answered),
        "refused": sum(r["status"] == "refused" for r in results),
        "failed": sum(r["status"] == "failed" for r in results),
        "parses": sum(r["parses"] for r in answered), "valid": sum(r["valid"] for r in answered),
        "stopped_at_max_tokens": sum(r["length"] for r in answered),
        "completion_tokens": tokens, "wall_s": round(wall, 2), "tok_s": round(tokens / wall, 1),
        "median_s": pick(0.5), "p95_s": pick(0.95),
        "errors": sorted({r["error"][:120] for r in results if r["status"] != "answered"})[:3],
    }))


if __name__ == "__main__":
    main()
