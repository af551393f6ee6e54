"""The lowering of each builtin function, as entries of one table (numba-cuda's ``Registry`` /
``@lower`` in cudaimpl.py is the model): builtins.py declares a builtin (name, arity, keyword and
bracket arguments, doc), a module registers the function that type-checks a call of it and emits its
IR::

    @builtin("ballot")
    def _ballot(fl, ref, call, kw):
        ...
        return fl.b.ballot(v)

A handler takes the function being lowered (a :class:`~kcompiler.frontend.fn_lowering.FnLowering`),
the :class:`~kcompiler.frontend.values.BuiltinRef` called (its ``targs``: the bracket arguments), the
call node (:class:`~kcompiler.frontend.ast.Call`, whose arguments it evaluates itself, in the order and
with the spans its messages need) and the keyword arguments by name (``{name: KwArg}``, already
checked against the builtin's declaration); it returns an IR value, a compile-time value or
:data:`~kcompiler.frontend.values.VOIDV`, and reports a mistake with ``fl.fail`` (a located error).

The handlers live by concept: builtins_math.py, builtins_libm.py (the accurate math names),
builtins_bits.py, builtins_convert.py, builtins_memory.py,
builtins_atomic.py, builtins_sync.py, builtins_warp.py, builtins_hostcall.py, builtins_printf.py,
builtins_comptime.py, builtins_kernel.py (launch_bounds). fn_lowering.py imports them all, which
registers them. The builtins of one vendor's instructions (``wgmma``, ``mfma``...) are no handlers
here: the backends contribute them as records (kcompiler.ir.builtin_surface), lowered through the
one adapter in builtins_surface.py.
"""
from __future__ import annotations

from typing import Any, Callable

from ..ir.intrinsics import get as intrinsic
from . import builtins as B

#: ``(fl, ref, call, kw) -> value``: see the module's docstring.
Handler = Callable[[Any, Any, Any, dict], Any]


class BuiltinRegistry:
    """Builtin name → the handler that lowers its calls."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}

    def register(self, *names: str) -> Callable[[Handler], Handler]:
        """A decorator registering its function as the handler of each of ``names``. Raises
        ValueError for a name builtins.py does not declare or one that already has a handler."""
        def deco(fn: Handler) -> Handler:
            for name in names:
                if name not in B.FUNCTIONS:
                    raise ValueError(f"builtin {name!r} is not declared in frontend/builtins.py")
                if name in self.handlers:
                    raise ValueError(f"builtin {name!r} is registered twice")
                self.handlers[name] = fn
            return fn
        return deco

    def handler(self, name: str) -> Handler:
        """The handler of builtin ``name``. Raises KeyError if none is registered."""
        return self.handlers[name]


#: The registry of the kernel language's builtins.
REGISTRY = BuiltinRegistry()

#: ``@builtin("name", ...)``: register a handler in :data:`REGISTRY`.
builtin = REGISTRY.register


def require_feature(fl: Any, intrinsic_name: str, span: Any, feature: str | None = None,
                    subject: str | None = None) -> None:
    """A located error at ``span`` unless ``fl.target`` has ``feature`` (default: the feature of the
    target intrinsic ``intrinsic_name``, whose call ``subject`` (default: its builtin's name) emits).
    The message says what the feature is and which chips have it from the intrinsic's record
    (``Intrinsic.needs``, the backend's data), so the frontend names no vendor or chip."""
    rec = intrinsic(intrinsic_name)
    feature = feature or rec.feature
    t = fl.target
    if not t.has(feature):
        fl.fail(f"{subject or rec.builtin} is not available on this target ({t.name} {getattr(t, 'arch', '')}): "
                f"it is {rec.describe(feature)}", span,
                hint=f'choose a path with comptime if target.has("{feature}") {{ ... }} else {{ ... }}')
