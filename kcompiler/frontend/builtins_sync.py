"""The synchronisation builtins of a block and a thread: ``barrier()``, ``fence(scope)``,
``nanosleep(ns)`` and ``sched_barrier()`` (an order for the machine code's scheduler), and
programmatic dependent launch's ``grid_dependency_wait()`` and ``launch_dependents()``.
"""
from __future__ import annotations

from ..ir.types import U32
from . import builtins as B
from .builtin_registry import builtin
from .semantic import CV
from .values import VOIDV


@builtin("barrier")
def _barrier(fl, f, e, kw):
    fl.b.barrier()
    return VOIDV


@builtin("fence")
def _fence(fl, f, e, kw):
    if e.args:
        if "scope" in kw:
            fl.fail("scope is given twice", e.span)
        v = fl.comptime_value(e.args[0], "scope")
        if not (isinstance(v, CV) and v.kind == "str" and v.value in B.FENCE_SCOPES):
            fl.fail(f"scope must be one of: {', '.join(repr(a) for a in B.FENCE_SCOPES)}", e.args[0].span)
        scope = v.value
    else:
        scope = fl._str_kw(kw, "scope", B.FENCE_SCOPES, "device")
    fl.b.op("fence", scope=scope)
    return VOIDV


@builtin("grid_dependency_wait")
def _grid_dependency_wait(fl, f, e, kw):
    fl.b.op("grid_dependency_wait")
    return VOIDV


@builtin("launch_dependents")
def _launch_dependents(fl, f, e, kw):
    fl.b.op("launch_dependents")
    return VOIDV


@builtin("sched_barrier")
def _sched_barrier(fl, f, e, kw):
    fl.b.op("sched_barrier")
    return VOIDV


@builtin("nanosleep")
def _nanosleep(fl, f, e, kw):
    ns = fl.operand(e.args[0], U32, "pass {src} as nanosleep's u32 nanoseconds")
    fl.b.op("nanosleep", [ns])
    return VOIDV
