"""Assemble PTX with NVIDIA's ptxas (CUDA 13's, on this machine and CI's), which catches invalid PTX
without a GPU; ``-v`` reports registers and spills."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

PTXAS = shutil.which("ptxas")

#: Marks a test that needs ptxas (it skips where ptxas is not on PATH).
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas not on PATH")


def ptxas(ptx: str, arch: str = "sm_90a", verbose: bool = False) -> str | None:
    """Assemble ``ptx`` for ``arch`` and assert that ptxas accepts it; return ptxas's report (with
    ``verbose``, ``-v``'s registers and spill counts), or None where ptxas is not on PATH."""
    if PTXAS is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        r = subprocess.run([PTXAS, f"-arch={arch}", *(["-v"] if verbose else []), str(src), "-o",
                            str(Path(d) / "k.cubin")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stderr
