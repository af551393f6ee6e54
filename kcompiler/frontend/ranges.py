"""The step of a run-time ``for i in range(start, end, step)`` loop, typed against its bounds.

The bounds share one integer type ``T``. The step has type ``T`` too, except for an unsigned ``T``,
where a negative step is legal and counts down: a negative literal, or a signed run-time step of at
most ``T``'s width, becomes the signed integer of ``T``'s width (``range(9u32, 0u32, -1)``: the step is
the ``i32`` -1). The IR's ``for`` op takes such a step (ir/verifier.py), and the LLVM lowering compares
the bounds unsigned and stops a descending loop before its induction variable would wrap below zero
(backends/llvm/lower.py, ``op_for``).
"""
from __future__ import annotations

from typing import Any

from ..diagnostics import SourceSpan
from ..ir import Value
from ..ir.types import SCALARS, ScalarType
from .semantic import CV, fits


def range_step(fl: Any, v: Any, t: ScalarType, span: SourceSpan) -> Value:
    """The IR value of step ``v`` (a CV or a Value) for a loop whose bounds have type ``t``. Raises
    Poison (after a located error) for a zero literal step or one that does not fit."""
    if isinstance(v, CV) and v.kind == "int" and v.value == 0:
        fl.fail("range step is 0", span, hint="a range counts up with a positive step, down with a negative one")
    if not t.is_signed:
        st = SCALARS[f"i{t.bits}"]
        if isinstance(v, CV) and v.kind == "int" and v.value < 0:
            if not fits(v.value, st):
                fl.fail(f"range step {v.value} does not fit in {st}, the step type of a descending {t} range",
                        span)
            return fl.materialise(CV(v.value, st), span, st)
        if isinstance(v, Value) and isinstance(v.type, ScalarType) and v.type.is_int and v.type.is_signed:
            if v.type.bits > t.bits:
                fl.fail(f"the step ({v.type}) is wider than the range bounds ({t})", span,
                        hint=f"convert it: {st}(step)")
            return fl.b.cast(v, st)
    return fl.coerce(v, t, span, f"use {{src}} as the range step ({t})")
