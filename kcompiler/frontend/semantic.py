"""The type rules of the kernel language, apart from the syntax and from IR emission (Triton keeps
its ``semantic.py`` apart from its code generator the same way).

- Compile-time values (:class:`CV`) are literals, compile-time parameters and what is computed from
  them alone. An *untyped* one (a literal) takes the type its context needs; a compile-time integer
  adapts to the other operand's type whenever its value fits that type exactly.
- Binary operators use C's usual arithmetic conversions made strict: the wider float wins
  (f16 with bf16 gives f32), the wider integer wins, signed/unsigned of one width, int with float and
  bool with numbers are errors that say how to convert.
- Implicit conversions (assignment, arguments, return, store) only widen: f16 → f32 → f64,
  i32 → i64, u32 → u64 / i64. Everything else is written out: ``f16(x)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..ir.passes.fold import NoFold, int_binary
from ..ir.passes.util import wrap_int
from ..ir.types import BOOL, F32, I32, I64, ScalarType, Type, VectorType


class SemanticError(Exception):
    """A type error; the lowering attaches the span."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class CV:
    """A compile-time value: int, float, bool or str; ``type`` None for an untyped literal."""

    value: Any
    type: ScalarType | None = None

    @property
    def kind(self) -> str:
        if isinstance(self.value, bool):
            return "bool"
        if isinstance(self.value, int):
            return "int"
        if isinstance(self.value, float):
            return "float"
        return "str"

    def describe(self) -> str:
        if self.type is not None:
            return str(self.type)
        return {"int": "integer literal", "float": "float literal", "bool": "bool",
                "str": "string"}[self.kind]


#: The largest untyped integer the compiler computes with (beyond it: an error, not a slow compile).
MAX_UNTYPED = 1 << 128


def int_range(t: ScalarType) -> tuple[int, int]:
    if t.kind == "uint":
        return 0, (1 << t.bits) - 1
    return -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1


def fits(v: int, t: ScalarType) -> bool:
    lo, hi = int_range(t)
    return lo <= v <= hi


#: ``v`` reduced to ``t``'s width, two's complement (C's wrap-around): the IR's own rule.
wrap = wrap_int


def round_float(v: float, t: ScalarType) -> float:
    """``v`` rounded to the float type ``t`` (f16, bf16, f32 or f64)."""
    if t.bits == 64 or math.isnan(v) or math.isinf(v):
        return v
    import numpy as np

    if t.name == "f32":
        with np.errstate(over="ignore"):
            return float(np.float32(v))
    if t.name == "f16":
        with np.errstate(over="ignore"):
            return float(np.float16(v))
    import ml_dtypes

    with np.errstate(over="ignore"):
        return float(np.array(v, dtype=ml_dtypes.bfloat16).astype(np.float32))


def default_type(cv: CV) -> ScalarType:
    """The type an untyped literal gets when nothing asks for another: i32 (i64 when too big), f32."""
    if cv.type is not None:
        return cv.type
    k = cv.kind
    if k == "bool":
        return BOOL
    if k == "int":
        if fits(cv.value, I32):
            return I32
        if fits(cv.value, I64):
            return I64
        raise SemanticError(f"integer literal {cv.value} does not fit in i64")
    if k == "float":
        return F32
    raise SemanticError("a string is not a value here")


def adapts(cv: CV, t: ScalarType) -> bool:
    """Whether ``cv`` may implicitly take type ``t`` (literals and compile-time integers that fit)."""
    k = cv.kind
    if k == "bool":
        return t.is_bool
    if k == "str":
        return False
    if cv.type is not None and cv.type.is_float:
        return cv.type == t or (t.is_float and t.bits > cv.type.bits and widens(cv.type, t))
    if k == "float":
        return t.is_float
    # integers (untyped, or typed compile-time constants)
    if t.is_int:
        return fits(cv.value, t)
    if t.is_float:
        mant = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53}[t.name]
        return abs(cv.value) <= 1 << mant
    return False


def convert_cv(cv: CV, t: ScalarType) -> CV:
    """The value of ``cv`` as a typed compile-time value of type ``t`` (explicit conversion rules)."""
    v = cv.value
    if cv.kind == "str":
        raise SemanticError(f"cannot convert a string to {t}")
    if t.is_bool:
        return CV(bool(v), BOOL)
    if t.is_int:
        if isinstance(v, float):
            if math.isnan(v):
                return CV(0, t)
            lo, hi = int_range(t)
            return CV(int(max(lo, min(hi, math.trunc(v)))) if not math.isinf(v) else (hi if v > 0 else lo), t)
        return CV(wrap(int(v), t), t)
    return CV(round_float(float(v), t), t)


