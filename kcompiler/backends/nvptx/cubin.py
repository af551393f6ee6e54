"""PTX → cubin through the ``ptxas`` on PATH, compiled as a whole program (``-O3``, not ``-c``). Where
there is no ptxas, :class:`CubinUnavailable` says so and the runtime loads the PTX itself: the CUDA
driver's JIT compiles it, also as a whole program.

Not nvJitLink (cuda-python's ``cuda.bindings.nvjitlink``, which kcompiler used first until 2026-11-27):
it compiles PTX as a relocatable unit, as ``ptxas -c`` does, and there ptxas ignores ``setmaxnreg``
(its info C7504, "ignored to maintain compatibility across compilation units") and serialises every
``wgmma.mma_async`` (C7509, "due to the presence of Extern calls"): each HGMMA of a chain issued
alone and waited for (``WARPGROUP.DEPBAR`` after each). Measured on the H100 (nvJitLink 13.0, ptxas
13.0, benchmarks/RESULTS.md 2026-11-27): the Hopper prefill's cubin had 16 HGMMA and 16 DEPBAR a tile
through nvJitLink, 2 DEPBAR through ptxas; Nsight Compute put the tensor pipe at 53 % of the
prefill's cycles and 24 % of the 128-head MLA decode's."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile


class CubinUnavailable(RuntimeError):
    """No ptxas on PATH to assemble PTX (the runtime then loads the PTX through the driver's JIT)."""


#: The options of every assembly: the target and full optimisation, a whole program (no ``-c``: a
#: relocatable unit loses setmaxnreg and wgmma pipelining; module docstring).
PTXAS_OPTIONS = ("-O3",)


def _ptxas(ptx: str, arch: str) -> bytes:
    exe = shutil.which("ptxas")
    if exe is None:
        raise CubinUnavailable("ptxas not found on PATH")
    with tempfile.TemporaryDirectory(prefix="kc-ptxas-") as d:
        src, out = os.path.join(d, "kernel.ptx"), os.path.join(d, "kernel.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([exe, f"-arch={arch}", *PTXAS_OPTIONS, src, "-o", out], capture_output=True, text=True)
        if r.returncode != 0:
            # Invalid PTX from kcompiler is a compiler bug, not a user error: say so plainly.
            raise RuntimeError(f"ptxas rejected the PTX kcompiler generated (a kcompiler bug):\n{r.stderr}")
        with open(out, "rb") as f:
            return f.read()


def assemble(ptx: str, arch: str) -> bytes:
    """Assemble ``ptx`` for ``arch`` (e.g. 'sm_90a') into a cubin with the ptxas on PATH, as a whole
    program. Raises CubinUnavailable when there is no ptxas (the caller keeps the PTX for the driver's
    JIT), RuntimeError when ptxas rejects the PTX (a kcompiler bug)."""
    return _ptxas(ptx, arch)
