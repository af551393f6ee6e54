"""A reference interpreter for kcompiler's IR, for tests: runs one function of a Module on Python
values, one thread at a time, to check that passes keep a program's meaning.

Values: bool → bool, integers → int in the type's range, floats → numpy scalars of the type
(bf16: ml_dtypes.bfloat16), vectors → tuples of lanes, pointers → :class:`Ptr` (a byte buffer and a
byte offset, so ``ptrcast`` and arrays work). A numpy array passed for a pointer parameter is wrapped
with :func:`ptr_to` and shares its memory.

Written apart from the passes on purpose (its arithmetic does not call kcompiler.ir.passes), with
the semantics the LLVM lowering gives: wrap-around integers, C division, IEEE floats, saturating
float-to-int casts, integer division defined everywhere (x / 0 = -1, x % 0 = x, MIN / -1 = MIN).
Undefined behaviour (out-of-range shifts, out-of-bounds access) raises :class:`UB`; more than ``max_steps`` ops raises :class:`StepLimit`.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

from kcompiler.ir.core import BINARY, Function, Module, Op, Region
from kcompiler.ir.types import ArrayType, ScalarType, Type, VectorType, elem_of, sizeof

DTYPES: dict[str, Any] = {"bool": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32,
                          "i64": np.int64, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32,
                          "u64": np.uint64, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
                          "f32": np.float32, "f64": np.float64}

#: (mantissa bits with the implicit one, emin, emax) of each float format (IEEE 754 table 3.2).
FORMATS = {"f16": (11, -14, 15), "bf16": (8, -126, 127), "f32": (24, -126, 127), "f64": (53, -1022, 1023)}


class UB(Exception):
    """The program did something whose result the IR leaves undefined."""


class StepLimit(Exception):
    pass


class Ptr:
    __slots__ = ("buf", "off")

    def __init__(self, buf: np.ndarray, off: int = 0):
        self.buf, self.off = buf, off

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ptr) and other.buf is self.buf and other.off == self.off

    def __repr__(self) -> str:
        return f"Ptr({id(self.buf):x}+{self.off})"


def ptr_to(a: np.ndarray) -> Ptr:
    """A pointer to the first element of contiguous array ``a`` (shares its memory)."""
    assert a.flags.c_contiguous
    return Ptr(a.reshape(-1).view(np.uint8), 0)


def wrap(v: int, t: ScalarType) -> int:
    v %= 1 << t.bits
    if t.is_signed and v >= 1 << (t.bits - 1):
        v -= 1 << t.bits
    return v


def round_fraction(x: Fraction, name: str) -> float:
    """Exact rational ``x`` rounded to nearest even in float format ``name``, as a Python float
    (inf on overflow). Independent of numpy's conversions."""
    p, emin, emax = FORMATS[name]
    if x == 0:
        return 0.0
    sign = -1 if x < 0 else 1
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    while Fraction(2) ** (e + 1) <= a:
        e += 1
    e = max(e, emin)  # subnormals share emin's quantum
    quantum = Fraction(2) ** (e - p + 1)
    q = a / quantum
    n = q.numerator // q.denominator
    rem = q - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    r = n * quantum
    if r >= Fraction(2) ** (emax + 1):
        return sign * math.inf
    return sign * float(r)


def to_float(x: float, t: ScalarType) -> Any:
    """Python float ``x``, exactly representable in ``t`` (or inf/nan), as a numpy scalar of ``t``."""
    return DTYPES[t.name](x)


def convert(x: Any, s: ScalarType, d: ScalarType) -> Any:
    if s == d:
        return x
    if d.is_bool:
        return bool(x != 0)
    if s.is_bool:
        return int(x) if d.is_int else to_float(1.0 if x else 0.0, d)
    if s.is_int and d.is_int:
        return wrap(x, d)
    if s.is_int:
        return to_float(round_fraction(Fraction(x), d.name), d)
    f = float(x)
    if d.is_int:
        lo = -(1 << (d.bits - 1)) if d.is_signed else 0
        hi = (1 << (d.bits - 1)) - 1 if d.is_signed else (1 << d.bits) - 1
        if math.isnan(f):
            return 0
        if math.isinf(f):
            return hi if f > 0 else lo
        return min(max(int(f), lo), hi)
    if math.isnan(f) or math.isinf(f):
        return to_float(f, d)
    return to_float(round_fraction(Fraction(f), d.name), d)


