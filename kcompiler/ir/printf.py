"""printf formats: parsing, the arguments each conversion reads, and C's default argument promotions
for the kernel language's types. Pure Python, shared by the frontend (which checks every printf's
format against its arguments at compile time) and the host-side formatters (which read the argument
buffers the device writes).

    >>> parse_format("x = %5.2f%%\\n")
    ['x = ', Conversion(flags='', width=5, precision=2, length='', conv='f', start=4, end=9), '%\\n']

The grammar is C's (C11 7.21.6.1): ``%`` [flags ``-+ #0``] [width: digits or ``*``] [``.`` precision:
digits, ``*`` or nothing (0)] [length ``hh h l ll z j t L``] conversion ``d i u x X o c s f F e E g G
a A p``. ``%%`` is a literal ``%``. What C leaves undefined is rejected here rather than left to chance
on the device: ``%n`` (a write through a pointer), flags that mean nothing for a conversion (``%#d``,
``%+u``, ``%0s``), a precision on ``%c`` or ``%p``, and length modifiers a conversion does not take
(``%hf``, ``%Ld``); so are the wide-character forms ``%lc`` and ``%ls``, which kernels cannot pass.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Callable, Union

from .types import F64, I8, I32, I64, U8, U32, U64, PointerType, ScalarType, Type, VectorType

FLAGS = "-+ #0"
LENGTHS = ("hh", "h", "ll", "l", "z", "j", "t", "L")  # longest first where one is a prefix of another
INT_CONVERSIONS = "diuxXo"
SIGNED_CONVERSIONS = "di"
FLOAT_CONVERSIONS = "fFeEgGaA"
CONVERSIONS = INT_CONVERSIONS + "c" + "s" + FLOAT_CONVERSIONS + "p"

#: The largest width or precision accepted (C's int).
MAX_FIELD = (1 << 31) - 1

#: What :func:`check_argument` is given for a string literal argument (``printf("%s", "abc")``).
STRING_LITERAL = "string literal"


class FormatError(ValueError):
    """A malformed format. ``offset`` and ``end`` delimit the offending text in the format string
    (``end`` defaults to one character past ``offset``)."""

    def __init__(self, message: str, offset: int, end: int | None = None):
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.end = end if end is not None and end > offset else offset + 1

    def __str__(self) -> str:
        return f"{self.message} (at offset {self.offset})"


@dataclass(frozen=True)
class Conversion:
    """One conversion specification: ``format[start:end]`` is its text (``%-08.3lx``).

    ``width`` and ``precision`` are an int, ``'*'`` (read from an argument) or None (not given; a
    lone ``.`` is precision 0, as in C). ``length`` is '' when there is no length modifier."""

    flags: str
    width: Union[int, str, None]
    precision: Union[int, str, None]
    length: str
    conv: str
    start: int = 0
    end: int = 0

    def spec(self) -> str:
        """The specification's text rebuilt from the fields (``%-8.3lx``)."""
        w = "" if self.width is None else str(self.width)
        p = "" if self.precision is None else f".{self.precision}"
        return f"%{self.flags}{w}{p}{self.length}{self.conv}"

    @property
    def kind(self) -> str:
        """The kind of the value this conversion prints (see :func:`expected_args`)."""
        return _value_kind(self)


Piece = Union[str, Conversion]


def parse_format(fmt: str) -> list[Piece]:
    """Split ``fmt`` into literal text (``str``, with ``%%`` turned into ``%``; consecutive text is one
    piece) and :class:`Conversion` s. Raises :class:`FormatError` for a malformed format."""
    out: list[Piece] = []
    text: list[str] = []
    i, n = 0, len(fmt)
    while i < n:
        c = fmt[i]
        if c != "%":
            text.append(c)
            i += 1
            continue
        if i + 1 < n and fmt[i + 1] == "%":
            text.append("%")
            i += 2
            continue
        conv = _parse_spec(fmt, i)
        if text:
            out.append("".join(text))
            text = []
        out.append(conv)
        i = conv.end
    if text:
        out.append("".join(text))
    return out


def conversions(fmt: str) -> list[Conversion]:
    """The conversions of ``fmt`` in order (raises FormatError like :func:`parse_format`)."""
    return [p for p in parse_format(fmt) if isinstance(p, Conversion)]


