"""The hostcall primitives std.hostcall builds on: ``hostcall_buffer()`` (the launch's buffer, 0 when
there is none) and ``hostcall_interrupt(event_id)`` (wake the host listener).
"""
from __future__ import annotations

from ..ir.types import U32, U64
from .builtin_registry import builtin
from .values import VOIDV


@builtin("hostcall_buffer")
def _hostcall_buffer(fl, f, e, kw):
    return fl.b.value("hostcall_buffer", [], U64)


@builtin("hostcall_interrupt")
def _hostcall_interrupt(fl, f, e, kw):
    event = fl.operand(e.args[0], U32, "pass {src} as hostcall_interrupt's u32 event id")
    fl.b.op("hostcall_interrupt", [event])
    return VOIDV
