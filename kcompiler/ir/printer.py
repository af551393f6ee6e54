"""The textual form of the IR, for ``kc compile --emit ir`` and for tests.

    kernel @vadd(%a: ptr<f32>, %b: ptr<f32>, %out: ptr<f32>, %n: i32) {
      %0 = special thread_id.x : i32
      %1 = cmp lt %0, %n : bool
      if %1 {
        ...
      }
    }

Values are numbered per function in order of definition; a value's hint, when it has one, follows
the number (``%3.i``) so the text stays readable and unambiguous.
"""
from __future__ import annotations

from .core import Function, Module, Op, Region, Value


class _Namer:
    def __init__(self) -> None:
        self.names: dict[int, str] = {}

    def define(self, v: Value) -> str:
        n = len(self.names)
        hint = "".join(c if c.isalnum() or c == "_" else "_" for c in v.hint)
        self.names[v.id] = f"%{n}.{hint}" if hint else f"%{n}"
        return self.names[v.id]

    def __call__(self, v: Value) -> str:
        return self.names.get(v.id, f"%?{v.id}")


def _attrs(op: Op) -> str:
    a = dict(op.attrs)
    if op.name == "special":
        return f" {a.pop('reg')}.{a.pop('dim', 'x')}" + _rest(a)
    if op.name in ("cmp",):
        return f" {a.pop('pred')}" + _rest(a)
    if op.name == "math":
        return f" {a.pop('fn')}" + _rest(a)
    if op.name == "atomic":
        return f" {a.pop('op')}" + _rest(a)
    if op.name == "intrinsic":
        return f" {a.pop('intrinsic')}" + _rest(a)
    if op.name == "call":
        return f" @{a.pop('callee')}" + _rest(a)
    if op.name in ("printf", "printf_buffer", "string"):
        return f" {quote(a.pop('value' if op.name == 'string' else 'format'))}" + _rest(a)
    if op.name == "const":
        return f" {a.pop('value')!r}" + _rest(a)
    return _rest(a)


def quote(s: str) -> str:
    """``s`` as a C string literal: ``"x = %d\\n"``."""
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif ord(c) < 32 or ord(c) == 127:
            out.append(f"\\x{ord(c):02x}")
        elif 0xDC80 <= ord(c) <= 0xDCFF:  # a byte that is not UTF-8 (surrogateescape)
            out.append(f"\\x{ord(c) - 0xDC00:02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def _rest(a: dict) -> str:
    return " {" + ", ".join(f"{k}={v}" for k, v in a.items()) + "}" if a else ""


def _region(r: Region, names: _Namer, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    for op in r.ops:
        lhs = f"{names.define(op.result)} = " if op.result is not None else ""
        ops = ", ".join(names(v) for v in op.operands)
        ty = f" : {op.result.type}" if op.result is not None else ""
        if op.name == "if":
            out.append(f"{pad}if {ops} {{")
            _region(op.regions[0], names, indent + 1, out)
            if op.regions[1].ops:
                out.append(f"{pad}}} else {{")
                _region(op.regions[1], names, indent + 1, out)
            out.append(f"{pad}}}")
        elif op.name == "for":
            iv = names.define(op.regions[0].args[0])
            out.append(f"{pad}for {iv} = {ops}{_attrs(op)} {{")
            _region(op.regions[0], names, indent + 1, out)
            out.append(f"{pad}}}")
        elif op.name == "while":
            out.append(f"{pad}while {{")
            _region(op.regions[0], names, indent + 1, out)
            out.append(f"{pad}}} do {{")
            _region(op.regions[1], names, indent + 1, out)
            out.append(f"{pad}}}")
        else:
            sep = " " if ops else ""
            out.append(f"{pad}{lhs}{op.name}{_attrs(op)}{sep}{ops}{ty}")


def print_function(fn: Function) -> str:
    names = _Namer()
    params = ", ".join(f"{names.define(p)}: {p.type}" for p in fn.params)
    ret = f" -> {fn.ret}" if str(fn.ret) != "void" else ""
    attrs = f" attributes {{{', '.join(f'{k}={v}' for k, v in fn.attrs.items())}}}" if fn.attrs else ""
    kw = "kernel" if fn.is_kernel else "fn"
    out = [f"{kw} @{fn.name}({params}){ret}{attrs} {{"]
    _region(fn.body, names, 1, out)
    out.append("}")
    return "\n".join(out)


def print_module(m: Module) -> str:
    """The whole module as text (one function after another, module attributes first)."""
    head = f"module @{m.name}" + (_rest(m.attrs) if m.attrs else "")
    return "\n\n".join([head] + [print_function(f) for f in m.functions]) + "\n"
