"""The host CPU target: GPU kernels compiled for the host and run with GPU semantics (see target.py).
Exports the :data:`BACKEND` record; importing this package loads no llvmlite (the target's classes
are imported at first use)."""
from __future__ import annotations

import importlib
from typing import Any

from ..registry import Backend
from .cpu_names import check_cpu_name, cpu_names

#: The CPU target's record (see kcompiler.backends.registry.Backend). Any LLVM CPU name is an arch:
#: CpuTarget checks it (cpu_names.py), so ``archs`` is empty.
BACKEND = Backend(
    name="cpu", vendor="CPU", target="kcompiler.backends.cpu.target:CpuTarget",
    default_arch="native", device="kcompiler.runtime.cpu:CpuDevice",
    binary_kind="obj", binary_suffixes=(".o",), asm_kind="host assembly", asm_suffixes=(".s",),
    host_code=True, arch_help="an LLVM CPU name, native or host-w64",
)

#: Names re-exported from the modules that load llvmlite, imported at first use.
_LAZY = {"CpuTarget": ".target"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BACKEND", "CpuTarget", "check_cpu_name", "cpu_names"]
