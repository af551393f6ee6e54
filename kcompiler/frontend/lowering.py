"""Typed AST to IR: specialisation of compile-time parameters, the type rules of semantic.py applied
to every expression, and IR built with :class:`~kcompiler.ir.Builder` (every op stamped with its
source span).

What happens here and nowhere else: compile-time evaluation (``comptime if`` lowers only the branch
taken; ``for i in comptime range`` is unrolled, each iteration seeing ``i`` as a constant; literals and
compile-time parameters are computed with while they are only that), and specialisation of kernels
and device functions for each set of compile-time values (one IR function each, mangled symbol).
Everything else that optimises (constant folding of run-time values, unrolling, DCE) is the passes'.

Type errors are collected, not raised one by one: an expression that fails reports its error and
abandons its statement (:class:`_Poison`); names it would have defined are poisoned so that their uses
report nothing more.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..diagnostics import CompileError, Diagnostics, SourceSpan
from ..ir import Builder, Function, Module, Region, Value
from ..ir.core import OPS
from ..limits import check_region_depth, deep_recursion, shared_memory_error, unrolled_size_error
from ..ir.types import (BOOL, F32, I32, TENSOR_MAP, U32, U64, VOID, AddressSpace, ArrayType, PointerType,
                        ScalarType, SCALARS, Type, VectorType, elem_of, sizeof)
from . import ast as A
from . import builtins as B
from . import fn_params
from . import hopper, mfma, warp_matrix
from .comptime_defaults import MissingParam, bind_defaults
from .program import ComptimeParam, Program, SourceModule, StaticEvalError, _check_given, comptime_params
from .semantic import (CV, SemanticError, adapts, convert_cv, default_type, fits, fold_binary, fold_unary,
                       promote, widens)

#: Iterations of ``comptime`` for loops one compile may unroll, all loops together.
UNROLL_BUDGET = 1 << 16
#: Largest vector length and array length accepted.
MAX_VEC = 256
MAX_ARRAY = 1 << 26
MAX_ARRAY_BYTES = 1 << 31


class _Poison(Exception):
    """Abandon the current statement: its error was reported."""


# --- what an expression evaluates to, besides CV and ir Values -------------------------------------

@dataclass
class Place:
    """Memory that can be read and written: a var's slot, an array element, a pointer's target.
    ``verb`` words messages: 'assign {src} to {what}' / 'store {src} into {what}'."""

    ptr: Value
    type: Type
    what: str
    verb: str = "assign"
    mutable: bool = True


@dataclass
class LanePlace:
    """Lane ``index`` of the vector in ``place``."""

    place: Place
    index: Value


@dataclass
class TypeRef:
    type: Type


@dataclass
class ModuleRef:
    module: SourceModule
    name: str


@dataclass
class FnRef:
    module: SourceModule
    decl: A.FnDecl
    targs: list | None = None
    tkwargs: list | None = None


@dataclass
class BuiltinRef:
    fn: B.BuiltinFn
    targs: list | None = None
    span: SourceSpan | None = None


@dataclass
class RegRef:
    name: str


class TargetRef:
    pass


class TargetHas:
    pass


class _Void:
    pass


VOIDV = _Void()
POISON = object()


def _mangle_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v) if v >= 0 else f"m{-v}"
    return re.sub(r"[^A-Za-z0-9]+", "_", str(v)).strip("_")


def mangle(base: str, values: dict[str, Any]) -> str:
    """``scale`` with {T: f16, VEC: 4} → ``scale__T_f16__VEC_4`` (a valid C identifier)."""
    if not values:
        return base
    return base + "".join(f"__{k}_{_mangle_value(v)}" for k, v in values.items())


def _type_desc(v: Any) -> str:
    if isinstance(v, CV):
        return v.describe()
    if isinstance(v, Value):
        return str(v.type)
    return "value"


class ModuleLowering:
    """Lowers kernels (and the device functions they call) of one program for one target."""

    def __init__(self, program: Program, target: Any):
        self.program = program
        self.target = target
        self.diag = Diagnostics()
        name = re.sub(r"[^A-Za-z0-9_]", "_", program.main.file.path.rsplit("/", 1)[-1].rsplit(".", 1)[0]) \
            or "module"
        self.module = Module(name=name, attrs={"target": getattr(target, "name", ""),
                                               "arch": getattr(target, "arch", ""),
                                               "warp_size": int(getattr(target, "warp_size", 32))})
        self.instances: dict[tuple, Function | None] = {}
        self.pending: list["FnLowering"] = []
        self.symbols: set[str] = set()
        self.shared_symbols: set[str] = set()
        self.unrolled = 0
        self.skip_bodies: set[int] = set()  # id() of declarations whose bodies are not lowered (check)
        self.silenced: frozenset = frozenset()  # spans the loader reported undefined names at (check)

    def unique(self, name: str) -> str:
        base, n = name, 1
        while name in self.symbols:
            n += 1
            name = f"{base}_{n}"
        self.symbols.add(name)
        return name

    def error(self, msg: str, span: SourceSpan | None, hint: str | None = None) -> None:
        if span not in self.silenced:  # else the loader said it; the caller's _Poison is the error type
            self.diag.error(msg, span, hint)

    # --- instances --------------------------------------------------------------------------------
    def kernel(self, name: str, values: dict[str, Any]) -> Function | None:
        decl = self.program.kernels[name]
        sig = self.program.signature(name)
        vals: dict[str, Any] = {}
        for c in sig.comptime:
            if c.name in values:
                try:
                    vals[c.name] = _check_given(name, c, values[c.name])
                except TypeError as e:
                    self.error(str(e), c.span)
                    return None
        try:
            vals = bind_defaults(sig.comptime, vals)
        except MissingParam as e:
            c = e.param
            self.error(f"kernel '{name}' needs a value for compile-time parameter '{c.name}'", c.span,
                       hint=f"give it when compiling (-P {c.name}=...) or at launch ({c.name}=...)")
            return None
        except StaticEvalError as e:
            self.error(e.message, e.span)
            return None
        extra = sorted(set(values) - {c.name for c in sig.comptime})
        if extra:
            self.error(f"kernel '{name}' has no compile-time parameter {', '.join(extra)}", decl.name_span)
            return None
        return self.instance(self.program.main, decl, vals, None)

    def instance(self, mod: SourceModule, decl: A.FnDecl, values: dict[str, Any],
                 call_span: SourceSpan | None, caller: "FnLowering | None" = None) -> Function | None:
        key = (mod.key, decl.name, tuple((k, v) for k, v in values.items()))
        if key in self.instances:
            return self.instances[key]
        base = mod.prefix + decl.name
        symbol = self.unique(mangle(base, values) if decl.cparams else base)
        if decl.is_kernel and symbol in getattr(self.target, "reserved_symbols", ()):
            self.error(self.target.reserved_kernel_message(decl.name, symbol), decl.name_span,
                       hint="rename the kernel")
        fl = FnLowering(self, mod, decl, values)
        fl.called_from = (call_span, caller)
        fn = fl.declare(symbol)
        self.instances[key] = fn
        if fn is not None:
            self.module.functions.append(fn)
            if id(decl) not in self.skip_bodies:
                self.pending.append(fl)
        return fn

    def drain(self) -> None:
        while self.pending:
            fl = self.pending.pop(0)
            fl.lower_body()

    def finish(self) -> Module:
        self.drain()
        if self.diag.has_errors:
            seen, items = set(), []
            for d in self.diag.items:
                k = (d.message, str(d.span), d.hint)
                if k not in seen:
                    seen.add(k)
                    items.append(d)
            raise CompileError(items)
        return self.module


def _literal_text(value: Any) -> str:
    """A literal as the language spells it (``true``, not Python's ``True``)."""
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)


