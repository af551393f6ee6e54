"""Checks that need no types: names, scopes and mutability, loops, returns, shared arrays, arity of
calls, the compile-time parameter declarations, and recursion between device functions.

These run once per program in :func:`~kcompiler.frontend.load_program`; the type rules run when a
kernel is specialised (lowering.py), since a generic kernel's types are known only then.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..diagnostics import Diagnostics, SourceSpan
from ..ir.types import SCALARS, TENSOR_MAP
from . import ast as A
from . import builtins as B
from .parser import KEYWORDS
from .printf_format import FormatProblem, check_call

if TYPE_CHECKING:  # pragma: no cover
    from .program import SourceModule


#: Type names of other languages, and ours.
_TYPE_ALIASES = {"float": "f32", "double": "f64", "half": "f16", "int": "i32", "uint": "u32", "long": "i64",
                 "bfloat16": "bf16", "float16": "f16", "float32": "f32", "float64": "f64", "int32": "i32",
                 "int64": "i64", "uint32": "u32", "char": "i8", "short": "i16", "usize": "u64",
                 "size_t": "u64"}


def suggest(name: str, candidates) -> str | None:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.75)
    return f"did you mean '{close[0]}'?" if close else None


def comptime_kind(t: A.TypeExpr) -> str | None:
    """'type', 'bool', 'int' or 'fn' for a compile-time parameter's declared type; None if not allowed."""
    if isinstance(t, A.FnTypeExpr):
        return "fn"
    if isinstance(t, A.TypeName):
        if t.name == "type":
            return "type"
        if t.name == "bool":
            return "bool"
        s = SCALARS.get(t.name)
        if s is not None and s.is_int:
            return "int"
    return None


@dataclass
class _Sym:
    kind: str  # let var param loopvar comptime shared array
    span: SourceSpan | None = None
    comptime_kind: str | None = None
    fn_type: A.FnTypeExpr | None = None  # the declared kind of a compile-time fn parameter


@dataclass
class _Ctx:
    module: "SourceModule"
    decl: A.FnDecl
    scopes: list[dict[str, _Sym]] = field(default_factory=list)
    loops: list[str] = field(default_factory=list)  # 'runtime' | 'comptime'
    calls: list[tuple[A.FnDecl, "SourceModule", SourceSpan]] = field(default_factory=list)

    def lookup(self, name: str) -> _Sym | None:
        for s in reversed(self.scopes):
            if name in s:
                return s[name]
        return None


