"""Array literals, ``const`` declarations and the conditional expression, for
:class:`~kcompiler.frontend.fn_lowering.FnLowering` (``fl`` below).

- ``[a, b, c]`` is an :class:`~kcompiler.frontend.values.ArrayValue` of type ``[T; 3]``: T is the type
  of the typed elements (all the same) to which the literals adapt, or, for literals only, their
  default type (``i32``, ``f32``, ``bool``); a declared type (``let c: [f16; 3] = [1, 2, 3]``) is the
  context the elements adapt to instead. ``let``/``var`` store it into a local array.
- ``const NAME[: T] = value;`` is evaluated at compile time: literals, operators, other consts,
  compile-time parameters (in a block) and target facts. A scalar const is a compile-time value; a
  table is an ArrayValue whose elements are compile-time values: indexing it with a compile-time index
  folds, with a run-time index it loads from the table, placed once per module in constant memory
  (the IR's ``const_data`` op: NVPTX ``.const``, AMDGCN address space 4, a private constant on the CPU).
- ``if c { a } else { b }`` evaluates only the chosen side; both sides have one type.
"""
from __future__ import annotations

from typing import Any

from ..diagnostics import SourceSpan
from ..ir import Region, Value
from ..ir.types import BOOL, I32, AddressSpace, ArrayType, PointerType, ScalarType, Type, VectorType
from . import ast as A
from .semantic import CV, SemanticError, adapts, convert_cv, default_type
from .values import POISON, ArrayValue, Place, Poison, type_desc

_IN_PROGRESS = object()


# --- one type for several values ---------------------------------------------------------------------

def one_type(fl: Any, items: list[tuple[Any, SourceSpan]], what: str, span: SourceSpan,
             want: Type | None = None) -> Type:
    """The type the values of ``items`` (CVs or IR values, each with its span) share, for ``what``
    ('array element', 'branch'): ``want`` if given, else the type of the typed values (they must all
    have it) or the literals' default type. A located error where they differ."""
    for v, s in items:
        if isinstance(v, CV) and v.kind == "str":
            fl.fail(f"a string cannot be an {what}", s)
        t = v.type if isinstance(v, Value) else None
        if t is not None and not isinstance(t, (ScalarType, VectorType, PointerType)):
            fl.fail(f"an {what} is a scalar, a vector or a pointer, found {t}", s)
    if want is None:
        typed = [(v, s) for v, s in items if isinstance(v, Value) or v.type is not None]
        if typed:
            want = typed[0][0].type
            for v, s in typed[1:]:
                if v.type != want:
                    fl.fail(f"mixed {what} types: {v.type} here, {want} at {typed[0][1]}", s,
                            hint=f"convert it: {want}(x)" if isinstance(want, ScalarType) else None)
        else:
            kinds = {v.kind for v, _ in items}
            if len(kinds) > 1:
                v, s = next((v, s) for v, s in items if v.kind != items[0][0].kind)
                fl.fail(f"mixed {what} types: {v.describe()} here, {items[0][0].describe()} at {items[0][1]}",
                        s, hint="write every one as a float (2.0) or convert: f32(x)")
            try:
                want = default_type(items[0][0])
            except SemanticError as err:
                fl.sem(err, items[0][1])
    elem = want.elem if isinstance(want, VectorType) else want
    for v, s in items:
        if isinstance(v, CV):
            if not (isinstance(elem, ScalarType) and adapts(v, elem)):
                fl.fail(f"{v.describe()} {v.value!r} does not fit the {what} type {want}", s,
                        hint=f"write {want}({v.value!r}) to convert" if isinstance(want, ScalarType) else None)
        elif v.type != want:
            fl.fail(f"mixed {what} types: {v.type} here, {want} expected", s,
                    hint=f"convert it: {want}(x)" if isinstance(want, ScalarType) else None)
    return want


def _typed(fl: Any, v: Any, t: Type, span: SourceSpan) -> Any:
    """A CV as a compile-time value of type ``t`` (it adapts; one_type checked), an IR value as is."""
    if isinstance(v, CV) and isinstance(t, ScalarType):
        try:
            return convert_cv(v, t)
        except SemanticError as err:
            fl.sem(err, span)
    return fl.to_type(v, t, span) if isinstance(v, CV) else v


# --- array literals ---------------------------------------------------------------------------------

