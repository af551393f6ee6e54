"""Building IR: a :class:`Builder` appends ops to the region it stands in.

    b = Builder(fn.body)
    i = b.add(b.mul(bid, bdim), tid)
    with b.if_(b.cmp("lt", i, n)) as (then, else_):
        with b.at(then):
            b.store(b.elemptr(out, i), b.load(b.elemptr(a, i)))
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from ..diagnostics import SourceSpan
from .core import Op, Region, Value
from .types import (AddressSpace, ArrayType, BOOL, PointerType, ScalarType, Type, U64, VOID, VectorType,
                    I32)


class Builder:
    """Appends ops at the end of ``region``. ``span`` is stamped on every op built while it is set."""

    def __init__(self, region: Region, span: SourceSpan | None = None):
        self.region = region
        self.span = span
        #: ops appended through :meth:`op` so far (the frontend bounds it: kcompiler/limits.py)
        self.emitted = 0

    @contextmanager
    def at(self, region: Region) -> Iterator[Region]:
        """Build into ``region`` for the duration of the ``with`` block."""
        saved, self.region = self.region, region
        try:
            yield region
        finally:
            self.region = saved

    @contextmanager
    def located(self, span: SourceSpan | None) -> Iterator[None]:
        saved, self.span = self.span, span if span is not None else self.span
        try:
            yield
        finally:
            self.span = saved

    def op(self, name: str, operands: list[Value] | None = None, type: Type | None = None,
           regions: list[Region] | None = None, hint: str = "", **attrs: Any) -> Op:
        """Append a generic op and return it."""
        o = Op(name, operands, type, attrs, regions, self.span, hint)
        self.region.ops.append(o)
        self.emitted += 1
        return o

    def value(self, name: str, operands: list[Value], type: Type, hint: str = "", **attrs: Any) -> Value:
        o = self.op(name, operands, type, hint=hint, **attrs)
        assert o.result is not None
        return o.result

    # --- values -------------------------------------------------------------------------------
    def const(self, value: int | float | bool, type: Type) -> Value:
        return self.value("const", [], type, value=value)

    def binary(self, name: str, a: Value, b: Value) -> Value:
        return self.value(name, [a, b], a.type)

    def add(self, a: Value, b: Value) -> Value:
        return self.binary("add", a, b)

    def sub(self, a: Value, b: Value) -> Value:
        return self.binary("sub", a, b)

    def mul(self, a: Value, b: Value) -> Value:
        return self.binary("mul", a, b)

    def cmp(self, pred: str, a: Value, b: Value) -> Value:
        t = a.type
        rt: Type = VectorType(BOOL, t.count) if isinstance(t, VectorType) else BOOL
        return self.value("cmp", [a, b], rt, pred=pred)

    def unary(self, name: str, a: Value) -> Value:
        return self.value(name, [a], a.type)

    def select(self, c: Value, a: Value, b: Value) -> Value:
        return self.value("select", [c, a, b], a.type)

    def cast(self, v: Value, to: Type) -> Value:
        return v if v.type == to else self.value("cast", [v], to)

    def bitcast(self, v: Value, to: Type) -> Value:
        return self.value("bitcast", [v], to)

    def math(self, fn: str, *args: Value) -> Value:
        return self.value("math", list(args), args[0].type, fn=fn)

    # --- memory -------------------------------------------------------------------------------
    def alloca(self, t: Type, hint: str = "") -> Value:
        return self.value("alloca", [], PointerType(t, AddressSpace.LOCAL), hint=hint)

    def shared(self, symbol: str, t: Type) -> Value:
        return self.value("shared", [], PointerType(t, AddressSpace.SHARED), hint=symbol, symbol=symbol)

    def dyn_shared(self, elem: Type) -> Value:
        return self.value("dyn_shared", [], PointerType(elem, AddressSpace.SHARED))

    def elemptr(self, p: Value, i: Value) -> Value:
        pt = p.type
        assert isinstance(pt, PointerType)
        res = pt.pointee.elem if isinstance(pt.pointee, ArrayType) else pt.pointee
        return self.value("elemptr", [p, i], PointerType(res, pt.space))

    def ptrcast(self, p: Value, pointee: Type) -> Value:
        pt = p.type
        assert isinstance(pt, PointerType)
        return self.value("ptrcast", [p], PointerType(pointee, pt.space))

    def load(self, p: Value, align: int | None = None) -> Value:
        pt = p.type
        assert isinstance(pt, PointerType)
        attrs = {"align": align} if align else {}
        return self.value("load", [p], pt.pointee, **attrs)

    def store(self, p: Value, v: Value, align: int | None = None) -> None:
        attrs = {"align": align} if align else {}
        self.op("store", [p, v], **attrs)

    # --- vectors ------------------------------------------------------------------------------
    def vec_build(self, elems: list[Value]) -> Value:
        et = elems[0].type
        assert isinstance(et, ScalarType)
        return self.value("vec_build", elems, VectorType(et, len(elems)))

    def splat(self, x: Value, n: int) -> Value:
        assert isinstance(x.type, ScalarType)
        return self.value("splat", [x], VectorType(x.type, n))

    def extract(self, v: Value, i: Value) -> Value:
        assert isinstance(v.type, VectorType)
        return self.value("extract", [v, i], v.type.elem)

    def insert(self, v: Value, x: Value, i: Value) -> Value:
        return self.value("insert", [v, x, i], v.type)

    # --- the machine --------------------------------------------------------------------------
    def special(self, reg: str, dim: str = "x") -> Value:
        return self.value("special", [], I32, hint=f"{reg}_{dim}", reg=reg, dim=dim)

    def barrier(self) -> None:
        self.op("barrier")

    def atomic(self, op: str, p: Value, v: Value, order: str = "relaxed", scope: str = "device") -> Value:
        return self.value("atomic", [p, v], v.type, op=op, order=order, scope=scope)

    def atomic_cas(self, p: Value, cmp: Value, new: Value, order: str = "relaxed",
                   scope: str = "device") -> Value:
        return self.value("atomic_cas", [p, cmp, new], new.type, order=order, scope=scope)

    def shuffle(self, mode: str, v: Value, lane: Value) -> Value:
        return self.value("shuffle", [v, lane], v.type, mode=mode)

    def ballot(self, pred: Value) -> Value:
        return self.value("ballot", [pred], U64)

    # --- control flow -------------------------------------------------------------------------
    def call(self, callee: str, args: list[Value], ret: Type) -> Value | None:
        return self.op("call", args, ret if ret != VOID else None, callee=callee).result

    def ret(self, v: Value | None = None) -> None:
        self.op("return", [v] if v is not None else [])

    def if_(self, cond: Value) -> tuple[Region, Region]:
        """Append ``if cond {then} else {else}``; returns the two empty regions to fill."""
        then, else_ = Region(), Region()
        self.op("if", [cond], regions=[then, else_])
        return then, else_

    def for_(self, lo: Value, hi: Value, step: Value, hint: str = "i", unroll: bool = False) -> tuple[Region, Value]:
        """Append a counted loop; returns its body region and the induction variable."""
        iv = Value(lo.type, hint)
        body = Region(args=[iv])
        attrs = {"unroll": True} if unroll else {}
        self.op("for", [lo, hi, step], regions=[body], **attrs)
        return body, iv

    def while_(self) -> tuple[Region, Region]:
        """Append a while loop; returns (cond region, body region). End cond with :meth:`condition`."""
        cond, body = Region(), Region()
        self.op("while", regions=[cond, body])
        return cond, body

    def condition(self, c: Value) -> None:
        self.op("condition", [c])