class Checker:
    """Runs the checks over every module of a program, recording errors in ``diag``."""

    def __init__(self, diag: Diagnostics):
        self.diag = diag
        # call graph: (module path, fn name) -> [(callee key, span)]
        self.graph: dict[tuple[str, str], list[tuple[tuple[str, str], SourceSpan]]] = {}
        #: spans of the errors the type rules can recover from (an unknown name, type, address space
        #: or module fn): the expression there gets the error type, so that kc check goes on to report
        #: the type errors elsewhere in the same declaration (Program.recoverable)
        self.recoverable: set[SourceSpan] = set()

    def error(self, msg: str, span: SourceSpan | None, hint: str | None = None) -> None:
        self.diag.error(msg, span, hint)

    def unknown(self, msg: str, span: SourceSpan | None, hint: str | None = None) -> None:
        """An error that names something undefined: reported, and recoverable by the type rules."""
        self.error(msg, span, hint)
        if span is not None:
            self.recoverable.add(span)

    # --- modules ----------------------------------------------------------------------------------
    def check_module(self, mod: "SourceModule") -> None:
        seen: dict[str, SourceSpan] = {}
        for imp in mod.ast.imports:
            if imp.alias in seen:
                self.error(f"'{imp.alias}' is already defined", imp.span,
                           hint="import it under another name: import x as y")
            seen[imp.alias] = imp.span
        for c in mod.ast.consts:
            if c.name in seen:
                self.error(f"'{c.name}' is already defined at {seen[c.name]}", c.name_span, hint="rename one of them")
            self.check_name_decl(c.name, c.name_span)
            seen.setdefault(c.name, c.name_span)
            ctx = _Ctx(mod, None, [{}])  # type: ignore[arg-type]
            if c.type is not None:
                self.check_type(ctx, c.type)
            self.check_expr(ctx, c.value)
        for sd in mod.ast.structs:
            if sd.name in seen or sd.name in SCALARS:
                self.error(f"'{sd.name}' is already defined" + (f" at {seen[sd.name]}" if sd.name in seen else
                           " (a scalar type)"), sd.name_span, hint="rename the struct")
            seen.setdefault(sd.name, sd.name_span)
            self.check_struct(mod, sd)
        for d in mod.ast.decls:
            if d.name in seen:
                self.error(f"'{d.name}' is already defined at {seen[d.name]}", d.name_span,
                           hint="rename one of them")
            elif d.name in KEYWORDS:
                self.error(f"'{d.name}' is a keyword and cannot name a {d.kind}", d.name_span)
            seen.setdefault(d.name, d.name_span)
        for d in mod.ast.decls:
            self.check_decl(mod, d)

    def check_decl(self, mod: "SourceModule", d: A.FnDecl) -> None:
        ctx = _Ctx(mod, d, [{}])
        top = ctx.scopes[0]
        for cp in d.cparams:
            kind = comptime_kind(cp.type)
            if kind is None:
                self.error(f"compile-time parameter '{cp.name}' has type {_texpr_str(cp.type)}; expected "
                           "'type', 'bool', an integer type or a fn kind", cp.type.span,
                           hint=f"write {cp.name}: i32, {cp.name}: type or {cp.name}: fn(f32) -> f32")
            if cp.name in top:
                self.error(f"compile-time parameter '{cp.name}' is declared twice", cp.span)
            self.check_name_decl(cp.name, cp.span)
            if kind == "fn":
                self.check_fn_param(ctx, cp)
            elif isinstance(cp.default, (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr)):
                self.check_type(ctx, cp.default)
            elif cp.default is not None:
                self.check_expr(ctx, cp.default)
            top[cp.name] = _Sym("comptime", cp.span, kind, cp.type if kind == "fn" else None)
        for p in d.params:
            if p.name in top:
                self.error(f"parameter '{p.name}' is declared twice", p.span)
            self.check_name_decl(p.name, p.span)
            self.check_type(ctx, p.type)
            top[p.name] = _Sym("param", p.span)
        if d.ret is not None:
            if d.is_kernel:
                self.error(f"kernel '{d.name}' declares a return type; kernels return nothing", d.ret.span,
                           hint="write results through a pointer parameter")
            else:
                self.check_type(ctx, d.ret)
        self.check_block(ctx, d.body, new_scope=True)
        if d.ret is not None and not d.is_kernel and not always_returns(d.body):
            end = d.body.span
            span = SourceSpan(end.file, end.end_line, max(end.end_col - 1, 1), end.end_line, end.end_col)
            self.error(f"fn '{d.name}' can reach its end without returning a value "
                       f"({_texpr_str(d.ret)})", span, hint="add a `return` on every path")
        key = (mod.key, d.name)
        self.graph[key] = [((m.key, callee.name), span) for callee, m, span in ctx.calls]

    def check_struct(self, mod: "SourceModule", sd: A.StructDecl) -> None:
        """A struct declaration: compile-time parameters are types, fields named once, field types known."""
        ctx = _Ctx(mod, A.FnDecl("fn", sd.name, [], [], None, A.Block([], span=sd.span), span=sd.span), [{}])
        for cp in sd.cparams:
            if comptime_kind(cp.type) not in ("type", "int", "bool"):
                self.error(f"compile-time parameter '{cp.name}' of struct '{sd.name}' has type "
                           f"{_texpr_str(cp.type)}; expected 'type', 'bool' or an integer type", cp.type.span)
            ctx.scopes[0][cp.name] = _Sym("comptime", cp.span, comptime_kind(cp.type))
        names: dict[str, SourceSpan] = {}
        for f in sd.fields:
            if f.name in names:
                self.error(f"struct '{sd.name}' has two fields named '{f.name}'", f.span,
                           hint=f"the first is at {names[f.name]}; rename one")
            names.setdefault(f.name, f.span)
            self.check_type(ctx, f.type)

    def check_fn_param(self, ctx: _Ctx, cp: A.ComptimeParamDecl) -> None:
        """A compile-time fn parameter: its signature's types, and a default that names a fn."""
        ft = cp.type
        assert isinstance(ft, A.FnTypeExpr)
        for t in (ft.params or []) + ([ft.ret] if ft.ret is not None else []):
            self.check_type(ctx, t)
        d = cp.default
        if d is None:
            return
        if dotted_name(d) is None:
            self.error(f"the default of compile-time fn parameter '{cp.name}' must name a fn", d.span,
                       hint=f"write {cp.name}: {_texpr_str(ft)} = my_fn (or = module.my_fn)")
            return
        self.check_expr(ctx, d)
        callee = self._callee(ctx, d)
        if callee is not None and callee[0] == "builtin":
            self.error(f"'{callee[1].name}' is a builtin, not a fn: a compile-time fn parameter takes a fn "
                       "declared with `fn`", d.span)
        elif callee is None and isinstance(d, A.Name) and ctx.lookup(d.id) is not None \
                and ctx.lookup(d.id).comptime_kind != "fn":
            self.error(f"'{d.id}' is not a fn", d.span)

    def check_name_decl(self, name: str, span: SourceSpan | None) -> None:
        if name in KEYWORDS:
            self.error(f"'{name}' is a keyword and cannot be used as a name", span)

    # --- types ------------------------------------------------------------------------------------
    def check_type(self, ctx: _Ctx, t: A.TypeExpr) -> None:
        stack = [t]
        while stack:
            t = stack.pop()
            if isinstance(t, A.TypeName):
                if t.name in SCALARS or t.name == str(TENSOR_MAP):
                    continue
                sym = ctx.lookup(t.name)
                if sym is not None and sym.kind == "comptime" and sym.comptime_kind == "type":
                    continue
                if sym is None and t.name in ctx.module.structs:
                    continue
                if sym is not None and sym.kind == "comptime":
                    self.error(f"'{t.name}' is a compile-time {sym.comptime_kind}, not a type", t.span)
                elif t.name == "type":
                    self.error("'type' is only the kind of a compile-time parameter ([T: type])", t.span)
                else:
                    cands = list(SCALARS) + [n for s in ctx.scopes for n, v in s.items()
                                             if v.kind == "comptime" and v.comptime_kind == "type"]
                    hint = _TYPE_ALIASES.get(t.name)
                    hint = f"did you mean '{hint}'?" if hint else suggest(t.name, cands)
                    self.unknown(f"unknown type '{t.name}'", t.span, hint=hint)
            elif isinstance(t, A.PtrTypeExpr):
                if t.space is not None and t.space not in B.ADDRESS_SPACES:
                    self.unknown(f"unknown address space '{t.space}'", t.space_span,
                               hint="expected one of: " + ", ".join(B.ADDRESS_SPACES))
                stack.append(t.pointee)
            elif isinstance(t, (A.VecTypeExpr, A.ArrayTypeExpr)):
                self.check_expr(ctx, t.count)
                stack.append(t.elem)
            elif isinstance(t, A.GenericTypeExpr):
                if t.name not in ctx.module.structs:
                    self.unknown(f"unknown generic struct '{t.name}'", t.span,
                                 hint=suggest(t.name, ctx.module.structs))
                for a in t.args:
                    if isinstance(a, A.KwArg):
                        self.check_expr(ctx, a.value)
                    elif isinstance(a, (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr, A.GenericTypeExpr)):
                        stack.append(a)
                    elif not (isinstance(a, A.Name) and (a.id in SCALARS or a.id in ctx.module.structs)):
                        self.check_expr(ctx, a)

    # --- statements -------------------------------------------------------------------------------
    def check_block(self, ctx: _Ctx, block: A.Block, new_scope: bool = True) -> None:
        if new_scope:
            ctx.scopes.append({})
        for s in block.stmts:
            self.check_stmt(ctx, s)
        if new_scope:
            ctx.scopes.pop()

    def declare(self, ctx: _Ctx, name: str, sym: _Sym) -> None:
        self.check_name_decl(name, sym.span)
        scope = ctx.scopes[-1]
        if name in scope:
            self.error(f"'{name}' is already declared in this block", sym.span,
                       hint="use another name, or assign to it if it is a var")
        scope[name] = sym

    def check_stmt(self, ctx: _Ctx, s: A.Stmt) -> None:
        if isinstance(s, A.Const):
            if s.type is not None:
                self.check_type(ctx, s.type)
            self.check_expr(ctx, s.value)
            self.declare(ctx, s.name, _Sym("const", s.name_span))
        elif isinstance(s, A.Let):
            if s.type is not None:
                self.check_type(ctx, s.type)
            self.check_expr(ctx, s.value)
            self.declare(ctx, s.name, _Sym("let", s.name_span))
        elif isinstance(s, A.Var):
            if s.type is not None:
                self.check_type(ctx, s.type)
            if s.value is not None:
                self.check_expr(ctx, s.value)
            if s.type is None and s.value is None:
                self.error(f"var '{s.name}' needs a type or an initial value", s.name_span,
                           hint=f"write var {s.name}: f32; or var {s.name} = 0.0;")
            self.declare(ctx, s.name, _Sym("var", s.name_span))
        elif isinstance(s, A.Shared):
            self.check_type(ctx, s.type)
            if not ctx.decl.is_kernel:
                self.error(f"shared array '{s.name}' declared in fn '{ctx.decl.name}'; shared memory is "
                           "declared in kernels", s.span,
                           hint="declare it in the kernel and pass it as a ptr<T, shared> parameter")
            if not isinstance(s.type, A.ArrayTypeExpr):
                self.error(f"shared '{s.name}' has type {_texpr_str(s.type)}; shared declarations are "
                           "arrays", s.type.span, hint=f"write shared {s.name}: [{_texpr_str(s.type)}; N];")
            self.declare(ctx, s.name, _Sym("shared", s.name_span))
        elif isinstance(s, A.Assign):
            self.check_assign_target(ctx, s.target)
            self.check_expr(ctx, s.value)
        elif isinstance(s, A.ExprStmt):
            self.check_expr(ctx, s.expr)
        elif isinstance(s, A.If):
            for arm in s.arms:
                self.check_expr(ctx, arm.cond)
                self.check_block(ctx, arm.body)
            if s.orelse is not None:
                self.check_block(ctx, s.orelse)
        elif isinstance(s, A.For):
            it = s.iter
            if not (isinstance(it, A.Call) and isinstance(it.func, A.Name) and it.func.id == "range"
                    and ctx.lookup("range") is None):
                self.error("a for loop iterates over range(...)", it.span,
                           hint="write for i in range(n), range(a, b) or range(a, b, step)")
                self.check_expr(ctx, it)
            else:
                if not 1 <= len(it.args) <= 3 or it.kwargs:
                    self.error(f"range takes 1 to 3 arguments, found {len(it.args) + len(it.kwargs)}",
                               it.span, hint="range(n), range(a, b) or range(a, b, step)")
                for a in it.args:
                    self.check_expr(ctx, a)
            if s.comptime and s.mutable:
                self.error("the variable of a comptime for loop is a compile-time constant and cannot be "
                           "var", s.var_span)
            ctx.scopes.append({})
            self.declare(ctx, s.var, _Sym("var" if s.mutable else ("comptime" if s.comptime else "loopvar"),
                                          s.var_span, "int" if s.comptime else None))
            ctx.loops.append("comptime" if s.comptime else "runtime")
            self.check_block(ctx, s.body)
            ctx.loops.pop()
            ctx.scopes.pop()
        elif isinstance(s, A.While):
            self.check_expr(ctx, s.cond)
            ctx.loops.append("runtime")
            self.check_block(ctx, s.body)
            ctx.loops.pop()
        elif isinstance(s, (A.Break, A.Continue)):
            word = "break" if isinstance(s, A.Break) else "continue"
            if not ctx.loops:
                self.error(f"'{word}' outside of a loop", s.span)
            elif ctx.loops[-1] == "comptime":
                self.error(f"'{word}' in a comptime for loop: its iterations are unrolled at compile "
                           "time", s.span, hint="use a runtime loop (for i in range(...)) or an if")
        elif isinstance(s, A.Return):
            d = ctx.decl
            if s.value is not None:
                self.check_expr(ctx, s.value)
                if d.is_kernel:
                    self.error(f"kernel '{d.name}' cannot return a value", s.value.span,
                               hint="write results through a pointer parameter")
                elif d.ret is None:
                    self.error(f"fn '{d.name}' returns nothing but a value is returned", s.value.span,
                               hint="declare the return type: fn f(...) -> T")
            elif d.ret is not None and not d.is_kernel:
                self.error(f"fn '{d.name}' must return a value of type {_texpr_str(d.ret)}", s.span,
                           hint="write return <value>;")
        elif isinstance(s, A.Block):
            self.check_block(ctx, s)

    def check_assign_target(self, ctx: _Ctx, t: A.Expr) -> None:
        if isinstance(t, A.Name):
            sym = ctx.lookup(t.id)
            if sym is None:
                self.check_expr(ctx, t)
                return
            if sym.kind == "var":
                return
            what = {"let": ("it was declared with let", f"declare it with var: var {t.id} = ..."),
                    "param": ("it is a parameter", f"copy it first: var {t.id}2 = {t.id};"),
                    "loopvar": ("it is the loop variable", f"write for var {t.id} in ... for a mutable copy"),
                    "comptime": ("it is a compile-time constant", None),
                    "const": ("it is a const", f"copy it into a var: var {t.id}2 = {t.id};"),
                    "shared": ("it is a whole array", f"assign to elements: {t.id}[i] = ..."),
                    }.get(sym.kind, ("it is not a variable", None))
            self.error(f"cannot assign to '{t.id}': {what[0]}", t.span, hint=what[1])
        elif isinstance(t, (A.Index, A.Field)):
            self.check_expr(ctx, t)
        else:
            self.check_expr(ctx, t)
            self.error("cannot assign to this expression", t.span,
                       hint="assign to a var, an element p[i] or a lane v.x")

    # --- expressions ------------------------------------------------------------------------------
    def resolve_global(self, ctx: _Ctx, name: str):
        mod = ctx.module
        if name in mod.consts:
            return ("const", mod.consts[name], mod)
        if name in mod.fns:
            return ("fn", mod.fns[name], mod)
        if name in mod.imports:
            return ("module", mod.imports[name], None)
        if name in B.FUNCTIONS:
            return ("builtin", B.FUNCTIONS[name], None)
        if name in B.VALUES or name in B.TYPES or name in mod.structs:
            return ("value", name, None)
        if name == "range":
            return ("range", None, None)
        vendor = B.vendor_function(name)  # a backend's builtin, whatever the target: after every other name
        if vendor is not None:
            return ("builtin", vendor, None)
        return None

    def check_expr(self, ctx: _Ctx, e: A.Expr) -> None:
        if isinstance(e, A.Name):
            if ctx.lookup(e.id) is not None:
                return
            g = self.resolve_global(ctx, e.id)
            if g is None:
                cands = [n for s in ctx.scopes for n in s] + list(ctx.module.fns) + list(ctx.module.imports) \
                    + list(ctx.module.consts) \
                    + list(B.all_names())
                self.unknown(f"unknown name '{e.id}'", e.span, hint=suggest(e.id, cands))
            elif g[0] == "range":
                self.error("range(...) is only used in a for loop", e.span,
                           hint="for i in range(a, b) { ... }")
            elif g[0] == "module":
                self.error(f"'{e.id}' is a module; call one of its functions: {e.id}.f(...)", e.span)
            return
        if isinstance(e, A.Call):
            self.check_call(ctx, e)
            return
        if isinstance(e, A.Field):
            if isinstance(e.base, A.Name) and ctx.lookup(e.base.id) is None:
                g = self.resolve_global(ctx, e.base.id)
                if g is not None and g[0] == "module":
                    m = g[1]
                    if e.name not in m.fns and e.name not in m.consts:
                        self.unknown(f"module '{e.base.id}' has no fn '{e.name}'", e.name_span,
                                   hint=suggest(e.name, m.fns))
                    return
                if g is not None and g[0] == "value":
                    if e.base.id in B.DIM_REGISTERS and e.name not in ("x", "y", "z"):
                        self.error(f"{e.base.id} has fields x, y and z, not '{e.name}'", e.name_span)
                    elif e.base.id == "target" and e.name not in B.TARGET_FIELDS:
                        self.error(f"target has no field '{e.name}'", e.name_span,
                                   hint="expected one of: " + ", ".join(B.TARGET_FIELDS))
                    elif e.base.id not in B.DIM_REGISTERS and e.base.id != "target" \
                            and e.base.id in B.VALUES:
                        self.error(f"{e.base.id} has no field '{e.name}'", e.name_span)
                    return
            self.check_expr(ctx, e.base)
            return
        if isinstance(e, A.Index):
            self.check_expr(ctx, e.base)
            for a in e.args:
                if isinstance(a, (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr)):
                    self.check_type(ctx, a)
                else:
                    self.check_expr(ctx, a)
            for k in e.kwargs:
                self.check_expr(ctx, k.value)
            return
        if isinstance(e, A.TypeCall):
            self.check_type(ctx, e.type)
            for a in e.args:
                self.check_expr(ctx, a)
            for k in e.kwargs:
                self.error(f"unexpected keyword argument '{k.name}' in a conversion", k.span)
            return
        if isinstance(e, A.StructLit):
            if e.name not in ctx.module.structs:
                self.unknown(f"unknown struct '{e.name}'", e.name_span, hint=suggest(e.name, ctx.module.structs))
            for a in e.targs or []:
                if isinstance(a, (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr)):
                    self.check_type(ctx, a)
                elif not (isinstance(a, A.Name) and (a.id in SCALARS or a.id in ctx.module.structs)):
                    self.check_expr(ctx, a.value if isinstance(a, A.KwArg) else a)
            for fi in e.inits:
                self.check_expr(ctx, fi.value)
            return
        if isinstance(e, A.Binary):
            self.check_expr(ctx, e.lhs)
            self.check_expr(ctx, e.rhs)
            return
        if isinstance(e, A.Unary):
            self.check_expr(ctx, e.operand)
            return
        if isinstance(e, A.ArrayLit):
            for x in e.elems:
                self.check_expr(ctx, x)
            return
        if isinstance(e, A.IfExpr):
            for x in (e.cond, e.then, e.orelse):
                self.check_expr(ctx, x)
            return
        # literals: nothing to check

    def _callee(self, ctx: _Ctx, f: A.Expr):
        """What a call's function expression names: ('fn', decl, module), ('builtin', BuiltinFn, None),
        or None (something else: a type conversion, an error reported elsewhere)."""
        if isinstance(f, A.Index):
            f = f.base
        if isinstance(f, A.Name) and ctx.lookup(f.id) is None:
            g = self.resolve_global(ctx, f.id)
            if g is not None and g[0] in ("fn", "builtin"):
                return g
        if isinstance(f, A.Field) and isinstance(f.base, A.Name) and ctx.lookup(f.base.id) is None:
            g = self.resolve_global(ctx, f.base.id)
            if g is not None and g[0] == "module" and f.name in g[1].fns:
                return ("fn", g[1].fns[f.name], g[1])
        return None

    def check_call(self, ctx: _Ctx, e: A.Call) -> None:
        f = e.func
        callee = self._callee(ctx, f)
        if callee is None and isinstance(f, A.Name) and f.id == "range" and ctx.lookup("range") is None:
            self.error("range(...) is only used in a for loop", e.span, hint="for i in range(a, b) { ... }")
            for a in e.args:
                self.check_expr(ctx, a)
            return
        if callee is None and not (isinstance(f, A.Field) and isinstance(f.base, A.Name)
                                   and f.base.id == "target"):
            self.check_expr(ctx, f)
        elif isinstance(f, A.Index):
            for a in f.args:
                if isinstance(a, (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr)):
                    self.check_type(ctx, a)
                else:
                    self.check_expr(ctx, a)
            for k in f.kwargs:
                self.check_expr(ctx, k.value)
        for a in e.args:
            self.check_expr(ctx, a)
        for k in e.kwargs:
            self.check_expr(ctx, k.value)
        if callee is None and isinstance(f, A.Name) and ctx.lookup(f.id) is not None:
            sym = ctx.lookup(f.id)
            ft = sym.fn_type
            if ft is not None and ft.params is not None and (len(e.args) != len(ft.params) or e.kwargs):
                self.error(f"'{f.id}' is a {_texpr_str(ft)}: it takes {len(ft.params)} argument"
                           f"{'s' if len(ft.params) != 1 else ''}, found {len(e.args) + len(e.kwargs)}", e.span)
            return
        if callee is None:
            if isinstance(f, A.Field) and isinstance(f.base, A.Name) and f.base.id == "target" \
                    and ctx.lookup("target") is None:
                if f.name != "has":
                    self.error(f"target.{f.name} is not a function", f.span)
                elif len(e.args) != 1 or e.kwargs:
                    self.error("target.has takes one argument: a feature name", e.span,
                               hint='target.has("feature")')
            return
        kind, obj, mod = callee
        if kind == "builtin":
            b: B.BuiltinFn = obj
            n = len(e.args)
            if b.name == "printf":
                self.check_printf(e)
            elif b.name == "assert" and len(e.args) > 1:
                self.check_printf(A.Call(e.func, e.args[1:], [], span=e.span), "assert's message")
            elif not b.min_args <= n <= b.max_args:
                want = str(b.min_args) if b.min_args == b.max_args else f"{b.min_args} to {b.max_args}"
                self.error(f"{b.name} takes {want} argument{'s' if b.max_args != 1 else ''}, found {n}",
                           e.span, hint=b.doc or None)
            for k in e.kwargs:
                if k.name not in b.kwargs:
                    self.error(f"{b.name} has no keyword argument '{k.name}'", k.span,
                               hint=("it takes: " + ", ".join(b.kwargs)) if b.kwargs else None)
            if b.brackets == "required" and not isinstance(f, A.Index):
                self.error(f"{b.name} needs {b.bracket_what} in brackets", f.span, hint=b.doc or None)
            if b.brackets == "no" and isinstance(f, A.Index):
                self.error(f"{b.name} takes no compile-time arguments", f.span, hint=b.doc or None)
            return
        decl: A.FnDecl = obj
        if decl.is_kernel:
            self.error(f"'{decl.name}' is a kernel; kernels are launched from the host, not called",
                       f.span, hint="move the shared code into a fn and call that")
            return
        if len(e.args) != len(decl.params) or e.kwargs:
            self.error(f"fn '{decl.name}' takes {len(decl.params)} argument"
                       f"{'s' if len(decl.params) != 1 else ''}, found {len(e.args) + len(e.kwargs)}",
                       e.span, hint=f"{decl.name}({', '.join(p.name for p in decl.params)})")
        if isinstance(f, A.Index) and len(f.args) + len(f.kwargs) > len(decl.cparams):
            self.error(f"fn '{decl.name}' takes {len(decl.cparams)} compile-time argument"
                       f"{'s' if len(decl.cparams) != 1 else ''}, found {len(f.args) + len(f.kwargs)}",
                       f.span)
        ctx.calls.append((decl, mod, e.span))

    def check_printf(self, e: A.Call, what: str = "printf") -> None:
        """The format is a string literal that parses and reads as many arguments as are passed (the
        argument types are checked when the call is lowered); ``what`` names it in messages."""
        try:
            check_call(e, what)
        except FormatProblem as p:
            self.error(p.message, p.span, p.hint)

    # --- recursion --------------------------------------------------------------------------------
    def check_recursion(self, names: dict[tuple[str, str], str]) -> None:
        """Report every cycle of the call graph once (GPUs have no call stack to speak of)."""
        WHITE, GREY, BLACK = 0, 1, 2
        color = {k: WHITE for k in self.graph}
        reported: set[frozenset] = set()
        for root in self.graph:
            if color[root] != WHITE:
                continue
            # iterative DFS with an explicit path
            path: list[tuple[str, str]] = [root]
            iters = [iter(self.graph.get(root, []))]
            color[root] = GREY
            while iters:
                nxt = next(iters[-1], None)
                if nxt is None:
                    color[path[-1]] = BLACK
                    path.pop()
                    iters.pop()
                    continue
                callee, span = nxt
                c = color.get(callee, BLACK)
                if c == WHITE:
                    color[callee] = GREY
                    path.append(callee)
                    iters.append(iter(self.graph.get(callee, [])))
                elif c == GREY:
                    cyc = path[path.index(callee):]
                    key = frozenset(cyc)
                    if key not in reported:
                        reported.add(key)
                        chain = " -> ".join(names.get(k, k[1]) for k in cyc + [callee])
                        if len(cyc) == 1:
                            msg = f"fn '{names.get(callee, callee[1])}' calls itself: {chain}"
                        else:
                            msg = f"recursive calls: {chain}"
                        self.error(msg, span, hint="recursion is not supported on GPUs (there is no call "
                                   "stack to speak of); rewrite it as a loop")


