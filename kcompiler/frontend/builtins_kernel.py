"""``launch_bounds(max_threads, min_blocks = 1)``: in a kernel's body, the most threads a block will
have and the fewest blocks a multiprocessor should hold (CUDA's ``__launch_bounds__``, HIP's
``__launch_bounds__``). It sets the IR function's ``max_threads`` / ``min_blocks`` attributes, which
every GPU backend reads: NVIDIA's ``.maxntid`` / ``.minnctapersm``, AMD's
``amdgpu-flat-work-group-size`` (backends/nvptx/target.py, backends/amdgcn/target.py); the CPU
target ignores them. Vendor-neutral, so the language declares it (builtins.py), not a backend.
"""
from __future__ import annotations

from typing import Any

from .builtin_registry import builtin
from .values import VOIDV


@builtin("launch_bounds")
def _launch_bounds(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    if not fl.decl.is_kernel:
        fl.fail("launch_bounds belongs in a kernel's body", e.span)
    n = fl.comptime_int(e.args[0], "launch_bounds' thread count")
    if not 1 <= n <= 1024:
        fl.fail(f"launch_bounds' thread count must be 1 to 1024, not {n}", e.args[0].span)
    blocks = fl.comptime_int(e.args[1], "launch_bounds' block count") if len(e.args) > 1 else 1
    if not 1 <= blocks <= 32:
        fl.fail(f"launch_bounds' block count must be 1 to 32, not {blocks}", e.args[1].span)
    fl.fn.attrs["max_threads"] = n
    fl.fn.attrs["min_blocks"] = blocks
    return VOIDV