def widens(src: Type, dst: Type) -> bool:
    """Whether a value of ``src`` converts implicitly (without loss) to ``dst``."""
    if src == dst:
        return True
    if isinstance(src, VectorType) and isinstance(dst, VectorType):
        return src.count == dst.count and widens(src.elem, dst.elem)
    if not (isinstance(src, ScalarType) and isinstance(dst, ScalarType)):
        return False
    if src.is_float and dst.is_float:
        if dst.bits <= src.bits:
            return False
        return not (src.name == "bf16" and dst.name == "f16")
    if src.is_int and dst.is_int:
        if src.kind == dst.kind:
            return dst.bits > src.bits
        return src.kind == "uint" and dst.kind == "int" and dst.bits > src.bits
    return False


def conversion_hint(dst: Type, what: str = "x") -> str | None:
    if isinstance(dst, (ScalarType, VectorType)):
        return f"write {dst}({what}) to convert"
    return None


def promote(ta: ScalarType, tb: ScalarType, op: str) -> ScalarType:
    """The common type of two typed scalar operands of ``op`` (raises SemanticError)."""
    if ta == tb:
        return ta
    if ta.is_bool or tb.is_bool:
        other = tb if ta.is_bool else ta
        raise SemanticError(f"cannot apply '{op}' to bool and {other}",
                            "convert explicitly: bool(x) or " + f"{other}(b)")
    if ta.is_minifloat or tb.is_minifloat:  # storage formats take part in no implicit conversion
        s = ta if ta.is_minifloat else tb
        raise SemanticError(f"cannot apply '{op}' to {ta} and {tb}: small floats are for storage",
                            f"convert to compute: f32(x), then back with {s}(y)")
    if ta.is_float and tb.is_float:
        if ta.bits == tb.bits:  # f16 with bf16: neither holds the other
            return F32
        return ta if ta.bits > tb.bits else tb
    if ta.is_float != tb.is_float:
        f, i = (ta, tb) if ta.is_float else (tb, ta)
        raise SemanticError(f"cannot mix {ta} and {tb} in '{op}'",
                            f"convert the {i} operand: write {f}(x)")
    # two integers
    if ta.kind == tb.kind:
        return ta if ta.bits > tb.bits else tb
    if ta.bits == tb.bits:
        s, u = (ta, tb) if ta.is_signed else (tb, ta)
        raise SemanticError(f"cannot mix signed {s} and unsigned {u} in '{op}'",
                            f"convert one side: write {u}(x) or {s}(x)")
    return ta if ta.bits > tb.bits else tb


# --- folding of compile-time values --------------------------------------------------------------

