#!/usr/bin/env python3
"""Guest instructions per prompt token and per decoded token, cellm beside llama.cpp, under qemu-aarch64.

Each engine runs whole processes under qemu-aarch64 with the insn_count plugin (tools/qemu_count), one thread,
greedy decoding, and the per-token figures come from differences of three runs, so that loading, warm-up and
exit cancel:
    A = prompt P1 then N1 decode steps, B = prompt P2 then N1 steps, C = prompt P1 then N2 steps
    per prompt token  = (B - A) / (P2 - P1) / prefills_per_run
    per decoded token = (C - A) / (N2 - N1)
 - cellm:     cellm-host bench --prompt-tokens P --gen-tokens N --repetitions 1 --threads 1. bench first runs
              one warm-up (the same prompt, then 1 decode step), so each run prefills its prompt twice:
              prefills_per_run = 2; the warm-up's single decode step is the same in A and C.
 - llama.cpp: llama-bench -d P -p 0 -n N -r 1 -t 1 --no-warmup: a prefill of P tokens (the "depth") in one
              batch, then N one-token decode steps at positions P.., logits every step: prefills_per_run = 1.
Both decode at the same positions (P1+N1 .. P1+N2) over the same cache. What still differs: cellm's prompt
is English text and llama-bench's random token ids (compute does not depend on the ids), and cellm takes the
argmax of each step's logits (a vocabulary-sized scan, well under 1% of a step).

One thread: with more, idle workers spin or poll, and the spinning counts as instructions. The plugin reports
each guest thread's count; the table says if more than one thread ran over a million instructions (cellm's
engine starts a second thread that only waits: some thousand instructions).

llama.cpp picks its CPU kernels at run time (scripts/arm64/build_llamacpp.sh); the variant it loaded on each
CPU model is shown in the table.

    scripts/arm64/count_instructions.py OUT.md [--quick] [--cellm-build /tmp/b-arm] [--cpu cortex-a76 ...]
Needs: scripts/arm64/build_qemu_plugin.sh, build_llamacpp.sh, make_models.sh run first, and a cellm aarch64
build. Raw counts go to OUT.md.json, a row as soon as it is measured; --resume measures only the rows missing
there. The cellm programs are copied (into a folder of this run's) before the first run, so that a rebuild of
the build folder meanwhile changes no row.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("CELLM_CACHE", Path.home() / ".cache/cellm"))
MODELS = Path(os.environ.get("CELLM_MODELS", CACHE / "models"))
CPUS = ["cortex-a53", "cortex-a76", "max,sve=off"]
SMOL = "SmolLM2-135M-Instruct"
DEFAULT_MODELS = [MODELS / f"{SMOL}.Q4_1.gguf"] + [MODELS / "arm64" / f"{SMOL}.{t}.gguf" for t in ("Q4_0", "Q8_0", "Q4_K_M")] \
    + [MODELS / "gemma-3-270m-q4_k_m.gguf"]


def describe(model: Path):
    """(name, type, cellm manifest) of a model file."""
    name = model.name.lower()
    m = re.search(r"(q\d_k_[sml]|q\d_k|q\d_\d|f16|bf16|f32)", name)
    qtype = m.group(1).upper() if m else "?"
    if "gemma" in name:
        return "Gemma-3-270M", qtype, REPO / "config/gemma3-270m.toml"
    return "SmolLM2-135M", qtype, REPO / "config/smollm2-135m.toml"


def count(cpu, plugin, argv, timeout):
    """Guest instructions, busy guest threads, seconds and stderr of one process under qemu-aarch64 -cpu CPU."""
    env = {k: v for k, v in os.environ.items() if k not in ("QEMU_LD_PREFIX", "QEMU_CPU")}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "count"
        cmd = ["qemu-aarch64", "-cpu", cpu, "-plugin", f"{plugin},outfile={out}", *map(str, argv)]  # argv may start with -E
        start = time.monotonic()
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
        seconds = time.monotonic() - start
        if p.returncode != 0 or not out.exists():
            raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        lines = out.read_text().splitlines()
        fields = dict(kv.split("=") for kv in lines[0].split())
        per_thread = [int(line.split(":")[1]) for line in lines[1:]]
        busy = sum(1 for n in per_thread if n > 1_000_000)  # threads that did more than start and wait
        return int(fields["insns"]), busy, seconds, p.stderr


def snapshot_cellm(build, into):
    """Copies the cellm programs of a build folder, which may be rebuilt meanwhile, into a folder of this run's;
    returns the copy's bin folder and when its backend plugin was built."""
    src, dst = build / "bin", into / "bin"
    (dst / "plugins").mkdir(parents=True)
    for f in [src / "cellm-host", *src.glob("libcellm.so*"), *(src / "plugins").glob("cellm-*.so")]:
        shutil.copy2(f, dst / f.relative_to(src), follow_symlinks=True)
    built = time.strftime("%Y-%m-%d %H:%M", time.localtime((src / "plugins/cellm-openblas.so").stat().st_mtime))
    return dst, built


