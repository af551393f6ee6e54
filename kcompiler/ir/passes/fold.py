"""Constant folding: arithmetic, comparisons, casts, bitcasts and selects of ``const`` operands become
``const`` ops, and an ``if`` on a constant condition is replaced by the region it takes.

Semantics are those the LLVM lowering gives (kcompiler/backends/llvm/lower.py), exactly:

- integers wrap around modulo 2**bits; ``div`` truncates toward zero and ``rem`` takes the sign of the
  dividend (C99 6.5.5); ``shr`` is arithmetic on signed types, logical on unsigned ones. What LLVM
  leaves undefined is not folded: division or remainder by zero, ``MIN / -1`` and ``MIN % -1`` on
  signed types, shifts by a negative amount or by the width or more (LLVM LangRef: sdiv, shl, lshr).
- floats follow IEEE 754 binary16/bfloat16/binary32/binary64 with round-to-nearest-even, computed with
  numpy (f16 and bf16 through f32, which rounds once: 24 bits >= 2p+2). ``min``/``max`` are LLVM's
  minnum/maxnum (a NaN operand gives the other operand; not folded for +0 against -0, whose result
  LLVM leaves open). Comparisons are ordered except ``ne`` (C rules).
- casts: float to int truncates toward zero, saturates and maps NaN to 0 (llvm.fptosi.sat); int to
  float rounds to nearest even; to bool is ``!= 0`` (NaN is true); f64 to bf16 is folded only where
  f32 holds the value exactly (ml_dtypes may round twice otherwise).
- a bitcast is folded between scalars (and vectors of equal lane count) of the same width unless a NaN
  is involved (a folded constant keeps the value, not the NaN's payload bits).

Vector constants are splats: an op on splat operands folds lane-wise into a splat.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core import BINARY, Module, Op, Region, Value
from ..types import PointerType, ScalarType, VectorType, elem_of
from .util import FLOAT_DTYPES, const_value, is_const, splice, to_attr, to_python, wrap_int

#: Mantissa bits (with the implicit one) of each float type, for exact int-to-float rounding.
MANTISSA_BITS = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53}


class NoFold(Exception):
    """The operation's result is undefined or not known exactly here: leave the op as it is."""


# --- scalar semantics ---------------------------------------------------------------------------------

def _compute_dtype(t: ScalarType) -> Any:
    """The numpy dtype float arithmetic on ``t`` is computed in (f16/bf16 widen to f32)."""
    return np.float64 if t.name == "f64" else np.float32


def int_binary(name: str, a: int, b: int, t: ScalarType) -> int:
    """``a name b`` on integers of type ``t`` (both already in ``t``'s range). Raises NoFold."""
    if name == "add":
        r = a + b
    elif name == "sub":
        r = a - b
    elif name == "mul":
        r = a * b
    elif name in ("div", "rem"):
        if b == 0:  # defined as the backends lower it (Lowering.int_divide): x / 0 = -1, x % 0 = x
            return wrap_int(-1, t) if name == "div" else a
        q = abs(a) // abs(b)  # MIN / -1 wraps to MIN below, and MIN % -1 is 0
        if (a < 0) != (b < 0):
            q = -q
        r = q if name == "div" else a - q * b
    elif name == "min":
        r = min(a, b)
    elif name == "max":
        r = max(a, b)
    elif name == "and":
        r = a & b
    elif name == "or":
        r = a | b
    elif name == "xor":
        r = a ^ b
    elif name in ("shl", "shr"):
        if not 0 <= b < t.bits:
            raise NoFold("shift amount out of range")
        r = a << b if name == "shl" else a >> b  # a is negative only on signed types: arithmetic
    else:
        raise NoFold(name)
    return wrap_int(r, t)


