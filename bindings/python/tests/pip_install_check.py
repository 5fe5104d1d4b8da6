"""ctest python_pip: `pip install ./bindings/python` into a fresh venv, then one generation with the installed
package alone (no CELLM_LIBRARY, no PYTHONPATH: its own libcellm and plugins), and the same prompt through the
cellm-host installed beside it (python -m cellm).

  pip_install_check.py --source bindings/python --work DIR --model TINY.gguf

scikit-build-core comes from PyPI (pip's build isolation). Its CMake build directory is DIR/build, kept between
runs, so a rerun builds only what changed; the compiler goes through ccache when it is installed. The build uses
$CMAKE_BUILD_PARALLEL_LEVEL jobs (2 when unset).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

SMOKE = r'''
import json, subprocess, sys
from pathlib import Path
import cellm
model = sys.argv[1]
library = Path(cellm.library_path()).resolve()
package = Path(cellm.__file__).resolve().parent
assert package / "_native" / "lib" in library.parents or library.parent == package / "_native" / "lib", library
manifest = f'[model]\npath = "{model}"\n[backend]\nname = "scalar"\nthreads = 1\n[context]\nlength = 128\n'
with cellm.Engine(manifest_text=manifest) as engine:
    reply = engine.create_completion("the cat sat", temperature=0, max_tokens=8)
    with engine.session(temperature=0, max_tokens=8) as session:
        session.generate("the cat sat")
        tokens = session.tokens
print("installed package:", package)
print("libcellm:", library, "| reply:", json.dumps(reply["choices"][0]))
Path("smoke.toml").write_text(manifest)
out = subprocess.run([sys.executable, "-m", "cellm", "run", "--manifest", "smoke.toml", "--prompt", "the cat sat",
                      "--raw", "--temperature", "0", "--max-tokens", "8", "--json"],
                     capture_output=True, text=True, check=True)
assert json.loads(out.stdout)["tokens"] == tokens, (out.stdout, tokens)
print("installed cellm-host agrees:", tokens)
'''


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True, type=Path)
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    venv = work / "venv"

    env = {k: v for k, v in os.environ.items() if k not in ("CELLM_LIBRARY", "CELLM_PLUGIN_PATH", "PYTHONPATH")}
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)

    start = time.monotonic()
    log = work / "pip.log"
    with log.open("w") as out:
        pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-cache-dir", "-v",
                              f"--config-settings=build-dir={work / 'build'}", str(args.source.resolve())],
                             stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work)
    seconds = time.monotonic() - start
    if pip.returncode != 0:
        print(log.read_text()[-8000:])
        print(f"FAIL: pip install exited {pip.returncode} after {seconds:.0f} s (log: {log})")
        return 1
    print(f"pip install ./bindings/python: {seconds:.1f} s (log: {log})")

    smoke = subprocess.run([str(venv / "bin" / "python"), "-c", SMOKE, str(Path(args.model).resolve())],
                           env=env, cwd=work)
    if smoke.returncode != 0:
        print("FAIL: the installed package did not generate")
        return 1
    print("PASS python_pip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
