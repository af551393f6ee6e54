"""The compile-time builtin ``compile_error("message")``.
"""
from __future__ import annotations

from . import ast as A
from .builtin_registry import builtin


@builtin("compile_error")
def _compile_error(fl, f, e, kw):
    """``compile_error("message")``: reached only in code that is compiled (a ``comptime if``
    drops the branches not taken), so a generic function refuses a specialisation with it."""
    a = e.args[0]
    if not isinstance(a, A.StrLit):
        fl.fail("compile_error takes a string literal", a.span, hint='compile_error("no f64 version")')
    fl.fail(a.value, e.span, hint=f"in {fl.call_chain()}")