def int_binary(name: str, a: int, b: int, t: ScalarType) -> int:
    if name in ("div", "rem"):
        if b == 0:  # kcompiler defines it (what NVIDIA's division gives): x / 0 = -1, x % 0 = x
            return wrap(-1, t) if name == "div" else a
        q = int(Fraction(a, b))  # int() of a Fraction truncates toward zero
        return wrap(q if name == "div" else a - b * q, t)
    if name in ("shl", "shr"):
        if not 0 <= b < t.bits:
            raise UB(f"shift by {b} on {t}")
        if name == "shl":
            return wrap(a << b, t)
        return a >> b if t.is_signed else (a % (1 << t.bits)) >> b
    f = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "min": lambda: min(a, b),
         "max": lambda: max(a, b), "and": lambda: a & b, "or": lambda: a | b, "xor": lambda: a ^ b}
    return wrap(f[name](), t)


def float_binary(name: str, a: Any, b: Any, t: ScalarType) -> Any:
    dt = DTYPES[t.name]
    with np.errstate(all="ignore"):
        if name in ("add", "sub", "mul", "div"):
            # The exact result rounded once: what IEEE 754 asks of every basic operation.
            fa, fb = float(a), float(b)
            if any(map(math.isnan, (fa, fb))) or any(map(math.isinf, (fa, fb))) or (name == "div" and fb == 0):
                r = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}[name](
                    np.float64(fa), np.float64(fb))
                return dt(r)
            xa, xb = Fraction(fa), Fraction(fb)
            x = {"add": xa + xb, "sub": xa - xb, "mul": xa * xb, "div": xa / xb if fb else None}[name]
            r = round_fraction(x, t.name)
            if r == 0:  # the sign of an exact zero (IEEE 754 6.3)
                if name in ("mul", "div"):
                    r = math.copysign(0.0, math.copysign(1, fa) * math.copysign(1, fb))
                elif name == "add" and fa == 0 and fb == 0 and math.copysign(1, fa) == math.copysign(1, fb) == -1:
                    r = -0.0
                elif name == "sub" and fa == 0 and fb == 0 and math.copysign(1, fa) == -1 and math.copysign(1, fb) == 1:
                    r = -0.0
                elif x != 0 and x < 0:
                    r = -0.0
            return dt(r)
        if name == "rem":
            return dt(math.fmod(float(a), float(b))) if float(b) != 0 and not math.isinf(float(a)) else dt(np.nan)
        if name in ("min", "max"):
            fa, fb = float(a), float(b)
            if math.isnan(fa):
                return b
            if math.isnan(fb):
                return a
            return a if (fa <= fb) == (name == "min") else b
    raise UB(name)


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Return(Exception):
    def __init__(self, value: Any):
        self.value = value


class _Condition(Exception):
    def __init__(self, value: bool):
        self.value = value


