"""Linking an AMDGPU relocatable object into a loadable code object (HSACO) with ``ld.lld``.

A code object is a shared ELF (AMDGPUUsage, "Code Object"): ``ld.lld -shared`` is how clang/hipcc
make one. kcompiler looks for the linker in this order (the first that exists wins):

1. ``$KC_LD_LLD`` — a path to an ``ld.lld`` (or a command line, e.g. ``"python -m ziglang ld.lld"``);
2. ROCm's own: ``$ROCM_PATH/llvm/bin/ld.lld`` (``ROCM_PATH`` defaults to ``/opt/rocm``);
3. ``ld.lld`` on ``PATH``;
4. the ``ziglang`` package (``pip install ziglang``), which carries an ``ld.lld``.
"""
from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache


class LinkerUnavailable(RuntimeError):
    """No ``ld.lld`` was found; the message says where kcompiler looked and how to get one."""


class LinkError(RuntimeError):
    """``ld.lld`` rejected the object; the message holds its output."""


@lru_cache(maxsize=None)
def find_ld_lld(env_value: str | None = None, rocm: str | None = None, path: str | None = None) -> list[str]:
    """The command line (a list) that runs ``ld.lld``, found as the module docstring says.

    The arguments are the environment's values (for the cache; :func:`ld_lld` passes them).
    Raises LinkerUnavailable."""
    if env_value:
        cmd = shlex.split(env_value)
        if cmd and (shutil.which(cmd[0]) or os.path.isfile(cmd[0])):
            return cmd
        raise LinkerUnavailable(f"KC_LD_LLD={env_value!r} does not name an executable")
    rocm_lld = os.path.join(rocm or "/opt/rocm", "llvm", "bin", "ld.lld")
    if os.access(rocm_lld, os.X_OK):
        return [rocm_lld]
    on_path = shutil.which("ld.lld", path=path)
    if on_path:
        return [on_path]
    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "ld.lld"]
    raise LinkerUnavailable(
        "no ld.lld to link the AMD code object: looked at $KC_LD_LLD, "
        f"{rocm_lld}, ld.lld on PATH and the ziglang package. Install one: "
        "`pip install ziglang` (or `pip install kcompiler[amd]`), or ROCm, or set KC_LD_LLD to an ld.lld")


def ld_lld() -> list[str]:
    """:func:`find_ld_lld` for the current environment."""
    return find_ld_lld(os.environ.get("KC_LD_LLD") or None, os.environ.get("ROCM_PATH") or None,
                       os.environ.get("PATH"))


def link_code_object(obj: bytes) -> bytes:
    """Link the relocatable AMDGPU ELF ``obj`` into a code object (bytes of a shared ELF).

    Raises LinkerUnavailable (no linker) or LinkError (the linker failed: its message is kept)."""
    cmd = ld_lld()
    with tempfile.TemporaryDirectory(prefix="kc-link-") as tmp:
        src, out = os.path.join(tmp, "kernel.o"), os.path.join(tmp, "kernel.hsaco")
        with open(src, "wb") as f:
            f.write(obj)
        r = subprocess.run([*cmd, "-shared", "--no-undefined", "-o", out, src],
                           capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(out):
            raise LinkError(f"ld.lld failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()}")
        with open(out, "rb") as f:
            return f.read()


__all__ = ["LinkerUnavailable", "LinkError", "find_ld_lld", "ld_lld", "link_code_object"]
