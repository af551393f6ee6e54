"""Compile-time fn parameters: a fn passed to a generic kernel or fn and called inside it, resolved at
compile time (each fn bound is its own specialisation, its calls direct calls that LLVM inlines).

    fn matmul_store[EPI: fn(acc: f32, col: i32) -> f32 = identity](...) { ... EPI(acc, col) ... }

A parameter declared ``fn(...) -> R`` takes a fn of exactly that signature: binding one instantiates
it with its own compile-time parameters inferred from the signature's types (a generic fn fits when
they can be), and a fn that does not fit is a located error naming both signatures. A parameter
declared ``fn`` takes any fn; each call is then checked like a direct call. A fn is given by name: in
the source (``gemm[EPI = relu]``, ``= epilogue.bias``), or from the host as the kernel's file would
spell it (``EPI="epilogue.bias"``), where it arrives as a ``str`` (compile-time values from the host
are JSON: ints, bools, types, and these names).

The lowering calls :func:`bind` when it declares a specialisation, :func:`call` for ``EPI(...)`` and
:func:`comptime_arg` for a fn passed on in brackets.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..diagnostics import SourceSpan
from ..ir import Function
from ..ir.types import VOID, Type
from . import ast as A
from .checker import dotted_name, texpr_str
from .comptime_defaults import MissingParam, bind_defaults
from .program import ComptimeParam, SourceModule, StaticEvalError, _unify, comptime_params
from .values import VOIDV, FnRef, Poison

if TYPE_CHECKING:  # pragma: no cover
    from .fn_lowering import FnLowering


@dataclass(frozen=True)
class FnValue:
    """A fn as a compile-time value: fn ``name`` of the module whose key is ``module``. ``shown`` is how
    it was written (messages, mangled symbols); ``span`` where the source bound it (None: the host)."""

    module: str
    name: str
    shown: str = field(compare=False)
    span: SourceSpan | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.shown


@dataclass
class BoundFn:
    """What a compile-time fn parameter ``param`` names inside one specialisation: the fn bound to it
    and, when the parameter declares a signature, that fn's instance (``function``) with the
    signature's parameter types ``sig`` and result ``ret``."""

    param: str
    value: FnValue
    module: SourceModule
    decl: A.FnDecl
    function: Function | None = None
    sig: list[Type] | None = None
    ret: Type = VOID


def signature_text(decl: A.FnDecl) -> str:
    """``fn(acc: f32, col: i32) -> f32``: a declared fn's signature as a fn kind is written."""
    return texpr_str(A.FnTypeExpr([p.type for p in decl.params], [p.name for p in decl.params], decl.ret,
                                  span=decl.span))


def _resolve_name(fl: "FnLowering", name: str, param: str, span: SourceSpan | None) -> tuple[SourceModule, A.FnDecl]:
    """The fn ``name`` ('relu', 'epilogue.bias') as the module being lowered spells it."""
    mod = fl.mod
    head, _, tail = name.partition(".")
    if tail:
        m = mod.imports.get(head)
        decl = m.fns.get(tail) if m is not None else None
        where = f"module '{head}'" if m is not None else f"{mod.file.path} (no module '{head}' is imported)"
        owner = m
    else:
        decl, where, owner = mod.fns.get(head), mod.file.path, mod
    if decl is None or owner is None:
        fns = sorted(n for n, d in mod.fns.items() if not d.is_kernel)
        fl.fail(f"{param} = '{name}': no fn '{name}' in {where}", span,
                hint=f"the fns of {mod.file.path}: {', '.join(fns)}" if fns else None)
    if decl.is_kernel:
        fl.fail(f"{param} = '{name}': '{name}' is a kernel; a compile-time fn parameter takes a fn", span)
    return owner, decl


