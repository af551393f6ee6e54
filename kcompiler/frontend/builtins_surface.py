"""The one adapter between the frontend and the builtins the backends contribute
(:mod:`kcompiler.ir.builtin_surface`: ``wgmma``, ``mma_sync``, ``mfma``...): :class:`SurfaceCall`
implements :class:`~kcompiler.ir.builtin_surface.BuiltinCall` over the function being lowered, and
:func:`lower_surface` dispatches a call to its record's check. The frontend names no vendor builtin:
it finds them by name through :func:`kcompiler.frontend.builtins.vendor_function`.
"""
from __future__ import annotations

from typing import Any, NoReturn

from ..ir.builtin_surface import At, Constant, SurfaceBuiltin
from ..ir.core import Value
from ..ir.types import PointerType, Type
from . import ast as A
from .builtin_registry import require_feature
from .semantic import CV
from .values import VOIDV, type_desc

_TYPE_EXPRS = (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr)


class SurfaceCall:
    """:class:`~kcompiler.ir.builtin_surface.BuiltinCall` for call ``e`` of BuiltinRef ``ref`` in
    FnLowering ``fl`` (``kw``: its keyword arguments by name, checked against the record)."""

    def __init__(self, fl: Any, ref: Any, e: A.Call, kw: dict):
        self._fl, self._ref, self._e, self._kw = fl, ref, e, kw
        self._rvalues: dict[At, Any] = {}
        self.builtin: SurfaceBuiltin = ref.fn.surface
        self.target = fl.target
        self.nargs = len(e.args)
        self.bracket_count = len(ref.targs or [])
        self.is_kernel = bool(fl.decl.is_kernel)

    # --- where things are ---------------------------------------------------------------------------
    def _node(self, at: At) -> Any:
        """The AST node of argument ``at`` (a position, ``"[j]"`` or a keyword's value)."""
        if isinstance(at, int):
            return self._e.args[at]
        if at.startswith("["):
            return self._ref.targs[int(at[1:-1])]
        return self._kw[at].value

    def _span(self, at: At) -> Any:
        if at == "call":
            return self._e.span
        if at == "brackets":
            return self._ref.span
        if isinstance(at, str) and at.endswith("="):
            return self._kw[at[:-1]].span
        return self._node(at).span

    def _rvalue(self, at: At) -> Any:
        if at not in self._rvalues:
            node = self._node(at)
            self._rvalues[at] = self._fl.rvalue(self._fl.ev(node), node.span)
        return self._rvalues[at]

    # --- BuiltinCall ----------------------------------------------------------------------------------
    def has_kw(self, name: str) -> bool:
        return name in self._kw

    def value(self, at: At) -> Value:
        return self._fl.materialise(self._rvalue(at), self._span(at))

    def constant(self, at: At) -> Constant | None:
        v = self._rvalue(at)
        return Constant(v.kind, v.value, v.type, v.describe()) if isinstance(v, CV) else None

    def pointer(self, at: At, what: str) -> Value:
        v = self._rvalue(at)
        if not (isinstance(v, Value) and isinstance(v.type, PointerType)):
            self.fail(f"{what} needs a pointer, found {type_desc(v)}", at)
        return v

    def comptime_int(self, at: At, what: str) -> int:
        return self._fl.comptime_int(self._node(at), what)

    def comptime_type(self, at: At, what: str) -> Type | None:
        v = self._fl.comptime_value(self._node(at), what)
        return None if isinstance(v, CV) else getattr(v, "type", None)

    def bracket_kind(self, j: int) -> str:
        a = self._ref.targs[j]
        return "keyword" if isinstance(a, A.KwArg) else "type" if isinstance(a, _TYPE_EXPRS) else "value"

    def type_arg(self) -> Type:
        return self._fl._type_arg(self._ref)

    def bool_kw(self, name: str, default: bool) -> bool:
        return self._fl._bool_kw(self._kw, name, default)

    def fail(self, msg: str, at: At = "call", hint: str | None = None) -> NoReturn:
        self._fl.fail(msg, self._span(at), hint=hint)
        raise AssertionError  # fail raises

    def require_feature(self, intrinsic: str, feature: str | None = None, subject: str | None = None) -> None:
        require_feature(self._fl, intrinsic, self._e.span, feature, subject=subject)

    def const(self, value: Any, type: Type) -> Value:
        return self._fl.b.const(value, type)

    def cast(self, value: Value, type: Type) -> Value:
        return self._fl.b.cast(value, type)

    def emit(self, intrinsic: str, operands: tuple | list = (), result_type: Type | None = None,
             **attrs: Any) -> Value | None:
        return self._fl.b.intrinsic(intrinsic, list(operands), result_type, **attrs)

    def set_function_attr(self, key: str, value: Any) -> None:
        self._fl.fn.attrs[key] = value


def lower_surface(fl: Any, ref: Any, e: A.Call, kw: dict) -> Any:
    """Lower call ``e`` of the backend-contributed builtin ``ref`` (a BuiltinRef whose ``fn.surface``
    is the record) in FnLowering ``fl``: its check's result, or VOIDV."""
    result = ref.fn.surface.handler()(SurfaceCall(fl, ref, e, kw))
    return VOIDV if result is None else result


__all__ = ["SurfaceCall", "lower_surface"]