def always_returns(block: A.Block) -> bool:
    """Whether every path through ``block`` ends in a return (comptime ifs count all their arms)."""
    for s in block.stmts:
        if isinstance(s, A.Return):
            return True
        if isinstance(s, A.Block) and always_returns(s):
            return True
        if isinstance(s, A.If) and s.orelse is not None and always_returns(s.orelse) \
                and all(always_returns(a.body) for a in s.arms):
            return True
    return False


def dotted_name(e: A.Expr) -> str | None:
    """``relu`` or ``epilogue.bias`` for a Name or a Field of a Name (how a fn is named as a
    compile-time value); None for any other expression."""
    if isinstance(e, A.Name):
        return e.id
    if isinstance(e, A.Field) and isinstance(e.base, A.Name):
        return f"{e.base.id}.{e.name}"
    return None


def _texpr_str(t: A.TypeExpr | None) -> str:
    if t is None:
        return "nothing"
    if isinstance(t, A.FnTypeExpr):
        if t.params is None:
            return "fn"
        ps = ", ".join((f"{n}: " if n else "") + _texpr_str(p) for n, p in zip(t.names or [None] * len(t.params),
                                                                             t.params))
        return f"fn({ps})" + (f" -> {_texpr_str(t.ret)}" if t.ret is not None else "")
    if isinstance(t, A.TypeName):
        return t.name
    if isinstance(t, A.PtrTypeExpr):
        inner = _texpr_str(t.pointee)
        return f"ptr<{inner}, {t.space}>" if t.space else f"ptr<{inner}>"
    if isinstance(t, A.VecTypeExpr):
        return f"vec<{_texpr_str(t.elem)}, {_expr_str(t.count)}>"
    if isinstance(t, A.ArrayTypeExpr):
        return f"[{_texpr_str(t.elem)}; {_expr_str(t.count)}]"
    return "?"


def _expr_str(e: A.Expr) -> str:
    if isinstance(e, A.IntLit):
        return str(e.value)
    if isinstance(e, A.Name):
        return e.id
    return "..."


texpr_str = _texpr_str
