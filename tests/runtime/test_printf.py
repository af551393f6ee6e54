"""printf in kernels: the format parser and argument rules (kcompiler.ir.printf), the frontend (checks,
default promotions, %s literals folded into the format, the hostcall dispatch point), the IR op, the
NVPTX lowering to vprintf (FileCheck of LLVM IR and PTX, assembled by ptxas), and, on a CUDA GPU, one
kernel printing over a hundred formats whose every line is compared with the C library's snprintf
(called through ctypes: the oracle).

The GPU cases come from two independent printf conformance suites, restricted to what C defines
(their cases with flags whose effect C leaves undefined, such as '% s' or '%#020d', are rejected by
kcompiler and left out, as are '*' precisions, which CUDA's vprintf does not read):

- mpaland/printf, test/test_suite.cpp (MIT), commit 00f2525d1a712c80c2f2b5ffa648e44fbc29ee05:
  https://github.com/mpaland/printf/blob/master/test/test_suite.cpp
- eyalroz/printf, test/test_suite_main_testcases.hpp (MIT), commit
  37c4561eabf71a2250ed15c22fe42fc3752cacb1:
  https://github.com/eyalroz/printf/blob/master/test/test_suite_main_testcases.hpp

Only their format strings and arguments are used; the expected text is the host C library's.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kcompiler.diagnostics import CompileError
from kcompiler.frontend import check, load_program, lower
from kcompiler.ir import print_module
from kcompiler.ir.types import (BF16, BOOL, F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64,
                                VOID, AddressSpace, PointerType, VectorType)
from kcompiler.ir.printf import (STRING_LITERAL, Conversion, FormatError, argument_type, check_argument,
                              count_args, expected_args, fold_string, parse_format, promote)

from ..filecheck_util import filecheck
from ..frontend_util import NV, FakeTarget, assert_well_formed
from ..paths import ROOT as REPO

ptxas = shutil.which("ptxas")


# --- parse_format ------------------------------------------------------------------------------------

#: (format, [literal text or (flags, width, precision, length, conv)]): start/end checked separately.
GOOD = [
    ("", []),
    ("hello", ["hello"]),
    ("%%", ["%"]),
    ("100%% done\n", ["100% done\n"]),
    ("%d", [("", None, None, "", "d")]),
    ("%i", [("", None, None, "", "i")]),
    ("%u %x %X %o", [("", None, None, "", "u"), " ", ("", None, None, "", "x"), " ",
                     ("", None, None, "", "X"), " ", ("", None, None, "", "o")]),
    ("%c", [("", None, None, "", "c")]),
    ("%s", [("", None, None, "", "s")]),
    ("%p", [("", None, None, "", "p")]),
    ("%f%F%e%E%g%G%a%A", [("", None, None, "", c) for c in "fFeEgGaA"]),
    ("x = %5.2f%%\n", ["x = ", ("", 5, 2, "", "f"), "%\n"]),
    ("%-08.3lx", [("-0", 8, 3, "l", "x")]),
    ("%+d", [("+", None, None, "", "d")]),
    ("% d", [(" ", None, None, "", "d")]),
    ("%#o", [("#", None, None, "", "o")]),
    ("%#x", [("#", None, None, "", "x")]),
    ("%#g", [("#", None, None, "", "g")]),
    ("%-+ #0f", [("-+ #0", None, None, "", "f")]),
    ("%--5d", [("--", 5, None, "", "d")]),
    ("%*d", [("", "*", None, "", "d")]),
    ("%.*f", [("", None, "*", "", "f")]),
    ("%*.*e", [("", "*", "*", "", "e")]),
    ("%.f", [("", None, 0, "", "f")]),
    ("%.0s", [("", None, 0, "", "s")]),
    ("%20.s", [("", 20, 0, "", "s")]),
    ("%hhd", [("", None, None, "hh", "d")]),
    ("%hu", [("", None, None, "h", "u")]),
    ("%ld %lld", [("", None, None, "l", "d"), " ", ("", None, None, "ll", "d")]),
    ("%zu %jd %td", [("", None, None, "z", "u"), " ", ("", None, None, "j", "d"), " ",
                     ("", None, None, "t", "d")]),
    ("%lf %Lf %Lg", [("", None, None, "l", "f"), " ", ("", None, None, "L", "f"), " ",
                     ("", None, None, "L", "g")]),
    ("%0-20d|", [("0-", 20, None, "", "d"), "|"]),
    ("a%-5.1fend", ["a", ("-", 5, 1, "", "f"), "end"]),
    ("%50.x%10.u", [("", 50, 0, "", "x"), ("", 10, 0, "", "u")]),
    ("é %d ☃", ["é ", ("", None, None, "", "d"), " ☃"]),
    ("%%d %%%d", ["%d %", ("", None, None, "", "d")]),
    ("%00012d", [("000", 12, None, "", "d")]),
    ("%.20000000d", [("", None, 20000000, "", "d")]),
]

#: (format, message fragment, offset, end) of each malformed format.
BAD = [
    ("%", "incomplete format specifier", 0, 1),
    ("abc %", "incomplete format specifier", 4, 5),
    ("%-", "incomplete format specifier", 0, 2),
    ("%5.", "incomplete format specifier", 0, 3),
    ("%ll", "incomplete format specifier", 0, 3),
    ("%y", "unknown conversion '%y'", 0, 2),
    ("x %5k", "unknown conversion '%k'", 2, 5),
    ("%b", "unknown conversion '%b'", 0, 2),
    ("%C", "unknown conversion '%C'", 0, 2),
    ("%S", "unknown conversion '%S'", 0, 2),
    ("%qd", "unknown conversion '%q'", 0, 2),
    ("%I64d", "unknown conversion '%I'", 0, 2),
    ("%1$d", "unknown conversion '%$'", 0, 3),
    ("%n", "%n is not supported", 0, 2),
    ("%5.2lln", "%n is not supported", 0, 7),
    ("%5%", "'%' cannot follow", 0, 3),
    ("%#d", "flag '#' is not allowed with %d", 0, 3),
    ("%#s", "flag '#' is not allowed with %s", 0, 3),
    ("%#p", "flag '#' is not allowed with %p", 0, 3),
    ("%0s", "flag '0' is not allowed with %s", 0, 3),
    ("%05c", "flag '0' is not allowed with %c", 0, 4),
    ("%+u", "flag '+' is not allowed with %u", 0, 3),
    ("% x", "flag ' ' is not allowed with %x", 0, 3),
    ("%+s", "flag '+' is not allowed with %s", 0, 3),
    ("%.3c", "a precision is not allowed with %c", 0, 4),
    ("%.5p", "a precision is not allowed with %p", 0, 4),
    ("%hf", "length modifier 'h' is not allowed with %f", 0, 3),
    ("%llg", "length modifier 'll' is not allowed with %g", 0, 4),
    ("%Ld", "length modifier 'L' is not allowed with %d", 0, 3),
    ("%zp", "length modifier 'z' is not allowed with %p", 0, 3),
    ("%hs", "length modifier 'h' is not allowed with %s", 0, 3),
    ("%lc", "'%lc' prints wide characters", 0, 3),
    ("%ls", "'%ls' prints wide characters", 0, 3),
    ("%99999999999d", "field width 99999999999 is too large", 1, 12),
    ("%.99999999999f", "precision 99999999999 is too large", 2, 13),
]


def _shape(pieces):
    return [p if isinstance(p, str) else (p.flags, p.width, p.precision, p.length, p.conv) for p in pieces]


@pytest.mark.parametrize("fmt, want", GOOD, ids=[repr(g[0]) for g in GOOD])
def test_parse_format(fmt, want):
    pieces = parse_format(fmt)
    assert _shape(pieces) == want
    for p in pieces:
        if isinstance(p, Conversion):
            assert fmt[p.start] == "%" and fmt[p.end - 1] == p.conv
            # the fields rebuild an equivalent specification
            assert _shape(parse_format(p.spec())) == _shape([p])


@pytest.mark.parametrize("fmt, fragment, offset, end", BAD, ids=[repr(b[0]) for b in BAD])
def test_malformed_formats(fmt, fragment, offset, end):
    with pytest.raises(FormatError) as e:
        parse_format(fmt)
    assert fragment in e.value.message
    assert (e.value.offset, e.value.end) == (offset, end)
    assert isinstance(e.value, ValueError)


def test_enough_formats():
    assert len(GOOD) + len(BAD) >= 40


def test_conversion_offsets():
    a, _, b = parse_format("%-5d|%.3s")
    assert (a.start, a.end, b.start, b.end) == (0, 4, 5, 9)


def test_expected_args():
    def ea(fmt):
        return [k for p in parse_format(fmt) if isinstance(p, Conversion) for k in expected_args(p)]

    assert ea("%d %i %c %hd %hhx") == ["i32", "i32", "i32", "i32", "u32"]
    assert ea("%u %x %X %o") == ["u32"] * 4
    assert ea("%ld %lli %zd %jd %td") == ["i64"] * 5
    assert ea("%lu %llx %zu %jo %tX") == ["u64"] * 5
    assert ea("%f %e %g %a %lf %LF") == ["f64"] * 5 + ["f128"]
    assert ea("%s %p") == ["str", "ptr"]
    assert ea("%*d %.*f %*.*s") == ["i32", "i32", "i32", "f64", "i32", "i32", "str"]
    assert count_args(parse_format("%*.*s %% %d")) == 4


def test_promotions():
    for t in (BOOL, I8, I16, U8, U16):
        assert promote(t) == I32
    for t in (F16, BF16, F32):
        assert promote(t) == F64
    for t in (I32, U32, I64, U64, F64, PointerType(F32), PointerType(U8, AddressSpace.SHARED)):
        assert promote(t) == t
    with pytest.raises(TypeError, match="vector"):
        promote(VectorType(F32, 4))


def test_check_argument_rules():
    d, ld, f, s, p, c = (parse_format(x)[0] for x in ("%d", "%ld", "%f", "%s", "%p", "%c"))
    u, star = parse_format("%x")[0], parse_format("%*.*d")[0]
    for t in (I8, U8, I16, U16, I32, U32, BOOL):  # signed for unsigned is accepted, as C compilers do
        assert check_argument(d, t) is None and check_argument(u, t) is None and check_argument(ld, t) is None
    assert "%ld" in check_argument(d, I64) and check_argument(ld, I64) is None and check_argument(ld, U64) is None
    assert "floating-point" in check_argument(f, I32)
    for t in (F16, BF16, F32, F64):
        assert check_argument(f, t) is None
        assert "expects an integer" in check_argument(d, t)
    assert check_argument(s, STRING_LITERAL) is None
    for space in AddressSpace:
        assert check_argument(s, PointerType(U8, space)) is None
        assert check_argument(s, PointerType(I8, space)) is None
        assert check_argument(p, PointerType(F32, space)) is None
    assert "%p" in check_argument(s, PointerType(F32))
    assert "expects a string" in check_argument(s, I32)
    assert "expects a pointer" in check_argument(p, U64)
    assert "vector" in check_argument(f, VectorType(F32, 2))
    assert check_argument(c, U8) is None and "at most 32 bits" in check_argument(c, I64)
    assert "the width of" in check_argument(star, F32, 0)
    assert "the precision of" in check_argument(star, I64, 1)
    assert "long double" in check_argument(parse_format("%Lf")[0], F64)


def test_argument_types():
    d, lu, lx, f = (parse_format(x)[0] for x in ("%d", "%lu", "%lx", "%f"))
    assert argument_type(d, I8) == I32 and argument_type(d, U32) == U32 and argument_type(d, BOOL) == I32
    assert argument_type(lu, I32) == I64 and argument_type(lx, U16) == I64 and argument_type(lx, U32) == U64
    assert argument_type(f, F16) == F64 and argument_type(f, F32) == F64


def test_fold_string():
    fs = lambda spec, s: fold_string(parse_format(spec)[0], s)  # noqa: E731
    assert fs("%s", "abc") == "abc"
    assert fs("%5s", "abc") == "  abc"
    assert fs("%-5s|", "abc") == "abc  "
    assert fs("%.2s", "abc") == "ab"
    assert fs("%8.3s", "foobar") == "     foo"
    assert fs("%s", "ab\0cd") == "ab"
    assert fs("%.0s", "abc") == ""
    assert fs("%4s", "é") == "  é"  # widths count bytes, as in C
    assert fs("%.1s", "é").encode("utf-8", "surrogateescape") == b"\xc3"


# --- the frontend --------------------------------------------------------------------------------------

def ir_text(src: str, target=NV) -> str:
    m = lower(load_program(src, "t.kc"), target)
    assert_well_formed(m)
    from kcompiler.ir.verifier import verify
    verify(m)
    return print_module(m)


def printf_ops(src: str, target=NV) -> list:
    m = lower(load_program(src, "t.kc"), target)
    return [o for f in m.functions for o in f.body.walk() if o.name == "printf"]


def test_ir_op_with_promoted_types():
    (op,) = printf_ops('kernel k(a: i8, b: u16, c: bool, h: f16, x: f32, d: f64, n: i64, u: u32, p: ptr<f32>, '
                       's: ptr<u8, shared>) {\n'
                       '    printf("%d %u %d %f %e %g %ld %lu %p %s\\n", a, b, c, h, x, d, n, u, p, s);\n}\n')
    assert [str(v.type) for v in op.operands] == ["i32", "i32", "i32", "f64", "f64", "f64", "i64", "u64",
                                                  "ptr<f32>", "ptr<u8, shared>"]
    assert op.attrs["format"] == "%d %u %d %f %e %g %ld %lu %p %s\n"
    assert op.result is None and op.span is not None and (op.span.line, op.span.col) == (2, 5)


def test_literals_take_the_conversions_types():
    (op,) = printf_ops('kernel k() {\n    printf("%d %u %ld %lu %x %f %c %d", 1, 4294966272, 5, '
                       '18446744073709551615, -1, 0.1, 65, true);\n}\n')
    assert [str(v.type) for v in op.operands] == ["i32", "u32", "i64", "u64", "i32", "f64", "i32", "i32"]
    consts = [v.owner.attrs.get("value") for v in op.operands]
    assert consts[5] == 0.1  # C's double literal, not rounded through f32


def test_string_literals_are_folded():
    (op,) = printf_ops('kernel k(n: i32) {\n    printf("[%s|%-6s|%.2s|%5s] %d 100%%\\n", "a%b", "xy", '
                       '"hello", "é", n);\n}\n')
    assert op.attrs["format"] == "[a%%b|xy    |he|   é] %d 100%%\n"
    assert [str(v.type) for v in op.operands] == ["i32"]


def test_string_literal_with_star_width_travels_as_a_constant():
    text = ir_text('kernel k(n: i32) {\n    printf("%*s|\\n", n, "hi");\n}\n')
    assert 'string "hi" : ptr<u8, const>' in text
    assert 'printf "%*s|\\n"' in text


def test_printer_shows_the_format_quoted():
    text = ir_text('kernel k(n: i32) {\n    printf("tab\\there \\"%d\\"\\n", n);\n}\n')
    assert 'printf "tab\\there \\"%d\\"\\n" %' in text


def test_the_verifier_checks_the_op():
    from kcompiler.ir import Builder, Function, Module, Value
    from kcompiler.ir.verifier import IRVerifyError, verify

    def module(fmt, types):
        fn = Function("k", [Value(t, f"a{k}") for k, t in enumerate(types)], VOID, "kernel")
        Builder(fn.body).op("printf", list(fn.params), format=fmt)
        return Module("m", [fn])

    verify(module("%d %lu %f %s %p", [I32, U64, F64, PointerType(U8), PointerType(F32)]))
    for fmt, types, msg in [("%d", [I64], "for a i32 conversion"),
                            ("%d", [I8], "promoted types"),
                            ("%f", [F32], "promoted types"),
                            ("%d %d", [I32], "reads 2 arguments"),
                            ("%y", [], "unknown conversion")]:
        with pytest.raises(IRVerifyError, match=msg):
            verify(module(fmt, types))


def test_format_errors_are_located_inside_the_literal():
    """The caret is under the conversion as written, escapes before it counted as written."""
    src = 'kernel k(n: i32) {\n    printf("\\t\\x41\\u00e9\\\\ %5y", n);\n}\n'
    with pytest.raises(CompileError) as e:
        load_program(src, "bad.kc")
    (d,) = e.value.diagnostics
    line = src.splitlines()[1]
    assert line[d.span.col - 1:d.span.end_col - 1] == "%5y"
    assert d.render().splitlines()[3].endswith("^^^")


def test_non_literal_format():
    with pytest.raises(CompileError, match="printf's format must be a string literal"):
        load_program('kernel k(n: i32) {\n    printf(n);\n}\n', "bad.kc")


def test_printf_in_a_generic_fn_is_checked_per_specialisation():
    src = ('fn show[T: type](x: T) {\n    printf("%f\\n", x);\n}\n'
           'kernel a(x: f32) {\n    show(x);\n}\nkernel b(x: i32) {\n    show(x);\n}\n')
    program = load_program(src, "g.kc")
    lower(program, NV, {"a": {}})
    with pytest.raises(CompileError, match=r"g.kc:2:20: error: '%f' expects a floating-point value, found i32"):
        lower(program, NV, {"b": {}})


def test_hostcall_targets_go_through_the_dispatch_point(monkeypatch):
    """A target whose printf_method is "hostcall" gets no printf op: the lowering calls
    builtins_printf.hostcall_printf(fl, call, format, promoted values)."""
    from kcompiler.frontend import builtins_printf

    src = 'kernel k(x: f32, n: u8) {\n    printf("%s=%f %d\\n", "x", x, n);\n}\n'
    target = FakeTarget("amdgcn", "gfx942", 64)
    target.printf_method = "hostcall"
    seen = []

    def fake(fl, call, fmt, values):
        seen.append((call.span.line, fmt, [str(v.type) for v in values]))
        from kcompiler.frontend.values import VOIDV
        return VOIDV

    with monkeypatch.context() as mp:
        mp.setattr(builtins_printf, "hostcall_printf", fake)
        m = lower(load_program(src, "t.kc"), target)
    assert seen == [(2, "x=%f %d\n", ["f64", "i32"])]
    assert not [o for f in m.functions for o in f.body.walk() if o.name == "printf"]


# --- the NVPTX lowering: vprintf -----------------------------------------------------------------------

MIXED = """
kernel k(a: ptr<i32>, x: f32, n: i64, s: ptr<u8>) {
    printf("%d %f %ld %s\\n", a[0], x, n, s);
}
"""


def _nv():
    from kcompiler.backends import get_target
    return get_target("nvptx", "sm_90a")


def test_vprintf_llvm_ir():
    """Before optimisation: the argument struct, its fields stored at their natural alignment, the
    format a private constant in global memory, pointers passed generic."""
    import llvmlite.binding as llvm

    from kcompiler.backends.llvm import initialize, lower_module

    tgt = _nv()
    initialize()
    text = str(llvm.parse_assembly(str(lower_module(lower(load_program(MIXED, "t.kc"), tgt), tgt))))
    filecheck(text, """
        CHECK: @kc_str_0 = private unnamed_addr addrspace(1) constant [14 x i8] c"%d %f %ld %s\\0A\\00", align 1
        CHECK: define ptx_kernel void @k(
        CHECK: %printf_args = alloca { i32, double, i64, ptr }, align 8
        CHECK: fpext float {{.*}} to double
        CHECK: [[F:%.*]] = addrspacecast ptr addrspace(1) @kc_str_0 to ptr
        CHECK: [[S:%.*]] = addrspacecast ptr addrspace(1) %s to ptr
        CHECK: getelementptr inbounds { i32, double, i64, ptr }, ptr %printf_args, i32 0, i32 0
        CHECK-NEXT: store i32 {{.*}}, align 4
        CHECK: getelementptr inbounds { i32, double, i64, ptr }, ptr %printf_args, i32 0, i32 1
        CHECK-NEXT: store double {{.*}}, align 8
        CHECK: getelementptr inbounds { i32, double, i64, ptr }, ptr %printf_args, i32 0, i32 2
        CHECK-NEXT: store i64 %n, {{.*}}, align 8
        CHECK: getelementptr inbounds { i32, double, i64, ptr }, ptr %printf_args, i32 0, i32 3
        CHECK-NEXT: store ptr [[S]], {{.*}}, align 8
        CHECK: call i32 @vprintf(ptr [[F]], ptr %printf_args)
        CHECK: declare i32 @vprintf(ptr, ptr)
    """)


def test_vprintf_argument_buffer_offsets(tmp_path):
    """i32 at 0, double at 8, i64 at 16, a pointer at 24; an i32 after an i32 at 4; then 8-aligned."""
    from kcompiler.pipeline import compile_source_to

    src = """
    kernel k(a: ptr<i32>, x: f32, n: i64, s: ptr<u8>) {
        printf("%d %f %ld %s %d %u %p\\n", a[0], x, n, s, a[1], u32(a[2]), a);
    }
    """
    llvm = compile_source_to(src, "t.kc", "llvm", "nvptx", "sm_90a")
    filecheck(llvm, """
        CHECK: alloca { i32, double, i64, ptr, i32, i32, ptr }, align 8
        CHECK-DAG: store i32 {{.*}}, ptr %printf_args, align 8
        CHECK-DAG: getelementptr inbounds nuw i8, ptr %printf_args, i64 8
        CHECK-DAG: getelementptr inbounds nuw i8, ptr %printf_args, i64 16
        CHECK-DAG: getelementptr inbounds nuw i8, ptr %printf_args, i64 24
        CHECK-DAG: getelementptr inbounds nuw i8, ptr %printf_args, i64 32
        CHECK-DAG: getelementptr inbounds nuw i8, ptr %printf_args, i64 36
        CHECK-DAG: getelementptr inbounds nuw i8, ptr %printf_args, i64 40
        CHECK: call i32 @vprintf(ptr addrspacecast (ptr addrspace(1) @kc_str_0 to ptr), ptr nonnull %printf_args)
    """)
    ptx = compile_source_to(src, "t.kc", "asm", "nvptx", "sm_90a")
    filecheck(ptx, """
        CHECK: .extern .func (.param .b32 func_retval0) vprintf
        CHECK: .global .align 1 .b8 kc_str_0[{{[0-9]+}}] = {37, 100, 32, 37, 102
        CHECK: .local .align 8 .b8 __local_depot0[48];
        CHECK-DAG: st.local.b32 [[[B:%rd[0-9]+]]], %r{{[0-9]+}};
        CHECK-DAG: st.local.b64 [[[B]]+8], %rd{{[0-9]+}};
        CHECK-DAG: st.local.b64 [[[B]]+16], %rd{{[0-9]+}};
        CHECK-DAG: st.local.b64 [[[B]]+24], %rd{{[0-9]+}};
        CHECK-DAG: st.local.{{.*}}[[[B]]+32], {{.*}};
        CHECK-DAG: st.local.b64 [[[B]]+40], %rd{{[0-9]+}};
        CHECK: cvta.global.u64
        CHECK: call.uni (retval0), vprintf, (param0, param1);
    """)
    _assemble(ptx, tmp_path)


def test_vprintf_without_arguments_passes_null(tmp_path):
    from kcompiler.pipeline import compile_source_to

    src = 'kernel k() {\n    printf("hello, world\\n");\n}\n'
    llvm = compile_source_to(src, "t.kc", "llvm", "nvptx", "sm_90a")
    filecheck(llvm, """
        CHECK: c"hello, world\\0A\\00"
        CHECK-NOT: alloca
        CHECK: call i32 @vprintf(ptr addrspacecast (ptr addrspace(1) @kc_str_0 to ptr), ptr null)
    """)
    _assemble(compile_source_to(src, "t.kc", "asm", "nvptx", "sm_90a"), tmp_path)


def test_vprintf_pointers_in_every_address_space(tmp_path):
    from kcompiler.pipeline import compile_source_to

    src = """
    kernel k(g: ptr<u8>, c: ptr<u8, const>) {
        shared t: [u8; 8];
        var l: [u8; 4];
        t[0] = 0u8;
        l[0] = 0u8;
        printf("%s%s%s%s%p\\n", g, c, t, l, t);
    }
    """
    ptx = compile_source_to(src, "t.kc", "asm", "nvptx", "sm_90a")
    filecheck(ptx, """
        CHECK: cvta.shared.u64
        CHECK: call.uni (retval0), vprintf
    """)
    _assemble(ptx, tmp_path)


def test_vprintf_reads_neither_hh_nor_zjt():
    """%hhd and %hhx are narrowed on the device and printed as %d and %x; %zu, %jd and %td become %lu
    and %ld (64-bit here), which vprintf reads."""
    from kcompiler.pipeline import compile_source_to

    src = """
    kernel k(n: i32, m: u64) {
        printf("%hhd %-4hhx %zu %jd %5td %hd %%\\n", n, n, m, m, m, n);
    }
    """
    llvm = compile_source_to(src, "t.kc", "llvm", "nvptx", "sm_90a")
    filecheck(llvm, r"""
        CHECK: c"%d %-4x %lu %ld %5ld %hd %%\0A\00"
        CHECK-DAG: ashr exact i32 {{.*}}, 24
        CHECK-DAG: and i32 %n, 255
    """)


def test_vprintf_rejects_star_precision():
    from kcompiler.pipeline import compile_source_to

    with pytest.raises(CompileError, match=r"t.kc:2:5: error: CUDA's vprintf does not support a '\*' precision"):
        compile_source_to('kernel k(n: i32, x: f64) {\n    printf("%.*f\\n", n, x);\n}\n', "t.kc", "asm",
                          "nvptx", "sm_90a")


def test_printf_in_a_device_function_and_a_loop(tmp_path):
    from kcompiler.pipeline import compile_source_to

    src = """
    fn show(i: i32, x: f32) {
        printf("x[%d] = %.3f\\n", i, x);
    }
    kernel k(x: ptr<f32>, n: i32) {
        for i in range(n) {
            show(i, x[i]);
        }
    }
    """
    ptx = compile_source_to(src, "t.kc", "asm", "nvptx", "sm_90a")
    assert ptx.count("vprintf") >= 2
    _assemble(ptx, tmp_path)


def _assemble(ptx: str, tmp_path) -> None:
    if ptxas is None:
        pytest.skip("ptxas not on PATH")
    p = tmp_path / "k.ptx"
    p.write_text(ptx)
    r = subprocess.run([ptxas, "-arch=sm_90a", str(p), "-o", str(tmp_path / "k.cubin")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr


# --- on a CUDA GPU: every line against snprintf ----------------------------------------------------------

# (suite, format, [(type, value), ...]). Types: i8 i16 i32 i64 u8 u16 u32 u64 (integers, passed in that
# kernel-language type), f16 f32 f64 (floats, likewise), str (a device string, ptr<u8>), lit (a string
# literal, folded into the format by the compiler), ptr (a pointer, %p).
M, E = "mpaland", "eyalroz"
CASES = [
    # mpaland: space flag, + flag, 0 flag, - flag, # flag
    (M, "% d", [("i32", 42)]), (M, "% d", [("i32", -42)]), (M, "% 5d", [("i32", 42)]),
    (M, "% 5d", [("i32", -42)]), (M, "% 15d", [("i32", 42)]), (M, "% 15d", [("i32", -42)]),
    (M, "% 15.3f", [("f64", -42.987)]), (M, "% 15.3f", [("f64", 42.987)]), (M, "% d", [("i32", 1024)]),
    (M, "% i", [("i32", -1024)]), (M, "%+d", [("i32", 42)]), (M, "%+d", [("i32", -42)]),
    (M, "%+5d", [("i32", 42)]), (M, "%+15d", [("i32", -42)]), (M, "%+i", [("i32", 1024)]),
    (M, "%+.0d", [("i32", 0)]), (M, "%0d", [("i32", 42)]), (M, "%0ld", [("i64", 42)]),
    (M, "%05d", [("i32", -42)]), (M, "%015d", [("i32", 42)]), (M, "%015.2f", [("f64", 42.1234)]),
    (M, "%015.3f", [("f64", 42.9876)]), (M, "%015.5f", [("f64", -42.9876)]), (M, "%-d", [("i32", -42)]),
    (M, "%-5d", [("i32", 42)]), (M, "%-15d", [("i32", -42)]), (M, "%-05d", [("i32", -42)]),
    (M, "%-015d", [("i32", 42)]), (M, "%0-5d", [("i32", 42)]), (M, "%0-15d", [("i32", -42)]),
    (M, "%#.0x", [("u32", 0)]), (M, "%#.8x", [("u32", 0x614E)]),
    # mpaland: specifier, width, width 20, width *20, width -20
    (M, "Hello testing", []), (M, "%s", [("str", b"Hello testing")]), (M, "%d", [("i32", -1024)]),
    (M, "%i", [("i32", 1024)]), (M, "%u", [("u32", 4294966272)]), (M, "%o", [("u32", 511)]),
    (M, "%o", [("u32", 4294966785)]), (M, "%x", [("u32", 305441741)]), (M, "%X", [("u32", 3989525555)]),
    (M, "%%", []), (M, "%1s", [("str", b"Hello testing")]), (M, "%1d", [("i32", -1024)]),
    (M, "%1u", [("u32", 4294966272)]), (M, "%1x", [("u32", 3989525555)]), (M, "%1c", [("i32", ord("x"))]),
    (M, "%20s", [("str", b"Hello")]), (M, "%20d", [("i32", -1024)]), (M, "%20u", [("u32", 4294966272)]),
    (M, "%20o", [("u32", 4294966785)]), (M, "%20X", [("u32", 305441741)]), (M, "%20c", [("i32", ord("x"))]),
    (M, "%*s", [("i32", 20), ("str", b"Hello")]), (M, "%*d", [("i32", 20), ("i32", 1024)]),
    (M, "%*u", [("i32", 20), ("u32", 4294966272)]), (M, "%*x", [("i32", 20), ("u32", 3989525555)]),
    (M, "%*c", [("i32", 20), ("i32", ord("x"))]), (M, "%-20s", [("lit", b"Hello")]),
    (M, "%-20d", [("i32", 1024)]), (M, "%-20.4f", [("f64", 1024.1234)]), (M, "%-20u", [("u32", 4294966272)]),
    (M, "%-20o", [("u32", 511)]), (M, "%-20x", [("u32", 3989525555)]), (M, "%-20c", [("i32", ord("x"))]),
    (M, "|%5d| |%-2d| |%5d|", [("i32", 9)] * 3), (M, "|%5d| |%-2d| |%5d|", [("i32", 10)] * 3),
    (M, "|%5d| |%-12d| |%5d|", [("i32", 9)] * 3),
    # mpaland: padding 20, .20, #020, #20, 20.5
    (M, "%020d", [("i32", -1024)]), (M, "%020u", [("u32", 4294966272)]), (M, "%020o", [("u32", 511)]),
    (M, "%020x", [("u32", 305441741)]), (M, "%020X", [("u32", 3989525555)]), (M, "%.20d", [("i32", -1024)]),
    (M, "%.20u", [("u32", 4294966272)]), (M, "%.20o", [("u32", 4294966785)]), (M, "%.20x", [("u32", 305441741)]),
    (M, "%#020o", [("u32", 511)]), (M, "%#020x", [("u32", 305441741)]), (M, "%#020X", [("u32", 3989525555)]),
    (M, "%#20o", [("u32", 4294966785)]), (M, "%#20x", [("u32", 3989525555)]), (M, "%#20X", [("u32", 305441741)]),
    (M, "%20.5d", [("i32", -1024)]), (M, "%20.5u", [("u32", 1024)]), (M, "%20.5o", [("u32", 511)]),
    (M, "%20.10x", [("u32", 3989525555)]), (M, "%20.5X", [("u32", 305441741)]),
    # mpaland: length
    (M, "%.0s", [("str", b"Hello testing")]), (M, "%20.0s", [("str", b"Hello testing")]),
    (M, "%.s", [("str", b"Hello testing")]), (M, "%20.s", [("lit", b"Hello testing")]),
    (M, "%20.0d", [("i32", 1024)]), (M, "%20.d", [("i32", 0)]), (M, "%20.i", [("i32", -1024)]),
    (M, "%20.u", [("u32", 0)]), (M, "%20.o", [("u32", 0)]), (M, "%50.x", [("u32", 305441741)]),
    (M, "%50.x%10.u", [("u32", 305441741), ("u32", 12345)]), (M, "%20.X", [("u32", 0)]),
    (M, "%02.0u", [("u32", 0)]), (M, "%02.0d", [("i32", 0)]),
    # mpaland: float
    (M, "%.4f", [("f64", 3.1415354)]), (M, "%.3f", [("f64", 30343.1415354)]), (M, "%.0f", [("f64", 34.1415354)]),
    (M, "%.2f", [("f64", 42.8952)]), (M, "%.9f", [("f64", 42.8952)]), (M, "%.10f", [("f64", 42.895223)]),
    (M, "%.12f", [("f64", 42.89522312345678)]), (M, "%6.2f", [("f64", 42.8952)]), (M, "%+6.2f", [("f64", 42.8952)]),
    (M, "%+5.1f", [("f64", 42.9252)]), (M, "%f", [("f64", 42.5)]), (M, "%.1f", [("f64", 42.5)]),
    (M, "%f", [("f64", 42167.0)]), (M, "%.9f", [("f64", -12345.987654321)]), (M, "%.1f", [("f64", 3.999)]),
    (M, "%.0f", [("f64", 3.5)]), (M, "%.0f", [("f64", 3.49)]), (M, "%.1f", [("f64", 3.49)]),
    (M, "a%-5.1f", [("f64", 0.5)]), (M, "a%-5.1fend", [("f64", 0.5)]), (M, "%.1f", [("f64", 1e20)]),
    # mpaland: types
    (M, "%i", [("i32", 0)]), (M, "%i", [("i16", 32767)]), (M, "%i", [("i16", -32767)]),
    (M, "%li", [("i64", -2147483647)]), (M, "%li", [("i64", 2147483647)]), (M, "%lli", [("i64", 30)]),
    (M, "%lli", [("i64", -9223372036854775807)]), (M, "%lli", [("i64", 9223372036854775807)]),
    (M, "%lu", [("u64", 100000)]), (M, "%lu", [("u64", 0xFFFFFFFF)]), (M, "%llu", [("u64", 281474976710656)]),
    (M, "%llu", [("u64", 18446744073709551615)]), (M, "%zu", [("u64", 2147483647)]),
    (M, "%zd", [("i64", 2147483647)]), (M, "%zi", [("i64", -2147483647)]), (M, "%o", [("u32", 60000)]),
    (M, "%lo", [("i64", 12345678)]), (M, "%lx", [("i64", 0x12345678)]), (M, "%llx", [("u64", 0x1234567891234567)]),
    (M, "%lx", [("u64", 0xABCDEFAB)]), (M, "%lX", [("u64", 0xABCDEFAB)]), (M, "%c", [("u8", ord("v"))]),
    (M, "%cv", [("i8", ord("w"))]), (M, "%s", [("lit", b"A Test")]), (M, "%hhu", [("u32", 0xFFFF)]),
    (M, "%hu", [("u32", 0x123456)]), (M, "%s%hhi %hu", [("str", b"Test"), ("i32", 10000), ("u32", 0xFFFFFFFF)]),
    (M, "%tx", [("i64", 10)]), (M, "%ji", [("i64", -2147483647)]),
    # mpaland: pointer, misc
    (M, "%p", [("ptr", 0x1234)]), (M, "%p", [("ptr", 0x12345678)]),
    (M, "%p-%p", [("ptr", 0x12345678), ("ptr", 0x7EDCBA98)]), (M, "%p", [("ptr", 0xFFFFFFFF)]),
    (M, "%u%u%ctest%d %s", [("u32", 5), ("u32", 3000), ("i32", ord("a")), ("i32", -20), ("str", b"bit")]),
    (M, "%.3s", [("str", b"foobar")]), (M, "% .0d", [("i32", 0)]), (M, "%10.5d", [("i32", 4)]),
    (M, "%*sx", [("i32", -3), ("lit", b"hi")]), (M, "%*sx", [("i32", -3), ("str", b"hi")]),
    # eyalroz: padding of negative numbers, floats
    (E, "% 1d", [("i32", -5)]), (E, "% 4d", [("i32", -5)]), (E, "%03d", [("i32", -5)]),
    (E, "% 3.1f", [("f64", -5.0)]), (E, "% 5.1f", [("f64", -5.0)]), (E, "% 6.1g", [("f64", -5.0)]),
    (E, "% 6.1e", [("f64", -5.0)]), (E, "% 10.1e", [("f64", -5.0)]), (E, "%05.1f", [("f64", -5.0)]),
    (E, "%03.0f", [("f64", -5.0)]), (E, "%010.1e", [("f64", -5.0)]), (E, "%07.0E", [("f64", -5.0)]),
    (E, "%03.0g", [("f64", -5.0)]), (E, "%8f", [("f64", math.nan)]), (E, "%8f", [("f64", math.inf)]),
    (E, "%-8f", [("f64", -math.inf)]), (E, "%8e", [("f64", math.nan)]), (E, "%-8e", [("f64", -math.inf)]),
    (E, "%.10f", [("f64", 2147483647.0)]), (E, "%.10f", [("f64", 4294967296.0)]),
    (E, "%.10g", [("f64", 2147483648.0)]), (E, "%.10g", [("f64", 4294967295.0)]),
    (E, "%.0e", [("f64", 1.380651569e-23)]), (E, "%.1e", [("f64", 1.380651569e-23)]),
    (E, "%.5e", [("f64", 1.380651569e-23)]), (E, "%.11e", [("f64", 1.380651569e-23)]),
    (E, "%.0f", [("f64", 1.3)]), (E, "%.0f", [("f64", 1.55)]), (E, "%.1f", [("f64", 1.64)]),
    (E, "%020.15f", [("f64", 42477.37109375)]), (E, "%.0f", [("f64", 4.5)]),
    (E, "%.12f", [("f32", 42.89522312345678)]), (E, "%.12lf", [("f32", 42.89522312345678)]),
    (E, "%.12F", [("f64", 42.89522312345678)]), (E, "%.4g", [("f64", 0.5)]), (E, "%.4g", [("f64", 1.0)]),
    (E, "%G", [("f64", 12345.678)]), (E, "%.7G", [("f64", 12345.678)]), (E, "%.5G", [("f64", 123456789.0)]),
    (E, "%.6G", [("f64", 12345.0)]), (E, "%+12.4g", [("f64", 123456789.0)]), (E, "%.2G", [("f64", 0.001234)]),
    (E, "%+10.4G", [("f64", 0.001234)]), (E, "%+012.4g", [("f64", 0.00001234)]),
    (E, "%.3g", [("f64", -1.2345e-308)]), (E, "%+.3E", [("f64", 1.23e308)]), (E, "%.3e", [("f64", 9.9996)]),
    (E, "%g", [("f64", 0.0)]), (E, "%g", [("f64", -0.0)]), (E, "%+g", [("f64", 0.0)]), (E, "%+g", [("f64", -0.0)]),
    (E, "%.1g", [("f64", -40661.5)]), (E, "%#.1g", [("f64", -40661.5)]),
    (E, "%#.3g", [("f64", 99.998580932617187500)]), (E, "%#.3g", [("f32", 99.998580932617187500)]),
    (E, "%#.3lg", [("f64", 99.998580932617187500)]), (E, "%.10e", [("f64", 1.2345678901e-308)]),
    (E, "%e", [("f64", 48955.125)]), (E, "%.4e", [("f64", 92523.5)]), (E, "%.9e", [("f32", -83809.234375)]),
    (E, "%.9E", [("f64", -83809.234375)]), (E, "%.9le", [("f64", -83809.234375)]),
    (E, "%hhu", [("u8", 0xFF)]), (E, "%hu", [("u16", 0x1234)]),
    (E, "%s%hhi %hu", [("str", b"Test"), ("i8", 100), ("u16", 0xFFFF)]),
    # kcompiler's own: %a, f16 and bf16 promotions, %s of a literal in the middle of text
    ("kcompiler", "%a|%A", [("f64", 1.0), ("f64", 0.1)]), ("kcompiler", "%.3a", [("f64", -3.75)]),
    ("kcompiler", "%g %g", [("f16", 0.333251953125), ("bf16", 1.5)]),
    ("kcompiler", "<%s|%5s|%-5s>", [("lit", b"a%d"), ("str", b"b"), ("lit", b"c")]),
]


def _case_arrays(cases):
    """The kernel's arrays: every integer argument (as its i64 bit pattern), every float, and the
    bytes of every device string, with the source of each argument's expression."""
    ints, floats, strs, exprs = [], [], bytearray(), []
    for _, fmt, args in cases:
        row = []
        for t, v in args:
            if t in ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "ptr"):
                ints.append(v & 0xFFFF_FFFF_FFFF_FFFF)
                k = len(ints) - 1
                row.append(f"bitcast[ptr<u8>](u64(ints[{k}]))" if t == "ptr" else
                           (f"ints[{k}]" if t == "i64" else f"{t}(ints[{k}])"))
            elif t in ("f16", "bf16", "f32", "f64"):
                floats.append(v)
                row.append(f"fl[{len(floats) - 1}]" if t == "f64" else f"{t}(fl[{len(floats) - 1}])")
            elif t == "str":
                row.append(f"s + {len(strs)}")
                strs += v + b"\0"
            else:  # a literal
                row.append('"' + v.decode().replace("\\", "\\\\").replace('"', '\\"') + '"')
        exprs.append(row)
    ints_a = np.array([x - (1 << 64) if x >= 1 << 63 else x for x in ints] or [0], dtype=np.int64)
    return ints_a, np.array(floats or [0.0], dtype=np.float64), np.frombuffer(bytes(strs) or b"\0", np.uint8).copy(), exprs


def gpu_source(cases) -> str:
    """One kernel printing every case on its own line: @@<k>|<the case's text>."""
    _, _, _, exprs = _case_arrays(cases)
    lines = ["kernel cases(ints: ptr<i64>, fl: ptr<f64>, s: ptr<u8>) {"]
    for k, ((_, fmt, _), row) in enumerate(zip(cases, exprs)):
        text = fmt.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'    printf("@@{k}|{text}\\n"{"".join(", " + e for e in row)});')
    lines.append("}")
    return "\n".join(lines) + "\n"


