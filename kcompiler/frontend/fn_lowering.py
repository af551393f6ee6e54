"""One specialisation of one kernel or fn to IR: :class:`FnLowering`, a visitor of statements
(lower_stmts.py) and expressions (lower_exprs.py) that builds IR with :class:`~kcompiler.ir.Builder`
(every op stamped with its source span). This file holds what both halves use: the signature, scopes,
type expressions, compile-time evaluation, values and their implicit and explicit conversions, calls
of fns, and the dispatch of builtin calls through the registry (builtin_registry.py).

Type errors are collected, not raised one by one: ``fail`` reports an error and raises
:class:`~kcompiler.frontend.values.Poison`, which abandons the statement.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..diagnostics import SourceSpan
from ..ir import Builder, Function, Region, Value
from ..ir.types import (BOOL, I32, SCALARS, TENSOR_MAP, VOID, AddressSpace, ArrayType, PointerType, ScalarType,
                        Type, VectorType, sizeof)
from . import ast as A
from . import builtins as B
from . import fn_params, lower_arrays, structs
# Importing the builtins' modules registers their handlers in REGISTRY.
from . import (builtins_assert, builtins_atomic, builtins_bits, builtins_comptime, builtins_convert,  # noqa: F401
               builtins_hostcall, builtins_kernel, builtins_libm, builtins_math, builtins_memory, builtins_printf,
               builtins_sync, builtins_warp)
from .builtin_registry import REGISTRY
from .builtins_surface import lower_surface
from .comptime_defaults import MissingParam, bind_defaults
from .lower_exprs import ExpressionLowering
from .lower_stmts import StatementLowering
from .program import ComptimeParam, SourceModule, StaticEvalError, _unify, comptime_params
from .semantic import CV, SemanticError, adapts, convert_cv, default_type, fits, widens
from .values import (VOIDV, ArrayValue, BuiltinRef, FnRef, LanePlace, ModuleRef, Place, Poison, RegRef, TargetHas, TargetRef,
                     TypeRef, is_expr, literal_text, type_desc)

if TYPE_CHECKING:
    from .lowering import ModuleLowering

#: Largest vector length and array length accepted.
MAX_VEC = 256
MAX_ARRAY = 1 << 26
MAX_ARRAY_BYTES = 1 << 31


class FnLowering(StatementLowering, ExpressionLowering):
    """Lowers one specialisation of one kernel or fn: ``declare`` its signature, then ``lower_body``.
    Builtin handlers and the frontend's helpers (fn_params.py, the printf lowerings) get it as their
    ``fl`` argument and use its methods (``ev``, ``rvalue``, ``coerce``, ``fail``, ``b``, ...)."""

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
            vals = ", ".join(f"{k} = {literal_text(v) if not isinstance(v, Type) else v}"
                             for k, v in fl.values.items())
            name = fl.decl.name + (f"[{vals}]" if vals else "")
            parts.append(f"{name}" + (f" called at {span}" if span is not None else ""))
            fl = caller
        return ", from ".join(parts)

    def fail(self, msg: str, span: SourceSpan | None, hint: str | None = None):
        if span is not None and span.file.path.startswith("<std>/") and self.called_from[0] is not None \
                and not (hint or "").startswith("in "):
            # an error inside a standard-library fn: say which call of the program's led there
            chain = f"in {self.call_chain()}"
            hint = f"{hint}; {chain}" if hint else chain
        self.L.error(msg, span, hint)
        raise Poison()

    def sem(self, err: SemanticError, span: SourceSpan | None):
        self.fail(err.message, span, err.hint)

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
                except Poison:
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
            except Poison:
                ok = False
                continue
            params.append(Value(t, p.name))
        ret: Type = VOID
        if d.ret is not None and not d.is_kernel:
            try:
                ret = self.resolve_type(d.ret)
                if isinstance(ret, ArrayType):
                    self.fail("a fn cannot return an array", d.ret.span, hint="write into a ptr parameter")
            except Poison:
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

    def lookup(self, name: str) -> Any:
        for s in reversed(self.scopes):
            if name in s:
                return s[name]
        return None

    def bind(self, name: str, v: Any) -> None:
        self.scopes[-1][name] = v

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
            sd = structs.lookup_struct(self, t.name)
            if sd is not None:
                return structs.instantiate(self, sd, None, t.span)
            self.fail(f"'{t.name}' is not a type", t.span)
        if isinstance(t, A.GenericTypeExpr):
            sd = structs.lookup_struct(self, t.name)
            if sd is None:
                self.fail(f"'{t.name}' is not a generic struct", t.span)
            return structs.instantiate(self, sd, t.args, t.span)
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
            found = type_desc(v) if isinstance(v, CV) else "a " + type(v).__name__.lower()
            self.fail(f"{what} must be a compile-time integer, found {found}", e.span)
        return int(v.value)

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
        if isinstance(v, ArrayValue):
            if v.symbol is not None:
                self.fail(f"const '{v.name}' is a table in constant memory, not a pointer", span,
                          hint=f"index it ({v.name}[i]), or copy it into a local array: let t = {v.name};")
            return self.rvalue(lower_arrays.store_local(self, v, "lit", False, span), span)
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

    def operand(self, e: A.Expr, dst: Type, template: str) -> Value:
        """Expression ``e`` evaluated and converted implicitly to ``dst`` (:meth:`coerce`, its
        message worded by ``template`` and located at ``e``): a builtin's typed argument."""
        return self.coerce(self.rvalue(self.ev(e), e.span), dst, e.span, template)

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
            hint = f"write {dst}({literal_text(v.value)}) to convert" if isinstance(dst, ScalarType) and v.kind != "str" else None
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

    def convert(self, t: Type, args: list[A.Expr], e: Any) -> Any:
        if isinstance(t, ArrayType):
            return lower_arrays.array_conversion(self, t, args, e)
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

    def convert_value(self, v: Any, t: Type, span: SourceSpan, saturate: bool = False,
                      exact_nan: bool = True) -> Any:
        """Explicit conversion (C's value conversions; vectors elementwise; a scalar splats). A small
        float (8 bits and fewer) converts from and to the floats only; ``saturate`` (conversions into
        one) clamps overflows to its largest finite value; ``exact_nan`` false (conversions from one)
        leaves a NaN code's NaN bits to the target's convert instruction."""
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
            attrs = {**({"saturate": True} if saturate else {}), **({} if exact_nan else {"exact_nan": False})}
            if isinstance(t, VectorType) and isinstance(v.type, ScalarType):
                return self.b.splat(self.b.value("cast", [v], t.elem, **attrs), t.count)
            if isinstance(t, VectorType) and (not isinstance(v.type, VectorType) or v.type.count != t.count):
                self.fail(f"cannot convert {v.type} to {t}", span)
            return self.b.value("cast", [v], t, **attrs) if attrs else self.b.cast(v, t)
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
            self.fail(f"cannot convert {type_desc(v)} to {t}", span)
        self.fail(f"cannot convert to {t}", span)

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
            raise Poison()
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
        if not is_expr(a):
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

    def builtin(self, f: BuiltinRef, e: A.Call) -> Any:
        """Call ``e`` of builtin ``f``: its arity, keyword and bracket arguments checked against
        its declaration, then lowered by the handler registered for it (builtin_registry.py), or, for a
        builtin a backend contributes, by its record's check (builtins_surface.py)."""
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
        handler = REGISTRY.handler(fn.name) if fn.surface is None else lower_surface
        return handler(self, f, e, kw)

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
            self.fail(f"{what} needs a pointer, found {type_desc(v)}", a.span)
        return v
