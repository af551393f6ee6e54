"""Backends: the shared LLVM lowering (``llvm/``) and one folder per target, each exporting a
:class:`~kcompiler.backends.registry.Backend` record that the registry (``registry.py``) finds.

:func:`get_target` turns the names users write (``nvptx``, ``cuda``, ``cpu``, ``hip``...) into a
:class:`~kcompiler.backends.target.Target`, for any registered backend.
"""
from __future__ import annotations

from typing import Any

from .registry import (Backend, backends, find_backend, register_backend, target_aliases, target_names,
                       unregister_backend)
from .target import CompileOptions, Target


def canonical_target(name: str) -> str:
    """The canonical target name ('nvptx', 'amdgcn', 'cpu', or a plug-in's) of a name or alias
    ('cuda', 'hip'). Raises ValueError listing the names accepted."""
    return find_backend(name).name


def default_arch(target: str) -> str:
    """The arch used when none is given: the present GPU's (if any), else the target's default
    (:meth:`Backend.local_arch`). Raises ValueError for an unknown target."""
    return find_backend(target).local_arch()


def get_target(name: str, arch: str | None = None, **opts: Any) -> Target:
    """A Target for ``name`` (an alias is resolved) and ``arch`` (default :func:`default_arch`):
    ``Backend.target_class()(arch, **opts)``.

    nvptx: ``arch`` one of its record's archs (sm_80 ... sm_90a). amdgcn: gfx90a ... gfx1201. cpu: an
    LLVM CPU name, ``native`` or ``host-w64``, which CpuTarget checks; ``opts`` go to the Target
    (cpu ``warp_size``, nvptx ``printf``...).
    Raises ValueError for an unknown target or arch, or an option the target rejects."""
    backend = find_backend(name)
    arch = arch or backend.local_arch()
    backend.check_arch(arch)
    return backend.target_class()(arch, **opts)


def __getattr__(name: str) -> Any:
    if name == "TARGET_ALIASES":  # computed: a plug-in may register after this module is imported
        return target_aliases()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Backend", "CompileOptions", "Target", "backends", "canonical_target", "default_arch",
           "find_backend", "get_target", "register_backend", "target_aliases", "target_names",
           "unregister_backend"]
