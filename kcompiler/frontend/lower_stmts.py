"""Statements to IR: the statement half of :class:`~kcompiler.frontend.fn_lowering.FnLowering`, a
visitor that dispatches on the statement's node type (:data:`_STATEMENTS`).

``comptime if`` lowers only the branch taken; ``for i in comptime range`` is unrolled, each iteration
seeing ``i`` as a constant (at most :data:`UNROLL_BUDGET` iterations a compile). A statement whose
expression fails reports its error and is abandoned (:class:`~kcompiler.frontend.values.Poison`); the
names it would have defined are poisoned so that their uses report nothing more.
"""
from __future__ import annotations

from typing import Any, Callable

from ..diagnostics import SourceSpan
from ..ir import Region, Value
from ..ir.core import OPS
from ..ir.types import BOOL, I32, TENSOR_MAP, VOID, ArrayType, ScalarType, VectorType, sizeof
from ..limits import kernel_display, shared_memory_error, unrolled_size_error
from . import ast as A
from . import lower_arrays
from .ranges import range_step
from .semantic import CV, SemanticError, convert_cv, default_type, promote
from .values import POISON, ArrayValue, LanePlace, Place, Poison, type_desc

#: Iterations of ``comptime`` for loops one compile may unroll, all loops together.
UNROLL_BUDGET = 1 << 16