def engine_argv(engine, args, model, manifest, prompt, gen):
    if engine.startswith("cellm"):
        precision = engine.split(":")[1]
        # cellm-host's RUNPATH names the build folder: the guest's LD_LIBRARY_PATH, searched first, names the copy.
        return ["-E", f"LD_LIBRARY_PATH={args.cellm_bin}", args.cellm_bin / "cellm-host", "bench", "--manifest", manifest, "--model", model,
                "--backend", "openblas", "--threads", "1", "--precision", precision,
                "--prompt-tokens", prompt, "--gen-tokens", gen, "--repetitions", "1"]
    return [args.llamacpp_bin / "llama-bench", "-m", model, "-d", prompt, "-p", "0", "-n", gen,
            "-r", "1", "-t", "1", "--no-warmup"]


def measure(job, args):
    """The three runs of one (model, cpu, engine) and the per-token figures."""
    model, cpu, engine = job
    name, qtype, manifest = describe(model)
    runs = {"A": (args.p1, args.n1), "B": (args.p2, args.n1), "C": (args.p1, args.n2)}
    res, threads, secs, variant = {}, 1, 0.0, ""
    for key, (p, n) in runs.items():
        insns, vcpus, s, err = count(cpu, args.plugin, engine_argv(engine, args, model, manifest, p, n), args.timeout)
        res[key], threads, secs = insns, max(threads, vcpus), secs + s
        m = re.search(r"libggml-cpu-([\w.]+)\.so", err)
        variant = m.group(1) if m else variant
    prefills = 2 if engine.startswith("cellm") else 1
    row = {"model": name, "type": qtype, "file": str(model), "cpu": cpu, "engine": engine, "runs": res,
           "prompt": (res["B"] - res["A"]) / (args.p2 - args.p1) / prefills,
           "decode": (res["C"] - res["A"]) / (args.n2 - args.n1),
           "threads": threads, "seconds": secs, "variant": variant}
    print(f"{name} {qtype} {cpu} {engine}: {row['prompt']:.4g}/prompt token, {row['decode']:.4g}/decoded token "
          f"({secs:.0f} s)", file=sys.stderr, flush=True)
    return row


