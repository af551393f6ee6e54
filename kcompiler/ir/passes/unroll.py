"""Full unrolling of ``for`` loops with constant bounds.

A ``for`` whose lo, hi and step are ``const`` ops is replaced by one copy of its body per iteration,
each preceded by a ``const`` holding that iteration's induction variable, when

- its trip count is at most :data:`MAX_TRIP_FORCED` and it carries ``attrs["unroll"]`` (the language's
  ``unroll`` keyword: register tiles, arrays indexed by constants), or at most :data:`MAX_TRIP_AUTO`
  with a body of at most :data:`MAX_BODY_OPS_AUTO` ops (nested ops counted) otherwise;
- its body has no ``break``/``continue`` of its own (those of loops nested in it are fine);
- the function stays under :data:`MAX_FUNCTION_OPS` ops.

The trip count is found by running the loop's header on the constants with the lowering's rules
(``iv < hi`` going up, ``iv > hi`` for a negative step of a signed type, ``iv += step`` wrapping).
Loops nested in an unrolled body are visited next; the pass alternates with constant folding (bounds
that depend on an outer induction variable become constants) until nothing more unrolls.
"""
from __future__ import annotations

from ..core import Function, Module, Op, Region, Value, clone_op
from ..types import ScalarType
from .fold import fold_function_changed
from .util import const_value, count_ops, ends_in_terminator, make_const, splice, to_python, wrap_int

#: Most iterations of a loop marked ``unroll`` that is unrolled.
MAX_TRIP_FORCED = 64
#: Most iterations of an unmarked loop that is unrolled ...
MAX_TRIP_AUTO = 8
#: ... when its body has at most this many ops (nested ones included).
MAX_BODY_OPS_AUTO = 32
#: No unrolling makes a function larger than this many ops.
MAX_FUNCTION_OPS = 50_000
#: Rounds of (unroll, fold) at most.
MAX_ROUNDS = 16


def trip_values(op: Op, limit: int) -> list[int] | None:
    """The induction variable's values, in order, of ``for`` op ``op`` with constant bounds; None when
    the bounds are not constants or it runs more than ``limit`` times (or forever)."""
    lo_v, hi_v, step_v = (const_value(v) for v in op.operands)
    if lo_v is None or hi_v is None or step_v is None:
        return None
    t = op.operands[0].type
    assert isinstance(t, ScalarType)
    st = op.operands[2].type  # t, or for an unsigned range counting down the signed type of its width
    assert isinstance(st, ScalarType)
    lo, hi, step = to_python(lo_v, t), to_python(hi_v, t), to_python(step_v, st)
    if step != step_v:
        return None  # an out-of-range step attribute: the lowering reads its sign from the attribute
    up = step > 0 or not st.is_signed
    if not up and not t.is_signed:  # counting an unsigned value down stops before it would wrap
        n = len(range(lo, hi, step))
        return None if n > limit else list(range(lo, hi, step))
    values = []
    iv = lo
    while (iv < hi) if up else (iv > hi):
        values.append(iv)
        if len(values) > limit:
            return None
        iv = wrap_int(iv + step, t)
    return values


def has_own_break(body: Region) -> bool:
    """Whether ``body`` has a break/continue of the loop it is the body of (not of a nested loop)."""
    for op in body.ops:
        if op.name in ("break", "continue"):
            return True
        if op.name == "if" and any(has_own_break(r) for r in op.regions):
            return True
    return False


def unroll_for(op: Op, values: list[int]) -> list[Op]:
    """The ops replacing ``for`` op ``op``: per iteration, a const for the induction variable and a deep
    copy of the body. A body ending with a terminator (``return``) runs once."""
    body = op.regions[0]
    iv = body.args[0]
    out: list[Op] = []
    for k in values:
        c = make_const(k, iv.type, span=op.span, hint=iv.hint)
        out.append(c)
        vmap: dict[int, Value] = {iv.id: c.result}  # type: ignore[dict-item]
        out.extend(clone_op(o, vmap) for o in body.ops)
        if ends_in_terminator(body.ops):
            break
    return out


class _Unroller:
    def __init__(self, fn: Function):
        self.size = count_ops(fn.body)
        self.changed = False

    def region(self, r: Region) -> None:
        i = 0
        while i < len(r.ops):
            op = r.ops[i]
            if op.name == "for" and self.try_unroll(r, i, op):
                self.changed = True
                continue  # visit the copies, whose nested loops may unroll too
            for sub in op.regions:
                self.region(sub)
            i += 1

    def try_unroll(self, r: Region, i: int, op: Op) -> bool:
        body = op.regions[0]
        forced = bool(op.attrs.get("unroll"))
        body_ops = count_ops(body)
        if not forced and body_ops > MAX_BODY_OPS_AUTO:
            return False
        values = trip_values(op, MAX_TRIP_FORCED if forced else MAX_TRIP_AUTO)
        if values is None or has_own_break(body):
            return False
        grow = len(values) * (body_ops + 1) - body_ops - 1
        if self.size + grow > MAX_FUNCTION_OPS:
            return False
        if not splice(r, i, unroll_for(op, values)):
            return False
        self.size += grow
        return True


def unroll_loops(module: Module, fold: bool = True) -> Module:
    """Fully unroll the ``for`` loops of ``module`` that qualify (module docstring), in place; returns
    the module. With ``fold``, constant folding runs between rounds so inner loops whose bounds depend on
    an unrolled induction variable unroll too."""
    for fn in module.functions:
        for _ in range(MAX_ROUNDS):
            u = _Unroller(fn)
            u.region(fn.body)
            if not (u.changed and fold):
                break
            fold_function_changed(fn)
    return module
