"""The AMD target (``amdgcn``, alias ``hip``): see target.py; link.py makes the code object. Exports
the :data:`BACKEND` record; importing this package loads neither llvmlite nor hip-python (the
target's classes are imported at first use)."""
from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from ..registry import Backend, load_object
from .archs import ARCHS


def detect_arch() -> str | None:
    """The processor of HIP device 0 ('gfx942'), or None without hip-python, ROCm or a GPU."""
    if importlib.util.find_spec("hip") is None:  # no hip-python: no AMD GPU to ask
        return None
    try:
        # By path: the runtime is a later stage, and importing it loads hip-python.
        return load_object("kcompiler.runtime.hip:detected_arch")()
    except ImportError:
        return None


#: The AMD target's record (see kcompiler.backends.registry.Backend).
BACKEND = Backend(
    name="amdgcn", vendor="AMD", aliases=("hip",),
    target="kcompiler.backends.amdgcn.target:AmdgcnTarget",
    archs={arch: features for arch, (_, features) in ARCHS.items()}, default_arch="gfx942",
    detect_arch=detect_arch, device="kcompiler.runtime.hip:HipDevice",
    binary_kind="hsaco", binary_suffixes=(".hsaco", ".co"), asm_kind="AMDGCN assembly", asm_suffixes=(".s",),
    intrinsics="kcompiler.backends.amdgcn.intrinsics", builtins="kcompiler.backends.amdgcn.builtins:BUILTINS",
)

#: Names re-exported from the modules that load llvmlite, imported at first use.
_LAZY = {"AmdgcnTarget": ".target", "CODE_OBJECT_VERSION": ".target", "LinkerUnavailable": ".link",
         "LinkError": ".link"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AmdgcnTarget", "ARCHS", "BACKEND", "CODE_OBJECT_VERSION", "LinkerUnavailable", "LinkError",
           "detect_arch"]
