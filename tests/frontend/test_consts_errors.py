"""Located errors of array literals, const declarations and the if expression (caret and help)."""
from __future__ import annotations

import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.frontend.parser import parse
from kcompiler.diagnostics import Diagnostics, SourceFile

from ..frontend_util import NV

CASES = [
    ("kernel k(o: ptr<f32>) { let c: [f32; 3] = [1.0, 2.0]; o[0] = c[0]; }",
     "1:43", "the literal has 2 elements, [f32; 3] has 3", "write 3 elements, or declare [f32; 2]"),
    ("const T: [f32; 4] = [1.0, 2.0, 3.0];\nkernel k(o: ptr<f32>) { o[0] = T[0]; }",
     "1:21", "the literal has 3 elements, [f32; 4] has 4", None),
    ("kernel k(o: ptr<f32>) { const C = o[0] * 2.0; o[0] = C; }",
     "1:35", "the value of const 'C' is not known at compile time", "use let for a run-time value"),
    ("kernel k(o: ptr<f32>, n: i32) { const C = [1, n]; o[0] = f32(C[0]); }",
     "1:43", "the value of const 'C' is not known at compile time", None),
    ("kernel k(o: ptr<f32>) { let c = [1.0, 2, 3.0]; o[0] = c[0]; }",
     "1:39", "mixed array element types: integer literal here, float literal at", "write every one as a float"),
    ("kernel k(o: ptr<f32>, x: f64) { let c = [o[0], x]; o[0] = c[0]; }",
     "1:48", "mixed array element types: f64 here, f32 at", "convert it: f32(x)"),
    ("kernel k(o: ptr<f32>, n: i32) { let v = if n { 1.0 } else { 2.0 }; o[0] = v; }",
     "1:44", "the condition of an if expression must be bool, found i32", "compare it: x != 0"),
    ("kernel k(o: ptr<f32>, n: i32, d: f64) { let v = if n > 0 { o[0] } else { d }; o[0] = v; }",
     "1:74", "mixed if-expression branch types: f64 here, f32 at", "convert it: f32(x)"),
    ("const T = [1.0, 2.0];\nkernel k(o: ptr<f32>, i: i32) { T[i] = 1.0; }",
     "2:33", "cannot assign to an element of const 'T': it is read-only", None),
    ("kernel k(o: ptr<f32>, i: i32) { let c = [1.0, 2.0]; c[i] = 1.0; }",
     "1:53", "cannot assign to an element of 'c' ([f32; 2]): it is read-only", None),
    ("const A = B + 1;\nconst B = A * 2;\nkernel k(o: ptr<i32>) { o[0] = A; }",
     "2:11", "const 'A' depends on itself", None),
    ("const T = [1.0, 2.0];\nfn f(p: ptr<f32>) -> f32 { return p[0]; }\nkernel k(o: ptr<f32>) { o[0] = f(T); }",
     "3:34", "const 'T' is a table in constant memory, not a pointer", "let t = T;"),
    ("const T = [1.0, 2.0];\nkernel k(o: ptr<f32>) { o[0] = T[2]; }", "2:34", "index 2 is out of bounds", None),
    ("const T = 1;\nconst T = 2;\nkernel k(o: ptr<i32>) { o[0] = T; }", "2:7", "'T' is already defined", None),
    ("kernel k(o: ptr<i32>) { const C = 3; C = 4; }", "1:38", "cannot assign to 'C': it is a const", None),
    ("const C: [f32; 2] = 1.0;\nkernel k(o: ptr<f32>) { o[0] = C[0]; }", "1:21",
     "cannot initialise const 'C' ([f32; 2]) with float literal", "write an array literal"),
    ("const C: u8 = 300;\nkernel k(o: ptr<u8>) { o[0] = C; }", "1:15", "cannot initialise const 'C' (u8)", None),
    ("kernel k(o: ptr<f32>) { let c = [f32; 3](1.0, 2.0); o[0] = c[0]; }", "1:33",
     "a conversion to [f32; 3] takes 1 or 3 arguments, found 2", None),
]


@pytest.mark.parametrize("src,where,msg,hint", CASES)
def test_located_errors(src, where, msg, hint):
    with pytest.raises(CompileError) as ei:
        kc.compile(src, target="cpu", path="e.kc")
    text = str(ei.value)
    assert msg in text, text
    assert f"e.kc:{where}: error" in text and "^" in text
    if hint:
        assert "help: " + hint in text or hint in text


def test_kc_check_reports_an_unused_const():
    """kc check evaluates every const of the file, used or not."""
    from kcompiler.frontend import check, load_program
    prog = load_program("const C = [1, 2.0];\nkernel k(o: ptr<i32>) { o[0] = 1; }", "e.kc", keep_going=True)
    with pytest.raises(CompileError, match="mixed array element types"):
        check(prog, NV)


@pytest.mark.parametrize("src,msg", [
    ("kernel k(o: ptr<f32>) { let c = []; }", "an array literal needs at least one element"),
    ("kernel k(o: ptr<f32>) { let c = [a = 1]; }", "an array literal holds values"),
    ("kernel k(o: ptr<f32>) { let c = if true { 1.0 }; }", "expected 'else'|unexpected"),
])
def test_syntax_errors(src, msg):
    d = Diagnostics()
    assert parse(SourceFile("e.kc", src), d) is None
    assert any(__import__("re").search(msg, x.message) for x in d.items), [x.message for x in d.items]


def test_const_is_still_an_address_space_name():
    """`const` became a keyword; ptr<T, const> still parses."""
    kc.compile("kernel k(p: ptr<f32, const>, o: ptr<f32>) { o[0] = p[0]; }", target="cpu", path="a.kc")
