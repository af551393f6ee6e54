"""What an expression of the kernel language lowers to, besides compile-time values
(:class:`~kcompiler.frontend.semantic.CV`) and IR values (:class:`~kcompiler.ir.Value`): places in
memory, references to types, modules, fns, builtins and special registers, the target object, the
value of a call that returns nothing, and the poison that abandons a statement after its error.

The lowering (fn_lowering.py, lower_stmts.py, lower_exprs.py), the builtins (builtins_*.py, the backends'
through builtins_surface.py) and the helpers (fn_params.py, printf lowering) share these; this module
imports none of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..diagnostics import SourceSpan
from ..ir import Value
from ..ir.types import ArrayType, ScalarType, Type, VectorType
from . import ast as A
from . import builtins as B
from .program import SourceModule
from .semantic import CV


class Poison(Exception):
    """Abandon the current statement: its error was reported."""


@dataclass
class Place:
    """Memory that can be read and written: a var's slot, an array element, a pointer's target.
    ``verb`` words messages: 'assign {src} to {what}' / 'store {src} into {what}'."""

    ptr: Value
    type: Type
    what: str
    verb: str = "assign"
    mutable: bool = True


@dataclass
class LanePlace:
    """Lane ``index`` of the vector in ``place``."""

    place: Place
    index: Value


@dataclass
class ArrayValue:
    """An array literal's value (``[1.0, x]``) or a const table: ``type`` [T; N], ``elems`` its N
    elements (CVs where known at compile time, else IR values of type T); a const's ``name`` and the
    ``symbol`` of its table in constant memory (None for a literal). lower_arrays.py makes and uses them."""

    type: ArrayType
    elems: list
    name: str | None = None
    symbol: str | None = None


@dataclass
class TypeRef:
    """A type used as a value: ``f32`` in ``f32(x)``, a type compile-time parameter."""

    type: Type


@dataclass
class ModuleRef:
    """An imported module (``std`` in ``std.exp(x)``), by the name it is imported as."""

    module: SourceModule
    name: str


@dataclass
class FnRef:
    """A fn of a module, with the compile-time arguments in brackets if any (``f[T = f16]``)."""

    module: SourceModule
    decl: A.FnDecl
    targs: list | None = None
    tkwargs: list | None = None


@dataclass
class BuiltinRef:
    """A builtin function, with the bracket arguments it was given (``load[vec<f16, 8>]``) and the span
    of the name or of the bracketed expression."""

    fn: B.BuiltinFn
    targs: list | None = None
    span: SourceSpan | None = None


@dataclass
class RegRef:
    """A special register with three dimensions (``thread_id``), before its ``.x``/``.y``/``.z``."""

    name: str


class TargetRef:
    """The compile-time object ``target`` (its fields are read: ``target.name``)."""


class TargetHas:
    """``target.has``, before it is called."""


class _Void:
    """The type of :data:`VOIDV`."""


#: What a call of a fn or builtin that returns nothing evaluates to.
VOIDV = _Void()
#: What a name poisoned by an abandoned statement is bound to: its uses raise :class:`Poison` silently.
POISON = object()


def type_desc(v: Any) -> str:
    """A value's type as messages word it ('i32', 'integer literal', ...)."""
    if isinstance(v, CV):
        return v.describe()
    if isinstance(v, Value):
        return str(v.type)
    if isinstance(v, ArrayValue):
        return str(v.type)
    return "value"


def literal_text(value: Any) -> str:
    """A literal as the language spells it (``true``, not Python's ``True``)."""
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)


def has_bool(t: Type) -> bool:
    """Whether ``t`` is bool or a vector of bools (which have no bit layout)."""
    e = t.elem if isinstance(t, VectorType) else t
    return isinstance(e, ScalarType) and e.is_bool


def is_expr(a: Any) -> bool:
    """Whether a bracket argument is an expression (not a type expression or a keyword argument)."""
    return not isinstance(a, (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr, A.KwArg))