def array_literal(fl: Any, e: A.ArrayLit, want: ArrayType | None = None) -> ArrayValue:
    """The value of ``[a, b, ...]``, its elements typed by ``want`` (a declared type) or unified."""
    if want is not None and want.count != len(e.elems):
        fl.fail(f"the literal has {len(e.elems)} element{'s' if len(e.elems) != 1 else ''}, {want} has "
                f"{want.count}", e.span, hint=f"write {want.count} elements, or declare [{want.elem}; "
                f"{len(e.elems)}]")
    items = [(fl.rvalue(fl.ev(x), x.span), x.span) for x in e.elems]
    t = one_type(fl, items, "array element", e.span, want.elem if want is not None else None)
    return ArrayValue(ArrayType(t, len(items)), [_typed(fl, v, t, s) for v, s in items])


def array_conversion(fl: Any, t: ArrayType, args: list[A.Expr], e: Any) -> ArrayValue:
    """``[T; N](v)``: N copies of v; ``[T; N](a, b, ...)``: N values, each converted to T as ``T(x)``."""
    if len(args) not in (1, t.count):
        fl.fail(f"a conversion to {t} takes 1 or {t.count} arguments, found {len(args)}", e.span)
    vals = [fl.convert_value(fl.rvalue(fl.ev(a), a.span), t.elem, a.span) for a in args]
    vals = [fl.materialise(v, a.span, t.elem) if isinstance(v, CV) and not isinstance(t.elem, ScalarType)
            else v for v, a in zip(vals, args)]
    return ArrayValue(t, vals * t.count if len(args) == 1 else vals)


def array_value(fl: Any, e: A.Expr, want: ArrayType | None) -> Any:
    """``e`` evaluated where a declaration gives type ``want`` (an array literal takes it as context)."""
    if isinstance(e, A.ArrayLit):
        return array_literal(fl, e, want)
    v = fl.ev(e)
    if isinstance(v, ArrayValue) and want is not None and v.type != want:
        fl.fail(f"cannot initialise a {want} with a {v.type}", e.span)
    return v


def store_local(fl: Any, av: ArrayValue, name: str, mutable: bool, span: SourceSpan) -> Place:
    """A local array (``let``/``var``) holding ``av``'s elements."""
    slot = fl.b.alloca(av.type, hint=name)
    for k, v in enumerate(av.elems):
        p = fl.b.elemptr(slot, fl.b.const(k, I32))
        fl.b.store(p, fl.materialise(v, span, av.type.elem) if isinstance(v, CV) else v)
    return Place(slot, av.type, f"'{name}'", mutable=mutable)


def index_array(fl: Any, av: ArrayValue, idx_e: A.Expr) -> Any:
    """``av[i]``: a compile-time element for a compile-time index; else a place in the const's table in
    constant memory, or in a local copy of a literal."""
    i = fl.rvalue(fl.ev(idx_e), idx_e.span)
    if isinstance(i, CV):
        if i.kind != "int":
            fl.fail(f"an index must be an integer, found {i.describe()}", idx_e.span)
        if not 0 <= i.value < av.type.count:
            fl.fail(f"index {i.value} is out of bounds (0 to {av.type.count - 1})", idx_e.span)
        return av.elems[int(i.value)]
    if not (isinstance(i.type, ScalarType) and i.type.is_int):
        fl.fail(f"an index must be an integer, found {i.type}", idx_e.span)
    if av.symbol is not None:
        p = fl.b.value("const_data", [], PointerType(av.type, AddressSpace.CONSTANT), hint=av.name or "",
                       symbol=av.symbol, values=[x.value for x in av.elems])
        return Place(fl.b.elemptr(p, i), av.type.elem, f"an element of const '{av.name}'", "store", False)
    place = store_local(fl, av, "lit", False, idx_e.span)
    return Place(fl.b.elemptr(place.ptr, i), av.type.elem, "an element of an array literal", "store", False)


# --- const -----------------------------------------------------------------------------------------------

