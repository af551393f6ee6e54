"""atomic_add on f16, bf16, vec<f16, 2> and vec<bf16, 2>: PTX's atom.add.noftz.{f16,bf16,f16x2,bf16x2}
where the arch has them (LLVM's compare-and-swap loop where it does not: bf16 before sm_90), AMD's
global_atomic_pk_add_{f16,bf16} on gfx942 (compare-and-swap loops on gfx1100 and for scalars), host
compare-and-swap loops on the CPU target. Run on every target present: many threads adding into few
slots, against exact integer sums (a lost update shows) and float64 sums of random values within the
rounding error of the adds."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to

from ..ptxas_util import ptxas

SRC = """
kernel g(p: ptr<T>, x: ptr<T>, slots: i32, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n { atomic_add(p + i % slots, x[i]); }
}
kernel s(p: ptr<T>, x: ptr<T>, slots: i32) {
    shared acc: [T; 8];
    let t = thread_id.x;
    if t < 8 { acc[t] = x[0] - x[0]; }
    barrier();
    atomic_add(acc + t % slots, x[block_id.x * block_dim.x + t], scope = "block");
    barrier();
    if t < slots { atomic_add(p + t, acc[t]); }
}
"""

#: (kernel type, numpy element dtype, lanes, unit roundoff, largest exactly summed integer).
TYPES = [("f16", np.float16, 1, 2.0 ** -11, 2048), ("bf16", ml_dtypes.bfloat16, 1, 2.0 ** -8, 256),
         ("vec<f16, 2>", np.float16, 2, 2.0 ** -11, 2048), ("vec<bf16, 2>", ml_dtypes.bfloat16, 2, 2.0 ** -8, 256)]


def _run(target, t, dt, lanes, x, slots, kernel="g"):
    m = kc.compile(SRC.replace("T", t), target=target, path="atomics.kc")
    n = x.shape[0]
    p = np.zeros((slots, lanes) if lanes > 1 else slots, dt)
    if kernel == "g":
        m.g[(n + 127) // 128, 128](p, x, slots, n)
    else:
        m.s[n // 128, 128](p, x, slots)
    return p.astype(np.float64).reshape(slots, lanes)


@pytest.mark.parametrize("t,dt,lanes,u,exact", TYPES, ids=[x[0] for x in TYPES])
@pytest.mark.parametrize("kernel", ["g", "s"])
def test_integer_sums_are_exact(target, t, dt, lanes, u, exact, kernel):
    """Each slot receives ``exact`` adds of 1 (and lane 1 of 0.5): every partial sum is representable,
    so any lost or doubled update changes the result."""
    slots = 4
    n = slots * exact
    x = np.ones((n, lanes) if lanes > 1 else n, dt)
    if lanes > 1:
        x[:, 1] = 0.5
    p = _run(target, t, dt, lanes, x, slots, kernel)
    want = np.full((slots, lanes), float(exact))
    if lanes > 1:
        want[:, 1] = exact / 2
    np.testing.assert_array_equal(p, want)


@pytest.mark.parametrize("t,dt,lanes,u,exact", TYPES, ids=[x[0] for x in TYPES])
def test_random_sums_within_the_rounding_of_the_adds(target, t, dt, lanes, u, exact):
    """Positive random values: every partial sum is at most the final one, so the k adds into a slot
    are off by at most k * u * |sum| (one rounding each) plus the inputs' own rounding (exact here:
    the float64 reference sums the rounded inputs)."""
    rng = np.random.default_rng(7)
    slots, n = 3, 3000
    x = rng.uniform(0.01, 1.0, (n, lanes) if lanes > 1 else n).astype(dt)
    p = _run(target, t, dt, lanes, x, slots)
    x64 = x.astype(np.float64).reshape(n, lanes)
    want = np.stack([x64[k::slots].sum(axis=0) for k in range(slots)])
    adds = np.array([len(range(k, n, slots)) for k in range(slots)])[:, None]
    assert (np.abs(p - want) <= adds * u * want).all(), (p, want)


ADD = """
kernel k(h: ptr<f16>, b: ptr<bf16>, h2: ptr<vec<f16, 2>>, b2: ptr<vec<bf16, 2>>) {
    let i = thread_id.x;
    atomic_add(h + i, h[32]);
    atomic_add(b + i, b[32]);
    atomic_add(h2 + i, h2[32]);
    atomic_add(b2 + i, b2[32], order = "release", scope = "block");
}
"""


@pytest.mark.parametrize("arch,want,cas", [
    ("sm_80", ["atom.global.add.noftz.f16", "atom.relaxed.gpu.global.add.noftz.f16x2"], True),  # bf16: CAS
    ("sm_90a", ["atom.global.add.noftz.f16", "atom.global.add.noftz.bf16",
                "atom.relaxed.gpu.global.add.noftz.f16x2", "atom.release.cta.global.add.noftz.bf16x2"], False)])
def test_ptx_instructions_and_ptxas(arch, want, cas):
    ptx = compile_source_to(ADD, "a.kc", "asm", "nvptx", arch)
    for ins in want:
        assert ins in ptx, ins
    assert ("atom.relaxed.gpu.global.cas.b32" in ptx) == cas
    ptxas(ptx, arch)


@pytest.mark.parametrize("arch,packed", [("gfx942", True), ("gfx1100", False)])
def test_amdgcn_packed_adds_or_cas_loops(arch, packed):
    """gfx942 has global_atomic_pk_add_f16/bf16 (what LLVM 22 selects for atomicrmw fadd <2 x half>);
    gfx1100 (RDNA3) has no 16-bit float atomics: compare-and-swap loops. Scalars are CAS loops on both."""
    text = compile_source_to(ADD, "a.kc", "asm", "amdgcn", arch)
    assert ("global_atomic_pk_add_f16" in text and "global_atomic_pk_add_bf16" in text) == packed
    assert re.search(r"global_atomic_cmpswap(_b32)?\b", text)


@pytest.mark.parametrize("src,msg", [
    ("atomic_min(h + 1, h[0])", "atomic_min works on 32- and 64-bit integers and floats, found ptr<f16>"),
    ("atomic_add(v + 1, v[0])", "atomic_add works on 32- and 64-bit integers and floats, found ptr<vec<f16, 4>>"),
    ("atomic_exch(b2 + 1, b2[0])", "atomic_exch works on 32- and 64-bit"),
])
def test_other_16_bit_atomics_are_located_errors(src, msg):
    text = (f"kernel k(h: ptr<f16>, v: ptr<vec<f16, 4>>, b2: ptr<vec<bf16, 2>>) {{\n    let r = {src};\n}}\n")
    with pytest.raises(CompileError) as e:
        compile_source_to(text, "a.kc", "llvm", "cpu")
    assert "a.kc:2:" in str(e.value) and msg in str(e.value), str(e.value)
