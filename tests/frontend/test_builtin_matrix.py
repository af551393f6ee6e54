"""Every builtin on every scalar and vector type, on every target and arch (issue 19): each case
compiles or is rejected with a located error; none aborts the process (this test compiles in its own
process, so an LLVM abort fails it loudly). The cases are tests/builtin_matrix.py's; NVIDIA's PTX is
assembled by ptxas. To find the cases that abort without dying: ``python -m tests.builtin_matrix``.

By default every target compiles :func:`builtin_matrix.sample` (every builtin on every scalar type,
one vector length per builtin and element type, a share of the conversion and bitcast pairs: about
2,970 of 9,305 cases, 5-21 s a target, 90 s for all eight on a loaded 2-core machine); ``pytest -m slow
tests/test_builtin_matrix.py`` (or ``KC_FULL_SWEEPS=1``) compiles every case. An LLVM abort in either
kills pytest itself (faulthandler names the test), which CI reports as a failure."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler.backends  # noqa: F401 (installs the provider of the backends' builtins)
from kcompiler.frontend.builtins import FUNCTIONS
from kcompiler.ir import builtin_surface

from .. import builtin_matrix as M
from ..conftest import _full_sweeps
from ..ptxas_util import ptxas


@pytest.fixture(scope="module")
def matrix(request):
    """(every case, the indices this run compiles, their loaded Program): by default
    :func:`builtin_matrix.sample` (every builtin on every scalar type, sampled vector lengths and
    conversion pairs); ``-m slow`` or ``KC_FULL_SWEEPS=1``: all of them."""
    cs = M.cases()
    idxs = list(range(len(cs))) if _full_sweeps(request.config) else M.sample(cs)
    return cs, idxs, M.load_matrix(idxs)


@pytest.fixture(scope="module")
def outcomes():
    return {}


def test_every_builtin_is_in_the_matrix():
    """The language's builtins and every backend's (wgmma, mfma...)."""
    vendor = set(builtin_surface.builtins())
    assert {"wgmma", "mma_sync", "mfma"} <= vendor
    missing = (set(FUNCTIONS) | vendor) - M.covered_builtins() - M.UNTYPED
    assert not missing, f"add these builtins to tests/builtin_matrix.py (or to UNTYPED): {sorted(missing)}"


# one of the eight targets runs by default (a deterministic sample; CI time: 30-100 s a target on CI's
# cores), on the sample of cases; -m slow: every target and case
@pytest.mark.slow(sample=1)
@pytest.mark.parametrize("target,arch", M.TARGETS, ids=[f"{t}-{a or 'host'}" for t, a in M.TARGETS])
def test_builtin_matrix(matrix, outcomes, target, arch):
    cs, idxs, program = matrix
    o = M.run_matrix(target, arch, idxs, program=program)
    outcomes[(target, arch)] = o
    assert not o.failed, "\n".join(f"{cs[i].builtin} {cs[i].type}: {e}" for i, e in o.failed.items())
    assert sorted(o.compiled + list(o.rejected)) == idxs
    # a rejection by the backend (a located CompileError too) names the target
    late = {i: m for i, (stage, m) in o.rejected.items() if stage == "backend" and target not in m}
    assert not late, "\n".join(f"{cs[i].builtin} {cs[i].type}: {m}" for i, m in list(late.items())[:20])
    # the matrix means something: float math compiles everywhere, integer math nowhere
    names = {(cs[i].builtin, M._elem(cs[i].type), cs[i].type.startswith("vec<")) for i in o.compiled}
    assert {("sqrt", "f32", False), ("rsqrt", "bf16", False), ("rcp", "bf16", True), ("fma", "f16", True),
            ("atomic_add", "f32", False), ("shuffle", "f16", False), ("max", "f16", True),
            ("convert", "f32", False), ("popcount", "u64", False), ("byte_perm", "u32", False),
            ("isnan", "f8e4m3", False), ("signbit", "bf16", False), ("mulhi", "i64", False),
            ("atomic_add", "f16", False), ("atomic_add", "bf16", False)} <= names
    assert ("popcount", "f32", False) not in names and ("isnan", "i32", False) not in names
    assert ("bswap", "u8", False) not in names and ("byte_perm", "u16", False) not in names
    assert ("sqrt", "i32", False) not in names and ("atomic_add", "f32", True) not in names
    if target == "nvptx":
        for asm in o.asm:
            ptxas(asm, arch)


def test_target_dependent_rejections_name_the_target(outcomes):
    """A case one target takes and another rejects is rejected with a message that names the
    builtin (or the operation) and the target or its arch."""
    if len(outcomes) < len(M.TARGETS):
        pytest.skip("needs every target's outcome (run the whole file)")
    cs = M.cases()
    taken = set().union(*(set(o.compiled) for o in outcomes.values()))
    bad = []
    for (target, arch), o in outcomes.items():
        for i, (_, msg) in o.rejected.items():
            if i in taken and target not in msg and (arch or "cpu") not in msg:
                bad.append(f"{target} {arch}: {cs[i].builtin} {cs[i].type}: {msg}")
    assert not bad, "\n".join(bad[:30])


@pytest.mark.parametrize("fn,ref", [("rsqrt", lambda x: 1 / np.sqrt(x)), ("rcp", lambda x: 1 / x),
                                    ("fast_rcp_normal", lambda x: 1 / x), ("fast_rsqrt_normal", lambda x: 1 / np.sqrt(x)),
                                    ("tanh", np.tanh)])
def test_bf16_math_on_the_cpu(fn, ref):
    """The CPU target computes the bf16 forms the matrix compiles (in f32, rounded once)."""
    import ml_dtypes

    import kcompiler as kc

    mod = kc.compile(f"kernel k(x: ptr<bf16>, y: ptr<bf16>, n: i32) {{ let i = thread_id.x; "
                     f"if i < n {{ store(x + 4 * i, {fn}(load[vec<bf16, 4>](x + 4 * i))); y[i] = {fn}(y[i]); }} }}",
                     target="cpu")
    xs = np.linspace(0.25, 7.5, 64).astype(ml_dtypes.bfloat16)
    x, y = xs.copy(), xs.copy()
    mod.k[1, 64](x, y, 16)
    want = ref(xs.astype(np.float64)).astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_allclose(x.astype(np.float64), want, rtol=2 ** -7)
    np.testing.assert_allclose(y[:16].astype(np.float64), want[:16], rtol=2 ** -7)
    np.testing.assert_array_equal(y[16:], xs[16:])


@pytest.mark.parametrize("target,arch", [("amdgcn", "gfx1100"), ("amdgcn", "gfx942"), ("nvptx", "sm_80"), ("cpu", None)])
def test_bf16_remainder_compiles(target, arch):
    """bf16 % bf16 (LLVM: "no libcall available for frem", a process exit) is an f32 frem, exact."""
    from kcompiler.pipeline import compile_source_to

    asm = compile_source_to("kernel k(p: ptr<vec<bf16, 3>>, q: ptr<bf16>) { p[0] = p[1] % p[2]; q[0] = q[1] % q[2]; }",
                            target=target, arch=arch)
    if target == "nvptx":
        ptxas(asm, arch)


def test_bf16_remainder_on_the_cpu():
    import ml_dtypes

    import kcompiler as kc

    mod = kc.compile("kernel k(x: ptr<bf16>, y: ptr<bf16>, n: i32) { let i = thread_id.x; "
                     "if i < n { store(x + 4 * i, load[vec<bf16, 4>](x + 4 * i) % load[vec<bf16, 4>](y + 4 * i)); } }",
                     target="cpu")
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(64) * 100).astype(ml_dtypes.bfloat16)
    y = (rng.standard_normal(64) * 3 + 0.1).astype(ml_dtypes.bfloat16)
    want = np.fmod(x.astype(np.float64), y.astype(np.float64))
    out = x.copy()
    mod.k[1, 16](out, y, 16)
    np.testing.assert_array_equal(out.astype(np.float64), want)


def test_amd_widens_bf16_reciprocals_to_f32():
    """AMD has no bf16 v_rsq/v_rcp: fast_rsqrt and fast_rcp of bf16 are v_rsq_f32/v_rcp_f32 between conversions."""
    from kcompiler.pipeline import compile_source_to

    for arch in ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"):
        llvm = compile_source_to("kernel k(p: ptr<vec<bf16, 3>>) { p[0] = fast_rsqrt(p[1]); p[2] = fast_rcp(p[3]); }",
                                 stage="llvm", target="amdgcn", arch=arch)
        assert "llvm.amdgcn.rsq.f32" in llvm and "llvm.amdgcn.rcp.f32" in llvm, arch
        assert "fptrunc" in llvm and "rsq.bf16" not in llvm, arch


_F64_SRC = """kernel k(p: ptr<f64>, q: ptr<vec<f64, 2>>) {
    p[0] = fast_sin(p[1]);
    q[0] = fast_exp2(q[1]);
    p[2] = fast_rsqrt(p[3]);
}
"""


@pytest.mark.parametrize("target,arch,rejected", [
    ("amdgcn", "gfx942", ["fast_sin", "fast_exp2"]), ("amdgcn", "gfx1100", ["fast_sin", "fast_exp2"]),
    ("nvptx", "sm_90a", ["fast_sin", "fast_exp2", "fast_rsqrt"]),
    ("cpu", "host", ["fast_sin", "fast_exp2", "fast_rsqrt"])])
def test_f64_approximations_are_rejected_by_the_type_rules(tmp_path, target, arch, rejected):
    """The GPUs' approximate builtins have no f64 form (nor on the CPU target, so that what it
    accepts compiles for NVIDIA): ``kc check`` (no backend) reports each at its call, naming the
    builtin, the type and the target, with the accurate version as the way out."""
    import subprocess
    import sys

    f = tmp_path / "f64.kc"
    f.write_text(_F64_SRC)
    r = subprocess.run([sys.executable, "-m", "kcompiler.cli", "check", "--target", target, "--arch", arch, str(f)],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "Traceback" not in out
    lines = {"fast_sin": 2, "fast_exp2": 3, "fast_rsqrt": 4}
    for fn in rejected:
        assert f"{f}:{lines[fn]}:12: error: {fn} on f64 is not available on {target} (" in out, out
    assert "use the accurate sin(x)" in out and f"{len(rejected)} errors" in out
    if "fast_rsqrt" not in rejected:
        assert ":4:" not in out


def test_f64_math_compiles_on_the_cpu_and_through_std_math_on_amd():
    """What the rejection points to works: the accurate builtins on f64 (std.math's: sin, cos, tanh,
    rsqrt, rcp) on the CPU target, within 2 ulp of f64, and std.math's f64 sin for AMD."""
    import kcompiler as kc
    from kcompiler.pipeline import compile_source_to

    mod = kc.compile("""kernel k(p: ptr<f64>, q: ptr<vec<f64, 2>>) {
    p[0] = sin(p[1]); p[2] = rsqrt(p[3]); p[4] = cos(p[5]); p[6] = tanh(p[7]); p[8] = rcp(p[9]);
    q[0] = cos(q[1]);
}""", target="cpu")
    p = np.array([0, 0.7, 0, 2.0, 0, -1.3, 0, 0.4, 0, 10.0])
    q = np.array([0, 0, 1.5, -2.25])
    mod.k[1, 1](p, q)
    np.testing.assert_allclose(p[[0, 2, 4, 6, 8]], [np.sin(0.7), 0.5 ** 0.5, np.cos(-1.3), np.tanh(0.4), 0.1],
                               rtol=5e-16)
    np.testing.assert_allclose(q[:2], np.cos([1.5, -2.25]), rtol=5e-16)
    asm = compile_source_to("kernel k(p: ptr<f64>) { p[0] = sin(p[1]); }",
                            target="amdgcn", arch="gfx942")
    assert "v_fma_f64" in asm
