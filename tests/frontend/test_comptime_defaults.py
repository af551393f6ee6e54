"""Defaults of compile-time parameters that use earlier parameters are evaluated per specialisation
(they were evaluated once at load: ``B = A * 2`` stayed 6 whatever A was, and ``ACC: type = T`` was
rejected because T has no default)."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.pipeline import Source, emit

from ..ptxas_util import needs_ptxas, ptxas
from ..cli_util import kc as kc_cli

SRC = """
kernel k[A: i32 = 3, B: i32 = A * 2](o: ptr<i32>) {
    o[0] = A;
    o[1] = B;
}
// ACC is not in any argument's type: it is always T's default unless given
kernel acc[T: type, ACC: type = T](x: ptr<T>, o: ptr<f64>) {
    o[0] = f64(ACC(x[0]) + ACC(x[1]));
}
kernel narrow[A: i32 = 2, B: u8 = A * 100](o: ptr<i32>) {
    o[0] = i32(B);
}
fn scaled[A: i32 = 3, B: i32 = A * 2](x: i32) -> i32 {
    return x * B;
}
fn widen[T: type, ACC: type = T](x: T) -> ACC {
    return ACC(x) + ACC(x);
}
kernel calls(o: ptr<i32>, x: ptr<i8>) {
    o[0] = scaled(1);
    o[1] = scaled[A = 5](1);
    o[2] = scaled[4, 1](1);
    o[3] = i32(widen(x[0]));             // ACC = T = i8: wraps
    o[4] = widen[ACC = i32](x[0]);       // 200
}
"""


def test_dependent_default_per_launch(target):
    m = kc.compile(SRC, target=target)
    o = np.zeros(2, np.int32)
    for given, want in [({}, [3, 6]), ({"A": 5}, [5, 10]), ({"A": -7}, [-7, -14]), ({"A": 5, "B": 1}, [5, 1])]:
        m.k[1, 1](o, **given)
        assert o.tolist() == want, given


@pytest.mark.parametrize("values, dtype, acc, acc_dtype", [
    ([100, 100], np.int8, None, np.int8), ([100, 100], np.int8, "i32", np.int32),
    ([0.5, 1e8], np.float32, None, np.float32), ([300, 100], np.uint16, "u8", np.uint8)])
def test_type_default_from_inferred_parameter(target, values, dtype, acc, acc_dtype):
    """ACC = T with T inferred from the array: i8 arithmetic wraps where i32 does not."""
    m = kc.compile(SRC, target=target)
    x = np.array(values, dtype)
    o = np.zeros(1, np.float64)
    given = {"ACC": acc} if acc else {}
    m.acc[1, 1](x, o, **given)
    assert o[0] == float(x.astype(acc_dtype).sum(dtype=acc_dtype))
    shown = {np.int8: "i8", np.int32: "i32", np.float32: "f32", np.uint8: "u8"}[acc_dtype]
    assert m.acc.specialize(x, o, **given).meta["comptime"]["ACC"] == {"type": shown}


def test_fn_defaults_per_call(target):
    m = kc.compile(SRC, target=target)
    o = np.zeros(5, np.int32)
    m.calls[1, 1](o, np.array([100], np.int8))
    assert o.tolist() == [6, 10, 1, -56, 200]  # 100 + 100 in i8 wraps


def test_default_that_does_not_fit_this_specialisation():
    m = kc.compile(SRC, target="cpu")
    o = np.zeros(1, np.int32)
    m.narrow[1, 1](o, A=2)
    assert o[0] == 200
    with pytest.raises(TypeError, match=r"default 500 of 'B' does not fit in u8 \(with A = 5\) at <string>:10:35"):
        m.narrow[1, 1](o, A=5)


def test_cli_param_builds_the_dependent_specialisation(tmp_path):
    f = tmp_path / "d.kc"
    f.write_text(SRC)
    r = kc_cli("compile", f, "--target", "cpu", "--kernel", "k", "-P", "A=5", "--emit", "llvm", "-o", "-")
    assert r.returncode == 0, r.stderr
    assert "k__A_5__B_10(" in r.stdout and "B_6" not in r.stdout
    r = kc_cli("compile", f, "--target", "cpu", "--kernel", "acc", "-P", "T=i16", "--emit", "llvm", "-o", "-")
    assert r.returncode == 0, r.stderr
    assert "acc__T_i16__ACC_i16(" in r.stdout
    r = kc_cli("compile", f, "--target", "cpu", "--kernel", "narrow", "-P", "A=5", "-o", tmp_path / "n.o")
    assert r.returncode == 1
    assert f"{f}:10:35: error: default 500 of 'B' does not fit in u8 (with A = 5)" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "n.o").exists()
    assert kc_cli("check", f).returncode == 0


def test_load_time_checks_still_apply():
    """A default may not use a later parameter."""
    with pytest.raises(kc.CompileError, match=r"<string>:1:19: error: default of compile-time parameter "
                                              r"'A': 'B' is not known here"):
        kc.compile("kernel k[A: i32 = B, B: i32 = 1](o: ptr<i32>) {}", target="cpu")
    # one that uses a parameter without a default is checked when that parameter is bound
    with pytest.raises(TypeError, match=r"default of compile-time parameter 'B' is f32; expected int "
                                        r"\(with T = f32\) at <string>:1:28"):
        kc.compile("kernel k[T: type, B: i32 = T](o: ptr<i32>) {}", target="cpu").k.specialize(
            np.zeros(1, np.int32), T="f32")


@needs_ptxas
def test_dependent_default_ptx_assembles():
    ptx = emit(Source(SRC, "<d>", "."), "asm", "nvptx", "sm_90a", kernel="k", comptime={"A": 5})
    assert ".entry k__A_5__B_10(" in ptx
    ptxas(ptx)


def test_emit_comptime_keyword_and_its_deprecated_older_name():
    """``emit(comptime=)`` is the keyword's name, as in ``kc.compile`` and a launch (issue 21: one
    name, one meaning); ``params=`` still works with a DeprecationWarning pointing at the caller."""
    src = Source(SRC, "<d>", ".")
    ir = emit(src, "ir", "cpu", kernel="k", comptime={"A": 5})
    assert "k__A_5__B_10" in ir
    with pytest.warns(DeprecationWarning, match=r"emit\(params=\.\.\.\) is deprecated") as w:
        assert emit(src, "ir", "cpu", kernel="k", params={"A": 5}) == ir
    assert w[0].filename == __file__
    with pytest.raises(TypeError, match="comptime= or params=, not both"):
        emit(src, "ir", "cpu", kernel="k", comptime={"A": 5}, params={"A": 5})
    with pytest.warns(DeprecationWarning, match=r"compile\(params=\.\.\.\) is deprecated") as w:
        kc.compile(SRC, target="cpu", params={"A": 5})
    assert w[0].filename == __file__
