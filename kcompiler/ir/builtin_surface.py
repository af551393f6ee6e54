"""The kernel language's vendor builtins, contributed by the backends: the plug-in point that lets a
backend add names such as ``wgmma`` or ``mfma`` to the language without the frontend naming them.

A backend declares each builtin as a :class:`SurfaceBuiltin` record (name, arity, keyword and bracket
arguments, doc) with a ``check`` function written against :class:`BuiltinCall`, the view of one call
site that the frontend gives it, in IR terms only: the arguments' IR values and compile-time
values, located errors, the target, and ``emit`` of the backend's target intrinsic
(:mod:`kcompiler.ir.intrinsics`)::

    def _mfma(call: BuiltinCall) -> Value:
        a, b, c = call.value(0), call.value(1), call.value(2)
        ...                                   # call.fail("...", at=1, hint=...) on a mistake
        call.require_feature("amdgcn.mfma")
        return call.emit("amdgcn.mfma", (a, b, c), c.type, shape="32x32x8")

    BUILTINS = (SurfaceBuiltin("mfma", _mfma, 3, 3, doc="mfma(a, b, c) -> ..."),)

A backend's tuple of records is named by its ``Backend`` record's ``builtins`` field; the backend
registry installs a provider (:func:`add_provider`) that gives those of every registered backend, so
that the frontend, resolving a name, sees every backend's builtins whatever the target (a kernel for
the CPU target still checks ``wgmma`` inside a dead ``comptime if target.has("wgmma")`` branch), and
a backend's leave with it (``unregister_backend``). This module, a stage before the backends and the
frontend, imports neither. The names the language itself declares (frontend/builtins.py) take
precedence.
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, NoReturn, Protocol, Union

from .core import Value
from .types import Type

#: Where a message points (:meth:`BuiltinCall.fail`): an int is that positional argument; ``"call"``
#: the whole call; ``"brackets"`` the builtin's name with its brackets; ``"[j]"`` bracket argument
#: j; ``"name"`` the value of keyword argument ``name``; ``"name="`` the whole ``name = value``.
At = Union[int, str]


@dataclass(frozen=True)
class Constant:
    """A compile-time scalar argument as :meth:`BuiltinCall.constant` gives it.

    Attributes:
        kind: ``"int"``, ``"float"``, ``"bool"`` or ``"str"``.
        value: the Python value (an int for ``"int"``...).
        type: its IR type, or None for an untyped literal (``3``, ``1.5``).
        text: how messages describe it (``"integer literal"``, ``"f32"``).
    """

    kind: str
    value: Any
    type: Type | None
    text: str


class BuiltinCall(Protocol):
    """One call of a :class:`SurfaceBuiltin`, as its ``check`` function sees it (the frontend's
    adapter implements it; arity, keyword names and whether brackets are given were checked against
    the record already).

    Arguments are evaluated when first asked for, once, in the order asked: a check asks for them in
    source order. Each method that finds a mistake reports a located error and does not return (the
    frontend's CompileError, raised when the function has been lowered).
    """

    #: The target compiled for (a ``kcompiler.backends.target.Target``: ``has(feature)``, ``name``,
    #: ``arch``, ``warp_size``).
    target: Any
    #: The number of positional arguments.
    nargs: int
    #: The number of bracket arguments (``wgmma[bf16]``: 1; none: 0).
    bracket_count: int
    #: Whether the function being lowered is a kernel.
    is_kernel: bool

    def has_kw(self, name: str) -> bool:
        """Whether keyword argument ``name`` was given."""

    def value(self, at: At) -> Value:
        """Argument ``at`` (a position or a keyword name) as an IR value (a compile-time constant
        materialised with its default type)."""

    def constant(self, at: At) -> Constant | None:
        """Argument ``at`` if it is a compile-time scalar (a literal, a compile-time parameter),
        else None (then :meth:`value` gives it)."""

    def pointer(self, at: At, what: str) -> Value:
        """Argument ``at`` as a pointer value; error "``what`` needs a pointer, found T" otherwise."""

    def comptime_int(self, at: At, what: str) -> int:
        """Argument ``at`` (a position, keyword name or ``"[j]"``) as a compile-time integer; error
        "``what`` must be a compile-time integer ..." otherwise."""

    def comptime_type(self, at: At, what: str) -> Type | None:
        """Argument ``at`` evaluated at compile time (error "``what`` must be a compile-time
        constant" otherwise): the type it names, or None if it is a value, not a type."""

    def bracket_kind(self, j: int) -> str:
        """What bracket argument j is: ``"value"`` (an expression), ``"type"`` (``vec<T, N>``,
        ``ptr<T>``, ``[T; N]``) or ``"keyword"`` (``name = value``)."""

    def type_arg(self) -> Type:
        """The one type in brackets (``ldmatrix[vec<bf16, 8>]``); error otherwise."""

    def bool_kw(self, name: str, default: bool) -> bool:
        """Keyword argument ``name`` as a compile-time bool (``default`` if not given)."""

    def fail(self, msg: str, at: At = "call", hint: str | None = None) -> NoReturn:
        """Report ``msg`` (with ``hint``) at ``at`` (see :data:`At`) and stop lowering the call."""

    def require_feature(self, intrinsic: str, feature: str | None = None, subject: str | None = None) -> None:
        """Error at the call unless the target has ``feature`` (default: the intrinsic's); the
        message says what the feature is from the intrinsic's record, naming the call ``subject``
        (default: the intrinsic's builtin name)."""

    def const(self, value: Any, type: Type) -> Value:
        """A constant of ``type``."""

    def cast(self, value: Value, type: Type) -> Value:
        """``value`` converted to ``type`` (the IR's ``cast``)."""

    def emit(self, intrinsic: str, operands: tuple | list = (), result_type: Type | None = None,
             **attrs: Any) -> Value | None:
        """Emit the target intrinsic ``intrinsic`` (``"<backend>.<instruction>"``) with these operands
        and attributes; its result (None without ``result_type``)."""

    def set_function_attr(self, key: str, value: Any) -> None:
        """Set attribute ``key`` of the IR function being lowered (read by the backends)."""


#: ``check(call) -> Value | None``: lowers one call (None: the builtin returns nothing).
Check = Callable[[BuiltinCall], Union[Value, None]]

_BRACKETS = ("none", "optional", "required")


@dataclass(frozen=True)
class SurfaceBuiltin:
    """A builtin function a backend adds to the kernel language.

    Attributes:
        name: what kernels call it (``"wgmma"``).
        check: ``check(call)`` (:data:`Check`) or its import path ``"pkg.mod:function"``, loaded at the
            first call: type-checks a call with located errors and emits its IR.
        min_args, max_args: how many positional arguments it takes.
        kwargs: the keyword arguments it takes.
        brackets: whether it takes compile-time arguments in brackets (``wgmma[bf16]``): ``"none"``,
            ``"optional"`` or ``"required"``.
        bracket_what: what the brackets hold, for messages ("wgmma_wait needs a group count in
            brackets").
        doc: its signature and meaning in a line, the hint of arity errors.
    """

    name: str
    check: Check | str
    min_args: int = 0
    max_args: int = 0
    kwargs: tuple[str, ...] = ()
    brackets: str = "none"
    bracket_what: str = "a type"
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"a builtin's name is an identifier, not {self.name!r}")
        if self.brackets not in _BRACKETS:
            raise ValueError(f"builtin {self.name}: brackets is one of {', '.join(_BRACKETS)}, not {self.brackets!r}")
        if not 0 <= self.min_args <= self.max_args:
            raise ValueError(f"builtin {self.name}: takes {self.min_args} to {self.max_args} arguments")

    def handler(self) -> Check:
        """The check function (imported now if :attr:`check` is an import path)."""
        if callable(self.check):
            return self.check
        module, _, attr = self.check.partition(":")
        return getattr(importlib.import_module(module), attr)


_REGISTERED: list[SurfaceBuiltin] = []
_PROVIDERS: list[Callable[[], Iterable[SurfaceBuiltin]]] = []
_LOCK = threading.RLock()


def register_builtins(*records: SurfaceBuiltin) -> None:
    """Add builtins to the language directly (a backend's usually come from a provider instead, so
    that they leave with their backend)."""
    with _LOCK:
        _REGISTERED.extend(r for r in records if r not in _REGISTERED)


def add_provider(provider: Callable[[], Iterable[SurfaceBuiltin]]) -> None:
    """``provider()`` gives the builtins of its sources as they are now (the backend registry's:
    those of every registered backend); asked at each :func:`builtins`, so it should be cheap."""
    with _LOCK:
        if provider not in _PROVIDERS:
            _PROVIDERS.append(provider)


def builtins() -> Mapping[str, SurfaceBuiltin]:
    """Every builtin the backends contribute, by name: the providers' in the order they were added,
    then those of :func:`register_builtins`. A name given twice keeps its first record (as a target
    name keeps its first backend)."""
    with _LOCK:
        out: dict[str, SurfaceBuiltin] = {}
        for provider in list(_PROVIDERS):
            for r in provider():
                out.setdefault(r.name, r)
        for r in _REGISTERED:
            out.setdefault(r.name, r)
        return out


def lookup(name: str) -> SurfaceBuiltin | None:
    """The builtin named ``name``, or None if no backend contributes it."""
    return builtins().get(name)


__all__ = ["At", "BuiltinCall", "Check", "Constant", "SurfaceBuiltin", "add_provider", "builtins", "lookup",
           "register_builtins"]