def const_init(fl: Any, c: A.Const) -> Any:
    """The compile-time value of ``const`` declaration ``c`` in ``fl``'s scope: a CV or an ArrayValue
    of CVs (with the symbol of its table)."""
    want = fl.resolve_type(c.type) if c.type is not None else None
    if want is not None and not isinstance(want, (ScalarType, ArrayType)) or \
            isinstance(want, ArrayType) and not isinstance(want.elem, ScalarType):
        fl.fail(f"a const is a scalar or an array of scalars, not {want}", c.type.span)
    with fl.b.at(Region()) as r:
        v = array_value(fl, c.value, want if isinstance(want, ArrayType) else None)
        v = fl.rvalue(v, c.value.span) if not isinstance(v, ArrayValue) else v
        known = isinstance(v, CV) or (isinstance(v, ArrayValue) and all(isinstance(x, CV) for x in v.elems))
        if not known or r.ops:
            fl.fail(f"the value of const '{c.name}' is not known at compile time", c.value.span,
                    hint="a const is made of literals, other consts, compile-time parameters and target facts; "
                         "use let for a run-time value")
    if isinstance(v, ArrayValue):
        if want is not None and not isinstance(want, ArrayType):
            fl.fail(f"cannot initialise const '{c.name}' ({want}) with an array ({v.type})", c.value.span)
        v = ArrayValue(v.type, v.elems, c.name, fl.L.unique(f"kc_const_{fl.mod.prefix}{c.name}"))
        return v
    if isinstance(want, ArrayType):
        fl.fail(f"cannot initialise const '{c.name}' ({want}) with {v.describe()}", c.value.span,
                hint=f"write an array literal: [{', '.join(['...'] * min(want.count, 3))}]")
    if v.kind == "str":
        fl.fail("a string is not a value", c.value.span)
    return _const_cv(fl, v, want, c) if want is not None else v


def _const_cv(fl: Any, v: CV, want: ScalarType, c: A.Const) -> CV:
    if not (adapts(v, want) or (v.type is not None and v.type == want)):
        fl.fail(f"cannot initialise const '{c.name}' ({want}) with {v.describe()} {v.value!r}", c.value.span,
                hint=f"write {want}({v.value!r}) to convert")
    return convert_cv(v, want)


def stmt_const(fl: Any, s: A.Const) -> None:
    """``const NAME = value;`` in a block: bound to its compile-time value."""
    fl.bind(s.name, const_init(fl, s))


def module_const(fl: Any, mod: Any, name: str, span: SourceSpan | None) -> Any:
    """The value of module ``mod``'s ``const name``, evaluated once per compile in the module's scope
    (other consts, target facts; no function's names). Raises Poison when it has an error."""
    L = fl.L
    cache = L.__dict__.setdefault("module_consts", {})
    key = (mod.key, name)
    v = cache.get(key)
    if v is _IN_PROGRESS:
        fl.fail(f"const '{name}' depends on itself", span)
    if v is POISON:
        raise Poison()
    if v is not None:
        return v
    from .fn_lowering import FnLowering  # a cycle: fn_lowering imports the expression lowering
    c = mod.consts[name]
    decl = A.FnDecl("fn", f"const {name}", [], [], None, A.Block([], span=c.span), span=c.span,
                    name_span=c.name_span)
    ev = FnLowering(L, mod, decl, {})
    ev.scopes = [{}]
    cache[key] = _IN_PROGRESS
    try:
        v = const_init(ev, c)
    except Poison:
        cache[key] = POISON
        raise
    cache[key] = v
    return v


# --- the conditional expression ----------------------------------------------------------------------

def if_expression(fl: Any, e: A.IfExpr) -> Any:
    """``if c { a } else { b }``: the chosen side only is evaluated (a run-time condition lowers to an
    ``if`` op storing into a slot); a compile-time condition picks its side at compile time (the other
    side is type-checked and dropped)."""
    c = fl.rvalue(fl.ev(e.cond), e.cond.span)
    if not ((isinstance(c, CV) and c.kind == "bool") or (isinstance(c, Value) and c.type == BOOL)):
        fl.fail(f"the condition of an if expression must be bool, found {type_desc(c)}", e.cond.span,
                hint="compare it: x != 0" if not (isinstance(c, CV) and c.kind == "str") else None)
    then_r, else_r = Region(), Region()
    with fl.b.at(then_r):
        a = fl.rvalue(fl.ev(e.then), e.then.span)
    with fl.b.at(else_r):
        b = fl.rvalue(fl.ev(e.orelse), e.orelse.span)
    t = one_type(fl, [(a, e.then.span), (b, e.orelse.span)], "if-expression branch", e.span)
    if isinstance(c, CV):
        v, r, s = (a, then_r, e.then.span) if c.value else (b, else_r, e.orelse.span)
        fl.b.region.ops.extend(r.ops)
        return _typed(fl, v, t, s)
    slot = fl.b.alloca(t, hint="ifv")
    fl.b.op("if", [c], regions=[then_r, else_r])
    for v, r, s in ((a, then_r, e.then.span), (b, else_r, e.orelse.span)):
        with fl.b.at(r):
            fl.b.store(slot, fl.to_type(v, t, s))
    return fl.b.load(slot)
