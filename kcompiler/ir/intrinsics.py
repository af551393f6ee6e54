"""Target intrinsics: the one IR op through which a vendor's instructions enter the IR.

The core IR (core.py) names no vendor. A machine instruction that only some targets have (NVIDIA's
``wgmma.mma_async``, AMD's ``v_mfma``...) is the generic op ``intrinsic`` with attribute
``intrinsic`` naming an :class:`Intrinsic` of this registry, ``"<backend>.<instruction>"``
(``"nvptx.wgmma.mma_async"``, ``"amdgcn.mfma"``), its operands, result type and other attributes::

    %7 = intrinsic nvptx.mma.sync {shape=m16n8k16} %a, %b, %c : vec<f32, 4>

Each backend registers its intrinsics as data in its own folder (``backends/<name>/intrinsics.py``,
named by its ``Backend`` record's ``intrinsics`` field): the type rule the verifier calls, the LLVM
lowering, and the CPU target's emulation, the last two by import path (loaded when a kernel is
lowered, so that reading the table imports no llvmlite). A name not yet registered is looked up by
asking the providers (:func:`add_provider`; the backend registry installs one that imports the
table of the backend named by the prefix), so this module, a stage before the backends, imports none.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from .core import Op, Value
from .types import PointerType, ScalarType, Type, VOID, VectorType


class IntrinsicTypeError(Exception):
    """An intrinsic op whose operands, attributes or result break its type rule (the message says
    what); the verifier reports it as an IRVerifyError naming the function and the op."""


@dataclass(frozen=True)
class Intrinsic:
    """One target instruction as the IR knows it.

    Attributes:
        name: ``"<backend>.<instruction>"``; the prefix is the backend whose folder registers it.
        builtin: what the kernel language calls it, for messages (``"mma_sync"``, ``"wgmma"``).
        feature: the ``Target.has`` feature a target needs to take it (``"mma"``, ``"wgmma"``).
        operands: the number of operands (None: variadic; the type rule checks).
        attrs: the attributes it requires (besides ``intrinsic``).
        result: whether it has a result (its type is the op's result type).
        type_rule: ``rule(op)`` raises :class:`IntrinsicTypeError` for a malformed op (None: none).
        lower: import path ``"pkg.mod:function"`` of ``function(target, ctx, op, args) -> ll.Value |
            None``, the LLVM lowering on the backend's own targets (``args``: the operands' LLVM values).
        emulate: import path of the CPU target's emulation, same signature; None if none.
        tables: data of the instruction for those who read it through the registry (e.g. MFMA's forms).
        needs: ``Target.has`` feature -> what it is and which chips have it, for the frontend's
            "not available on this target" message (``{"wgmma": "warpgroup MMA (wgmma, NVIDIA
            sm_90a)"}``): ``feature`` and any other feature a form of it needs (FP8 ``mma_fp8``). The
            vendor's and chips' names are the backend's data, so the frontend names none.
        doc: operands, attributes and result, in words.
    """

    name: str
    builtin: str
    feature: str
    lower: str
    operands: int | None = None
    attrs: tuple[str, ...] = ()
    result: bool = False
    type_rule: Callable[[Op], None] | None = None
    emulate: str | None = None
    tables: Mapping[str, Any] = field(default_factory=dict)
    needs: Mapping[str, str] = field(default_factory=dict)
    doc: str = ""

    def __post_init__(self) -> None:
        if "." not in self.name:
            raise ValueError(f"an intrinsic is named '<backend>.<instruction>', not {self.name!r}")
        object.__setattr__(self, "tables", MappingProxyType(dict(self.tables)))
        object.__setattr__(self, "needs", MappingProxyType(dict(self.needs)))

    def describe(self, feature: str | None = None) -> str:
        """What ``feature`` (default: :attr:`feature`) is, with the chips that have it (:attr:`needs`;
        the feature's name where the record gives none)."""
        feature = feature or self.feature
        return self.needs.get(feature, feature)

    @property
    def backend(self) -> str:
        """The backend that registers it: the name's prefix."""
        return self.name.split(".", 1)[0]


_REGISTRY: dict[str, Intrinsic] = {}
_PROVIDERS: list[Callable[[str], None]] = []
_LOCK = threading.RLock()


def register_intrinsics(*intrinsics: Intrinsic) -> None:
    """Add intrinsics to the registry (a name registered again is replaced by the new record)."""
    with _LOCK:
        for i in intrinsics:
            _REGISTRY[i.name] = i


def add_provider(provider: Callable[[str], None]) -> None:
    """``provider(name)`` is called when :func:`lookup` does not find ``name``; it may register it."""
    with _LOCK:
        if provider not in _PROVIDERS:
            _PROVIDERS.append(provider)


def lookup(name: str) -> Intrinsic | None:
    """The intrinsic named ``name``, asking the providers if it is not registered yet; None if
    none knows it."""
    with _LOCK:
        found = _REGISTRY.get(name)
        if found is None:
            for provider in list(_PROVIDERS):
                provider(name)
                found = _REGISTRY.get(name)
                if found is not None:
                    break
        return found


def get(name: str) -> Intrinsic:
    """The intrinsic named ``name``; raises KeyError naming it when no backend registers it."""
    i = lookup(name)
    if i is None:
        raise KeyError(f"unknown intrinsic {name!r}")
    return i


def registered() -> tuple[str, ...]:
    """The names registered so far (a backend's table is loaded at its first lookup)."""
    with _LOCK:
        return tuple(sorted(_REGISTRY))


# --- helpers for the type rules ---------------------------------------------------------------------

def require(cond: Any, msg: str) -> None:
    """Raise :class:`IntrinsicTypeError` with ``msg`` unless ``cond``."""
    if not cond:
        raise IntrinsicTypeError(msg)


def result_type(op: Op) -> Type:
    """The op's result type (void without a result)."""
    return op.result.type if op.result is not None else VOID


def pointer(v: Value, what: str = "operand") -> PointerType:
    """``v``'s pointer type; :class:`IntrinsicTypeError` naming ``what`` if it is not a pointer."""
    require(isinstance(v.type, PointerType), f"{what} of type {v.type} is not a pointer")
    return v.type  # type: ignore[return-value]


def bits(t: Type) -> int:
    """Bits a scalar or vector occupies (FP6 and FP4 a whole byte)."""
    if isinstance(t, VectorType):
        return bits(t.elem) * t.count
    assert isinstance(t, ScalarType)
    return 8 if t.is_minifloat else t.bits


def count_attr(op: Op, key: str = "n") -> int:
    """Attribute ``key`` checked as an int >= 0 (the message names the builtin's attribute)."""
    n = op.attrs[key]
    require(isinstance(n, int) and not isinstance(n, bool) and n >= 0, f"{_short(op)} {key}={n!r} (needs an int >= 0)")
    return n


def _short(op: Op) -> str:
    i = lookup(op.attrs.get("intrinsic", ""))
    return i.builtin if i is not None else str(op.attrs.get("intrinsic"))


__all__ = ["Intrinsic", "IntrinsicTypeError", "add_provider", "bits", "count_attr", "get", "lookup", "pointer",
           "register_intrinsics", "registered", "require", "result_type"]
