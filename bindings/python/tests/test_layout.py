"""The ctypes structs have cellm.h's layout: a C program built against the header prints every struct's size and
every field's offset, and _capi's declarations must agree (skipped without a C compiler)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest

from cellm import _capi
from conftest import REPO

STRUCTS = ["cellm_engine_options", "cellm_engine_info", "cellm_engine_stats", "cellm_event", "cellm_session_options",
           "cellm_session_stats", "cellm_message", "cellm_image"]


def test_structs_match_the_header(tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler")
    lines = ['#include <cellm/cellm.h>', '#include <stddef.h>', '#include <stdio.h>', 'int main(void) {']
    for name in STRUCTS:
        lines.append(f'printf("{name} sizeof() %zu\\n", sizeof({name}));')
        for field, _ in getattr(_capi, name)._fields_:
            lines.append(f'printf("{name} {field} %zu\\n", offsetof({name}, {field}));')
    lines += ["return 0;", "}"]
    source = tmp_path / "layout.c"
    source.write_text("\n".join(lines) + "\n")
    subprocess.run([compiler, "-std=c99", f"-I{REPO / 'include'}", str(source), "-o", str(tmp_path / "layout")],
                   check=True)
    printed = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout
    for line in printed.splitlines():
        name, field, value = line.split()
        struct = getattr(_capi, name)
        got = ctypes.sizeof(struct) if field == "sizeof()" else getattr(struct, field).offset
        assert got == int(value), f"{name}.{field}: ctypes {got}, cellm.h {value}"
