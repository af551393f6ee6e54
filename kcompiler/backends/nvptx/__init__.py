"""The NVIDIA target (``nvptx``, alias ``cuda``): PTX through LLVM's NVPTX backend (target.py), a cubin
through ptxas (cubin.py). Exports the :data:`BACKEND` record; importing this package
loads neither llvmlite nor cuda-python."""
from __future__ import annotations

import ctypes
import sys

from ..registry import Backend, load_object
from .archs import ARCHS


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


def detect_arch() -> str | None:
    """The arch of CUDA device 0 (``sm_90a`` on a Hopper chip), or None without a driver or a GPU."""
    if not _cuda_driver_loadable():
        return None
    # By path: the runtime is a later stage, and importing it loads cuda-python and numpy.
    return load_object("kcompiler.runtime.cuda:detected_arch")()


#: The NVIDIA target's record (see kcompiler.backends.registry.Backend).
BACKEND = Backend(
    name="nvptx", vendor="NVIDIA", aliases=("cuda",),
    target="kcompiler.backends.nvptx.target:NvptxTarget",
    archs=ARCHS, default_arch="sm_90", detect_arch=detect_arch,
    device="kcompiler.runtime.cuda:CudaDevice",
    binary_kind="cubin", binary_suffixes=(".cubin",), asm_kind="PTX", asm_suffixes=(".ptx",),
    intrinsics="kcompiler.backends.nvptx.intrinsics", builtins="kcompiler.backends.nvptx.builtins:BUILTINS",
)

__all__ = ["ARCHS", "BACKEND", "detect_arch"]