def _parse_spec(fmt: str, start: int) -> Conversion:
    n = len(fmt)
    i = start + 1

    def incomplete() -> FormatError:
        return FormatError("incomplete format specifier: the format ends before the conversion "
                           "(write %% for a literal '%')", start, n)

    flags = []
    while i < n and fmt[i] in FLAGS:
        flags.append(fmt[i])
        i += 1
    width: Union[int, str, None] = None
    if i < n and fmt[i] == "*":
        width = "*"
        i += 1
    elif i < n and fmt[i].isdigit():
        j = i
        while i < n and fmt[i].isdigit():
            i += 1
        width = int(fmt[j:i])
        if width > MAX_FIELD:
            raise FormatError(f"field width {width} is too large (at most {MAX_FIELD})", j, i)
    precision: Union[int, str, None] = None
    if i < n and fmt[i] == ".":
        i += 1
        if i < n and fmt[i] == "*":
            precision = "*"
            i += 1
        else:
            j = i
            while i < n and fmt[i].isdigit():
                i += 1
            precision = int(fmt[j:i]) if i > j else 0
            if precision > MAX_FIELD:
                raise FormatError(f"precision {precision} is too large (at most {MAX_FIELD})", j, i)
    length = ""
    for ln in LENGTHS:
        if fmt.startswith(ln, i):
            length = ln
            i += len(ln)
            break
    if i >= n:
        raise incomplete()
    c = fmt[i]
    end = i + 1
    if c == "n":
        raise FormatError("%n is not supported: it writes the number of characters printed through a "
                          "pointer argument, which printf on a GPU cannot do", start, end)
    if c not in CONVERSIONS:
        shown = c if c.isprintable() and not c.isspace() else repr(c)
        if c == "%":
            raise FormatError(f"'%' cannot follow the flags, width, precision or length of a "
                              f"specifier ({fmt[start:end]}): write %% alone for a literal '%'", start, end)
        raise FormatError(f"unknown conversion '%{shown}' in format specifier '{fmt[start:end]}' "
                          f"(expected one of {' '.join(CONVERSIONS)})", start, end)
    conv = Conversion("".join(flags), width, precision, length, c, start, end)
    _check_combination(conv, fmt)
    return conv


def _check_combination(cv: Conversion, fmt: str) -> None:
    """Reject what C leaves undefined: flags, precision and length modifiers the conversion does not
    take."""
    c, spec = cv.conv, fmt[cv.start:cv.end]
    where = (cv.start, cv.end)
    for f in dict.fromkeys(cv.flags):
        bad = (f == "#" and c in "diucsp") or (f == "0" and c in "csp") or \
              (f in "+ " and c in "uxXocsp")
        if bad:
            raise FormatError(f"flag '{f}' is not allowed with %{c} (in '{spec}'): its result is "
                              "undefined in C", *where)
    if cv.precision is not None and c in "cp":
        raise FormatError(f"a precision is not allowed with %{c} (in '{spec}'): its result is "
                          "undefined in C", *where)
    ln = cv.length
    if not ln:
        return
    if c in INT_CONVERSIONS:
        ok = ln != "L"
    elif c in FLOAT_CONVERSIONS:
        ok = ln in ("l", "L")
    elif c in "cs" and ln == "l":
        raise FormatError(f"'%l{c}' prints wide characters (wchar_t), which kernels do not have: "
                          f"write %{c}", *where)
    else:
        ok = False
    if not ok:
        raise FormatError(f"length modifier '{ln}' is not allowed with %{c} (in '{spec}')", *where)


# --- arguments ------------------------------------------------------------------------------------

#: Argument kinds, named by the kernel-language type an argument travels as after C's default
#: promotions: 'i32' (C int: %d %i %c, '*' widths and precisions, and the h/hh forms), 'u32'
#: (unsigned: %u %x %X %o), 'i64' / 'u64' (the l, ll, j, z, t forms), 'f64' (every float conversion;
#: 'f128' for the L forms, long double, which kernels do not have), 'str' (%s: a pointer to
#: NUL-terminated bytes) and 'ptr' (%p).
KINDS = ("i32", "u32", "i64", "u64", "f64", "f128", "str", "ptr")


def _value_kind(cv: Conversion) -> str:
    c, ln = cv.conv, cv.length
    if c in INT_CONVERSIONS:
        wide = ln in ("l", "ll", "j", "z", "t")
        signed = c in SIGNED_CONVERSIONS
        return ("i" if signed else "u") + ("64" if wide else "32")
    if c == "c":
        return "i32"
    if c in FLOAT_CONVERSIONS:
        return "f128" if ln == "L" else "f64"
    if c == "s":
        return "str"
    return "ptr"


def expected_args(conv: Conversion) -> list[str]:
    """The kinds of the arguments ``conv`` reads, in order: an 'i32' for a ``*`` width, another for a
    ``*`` precision, then the value's kind (see :data:`KINDS`)."""
    out = []
    if conv.width == "*":
        out.append("i32")
    if conv.precision == "*":
        out.append("i32")
    out.append(_value_kind(conv))
    return out