def bind(fl: "FnLowering", c: ComptimeParam, v: Any) -> BoundFn:
    """Bind compile-time fn parameter ``c`` of the specialisation ``fl`` declares to ``v`` (a FnValue,
    or a name spelled in ``fl``'s module: the declared default or the host's value); with a declared
    signature, instantiate the fn for it and check that it fits. Raises Poison after a located error."""
    cp = next(x for x in fl.decl.cparams if x.name == c.name)
    ft = cp.type
    assert isinstance(ft, A.FnTypeExpr)
    if isinstance(v, FnValue):
        mod = fl.L.program.modules[v.module]
        decl = mod.fns[v.name]
        span = v.span
    else:
        is_default = cp.default is not None and dotted_name(cp.default) == v
        mod, decl = _resolve_name(fl, str(v), c.name, cp.default.span if is_default else cp.span)
        v = FnValue(mod.key, decl.name, str(v))
        span = cp.default.span if is_default else None
    # A fn bound by one of the specialisations that lead here would call itself through the parameter:
    # GPUs have no call stack to speak of (the checker's recursion check cannot see these calls).
    chain, f = [], fl
    while f is not None:
        chain.append(f.decl.name)
        if f.mod is mod and f.decl is decl:
            fl.fail(f"'{v.shown}' bound to {c.name} would call itself: "
                    f"{' -> '.join(reversed(chain))} -> {c.name} = {v.shown}", span or cp.span,
                    hint="recursion is not supported on GPUs (there is no call stack to speak of)")
        f = f.called_from[1]
    bound = BoundFn(c.name, v, mod, decl)
    if ft.params is None:
        return bound
    owner = f"{'kernel' if fl.decl.is_kernel else 'fn'} '{fl.decl.name}'"
    sig = [fl.resolve_type(t) for t in ft.params]
    ret = fl.resolve_type(ft.ret) if ft.ret is not None else VOID
    want = "fn(" + ", ".join(map(str, sig)) + ")" + (f" -> {ret}" if ret != VOID else "")
    where = span or decl.name_span  # the binding in the source, else the fn the host named

    names = ft.names or [None] * len(sig)
    fix = f"fn {decl.name}(" + ", ".join(f"{n or f'p{k}'}: {t}" for k, (n, t) in enumerate(zip(names, sig))) + ")" \
        + (f" -> {ret}" if ret != VOID else "")

    def mismatch(why: str = "") -> None:
        fl.fail(f"'{v.shown}' cannot be {c.name} of {owner}: {c.name} expects {want}, and '{v.shown}' is "
                f"{signature_text(decl)}{why}", where, hint=f"{c.name} is declared at {cp.span}: write {fix}")

    if len(decl.params) != len(sig):
        mismatch()
    cps = comptime_params(decl)
    byname = {x.name: x for x in cps}
    inferred: dict[str, Any] = {}
    for p, t in zip(decl.params, sig):
        for name, val in _unify(p.type, t, byname):
            if inferred.setdefault(name, val) != val:
                mismatch(f" ({name} would be both {inferred[name]} and {val})")
    try:
        values = bind_defaults(cps, inferred)
    except MissingParam as e:
        mismatch(f" (its compile-time parameter {e.param.name} is not fixed by those types)")
    except StaticEvalError as e:
        fl.fail(e.message, e.span)
    fn = fl.L.instance(mod, decl, values, where, fl)
    if fn is None:
        raise Poison()
    if [p.type for p in fn.params] != sig or fn.ret != ret:
        mismatch()
    bound.function, bound.sig, bound.ret = fn, sig, ret
    return bound


def call(fl: "FnLowering", f: BoundFn, e: A.Call) -> Any:
    """``EPI(args)``: a direct call of the fn bound to the parameter (checked against its declared
    signature, or, for a bare ``fn`` parameter, like any call of that fn)."""

    if f.function is None:
        return fl.call_fn(FnRef(f.module, f.decl), e)
    assert f.sig is not None
    if len(e.args) != len(f.sig) or e.kwargs:
        fl.fail(f"{f.param} ('{f.value.shown}') takes {len(f.sig)} arguments, found "
                f"{len(e.args) + len(e.kwargs)}", e.span)
    args = []
    for k, (a, t) in enumerate(zip(e.args, f.sig)):
        v = fl.rvalue(fl.ev(a), a.span)
        args.append(fl.coerce(v, t, a.span, f"pass {{src}} as argument {k + 1} ({t}) of {f.param}"))
    r = fl.b.call(f.function.name, args, f.function.ret)
    return VOIDV if r is None else r


def comptime_arg(fl: "FnLowering", c: ComptimeParam, a: Any, decl: A.FnDecl) -> FnValue:
    """The value of a fn passed in brackets to compile-time fn parameter ``c`` of ``decl``:
    ``gemm[EPI = relu]``, ``[EPI = epilogue.bias]``, or ``[EPI = EPI]`` (passing one's own on)."""

    what = f"compile-time parameter '{c.name}' of '{decl.name}' is a fn: pass a fn's name (relu, module.relu)"
    if not isinstance(a, A.Node) or isinstance(a, (A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr)):
        fl.fail(what, getattr(a, "span", None))
    v = fl.comptime_value(a, f"compile-time argument {c.name}")
    if isinstance(v, BoundFn):
        return dataclasses.replace(v.value, span=a.span)
    if isinstance(v, FnRef):
        if v.targs or v.tkwargs:
            fl.fail(f"pass '{dotted_name(a.base) if isinstance(a, A.Index) else v.decl.name}' without compile-time "
                    "arguments: they are inferred from the signature it is bound to", a.span)
        if v.decl.is_kernel:
            fl.fail(f"'{v.decl.name}' is a kernel; {what}", a.span)
        return FnValue(v.module.key, v.decl.name, dotted_name(a) or v.decl.name, a.span)
    fl.fail(what, a.span)
    raise AssertionError
