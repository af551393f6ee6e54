"""The toy intrinsic's LLVM lowering (imported when a kernel using it is lowered: llvmlite)."""
from __future__ import annotations

from typing import Any

import llvmlite.ir as ll


def lower_dot4(target: Any, ctx: Any, op: Any, args: list[ll.Value]) -> ll.Value:
    """``toy.dot4``: a[0] * b[0] + ... + a[3] * b[3], in lane order (no reassociation)."""
    a, b = args
    acc = None
    for k in range(4):
        i = ll.Constant(ll.IntType(32), k)
        p = ctx.b.fmul(ctx.b.extract_element(a, i), ctx.b.extract_element(b, i))
        acc = p if acc is None else ctx.b.fadd(acc, p)
    return acc
