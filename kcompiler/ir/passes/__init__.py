"""IR passes. Each takes an :class:`~kcompiler.ir.core.Module`, changes it in place and returns it.

- :func:`inline_calls` (inline.py): device functions into their callers;
- :func:`fold_constants` (fold.py): constant folding with the exact semantics of the IR's types;
- :func:`unroll_loops` (unroll.py): full unrolling of ``for`` loops with constant bounds;
- :func:`eliminate_dead_code` (dce.py).

:func:`run_default` runs them in that order; optimisation proper is LLVM's (docs/ARCHITECTURE.md).
"""
from __future__ import annotations

from typing import Any

from ..core import Module
from .dce import eliminate_dead_code
from .fold import fold_constants
from .inline import inline_calls
from .unroll import unroll_loops

#: The default pipeline, in order.
DEFAULT_PASSES = (inline_calls, fold_constants, unroll_loops, fold_constants, eliminate_dead_code)


def run_default(module: Module, target: Any = None) -> Module:
    """Run :data:`DEFAULT_PASSES` on ``module`` in place and return it.

    Every target gets device functions inlined (the CPU target needs it, see its
    ``inline_device_functions``; on GPUs it exposes constant arguments to folding and unrolling, as
    nvcc's inlining does). ``target`` is accepted for target-specific passes; none is yet.
    """
    for p in DEFAULT_PASSES:
        p(module)
    return module


__all__ = ["run_default", "DEFAULT_PASSES", "inline_calls", "fold_constants", "unroll_loops",
           "eliminate_dead_code"]
