"""C's printf formatting in Python, as glibc prints it: what the host side of device printf uses.

``format_c(fmt, args)`` formats like C's ``snprintf`` with the same format, given the arguments a
device sends: every argument is one 64-bit word (integers as raw bits that the conversion's length
modifier reinterprets: ``%hhd`` reads the low 8 bits as signed, ``%u`` the low 32 as unsigned,
``%lx`` all 64; doubles as their IEEE bits, or a Python float), strings as bytes (or str, encoded as
UTF-8). Python's ``%`` operator is not C's: it has no ``%a``/``%p``/``%n``/length modifiers, spells
NaN without its sign, and pads differently; this module implements C17 7.21.6.1 itself and is tested
against the C library's ``snprintf`` (tests/runtime/test_cformat.py).

Supported: conversions ``d i u o x X c s f F e E g G a A p n %``; flags ``- + space # 0``; width and
precision as digits or ``*`` (an int argument: a negative width sets ``-``, a negative precision
counts as none); length modifiers ``hh h l ll q j z Z t L``. Where C leaves things to the
implementation, glibc's choice is followed: ``%p`` prints like ``%#lx`` (flags, width and
precision apply) and a null pointer as ``(nil)``; ``%s`` of ``None`` prints ``(null)`` (nothing
when the precision is below 6); a NaN keeps its sign (``-nan``); ``%a`` writes normal numbers as
``0x1.…p±e`` and subnormals as ``0x0.…p-1022``, rounding half to even. ``%n`` stores nothing
(there is no caller memory to write) but consumes its argument. ``%lc``/``%ls`` are written as
UTF-8. ``L`` with a floating conversion formats a double (devices have no long double). An unknown
conversion is copied to the output as written, as glibc does. When the arguments run out, output
stops at the conversion that lacks one (the HIP runtime's printf service does the same).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Sequence, Union

#: What an argument can be: a 64-bit word (int), a double, a string's bytes, or None (a null %s/%p).
CArg = Union[int, float, bytes, bytearray, str, None]

CONVERSIONS = b"diuoxXcsfFeEgGaApn%"
FLAGS = b"-+ #0"
#: Length modifiers, longest first so that "hh" wins over "h"; the bits an integer argument keeps.
LENGTHS = (b"hh", b"ll", b"h", b"l", b"q", b"j", b"z", b"Z", b"t", b"L")
INT_BITS = {b"hh": 8, b"h": 16, b"": 32, b"l": 64, b"ll": 64, b"q": 64, b"j": 64, b"z": 64,
            b"Z": 64, b"t": 64, b"L": 64}


@dataclass(frozen=True)
class Spec:
    """One conversion specification of a format: ``text`` as written, with its parts parsed.

    ``width`` / ``precision`` are None when absent (``width_star`` / ``precision_star`` when given
    as ``*``); ``conversion`` is one byte of :data:`CONVERSIONS`, or empty for an unknown one."""

    text: bytes
    flags: bytes
    width: int | None
    width_star: bool
    precision: int | None
    precision_star: bool
    length: bytes
    conversion: bytes

    @property
    def stars(self) -> int:
        """How many int arguments the ``*`` fields take (before the converted argument)."""
        return int(self.width_star) + int(self.precision_star)

    @property
    def takes_argument(self) -> bool:
        """Whether the conversion consumes an argument of its own: every one but ``%%`` and an unknown one."""
        return self.conversion not in (b"%", b"")


def parse_format(fmt: bytes) -> list[bytes | Spec]:
    """Split ``fmt`` into literal byte runs and :class:`Spec` items, in order. Stops at a NUL."""
    fmt = bytes(fmt).split(b"\0", 1)[0]
    out: list[bytes | Spec] = []
    i, n = 0, len(fmt)
    while i < n:
        j = fmt.find(b"%", i)
        if j < 0:
            out.append(fmt[i:])
            break
        if j > i:
            out.append(fmt[i:j])
        k = j + 1
        flags = bytearray()
        while k < n and fmt[k] in FLAGS:
            flags.append(fmt[k])
            k += 1
        width, width_star = None, False
        if k < n and fmt[k] == ord("*"):
            width_star, k = True, k + 1
        else:
            start = k
            while k < n and 48 <= fmt[k] <= 57:
                k += 1
            if k > start:
                width = int(fmt[start:k])
        precision, precision_star = None, False
        if k < n and fmt[k] == ord("."):
            k += 1
            if k < n and fmt[k] == ord("*"):
                precision_star, k = True, k + 1
            else:
                start = k
                while k < n and 48 <= fmt[k] <= 57:
                    k += 1
                precision = int(fmt[start:k]) if k > start else 0
        length = b""
        for mod in LENGTHS:
            if fmt.startswith(mod, k):
                length, k = mod, k + len(mod)
                break
        conversion = b""
        if k < n and fmt[k] in CONVERSIONS:
            conversion, k = fmt[k:k + 1], k + 1
        elif k < n:
            k += 1  # an unknown conversion character: the spec ends there, printed as written
        out.append(Spec(fmt[j:k], bytes(flags), width, width_star, precision, precision_star, length,
                        conversion))
        i = k
    return out


# --- argument reinterpretation -----------------------------------------------------------------------

def _word(v: CArg) -> int:
    """The argument's 64-bit word, as the device sends it."""
    if v is None:
        return 0
    if isinstance(v, float):
        return struct.unpack("<Q", struct.pack("<d", v))[0]
    if isinstance(v, (bytes, bytearray, str)):
        return 0
    return int(v) & 0xFFFF_FFFF_FFFF_FFFF


