"""python -m cellm ARGS: the cellm-host installed with the package, e.g.
python -m cellm run --model SmolLM2-135M-Instruct.Q4_1.gguf --prompt "Hi"."""

import os
import sys
from pathlib import Path

host = Path(__file__).resolve().parent / "_native" / "bin" / "cellm-host"
if not host.exists():
    sys.exit(f"cellm: {host} is not installed (pip install ./bindings/python installs it; a build tree has "
             "build/bin/cellm-host)")
os.execv(host, [str(host), *sys.argv[1:]])
