"""Structs (docs/LANGUAGE.md, "Structs"): the located errors of declarations, literals and field
access; what the same kernels compile to for NVPTX (through ptxas) and AMDGCN (kernarg metadata)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError

PAIR = "struct Pair { lo: f32, hi: f32 }\n"


@pytest.mark.parametrize("src, message, hint", [
    (PAIR + "kernel k(o: ptr<Pair>) { o[0] = Pair { lo: 1.0, hj: 2.0 }; }",
     "struct Pair has no field 'hj'", "its fields: lo, hi"),
    (PAIR + "kernel k(o: ptr<Pair>) { o[0] = Pair { lo: 1.0 }; }",
     "struct literal of Pair is missing field hi", "give every field"),
    (PAIR + "kernel k(o: ptr<Pair>) { o[0] = Pair { lo: 1.0, lo: 2.0, hi: 3.0 }; }",
     "field 'lo' is given twice", "first given at"),
    (PAIR + "kernel k(o: ptr<Pair>, x: f64) { o[0] = Pair { lo: x, hi: 2.0 }; }",
     r"cannot initialise field 'lo' \(f32\) of Pair with f64", None),
    (PAIR + "kernel k(o: ptr<f32>, p: Pair) { o[0] = p.mid; }",
     "struct Pair has no field 'mid'", "its fields: lo, hi"),
    (PAIR + "kernel k(o: ptr<Pair>, p: Pair) { p.lo = 1.0; o[0] = p; }",
     "cannot assign to a field of 'p': it is not a var", "var p2 = p"),
    (PAIR + "kernel k(o: ptr<f32>, p: Pair) { o[0] = p; }",
     r"cannot store Pair into ptr<f32>", None),
    ("struct A { x: f32, x: i32 }\nkernel k(o: ptr<A>) { }", "struct 'A' has two fields named 'x'", None),
    ("struct A { x: Flaot }\nkernel k(o: ptr<A>) { }", "unknown type 'Flaot'", None),
    ("struct A { b: A }\nkernel k(o: ptr<A>) { }", "struct 'A' contains itself", None),
    ("struct Acc[T: type] { s: T }\nkernel k(o: ptr<f32>) { let a = Acc { s: 1.0 }; o[0] = a.s; }",
     "struct 'Acc' is generic", r"Acc\[T\]"),
    ("struct Acc[T: type] { s: T }\nkernel k(o: ptr<Acc[f32, i32]>) { }",
     "struct 'Acc' takes 1 compile-time argument", None),
])
def test_errors_are_located_with_help(src, message, hint):
    with pytest.raises(CompileError, match=message) as ei:
        kc.compile(src, target="cpu", path="s.kc")
    d = ei.value.diagnostics[0]
    assert d.span is not None and d.span.line >= 1 and d.span.file.path == "s.kc"
    if hint:
        import re
        assert d.hint and re.search(hint, d.hint), d.hint
    assert "^" in str(ei.value)  # the caret under the source line


def test_if_condition_followed_by_block_is_not_a_struct_literal():
    src = PAIR + "kernel k(o: ptr<f32>, lo: bool) { if lo { o[0] = 1.0; } }"
    kc.compile(src, target="cpu")


KERNARG = """
struct M { a: i8, b: f64, c: f16 }
kernel k(x: ptr<f32>, m: M, n: i32) { x[0] = f32(m.b) + f32(m.c) + f32(m.a) + f32(n); }
"""


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_amdgcn_kernarg_metadata_of_a_struct_parameter(arch):
    from kcompiler.runtime.codeobject import read_code_object
    from kcompiler.runtime.hip import kernarg_layout

    art = kc.compile(KERNARG, target="hip", arch=arch).k.specialize()
    k = read_code_object(art.binary).kernel(art.symbol)
    # C layout: M is {i8 @0, f64 @8, f16 @16}, 24 bytes aligned to 8, so it sits at kernarg offset 8
    assert [(a.offset, a.size, a.value_kind) for a in k.explicit_args] == \
        [(0, 8, "global_buffer"), (8, 24, "by_value"), (32, 4, "by_value")]
    assert kernarg_layout(art, k).offsets == (0, 8, 32)


def test_nvptx_struct_parameter_is_an_aligned_param_and_assembles(tmp_path):
    from kcompiler.pipeline import compile_source_to

    ptx = compile_source_to(KERNARG, "t.kc", "asm", "nvptx", "sm_90")
    assert ".param .align 8 .b8 k_param_1[24]" in ptx
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas not on PATH")
    (tmp_path / "k.ptx").write_text(ptx)
    r = subprocess.run([ptxas, "-arch=sm_90", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_generic_struct_types_parse_beside_array_literals_and_types():
    src = ("struct Acc[T: type] { s: T }\n"
           "kernel k(o: ptr<f32>, x: f32) {\n"
           "    let c = [o[0], x];\n"
           "    var a: [Acc[f32]; 2];\n"
           "    a[1] = Acc[f32] { s: c[1] };\n"
           "    o[0] = a[1].s;\n"
           "}\n")
    kc.compile(src, target="cpu")
