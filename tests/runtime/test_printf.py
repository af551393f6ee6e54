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
from .printf_util import CASES, _case_arrays, gpu_source, snprintf

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
