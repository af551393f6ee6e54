"""Expressions to IR: the expression half of :class:`~kcompiler.frontend.fn_lowering.FnLowering`, a
visitor that dispatches on the expression's node type (:data:`_EXPRESSIONS`), with the operators' type
rules (semantic.py's promotions applied, compile-time operands folded).

An expression evaluates to a compile-time value (:class:`~kcompiler.frontend.semantic.CV`), an IR
value, or one of the kinds of values.py (a place in memory, a type, a fn, a builtin, ...).
"""
from __future__ import annotations

from typing import Any, Callable

from ..diagnostics import SourceSpan
from ..ir import Value
from ..ir.types import (BOOL, F32, I32, SCALARS, ArrayType, PointerType, ScalarType, StructType, Type, VectorType)
from . import ast as A
from . import builtins as B
from . import fn_params, lower_arrays, structs
from .builtins_libm import float_rem
from .semantic import (CV, SemanticError, adapts, convert_cv, default_type, fits, fold_binary, fold_unary,
                       promote, widens)
from .values import (POISON, ArrayValue, BuiltinRef, FnRef, LanePlace, ModuleRef, Place, Poison, RegRef, TargetHas, TargetRef,
                     TypeRef, is_expr, type_desc)


class ExpressionLowering:
    """Lowers expressions at the builder's current position; mixed into FnLowering, whose value,
    conversion, call and scope methods it uses."""

    def ev(self, e: A.Expr) -> Any:
        # the builder's located(e.span), spelled out: this runs for every node of every expression,
        # where a generator-based context manager was ~5 % of a compile
        b = self.b
        saved = b.span
        if e.span is not None:
            b.span = e.span
        try:
            return _EXPRESSIONS[type(e)](self, e)
        finally:
            b.span = saved

    def expr_int_lit(self, e: A.IntLit) -> CV:
        if e.suffix:
            t = SCALARS[e.suffix]
            if not fits(e.value, t):
                self.fail(f"{e.value} does not fit in {t}", e.span)
            return CV(e.value, t)
        if e.value > (1 << 64) - 1:
            self.fail(f"integer literal {e.value} is too large (more than 64 bits)", e.span)
        return CV(e.value, None)

    def expr_float_lit(self, e: A.FloatLit) -> CV:
        if e.suffix:
            return convert_cv(CV(e.value), SCALARS[e.suffix])
        return CV(e.value, None)

    def expr_bool_lit(self, e: A.BoolLit) -> CV:
        return CV(e.value, BOOL)

    def expr_str_lit(self, e: A.StrLit) -> CV:
        return CV(e.value, None)

    def expr_name(self, e: A.Name) -> Any:
        v = self.lookup(e.id)
        if v is POISON:
            raise Poison()
        if v is not None:
            return v
        mod = self.mod
        if e.id in mod.consts:
            return lower_arrays.module_const(self, mod, e.id, e.span)
        if e.id in mod.fns:
            d = mod.fns[e.id]
            return FnRef(mod, d)
        if e.id in mod.imports:
            return ModuleRef(mod.imports[e.id], e.id)
        if e.id in B.FUNCTIONS:
            return BuiltinRef(B.FUNCTIONS[e.id], None, e.span)
        if e.id in B.DIM_REGISTERS:
            return RegRef(e.id)
        if e.id in B.SCALAR_REGISTERS:
            return self.b.special(e.id, "x")
        if e.id == "warp_size":
            return CV(int(self.target.warp_size), I32)
        if e.id == "target":
            return TargetRef()
        if e.id in SCALARS:
            return TypeRef(SCALARS[e.id])
        if e.id in mod.structs:  # a struct name used as a type (load[Pair], sizeof)
            sd = mod.structs[e.id]
            if sd.cparams:
                return _GenericStruct(sd)
            return TypeRef(structs.instantiate(self, sd, None, e.span))
        vendor = B.vendor_function(e.id)  # a backend's builtin (wgmma, mfma...): after every other name
        if vendor is not None:
            return BuiltinRef(vendor, None, e.span)
        self.fail(f"unknown name '{e.id}'", e.span)

    def expr_struct_lit(self, e: A.StructLit) -> Any:
        return structs.literal(self, e)

    def expr_field(self, e: A.Field) -> Any:
        base = self.ev(e.base)
        name = e.name
        if isinstance(base, ModuleRef):
            if name in base.module.consts:
                return lower_arrays.module_const(self, base.module, name, e.name_span)
            d = base.module.fns.get(name)
            if d is None:
                self.fail(f"module '{base.name}' has no fn '{name}'", e.name_span)
            return FnRef(base.module, d)
        if isinstance(base, RegRef):
            if name not in ("x", "y", "z"):
                self.fail(f"{base.name} has fields x, y and z, not '{name}'", e.name_span)
            return self.b.special(base.name, name)
        if isinstance(base, TargetRef):
            if name == "name":
                return CV(str(self.target.name), None)
            if name == "arch":
                return CV(str(getattr(self.target, "arch", "")), None)
            if name == "warp_size":
                return CV(int(self.target.warp_size), I32)
            if name == "has":
                return TargetHas()
            self.fail(f"target has no field '{name}'", e.name_span,
                      hint="expected one of: " + ", ".join(B.TARGET_FIELDS))
        if isinstance(base, (Place, Value)) and isinstance(base.type, StructType):
            return structs.field(self, base, e)
        lane = "xyzw".find(name) if len(name) == 1 else -1
        vt = base.type if isinstance(base, (Place, Value)) else None
        if isinstance(vt, VectorType):
            if lane < 0:
                self.fail(f"{vt} has no field '{name}'", e.name_span, hint="lanes are .x .y .z .w or v[i]")
            if lane >= vt.count:
                self.fail(f"lane .{name} ({lane}) is out of range for {vt}", e.name_span)
            idx = self.b.const(lane, I32)
            if isinstance(base, Place):
                return LanePlace(base, idx)
            return self.b.extract(base, idx)
        if isinstance(base, LanePlace) or isinstance(base, (Value, Place, CV)):
            t = base.place.type.elem if isinstance(base, LanePlace) else \
                (base.describe() if isinstance(base, CV) else base.type)
            self.fail(f"{t} has no field '{name}'", e.name_span)
        self.rvalue(base, e.base.span)
        self.fail(f"no field '{name}' here", e.name_span)

    def expr_index(self, e: A.Index) -> Any:
        base = self.ev(e.base)
        if isinstance(base, BuiltinRef):
            if base.fn.brackets == "no":
                self.fail(f"{base.fn.name} takes no compile-time arguments", e.span)
            return BuiltinRef(base.fn, list(e.args) + list(e.kwargs), e.span)
        if isinstance(base, FnRef):
            return FnRef(base.module, base.decl, list(e.args), list(e.kwargs))
        if isinstance(base, _GenericStruct):
            return TypeRef(structs.instantiate(self, base.decl, list(e.args) + list(e.kwargs), e.span))
        if isinstance(base, TypeRef):
            self.fail(f"{base.type} is a type and cannot be indexed", e.span)
        if len(e.args) != 1 or e.kwargs or not is_expr(e.args[0]):
            self.fail("an index is one integer expression: p[i]", e.span)
        idx_e = e.args[0]
        if isinstance(base, ArrayValue):
            return lower_arrays.index_array(self, base, idx_e)
        if isinstance(base, Place):
            t = base.type
            if isinstance(t, ArrayType):
                i = self.index_value(idx_e, t.count)
                p = self.b.elemptr(base.ptr, i)
                return Place(p, t.elem, f"an element of {base.what} ({t})", "store", base.mutable)
            if isinstance(t, VectorType):
                i = self.index_value(idx_e, t.count)
                return LanePlace(base, i)
            base = self.rvalue(base, e.base.span)
        base = self.rvalue(base, e.base.span)
        if isinstance(base, Value) and isinstance(base.type, PointerType):
            pt = base.type
            i = self.index_value(idx_e, None)
            p = self.b.elemptr(base, i)
            return Place(p, pt.pointee if not isinstance(pt.pointee, ArrayType) else pt.pointee.elem,
                         str(pt), "store")
        if isinstance(base, Value) and isinstance(base.type, VectorType):
            i = self.index_value(idx_e, base.type.count)
            return self.b.extract(base, i)
        self.fail(f"cannot index a value of type {type_desc(base)}", e.base.span,
                  hint="only pointers, arrays and vectors are indexed")

    def index_value(self, e: A.Expr, bound: int | None) -> Value:
        v = self.rvalue(self.ev(e), e.span)
        if isinstance(v, CV):
            if v.kind != "int":
                self.fail(f"an index must be an integer, found {v.describe()}", e.span)
            if bound is not None and not 0 <= v.value < bound:
                self.fail(f"index {v.value} is out of bounds (0 to {bound - 1})", e.span)
            return self.materialise(v, e.span, v.type if v.type is not None else None)
        if not (isinstance(v.type, ScalarType) and v.type.is_int):
            self.fail(f"an index must be an integer, found {v.type}", e.span)
        return v

    def expr_type_call(self, e: A.TypeCall) -> Any:
        t = self.resolve_type(e.type)
        return self.convert(t, e.args, e)

    def expr_call(self, e: A.Call) -> Any:
        f = self.ev(e.func)
        if isinstance(f, TypeRef):
            if e.kwargs:
                self.fail("a conversion takes no keyword arguments", e.kwargs[0].span)
            return self.convert(f.type, e.args, e)
        if isinstance(f, BuiltinRef):
            return self.builtin(f, e)
        if isinstance(f, FnRef):
            return self.call_fn(f, e)
        if isinstance(f, fn_params.BoundFn):
            return fn_params.call(self, f, e)
        if isinstance(f, TargetHas):
            if len(e.args) != 1 or e.kwargs:
                self.fail("target.has takes one argument: a feature name", e.span)
            v = self.comptime_value(e.args[0], "a feature name")
            if not (isinstance(v, CV) and v.kind == "str"):
                self.fail("target.has takes a string: target.has(\"feature\")", e.args[0].span)
            return CV(bool(self.target.has(v.value)), BOOL)
        if isinstance(f, RegRef):
            self.fail(f"{f.name} is not a function", e.func.span, hint=f"write {f.name}.x")
        self.fail(f"cannot call a value of type {type_desc(self.rvalue(f, e.func.span))}", e.func.span)

    def expr_unary(self, e: A.Unary) -> Any:
        x = self.rvalue(self.ev(e.operand), e.operand.span)
        if isinstance(x, CV):
            try:
                r = fold_unary(e.op, x)
            except SemanticError as err:
                self.sem(err, e.span)
            if r is not None:
                return r
            x = self.materialise(x, e.span)
        t = x.type
        et = t.elem if isinstance(t, VectorType) else t
        if not isinstance(et, ScalarType):
            self.fail(f"cannot apply '{e.op}' to {t}", e.span)
        if e.op == "!":
            if not et.is_bool:
                self.fail(f"'!' needs a bool, found {t}", e.span, hint="compare with zero: x == 0")
            return self.b.unary("not", x)
        if e.op == "~":
            if not et.is_int:
                self.fail(f"'~' needs an integer, found {t}", e.span,
                          hint="use '!' for bool" if et.is_bool else None)
            return self.b.unary("not", x)
        if et.is_bool:
            self.fail(f"cannot negate a {t}", e.span, hint="use '!' for logical not")
        self.no_minifloat_arithmetic(et, f"'{e.op}'", e.span)
        return self.b.unary("neg", x)

    def no_minifloat_arithmetic(self, et: ScalarType, what: str, span: SourceSpan) -> None:
        """Small floats (8 bits and fewer) are storage formats: a located error for computing on one."""
        if et.is_minifloat:
            self.fail(f"cannot apply {what} to {et}: small floats are for storage", span,
                      hint="convert to compute: f32(x), then back with " + et.name + "(y)")

    def expr_binary(self, e: A.Binary) -> Any:
        if e.op in ("&&", "||"):
            return self.logical(e)
        a = self.ev(e.lhs)
        if isinstance(a, TypeRef) and e.op in ("==", "!="):
            b = self.ev(e.rhs)
            if isinstance(b, TypeRef):
                return CV((a.type == b.type) == (e.op == "=="), BOOL)  # comptime if T == f16
        a = self.rvalue(a, e.lhs.span)
        b = self.rvalue(self.ev(e.rhs), e.rhs.span)
        return self.binary(e.op, a, b, e.span, e.op_span)

    def logical(self, e: A.Binary) -> Any:
        a = self._bool_operand(e.lhs, e.op)
        if isinstance(a, CV):
            if a.value == (e.op == "||"):
                return CV(a.value, BOOL)  # short-circuited at compile time
            return self._bool_operand(e.rhs, e.op)
        slot = self.b.alloca(BOOL, hint="sc")
        self.b.store(slot, a)
        then, els = self.b.if_(a)
        with self.b.at(then if e.op == "&&" else els):
            r = self._bool_operand(e.rhs, e.op)
            self.b.store(slot, self.materialise(r, e.rhs.span, BOOL))
        return self.b.load(slot)

    def _bool_operand(self, e: A.Expr, op: str) -> Any:
        v = self.rvalue(self.ev(e), e.span)
        if isinstance(v, CV) and v.kind == "bool":
            return v
        if isinstance(v, Value) and v.type == BOOL:
            return v
        self.fail(f"'{op}' needs bool operands, found {type_desc(v)}", e.span,
                  hint="compare it: x != 0" if not (isinstance(v, CV) and v.kind == "str") else None)

    def _cv_type(self, v: Any) -> Type | None:
        """The type of an operand for promotion: None for a CV that adapts (untyped or integer)."""
        if isinstance(v, Value):
            return v.type
        if v.type is None or v.kind == "int":
            return None
        return v.type

    def common(self, a: Any, b: Any, op: str, span: SourceSpan) -> tuple[Value, Value]:
        """Both operands converted to their common type (the usual arithmetic conversions)."""
        ta, tb = self._cv_type(a), self._cv_type(b)
        try:
            if isinstance(ta, VectorType) or isinstance(tb, VectorType):
                if isinstance(ta, VectorType) and isinstance(tb, VectorType):
                    if ta.count != tb.count:
                        raise SemanticError(f"cannot apply '{op}' to {ta} and {tb}: lengths differ")
                    t: Type = VectorType(promote(ta.elem, tb.elem, op), ta.count)
                else:
                    vec, other = (ta, b) if isinstance(ta, VectorType) else (tb, a)
                    assert isinstance(vec, VectorType)
                    if isinstance(other, CV):
                        e = vec.elem if adapts(other, vec.elem) else promote(vec.elem, default_type(other), op)
                    else:
                        if not isinstance(other.type, ScalarType):
                            raise SemanticError(f"cannot apply '{op}' to {vec} and {other.type}")
                        e = promote(vec.elem, other.type, op)
                    t = VectorType(e, vec.count)
            else:
                for x in (ta, tb):
                    if x is not None and not isinstance(x, ScalarType):
                        raise SemanticError(f"cannot apply '{op}' to {type_desc(a)} and {type_desc(b)}")
                if ta is None and tb is None:
                    # two compile-time numbers that were not folded (select, min of literals, ...)
                    if a.type is not None and adapts(b, a.type):
                        t = a.type
                    elif b.type is not None and adapts(a, b.type):
                        t = b.type
                    elif a.type is None and b.type is None and "float" in (a.kind, b.kind):
                        t = F32
                    else:
                        t = promote(default_type(a), default_type(b), op)
                elif ta is None:
                    t = tb if adapts(a, tb) else promote(default_type(a), tb, op)
                elif tb is None:
                    t = ta if adapts(b, ta) else promote(ta, default_type(b), op)
                else:
                    t = promote(ta, tb, op)
        except SemanticError as err:
            self.sem(err, span)
        return self.to_type(a, t, span), self.to_type(b, t, span)

    def to_type(self, v: Any, t: Type, span: SourceSpan) -> Value:
        if isinstance(v, CV):
            elem = t.elem if isinstance(t, VectorType) else t
            if not (adapts(v, elem) or (v.type is not None and widens(v.type, elem))):
                self.fail(f"{v.describe()} {v.value!r} does not fit in {elem}", span)
            return self.materialise(v, span, t)
        if v.type == t:
            return v
        if isinstance(t, VectorType) and isinstance(v.type, ScalarType):
            return self.b.splat(self.b.cast(v, t.elem), t.count)
        return self.b.cast(v, t)

    def binary(self, op: str, a: Any, b: Any, span: SourceSpan, op_span: SourceSpan | None) -> Any:
        # pointer arithmetic
        for p, i, first in ((a, b, True), (b, a, False)):
            if isinstance(p, Value) and isinstance(p.type, PointerType):
                if op in ("+", "-") and (first or op == "+"):
                    if isinstance(i, CV):
                        if i.kind != "int":
                            self.fail(f"cannot {'add' if op == '+' else 'subtract'} {i.describe()} "
                                      f"{'to' if op == '+' else 'from'} a pointer", span)
                        idx = self.materialise(i if op == "+" else CV(-i.value, i.type), span,
                                               i.type if i.type is not None else None)
                    elif isinstance(i.type, ScalarType) and i.type.is_int:
                        idx = i if op == "+" else self.b.unary("neg", i)
                    else:
                        self.fail(f"cannot apply '{op}' to {p.type} and {type_desc(i)}", span,
                                  hint="pointer arithmetic takes an integer: p + i")
                    if isinstance(p.type.pointee, ArrayType):
                        p = self.b.ptrcast(p, p.type.pointee.elem)
                    return self.b.elemptr(p, idx)
                self.fail(f"cannot apply '{op}' to {type_desc(a)} and {type_desc(b)}", span,
                          hint="pointers support p + i, p - i and p[i]")
        if isinstance(a, CV) and isinstance(b, CV):
            try:
                r = fold_binary(op, a, b)
            except SemanticError as err:
                self.sem(err, span)
            if r is not None:
                return r
        for v in (a, b):  # before any implicit conversion: small floats take part in none
            vt = getattr(v, "type", None)
            ve = vt.elem if isinstance(vt, VectorType) else vt
            if isinstance(ve, ScalarType):
                self.no_minifloat_arithmetic(ve, f"'{op}'", span)
        if op in ("<<", ">>"):
            return self.shift(op, a, b, span)
        x, y = self.common(a, b, op, span)
        t = x.type
        et = t.elem if isinstance(t, VectorType) else t
        assert isinstance(et, ScalarType)
        arith = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "rem"}
        bits = {"&": "and", "|": "or", "^": "xor"}
        cmps = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
        if op in arith:
            if et.is_bool:
                self.fail(f"cannot apply '{op}' to bool", span, hint="convert it: i32(b)")
            if op == "%" and et.is_float:
                return float_rem(self, x, y, span)
            return self.b.binary(arith[op], x, y)
        if op in bits:
            if et.is_float:
                self.fail(f"'{op}' needs integer or bool operands, found {t}", span,
                          hint=f"reinterpret the bits: bitcast[u{et.bits}](x)")
            return self.b.binary(bits[op], x, y)
        if op in cmps:
            if et.is_bool and op not in ("==", "!="):
                self.fail(f"cannot order bools with '{op}'", span)
            return self.b.cmp(cmps[op], x, y)
        self.fail(f"unknown operator '{op}'", op_span or span)

    def shift(self, op: str, a: Any, b: Any, span: SourceSpan) -> Value:
        x = a if isinstance(a, Value) else self.materialise(a, span)
        t = x.type
        et = t.elem if isinstance(t, VectorType) else t
        if not (isinstance(et, ScalarType) and et.is_int):
            self.fail(f"'{op}' needs an integer to shift, found {t}", span)
        if isinstance(b, CV):
            if b.kind != "int":
                self.fail(f"a shift amount must be an integer, found {b.describe()}", span)
            if not 0 <= b.value < et.bits:
                self.fail(f"shift by {b.value} is out of range for {et} (0 to {et.bits - 1})", span)
            y = self.b.const(b.value, t)
        else:
            bt = b.type
            be = bt.elem if isinstance(bt, VectorType) else bt
            if not (isinstance(be, ScalarType) and be.is_int):
                self.fail(f"a shift amount must be an integer, found {bt}", span)
            if isinstance(bt, VectorType) and not isinstance(t, VectorType):
                self.fail(f"cannot shift a {t} by a {bt}", span)
            if isinstance(t, VectorType):
                if isinstance(bt, VectorType):
                    if bt.count != t.count:
                        self.fail(f"cannot shift a {t} by a {bt}: lengths differ", span)
                    y = self.b.cast(b, t)
                else:
                    y = self.b.splat(self.b.cast(b, et), t.count)
            else:
                y = self.b.cast(b, t)
        return self.b.binary("shl" if op == "<<" else "shr", x, y)


class _GenericStruct:
    """A generic struct's name before its bracket arguments (``Acc`` in ``load[Acc[f32]]``)."""

    def __init__(self, decl: A.StructDecl):
        self.decl = decl


#: The visitor's dispatch table: expression node type → its method.
_EXPRESSIONS: dict[type, Callable[[Any, Any], Any]] = {
    A.IntLit: ExpressionLowering.expr_int_lit,
    A.FloatLit: ExpressionLowering.expr_float_lit,
    A.BoolLit: ExpressionLowering.expr_bool_lit,
    A.StrLit: ExpressionLowering.expr_str_lit,
    A.Name: ExpressionLowering.expr_name,
    A.Field: ExpressionLowering.expr_field,
    A.Index: ExpressionLowering.expr_index,
    A.TypeCall: ExpressionLowering.expr_type_call,
    A.Call: ExpressionLowering.expr_call,
    A.Unary: ExpressionLowering.expr_unary,
    A.Binary: ExpressionLowering.expr_binary,
    A.ArrayLit: lower_arrays.array_literal,
    A.IfExpr: lower_arrays.if_expression,
    A.StructLit: ExpressionLowering.expr_struct_lit,
}
