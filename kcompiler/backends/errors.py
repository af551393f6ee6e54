"""Errors the backends raise, in a module of their own so that the Target hooks (backends/target.py)
and the shared LLVM lowering (backends/llvm/lower.py), which imports them, both can."""
from __future__ import annotations


class UnsupportedOnTarget(Exception):
    """Raised by a target hook for an operation the target cannot do; the lowering reports it as a
    CompileError at the op's source span."""


__all__ = ["UnsupportedOnTarget"]
