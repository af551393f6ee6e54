"""check()'s memo of clean programs (kcompiler/frontend/lowering.py, ``_CHECKED``): a program
checked without an error for a target is not checked again in the process, for that target as the
frontend sees it; a program with an error is checked, and reported, at every call."""
from __future__ import annotations

import pytest

from kcompiler.backends import get_target
from kcompiler.diagnostics import CompileError
from kcompiler.frontend import lowering as L
from kcompiler.pipeline import CompileOptions, Source, emit, load

# f's body type-checks only where the target has "release": check() type-checks every device
# function without compile-time parameters, called or not, so the feature decides whether the
# file compiles.
PROGRAM = """
fn f() -> i32 {
    comptime if target.has("release") { return 1; } else { return 1.5; }
}
kernel k(x: ptr<f32>) { x[0] = 1.0; }
"""

CLEAN = """
fn g(x: f32) -> f32 { return x * 2.0; }
kernel k(x: ptr<f32>) { x[0] = g(x[0]); }
"""


def _count_checks(monkeypatch) -> list[int]:
    """How many times check() type-checks a program to its end (its last step: the nesting depth of
    what it lowered, which only check() asks of lowering.py's)."""
    n = [0]
    real = L.check_region_depth

    def counting(module):
        n[0] += 1
        return real(module)
    monkeypatch.setattr(L, "check_region_depth", counting)
    return n


def test_clean_program_is_checked_once_per_target(monkeypatch, tmp_path):
    monkeypatch.setattr(L, "_CHECKED", type(L._CHECKED)())
    n = _count_checks(monkeypatch)
    path = tmp_path / "clean.kc"
    src = Source(CLEAN, str(path), str(tmp_path))
    for _ in range(3):
        emit(src, "ir", "cpu")
    # the first compile may load a backend's intrinsics as it lowers, which the key holds: at most
    # one more check before the memo answers
    assert n[0] <= 2
    before = n[0]
    emit(src, "ir", "cpu")
    emit(src, "ir", "cpu")
    assert n[0] == before
    emit(src, "ir", "nvptx", "sm_90")  # another target: checked for it
    assert n[0] > before
    # another text under the same path is another program
    before = n[0]
    emit(Source(CLEAN.replace("2.0", "3.0"), str(path), str(tmp_path)), "ir", "cpu")
    assert n[0] == before + 1


def test_errors_are_reported_at_every_call_and_features_are_part_of_the_key(tmp_path):
    src = Source(PROGRAM, str(tmp_path / "p.kc"), str(tmp_path))
    # with release on, f type-checks: the compile succeeds (and is remembered as clean)
    release = CompileOptions(release=True)
    for _ in range(2):
        assert "k" in emit(src, "ir", "cpu", options=release)
    # the same text for the same target without the feature: the error, every time
    for _ in range(3):
        with pytest.raises(CompileError) as e:
            emit(src, "ir", "cpu")
        assert "p.kc:3:" in str(e.value), str(e.value)
    with pytest.raises(CompileError):
        L.check(load(src, keep_going=True), get_target("cpu"))


def test_memo_is_bounded():
    assert L._CHECKED_KEPT >= 8
    target = get_target("cpu")
    for i in range(L._CHECKED_KEPT + 5):
        L.check(load(Source(CLEAN.replace("2.0", f"{i}.0"), f"<bound {i}>", "."), keep_going=True), target)
    assert len(L._CHECKED) <= L._CHECKED_KEPT


@pytest.mark.parametrize("target, arch", [("nvptx", "sm_90"), ("cpu", None)])
def test_a_module_loaded_while_checking(target, arch):
    """check() type-checks every device function, called or not; a float % in one loads
    stdlib/libm_rem.kc (its fmod) in the middle of that walk over the program's modules. That raised
    "dictionary changed size during iteration", an internal compiler error, on a valid program (the
    fuzzer, 2026-11-29); it compiles, and a call of the function computes fmod."""
    src = ("fn w(x: f32) -> f32 { return x % 2.0; }\n"
           "kernel k(out: ptr<f32>) {\n    out[0] = 1.0;\n}\n")
    assert emit(Source(src, "fmod_unused.kc"), "llvm", target, arch)
    if target == "cpu":
        import numpy as np

        import kcompiler as kc
        m = kc.compile(src.replace("out[0] = 1.0;", "out[0] = w(out[0]);"), target="cpu")
        out = np.array([7.5], np.float32)
        m.k[1, 1](out)
        assert out[0] == np.float32(np.fmod(7.5, 2.0))