class Interpreter:
    """Runs functions of ``module``; ``specials`` gives special registers ((reg, dim) → int)."""

    def __init__(self, module: Module, max_steps: int = 200_000, specials: dict | None = None):
        self.module = module
        self.max_steps = max_steps
        self.steps = 0
        self.specials = specials or {}
        self.shared: dict[str, Ptr] = {}

    def run(self, name: str, *args: Any) -> Any:
        """Call function ``name`` with ``args`` (numpy arrays for pointers); its return value or None."""
        fn = self.module.get(name)
        vals = [ptr_to(a) if isinstance(a, np.ndarray) else a for a in args]
        return self.call(fn, vals)

    def call(self, fn: Function, args: list[Any]) -> Any:
        env = {p.id: a for p, a in zip(fn.params, args)}
        try:
            self.region(fn.body, env)
        except _Return as r:
            return r.value
        return None

    def region(self, r: Region, env: dict) -> None:
        for op in r.ops:
            self.op(op, env)

    # --- memory ---
    def _bytes(self, p: Ptr, t: Type) -> np.ndarray:
        n = sizeof(t)
        if p.off < 0 or p.off + n > p.buf.size:
            raise UB(f"access of {n} bytes at offset {p.off} of a {p.buf.size}-byte buffer")
        return p.buf[p.off:p.off + n]

    def load(self, p: Ptr, t: Type) -> Any:
        b = self._bytes(p, t)
        if isinstance(t, VectorType):
            s = t.elem.size
            return tuple(self.load(Ptr(p.buf, p.off + k * s), t.elem) for k in range(t.count))
        assert isinstance(t, ScalarType), f"load of {t}"
        x = b.view(DTYPES[t.name])[0]
        if t.is_bool:
            return bool(x)
        if t.is_int:
            return int(x)
        return x

    def store(self, p: Ptr, t: Type, v: Any) -> None:
        b = self._bytes(p, t)
        if isinstance(t, VectorType):
            s = t.elem.size
            for k in range(t.count):
                self.store(Ptr(p.buf, p.off + k * s), t.elem, v[k])
            return
        assert isinstance(t, ScalarType), f"store of {t}"
        b[:] = np.asarray(v, DTYPES[t.name]).reshape(1).view(np.uint8)

    # --- ops ---
    def op(self, op: Op, env: dict) -> None:
        self.steps += 1
        if self.steps > self.max_steps:
            raise StepLimit
        name = op.name
        args = [env[v.id] for v in op.operands]
        rt = op.result.type if op.result is not None else None
        if name == "if":
            self.region(op.regions[0] if args[0] else op.regions[1], env)
            return
        if name == "for":
            self.for_(op, args, env)
            return
        if name == "while":
            while True:
                try:
                    self.region(op.regions[0], env)
                    raise AssertionError("while cond region did not end with condition")
                except _Condition as c:
                    if not c.value:
                        break
                try:
                    self.region(op.regions[1], env)
                except _Break:
                    break
                except _Continue:
                    pass
            return
        if name == "condition":
            raise _Condition(bool(args[0]))
        if name == "break":
            raise _Break
        if name == "continue":
            raise _Continue
        if name == "return":
            raise _Return(args[0] if args else None)
        if name == "store":
            self.store(args[0], op.operands[1].type, args[1])
            return
        if name in ("barrier", "fence"):
            return
        r = self.value(op, args, rt)
        if op.result is not None:
            env[op.result.id] = r

    def for_(self, op: Op, args: list, env: dict) -> None:
        lo, hi, step = args
        t = op.operands[0].type
        up = step > 0 or not t.is_signed
        iv = lo
        body = op.regions[0]
        while (iv < hi) if up else (iv > hi):
            env[body.args[0].id] = iv
            try:
                self.region(body, env)
            except _Break:
                break
            except _Continue:
                pass
            iv = wrap(iv + step, t)

    def lanes(self, f, t: Type, *xs: Any) -> Any:
        """Apply scalar ``f`` lane-wise when ``t`` is a vector."""
        if isinstance(t, VectorType):
            return tuple(f(*(x[k] if isinstance(x, tuple) else x for x in xs)) for k in range(t.count))
        return f(*xs)

    def value(self, op: Op, a: list, rt: Type | None) -> Any:
        name = op.name
        if name == "const":
            v = op.attrs["value"]
            e = elem_of(rt)
            s = bool(v) if e.is_bool else wrap(int(v), e) if e.is_int else to_float(float(v), e)
            return tuple([s] * rt.count) if isinstance(rt, VectorType) else s
        if name in BINARY:
            t = op.operands[0].type
            e = elem_of(t)
            if e.is_bool:
                f = {"and": lambda x, y: x and y, "or": lambda x, y: x or y, "xor": lambda x, y: x != y}[name]
            elif e.is_int:
                f = lambda x, y: int_binary(name, x, y, e)  # noqa: E731
            else:
                f = lambda x, y: float_binary(name, x, y, e)  # noqa: E731
            return self.lanes(f, t, a[0], a[1])
        if name == "neg":
            e = elem_of(rt)
            return self.lanes(lambda x: wrap(-x, e) if e.is_int else -x, rt, a[0])
        if name == "not":
            e = elem_of(rt)
            return self.lanes(lambda x: (not x) if e.is_bool else wrap(~x, e), rt, a[0])
        if name == "cmp":
            pred = op.attrs["pred"]
            f = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y, "lt": lambda x, y: x < y,
                 "le": lambda x, y: x <= y, "gt": lambda x, y: x > y, "ge": lambda x, y: x >= y}[pred]
            return self.lanes(lambda x, y: bool(f(x, y)), op.operands[0].type, a[0], a[1])
        if name == "select":
            if isinstance(a[0], tuple):
                return tuple(x if c else y for c, x, y in zip(*a))
            return a[1] if a[0] else a[2]
        if name == "cast":
            s, d = elem_of(op.operands[0].type), elem_of(rt)
            return self.lanes(lambda x: convert(x, s, d), rt, a[0])
        if name == "bitcast":
            s, d = op.operands[0].type, rt
            buf = np.zeros(sizeof(s), np.uint8)
            self.store(Ptr(buf), s, a[0])
            return self.load(Ptr(buf), d)
        if name == "alloca":
            return Ptr(np.zeros(sizeof(rt.pointee), np.uint8))
        if name == "shared":
            sym = op.attrs["symbol"]
            if sym not in self.shared:
                self.shared[sym] = Ptr(np.zeros(sizeof(rt.pointee), np.uint8))
            return self.shared[sym]
        if name == "elemptr":
            p, i = a
            pt = op.operands[0].type
            elem = pt.pointee.elem if isinstance(pt.pointee, ArrayType) else pt.pointee
            return Ptr(p.buf, p.off + i * sizeof(elem))
        if name == "ptrcast":
            return a[0]
        if name == "load":
            return self.load(a[0], rt)
        if name == "vec_build":
            return tuple(a)
        if name == "splat":
            return tuple([a[0]] * rt.count)
        if name == "extract":
            if not 0 <= a[1] < len(a[0]):
                raise UB("lane out of range")
            return a[0][a[1]]
        if name == "insert":
            v = list(a[0])
            v[a[2]] = a[1]
            return tuple(v)
        if name == "special":
            return self.specials.get((op.attrs["reg"], op.attrs.get("dim", "x")), 0)
        if name == "atomic":
            p, v = a
            old = self.load(p, rt)
            e = elem_of(rt)
            kind = op.attrs["op"]
            new = v if kind == "exch" else (int_binary(kind, old, v, e) if e.is_int else float_binary(kind, old, v, e))
            self.store(p, rt, new)
            return old
        if name == "atomic_cas":
            p, c, v = a
            old = self.load(p, rt)
            if old == c:
                self.store(p, rt, v)
            return old
        if name == "math":
            fn = op.attrs["fn"]
            dt = DTYPES[elem_of(rt).name]
            with np.errstate(all="ignore"):
                f = {"sqrt": np.sqrt, "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
                     "exp2": np.exp2, "log2": np.log2, "sin": np.sin, "cos": np.cos}.get(fn)
                if f is None:
                    raise NotImplementedError(f"math {fn}")
                return self.lanes(lambda x: dt(f(np.float64(x))) if elem_of(rt).is_float else abs(x), rt, a[0])
        if name == "call":
            return self.call(self.module.get(op.attrs["callee"]), a)
        raise NotImplementedError(f"interpreting op '{name}'")


def run(module: Module, name: str, *args: Any, max_steps: int = 200_000) -> Any:
    """Shorthand: ``Interpreter(module).run(name, *args)``."""
    return Interpreter(module, max_steps).run(name, *args)