def count_args(pieces: list[Piece]) -> int:
    """How many arguments a parsed format reads."""
    return sum(len(expected_args(p)) for p in pieces if isinstance(p, Conversion))


def promote(t: Type) -> Type:
    """C's default argument promotions on a kernel-language type: bool, i8, i16, u8 and u16 become
    i32; f16, bf16 and f32 become f64; i32, u32, i64, u64, f64 and pointers are unchanged. A vector
    (or anything else that cannot be passed to printf) raises TypeError."""
    if isinstance(t, PointerType):
        return t
    if isinstance(t, ScalarType):
        if t.is_bool or (t.is_int and t.bits < 32):
            return I32
        if t.is_float:
            return F64 if t.bits < 64 else t
        return t
    if isinstance(t, VectorType):
        raise TypeError(f"printf cannot print a vector ({t}): print its lanes (v.x, v[i], ...)")
    raise TypeError(f"printf cannot print a value of type {t}")


def describe_kind(kind: str) -> str:
    """What an argument of ``kind`` is, in words."""
    return {"i32": "an integer of at most 32 bits", "u32": "an integer of at most 32 bits",
            "i64": "an integer", "u64": "an integer", "f64": "a floating-point value",
            "f128": "a long double", "str": "a string (a string literal or ptr<u8>)",
            "ptr": "a pointer"}.get(kind, kind)


def argument_name(conv: Conversion, position: int = -1) -> str:
    """How messages name argument ``position`` of ``conv``: "'%5d'", "the width of '%*d'"."""
    kinds = expected_args(conv)
    if position in (-1, len(kinds) - 1):
        return f"'{conv.spec()}'"
    which = "width" if conv.width == "*" and position == 0 else "precision"
    return f"the {which} of '{conv.spec()}'"


def check_argument(conv: Conversion, t: Union[Type, str], position: int = -1) -> str | None:
    """None when an argument of kernel-language type ``t`` (or :data:`STRING_LITERAL`) fits
    argument ``position`` of ``conv`` (an index into :func:`expected_args`; by default the value
    itself, not a ``*`` width or precision); else a message saying what does not fit.

    The rules are C's, made strict where C is merely undefined: integer conversions take any integer
    or bool (signed for unsigned and the reverse are accepted, as C compilers do), but not a float,
    a pointer or an integer wider than the conversion reads (%d with an i64: write %ld); a narrower
    integer is widened (%ld with an i32). Float conversions take f16, bf16, f32 and f64, not integers.
    %s takes a string literal or a ptr<u8> / ptr<i8> in any address space; %p any pointer."""
    kinds = expected_args(conv)
    kind = kinds[position]
    spec = conv.spec()
    is_value = position in (-1, len(kinds) - 1)
    what = argument_name(conv, position)
    if isinstance(t, VectorType):
        return f"printf cannot print a vector ({t}): print its lanes (v.x, v[i], ...)"
    if kind == "f128":
        return f"'{spec}' prints a long double, which kernels do not have: write %{conv.conv} for an f64"
    found = "a string literal" if t == STRING_LITERAL else str(t)
    if kind in ("i32", "u32", "i64", "u64"):
        if isinstance(t, ScalarType) and (t.is_int or t.is_bool):
            bits = 32 if t.is_bool or t.bits < 32 else t.bits
            if bits > int(kind[1:]):
                fix = "write i32(x) or u32(x)"
                if is_value and conv.conv in INT_CONVERSIONS:
                    fix = f"write %l{conv.conv} to print a 64-bit integer, or {fix} to convert"
                else:
                    fix = f"{fix} to convert"
                return f"{what} expects {describe_kind(kind)}, found {t}: {fix}"
            return None
        if isinstance(t, ScalarType) and t.is_float and is_value and conv.conv != "c":
            return f"{what} expects an integer, found {t}: write %f (or %g, %e) to print a float, or " \
                   f"convert it: i32(x)"
        return f"{what} expects an integer, found {found}"
    if kind == "f64":
        if isinstance(t, ScalarType) and t.is_float:
            return None
        if isinstance(t, ScalarType) and t.is_int:
            return f"{what} expects a floating-point value, found {t}: write %d (or %u, %ld) to print " \
                   f"an integer, or convert it: f64(x)"
        return f"{what} expects a floating-point value, found {found}"
    if kind == "str":
        if t == STRING_LITERAL:
            return None
        if isinstance(t, PointerType) and t.pointee in (U8, I8):
            return None
        if isinstance(t, PointerType):
            return f"{what} expects a string (a string literal or ptr<u8>), found {t}: use %p to print " \
                   f"the address"
        return f"{what} expects a string (a string literal or ptr<u8>), found {found}"
    # ptr
    if isinstance(t, PointerType):
        return None
    return f"{what} expects a pointer, found {found}"


