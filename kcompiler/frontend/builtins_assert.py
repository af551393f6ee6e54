"""The device ``assert(cond, "message", args...)``: where ``cond`` is false, the thread prints one
line (ir/assertion.py: location, kernel, block, thread, the condition's source and the message,
formatted as printf formats it) and traps (the IR op ``trap``), which fails the launch; the host
then raises :class:`kcompiler.runtime.device.DeviceAssertionError`.

The message goes through printf (builtins_printf.lower_printf), so it prints as printf does on each
target: vprintf on NVIDIA, the hostcall printf service on AMD and the CPU target (or the printf
buffer under printf="buffered").

Under the compile option ``release`` (``target.has("release")``, C's NDEBUG), an assert is checked
(its condition typed, its message against its arguments) but compiles to nothing: its condition is
lowered into a region that is thrown away, so it is never evaluated.
"""
from __future__ import annotations

from ..ir import Region
from ..ir.assertion import WHO_FORMAT, lead_format
from ..ir.types import BOOL
from . import ast as A
from .builtin_registry import builtin
from .builtins_printf import lower_printf
from .printf_format import FormatProblem, check_call
from .semantic import CV
from .values import VOIDV, type_desc

WHAT = "assert's message"


def _condition_text(span) -> str:
    """The condition as written (its lines joined, spaces collapsed)."""
    f = span.file
    if span.line == span.end_line:
        text = f.line(span.line)[span.col - 1:span.end_col - 1]
    else:
        lines = [f.line(n) for n in range(span.line, span.end_line + 1)]
        lines[0] = lines[0][span.col - 1:]
        lines[-1] = lines[-1][:span.end_col - 1]
        text = " ".join(x.strip() for x in lines)
    return " ".join(text.split()) or "?"


def _condition(fl, e: A.Expr):
    v = fl.rvalue(fl.ev(e), e.span)
    if isinstance(v, CV) and v.kind == "bool":
        return v
    if not isinstance(v, CV) and getattr(v, "type", None) == BOOL:
        return v
    hint = "compare it: assert(x != 0, ...)" if (isinstance(v, CV) and v.kind in ("int", "float")) or \
        (not isinstance(v, CV) and getattr(v, "type", None) is not None) else None
    fl.fail(f"assert's condition must be bool, found {type_desc(v)}", e.span, hint=hint)


@builtin("assert")
def _assert(fl, f, e, kw):
    """``assert(cond)`` or ``assert(cond, "format", args...)``; see the module docstring."""
    cond = e.args[0]
    msg_call = A.Call(e.func, e.args[1:], [], span=e.span)
    if len(e.args) > 1:
        try:
            check_call(msg_call, WHAT)
        except FormatProblem as p:
            fl.fail(p.message, p.span, p.hint)
    if fl.target.has("release"):
        with fl.b.at(Region()):  # typed, then dropped: never evaluated, as under NDEBUG
            _condition(fl, cond)
        return VOIDV
    c = _condition(fl, cond)
    if isinstance(c, CV):
        if c.value:
            return VOIDV
        c = fl.b.const(False, BOOL)
    lit = e.args[1] if len(e.args) > 1 else None
    text = A.StrLit((": " + lit.value if lit is not None else "") + "\n", span=(lit or e).span)
    before, after = lead_format(str(e.span), "kernel" if fl.decl.is_kernel else "fn", fl.decl.name,
                                _condition_text(cond.span))
    with fl.b.located(e.span):
        _then, failed = fl.b.if_(c)
    with fl.b.at(failed), fl.b.located(e.span):
        who = [fl.b.special(reg, d) for reg in ("block_id", "thread_id") for d in "xyz"]
        lower_printf(fl, A.Call(e.func, [text, *e.args[2:]], [], span=e.span),
                     (before + WHO_FORMAT + after, who), WHAT)
        fl.b.op("trap", reason="assert", message=_condition_text(cond.span), function=fl.decl.name)
    return VOIDV
