"""Assemble PTX with NVIDIA's ptxas (CUDA 13's, on this machine and CI's), which catches invalid PTX
without a GPU; ``-v`` reports registers and spills."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

PTXAS = shutil.which("ptxas")

#: Marks a test that needs ptxas (it skips where ptxas is not on PATH).
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas not on PATH")


def ptxas(ptx: str, arch: str = "sm_90a", verbose: bool = False, extra: list[str] | None = None) -> str | None:
    """Assemble ``ptx`` for ``arch`` (with ``extra`` options) and assert that ptxas accepts it; return
    ptxas's report (with ``verbose``, ``-v``'s registers and spill counts), or None where ptxas is not
    on PATH."""
    if PTXAS is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        r = subprocess.run([PTXAS, f"-arch={arch}", *(["-v"] if verbose else []), *(extra or []), str(src), "-o",
                            str(Path(d) / "k.cubin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stderr


def _pip_nvdisasm() -> str | None:
    """The nvdisasm of pip's nvidia-cuda-nvdisasm (the test extra's; nvidia/cu*/bin/nvdisasm in the
    ``nvidia`` namespace package), the newest CUDA's where several are installed; None without it."""
    try:
        import nvidia
    except ImportError:
        return None
    found = sorted(p for root in getattr(nvidia, "__path__", []) for p in Path(root).glob("cu*/bin/nvdisasm"))
    return str(found[-1]) if found else None


#: NVIDIA's disassembler: $KC_NVDISASM, else PATH's nvdisasm (CUDA's), else pip's nvidia-cuda-nvdisasm
NVDISASM = os.environ.get("KC_NVDISASM") or shutil.which("nvdisasm") or _pip_nvdisasm()

#: Marks a test that reads SASS (it skips where neither ptxas nor nvdisasm is found).
needs_nvdisasm = pytest.mark.skipif(PTXAS is None or NVDISASM is None,
                                    reason="ptxas or nvdisasm not found ($KC_NVDISASM, PATH)")


def sass(ptx: str, arch: str = "sm_90a") -> list[str]:
    """The SASS instructions of ``ptx`` assembled for ``arch`` (ptxas, then nvdisasm), one string each
    in program order (predicate included, without addresses and ';'); ``.L_x_N:`` labels kept."""
    with tempfile.TemporaryDirectory() as d:
        src, cubin = Path(d) / "k.ptx", Path(d) / "k.cubin"
        src.write_text(ptx)
        subprocess.run([PTXAS, f"-arch={arch}", str(src), "-o", str(cubin)], check=True, capture_output=True)
        text = subprocess.run([NVDISASM, "-c", str(cubin)], check=True, capture_output=True, text=True).stdout
    out = []
    for line in text.splitlines():
        m = re.match(r"^(\.L_x_\d+):", line) or re.search(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m:
            out.append(m.group(1) + (":" if line.startswith(".L") else ""))
    return out
