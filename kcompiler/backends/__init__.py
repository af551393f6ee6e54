"""Backends: the shared LLVM lowering (``llvm/``) and one folder per target.

:func:`get_target` turns the names users write (``nvptx``, ``cuda``, ``cpu``, ``hip``...) into a
:class:`~kcompiler.backends.target.Target`.
"""
from __future__ import annotations

import ctypes
import importlib.util
import sys
from typing import Any

from .target import TARGET_ALIASES, CompileOptions, Target

#: The NVIDIA chips kcompiler compiles for (PTX ``.target``). sm_90a enables wgmma and setmaxnreg.
NVPTX_ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
DEFAULT_NVPTX_ARCH = "sm_90"
#: The AMD chips: CDNA (wave64) and RDNA (wave32).
AMDGCN_ARCHS = ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201")
DEFAULT_AMDGCN_ARCH = "gfx942"


def canonical_target(name: str) -> str:
    """The canonical target name ('nvptx', 'amdgcn', 'cpu') of a name or alias ('cuda', 'hip').

    Raises ValueError listing the names accepted."""
    try:
        return TARGET_ALIASES[name.lower()]
    except (KeyError, AttributeError):
        known = ", ".join(sorted(TARGET_ALIASES))
        raise ValueError(f"unknown target {name!r}; expected one of: {known}") from None


def _cuda_driver_loadable() -> bool:
    """Whether the CUDA driver library can be loaded (always assumed off Linux). Without it there is
    no GPU to ask, and the answer costs a failed dlopen instead of importing cuda-python and numpy
    (a warm ``kc compile`` must start fast)."""
    if not sys.platform.startswith("linux"):
        return True
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def default_arch(target: str) -> str:
    """The arch used when none is given: the present GPU's (if any), else the target's default."""
    target = canonical_target(target)
    if target == "nvptx":
        if not _cuda_driver_loadable():
            return DEFAULT_NVPTX_ARCH
        from ..runtime.cuda import detected_arch  # lazy: imports cuda-python only when asked

        return detected_arch() or DEFAULT_NVPTX_ARCH
    if target == "cpu":
        return "native"
    if importlib.util.find_spec("hip") is None:  # no hip-python: no AMD GPU to ask
        return DEFAULT_AMDGCN_ARCH
    try:
        from ..runtime.hip import detected_arch as hip_arch  # lazy: hip-python only when asked
    except ImportError:
        return DEFAULT_AMDGCN_ARCH
    return hip_arch() or DEFAULT_AMDGCN_ARCH


def get_target(name: str, arch: str | None = None, **opts: Any) -> Target:
    """A Target for ``name`` (an alias is resolved) and ``arch``.

    nvptx: ``arch`` in :data:`NVPTX_ARCHS`, default the GPU's own (``sm_90a`` on a Hopper chip) or
    ``sm_90``. cpu: the host (``arch`` ignored unless the CPU target gives it a meaning; ``opts`` go to
    CpuTarget, e.g. ``warp_size``). amdgcn: ``arch`` in :data:`AMDGCN_ARCHS`, default the AMD GPU's own
    or ``gfx942``.
    Raises ValueError for an unknown target or arch."""
    target = canonical_target(name)
    if target == "nvptx":
        arch = arch or default_arch("nvptx")
        if arch not in NVPTX_ARCHS:
            raise ValueError(f"unknown NVIDIA arch {arch!r}; expected one of: {', '.join(NVPTX_ARCHS)}")
        from .nvptx.target import NvptxTarget

        return NvptxTarget(arch, **opts)
    if target == "cpu":
        from .cpu import CpuTarget

        return CpuTarget(arch=arch or None, **opts)
    arch = arch or default_arch("amdgcn")
    if arch not in AMDGCN_ARCHS:
        raise ValueError(f"unknown AMD arch {arch!r}; expected one of: {', '.join(AMDGCN_ARCHS)}")
    from .amdgcn.target import AmdgcnTarget

    return AmdgcnTarget(arch, **opts)


__all__ = ["get_target", "canonical_target", "default_arch", "NVPTX_ARCHS", "DEFAULT_NVPTX_ARCH",
           "AMDGCN_ARCHS", "DEFAULT_AMDGCN_ARCH",
           "TARGET_ALIASES", "CompileOptions", "Target"]
