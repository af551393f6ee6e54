"""The Hopper prefill of std.attention (stdlib/attention_sm90.kc) and the builtins it added: wgmma with
A from registers, TMA copies of more than two dimensions.

On every machine (CI): wgmma with a register A fragment against numpy in float64 on the CPU target's
emulation (``emulate_wgmma``), its PTX (``{a0, a1, a2, a3}`` operands, no imm-trans-a) assembled by
ptxas for sm_90a; the whole kernel (producer warpgroup, TMA into an mbarrier ring, two consumer
warpgroups, online softmax, P from registers) through ops.attention on the emulation, against
test_attention.py's float64 reference and bounds on fresh random inputs of odd shapes (causal, GQA,
Sq != Sk, both layouts); the kernel's PTX assembling for sm_90a without spills or serialised wgmma.

On an H100 (marked gpu): ops.attention's Hopper path against torch's SDPA in float64, on many shapes,
odd lengths, causal, GQA, D 64 and 128, with the output poisoned first.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.pipeline import compile_source_to
from kcompiler.runtime.tensormap import tensor_map

from .ptxas_util import needs_ptxas, ptxas

RNG = np.random.default_rng()

# D (64 x 128) = A (64 x 64, in registers) B (64 x 128, N-major by two 4-D TMA boxes of 64 columns)
REG_A = """
kernel k(ta: ptr<bf16>, tb: tensor_map, out: ptr<f32>) {
    launch_bounds(128, 1);
    let smem = dynamic_shared[bf16]();
    let bar = bitcast[ptr<u64, shared>](smem + 64 * 128);
    if thread_id.x == 0 { mbarrier_init(bar, 1); fence_proxy_async(); }
    barrier();
    if thread_id.x == 0 {
        mbarrier_arrive_expect_tx(bar, 64 * 128 * 2);
        tma_load(smem, tb, bar, 0, 0, 0, 0);
        tma_load(smem + 64 * 64, tb, bar, 64, 0, 0, 0);
    }
    mbarrier_wait(bar, 0);
    let t = thread_id.x;
    let w = t / 32;
    let g = t % 32 / 4;
    let q = t % 4;
    var acc = vec<f32, 64>(0.0);
    wgmma_fence();
    for kk in comptime range(0, 4) {
        var a = vec<bf16, 8>(bf16(0.0));
        let r = 16 * w + g;
        let c = 16 * kk + 2 * q;
        a[0] = ta[r * 64 + c];
        a[1] = ta[r * 64 + c + 1];
        a[2] = ta[(r + 8) * 64 + c];
        a[3] = ta[(r + 8) * 64 + c + 1];
        a[4] = ta[r * 64 + c + 8];
        a[5] = ta[r * 64 + c + 9];
        a[6] = ta[(r + 8) * 64 + c + 8];
        a[7] = ta[(r + 8) * 64 + c + 9];
        let db = wgmma_desc(smem, swizzle = 128, lbo = 64 * 128, sbo = 1024);
        acc = wgmma[bf16](a, db + u64(128 * kk), acc, trans_b = true);
    }
    wgmma_commit();
    wgmma_wait[0]();
    for j in comptime range(0, 16) {
        for r in comptime range(0, 4) {
            out[(16 * w + g + 8 * (r / 2)) * 128 + 8 * j + 2 * q + r % 2] = acc[4 * j + r];
        }
    }
}
"""


def test_wgmma_register_a_emulated():
    """wgmma with A from registers (the fragments gathered over each quad) and an N-major B that 4-D
    TMA boxes wrote, against numpy in float64 (f32 accumulation of exact products)."""
    a = RNG.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    b = RNG.standard_normal((64, 128)).astype(ml_dtypes.bfloat16)
    mod = kc.compile(REG_A, target="cpu", target_options={"emulate_wgmma": True})
    out = np.full((64, 128), np.nan, np.float32)
    mod.k[1, 128](a, tensor_map(b.reshape(1, 1, 64, 128), (1, 1, 64, 64)), out, shared=64 * 128 * 2 + 16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert np.abs(out - a64 @ b64).max() <= 4 * 64 * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64)).max()


@needs_ptxas
def test_wgmma_register_a_ptx(tmp_path):
    """The register form's PTX: four .b32 A operands, then the B descriptor, scale-d and three
    immediates (no imm-trans-a); ptxas assembles it for sm_90a."""
    ptx = compile_source_to(REG_A, "k.kc", "asm", "nvptx", "sm_90a")
    line = next(x for x in ptx.splitlines() if "wgmma.mma_async" in x)
    assert "m64n128k16.f32.bf16.bf16" in line
    assert line.rstrip().endswith("p, 1, 1, 1;") and line.count("{") == 2, line
    ptxas(ptx, "sm_90a")