def table(rows, args):
    def mi(x):
        return f"{x / 1e6:.2f}"
    lines = [f"Guest instructions (millions) per token under qemu-aarch64 7.2, 1 thread, prompt {args.p1}->{args.p2}, "
             f"decode {args.n1}->{args.n2} steps after a {args.p1}-token prompt.",
             "",
             "| model | type | CPU model | engine | M instr / prompt token | M instr / decoded token "
             "| cellm/llama.cpp prompt | cellm/llama.cpp decode |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    llama = {(r["file"], r["cpu"]): r for r in rows if r["engine"] == "llama.cpp"}
    for r in rows:
        ref = llama.get((r["file"], r["cpu"]))
        if r["engine"] == "llama.cpp":
            engine = f"llama.cpp ({r['variant']})" if r["variant"] else "llama.cpp"
            ratios = ["", ""]
        else:
            engine = "cellm " + r["engine"].split(":")[1]
            ratios = [f"{r[k] / ref[k]:.2f}" if ref else "" for k in ("prompt", "decode")]
        if r["threads"] > 1:
            engine += f" ({r['threads']} threads!)"
        lines.append(f"| {r['model']} | {r['type']} | {r['cpu']} | {engine} | {mi(r['prompt'])} | {mi(r['decode'])} "
                     f"| {ratios[0]} | {ratios[1]} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("out", type=Path, help="markdown table to write")
    ap.add_argument("--cellm-build", type=Path, default=Path("/tmp/b-arm"), help="cellm aarch64 build folder")
    ap.add_argument("--llamacpp-bin", type=Path, default=CACHE / "llamacpp-arm64/bin")
    ap.add_argument("--plugin", type=Path, default=CACHE / "qemu-plugin/libinsn_count.so")
    ap.add_argument("--cpu", action="append", help=f"qemu -cpu model, repeatable (default: {' '.join(CPUS)})")
    ap.add_argument("--model", action="append", type=Path, help="GGUF file, repeatable (default: 5 files)")
    ap.add_argument("--precision", action="append", choices=["exact", "fast"],
                    help="cellm precision, repeatable (default: fast, as the shipped manifests)")
    ap.add_argument("--engine", action="append", choices=["cellm", "llama.cpp"], help="default: both")
    ap.add_argument("--quick", action="store_true", help="one model (SmolLM2 Q4_0) on one CPU (cortex-a76)")
    ap.add_argument("--p1", type=int, default=16)
    ap.add_argument("--p2", type=int, default=48)
    ap.add_argument("--n1", type=int, default=4)
    ap.add_argument("--n2", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=1, help="qemu processes at once (each one thread)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per process")
    ap.add_argument("--resume", action="store_true", help="keep the rows OUT.md.json holds for the same settings")
    args = ap.parse_args()

    cpus = args.cpu or (["cortex-a76"] if args.quick else CPUS)
    models = args.model or ([MODELS / "arm64" / f"{SMOL}.Q4_0.gguf"] if args.quick else DEFAULT_MODELS)
    engines = []
    if "cellm" in (args.engine or ["cellm"]):
        engines += [f"cellm:{p}" for p in (args.precision or ["fast"])]
    if "llama.cpp" in (args.engine or ["llama.cpp"]):
        engines.append("llama.cpp")
    needed = [args.plugin, *models]
    needed += [args.cellm_build / "bin/cellm-host"] if any(e.startswith("cellm") for e in engines) else []
    needed += [args.llamacpp_bin / "llama-bench"] if "llama.cpp" in engines else []
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        sys.exit("count_instructions.py: missing " + ", ".join(missing) + " (see the build scripts in scripts/arm64/)")

    results = Path(str(args.out) + ".json")
    settings = {"p1": args.p1, "p2": args.p2, "n1": args.n1, "n2": args.n2}
    with tempfile.TemporaryDirectory(prefix="cellm-arm64-", dir=CACHE) as snapshot:
        built = ""
        if any(e.startswith("cellm") for e in engines):
            args.cellm_bin, built = snapshot_cellm(args.cellm_build, Path(snapshot))
        settings["cellm_build"] = f"{args.cellm_build} (openblas plugin built {built})" if built else ""
        # Each row is saved as soon as it is measured, beside the saved rows of other models, CPUs or engines;
        # --resume reuses the saved rows of the same settings (for cellm, the same build).
        saved = {(r["file"], r["cpu"], r["engine"]): r
                 for r in (json.loads(results.read_text()) if args.resume and results.exists() else [])}
        reusable = {k for k, r in saved.items()
                    if all(r.get(name) == v for name, v in settings.items()
                           if name != "cellm_build" or r["engine"] != "llama.cpp")}
        jobs = [(m, c, e) for m in models for c in cpus for e in engines if (str(m), c, e) not in reusable]
        lock = threading.Lock()

        def run(job):
            row = {**measure(job, args), **settings}
            with lock:
                saved[(row["file"], row["cpu"], row["engine"])] = row
                results.write_text(json.dumps(list(saved.values()), indent=1))
            return row

        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(run, jobs))
        elapsed = time.monotonic() - start
    rows = [saved[(str(m), c, e)] for m in models for c in cpus for e in engines]
    text = table(rows, args) + f"\n{len(jobs) * 3} qemu runs, {elapsed / 60:.1f} min wall ({args.jobs} at once)"
    text += f"; cellm: {settings['cellm_build']}.\n" if settings["cellm_build"] else ".\n"
    args.out.write_text(text)
    print(text)

if __name__ == "__main__":
    main()