def argument_type(conv: Conversion, t: Type, position: int = -1) -> Type:
    """The type an argument of type ``t`` travels as (``check_argument`` accepted it): C's default
    promotion, then an integer widened to the 64 bits of the l/ll/j/z/t forms (sign-extended when
    ``t`` is signed). Pointers travel as themselves (the lowering passes them as generic addresses)."""
    kind = expected_args(conv)[position]
    p = promote(t)
    if kind in ("i64", "u64") and isinstance(p, ScalarType) and p.is_int and p.bits < 64:
        return I64 if p.is_signed else U64
    return p


#: The promoted types an argument of a printf can have (what the IR's printf op takes, with pointers).
PROMOTED = (I32, U32, I64, U64, F64)


def fits_kind(kind: str, t: Type) -> bool:
    """Whether a promoted type ``t`` is what a kind's argument is read as (size and class): the IR
    verifier's rule for the printf op."""
    if kind in ("i32", "u32"):
        return t in (I32, U32)
    if kind in ("i64", "u64"):
        return t in (I64, U64)
    if kind == "f64":
        return t == F64
    if kind in ("str", "ptr"):
        return isinstance(t, PointerType)
    return False


def fold_string(conv: Conversion, s: str) -> str:
    """The text ``conv`` (a %s without ``*``) prints for the string ``s``, as C does: cut at a NUL,
    at most ``precision`` bytes of its UTF-8, padded to ``width`` bytes with spaces (on the left,
    or on the right with the '-' flag). Bytes that a cut leaves as a partial UTF-8 character are
    kept as surrogate escapes (``str.encode('utf-8', 'surrogateescape')`` gives them back)."""
    assert conv.conv == "s" and conv.width != "*" and conv.precision != "*"
    data = s.split("\0", 1)[0].encode("utf-8", "surrogateescape")
    if isinstance(conv.precision, int):
        data = data[:conv.precision]
    if isinstance(conv.width, int) and len(data) < conv.width:
        pad = b" " * (conv.width - len(data))
        data = data + pad if "-" in conv.flags else pad + data
    return data.decode("utf-8", "surrogateescape")


def escape_text(text: str) -> str:
    """Literal text as format text (each '%' doubled)."""
    return text.replace("%", "%%")


# --- buffered printf: a format's hash and the formats table a module carries -------------------------

_TABLE_MAGIC = b"KCPF"


def format_hash(fmt: str) -> int:
    """The u64 a buffered-printf record carries for format ``fmt``: the low 64 bits of the MD5 of
    its UTF-8 bytes, read little-endian (LLVM AMDGPUEmitPrintf.cpp: ``MD5Result::low()``; the
    ``amdhsa.printf`` entry is ``"0:0:" + hex(hash) + "," + fmt``)."""
    return int.from_bytes(hashlib.md5(fmt.encode("utf-8")).digest()[:8], "little")


def format_table(formats: dict[int, str]) -> bytes:
    """The bytes of a module's ``kc_printf_formats`` global (where the CPU target and NVIDIA find
    the formats; AMD code objects list them in ``amdhsa.printf`` instead): ``KCPF``, u32 total
    bytes, then per format u64 hash, u32 length, its UTF-8 bytes; little-endian, unaligned."""
    body = b"".join(struct.pack("<QI", h, len(f.encode())) + f.encode() for h, f in sorted(formats.items()))
    return _TABLE_MAGIC + struct.pack("<I", 8 + len(body)) + body


def read_format_table(read: Callable[[int, int], bytes]) -> dict[int, bytes]:
    """The formats (hash -> format bytes) of a ``kc_printf_formats`` table, read through
    ``read(offset, nbytes)``. Raises ValueError for bytes that are not such a table."""
    head = read(0, 8)
    if head[:4] != _TABLE_MAGIC:
        raise ValueError("kc_printf_formats is not a kcompiler printf format table")
    data = read(0, struct.unpack_from("<I", head, 4)[0])
    out, at = {}, 8
    while at < len(data):
        h, n = struct.unpack_from("<QI", data, at)
        out[h] = data[at + 12:at + 12 + n]
        at += 12 + n
    return out


__all__ = ["format_hash", "format_table", "read_format_table", "Conversion", "FormatError", "KINDS", "PROMOTED", "STRING_LITERAL", "argument_name",
           "argument_type", "check_argument", "describe_kind", "conversions", "count_args", "escape_text", "expected_args", "fits_kind",
           "fold_string", "parse_format", "promote"]