def _integer(v: CArg, bits: int, signed: bool) -> int:
    x = _word(v) & ((1 << bits) - 1)
    if signed and x >> (bits - 1):
        x -= 1 << bits
    return x


def _double(v: CArg) -> float:
    if isinstance(v, float):
        return v
    return struct.unpack("<d", struct.pack("<Q", _word(v)))[0]


def _string(v: CArg) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).split(b"\0", 1)[0]
    return b"" if int(v) == 0 else None


# --- padding -----------------------------------------------------------------------------------------

def _pad(sign_prefix: bytes, body: bytes, width: int, flags: bytes, zero_ok: bool) -> bytes:
    """Pad to ``width``: left-justified with '-', with zeros after the sign/prefix when ``0`` applies,
    else with spaces on the left."""
    fill = width - len(sign_prefix) - len(body)
    if fill <= 0:
        return sign_prefix + body
    if b"-" in flags:
        return sign_prefix + body + b" " * fill
    if zero_ok and b"0" in flags:
        return sign_prefix + b"0" * fill + body
    return b" " * fill + sign_prefix + body


def _sign(negative: bool, flags: bytes) -> bytes:
    if negative:
        return b"-"
    if b"+" in flags:
        return b"+"
    if b" " in flags:
        return b" "
    return b""


# --- conversions -------------------------------------------------------------------------------------

def _format_integer(conv: bytes, value: int, flags: bytes, width: int, precision: int | None,
                    pointer: bool = False) -> bytes:
    negative, magnitude = value < 0, abs(value)
    if conv in b"diu":
        digits = str(magnitude).encode()
    elif conv == b"o":
        digits = format(magnitude, "o").encode()
    elif conv == b"x":
        digits = format(magnitude, "x").encode()
    else:
        digits = format(magnitude, "X").encode()
    if precision == 0 and magnitude == 0:
        digits = b""
    elif precision is not None:
        digits = digits.rjust(precision, b"0")
    if conv == b"o" and b"#" in flags and not digits.startswith(b"0"):
        digits = b"0" + digits
    prefix = _sign(negative, flags) if conv in b"di" or pointer else b""
    if conv in b"xX" and b"#" in flags and magnitude != 0:
        prefix += b"0" + conv
    return _pad(prefix, digits, width, flags, zero_ok=precision is None)


def _nonfinite(x: float, upper: bool, flags: bytes, width: int) -> bytes:
    body = b"nan" if math.isnan(x) else b"inf"
    if upper:
        body = body.upper()
    return _pad(_sign(math.copysign(1.0, x) < 0, flags), body, width, flags, zero_ok=False)


def _fixed(x: float, precision: int, alt: bool) -> str:
    s = format(x, f".{precision}f")
    return s + "." if alt and precision == 0 else s


def _exponent(x: float, precision: int, alt: bool) -> str:
    s = format(x, f".{precision}e")  # mantissa, 'e', sign, at least two exponent digits: as C
    if alt and precision == 0:
        mant, exp = s.split("e")
        s = mant + ".e" + exp
    return s


def _general(x: float, precision: int, alt: bool) -> str:
    p = precision or 1
    exp = int(format(x, f".{p - 1}e").split("e")[1])  # the exponent after rounding to p digits
    if -4 <= exp < p:
        s = _fixed(x, p - 1 - exp, alt)
    else:
        s = _exponent(x, p - 1, alt)
    if not alt:
        mant, e, rest = s.partition("e")
        if "." in mant:
            mant = mant.rstrip("0").rstrip(".")
        s = mant + e + rest
    return s


