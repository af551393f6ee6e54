"""Defaults of compile-time parameters, evaluated per specialisation.

A default may use the compile-time parameters declared before it::

    kernel k[A: i32 = 3, B: i32 = A * 2](o: ptr<i32>)          // A = 5 gives B = 10
    kernel acc[T: type, ACC: type = T](x: ptr<T>, o: ptr<ACC>)  // ACC is T unless given

so a default is evaluated for each specialisation, once the earlier parameters are bound (given by
keyword, ``-P``, in brackets, or inferred from the arguments' types), never once for the declaration.
The loader checks a default with the earlier parameters' defaults (:func:`check_default`); a default
that uses a parameter without one is checked when a specialisation binds it.

Used by ``KernelSignature.infer`` (launches), the lowering's kernels (``-P``) and fn calls, and the
fns bound to compile-time fn parameters.
"""
from __future__ import annotations

from typing import Any

from ..ir.types import SCALARS, ScalarType, Type
from . import ast as A
from .checker import dotted_name
from .program import ComptimeParam, StaticEvalError, static_value
from .semantic import CV, fits

__all__ = ["MissingParam", "bind_defaults", "check_default", "env_value"]


class MissingParam(Exception):
    """A compile-time parameter (``param``) has no value, and no default to take one from."""

    def __init__(self, param: ComptimeParam):
        super().__init__(param.name)
        self.param = param


def env_value(kind: str, value: Any, st: ScalarType | None) -> Any:
    """``value`` of a parameter of ``kind`` as the static evaluator's environment holds it (integers
    and bools as typed constants, types as ir Types, fns as they are)."""
    if kind == "int":
        return CV(value, st)
    if kind == "bool":
        return CV(value, SCALARS["bool"])
    return value


def check_default(cp: A.ComptimeParamDecl, kind: str, env: dict[str, Any]) -> Any:
    """The value of the default of ``cp`` (a parameter of ``kind`` 'int', 'bool', 'type' or 'fn')
    with the earlier parameters' values in ``env`` (see :func:`env_value`; ``UNBOUND`` for one that
    has none yet). Returns an int, bool, ir Type, or a fn's dotted name. Raises StaticEvalError
    (message and span) when it cannot be evaluated, is of the wrong kind or does not fit the declared
    integer type, and DependsOnUnbound (a StaticEvalError) when it uses an UNBOUND parameter."""
    if kind == "fn":
        return dotted_name(cp.default)
    what = f"default of compile-time parameter '{cp.name}'"
    try:
        v = static_value(cp.default, env)
    except StaticEvalError as e:
        raise type(e)(f"{what}: {e.message}", e.span or cp.span) from None
    ok = (kind == "type" and isinstance(v, Type)) or (kind == "bool" and isinstance(v, bool)) or \
         (kind == "int" and isinstance(v, int) and not isinstance(v, bool))
    if not ok:
        shown = v if isinstance(v, Type) else repr(v).lower()
        raise StaticEvalError(f"{what} is {shown}; expected {'a type' if kind == 'type' else kind}",
                              cp.default.span)
    st = SCALARS.get(getattr(cp.type, "name", ""))
    if kind == "int" and st is not None:
        if not fits(v, st):
            raise StaticEvalError(f"default {v} of '{cp.name}' does not fit in {st}", cp.default.span)
    return v


def bind_defaults(cps: list[ComptimeParam], values: dict[str, Any]) -> dict[str, Any]:
    """Every compile-time parameter of a declaration (``cps``: its ComptimeParams, in declaration
    order) bound: the value in ``values`` (given or inferred, already checked) or else its default, evaluated
    with the parameters before it bound. Returns {name: value} in declaration order.

    Raises MissingParam for the first parameter with neither, and StaticEvalError for a default that
    cannot be evaluated with these values (its message says which values it was evaluated with)."""
    out: dict[str, Any] = {}
    env: dict[str, Any] = {}
    for c in cps:
        if c.name in values:
            v = values[c.name]
        elif c.has_default:
            try:
                v = check_default(c.node, c.kind, env)
            except StaticEvalError as e:
                if out:
                    shown = ", ".join(f"{k} = {str(x).lower() if isinstance(x, bool) else x}"
                                      for k, x in out.items())
                    e = StaticEvalError(f"{e.message} (with {shown})", e.span)
                raise e from None
        else:
            raise MissingParam(c)
        out[c.name] = v
        env[c.name] = env_value(c.kind, v, c.type)
    return out