def float_binary(name: str, a: Any, b: Any, t: ScalarType) -> Any:
    """``a name b`` on floats of type ``t`` (numpy scalars); result a numpy scalar of ``t``."""
    ct = _compute_dtype(t)
    x, y = ct(a), ct(b)
    with np.errstate(all="ignore"):
        if name == "add":
            r = x + y
        elif name == "sub":
            r = x - y
        elif name == "mul":
            r = x * y
        elif name == "div":
            r = x / y
        elif name == "rem":
            r = np.fmod(x, y)
        elif name in ("min", "max"):
            if x == 0 and y == 0 and math.copysign(1, x) != math.copysign(1, y):
                raise NoFold("minnum/maxnum of +0 and -0")
            r = np.fmin(x, y) if name == "min" else np.fmax(x, y)
        else:
            raise NoFold(name)
        return FLOAT_DTYPES[t.name](r)


def binary(name: str, a: Any, b: Any, t: ScalarType) -> Any:
    if t.is_bool:
        if name == "and":
            return a and b
        if name == "or":
            return a or b
        if name == "xor":
            return a != b
        raise NoFold(name)
    if t.is_int:
        return int_binary(name, a, b, t)
    return float_binary(name, a, b, t)


def unary(name: str, a: Any, t: ScalarType) -> Any:
    if name == "neg":
        if t.is_int:
            return wrap_int(-a, t)
        if t.is_float:
            return -a
    elif name == "not":
        if t.is_bool:
            return not a
        if t.is_int:
            return wrap_int(~a, t)
    raise NoFold(name)


def compare(pred: str, a: Any, b: Any, t: ScalarType) -> bool:
    with np.errstate(all="ignore"):
        r = {"eq": lambda: a == b, "ne": lambda: a != b, "lt": lambda: a < b, "le": lambda: a <= b,
             "gt": lambda: a > b, "ge": lambda: a >= b}[pred]()
    return bool(r)


def int_to_float(n: int, d: ScalarType) -> Any:
    """``n`` rounded to nearest even in ``d`` (overflow gives inf), with one rounding."""
    p = MANTISSA_BITS[d.name]
    a = abs(n)
    L = a.bit_length()
    if L > p:
        shift = L - p
        q, r = divmod(a, 1 << shift)
        half = 1 << (shift - 1)
        if r > half or (r == half and q & 1):
            q += 1
        a = q << shift
    with np.errstate(all="ignore"):
        return FLOAT_DTYPES[d.name](float(-a if n < 0 else a))  # exact in f64: <= 53 significant bits


def convert(x: Any, s: ScalarType, d: ScalarType) -> Any:
    """The value ``x`` of type ``s`` converted to ``d`` (``cast``, C rules as lowered)."""
    if s == d:
        return x
    if s.is_minifloat or d.is_minifloat:
        raise NoFold("small-float conversions are the target's (LLVM folds the software path)")
    if d.is_bool:
        return bool(x != 0)  # NaN != 0 is true, as the unordered fcmp of the lowering
    if s.is_bool:
        return wrap_int(int(x), d) if d.is_int else FLOAT_DTYPES[d.name](1.0 if x else 0.0)
    if s.is_int and d.is_int:
        return wrap_int(x, d)
    if s.is_int:
        return int_to_float(x, d)
    if d.is_int:
        f = float(x)
        lo = -(1 << (d.bits - 1)) if d.is_signed else 0
        hi = (1 << (d.bits - 1)) - 1 if d.is_signed else (1 << d.bits) - 1
        if math.isnan(f):
            return 0
        if math.isinf(f):
            return hi if f > 0 else lo
        return min(max(math.trunc(f), lo), hi)
    # float to float
    with np.errstate(all="ignore"):
        if d.name == "bf16" and s.name == "f64" and float(np.float32(x)) != float(x) and not np.isnan(x):
            raise NoFold("f64 to bf16 would round twice")
        if {s.name, d.name} == {"f16", "bf16"}:
            return FLOAT_DTYPES[d.name](np.float32(x))
        if d.name == "bf16":
            return FLOAT_DTYPES[d.name](np.float32(x))
        return FLOAT_DTYPES[d.name](x)


_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def bitcast(x: Any, s: ScalarType, d: ScalarType) -> Any:
    """Reinterpret the bits of ``x`` (type ``s``) as ``d`` (same width; no NaN either side)."""
    if s.is_float:
        if np.isnan(x):
            raise NoFold("bitcast of a NaN")
        bits = int(np.asarray(x, FLOAT_DTYPES[s.name]).view(_UINT[s.bits]))
    else:
        bits = x & ((1 << s.bits) - 1)
    if d.is_int:
        return wrap_int(bits, d)
    r = np.asarray(bits, _UINT[d.bits]).view(FLOAT_DTYPES[d.name])[()]
    if np.isnan(r):
        raise NoFold("bitcast to a NaN")
    return r


