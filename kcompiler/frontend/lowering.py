"""Typed AST to IR, for a whole program: :class:`ModuleLowering` specialises kernels and the device
functions they call for each set of compile-time values (one IR function each, mangled symbol) and
collects the errors; :func:`lower` and :func:`check` are the API.

One function's lowering is fn_lowering.py's :class:`~kcompiler.frontend.fn_lowering.FnLowering`, a
visitor of statements (lower_stmts.py) and expressions (lower_exprs.py) that applies the type rules of
semantic.py; builtins are lowered by the handlers of builtin_registry.py; what expressions evaluate to
besides compile-time and IR values is in values.py.

What happens in the frontend and nowhere else: compile-time evaluation (``comptime if`` lowers only the
branch taken; ``for i in comptime range`` is unrolled, each iteration seeing ``i`` as a constant;
literals and compile-time parameters are computed with while they are only that), and specialisation.
Everything else that optimises (constant folding of run-time values, unrolling, DCE) is the passes'.

Type errors are collected, not raised one by one: an expression that fails reports its error and
abandons its statement (:class:`~kcompiler.frontend.values.Poison`); names it would have defined are
poisoned so that their uses report nothing more.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

from ..diagnostics import CompileError, Diagnostics, SourceSpan
from ..ir import Function, Module, builtin_surface, intrinsics
from ..gcscope import fewer_collections
from ..limits import check_region_depth, deep_recursion
from . import ast as A
from .comptime_defaults import MissingParam, bind_defaults
from .fn_lowering import FnLowering
from .program import Program, SourceModule, StaticEvalError, _check_given
from .values import Poison

#: the declaration a module const's evaluation stands in (it has no function of its own)
_CONST_HOLDER = A.FnDecl("fn", "const", [], [], None, A.Block([], span=None), span=None)  # type: ignore[arg-type]



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
        if span not in self.silenced:  # else the loader said it; the caller's Poison is the error type
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

    def consts(self, mod: SourceModule) -> None:
        """Evaluate every module-level const of ``mod`` (their errors reported), used or not."""
        from . import lower_arrays  # a cycle through fn_lowering
        for c in mod.ast.consts:
            try:
                lower_arrays.module_const(FnLowering(self, mod, _CONST_HOLDER, {}), mod, c.name, c.name_span)
            except Poison:
                pass

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
        L.consts(program.main)
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
    key = None if program.errors else _checked_key(program, target, max_errors)
    if key is not None and key in _CHECKED:
        _CHECKED.move_to_end(key)
        return

    def clean(d: Any) -> bool:  # no loader error inside this declaration but undefined names
        whole = d.span.merge(d.body.span)
        return not any(_inside(e.span, whole) for e in program.errors if e.span not in program.recoverable)

    items = list(program.errors)
    with deep_recursion(), fewer_collections():
        try:
            L = ModuleLowering(program, target)
            L.silenced = program.recoverable
            L.diag.limit = max_errors
            # A clean declaration may call one with errors: that one is declared but not lowered.
            L.skip_bodies = {id(d) for m in program.modules.values() for d in m.ast.decls if not clean(d)}
            L.consts(program.main)
            # snapshots: lowering may load a module the program did not import (a float % takes
            # stdlib/libm_rem.kc's fmod), whose functions are then checked where they are used
            for name, decl in list(program.kernels.items()):
                if clean(decl) and all(c.default is not None for c in program.signature(name).comptime):
                    L.kernel(name, {})
                    L.drain()
            for mod in list(program.modules.values()):
                for d in mod.ast.decls:
                    if not d.is_kernel and not d.cparams and clean(d):
                        L.instance(mod, d, {}, None)
                        L.drain()
            check_region_depth(L.finish())  # loops and blocks nested too deep (limits.py)
        except CompileError as e:
            items += e.diagnostics
    if items:
        raise CompileError(sorted(items, key=_position))
    if key is not None:  # the key as it is now: checking may have loaded a backend's intrinsics
        _CHECKED[_checked_key(program, target, max_errors)] = None  # type: ignore[index]
        if len(_CHECKED) > _CHECKED_KEPT:
            _CHECKED.popitem(last=False)


#: What :func:`check` found without an error in this process, by :func:`_checked_key`: a compile
#: checks the whole program, the standard library's imports included (every device function without
#: compile-time parameters), and a process compiling many specialisations of one program checked it
#: again for each. Only a clean result is kept, so every error is still reported at every call.
_CHECKED: "OrderedDict[tuple, None]" = OrderedDict()
_CHECKED_KEPT = 64


def _checked_key(program: Program, target: Any, max_errors: int) -> tuple | None:
    """What :func:`check`'s result depends on: the text and path of every module of ``program``, the
    target as the frontend sees it (its class, ``describe()``, its features: fast_math and release
    among them), and the builtins and intrinsics registered now (a backend registered later adds
    some). None, not kept, for a target that is not a Target record (the tests' stand-ins)."""
    if not callable(getattr(target, "describe", None)) or not hasattr(target, "features"):
        return None
    modules = tuple((m.key, m.file.path, m.file.text) for m in program.modules.values())
    tgt = (type(target).__module__, type(target).__qualname__, repr(sorted(target.describe().items())),
           tuple(sorted(target.features)))
    registered = (tuple((n, id(b)) for n, b in builtin_surface.builtins().items()),
                  tuple((n, id(intrinsics.lookup(n))) for n in intrinsics.registered()))
    return modules, tgt, registered, max_errors


def _inside(span: SourceSpan | None, outer: SourceSpan) -> bool:
    return span is not None and span.file is outer.file and \
        (outer.line, outer.col) <= (span.line, span.col) <= (outer.end_line, outer.end_col)


def _position(d: Any) -> tuple:
    s = d.span
    return (0, "", 0, 0) if s is None else (1, s.file.path, s.line, s.col)
