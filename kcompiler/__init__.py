"""kcompiler: a multi-vendor GPU kernel compiler (see README.md).

::

    import kcompiler as kc
    mod = kc.compile_file("examples/vadd.kc")          # target="auto": CUDA, else HIP, else the CPU
    mod.vadd[(n + 255) // 256, 256](a, b, out, n)

Public API: :func:`compile`, :func:`compile_file`, :func:`devices`, :func:`resolve_target_name`,
:data:`TARGETS`, :data:`TARGET_ALIASES`, :class:`Target`, :class:`CompileOptions`, :class:`CompileError`,
:class:`LaunchError` (its :class:`DeviceAssertionError`, :class:`LaunchConfigError`), :class:`Module`,
:class:`Kernel`, :class:`Launch`, :class:`Device`, :class:`Artifact`, :class:`capture_printf` (kernels' printf
output into ``sys.stdout`` or a string, on every target), :func:`graph` (capture launches into a CUDA graph
and replay them); array operations in :mod:`kcompiler.ops`; :func:`autotune` (a kernel tuned over configurations of
compile-time values and launch shapes, :mod:`kcompiler.runtime.tuning`);
device arrays without torch or CuPy: :func:`to_device`, :func:`device_array`, :func:`from_dlpack`,
:class:`DeviceArray` (runtime/device_array.py).
"""
from __future__ import annotations

from ._version import __version__

import importlib
import os
from typing import Any

from .diagnostics import CompileError
from .runtime.device import Artifact, Device, DeviceAssertionError, LaunchConfigError, LaunchError

#: Public names imported at first use (module ``__getattr__``): ``import kcompiler`` loads neither
#: llvmlite, numpy, lark, torch, cuda-python nor hip-python, so that the CLI starts fast.
_LAZY = {"Module": ".runtime.module", "Kernel": ".runtime.module", "Launch": ".runtime.module",
         "ProgramHandle": ".pipeline", "Source": ".pipeline", "Target": ".backends.target",
         "CompileOptions": ".backends.target", "capture_printf": ".runtime.stdio",
         "graph": ".runtime.graph", "Graph": ".runtime.graph",
         "to_device": ".runtime.device_array", "device_array": ".runtime.device_array",
         "from_dlpack": ".runtime.device_array", "DeviceArray": ".runtime.device_array",
         "torch_op": ".ops.torch_ops", "autotune": ".runtime.tuning"}
#: Subpackages and modules reachable as attributes (``kcompiler.pipeline``) without an import.
#: ``kcompiler.ops`` is one of them: ``import kcompiler as kc; kc.ops.matmul(a, b)`` imports the ops
#: package (and numpy) at that first use, as ``torch.nn`` is reached from ``torch``.
_SUBMODULES = frozenset({"backends", "cli", "diagnostics", "frontend", "ir", "numerics", "ops", "pipeline",
                         "runtime"})


def __getattr__(name: str) -> Any:
    if name == "TARGETS":  # computed from the backend registry: a plug-in may register later
        from .backends.registry import target_names  # lazy: `import kcompiler` stays light

        return target_names()
    if name == "TARGET_ALIASES":
        from .backends.registry import target_aliases  # lazy: `import kcompiler` stays light

        return target_aliases()
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'kcompiler' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES | {"TARGETS", "TARGET_ALIASES"})


# TARGETS (the canonical target names, in the backend registry's order) and TARGET_ALIASES (every
# name accepted, ``cuda`` → nvptx, ``hip`` → amdgcn, mapped to its target) come from __getattr__.

def resolve_target_name(target: str) -> str:
    """The canonical target for a name, alias or ``auto`` (the first backend of the registry whose
    runtime finds a device here: CUDA, else HIP, else the CPU emulator). Raises ValueError for an
    unknown name."""
    if target == "auto":
        from .backends.registry import backends  # lazy: `import kcompiler` stays light

        for backend in backends():
            device = backend.device_class()
            if device is not None and device.count() > 0:
                return backend.name
        raise ValueError("target 'auto': no backend finds a device here")
    from .backends import canonical_target  # lazy: `import kcompiler` stays light

    return canonical_target(target)


def _options(options: dict[str, Any]) -> Any:
    from dataclasses import fields

    from .backends.target import CompileOptions  # lazy: `import kcompiler` stays light

    names = tuple(f.name for f in fields(CompileOptions))
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise TypeError(f"unknown compile option{'s' * (len(unknown) > 1)} {', '.join(unknown)}; the "
                        f"options are {', '.join(names)}")
    return CompileOptions(**options)


