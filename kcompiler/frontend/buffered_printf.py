"""printf="buffered": a call of the kernel language's ``printf`` appends one record to the launch's
printf buffer through std.printf_buffer (stdlib/printf_buffer.kc), and the host prints the records
after the kernel — HIP's buffered printf (clang ``-mprintf-kind=buffered``), which needs no hostcall
and so no PCIe atomics. On AMD the HIP runtime reads the buffer (ROCm/clr
rocclr/device/rocm/rocprintf.cpp, ``PrintfDbg::output``); on the CPU target and NVIDIA kcompiler's
runtime does (kcompiler/runtime/printf_buffer.py).

The record is the one LLVM's AMDGPUEmitPrintf.cpp writes (``callBufferedPrintfStart``,
``callBufferedPrintfArgPush``; the same bytes clang 19 emits, checked in
tests/runtime/test_printf_buffered.py): a u32 control word (size << 2 | 2: stdout, constant format), the u64
hash of the format (:func:`format_hash`), then each argument as 8 bytes, each ``%s`` string inline
with its NUL, zero padded to a multiple of 8. The format itself is not in the record: the backend
registers it under its hash (the IR op ``printf_buffer`` carries it) — in the code object's
``amdhsa.printf`` metadata on AMD, in the module's ``kc_printf_formats`` table elsewhere.

A ``%s`` with a width or precision on a device string is formatted on the device, as in hostcall
mode (frontend/hostcall_printf.py, ``field_format``): clr reads the record's arguments with the
same code as hostcall printf's (devhcprintf.cpp ``format``), with the same ``%s`` stepping.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..ir.printf import format_hash  # noqa: F401 - this module's callers and tests name it here
from ..ir.types import BOOL, U32, U64
from .hostcall_printf import as_word, field_format, field_i32, global_string, stdlib_caller
from .program import PRINTF_BUFFER_ALIAS

if TYPE_CHECKING:  # pragma: no cover
    from ..diagnostics import SourceSpan
    from .fn_lowering import FnLowering

#: Bytes of a record before its arguments: the u32 control word and the u64 format hash.
RECORD_HEADER = 12


def lower_buffered_printf(fl: "FnLowering", span: "SourceSpan", fmt: str, args: list[Any],
                          strings: list[bool]) -> None:
    """Emit the record of ``printf(fmt, *args)`` in ``fl`` (a FnLowering): size it (strings are
    measured on the device), reserve it, write it.

    ``args``: IR values after C's default promotions (i32/u32/i64/u64, f64, pointers);
    ``strings[k]``: whether argument k is a ``%s`` string (a ``ptr<u8>`` or ``ptr<i8>``)."""

    b = fl.b
    call = stdlib_caller(fl, PRINTF_BUFFER_ALIAS, span)

    host_fmt, items = field_format(fmt, args, strings)
    # The arguments as they are written, and the record's size: fixed words, plus each string's
    # padded bytes, measured here.
    parts: list[tuple[str, Any]] = []
    fixed = RECORD_HEADER
    sizes: list[Any] = []
    for kind, v in items:
        if kind == "word":
            parts.append(("word", as_word(fl, v, span)))
            fixed += 8
        elif kind == "string":
            s = global_string(fl, v, span)
            n = call("printf_string_size", [s])
            sizes.append(n)
            parts.append(("string", (s, n)))
        else:
            s, width, precision, left = v
            s = global_string(fl, s, span)
            w = field_i32(fl, 0 if width is None else width)
            n = call("printf_field_text", [s, field_i32(fl, precision)])
            sizes.append(call("printf_field_size", [n, w]))
            parts.append(("field", (s, n, w, left)))
    total = b.const(fixed, U32)
    for n in sizes:
        total = call("printf_add", [total, n])
    buffer = b.value("printf_buffer", [], U64, format=host_fmt)
    at = call("printf_begin", [buffer, total, b.const(format_hash(host_fmt), U64)])
    for kind, v in parts:
        if kind == "word":
            at = call("printf_put_word", [at, v])
        elif kind == "string":
            at = call("printf_put_string", [at, *v])
        else:
            s, n, w, left = v
            at = call("printf_put_field", [at, s, n, w, b.const(left, BOOL)])
