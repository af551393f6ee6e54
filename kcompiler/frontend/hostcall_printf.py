"""printf where there is no vprintf: a call of the kernel language's ``printf`` becomes calls of
std.hostcall's printf service (stdlib/hostcall.kc), on AMD (served by the HIP runtime) and on the
CPU target and NVIDIA in hostcall mode (served by kcompiler.runtime.hostcall).

The message is what hipcc's device code sends (ROCm device-libs ockl/src/services.cl; LLVM's
AMDGPUEmitPrintf.cpp builds the same sequence): a control word (0: stdout), the format string with
its NUL packed little-endian into u64 words, then each argument as one u64 (integers extended to 64
bits, doubles as their bits, pointers as their address) or, for ``%s``, the string's bytes with its
NUL. Words travel seven per hostcall, the first with the BEGIN flag, the last with END. (hipcc
sends the control word alone in the BEGIN hostcall; filling that hostcall's other six words with
the format's first bytes is the same message in one hostcall less.)

The format is known at compile time, so its words are constants here: no string needs to live in
device memory.

A ``%s`` of a device string with a width or precision (``%8s``, ``%-8s``, ``%.3s``, ``%*.*s``) is
formatted on the device (std.hostcall's ``printf_string_field``: cut, padded, ``-`` and ``*``
honoured) and sent for a plain ``%s``: the HIP runtime of ROCm 6.x (clr
rocclr/device/devhcprintf.cpp, ``consumeCstring``, tag rocm-6.2.2) steps past a string by the
characters its conversion printed rather than by the string's length, so a field left to the host
would shift every later argument; the padded text under a plain ``%s`` reads the same on both.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ..ir.types import BOOL, F64, I64, U8, U32, U64, AddressSpace, PointerType, ScalarType
from ..ir.printf import Conversion, escape_text, expected_args, parse_format
from .program import HOSTCALL_ALIAS
from ..ir.types import I32

if TYPE_CHECKING:  # pragma: no cover
    from ..diagnostics import SourceSpan
    from .fn_lowering import FnLowering

#: Arguments of one hostcall of the printf service (word 0 is the descriptor).
WORDS_PER_CALL = 7
#: The descriptor of a message's first hostcall (bit 0: BEGIN; no id yet), and the printf
#: message's control word for stdout (ockl services.cl: FPRINTF_CTRL_STDOUT).
DESC_BEGIN = 1
CONTROL_STDOUT = 0


def format_words(fmt: str) -> list[int]:
    """The format string and its NUL as little-endian u64 words (UTF-8; the last word zero-padded)."""
    data = fmt.encode("utf-8") + b"\0"
    data += b"\0" * (-len(data) % 8)
    return [int.from_bytes(data[i:i + 8], "little") for i in range(0, len(data), 8)]


def field_format(fmt: str, args: list[Any], strings: list[bool]) -> tuple[str, list[tuple[str, Any]]]:
    """The format the host is sent, and the message's arguments, for ``printf(fmt, *args)``.

    Returns (format text, items): each item is ("word", value), ("string", value) or
    ("field", (value, width, precision, left)) for a ``%s`` with a width or precision, whose
    conversion is rewritten to a plain ``%s`` (the device formats the field). ``width`` and
    ``precision`` are an int or an IR value (a ``*`` argument, which is then not sent), or None."""

    text: list[str] = []
    items: list[tuple[str, Any]] = []
    at = 0
    for piece in parse_format(fmt):
        if not isinstance(piece, Conversion):
            text.append(escape_text(piece))
            continue
        n = len(expected_args(piece))
        vals, is_str = args[at:at + n], strings[at + n - 1]
        at += n
        if piece.conv == "s" and (piece.width is not None or piece.precision is not None):
            k = 0
            width = precision = None
            if piece.width == "*":
                width, k = vals[0], 1
            elif piece.width is not None:
                width = piece.width
            if piece.precision == "*":
                precision, k = vals[k], k + 1
            elif piece.precision is not None:
                precision = piece.precision
            text.append("%s")
            items.append(("field", (vals[k], width, precision, "-" in piece.flags)))
            continue
        text.append(fmt[piece.start:piece.end])
        items.extend(("string" if is_str and j == n - 1 else "word", v) for j, v in enumerate(vals))
    return "".join(text), items


def lower_hostcall_printf(fl: "FnLowering", span: "SourceSpan", fmt: str, args: list[Any],
                          strings: list[bool]) -> None:
    """Emit the printf service's calls for ``printf(fmt, *args)`` in ``fl`` (a FnLowering).

    ``args``: IR values after C's default promotions (i32/u32/i64/u64, f64, pointers);
    ``strings[k]``: whether argument k is a ``%s`` string (a ``ptr<u8>`` or ``ptr<i8>``)."""

    b = fl.b
    call = stdlib_caller(fl, HOSTCALL_ALIAS, span)

    def device_string(s: Any) -> Any:
        return global_string(fl, s, span)

    def field_int(v: Any) -> Any:
        return field_i32(fl, v)

    # The message, in order: runs of words, and strings to be sent from device memory. Word 0 is
    # the control word (0: stdout); the first hostcall (BEGIN) carries it with the first words of
    # the format, where hipcc's code sends it alone: the protocol appends a BEGIN packet's data too.
    host_fmt, arg_items = field_format(fmt, args, strings)
    items: list[tuple[str, Any]] = [("word", b.const(w, U64))
                                    for w in [CONTROL_STDOUT, *format_words(host_fmt)]]
    for kind, v in arg_items:
        items.append(("word", as_word(fl, v, span)) if kind == "word" else (kind, v))

    desc = b.const(DESC_BEGIN, U64)
    k = 0
    while k < len(items):
        kind, v = items[k]
        if kind in ("string", "field"):
            last = b.const(k == len(items) - 1, BOOL)
            if kind == "string":
                desc = call("printf_string", [desc, device_string(v), last])
            else:
                s, width, precision, left = v
                desc = call("printf_string_field", [desc, device_string(s),
                                                    field_int(0 if width is None else width),
                                                    field_int(precision), b.const(left, BOOL), last])
            k += 1
            continue
        run = []
        while k < len(items) and items[k][0] == "word" and len(run) < WORDS_PER_CALL:
            run.append(items[k][1])
            k += 1
        last = b.const(k == len(items), BOOL)
        padded = run + [b.const(0, U64)] * (WORDS_PER_CALL - len(run))
        desc = call("printf_words", [desc, b.const(len(run), U32), *padded, last])


def stdlib_caller(fl: "FnLowering", alias: str, span: "SourceSpan") -> Callable[[str, list[Any]], Any]:
    """``call(name, operands)``: emits in ``fl`` a call of fn ``name`` (no compile-time parameters)
    of the stdlib module the program imports as ``alias`` (std.hostcall, std.printf_buffer), and
    returns its result; ``span`` locates an error in instantiating it."""
    mod = fl.mod.imports[alias]

    def call(name: str, operands: list[Any]) -> Any:
        fn = fl.L.instance(mod, mod.fns[name], {}, span)
        return fl.b.call(fn.name, operands, fn.ret)
    return call


def global_string(fl: "FnLowering", s: Any, span: "SourceSpan") -> Any:
    """A ``%s`` argument as a ``ptr<u8>`` in the global address space (a const one, a string literal
    given to ``%*s``, by its address). Fails, located, for a string in another address space."""
    b = fl.b
    if s.type.space not in (AddressSpace.GLOBAL, AddressSpace.CONST):
        fl.fail(f"printf through {fl.target.printf_method} reads %s strings from global or const "
                f"memory, not {s.type}", span, hint="copy the string to global memory")
    if s.type.pointee != U8:  # ptr<i8> → ptr<u8>
        s = b.ptrcast(s, U8)
    if s.type.space != AddressSpace.GLOBAL:  # a literal for %*s: its address, as a global one
        s = b.bitcast(b.bitcast(s, U64), PointerType(U8))
    return s


def field_i32(fl: "FnLowering", v: Any) -> Any:
    """A %s field's width or precision (from :func:`field_format`) as an i32 value: -1 for no
    precision (None), a constant, or the ``*`` argument."""

    b = fl.b
    if v is None:
        return b.const(-1, I32)  # no precision (no width is width 0: callers pass 0)
    if isinstance(v, int):
        return b.const(v, I32)
    return v if v.type == I32 else b.cast(v, I32)  # a u32 `*` argument


def as_word(fl: "FnLowering", v: Any, span: "SourceSpan") -> Any:
    """A promoted printf argument as the u64 the message carries."""
    b = fl.b
    t = v.type
    if isinstance(t, PointerType):
        if t.space not in (AddressSpace.GLOBAL, AddressSpace.CONST):
            fl.fail(f"printf through hostcall prints global and const pointers, not {t}", span)
        return b.bitcast(b.ptrcast(v, U8) if t.pointee != U8 else v, U64)
    assert isinstance(t, ScalarType)
    if t.is_float:
        return b.bitcast(v, U64) if t.bits == 64 else b.bitcast(b.cast(v, F64), U64)
    if t.bits == 64:
        return v if t == U64 else b.bitcast(v, U64)
    # C's variadic convention extends by the type's signedness; the host reads the low bits anyway.
    wide = b.cast(v, I64 if t.is_signed else U64)
    return wide if wide.type == U64 else b.bitcast(wide, U64)