def compile(source: str, target: str = "auto", arch: str | None = None,  # noqa: A001
            comptime: dict[str, Any] | None = None, *, path: str = "<string>",
            target_options: dict[str, Any] | None = None, **options: Any) -> "Module":
    """Compile kernel-language ``source`` (text) for ``target`` and return a :class:`Module`.

    ``target``: 'auto' (CUDA, else HIP, else the CPU), 'nvptx' / 'cuda', 'amdgcn' / 'hip' (compiles
    without an AMD GPU; launching needs HIP, else HipUnavailable), 'cpu'.
    ``arch``: e.g. 'sm_90a' or 'gfx942' (default: the GPU's own, else sm_90 / gfx942).
    ``comptime``: default compile-time values, ``{"BLOCK": 128}`` or ``{"kernel": {"BLOCK": 128}}``
    (``params=``, the keyword's older name, still works but is deprecated: a DeprecationWarning).
    ``path``: the name messages print; imports of the user's own modules are searched beside it (in
    the current directory for the default '<string>'). ``options``: :class:`CompileOptions` fields
    (``opt_level`` 0-3, ``check_bounds``, ``fast_math``, ``release``; ValueError for a bad value).
    ``release=True``: device ``assert`` compiles to nothing (C's NDEBUG).
    ``check_bounds=True`` (cpu target): every access to memory the kernel was given is checked, and
    an out-of-bounds or misaligned one raises LaunchError naming the array, index, kernel and
    file:line:col. Unchecked (the default, as on a GPU), nothing is: on the cpu target an overrun
    reads and writes this Python process's own memory and can corrupt other arrays or the Python
    heap (a later "double free or corruption" abort) or end the process with a segfault.
    ``target_options``: what only one target
    takes: cpu ``{"warp_size": 64}``; nvptx ``{"printf": "hostcall"}`` (printf through the hostcall
    protocol AMD kernels use, served by kcompiler's listener, instead of vprintf; cpu and amdgcn
    always print that way and accept only that value); nvptx and amdgcn
    ``{"float8": "software"}`` (the reference small-float conversions even where the chip converts).

    The source is parsed and checked now (CompileError on a bad program, unless an identical source
    was checked before and is in the cache); each kernel specialisation compiles at its first launch
    (or :meth:`Kernel.specialize`) and is cached on disk."""
    base = os.getcwd() if path.startswith("<") else os.path.dirname(os.path.abspath(path))
    from .pipeline import Source  # deferred: see _module

    src = Source(source, path, base)
    return _module(src, target, arch, comptime, target_options, options)


def compile_file(path: str | os.PathLike, target: str = "auto", arch: str | None = None,
                 comptime: dict[str, Any] | None = None, *, target_options: dict[str, Any] | None = None,
                 **options: Any) -> "Module":
    """:func:`compile` the file at ``path`` (its own imports are searched beside it).
    Raises OSError when it cannot be read."""
    from .pipeline import Source  # deferred: see _module

    return _module(Source.from_file(path), target, arch, comptime, target_options, options)


def _module(src: Any, target: str, arch: str | None, comptime: Any, target_options: Any,
            options: dict[str, Any]) -> Any:
    # Deferred to the first compile: the pipeline and the runtime load llvmlite and numpy.
    from .pipeline import ProgramHandle  # lazy: `import kcompiler` stays light
    from .runtime.module import Module  # lazy: `import kcompiler` stays light

    from .pipeline import comptime_keyword  # lazy: `import kcompiler` stays light

    # params=: the keyword's deprecated older name; 4: the caller of compile / compile_file
    comptime = comptime_keyword(comptime, options.pop("params", None), "compile", stacklevel=4)
    opts = _options(options)
    name = resolve_target_name(target)
    program = ProgramHandle(src, name, arch, opts, target_opts=target_options)
    if target_options:
        program.target  # built now, so that a bad target option raises here, not at a launch
    return Module(program, comptime=comptime)


def devices() -> list[Device]:
    """Devices kernels can run on here, backend by backend in the registry's order: each CUDA GPU,
    each AMD GPU (HIP), the CPU emulator, then a plug-in's."""
    from .backends.registry import backends  # lazy: `import kcompiler` stays light

    out: list[Device] = []
    for backend in backends():
        cls = backend.device_class()
        for i in range(cls.count() if cls is not None else 0):
            try:
                out.append(cls.get(i))
            except LaunchError:
                pass
    return out


__all__ = ["compile", "compile_file", "devices", "TARGETS", "TARGET_ALIASES", "Target",
           "CompileOptions", "CompileError", "LaunchError", "LaunchConfigError", "DeviceAssertionError",
           "Artifact", "Device", "Module", "Kernel",
           "resolve_target_name", "capture_printf", "to_device", "device_array", "from_dlpack",
           "DeviceArray", "torch_op", "autotune", "__version__"]