# --- the pass -----------------------------------------------------------------------------------------

def fold_op(op: Op) -> Any:
    """The constant value (as :func:`to_python` gives it, lane value for vectors) of ``op``'s result when
    all its operands are constants; raises NoFold where it cannot."""
    ops = op.operands
    if not all(is_const(v) for v in ops) or op.result is None:
        raise NoFold("not constant")
    vals = [to_python(const_value(v), v.type) for v in ops]
    rt = op.result.type
    name = op.name
    if name in BINARY:
        return binary(name, vals[0], vals[1], elem_of(ops[0].type))
    if name in ("neg", "not"):
        return unary(name, vals[0], elem_of(ops[0].type))
    if name == "cmp":
        return compare(op.attrs["pred"], vals[0], vals[1], elem_of(ops[0].type))
    if name == "cast":
        return convert(vals[0], elem_of(ops[0].type), elem_of(rt))
    if name == "bitcast":
        s, d = ops[0].type, rt
        if isinstance(s, PointerType) or isinstance(d, PointerType):
            raise NoFold("an address is not a compile-time constant")
        if isinstance(s, VectorType) != isinstance(d, VectorType) or (
                isinstance(s, VectorType) and s.count != d.count):  # type: ignore[union-attr]
            raise NoFold("bitcast between lane counts")
        return bitcast(vals[0], elem_of(s), elem_of(d))
    if name == "splat":
        return vals[0]
    if name == "extract":
        if not 0 <= vals[1] < ops[0].type.count:  # type: ignore[union-attr]
            raise NoFold("lane index out of range")
        return vals[0]  # every lane of a splat is the same
    raise NoFold(name)


def _to_const(op: Op, value: Any) -> None:
    """Turn ``op`` into a ``const`` in place (its result Value, and so every use, stays)."""
    assert op.result is not None
    op.name = "const"
    op.operands = []
    op.attrs = {"value": to_attr(value, op.result.type)}


class _Folder:
    def __init__(self) -> None:
        self.vmap: dict[int, Value] = {}
        self.changed = False

    def region(self, r: Region) -> None:
        i = 0
        while i < len(r.ops):
            op = r.ops[i]
            if any(v.id in self.vmap for v in op.operands):
                op.operands = [self.vmap.get(v.id, v) for v in op.operands]
            if op.name == "if" and is_const(op.operands[0]):
                taken = op.regions[0] if to_python(const_value(op.operands[0]), op.operands[0].type) \
                    else op.regions[1]
                if splice(r, i, taken.ops):
                    self.changed = True
                    continue  # the spliced ops are visited next, from index i
            elif op.name == "select" and is_const(op.operands[0]):
                c, a, b = op.operands
                self.vmap[op.result.id] = a if to_python(const_value(c), c.type) else b
                self.changed = True
            elif op.name == "select" and op.operands[1] is op.operands[2]:
                self.vmap[op.result.id] = op.operands[1]
                self.changed = True
            elif op.name == "cast" and op.result is not None and op.operands[0].type == op.result.type:
                self.vmap[op.result.id] = op.operands[0]
                self.changed = True
            elif op.name != "const" and op.result is not None and op.operands:
                try:
                    value = fold_op(op)
                except NoFold:
                    pass
                else:
                    _to_const(op, value)
                    self.changed = True
            for sub in op.regions:
                self.region(sub)
            i += 1


def fold_constants(module: Module) -> Module:
    """Fold every constant computation of ``module`` in place (see the module docstring); returns it.
    Ops made redundant (a select with a constant condition, an identity cast) stay for DCE to remove."""
    for fn in module.functions:
        f = _Folder()
        f.region(fn.body)
    return module


def fold_function_changed(fn: Any) -> bool:
    """Fold one function; True when something changed (used by passes that iterate with folding)."""
    f = _Folder()
    f.region(fn.body)
    return f.changed