class FnLowering:
    """Lowers one specialisation of one kernel or fn."""

    def __init__(self, L: ModuleLowering, mod: SourceModule, decl: A.FnDecl, values: dict[str, Any]):
        self.L = L
        self.mod = mod
        self.decl = decl
        self.values = values
        self.target = L.target
        self.fn: Function | None = None
        self.b = Builder(Region())  # a scratch region until the function exists
        self.scopes: list[dict[str, Any]] = []
        self.cparams: list[ComptimeParam] = comptime_params(decl)
        #: where this specialisation was first called, and by which one (None for a kernel)
        self.called_from: tuple[SourceSpan | None, "FnLowering | None"] = (None, None)

    def call_chain(self) -> str:
        """'exp[T = f64] called at a.kc:3:5, from k at a.kc:9:12': how this specialisation was
        reached, for errors that depend on the compile-time values."""
        parts, fl = [], self
        while fl is not None:
            span, caller = fl.called_from
            vals = ", ".join(f"{k} = {_literal_text(v) if not isinstance(v, Type) else v}"
                             for k, v in fl.values.items())
            name = fl.decl.name + (f"[{vals}]" if vals else "")
            parts.append(f"{name}" + (f" called at {span}" if span is not None else ""))
            fl = caller
        return ", from ".join(parts)

    # --- errors -----------------------------------------------------------------------------------
    def fail(self, msg: str, span: SourceSpan | None, hint: str | None = None):
        self.L.error(msg, span, hint)
        raise _Poison()

    def sem(self, err: SemanticError, span: SourceSpan | None):
        self.fail(err.message, span, err.hint)

    # --- the signature ----------------------------------------------------------------------------
    def declare(self, symbol: str) -> Function | None:
        d = self.decl
        top: dict[str, Any] = {}
        self.scopes = [top]
        ok = True
        for c in sorted(self.cparams, key=lambda c: c.kind == "fn"):  # fns last: signatures use the others
            v = self.values[c.name]
            if c.kind == "fn":
                try:
                    top[c.name] = fn_params.bind(self, c, v)
                except _Poison:
                    ok = False
            elif c.kind == "type":
                top[c.name] = TypeRef(v)
            elif c.kind == "bool":
                top[c.name] = CV(bool(v), BOOL)
            else:
                top[c.name] = CV(int(v), c.type or I32)
        params: list[Value] = []
        for p in d.params:
            try:
                t = self.resolve_type(p.type)
                if isinstance(t, ArrayType):
                    self.fail(f"parameter '{p.name}' is an array ({t}); arrays are passed by pointer",
                              p.type.span, hint=f"write {p.name}: ptr<{t.elem}>")
                te = t.elem if isinstance(t, VectorType) else t
                if d.is_kernel and isinstance(te, ScalarType) and te.is_minifloat:
                    self.fail(f"kernel parameter '{p.name}' is a {t}: small floats are passed in arrays",
                              p.type.span, hint=f"pass an f32 and convert inside ({te}(x)), or a ptr<{te}>")
            except _Poison:
                ok = False
                continue
            params.append(Value(t, p.name))
        ret: Type = VOID
        if d.ret is not None and not d.is_kernel:
            try:
                ret = self.resolve_type(d.ret)
                if isinstance(ret, ArrayType):
                    self.fail("a fn cannot return an array", d.ret.span, hint="write into a ptr parameter")
            except _Poison:
                ok = False
        if not ok:
            return None
        fn = Function(symbol, params, ret, "kernel" if d.is_kernel else "device", span=d.name_span)
        fn.attrs["source_name"] = d.name if self.mod is self.L.program.main else f"{self.mod.name}.{d.name}"
        fn.attrs["params"] = {k: str(v).lower() if isinstance(v, bool) else str(v)
                              for k, v in self.values.items()}
        fn.attrs["param_names"] = [p.name for p in d.params]
        self.fn = fn
        self.b = Builder(fn.body, d.span)
        return fn

    def lower_body(self) -> None:
        assert self.fn is not None and self.b is not None
        args = {p.name: v for p, v in zip(self.decl.params, self.fn.params)}
        self.scopes.append(dict(args))
        self.block(self.decl.body.stmts)
        self.scopes.pop()

    # --- scopes -----------------------------------------------------------------------------------
    def lookup(self, name: str) -> Any:
        for s in reversed(self.scopes):
            if name in s:
                return s[name]
        return None

    def bind(self, name: str, v: Any) -> None:
        self.scopes[-1][name] = v

    # --- types ------------------------------------------------------------------------------------
    def resolve_type(self, t: Any) -> Type:
        if isinstance(t, A.Name):
            t = A.TypeName(t.id, span=t.span)
        if isinstance(t, A.TypeName):
            if t.name in SCALARS and not isinstance(self.lookup(t.name), TypeRef):
                return SCALARS[t.name]
            v = self.lookup(t.name)
            if isinstance(v, TypeRef):
                return v.type
            if t.name in SCALARS:
                return SCALARS[t.name]
            if t.name == "tensor_map":
                return TENSOR_MAP
            self.fail(f"'{t.name}' is not a type", t.span)
        if isinstance(t, A.PtrTypeExpr):
            pointee = self.resolve_type(t.pointee)
            if pointee == TENSOR_MAP:
                self.fail("tensor_map lives in no memory a program addresses: it is a kernel parameter, passed "
                          "by value", t.span, hint="take a tensor_map parameter instead of a pointer to one")
            space = t.space or "global"
            if space not in B.ADDRESS_SPACES:
                self.fail(f"unknown address space '{space}'", t.space_span or t.span)
            return PointerType(pointee, AddressSpace(space))
        if isinstance(t, A.VecTypeExpr):
            elem = self.resolve_type(t.elem)
            if not isinstance(elem, ScalarType):
                self.fail(f"vector lanes must be scalars, found {elem}", t.elem.span)
            n = self.comptime_int(t.count, "a vector length")
            if not 1 <= n <= MAX_VEC:
                self.fail(f"vector length {n} is out of range (1 to {MAX_VEC})", t.count.span)
            return VectorType(elem, n)
        if isinstance(t, A.ArrayTypeExpr):
            elem = self.resolve_type(t.elem)
            if elem == TENSOR_MAP:
                self.fail("there are no arrays of tensor_map: a tensor map is a kernel parameter", t.span,
                          hint="declare one tensor_map parameter for each")
            n = self.comptime_int(t.count, "an array length")
            if not 1 <= n <= MAX_ARRAY:
                self.fail(f"array length {n} is out of range (1 to {MAX_ARRAY})", t.count.span)
            at = ArrayType(elem, n)
            if isinstance(elem, (ScalarType, VectorType, PointerType, ArrayType)) and sizeof(at) > MAX_ARRAY_BYTES:
                self.fail(f"{at} takes {sizeof(at)} bytes; arrays are limited to {MAX_ARRAY_BYTES} bytes", t.span)
            return at
        self.fail("expected a type", getattr(t, "span", None))
        raise AssertionError

    def comptime_value(self, e: A.Expr, what: str) -> Any:
        """Evaluate ``e`` at compile time (a CV, TypeRef, ...) without emitting IR into the function."""
        with self.b.at(Region()) as r:
            v = self.ev(e)
            if isinstance(v, (Place, LanePlace)) or isinstance(v, Value) or r.ops:
                self.fail(f"{what} must be a compile-time constant", e.span,
                          hint="use literals, compile-time parameters, warp_size and target facts")
        return v

    def comptime_int(self, e: A.Expr, what: str) -> int:
        v = self.comptime_value(e, what)
        if not (isinstance(v, CV) and v.kind == "int"):
            found = _type_desc(v) if isinstance(v, CV) else "a " + type(v).__name__.lower()
            self.fail(f"{what} must be a compile-time integer, found {found}", e.span)
        return int(v.value)

    # --- statements -------------------------------------------------------------------------------
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
        with self.b.located(s.span):
            try:
                getattr(self, "s_" + type(s).__name__)(s)
            except _Poison:
                for n in _defined_names(s):
                    self.bind(n, POISON)

    def s_Block(self, s: A.Block) -> None:
        self.block(s.stmts)

    def s_ExprStmt(self, s: A.ExprStmt) -> None:
        v = self.ev(s.expr)
        if isinstance(v, LanePlace):
            self.rvalue(v, s.expr.span)

    def s_Let(self, s: A.Let) -> None:
        v = self.rvalue(self.ev(s.value), s.value.span)
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

    def s_Var(self, s: A.Var) -> None:
        t = self.resolve_type(s.type) if s.type is not None else None
        init = None
        if s.value is not None:
            if isinstance(t, ArrayType):
                self.fail(f"array var '{s.name}' cannot have an initial value", s.value.span,
                          hint="assign its elements, e.g. in a comptime for loop")
            init = self.rvalue(self.ev(s.value), s.value.span)
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

    def s_Shared(self, s: A.Shared) -> None:
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
        if (too_much := shared_memory_error(self.target, declared, self.fn.name)) is not None:
            self.fail(too_much, s.span, hint="use fewer or smaller shared arrays, or a smaller tile")
        self.bind(s.name, Place(p, t, f"'{s.name}'"))

    def s_Assign(self, s: A.Assign) -> None:
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
                raise _Poison()
            if isinstance(v, Place):
                return v
            self.fail(f"cannot assign to '{e.id}': it is not a var", e.span,
                      hint=f"declare it with var: var {e.id} = ...")
        v = self.ev(e)
        if isinstance(v, (Place, LanePlace)):
            return v
        if isinstance(e, (A.Field, A.Index)) and isinstance(v, Value):
            self.fail("cannot assign to a lane of a value that is not a var", e.span,
                      hint="copy the vector into a var first")
        self.fail("cannot assign to this expression", e.span)
        raise AssertionError

    def s_If(self, s: A.If) -> None:
        if s.comptime:
            for arm in s.arms:
                c = self.comptime_value(arm.cond, "the condition of a comptime if")
                if not (isinstance(c, CV) and c.kind == "bool"):
                    self.fail(f"the condition of a comptime if must be a compile-time bool, found "
                              f"{_type_desc(c) if isinstance(c, CV) else type(c).__name__}", arm.cond.span)
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
        found = _type_desc(v)
        hint = "compare it: x != 0" if (isinstance(v, Value) and isinstance(v.type, ScalarType)) or \
            (isinstance(v, CV) and v.kind in ("int", "float")) else None
        self.fail(f"a condition must be bool, found {found}", e.span, hint=hint)
        raise AssertionError

    def s_While(self, s: A.While) -> None:
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

    def s_For(self, s: A.For) -> None:
        it = s.iter
        if not (isinstance(it, A.Call) and isinstance(it.func, A.Name) and it.func.id == "range") \
                or not 1 <= len(it.args) <= 3:
            self.fail("a for loop iterates over range(...)", it.span)
        if s.comptime:
            self._comptime_for(s, it)
            return
        vals = self._range_args(it)
        typed = [v.type for v in vals if isinstance(v, Value)]
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
            if isinstance(v, CV) and v.type is not None and t is None:
                t = v.type
        if t is None:
            t = I32
        names = ("start", "end", "step")
        lo, hi, step = (self.coerce(v, t, it.span, f"use {{src}} as the range {n} ({t})")
                        for v, n in zip(vals, names))
        if isinstance(vals[2], CV) and vals[2].value == 0:
            self.fail("range step is 0", it.args[2].span if len(it.args) == 3 else it.span)
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

    def s_Break(self, s: A.Break) -> None:
        self.b.op("break")

    def s_Continue(self, s: A.Continue) -> None:
        self.b.op("continue")

    def s_Return(self, s: A.Return) -> None:
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

    # --- values -----------------------------------------------------------------------------------
    def rvalue(self, v: Any, span: SourceSpan | None) -> Any:
        """A CV or an ir Value: loads from places, decays arrays to pointers."""
        if isinstance(v, (CV, Value)):
            return v
        if isinstance(v, Place):
            if isinstance(v.type, ArrayType):
                pt = v.ptr.type
                assert isinstance(pt, PointerType)
                return self.b.ptrcast(v.ptr, v.type.elem)
            return self.b.load(v.ptr)
        if isinstance(v, LanePlace):
            return self.b.extract(self.b.load(v.place.ptr), v.index)
        if v is VOIDV:
            self.fail("this call returns nothing; its value cannot be used", span)
        if isinstance(v, TypeRef):
            self.fail(f"{v.type} is a type, not a value", span, hint=f"to convert, write {v.type}(x)")
        if isinstance(v, RegRef):
            self.fail(f"{v.name} has three dimensions", span, hint=f"write {v.name}.x, {v.name}.y or {v.name}.z")
        if isinstance(v, FnRef):
            self.fail(f"fn '{v.decl.name}' is not a value; call it", span)
        if isinstance(v, fn_params.BoundFn):
            self.fail(f"'{v.param}' is a compile-time fn ('{v.value.shown}'), not a value; call it", span)
        if isinstance(v, BuiltinRef):
            self.fail(f"'{v.fn.name}' is a builtin function, not a value; call it", span, hint=v.fn.doc or None)
        if isinstance(v, ModuleRef):
            self.fail(f"'{v.name}' is a module, not a value", span)
        if isinstance(v, (TargetRef, TargetHas)):
            self.fail("target is a compile-time object: use target.name, target.arch, target.warp_size or "
                      "target.has(\"feature\")", span)
        self.fail("not a value", span)

    def materialise(self, v: Any, span: SourceSpan | None, want: Type | None = None) -> Value:
        if isinstance(v, Value):
            return v
        assert isinstance(v, CV)
        if v.kind == "str":
            self.fail("a string is not a value here", span)
        try:
            t = want if want is not None else default_type(v)
        except SemanticError as e:
            self.sem(e, span)
        elem = t.elem if isinstance(t, VectorType) else t
        if not isinstance(elem, ScalarType):
            self.fail(f"expected {t}, found {v.describe()}", span)
        c = convert_cv(v, elem)
        return self.b.const(c.value, t)

    def coerce(self, v: Any, dst: Type, span: SourceSpan | None, template: str) -> Value:
        """``v`` converted implicitly to ``dst`` (widening only); else an error worded by ``template``
        ('{src}' is replaced by the found type)."""
        if isinstance(v, CV):
            elem = dst.elem if isinstance(dst, VectorType) else dst
            if isinstance(elem, ScalarType):
                if adapts(v, elem) or (v.type is not None and widens(v.type, elem)):
                    return self.materialise(v, span, dst)
            src = v.describe() if v.type is not None else f"{v.describe()} {v.value!r}"
            if v.kind == "int" and isinstance(elem, ScalarType) and elem.is_int:
                self.fail(f"cannot {template.format(src=src)}: {v.value} does not fit in {elem}", span)
            hint = f"write {dst}({_literal_text(v.value)}) to convert" if isinstance(dst, ScalarType) and v.kind != "str" else None
            self.fail(f"cannot {template.format(src=src)}", span, hint=hint)
        assert isinstance(v, Value)
        t = v.type
        if t == dst:
            return v
        if widens(t, dst):
            return self.b.cast(v, dst)
        if isinstance(dst, VectorType) and isinstance(t, ScalarType) and widens(t, dst.elem):
            return self.b.splat(self.b.cast(v, dst.elem), dst.count)
        hint = None
        if isinstance(dst, (ScalarType, VectorType)) and isinstance(t, (ScalarType, VectorType)):
            hint = f"write {dst}(x) to convert"
            if isinstance(t, VectorType) != isinstance(dst, VectorType):
                hint = None
        elif isinstance(dst, PointerType) and isinstance(t, PointerType):
            if dst.pointee == t.pointee:
                hint = "pointers into different address spaces do not convert"
            else:
                hint = f"write {dst}(p) to reinterpret the pointer"
        self.fail(f"cannot {template.format(src=t)}", span, hint=hint)
        raise AssertionError

    # --- expressions ------------------------------------------------------------------------------
    def ev(self, e: A.Expr) -> Any:
        with self.b.located(e.span):
            return getattr(self, "e_" + type(e).__name__)(e)

    def e_IntLit(self, e: A.IntLit) -> CV:
        if e.suffix:
            t = SCALARS[e.suffix]
            if not fits(e.value, t):
                self.fail(f"{e.value} does not fit in {t}", e.span)
            return CV(e.value, t)
        if e.value > (1 << 64) - 1:
            self.fail(f"integer literal {e.value} is too large (more than 64 bits)", e.span)
        return CV(e.value, None)

    def e_FloatLit(self, e: A.FloatLit) -> CV:
        if e.suffix:
            return convert_cv(CV(e.value), SCALARS[e.suffix])
        return CV(e.value, None)

    def e_BoolLit(self, e: A.BoolLit) -> CV:
        return CV(e.value, BOOL)

    def e_StrLit(self, e: A.StrLit) -> CV:
        return CV(e.value, None)

    def e_Name(self, e: A.Name) -> Any:
        v = self.lookup(e.id)
        if v is POISON:
            raise _Poison()
        if v is not None:
            return v
        mod = self.mod
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
        self.fail(f"unknown name '{e.id}'", e.span)

    def e_Field(self, e: A.Field) -> Any:
        base = self.ev(e.base)
        name = e.name
        if isinstance(base, ModuleRef):
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

    def e_Index(self, e: A.Index) -> Any:
        base = self.ev(e.base)
        if isinstance(base, BuiltinRef):
            if base.fn.brackets == "no":
                self.fail(f"{base.fn.name} takes no compile-time arguments", e.span)
            return BuiltinRef(base.fn, list(e.args) + list(e.kwargs), e.span)
        if isinstance(base, FnRef):
            return FnRef(base.module, base.decl, list(e.args), list(e.kwargs))
        if isinstance(base, TypeRef):
            self.fail(f"{base.type} is a type and cannot be indexed", e.span)
        if len(e.args) != 1 or e.kwargs or not _is_expr(e.args[0]):
            self.fail("an index is one integer expression: p[i]", e.span)
        idx_e = e.args[0]
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
        self.fail(f"cannot index a value of type {_type_desc(base)}", e.base.span,
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

    def e_TypeCall(self, e: A.TypeCall) -> Any:
        t = self.resolve_type(e.type)
        return self.convert(t, e.args, e)

    def e_Call(self, e: A.Call) -> Any:
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
                self.fail("target.has takes a string: target.has(\"wgmma\")", e.args[0].span)
            return CV(bool(self.target.has(v.value)), BOOL)
        if isinstance(f, RegRef):
            self.fail(f"{f.name} is not a function", e.func.span, hint=f"write {f.name}.x")
        self.fail(f"cannot call a value of type {_type_desc(self.rvalue(f, e.func.span))}", e.func.span)

    # binary and unary operators
    def e_Unary(self, e: A.Unary) -> Any:
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

    def e_Binary(self, e: A.Binary) -> Any:
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
        self.fail(f"'{op}' needs bool operands, found {_type_desc(v)}", e.span,
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
                        raise SemanticError(f"cannot apply '{op}' to {_type_desc(a)} and {_type_desc(b)}")
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
                        self.fail(f"cannot apply '{op}' to {p.type} and {_type_desc(i)}", span,
                                  hint="pointer arithmetic takes an integer: p + i")
                    if isinstance(p.type.pointee, ArrayType):
                        p = self.b.ptrcast(p, p.type.pointee.elem)
                    return self.b.elemptr(p, idx)
                self.fail(f"cannot apply '{op}' to {_type_desc(a)} and {_type_desc(b)}", span,
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

    # --- conversions ------------------------------------------------------------------------------
    def convert(self, t: Type, args: list[A.Expr], e: Any) -> Any:
        if isinstance(t, VectorType) and len(args) == t.count and len(args) > 1:
            elems = []
            for a in args:
                v = self.rvalue(self.ev(a), a.span)
                elems.append(self.convert_value(v, t.elem, a.span))
            return self.b.vec_build([self.materialise(x, e.span, t.elem) for x in elems])
        if len(args) != 1:
            n = f"1 or {t.count}" if isinstance(t, VectorType) else "1"
            self.fail(f"a conversion to {t} takes {n} argument{'s' if n != '1' else ''}, found {len(args)}",
                      e.span)
        v = self.rvalue(self.ev(args[0]), args[0].span)
        return self.convert_value(v, t, args[0].span)

    def convert_value(self, v: Any, t: Type, span: SourceSpan, saturate: bool = False) -> Any:
        """Explicit conversion (C's value conversions; vectors elementwise; a scalar splats). A small
        float (8 bits and fewer) converts from and to the floats only; ``saturate`` (conversions into
        one) clamps overflows to its largest finite value."""
        te = t.elem if isinstance(t, VectorType) else t
        ve = None if isinstance(v, CV) else (v.type.elem if isinstance(v.type, VectorType) else v.type)
        if isinstance(te, ScalarType) and (te.is_minifloat or (isinstance(ve, ScalarType) and ve.is_minifloat)):
            if isinstance(v, CV):
                if v.kind not in ("int", "float") or (v.type is not None and not v.type.is_float):
                    self.fail(f"cannot convert {v.describe()} to {t}", span, hint="write a float: 1.0")
                v = self.materialise(CV(float(v.value), SCALARS["f32"]), span)
                ve = v.type
            other = te if not te.is_minifloat else ve
            if isinstance(other, ScalarType) and not (other.is_float or other.is_minifloat):
                self.fail(f"cannot convert {v.type} to {t}: small floats convert to and from "
                          f"f16, bf16, f32 and f64 only", span, hint="convert through f32: f32(x)")
            if isinstance(t, VectorType) and isinstance(v.type, ScalarType):
                return self.b.splat(self.b.value("cast", [v], t.elem, saturate=saturate), t.count)
            if isinstance(t, VectorType) and (not isinstance(v.type, VectorType) or v.type.count != t.count):
                self.fail(f"cannot convert {v.type} to {t}", span)
            return self.b.value("cast", [v], t, saturate=saturate) if saturate else self.b.cast(v, t)
        if isinstance(t, ScalarType):
            if isinstance(v, CV):
                try:
                    return convert_cv(v, t)
                except SemanticError as err:
                    self.sem(err, span)
            if isinstance(v.type, ScalarType):
                return self.b.cast(v, t)
            self.fail(f"cannot convert {v.type} to {t}", span,
                      hint="take a lane: v.x, v[i]" if isinstance(v.type, VectorType) else None)
        if isinstance(t, VectorType):
            if isinstance(v, CV):
                c = self.convert_value(v, t.elem, span)
                return self.materialise(c, span, t)
            if isinstance(v.type, VectorType):
                if v.type.count != t.count:
                    self.fail(f"cannot convert {v.type} to {t}: lengths differ", span)
                return self.b.cast(v, t)
            if isinstance(v.type, ScalarType):
                return self.b.splat(self.b.cast(v, t.elem), t.count)
            self.fail(f"cannot convert {v.type} to {t}", span)
        if isinstance(t, PointerType):
            if isinstance(v, Value) and isinstance(v.type, PointerType):
                if v.type.space != t.space:
                    self.fail(f"cannot convert {v.type} to {t}: address spaces differ", span)
                return self.b.ptrcast(v, t.pointee)
            self.fail(f"cannot convert {_type_desc(v)} to {t}", span)
        self.fail(f"cannot convert to {t}", span)

    # --- calls ------------------------------------------------------------------------------------
    def call_fn(self, f: FnRef, e: A.Call) -> Any:
        decl, mod = f.decl, f.module
        if decl.is_kernel:
            self.fail(f"'{decl.name}' is a kernel; kernels are launched, not called", e.func.span)
        if len(e.args) != len(decl.params) or e.kwargs:
            self.fail(f"fn '{decl.name}' takes {len(decl.params)} arguments, found "
                      f"{len(e.args) + len(e.kwargs)}", e.span)
        args = [self.rvalue(self.ev(a), a.span) for a in e.args]
        cps = comptime_params(decl)
        byname = {c.name: c for c in cps}
        values: dict[str, Any] = {}
        targs = list(f.targs or [])
        if len(targs) > len(cps):
            self.fail(f"fn '{decl.name}' takes {len(cps)} compile-time arguments, found {len(targs)}", e.func.span)
        for c, a in zip(cps, targs):
            values[c.name] = self.comptime_arg(c, a, decl)
        for k in f.tkwargs or []:
            c = byname.get(k.name)
            if c is None:
                self.fail(f"fn '{decl.name}' has no compile-time parameter '{k.name}'", k.span)
            if c.name in values:
                self.fail(f"compile-time parameter '{k.name}' is given twice", k.span)
            values[c.name] = self.comptime_arg(c, k.value, decl)
        # inference from the argument types
        inferred: dict[str, Any] = {}
        from .program import _unify
        for p, v in zip(decl.params, args):
            t = v.type if isinstance(v, Value) else (v.type if isinstance(v, CV) and v.type is not None else None)
            if t is None:
                continue
            for name, val in _unify(p.type, t, byname):
                if name in values:
                    continue
                if name in inferred and inferred[name] != val:
                    self.fail(f"fn '{decl.name}': {name} would be both {inferred[name]} and {val}", e.span,
                              hint="convert the arguments to one type, or give it: "
                                   f"{decl.name}[{name} = ...](...)")
                inferred[name] = val
        for p, v in zip(decl.params, args):  # untyped literals passed as a bare T: their default type
            if isinstance(v, CV) and v.type is None and isinstance(p.type, A.TypeName):
                c = byname.get(p.type.name)
                if c is not None and c.kind == "type" and c.name not in values and c.name not in inferred:
                    try:
                        inferred[c.name] = default_type(v)
                    except SemanticError as err:
                        self.sem(err, e.span)
        values.update({k: v for k, v in inferred.items() if k not in values})
        try:
            ordered = bind_defaults(cps, values)
        except MissingParam as m:
            self.fail(f"cannot infer compile-time parameter '{m.param.name}' of fn '{decl.name}'",
                      e.span, hint=f"give it: {decl.name}[{m.param.name} = ...](...)")
        except StaticEvalError as err:
            self.fail(err.message, err.span)
        fn = self.L.instance(mod, decl, ordered, e.span, self)
        if fn is None:
            raise _Poison()
        conv = []
        for k, (p, v, a) in enumerate(zip(fn.params, args, e.args)):
            conv.append(self.coerce(v, p.type, a.span,
                                    f"pass {{src}} as argument {k + 1} ('{p.hint}': {p.type}) of '{decl.name}'"))
        r = self.b.call(fn.name, conv, fn.ret)
        return VOIDV if r is None else r

    def comptime_arg(self, c: ComptimeParam, a: Any, decl: A.FnDecl) -> Any:
        if c.kind == "fn":
            return fn_params.comptime_arg(self, c, a, decl)
        if c.kind == "type":
            if isinstance(a, (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr)):
                return self.resolve_type(a)
            v = self.comptime_value(a, f"compile-time argument {c.name}")
            if isinstance(v, TypeRef):
                return v.type
            self.fail(f"compile-time parameter '{c.name}' of '{decl.name}' is a type", a.span)
        if not _is_expr(a):
            self.fail(f"compile-time parameter '{c.name}' of '{decl.name}' is a{' bool' if c.kind == 'bool' else 'n integer'}, "
                      "not a type", a.span)
        v = self.comptime_value(a, f"compile-time argument {c.name}")
        if c.kind == "bool":
            if isinstance(v, CV) and v.kind == "bool":
                return bool(v.value)
            self.fail(f"compile-time parameter '{c.name}' of '{decl.name}' is a bool", a.span)
        if isinstance(v, CV) and v.kind == "int":
            if c.type is not None and not fits(v.value, c.type):
                self.fail(f"{v.value} does not fit in {c.type} (parameter '{c.name}')", a.span)
            return int(v.value)
        self.fail(f"compile-time parameter '{c.name}' of '{decl.name}' is an integer", a.span)

    # --- builtins ---------------------------------------------------------------------------------
    def builtin(self, f: BuiltinRef, e: A.Call) -> Any:
        fn = f.fn
        n = len(e.args)
        if not fn.min_args <= n <= fn.max_args:
            want = str(fn.min_args) if fn.min_args == fn.max_args else f"{fn.min_args} to {fn.max_args}"
            self.fail(f"{fn.name} takes {want} argument{'s' if fn.max_args != 1 else ''}, found {n}", e.span,
                      hint=fn.doc or None)
        kw = {}
        for k in e.kwargs:
            if k.name not in fn.kwargs:
                self.fail(f"{fn.name} has no keyword argument '{k.name}'", k.span,
                          hint=("it takes: " + ", ".join(fn.kwargs)) if fn.kwargs else None)
            kw[k.name] = k
        if fn.brackets == "required" and f.targs is None:
            self.fail(f"{fn.name} needs {fn.bracket_what} in brackets", e.func.span, hint=fn.doc or None)
        name = fn.name
        if name in warp_matrix.FEATURES:
            return warp_matrix.lower_builtin(self, f, e, kw)
        if name in mfma.FEATURES:
            return mfma.lower_builtin(self, f, e, kw)
        if name in hopper.FEATURES:
            return hopper.lower_builtin(self, f, e, kw)
        h = getattr(self, "b_" + name, None)
        if h is not None:
            return h(f, e, kw)
        if name.startswith("atomic_"):
            return self.b_atomic(f, e, kw)
        if name.startswith("shuffle"):
            return self.b_shuffle(f, e, kw)
        return self.b_math(f, e, kw)

    def _str_kw(self, kw: dict, name: str, allowed: tuple, default: str) -> str:
        k = kw.get(name)
        if k is None:
            return default
        v = self.comptime_value(k.value, name)
        if not (isinstance(v, CV) and v.kind == "str" and v.value in allowed):
            self.fail(f"{name} must be one of: {', '.join(repr(a) for a in allowed)}", k.value.span)
        return v.value

    def _bool_kw(self, kw: dict, name: str, default: bool) -> bool:
        k = kw.get(name)
        if k is None:
            return default
        v = self.comptime_value(k.value, name)
        if not (isinstance(v, CV) and v.kind == "bool"):
            self.fail(f"{name} must be a compile-time bool (true or false)", k.value.span)
        return bool(v.value)

    def b_convert(self, f, e, kw):
        """convert[T](x, saturate = false): T(x), choosing what a small float does on overflow."""
        t = self._type_arg(f)
        v = self.rvalue(self.ev(e.args[0]), e.args[0].span)
        saturate = self._bool_kw(kw, "saturate", False)
        te = t.elem if isinstance(t, VectorType) else t
        if saturate and not (isinstance(te, ScalarType) and te.is_minifloat):
            self.fail(f"saturate applies to conversions into small floats, not to {t}", kw["saturate"].span)
        return self.convert_value(v, t, e.args[0].span, saturate=saturate)

    def _type_arg(self, f: BuiltinRef) -> Type:
        args = f.targs or []
        if len(args) != 1 or isinstance(args[0], A.KwArg):
            self.fail(f"{f.fn.name} takes one type in brackets", f.span, hint=f.fn.doc or None)
        a = args[0]
        if isinstance(a, (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr)):
            return self.resolve_type(a)
        v = self.comptime_value(a, "a type argument")
        if isinstance(v, TypeRef):
            return v.type
        self.fail(f"{f.fn.name}[...] takes a type", a.span)

    def _value(self, a: A.Expr) -> Value:
        return self.materialise(self.rvalue(self.ev(a), a.span), a.span)

    def _pointer(self, a: A.Expr, what: str) -> Value:
        v = self.rvalue(self.ev(a), a.span)
        if not (isinstance(v, Value) and isinstance(v.type, PointerType)):
            self.fail(f"{what} needs a pointer, found {_type_desc(v)}", a.span)
        return v

    def b_barrier(self, f, e, kw):
        self.b.barrier()
        return VOIDV

    def b_fence(self, f, e, kw):
        if e.args:
            if "scope" in kw:
                self.fail("scope is given twice", e.span)
            v = self.comptime_value(e.args[0], "scope")
            if not (isinstance(v, CV) and v.kind == "str" and v.value in B.FENCE_SCOPES):
                self.fail(f"scope must be one of: {', '.join(repr(a) for a in B.FENCE_SCOPES)}", e.args[0].span)
            scope = v.value
        else:
            scope = self._str_kw(kw, "scope", B.FENCE_SCOPES, "device")
        self.b.op("fence", scope=scope)
        return VOIDV

    def b_atomic_load(self, f, e, kw):
        p, order, scope = self._atomic_access(f, e, kw, ("relaxed", "acquire", "seq_cst"))
        return self.b.value("atomic_load", [p], p.type.pointee, order=order, scope=scope)

    def b_atomic_store(self, f, e, kw):
        p, order, scope = self._atomic_access(f, e, kw, ("relaxed", "release", "seq_cst"))
        v = self.coerce(self.rvalue(self.ev(e.args[1]), e.args[1].span), p.type.pointee, e.args[1].span,
                        f"store {{src}} into {p.type}")
        self.b.op("atomic_store", [p, v], order=order, scope=scope)
        return VOIDV

    def _atomic_access(self, f, e, kw, orders: tuple[str, ...]):
        """The pointer, order and scope of atomic_load/atomic_store: scalars of 8 to 64 bits."""
        p = self._pointer(e.args[0], f.fn.name)
        t = p.type.pointee
        if not (isinstance(t, ScalarType) and t.bits in (8, 16, 32, 64) and not t.is_bool):
            self.fail(f"{f.fn.name} works on integers and floats of 8 to 64 bits, found {p.type}", e.args[0].span)
        order = self._str_kw(kw, "order", orders, "relaxed")
        scope = self._str_kw(kw, "scope", B.FENCE_SCOPES, "device")
        return p, order, scope

    def b_atomic(self, f, e, kw):
        op = f.fn.name[len("atomic_"):]
        p = self._pointer(e.args[0], f.fn.name)
        t = p.type.pointee
        if not (isinstance(t, ScalarType) and t.bits in (32, 64) and not t.is_bool):
            self.fail(f"{f.fn.name} works on 32- and 64-bit integers and floats, found {p.type}", e.args[0].span)
        if op in ("and", "or", "xor") and t.is_float:
            self.fail(f"{f.fn.name} needs an integer pointee, found {p.type}", e.args[0].span,
                      hint=f"reinterpret it: ptr<u{t.bits}>(p)")
        order = self._str_kw(kw, "order", B.ORDERS, "relaxed")
        scope = self._str_kw(kw, "scope", B.FENCE_SCOPES, "device")
        if op == "cas":
            c = self.coerce(self.rvalue(self.ev(e.args[1]), e.args[1].span), t, e.args[1].span,
                            f"compare {{src}} with a {t} in {f.fn.name}")
            n = self.coerce(self.rvalue(self.ev(e.args[2]), e.args[2].span), t, e.args[2].span,
                            f"store {{src}} into {p.type}")
            return self.b.atomic_cas(p, c, n, order, scope)
        v = self.coerce(self.rvalue(self.ev(e.args[1]), e.args[1].span), t, e.args[1].span,
                        f"apply {f.fn.name} with {{src}} to {p.type}")
        return self.b.atomic(op, p, v, order, scope)

    def _warp_value(self, a: A.Expr, what: str) -> Value:
        v = self._value(a)
        t = v.type
        bits = t.elem.bits * t.count if isinstance(t, VectorType) else (t.bits if isinstance(t, ScalarType) else 0)
        if isinstance(t, PointerType) or bits == 0 or bits > 64:
            self.fail(f"{what} takes a scalar or vector of at most 64 bits, found {t}", a.span)
        if isinstance(t, VectorType) and t.elem.is_bool:
            self.fail(f"{what} cannot take {t}: bool has no bit layout", a.span, hint="convert it: vec<u8, N>(v)")
        if bits not in (8, 16, 32, 64) and t != BOOL:
            self.fail(f"{what} takes values of 8, 16, 32 or 64 bits, found {t} ({bits} bits)", a.span)
        return v

    def _warp_word(self, v: Value):
        """The warp primitives move 32- or 64-bit scalars: ``v`` widened or reinterpreted to one,
        and the function that turns the result back into ``v``'s type."""
        t = v.type
        if isinstance(t, ScalarType) and t.bits in (32, 64) and not t.is_bool:
            return v, lambda r: r
        if isinstance(t, ScalarType) and (t.is_bool or t.is_int):
            wide = I32 if t.is_signed else SCALARS["u32"]
            return self.b.cast(v, wide), lambda r: self.b.cast(r, t)
        bits = sizeof(t) * 8
        it = SCALARS[f"u{bits}"]
        x = self.b.bitcast(v, it)
        if bits >= 32:
            return x, lambda r: self.b.bitcast(r, t)
        return self.b.cast(x, SCALARS["u32"]), lambda r: self.b.bitcast(self.b.cast(r, it), t)

    def b_shuffle(self, f, e, kw):
        mode = {"shuffle": "idx", "shuffle_xor": "xor", "shuffle_down": "down", "shuffle_up": "up"}[f.fn.name]
        v = self._warp_value(e.args[0], f.fn.name)
        lane = self.rvalue(self.ev(e.args[1]), e.args[1].span)
        if isinstance(lane, CV):
            if lane.kind != "int" or not fits(lane.value, I32):
                self.fail(f"the lane of {f.fn.name} must be an i32, found {lane.describe()}", e.args[1].span)
            lv = self.b.const(lane.value, I32)
        else:
            if not (isinstance(lane.type, ScalarType) and lane.type.is_int):
                self.fail(f"the lane of {f.fn.name} must be an integer, found {lane.type}", e.args[1].span)
            lv = self.b.cast(lane, I32)
        w, back = self._warp_word(v)
        return back(self.b.shuffle(mode, w, lv))

    def b_ballot(self, f, e, kw):
        v = self.rvalue(self.ev(e.args[0]), e.args[0].span)
        if isinstance(v, CV) and v.kind == "bool":
            v = self.b.const(bool(v.value), BOOL)
        if not (isinstance(v, Value) and v.type == BOOL):
            self.fail(f"ballot takes a bool, found {_type_desc(v)}", e.args[0].span, hint="compare it: x != 0")
        return self.b.ballot(v)

    def b_active_mask(self, f, e, kw):
        return self.b.value("active_mask", [], U64)

    def b_read_first_lane(self, f, e, kw):
        v = self._warp_value(e.args[0], "read_first_lane")
        w, back = self._warp_word(v)
        return back(self.b.value("read_first_lane", [w], w.type))

    def b_warp_sync(self, f, e, kw):
        mask = [self.coerce(self.rvalue(self.ev(a), a.span), U64, a.span, "pass {src} as warp_sync's u64 lane mask")
                for a in e.args]
        self.b.op("warp_sync", mask)
        return VOIDV

    def b_nanosleep(self, f, e, kw):
        ns = self.coerce(self.rvalue(self.ev(e.args[0]), e.args[0].span), U32, e.args[0].span,
                         "pass {src} as nanosleep's u32 nanoseconds")
        self.b.op("nanosleep", [ns])
        return VOIDV

    def b_hostcall_buffer(self, f, e, kw):
        return self.b.value("hostcall_buffer", [], U64)

    def b_hostcall_interrupt(self, f, e, kw):
        event = self.coerce(self.rvalue(self.ev(e.args[0]), e.args[0].span), U32, e.args[0].span,
                            "pass {src} as hostcall_interrupt's u32 event id")
        self.b.op("hostcall_interrupt", [event])
        return VOIDV

    def b_compile_error(self, f, e, kw):
        """``compile_error("message")``: reached only in code that is compiled (a ``comptime if``
        drops the branches not taken), so a generic function refuses a specialisation with it."""
        a = e.args[0]
        if not isinstance(a, A.StrLit):
            self.fail("compile_error takes a string literal", a.span, hint='compile_error("no f64 version")')
        self.fail(a.value, e.span, hint=f"in {self.call_chain()}")

    # --- printf ---------------------------------------------------------------------------------
    def b_printf(self, f, e, kw):
        """``printf("format", args...)``: the format checked against every argument's type, the
        arguments given C's default promotions (casts inserted), and each ``%s`` whose argument is a
        string literal folded into the format, so that only device strings travel. Emits the IR op
        ``printf`` (vprintf on NVIDIA), or, on a target whose ``printf_method`` is "hostcall",
        hands the call to :meth:`hostcall_printf`."""
        from ..ir.types import U8
        from ..printf import Conversion, escape_text, expected_args, fold_string
        from .printf_format import FormatProblem, check_call

        try:
            lit, pieces = check_call(e)
        except FormatProblem as p:
            self.fail(p.message, p.span, p.hint)
        rest = iter(e.args[1:])
        text: list[str] = []
        values: list[Value] = []
        for piece in pieces:
            if not isinstance(piece, Conversion):
                text.append(escape_text(piece))
                continue
            vals = [self._printf_arg(piece, pos, next(rest), lit) for pos in range(len(expected_args(piece)))]
            if isinstance(vals[-1], str):  # a string literal for %s
                if piece.width != "*" and piece.precision != "*":
                    text.append(escape_text(fold_string(piece, vals[-1])))
                    values.extend(vals[:-1])
                    continue
                vals[-1] = self.b.value("string", [], PointerType(U8, AddressSpace.CONST),
                                        value=vals[-1].split("\0", 1)[0])
            text.append(lit.value[piece.start:piece.end])
            values.extend(vals)
        fmt = "".join(text)
        if getattr(self.target, "printf_method", "vprintf") in ("hostcall", "buffered"):
            return self.hostcall_printf(e, fmt, values)
        self.b.op("printf", values, format=fmt)
        return VOIDV

    def _printf_arg(self, conv: Any, pos: int, a: A.Expr, lit: A.StrLit) -> Any:
        """Argument ``pos`` of conversion ``conv`` (see printf.expected_args): a Value of the type it
        travels as (promoted, and widened to what the conversion reads), or the text of a string
        literal given to %s."""
        from ..printf import (STRING_LITERAL, argument_name, argument_type, check_argument,
                              expected_args)
        from .printf_format import conversion_span

        kinds = expected_args(conv)
        kind = kinds[pos]
        is_value = pos == len(kinds) - 1
        ints = ("i32", "u32", "i64", "u64")
        if kind == "f128":  # %Lf: a long double, which no argument is
            self.fail(check_argument(conv, SCALARS["f64"], pos), conversion_span(lit, conv))
        v = self.rvalue(self.ev(a), a.span)
        if isinstance(v, CV):
            what = argument_name(conv, pos)
            want = {"f64": "a floating-point value", "str": "a string", "ptr": "a pointer"}.get(kind, "an integer")
            if v.kind == "str":
                if kind == "str":
                    return v.value
                self.fail(check_argument(conv, STRING_LITERAL, pos), a.span)
            if v.kind == "int" and kind in ints and (v.type is None or check_argument(conv, v.type, pos)):
                # a literal, or a compile-time integer, takes the type the conversion reads if it fits
                cands = (I32, U32) if kind in ("i32", "u32") else (SCALARS["i64"], U64)
                t = next((c for c in cands if fits(v.value, c)), None)
                if t is None:
                    wider = f": write %l{conv.conv} for 64 bits" if kind in ("i32", "u32") and is_value \
                        and conv.conv in "diuxXo" else ""
                    self.fail(f"{'integer literal' if v.type is None else v.type} {v.value} does not fit the "
                              f"32 bits {what} reads{wider}", a.span)
                return self.b.const(v.value, t)
            if v.type is None and v.kind == "int":
                self.fail(f"{what} expects {want}, found integer literal {v.value}", a.span,
                          hint=f"write {v.value}.0" if kind == "f64" else None)
            if v.type is None and v.kind == "float":
                if kind == "f64":  # C's double: the literal as written, not rounded to f32 first
                    return self.b.const(float(v.value), SCALARS["f64"])
                self.fail(f"{what} expects {want}, found float literal {v.value!r}", a.span,
                          hint="write %f (or %g, %e) to print a float" if is_value and kind in ints else None)
            v = self.materialise(v, a.span, v.type)
        msg = check_argument(conv, v.type, pos)
        if msg is not None:
            self.fail(msg, a.span)
        t = argument_type(conv, v.type, pos)
        if isinstance(t, PointerType):
            return v
        return self.b.cast(v, t)

    def hostcall_printf(self, call: A.Call, fmt: str, values: list[Value]) -> Any:
        """printf on a target whose ``printf_method`` is "hostcall" or "buffered": ``fmt`` is the
        checked format with the string literals folded in, ``values`` the promoted arguments (scalars
        of i32, u32, i64, u64 or f64, and pointers): they become calls of std.hostcall's printf
        service, or of std.printf_buffer (frontend/buffered_printf.py)."""
        from ..printf import conversions, expected_args
        from .buffered_printf import lower_buffered_printf
        from .hostcall_printf import lower_hostcall_printf

        strings = [k == "str" for c in conversions(fmt) for k in expected_args(c)]
        lower = lower_buffered_printf if self.target.printf_method == "buffered" else lower_hostcall_printf
        lower(self, call.span, fmt, values, strings)
        return VOIDV

    def b_dynamic_shared(self, f, e, kw):
        t = self._type_arg(f)
        if isinstance(t, ArrayType):
            self.fail("dynamic_shared[T] takes the element type", f.span)
        return self.b.dyn_shared(t)

    def b_bitcast(self, f, e, kw):
        t = self._type_arg(f)
        v = self._value(e.args[0])
        if isinstance(t, PointerType) or isinstance(v.type, PointerType):
            if isinstance(t, PointerType) and isinstance(v.type, PointerType) and t.space == v.type.space:
                return self.b.ptrcast(v, t.pointee)
            ptr, num = (t, v.type) if isinstance(t, PointerType) else (v.type, t)
            if isinstance(ptr, PointerType) and ptr.space in (AddressSpace.GLOBAL, AddressSpace.CONST) \
                    and isinstance(num, ScalarType) and num.is_int and num.bits == 64:
                return self.b.bitcast(v, t)  # the address as an integer, or an integer as an address
            self.fail(f"cannot bitcast {v.type} to {t}", e.span,
                      hint="pointers bitcast to pointers of the same address space, and global or const "
                           "pointers to and from u64/i64 (the address)")
        if not isinstance(t, (ScalarType, VectorType)) or not isinstance(v.type, (ScalarType, VectorType)):
            self.fail(f"cannot bitcast {v.type} to {t}", e.span)
        sb = sizeof(v.type) if not _has_bool(v.type) else -1
        tb = sizeof(t) if not _has_bool(t) else -1
        if sb < 0 or tb < 0:
            self.fail("bool has no bit layout to bitcast", e.span, hint="convert it: u8(b)")
        if sb != tb:
            self.fail(f"cannot bitcast {v.type} ({sb} bytes) to {t} ({tb} bytes): sizes differ", e.span)
        if v.type == t:
            return v
        return self.b.bitcast(v, t)

    def b_load(self, f, e, kw):
        p = self._pointer(e.args[0], "load")
        pointee = p.type.pointee
        if f.targs is None:
            return self.b.load(p)
        t = self._type_arg(f)
        if t == pointee:
            return self.b.load(p, align=_vec_align(t))
        if isinstance(t, VectorType) and t.elem == pointee:
            return self.b.load(self.b.ptrcast(p, t), align=_vec_align(t))
        self.fail(f"load[{t}] needs a ptr<{t.elem if isinstance(t, VectorType) else t}>, found {p.type}",
                  e.args[0].span)

    def b_store(self, f, e, kw):
        p = self._pointer(e.args[0], "store")
        pointee = p.type.pointee
        v = self.rvalue(self.ev(e.args[1]), e.args[1].span)
        if isinstance(v, Value) and isinstance(v.type, VectorType) and v.type != pointee:
            if v.type.elem != pointee:
                self.fail(f"cannot store {v.type} into {p.type}", e.args[1].span,
                          hint=f"convert it: {VectorType(pointee, v.type.count) if isinstance(pointee, ScalarType) else pointee}(v)"
                          if isinstance(pointee, ScalarType) else None)
            self.b.store(self.b.ptrcast(p, v.type), v, align=_vec_align(v.type))
            return VOIDV
        if isinstance(pointee, ArrayType):
            self.fail(f"cannot store into {p.type}", e.args[0].span)
        x = self.coerce(v, pointee, e.args[1].span, f"store {{src}} into {p.type}")
        self.b.store(p, x, align=_vec_align(pointee) if isinstance(pointee, VectorType) else None)
        return VOIDV

    def b_select(self, f, e, kw):
        c = self.rvalue(self.ev(e.args[0]), e.args[0].span)
        if isinstance(c, CV) and c.kind == "bool":
            c = self.b.const(bool(c.value), BOOL)
        ct = c.type if isinstance(c, Value) else None
        if not (ct == BOOL or (isinstance(ct, VectorType) and ct.elem == BOOL)):
            self.fail(f"the condition of select must be bool, found {_type_desc(c)}", e.args[0].span)
        a = self.rvalue(self.ev(e.args[1]), e.args[1].span)
        b = self.rvalue(self.ev(e.args[2]), e.args[2].span)
        x, y = self.common(a, b, "select", e.span)
        if isinstance(ct, VectorType):
            if not isinstance(x.type, VectorType):
                x, y = self.b.splat(x, ct.count), self.b.splat(y, ct.count)
            if x.type.count != ct.count:
                self.fail(f"select of {ct} between {x.type} values: lengths differ", e.span)
        return self.b.select(c, x, y)

    def b_min(self, f, e, kw):
        return self._minmax("min", e)

    def b_max(self, f, e, kw):
        return self._minmax("max", e)

    def _minmax(self, name: str, e: A.Call) -> Any:
        a = self.rvalue(self.ev(e.args[0]), e.args[0].span)
        b = self.rvalue(self.ev(e.args[1]), e.args[1].span)
        if isinstance(a, CV) and isinstance(b, CV) and a.kind in ("int", "float") and b.kind in ("int", "float"):
            try:
                r = fold_binary("<", a, b)
            except SemanticError as err:
                self.sem(err, e.span)
            if r is not None:
                lt = bool(r.value)
                pick = a if lt == (name == "min") else b
                t = None
                try:
                    t = fold_binary("+", a, b)
                except SemanticError:
                    pass
                if t is not None and t.type is not None:
                    return convert_cv(pick, t.type)
                return pick
        x, y = self.common(a, b, name, e.span)
        if _has_bool(x.type):
            self.fail(f"{name} needs numbers, found {x.type}", e.span)
        self.no_minifloat_arithmetic(elem_of(x.type), name, e.span)
        return self.b.binary(name, x, y)

    def b_math(self, f, e, kw):
        name = f.fn.name
        vals = [self.rvalue(self.ev(a), a.span) for a in e.args]
        typed = [v for v in vals if isinstance(v, Value)]
        if typed:
            x = typed[0]
            for v in vals[1:] if vals[0] is x else vals:
                if v is x:
                    continue
                x, _ = self.common(x, v, name, e.span)
            t = x.type
        else:
            floats = [v for v in vals if isinstance(v, CV) and v.type is not None]
            t = floats[0].type if floats else None
            if t is None:
                t = default_type(vals[0]) if name == "abs" and vals[0].kind == "int" else \
                    (vals[0].type if vals[0].type is not None else SCALARS["f32"])
        et = t.elem if isinstance(t, VectorType) else t
        if not isinstance(et, ScalarType) or et.is_bool:
            self.fail(f"{name} needs numbers, found {t}", e.span)
        if not et.is_float and not (name == "abs" and et.is_signed):
            self.fail(f"{name} needs floating-point arguments, found {t}", e.span,
                      hint=f"convert it: f32(x)" if name != "abs" else "abs takes floats and signed integers")
        if (why := self.target.math_unsupported(name, str(et))) is not None:
            self.fail(why[0], e.span, hint=why[1])
        ops = []
        for v, a in zip(vals, e.args):
            ops.append(self.to_type(v, t, a.span))
        return self.b.math(name, *ops)


def _vec_align(t: Type) -> int | None:
    if isinstance(t, VectorType):
        n = t.size
        return n if n & (n - 1) == 0 else t.elem.size
    return None


def _has_bool(t: Type) -> bool:
    e = t.elem if isinstance(t, VectorType) else t
    return isinstance(e, ScalarType) and e.is_bool


def _is_expr(a: Any) -> bool:
    return not isinstance(a, (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr, A.KwArg))


def _defined_names(s: A.Stmt) -> list[str]:
    if isinstance(s, (A.Let, A.Var, A.Shared)):
        return [s.name]
    return []


# --- the API --------------------------------------------------------------------------------------

def lower(program: Program, target: Any, kernels: dict[str, dict[str, Any]] | None = None) -> Module:
    """Lower kernel specialisations of ``program`` for ``target`` into one IR module.

    ``kernels``: {source kernel name: {compile-time parameter: value}} (ints, bools, ir Types); None
    lowers every kernel whose compile-time parameters all have defaults. The module holds each kernel
    (symbol: its name, or a mangled name such as ``scale__T_f16__VEC_4`` for a specialisation) and
    every device function it calls, specialised too. Raises CompileError with every error found, and
    KeyError for a kernel name the program does not define."""
    if program.errors:  # kept by load_program(keep_going=True): such a program is checked, never lowered
        raise CompileError(program.errors)
    with deep_recursion():
        L = ModuleLowering(program, target)
        if kernels is None:
            kernels = {n: {} for n in program.kernels
                       if all(c.default is not None for c in program.signature(n).comptime)}
        for name, values in kernels.items():
            if name not in program.kernels:
                raise KeyError(f"no kernel named '{name}'; the file defines: "
                               f"{', '.join(program.kernels) or 'no kernels'}")
            L.kernel(name, dict(values or {}))
            L.drain()
        return L.finish()


def check(program: Program, target: Any, max_errors: int = 50) -> None:
    """``kc check``: type-check every kernel whose compile-time parameters all have defaults, and every
    device function that has no compile-time parameters (called or not). Raises one CompileError with
    every error: those the loader kept (``program.errors``, from ``load_program(keep_going=True)``)
    and the type errors (at most ``max_errors``) of every declaration, in source order. An undefined name, type or module fn
    the loader reported (``program.recoverable``) gives its expression the error type: the statement
    is abandoned and the names it defines are poisoned, so nothing that follows from it is reported
    again, and the declaration's other, independent type errors still are. A declaration with any
    other loader error (scopes, arity, recursion, ...) is declared but its body is not type-checked."""
    def clean(d: Any) -> bool:  # no loader error inside this declaration but undefined names
        whole = d.span.merge(d.body.span)
        return not any(_inside(e.span, whole) for e in program.errors if e.span not in program.recoverable)

    items = list(program.errors)
    with deep_recursion():
        try:
            L = ModuleLowering(program, target)
            L.silenced = program.recoverable
            L.diag.limit = max_errors
            # A clean declaration may call one with errors: that one is declared but not lowered.
            L.skip_bodies = {id(d) for m in program.modules.values() for d in m.ast.decls if not clean(d)}
            for name, decl in program.kernels.items():
                if clean(decl) and all(c.default is not None for c in program.signature(name).comptime):
                    L.kernel(name, {})
                    L.drain()
            for mod in program.modules.values():
                for d in mod.ast.decls:
                    if not d.is_kernel and not d.cparams and clean(d):
                        L.instance(mod, d, {}, None)
                        L.drain()
            check_region_depth(L.finish())  # loops and blocks nested too deep (limits.py)
        except CompileError as e:
            items += e.diagnostics
    if items:
        raise CompileError(sorted(items, key=_position))


def _inside(span: SourceSpan | None, outer: SourceSpan) -> bool:
    return span is not None and span.file is outer.file and \
        (outer.line, outer.col) <= (span.line, span.col) <= (outer.end_line, outer.end_col)


def _position(d: Any) -> tuple:
    s = d.span
    return (0, "", 0, 0) if s is None else (1, s.file.path, s.line, s.col)
