"""Structs in the lowering: a struct declaration (``struct Pair { lo: f32, hi: f32 }``, generic with
``[T: type]``) instantiated to an :class:`~kcompiler.ir.types.StructType`, struct literals, and field
access on places (a ``fieldptr``) and on values (a ``struct_get``). docs/LANGUAGE.md, "Structs", gives
the rules; the functions here take the :class:`~kcompiler.frontend.fn_lowering.FnLowering` as ``fl``.
"""
from __future__ import annotations

from typing import Any

from ..ir import Value
from ..ir.types import BOOL, I32, ArrayType, StructType, TensorMapType, Type
from . import ast as A
from .checker import suggest
from .semantic import CV
from .values import Place, TypeRef, is_expr


def lookup_struct(fl, name: str) -> A.StructDecl | None:
    """The struct declaration ``name`` names in ``fl``'s module, unless a local name shadows it."""
    if fl.lookup(name) is not None:
        return None
    return fl.mod.structs.get(name)


def instantiate(fl, sd: A.StructDecl, args: list | None, span) -> StructType:
    """The StructType of ``sd`` with compile-time arguments ``args`` (bracket arguments, or None).
    Fails (a located error) for a wrong number or kind of argument, a field type that is not a
    value type, or a struct that contains itself."""
    cps = sd.cparams
    args = list(args or [])
    if len(args) != len(cps):
        if not cps:
            fl.fail(f"struct '{sd.name}' takes no compile-time arguments", span)
        fl.fail(f"struct '{sd.name}' takes {len(cps)} compile-time argument{'s' * (len(cps) != 1)} "
                f"({', '.join(c.name for c in cps)}), found {len(args)}", span,
                hint=f"write {sd.name}[{', '.join(c.name for c in cps)}]")
    scope: dict[str, Any] = {}
    shown = []
    for c, a in zip(cps, args):
        if isinstance(a, A.KwArg):
            fl.fail("a struct's compile-time arguments are given in order", a.span)
        kind = c.type.name if isinstance(c.type, A.TypeName) else ""
        if kind == "type":
            t = fl.resolve_type(a) if not is_expr(a) or isinstance(a, A.Name) else None
            if t is None:
                v = fl.comptime_value(a, f"compile-time argument {c.name}")
                if not isinstance(v, TypeRef):
                    fl.fail(f"compile-time parameter '{c.name}' of struct '{sd.name}' is a type", a.span)
                t = v.type
            scope[c.name] = TypeRef(t)
            shown.append(str(t))
        else:
            v = fl.comptime_value(a, f"compile-time argument {c.name}")
            if not isinstance(v, CV) or v.kind not in ("int", "bool"):
                fl.fail(f"compile-time parameter '{c.name}' of struct '{sd.name}' is a{' bool' if kind == 'bool' else 'n integer'}",
                        a.span)
            scope[c.name] = CV(bool(v.value), BOOL) if kind == "bool" else CV(int(v.value), I32)
            shown.append(str(v.value).lower() if kind == "bool" else str(int(v.value)))
    name = sd.name + (f"[{', '.join(shown)}]" if cps else "")
    busy = fl.L.__dict__.setdefault("_structs_busy", set())
    if name in busy:
        fl.fail(f"struct '{sd.name}' contains itself", sd.name_span,
                hint="a struct holds a pointer to another of its type, not the struct itself")
    busy.add(name)
    saved = fl.scopes
    fl.scopes = [scope]  # a field type sees the struct's compile-time parameters only
    try:
        fields = []
        for f in sd.fields:
            t = fl.resolve_type(f.type)
            if isinstance(t, TensorMapType):
                fl.fail("a tensor_map is not a struct field: it is a kernel parameter", f.type.span)
            fields.append((f.name, t))
    finally:
        fl.scopes = saved
        busy.discard(name)
    return StructType(name, tuple(fields))


def literal(fl, e: A.StructLit) -> Value:
    """``Pair { lo: a, hi: b }``: every field given exactly once, each value converted implicitly
    (widening only) to the field's type."""
    sd = lookup_struct(fl, e.name)
    if sd is None:
        fl.fail(f"'{e.name}' is not a struct", e.name_span, hint=suggest(e.name, fl.mod.structs))
    if sd.cparams and e.targs is None:
        fl.fail(f"struct '{sd.name}' is generic: give its compile-time arguments", e.name_span,
                hint=f"write {sd.name}[{', '.join(c.name for c in sd.cparams)}] {{ ... }}")
    st = instantiate(fl, sd, e.targs, e.name_span)
    names = [n for n, _ in st.fields]
    given: dict[str, A.FieldInit] = {}
    for fi in e.inits:
        if fi.name not in names:
            fl.fail(f"struct {st} has no field '{fi.name}'", fi.span,
                    hint=suggest(fi.name, names) or f"its fields: {', '.join(names)}")
        if fi.name in given:
            fl.fail(f"field '{fi.name}' is given twice", fi.span, hint=f"first given at {given[fi.name].span}")
        given[fi.name] = fi
    missing = [n for n in names if n not in given]
    if missing:
        fl.fail(f"struct literal of {st} is missing field{'s' * (len(missing) > 1)} {', '.join(missing)}",
                e.name_span, hint="give every field: " + ", ".join(f"{n}: ..." for n in names))
    vals = []
    for n, t in st.fields:
        fi = given[n]
        v = fl.rvalue(fl.ev(fi.value), fi.value.span)
        vals.append(fl.coerce(v, t, fi.value.span, f"initialise field '{n}' ({t}) of {st} with {{src}}"))
    return fl.b.value("struct_build", vals, st)


def field(fl, base: Any, e: A.Field) -> Any:
    """``s.name`` on a struct place (a place: assignable if ``s`` is) or a struct value."""
    st = base.type
    assert isinstance(st, StructType)
    try:
        i = st.field_index(e.name)
    except KeyError:
        names = [n for n, _ in st.fields]
        fl.fail(f"struct {st} has no field '{e.name}'", e.name_span,
                hint=suggest(e.name, names) or f"its fields: {', '.join(names)}")
    ft = st.fields[i][1]
    if isinstance(base, Place):
        p = fl.b.value("fieldptr", [base.ptr], _ptr_to(base.ptr.type, ft), index=i)
        return Place(p, ft, f"field '{e.name}' of {base.what}", base.verb, base.mutable)
    if isinstance(ft, ArrayType):
        fl.fail(f"field '{e.name}' is an array: index it through a var or a pointer", e.name_span,
                hint="copy the struct into a var first: var s2 = s;")
    return fl.b.value("struct_get", [base], ft, index=i)


def _ptr_to(pt: Type, t: Type) -> Type:
    from ..ir.types import PointerType

    return PointerType(t, pt.space)