def _hexfloat(x: float, precision: int | None, alt: bool) -> str:
    """%a of a finite, non-negative ``x``: glibc's form (leading 1 for normals, 0 for subnormals)."""
    if x == 0.0:
        lead, frac, exp = 0, "0" * 13, 0
    else:
        h = x.hex()  # '0x1.8000000000000p+1' / '0x0.0000000000001p-1022': 13 hex digits
        mant, exp_s = h[2:].split("p")
        lead_s, _, frac = mant.partition(".")
        lead, exp = int(lead_s), int(exp_s)
        frac = frac.ljust(13, "0")
    if precision is None:
        frac = frac.rstrip("0")
    elif precision < 13:
        kept, rest = frac[:precision], frac[precision:]
        value = (lead << (4 * precision)) | (int(kept, 16) if kept else 0)
        half = 8 * 16 ** (len(rest) - 1)
        r = int(rest, 16)
        if r > half or (r == half and value & 1):
            value += 1
        lead = value >> (4 * precision)
        frac = format(value & ((1 << (4 * precision)) - 1), "x").rjust(precision, "0") if precision else ""
    else:
        frac = frac.ljust(precision, "0")
    point = "." if frac or alt else ""
    return f"0x{lead:x}{point}{frac}p{exp:+d}"


def _format_float(conv: bytes, x: float, flags: bytes, width: int, precision: int | None) -> bytes:
    upper = conv in b"FEGA"
    if not math.isfinite(x):
        return _nonfinite(x, upper, flags, width)
    negative = math.copysign(1.0, x) < 0
    x = abs(x)
    alt = b"#" in flags
    c = conv.lower()
    if c == b"f":
        body = _fixed(x, 6 if precision is None else precision, alt)
    elif c == b"e":
        body = _exponent(x, 6 if precision is None else precision, alt)
    elif c == b"g":
        body = _general(x, 6 if precision is None else precision, alt)
    else:
        body = _hexfloat(x, precision, alt)
    sign = _sign(negative, flags)
    if c == b"a":
        # The zeros of the '0' flag go after the "0x".
        sign, body = sign + body[:2].encode(), body[2:]
        if upper:
            sign = sign.upper()
    out = body.encode()
    if upper:
        out = out.upper()
    return _pad(sign, out, width, flags, zero_ok=True)


def _format_char(spec: Spec, v: CArg, flags: bytes, width: int) -> bytes:
    if spec.length == b"l":
        body = chr(_integer(v, 32, False)).encode("utf-8", "surrogatepass")
    else:
        body = bytes([_integer(v, 8, False)])
    return _pad(b"", body, width, flags, zero_ok=False)


def _format_string(spec: Spec, v: CArg, flags: bytes, width: int, precision: int | None) -> bytes:
    s = _string(v)
    if s is None:
        s = b"(null)" if precision is None or precision >= 6 else b""
    elif precision is not None:
        s = s[:precision]
    return _pad(b"", s, width, flags, zero_ok=False)


def _format_pointer(v: CArg, flags: bytes, width: int, precision: int | None) -> bytes:
    p = _word(v)
    if p == 0:
        return _pad(b"", b"(nil)", width, flags, zero_ok=False)
    return _format_integer(b"x", p, flags + b"#", width, precision, pointer=True)


def format_spec(spec: Spec, args: Sequence[CArg]) -> bytes:
    """Format one conversion with its arguments (``spec.stars`` ints, then the value if it takes
    one). Raises IndexError if ``args`` is short."""
    flags, width, precision = spec.flags, spec.width or 0, spec.precision
    at = 0
    if spec.width_star:
        width = _integer(args[at], 32, True)
        at += 1
        if width < 0:
            flags, width = flags + b"-", -width
    if spec.precision_star:
        precision = _integer(args[at], 32, True)
        at += 1
        if precision < 0:
            precision = None
    conv = spec.conversion
    if conv == b"%":
        return b"%"
    if conv == b"":
        return spec.text
    v = args[at]
    if conv in b"di":
        return _format_integer(conv, _integer(v, INT_BITS[spec.length], True), flags, width, precision)
    if conv in b"uoxX":
        return _format_integer(conv, _integer(v, INT_BITS[spec.length], False), flags, width, precision)
    if conv in b"fFeEgGaA":
        return _format_float(conv, _double(v), flags, width, precision)
    if conv == b"c":
        return _format_char(spec, v, flags, width)
    if conv == b"s":
        return _format_string(spec, v, flags, width, precision)
    if conv == b"p":
        return _format_pointer(v, flags, width, precision)
    return b""  # %n: nothing printed


def format_c_bytes(fmt: bytes, args: Sequence[CArg]) -> bytes:
    """``snprintf``'s output for ``fmt`` and ``args``, as bytes (see the module's docstring)."""
    out = bytearray()
    at = 0
    for item in parse_format(fmt):
        if isinstance(item, bytes):
            out += item
            continue
        need = item.stars + int(item.takes_argument)
        if at + need > len(args):
            break
        out += format_spec(item, args[at:at + need])
        at += need
    return bytes(out)


def format_c(fmt: str, args: Sequence[CArg]) -> str:
    """``snprintf``'s output for ``fmt`` and ``args`` as text: the format is encoded as UTF-8 and the
    output decoded the same way (bytes that are not UTF-8, e.g. from ``%c``, round-trip as
    surrogate escapes)."""
    return format_c_bytes(fmt.encode("utf-8", "surrogateescape"), args).decode("utf-8", "surrogateescape")
