"""A backend adds a builtin to the kernel language (issue 21): the toy target of the test folder
(tests/toy_backend) contributes ``toy_dot`` (a kcompiler.ir.builtin_surface record, builtins.py) and
the target intrinsic it emits, ``toy.dot4`` (intrinsics.py, lowered by lower.py), with no file of the
package edited. A kernel using it compiles and runs on the toy's toy2 chip (against numpy), is still
checked inside a dead ``comptime if`` branch on other targets, and is a located error where it is
compiled for a target without it; the name leaves with the backend. The built-in backends' builtins
(wgmma, mfma...) come the same way and never shadow a name of the language."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.backends.registry import register_backend, unregister_backend
from kcompiler.frontend import builtins as B
from kcompiler.ir import builtin_surface
from kcompiler.pipeline import compile_source_to
from tests import toy_backend

# o[i] = a[i] . b[i] where the chip has toy_dot, else -1 (toy_dot is still checked there).
DOT = """
kernel dot(a: ptr<vec<f32, 4>>, b: ptr<vec<f32, 4>>, o: ptr<f32>) {
    let i = thread_id.x;
    comptime if target.has("toy2") { o[i] = toy_dot(a[i], b[i]); } else { o[i] = -1.0; }
}
"""
ALWAYS = """kernel dot(a: ptr<vec<f32, 4>>, o: ptr<f32>) {
    o[0] = toy_dot(a[0], a[1]);
}
"""


@pytest.fixture
def toy():
    register_backend(toy_backend.BACKEND)
    yield toy_backend.BACKEND
    unregister_backend("toy")


def _error(src: str, **kw) -> str:
    with pytest.raises(kc.CompileError) as e:
        kc.compile(src, **kw)
    return str(e.value)


def test_toy_builtin_compiles_and_runs_on_the_toy(toy):
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((2, 8, 4), dtype=np.float32)
    o = np.zeros(8, np.float32)
    mod = kc.compile(DOT, target="toy", arch="toy2")
    mod.dot[1, 8](a, b, o)
    want = a[:, 0] * b[:, 0] + a[:, 1] * b[:, 1] + a[:, 2] * b[:, 2] + a[:, 3] * b[:, 3]  # lane order
    np.testing.assert_array_equal(o, want)
    assert "intrinsic toy.dot4 %" in compile_source_to(DOT, stage="ir", target="toy", arch="toy2")


def test_toy_builtin_in_a_dead_branch_elsewhere(toy):
    o = np.zeros(4, np.float32)
    a = np.ones((4, 4), np.float32)
    for target, arch in (("cpu", None), ("toy", "toy1")):
        kc.compile(DOT, target=target, arch=arch).dot[1, 4](a, a, o)
        assert o.tolist() == [-1.0] * 4
    assert "toy" not in compile_source_to(DOT, stage="ir", target="nvptx", arch="sm_80")  # checked, not emitted


def test_toy_builtin_is_a_located_error_without_the_feature(toy):
    msg = _error(ALWAYS, target="cpu")
    assert "<string>:2:12: error: toy_dot is not available on this target (cpu " in msg
    assert "it is the toy dot product (Toy toy2)" in msg and 'target.has("toy2")' in msg
    assert "<string>:2:12: error: toy_dot is not available on this target (toy toy1)" in _error(
        ALWAYS, target="toy", arch="toy1")
    msg = _error(ALWAYS.replace("a[1]", "1.0"), target="toy", arch="toy2")
    assert "<string>:2:26: error: toy_dot multiplies vec<f32, 4>, found f32" in msg and "toy_dot(a, b): a . b" in msg
    msg = _error(ALWAYS.replace("a[1]", "a[1], a[2]"), target="toy", arch="toy2")
    assert "toy_dot takes 2 arguments, found 3" in msg and "toy_dot(a: vec<f32, 4>" in msg  # the record's arity


def test_toy_builtin_leaves_with_its_backend():
    assert builtin_surface.lookup("toy_dot") is None
    # a source of its own: the compile cache's keys do not name the plug-ins whose builtins a check saw
    assert "unknown name 'toy_dot'" in _error(DOT + "// without the toy\n", target="cpu")
    register_backend(toy_backend.BACKEND)
    try:
        assert builtin_surface.lookup("toy_dot") is toy_backend.builtins.BUILTINS[0]
        assert "toy_dot" in B.all_names()
    finally:
        unregister_backend("toy")
    assert builtin_surface.lookup("toy_dot") is None and "toy_dot" not in B.all_names()


def test_vendor_builtins_come_from_their_backends():
    names = set(builtin_surface.builtins())
    assert {"wgmma", "tma_load", "mbarrier_wait", "mma_sync", "ldmatrix", "cp_async", "mfma"} <= names
    assert not names & set(B.FUNCTIONS) and not names & B.ALL_NAMES  # the language's names win
    assert builtin_surface.lookup("wgmma").handler().__module__ == "kcompiler.backends.nvptx.builtins_hopper"
    assert builtin_surface.lookup("mfma").handler().__module__ == "kcompiler.backends.amdgcn.builtins"
    # a misspelt vendor name is suggested from the backends' names
    assert "did you mean 'wgmma_wait'" in _error("kernel k() { wgmma_wiat[0](); }", target="cpu")


def test_surface_record_is_checked():
    with pytest.raises(ValueError, match="brackets is one of none, optional, required"):
        builtin_surface.SurfaceBuiltin("x", lambda c: None, brackets="yes")
    with pytest.raises(ValueError, match="takes 2 to 1 arguments"):
        builtin_surface.SurfaceBuiltin("x", lambda c: None, 2, 1)
    r = builtin_surface.SurfaceBuiltin("x", "tests.toy_backend.builtins:check_dot")
    assert r.handler() is toy_backend.builtins.check_dot  # an import path, loaded at first use


def test_frontend_messages_name_no_vendor_feature():
    """The frontend's examples of a feature name are neutral (the features are the backends')."""
    msg = _error("kernel k(o: ptr<i32>) { comptime if target.has(1) { o[0] = 1; } }", target="cpu")
    assert 'target.has takes a string: target.has("feature")' in msg
    msg = _error("kernel k(o: ptr<i32>) { comptime if target.has() { o[0] = 1; } }", target="cpu")
    assert "target.has takes one argument: a feature name" in msg and 'target.has("feature")' in msg
