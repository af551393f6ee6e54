"""The TMA store builtins (``tma_store``, ``tma_store_commit``, ``tma_store_wait``; backends/nvptx/tma.py):
their PTX (FileCheck) assembled by ptxas for sm_90a, the located errors for misuse and for targets
without TMA, and the CPU target's emulation (backends/cpu/hopper.py) against numpy: the box written
where it lies inside the tensor and nothing else, the shared-memory source read through the map's
128-byte swizzle (its layout written out independently here). std.matmul_sm90's TMA store epilogue,
built on them, is tested in tests/ops/test_matmul_sm90.py."""
from __future__ import annotations

import pytest

from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to

from ...filecheck_util import filecheck
from ...located_util import assert_body_error
from ...ptxas_util import needs_ptxas, ptxas

# One block of 128 threads: the 64 x 64 bf16 box (128-byte rows) written into shared memory at its
# 128-byte-swizzled place (16-byte chunk j of row r at chunk j ^ (r % 8)), each element the value
# base + 64 r + c, then stored at (x, y) = (c0, c1) of the map's tensor.
STORE = """
kernel k(map: tensor_map, c0: i32, c1: i32, base: f32) {
    let smem = dynamic_shared[bf16]();
    for e in range(thread_id.x, 64 * 64, 128) {
        let r = e / 64;
        let c = e % 64;
        let byte = r * 128 + ((c * 2 / 16) ^ (r % 8)) * 16 + c * 2 % 16;
        smem[byte / 2] = bf16(base + f32(64 * r + c));
    }
    fence_proxy_async();
    barrier();
    if thread_id.x == 0 {
        tma_store(map, smem, c0, c1);
        tma_store_commit();
        tma_store_wait[0]();
        tma_store_wait[1](read = false);
    }
}
"""


def test_store_ptx():
    """tma_store is cp.async.bulk.tensor.2d global <- shared::cta in a bulk group, the map read through
    cvta.param as tma_load's; commit and both waits; the dynamic shared memory 1024-aligned."""
    ptx = compile_source_to(STORE, "k.kc", "asm", "nvptx", "sm_90a")
    filecheck(ptx, """
        CHECK: .extern .shared .align 1024 .b8 kc_dynamic_shared[];
        CHECK: fence.proxy.async.shared::cta;
        CHECK: bar.sync 0;
        CHECK: cvta.param.u64 [[GMAP:%rd[0-9]+]],
        CHECK: cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [[[GMAP]], {{{%r[0-9]+}}, {{%r[0-9]+}}}], [{{%r[0-9]+}}];
        CHECK: cp.async.bulk.commit_group;
        CHECK: cp.async.bulk.wait_group.read 0;
        CHECK: cp.async.bulk.wait_group 1;
    """)


@needs_ptxas
def test_store_assembles():
    ptxas(compile_source_to(STORE, "k.kc", "asm", "nvptx", "sm_90a"))


ERRORS = [
    # (statement in a kernel body with p: ptr<f32>, m: tensor_map; arch; message part; caret text)
    ("tma_store(p, dynamic_shared[f16](), 0);", "sm_90a", "tma_store's first argument is a tensor_map", "p"),
    ("tma_store(m, p, 0);", "sm_90a", "tma_store's source must be a ptr<f32, shared>", "p"),
    ("tma_store(m, dynamic_shared[f16](), 1.5);", "sm_90a", "a TMA coordinate must be an integer", "1.5"),
    ("tma_store(m, dynamic_shared[f16](), 0, 0, 0, 0, 0, 0);", "sm_90a", "tma_store", "tma_store"),
    ("tma_store_wait[64]();", "sm_90a", "group count must be 0 to 63, not 64", "64"),
    ("tma_store_wait[0](read = 1);", "sm_90a", "read", "1"),
    ("tma_store_commit();", "sm_80", "tma_store_commit is not available on this target (nvptx sm_80)",
     "tma_store_commit"),
]


@pytest.mark.parametrize("body, arch, message, caret", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_located_errors(body, arch, message, caret):
    assert_body_error(body, arch, message, caret)


def test_cpu_target_refuses_without_emulation():
    with pytest.raises(CompileError) as ei:
        compile_source_to(STORE, "k.kc", "obj", "cpu")
    assert "is not available on this target (cpu" in str(ei.value) and "k.kc:" in str(ei.value)


_MOD: list = []


@pytest.mark.parametrize("c0, c1", [(0, 0), (64, 64), (100, 30), (-8, -3)],
                         ids=["inside", "corner-clipped", "right-and-bottom-clipped", "negative"])
def test_emulated_store_clips(c0, c1):
    """On the CPU target's emulation: the box lands at (c1 .. c1 + 63, c0 .. c0 + 63) of a 120 x 136 bf16
    matrix, clipped to it (TMA writes nothing outside the tensor: the rest keeps its NaN poison), its
    elements read from the swizzled places the kernel wrote them to."""
    import kcompiler as kc
    import ml_dtypes
    import numpy as np

    from kcompiler.runtime.tensormap import tensor_map
    if not _MOD:
        _MOD.append(kc.compile(STORE, target="cpu", target_options={"emulate_wgmma": True}, path="k.kc"))
    M, N = 120, 136
    out = np.full((M, N), np.nan, ml_dtypes.bfloat16)
    _MOD[0].k[1, 128](tensor_map(out, (64, 64)), c0, c1, 3.0, shared=64 * 64 * 2)
    want = np.full((M, N), np.nan)
    box = 3.0 + np.arange(64 * 64, dtype=np.float64).reshape(64, 64)
    box = box.astype(ml_dtypes.bfloat16).astype(np.float64)
    r0, r1, q0, q1 = max(c1, 0), min(c1 + 64, M), max(c0, 0), min(c0 + 64, N)
    want[r0:r1, q0:q1] = box[r0 - c1:r1 - c1, q0 - c0:q1 - c0]
    np.testing.assert_array_equal(out.astype(np.float64), want)
