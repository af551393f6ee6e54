"""PTX → cubin: through nvJitLink (cuda-python's ``cuda.bindings.nvjitlink``) when the library is
present, else through the ``ptxas`` on PATH. Where neither exists, :class:`CubinUnavailable` says so
and the runtime loads the PTX itself (the driver's JIT)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile


class CubinUnavailable(RuntimeError):
    """Neither nvJitLink nor ptxas is available to assemble PTX."""


def _nvjitlink(ptx: str, arch: str) -> bytes:
    from cuda.bindings import nvjitlink

    handle = nvjitlink.create(2, [f"-arch={arch}", "-O3"])
    try:
        data = ptx.encode()
        nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
        nvjitlink.complete(handle)
        size = nvjitlink.get_linked_cubin_size(handle)
        buf = bytearray(size)
        nvjitlink.get_linked_cubin(handle, buf)
        return bytes(buf)
    finally:
        nvjitlink.destroy(handle)


def _ptxas(ptx: str, arch: str) -> bytes:
    exe = shutil.which("ptxas")
    if exe is None:
        raise CubinUnavailable("ptxas not found on PATH")
    with tempfile.TemporaryDirectory(prefix="kc-ptxas-") as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([exe, f"-arch={arch}", "-O3", src, "-o", out], capture_output=True, text=True)
        if r.returncode != 0:
            # Invalid PTX from kcompiler is a compiler bug, not a user error: say so plainly.
            raise RuntimeError(f"ptxas rejected the PTX kcompiler generated (a kcompiler bug):\n{r.stderr}")
        with open(out, "rb") as f:
            return f.read()


def assemble(ptx: str, arch: str) -> bytes:
    """Assemble ``ptx`` for ``arch`` (e.g. 'sm_90a') into a cubin. Raises CubinUnavailable when no
    assembler exists here."""
    # nvJitLink first: it is in-process (no temporary files, no subprocess) where the library exists.
    try:
        return _nvjitlink(ptx, arch)
    except Exception:
        if shutil.which("ptxas"):
            return _ptxas(ptx, arch)
        raise CubinUnavailable("neither nvJitLink nor ptxas is available to assemble PTX")
    try:
        return _nvjitlink(ptx, arch)
    except ImportError as e:
        raise CubinUnavailable("neither ptxas nor nvJitLink is available") from e
    except Exception as e:  # the library is missing at run time (cuda-python loads it lazily)
        raise CubinUnavailable(f"nvJitLink failed: {e}") from e
