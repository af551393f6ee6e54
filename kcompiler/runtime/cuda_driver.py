"""libcuda's launch entry points through ctypes, for the CUDA launch path (runtime/cuda.py): the
general launch calls ``cuLaunchKernel`` with typed arguments, the fast launchers ``cuLaunchKernelEx``
(CUDA >= 11.8) with one prebuilt :data:`LAUNCH_CONFIG` block in front of their parameter slots.
:func:`use_driver_library` points both at another library (a stub, to measure or test the host side
of a launch without a GPU: benchmarks/bench_launch_host.py)."""
from __future__ import annotations

import ctypes
import struct
from typing import Any, Callable

_libcuda: Any = None
_launch_ex: Any = None

#: CUlaunchConfig (cuda.h, CUDA >= 11.8): grid x/y/z, block x/y/z, sharedMemBytes (7 u32), hStream
#: at offset 32, attrs (a pointer to numAttrs CUlaunchAttribute) at 40 and numAttrs (u32) at 48; 56
#: bytes. The fast launchers keep one in front of the parameter slots and fill both with a single
#: struct.pack_into.
LAUNCH_CONFIG = "7I4xQQI4x"
LAUNCH_CONFIG_SIZE = 56

#: One CUlaunchAttribute (cuda.h: the u32 id, then the 64-byte CUlaunchAttributeValue at offset 8; 72
#: bytes): CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (6) with
#: programmaticStreamSerializationAllowed = 1, CUDA's programmatic dependent launch: the launch may
#: start before the one ahead of it on the stream ends (its griddepcontrol.wait waits for that one).
#: Process-wide and never freed: configurations point at it.
_PDL_ATTRIBUTE = ctypes.create_string_buffer(struct.pack("=I4xi60x", 6, 1), 72)


def launch_attributes(pdl: bool) -> tuple[int, int]:
    """CUlaunchConfig's (attrs, numAttrs) for a kernel: programmatic stream serialisation where
    ``pdl`` (a kernel that calls grid_dependency_wait, Artifact.meta["pdl"]), else none."""
    return (ctypes.addressof(_PDL_ATTRIBUTE), 1) if pdl else (0, 0)


def launch_config(grid: tuple[int, int, int], block: tuple[int, int, int], shared: int, stream: int,
                  pdl: bool) -> Any:
    """A CUlaunchConfig (:data:`LAUNCH_CONFIG`) for cuLaunchKernelEx, as a ctypes buffer."""
    buf = ctypes.create_string_buffer(LAUNCH_CONFIG_SIZE)
    struct.pack_into("=" + LAUNCH_CONFIG, buf, 0, *grid, *block, shared, stream or 0, *launch_attributes(pdl))
    return buf


def _bind(lib: Any) -> None:
    """Take both entry points from ``lib`` (a ``ctypes.CDLL``): cuLaunchKernel with its pointer
    arguments typed (so 64-bit handles pass), cuLaunchKernelEx with no argtypes (the fast launchers
    pass prebuilt ``c_void_p`` objects, the cheapest ctypes call)."""
    global _libcuda, _launch_ex
    f = lib.cuLaunchKernel
    f.restype = ctypes.c_int
    u = ctypes.c_uint
    f.argtypes = [ctypes.c_void_p, u, u, u, u, u, u, u, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    ex = lib.cuLaunchKernelEx
    ex.restype = ctypes.c_int
    _libcuda, _launch_ex = f, ex


def launch_fn() -> Callable[..., int]:
    """cuLaunchKernel (libcuda.so.1 unless :func:`use_driver_library` said otherwise)."""
    if _libcuda is None:
        _bind(ctypes.CDLL("libcuda.so.1"))
    return _libcuda


def launch_ex_fn() -> Callable[..., int]:
    """cuLaunchKernelEx(config*, function, params**, extra**) (libcuda.so.1 unless
    :func:`use_driver_library` said otherwise)."""
    if _launch_ex is None:
        _bind(ctypes.CDLL("libcuda.so.1"))
    return _launch_ex


def use_driver_library(lib: Any) -> None:
    """Send the launch path's driver calls (cuLaunchKernel, cuLaunchKernelEx) to ``lib``, a
    ``ctypes.CDLL`` with those symbols, instead of ``libcuda.so.1``. Launchers made earlier keep the
    library they were made with."""
    _bind(lib)


__all__ = ["LAUNCH_CONFIG", "LAUNCH_CONFIG_SIZE", "launch_attributes", "launch_config", "launch_ex_fn", "launch_fn",
           "use_driver_library"]