_C_TYPES = {"i32": ctypes.c_int, "u32": ctypes.c_uint, "i64": ctypes.c_longlong, "u64": ctypes.c_ulonglong}


def _wrap(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def _round(t: str, v: float) -> float:
    if t == "f32":
        return float(np.float32(v))
    if t == "f16":
        return float(np.float16(v))
    if t == "bf16":
        import ml_dtypes
        return float(np.array(v, dtype=ml_dtypes.bfloat16).astype(np.float64))
    return v


def snprintf(fmt: str, args: list) -> str:
    """The C library's text for ``fmt`` with the case's arguments, each passed as C passes the kernel
    value after the default promotions (the oracle)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    cargs = []
    for t, v in args:
        if t in ("i8", "i16", "u8", "u16"):
            cargs.append(ctypes.c_int(_wrap(v, int(t[1:]), t[0] == "i")))
        elif t in _C_TYPES:
            cargs.append(_C_TYPES[t](_wrap(v, int(t[1:]), t[0] == "i")))
        elif t in ("f16", "bf16", "f32", "f64"):
            cargs.append(ctypes.c_double(_round(t, v)))
        elif t in ("str", "lit"):
            cargs.append(ctypes.c_char_p(v))
        else:
            cargs.append(ctypes.c_void_p(v))
    buf = ctypes.create_string_buffer(4096)
    n = libc.snprintf(buf, len(buf), fmt.encode(), *cargs)
    assert 0 <= n < len(buf)
    return buf.raw[:n].decode("utf-8", "surrogateescape")


def test_gpu_cases_are_many_and_valid():
    """Every case parses and checks in kcompiler (so the GPU kernel compiles for nvptx), and
    the oracle runs here."""
    assert len(CASES) >= 100
    for _, fmt, args in CASES:
        assert count_args(parse_format(fmt)) == len(args), fmt
        assert "*" not in [c.precision for c in parse_format(fmt) if isinstance(c, Conversion)]
    check(load_program(gpu_source(CASES), "cases.kc"), NV)
    if sys.platform == "linux" and struct.calcsize("P") == 8:
        assert snprintf("%5.1f|%s|%lu", [("f64", 2.25), ("str", b"x"), ("u64", 2 ** 64 - 1)]) == \
            "  2.2|x|18446744073709551615"


def test_gpu_source_compiles_to_ptx(tmp_path):
    from kcompiler.pipeline import compile_source_to

    ptx = compile_source_to(gpu_source(CASES), "cases.kc", "asm", "nvptx", "sm_90a")
    assert ptx.count("call.uni (retval0), vprintf") == len(CASES)
    _assemble(ptx, tmp_path)


_CHILD = """
import ctypes, sys
import numpy as np
sys.path.insert(0, {repo!r})
import kcompiler as kc
from kcompiler.runtime.cuda import CudaDevice
src = open({src!r}).read()
arrays = np.load({arrays!r})
mod = kc.compile(src, target="cuda", path="cases.kc")
kernel = getattr(mod, {kernel!r})
kernel[{grid}, {block}](*[arrays[k] for k in {names!r}])
CudaDevice.get(0).synchronize()   # the driver flushes the printf FIFO to stdout here
ctypes.CDLL(None).fflush(None)
"""


def run_on_gpu(tmp_path, src: str, kernel: str, arrays: dict, grid=1, block=1) -> str:
    """Compile and launch ``kernel`` in a fresh process; its stdout (what the driver's printf FIFO
    wrote at synchronisation)."""
    (tmp_path / "k.kc").write_text(src)
    np.savez(tmp_path / "arrays.npz", **arrays)
    script = _CHILD.format(repo=str(REPO), src=str(tmp_path / "k.kc"), arrays=str(tmp_path / "arrays.npz"),
                           kernel=kernel, grid=grid, block=block, names=list(arrays))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300,
                       env={**os.environ, "KC_CACHE": "0"})
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout.decode("utf-8", "surrogateescape")


@pytest.mark.gpu
def test_gpu_printf_matches_snprintf(tmp_path):
    ints, fl, s, _ = _case_arrays(CASES)
    out = run_on_gpu(tmp_path, gpu_source(CASES), "cases", {"ints": ints, "fl": fl, "s": s})
    got = {}
    for line in out.split("\n"):
        if line.startswith("@@"):
            k, _, text = line[2:].partition("|")
            got[int(k)] = text
    assert sorted(got) == list(range(len(CASES))), out[-2000:]
    bad = []
    for k, (suite, fmt, args) in enumerate(CASES):
        want = snprintf(fmt, args)
        if got[k] != want:
            bad.append(f"{suite} {fmt!r} {args}: GPU {got[k]!r}, snprintf {want!r}")
    assert not bad, f"{len(bad)} of {len(CASES)} differ:\n" + "\n".join(bad)


@pytest.mark.gpu
def test_gpu_printf_from_every_thread(tmp_path):
    """Every thread of two blocks prints once; %s of shared, local and global strings, %p of shared."""
    src = textwrap.dedent("""
        kernel every(g: ptr<u8>) {
            shared t: [u8; 8];
            var l: [u8; 4];
            if thread_id.x == 0 {
                t[0] = 83u8;
                t[1] = 0u8;
            }
            l[0] = 76u8;
            l[1] = 0u8;
            barrier();
            printf("@@%d.%d %s%s%s %5.1f\\n", block_id.x, thread_id.x, t, l, g, f32(thread_id.x) * 0.5);
        }
    """)
    out = run_on_gpu(tmp_path, src, "every", {"g": np.frombuffer(b"G\0", np.uint8).copy()}, grid=2, block=64)
    lines = sorted(x for x in out.split("\n") if x.startswith("@@"))
    want = sorted(f"@@{b}.{t} SLG {t * 0.5:5.1f}" for b in range(2) for t in range(64))
    assert lines == want
