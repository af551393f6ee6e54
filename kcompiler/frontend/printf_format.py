"""The compile-time checks of ``printf(format, args...)`` that need no types, shared by the checker
(which reports them when a file is loaded) and the lowering (which also checks each argument's type
against its conversion, with :func:`kcompiler.ir.printf.check_argument`).

An error inside the format is located at the offending conversion's columns in the source: the
literal's escapes (``\\n``, ``\\x41``, ``\\u00e9``...) are walked so that the caret lands under the
conversion as written, not at its offset in the decoded string.
"""
from __future__ import annotations

import re
import warnings

from ..diagnostics import SourceSpan
from ..ir.printf import Conversion, FormatError, Piece, count_args, parse_format
from . import ast as A

#: printf's arguments after the format, at most (CUDA's vprintf reads no more than 32).
MAX_ARGS = 32

HINT = 'printf("i = %d, x = %f\\n", i, x)'

_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\}|[0-7]{1,3}|.)")


def _decode(raw: str) -> str:
    """What the parser makes of a literal's text (parser.py's str_lit)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return raw.encode("latin-1", "backslashreplace").decode("unicode_escape")


def literal_columns(lit: A.StrLit) -> list[int]:
    """The source column (1-based) of each character of ``lit.value``, plus one past the last (the
    closing quote's). Where the text cannot be walked, each character is mapped to the column at its
    own offset (clamped to the literal)."""
    s = lit.span
    first = s.col + 1  # the opening quote is at s.col
    closing = max(s.end_col - 1, first)
    raw = s.file.line(s.line)[s.col:closing - 1] if s.line == s.end_line else ""
    cols: list[int] = []
    try:
        pos = 0
        for m in _ESCAPE.finditer(raw):
            for k in range(pos, m.start()):
                cols.extend([first + k] * len(_decode(raw[k])))
            cols.extend([first + m.start()] * len(_decode(m.group(0))))
            pos = m.end()
        for k in range(pos, len(raw)):
            cols.extend([first + k] * len(_decode(raw[k])))
        if len(cols) != len(lit.value) or _decode(raw) != lit.value:
            raise ValueError
    except (UnicodeDecodeError, UnicodeEncodeError, ValueError):
        cols = [min(first + k, closing) for k in range(len(lit.value))]
    return cols + [closing]


def format_span(lit: A.StrLit, start: int, end: int) -> SourceSpan:
    """The source span of ``lit.value[start:end]``."""
    cols = literal_columns(lit)
    start = max(0, min(start, len(cols) - 1))
    end = max(start + 1, min(end, len(cols) - 1))
    a, b = cols[start], cols[end]
    s = lit.span
    return SourceSpan(s.file, s.line, a, s.line, max(b, a + 1))


def conversion_span(lit: A.StrLit, conv: Conversion) -> SourceSpan:
    return format_span(lit, conv.start, conv.end)


class FormatProblem(Exception):
    """One error of a printf call: message, span, hint."""

    def __init__(self, message: str, span: SourceSpan | None, hint: str | None = None):
        super().__init__(message)
        self.message, self.span, self.hint = message, span, hint


def check_call(call: A.Call, what: str = "printf") -> tuple[A.StrLit, list[Piece]]:
    """The format literal of ``printf(...)`` and its parsed pieces, after the checks that need no
    types: the format is a string literal, it parses, it holds no NUL, and it reads as many
    arguments as the call passes (at most :data:`MAX_ARGS`). ``what`` names the format in messages
    ("printf", or "assert's message" for a call whose args are assert's after the condition).
    Raises :class:`FormatProblem`."""
    if not call.args:
        raise FormatProblem(f"{what} needs a format string", call.span, hint=HINT)
    fmt = call.args[0]
    if not isinstance(fmt, A.StrLit):
        whose = "printf's format" if what == "printf" else what
        raise FormatProblem(f"{whose} must be a string literal, so that it can be checked "
                            "against the arguments at compile time", fmt.span,
                            hint=HINT if what == "printf" else 'assert(i < n, "i = %d", i)')
    nul = fmt.value.find("\0")
    if nul >= 0:
        raise FormatProblem("the format holds a NUL character (\\0), which would end it early",
                            format_span(fmt, nul, nul + 1), hint="remove it, or print it with %c")
    try:
        pieces = parse_format(fmt.value)
    except FormatError as e:
        raise FormatProblem(e.message, format_span(fmt, e.offset, e.end)) from None
    want, got = count_args(pieces), len(call.args) - 1
    if want != got:
        convs = " ".join(p.spec() for p in pieces if isinstance(p, Conversion))
        hint = f"the format's conversions: {convs}" if convs else "the format has no conversions"
        stars = any(isinstance(p, Conversion) and "*" in (p.width, p.precision) for p in pieces)
        if stars:
            hint += " (each '*' width or precision reads an i32 argument too)"
        raise FormatProblem(f"format expects {want} argument{'s' if want != 1 else ''}, got {got}",
                            call.span, hint=hint)
    if got > MAX_ARGS:
        raise FormatProblem(f"{what} takes at most {MAX_ARGS} arguments after the format, got {got}",
                            call.span, hint="split it into several printf calls")
    return fmt, pieces