_IR_BINARY = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "rem", "&": "and", "|": "or",
              "^": "xor", "<<": "shl", ">>": "shr"}


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _check_untyped(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_UNTYPED:
        raise SemanticError("compile-time integer too large (more than 128 bits)")
    return v


def fold_binary(op: str, a: CV, b: CV) -> CV | None:
    """``a op b`` computed at compile time, or None when it must be left to run time (typed floats).

    Raises SemanticError for type errors and for division by zero."""
    if a.kind == "str" or b.kind == "str":
        if op in ("==", "!=") and a.kind == b.kind:
            return CV((a.value == b.value) == (op == "=="), BOOL)
        raise SemanticError(f"cannot apply '{op}' to a string")
    # the result type
    if a.kind == "bool" or b.kind == "bool":
        if a.kind != b.kind:
            raise SemanticError(f"cannot apply '{op}' to {a.describe()} and {b.describe()}")
        t: ScalarType | None = BOOL
    elif a.type is None and b.type is None:
        t = None
    elif a.type is not None and b.type is not None:
        if a.type == b.type:
            t = a.type
        elif a.type.is_int and b.type.is_int and adapts(a, b.type):
            t = b.type
        elif a.type.is_int and b.type.is_int and adapts(b, a.type):
            t = a.type
        else:
            t = promote(a.type, b.type, op)
    else:
        typed, other = (a, b) if a.type is not None else (b, a)
        assert typed.type is not None
        if op in ("<<", ">>") and typed is b:
            t = None  # the shifted value decides
        elif adapts(other, typed.type):
            t = typed.type
        else:
            raise SemanticError(f"cannot apply '{op}' to {a.describe()} and {b.describe()}",
                                f"the {other.describe()} does not fit in {typed.type}")
    if op in ("<<", ">>") and a.type is not None:
        t = a.type
    if t is not None and t.is_float:
        return None  # typed float arithmetic happens at run time, in the type's precision
    x, y = a.value, b.value
    is_float = t is None and (isinstance(x, float) or isinstance(y, float))
    cmp = {"==": lambda: x == y, "!=": lambda: x != y, "<": lambda: x < y, "<=": lambda: x <= y,
           ">": lambda: x > y, ">=": lambda: x >= y}
    if op in cmp:
        return CV(bool(cmp[op]()), BOOL)
    if t is not None and t.is_bool:
        if op in ("&&", "&"):
            return CV(x and y, BOOL)
        if op in ("||", "|"):
            return CV(x or y, BOOL)
        if op == "^":
            return CV(x != y, BOOL)
        raise SemanticError(f"cannot apply '{op}' to bool", "arithmetic on bool needs a conversion: i32(b)")
    if op in ("&&", "||"):
        raise SemanticError(f"'{op}' needs bool operands, found {a.describe()} and {b.describe()}",
                            "compare with zero: x != 0")
    if is_float:
        x, y = float(x), float(y)
        if op in ("&", "|", "^", "<<", ">>"):
            raise SemanticError(f"'{op}' needs integer operands, found a float")
        if op == "+":
            r = x + y
        elif op == "-":
            r = x - y
        elif op == "*":
            r = x * y
        elif op == "/":
            r = x / y if y != 0 else (math.copysign(math.inf, x) * math.copysign(1, y) if x != 0 and not math.isnan(x) else math.nan)
        elif op == "%":
            r = math.fmod(x, y) if y != 0 else math.nan
        else:
            raise SemanticError(f"unknown operator '{op}'")
        return CV(r, None)
    x, y = int(x), int(y)
    if op in ("/", "%") and y == 0:
        raise SemanticError("division by zero in a compile-time expression")
    if op in ("<<", ">>"):
        limit = t.bits if t is not None else 64
        if y < 0 or y >= limit:
            raise SemanticError(f"shift by {y} is out of range for {t if t is not None else 'an integer'}")
    if t is not None:
        # Typed integers fold exactly as the IR's folder (and so the hardware) computes them.
        try:
            return CV(int_binary(_IR_BINARY.get(op, op), wrap(x, t), y if op in ("<<", ">>") else wrap(y, t), t), t)
        except NoFold as e:
            raise SemanticError(f"{e} in a compile-time expression") from None
    r = {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "/": lambda: _c_div(x, y),
         "%": lambda: x - _c_div(x, y) * y, "&": lambda: x & y, "|": lambda: x | y,
         "^": lambda: x ^ y, "<<": lambda: x << y, ">>": lambda: x >> y}.get(op)
    if r is None:
        raise SemanticError(f"unknown operator '{op}'")
    return CV(_check_untyped(r()), None)


def fold_unary(op: str, a: CV) -> CV | None:
    if a.kind == "str":
        raise SemanticError(f"cannot apply '{op}' to a string")
    if op == "!":
        if a.kind != "bool":
            raise SemanticError(f"'!' needs a bool, found {a.describe()}", "compare with zero: x == 0")
        return CV(not a.value, BOOL)
    if a.kind == "bool":
        raise SemanticError(f"cannot apply '{op}' to bool", "use '!' for logical not")
    if a.type is not None and a.type.is_float:
        if op == "~":
            raise SemanticError(f"'~' needs an integer, found {a.type}")
        return None
    if op == "-":
        v = -a.value
    elif op == "~":
        if a.kind == "float":
            raise SemanticError("'~' needs an integer, found a float literal")
        v = ~a.value
    else:
        raise SemanticError(f"unknown operator '{op}'")
    if a.type is None:
        return CV(v, None)
    return CV(wrap(v, a.type), a.type)


__all__ = ["CV", "SemanticError", "adapts", "convert_cv", "default_type", "fits", "fold_binary",
           "fold_unary", "promote", "round_float", "widens", "wrap"]