class StatementLowering:
    """Lowers statements into the current region of ``self.b``; mixed into FnLowering, whose
    expression, value and scope methods it uses."""

    def terminated(self) -> bool:
        ops = self.b.region.ops
        return bool(ops) and OPS[ops[-1].name].terminator

    def block(self, stmts: list[A.Stmt]) -> None:
        self.scopes.append({})
        dead: Region | None = None
        saved = self.b.region
        for s in stmts:
            if dead is None and self.terminated():
                # Code after return/break/continue is still checked, into a region that is dropped.
                dead = Region()
                self.b.region = dead
            self.stmt(s)
        self.b.region = saved
        self.scopes.pop()

    def stmt(self, s: A.Stmt) -> None:
        b = self.b
        saved = b.span  # the builder's located(s.span), spelled out as in ev (hot)
        if s.span is not None:
            b.span = s.span
        try:
            _STATEMENTS[type(s)](self, s)
        except Poison:
            for n in _defined_names(s):
                self.bind(n, POISON)
        finally:
            b.span = saved

    def stmt_block(self, s: A.Block) -> None:
        self.block(s.stmts)

    def stmt_expression(self, s: A.ExprStmt) -> None:
        v = self.ev(s.expr)
        if isinstance(v, LanePlace):
            self.rvalue(v, s.expr.span)

    def stmt_let(self, s: A.Let) -> None:
        raw = self._value_or_array(s, False)
        if raw is None:
            return
        v = self.rvalue(raw, s.value.span)
        if s.type is not None:
            t = self.resolve_type(s.type)
            v = self.coerce(v, t, s.value.span, f"initialise '{s.name}' ({t}) with {{src}}")
        elif isinstance(v, CV):
            if v.kind == "str":
                self.fail("a string is not a value", s.value.span)
            if v.type is None:
                try:
                    v = convert_cv(v, default_type(v))
                except SemanticError as e:
                    self.sem(e, s.value.span)
        if isinstance(v, Value) and not v.hint:
            v.hint = s.name
        self.bind(s.name, v)

    def _value_or_array(self, s: A.Let | A.Var, mutable: bool) -> Any:
        """The value of a ``let``/``var`` initialiser, evaluated once; an array literal or const table
        (an ArrayValue) is stored into a local array bound to the name, and None returned."""
        t = self.resolve_type(s.type) if s.type is not None else None
        v = lower_arrays.array_value(self, s.value, t if isinstance(t, ArrayType) else None)
        if isinstance(v, ArrayValue):
            self.bind(s.name, lower_arrays.store_local(self, v, s.name, mutable, s.value.span))
            return None
        if isinstance(t, ArrayType):
            self.fail(f"cannot initialise '{s.name}' ({t}) with {type_desc(self.rvalue(v, s.value.span))}",
                      s.value.span, hint="write an array literal: [a, b, ...]")
        return v

    def stmt_var(self, s: A.Var) -> None:
        raw = self._value_or_array(s, True) if s.value is not None else None
        if s.value is not None and raw is None:
            return
        t = self.resolve_type(s.type) if s.type is not None else None
        init = None
        if s.value is not None:
            init = self.rvalue(raw, s.value.span)
            if t is None:
                if isinstance(init, CV):
                    try:
                        t = default_type(init)
                    except SemanticError as e:
                        self.sem(e, s.value.span)
                else:
                    t = init.type
            init = self.coerce(init, t, s.value.span, f"initialise '{s.name}' ({t}) with {{src}}")
        assert t is not None
        if t == TENSOR_MAP and init is None:
            self.fail(f"'{s.name}' would be a tensor_map without a value: tensor maps come from the host, as "
                      f"kernel parameters", s.span, hint="use the kernel's tensor_map parameter itself")
        slot = self.b.alloca(t, hint=s.name)
        if init is not None:
            self.b.store(slot, init)
        what = f"'{s.name}' of type {t}"
        self.bind(s.name, Place(slot, t, what))

    def stmt_shared(self, s: A.Shared) -> None:
        t = self.resolve_type(s.type)
        if not isinstance(t, ArrayType):
            self.fail(f"shared '{s.name}' must be an array [T; N], found {t}", s.type.span)
        if not self.decl.is_kernel:
            self.fail("shared arrays are declared in kernels", s.span)
        sym = f"{self.fn.name}__{s.name}"
        n = 1
        base = sym
        while sym in self.L.shared_symbols:
            n += 1
            sym = f"{base}_{n}"
        self.L.shared_symbols.add(sym)
        p = self.b.shared(sym, t)
        size = (sizeof(t) + 15) // 16 * 16
        self.fn.attrs["shared_bytes"] = self.fn.attrs.get("shared_bytes", 0) + size
        declared = self.fn.attrs["shared_declared"] = self.fn.attrs.get("shared_declared", 0) + sizeof(t)
        if (too_much := shared_memory_error(self.target, declared, kernel_display(self.fn))) is not None:
            self.fail(too_much, s.span, hint="use fewer or smaller shared arrays, or a smaller tile")
        self.bind(s.name, Place(p, t, f"'{s.name}'"))

    def stmt_assign(self, s: A.Assign) -> None:
        place = self.lvalue(s.target)
        if s.op == "":
            v = self.rvalue(self.ev(s.value), s.value.span)
        else:
            cur = self.rvalue(place, s.target.span)
            rhs = self.rvalue(self.ev(s.value), s.value.span)
            with self.b.located(s.span):
                v = self.binary(s.op, cur, rhs, s.span, s.op_span)
        self.assign(place, v, s.value.span if s.op == "" else s.span)

    def assign(self, place: Place | LanePlace, v: Any, span: SourceSpan) -> None:
        if isinstance(place, LanePlace):
            p = place.place
            vt = p.type
            assert isinstance(vt, VectorType)
            x = self.coerce(v, vt.elem, span, f"{p.verb} {{src}} to a lane of {p.what}")
            vec = self.b.load(p.ptr)
            self.b.store(p.ptr, self.b.insert(vec, x, place.index))
            return
        if isinstance(place.type, ArrayType):
            self.fail(f"cannot assign a whole array ({place.type})", span,
                      hint="assign its elements one by one")
        prep = "into" if place.verb == "store" else "to"
        x = self.coerce(v, place.type, span, f"{place.verb} {{src}} {prep} {place.what}")
        self.b.store(place.ptr, x)

    def lvalue(self, e: A.Expr) -> Place | LanePlace:
        if isinstance(e, A.Name):
            v = self.lookup(e.id)
            if v is POISON:
                raise Poison()
            if isinstance(v, Place) and v.mutable:
                return v
            self.fail(f"cannot assign to '{e.id}': it is not a var", e.span,
                      hint=f"declare it with var: var {e.id} = ...")
        v = self.ev(e)
        if isinstance(v, Place) and not v.mutable:
            self.fail(f"cannot assign to {v.what}: it is read-only", e.span,
                      hint="copy it into a var array first: var t = ...;")
        if isinstance(v, (Place, LanePlace)):
            return v
        if isinstance(e, A.Field) and isinstance(v, Value) and isinstance(e.base, A.Name) \
                and not isinstance(v.type, VectorType) and hasattr(self.lookup(e.base.id), "type") \
                and type(self.lookup(e.base.id).type).__name__ == "StructType":
            self.fail(f"cannot assign to a field of '{e.base.id}': it is not a var", e.span,
                      hint=f"copy it into a var first: var {e.base.id}2 = {e.base.id};")
        if isinstance(e, (A.Field, A.Index)) and isinstance(v, Value):
            self.fail("cannot assign to a lane of a value that is not a var", e.span,
                      hint="copy the vector into a var first")
        self.fail("cannot assign to this expression", e.span)
        raise AssertionError

    def stmt_if(self, s: A.If) -> None:
        if s.comptime:
            for arm in s.arms:
                c = self.comptime_value(arm.cond, "the condition of a comptime if")
                if not (isinstance(c, CV) and c.kind == "bool"):
                    self.fail(f"the condition of a comptime if must be a compile-time bool, found "
                              f"{type_desc(c) if isinstance(c, CV) else type(c).__name__}", arm.cond.span)
                if c.value:
                    self.block(arm.body.stmts)
                    return
            if s.orelse is not None:
                self.block(s.orelse.stmts)
            return
        saved = self.b.region
        try:
            for k, arm in enumerate(s.arms):
                with self.b.located(arm.span):
                    c = self.condition(arm.cond)
                    then, els = self.b.if_(c)
                with self.b.at(then):
                    self.block(arm.body.stmts)
                self.b.region = els  # the next arm (else if) goes into this else
            if s.orelse is not None:
                self.block(s.orelse.stmts)
        finally:
            self.b.region = saved

    def condition(self, e: A.Expr) -> Value:
        v = self.rvalue(self.ev(e), e.span)
        if isinstance(v, CV) and v.kind == "bool":
            return self.b.const(bool(v.value), BOOL)
        if isinstance(v, Value) and v.type == BOOL:
            return v
        found = type_desc(v)
        hint = "compare it: x != 0" if (isinstance(v, Value) and isinstance(v.type, ScalarType)) or \
            (isinstance(v, CV) and v.kind in ("int", "float")) else None
        self.fail(f"a condition must be bool, found {found}", e.span, hint=hint)
        raise AssertionError

    def stmt_while(self, s: A.While) -> None:
        cond, body = self.b.while_()
        with self.b.at(cond):
            c = self.condition(s.cond)
            self.b.condition(c)
        with self.b.at(body):
            self.block(s.body.stmts)

    def _range_args(self, it: A.Call) -> list[Any]:
        vals = [self.rvalue(self.ev(a), a.span) for a in it.args]
        if len(vals) == 1:
            vals = [CV(0, None), vals[0], CV(1, None)]
        elif len(vals) == 2:
            vals = [vals[0], vals[1], CV(1, None)]
        return vals

    def stmt_for(self, s: A.For) -> None:
        it = s.iter
        if not (isinstance(it, A.Call) and isinstance(it.func, A.Name) and it.func.id == "range") \
                or not 1 <= len(it.args) <= 3:
            self.fail("a for loop iterates over range(...)", it.span)
        if s.comptime:
            self._comptime_for(s, it)
            return
        vals = self._range_args(it)
        bounds = vals[:2] if any(isinstance(v, Value) or (isinstance(v, CV) and v.type is not None)
                                 for v in vals[:2]) else vals
        typed = [v.type for v in bounds if isinstance(v, Value)]
        for v in vals:
            if isinstance(v, Value) and not (isinstance(v.type, ScalarType) and v.type.is_int):
                self.fail(f"range bounds must be integers, found {v.type}", it.span)
        t: ScalarType | None = None
        try:
            for ty in typed:
                t = ty if t is None else promote(t, ty, "range")
        except SemanticError as e:
            self.sem(e, it.span)
        for v in vals:
            if isinstance(v, CV) and v.kind != "int":
                self.fail(f"range bounds must be integers, found {v.describe()}", it.span)
        for v in bounds:
            if isinstance(v, CV) and v.type is not None and t is None:
                t = v.type
        if t is None:
            t = I32
        names = ("start", "end")
        lo, hi = (self.coerce(v, t, it.span, f"use {{src}} as the range {n} ({t})")
                  for v, n in zip(vals, names))
        step = range_step(self, vals[2], t, it.args[2].span if len(it.args) == 3 else it.span)
        with self.b.located(s.span):
            body, iv = self.b.for_(lo, hi, step, hint=s.var)
        with self.b.at(body):
            self.scopes.append({})
            if s.mutable:
                slot = self.b.alloca(t, hint=s.var)
                self.b.store(slot, iv)
                self.bind(s.var, Place(slot, t, f"'{s.var}' of type {t}"))
            else:
                self.bind(s.var, iv)
            self.block(s.body.stmts)
            self.scopes.pop()

    def _comptime_for(self, s: A.For, it: A.Call) -> None:
        vals = []
        for a in it.args:
            v = self.comptime_value(a, "a comptime range bound")
            if not (isinstance(v, CV) and v.kind == "int"):
                self.fail("a comptime range bound must be a compile-time integer", a.span)
            vals.append(v)
        if len(vals) == 1:
            vals = [CV(0, None), vals[0], CV(1, None)]
        elif len(vals) == 2:
            vals.append(CV(1, None))
        t = next((v.type for v in vals if v.type is not None), I32)
        lo, hi, step = (int(v.value) for v in vals)
        if step == 0:
            self.fail("range step is 0", it.span)
        n = max(0, (hi - lo + step - (1 if step > 0 else -1)) // step)
        self.L.unrolled += n
        if self.L.unrolled > UNROLL_BUDGET:
            self.fail(f"comptime for loops unroll more than {UNROLL_BUDGET} iterations in all", it.span,
                      hint="use a runtime loop: for i in range(...)")
        for k in range(lo, hi, step):
            if self.terminated():
                break
            self.scopes.append({s.var: CV(k, t)})
            self.block(s.body.stmts)
            self.scopes.pop()
            if (too_large := unrolled_size_error(self.b.emitted, k)) is not None:
                self.fail(too_large, it.span, hint="use a runtime loop (for i in range(...)) or unroll less")

    def stmt_break(self, s: A.Break) -> None:
        self.b.op("break")

    def stmt_continue(self, s: A.Continue) -> None:
        self.b.op("continue")

    def stmt_return(self, s: A.Return) -> None:
        ret = self.fn.ret
        if s.value is None:
            if ret != VOID:
                self.fail(f"fn '{self.decl.name}' must return a value of type {ret}", s.span)
            self.b.ret()
            return
        if ret == VOID:
            self.fail(f"'{self.decl.name}' returns nothing", s.value.span)
        v = self.rvalue(self.ev(s.value), s.value.span)
        x = self.coerce(v, ret, s.value.span, f"return {{src}} from fn '{self.decl.name}' returning {ret}")
        self.b.ret(x)

def _defined_names(s: A.Stmt) -> list[str]:
    if isinstance(s, (A.Let, A.Var, A.Shared, A.Const)):
        return [s.name]
    return []


#: The visitor's dispatch table: statement node type → its method.
_STATEMENTS: dict[type, Callable[[Any, Any], None]] = {
    A.Block: StatementLowering.stmt_block,
    A.ExprStmt: StatementLowering.stmt_expression,
    A.Let: StatementLowering.stmt_let,
    A.Var: StatementLowering.stmt_var,
    A.Shared: StatementLowering.stmt_shared,
    A.Assign: StatementLowering.stmt_assign,
    A.If: StatementLowering.stmt_if,
    A.While: StatementLowering.stmt_while,
    A.For: StatementLowering.stmt_for,
    A.Break: StatementLowering.stmt_break,
    A.Continue: StatementLowering.stmt_continue,
    A.Return: StatementLowering.stmt_return,
    A.Const: lower_arrays.stmt_const,
}
