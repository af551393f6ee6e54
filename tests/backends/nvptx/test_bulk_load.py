"""The non-tensor bulk copy ``bulk_load(dst, src, bytes, bar)`` (``cp.async.bulk`` global -> shared,
completing on an mbarrier; backends/nvptx/tma.py): its PTX (FileCheck) assembled by ptxas for sm_90a,
the located errors for misuse and for targets without it, the CPU target's emulation
(backends/cpu/hopper.py) and the H100/H200 (``gpu``) against numpy: spans of run-time and compile-time
sizes at 16-byte offsets land in shared memory, and the barrier's phase completes only once every byte
of them has (expect_tx of their sum)."""
from __future__ import annotations

import numpy as np
import pytest

from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to

from ...filecheck_util import filecheck
from ...located_util import assert_body_error
from ...ptxas_util import needs_ptxas, ptxas
from ...draws import fresh_rng

# One block: thread 0 issues two copies into shared memory, n0 bytes (run-time) of src from byte
# offset off and 48 bytes (a constant) from byte offset off2, both completing on one mbarrier that
# expects their sum; every thread waits for the phase, then copies shared memory out.
COPY = """
kernel k(src: ptr<u8>, out: ptr<u8>, off: i32, n0: i32, off2: i32) {
    let b = dynamic_shared[u8]();                     // 1024 bytes, then the mbarrier
    let bar = bitcast[ptr<u64, shared>](b + 1024);
    for i in range(i32(thread_id.x), 1024, i32(block_dim.x)) {
        b[i] = 0xEEu8;
    }
    if thread_id.x == 0 {
        mbarrier_init(bar, 1u32);
        fence_proxy_async();
    }
    barrier();
    if thread_id.x == 0 {
        mbarrier_arrive_expect_tx(bar, u32(n0 + 48));
        bulk_load(b, src + i64(off), u32(n0), bar);
        bulk_load(b + 512, src + i64(off2), 48u32, bar);
    }
    mbarrier_wait(bar, 0u32);
    for i in range(i32(thread_id.x), 1024, i32(block_dim.x)) {
        out[i] = b[i];
    }
}
"""


def _want(src: np.ndarray, off: int, n0: int, off2: int) -> np.ndarray:
    want = np.full(1024, 0xEE, np.uint8)
    want[:n0] = src[off:off + n0]
    want[512:560] = src[off2:off2 + 48]
    return want


def test_bulk_load_ptx():
    """bulk_load is cp.async.bulk shared::cluster <- global completing on the mbarrier (complete_tx
    bytes), after the thread's expect_tx."""
    ptx = compile_source_to(COPY, "k.kc", "asm", "nvptx", "sm_90a")
    filecheck(ptx, """
        CHECK: mbarrier.arrive.expect_tx.shared::cta.b64
        CHECK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{{%r[0-9]+}}], [{{%rd[0-9]+}}], {{%r[0-9]+}}, [{{%r[0-9]+}}];
        CHECK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
        CHECK: mbarrier.try_wait.parity.shared::cta.b64
    """)


@needs_ptxas
def test_bulk_load_assembles():
    ptxas(compile_source_to(COPY, "k.kc", "asm", "nvptx", "sm_90"), arch="sm_90")


ERRORS = [
    # (statement in a kernel body with p: ptr<f32>; arch; message part; caret text)
    ("bulk_load(p, p, 16u32, bitcast[ptr<u64, shared>](dynamic_shared[u64]()));", "sm_90a",
     "bulk_load's destination must be a ptr<f32, shared>", "p"),
    ("bulk_load(dynamic_shared[f32](), dynamic_shared[f32](), 16u32, dynamic_shared[u64]());", "sm_90a",
     "bulk_load copies from global memory", "dynamic_shared[f32]()"),
    ("bulk_load(dynamic_shared[f32](), p, 24u32, dynamic_shared[u64]());", "sm_90a",
     "byte count must be a positive multiple of 16, not 24", "24u32"),
    ("bulk_load(dynamic_shared[f32](), p, 16u32, dynamic_shared[u32]());", "sm_90a",
     "bulk_load's barrier must be a ptr<u64, shared>", "dynamic_shared[u32]()"),
    ("bulk_load(dynamic_shared[f32](), p, 16u32, dynamic_shared[u64]());", "sm_80",
     "bulk_load is not available on this target (nvptx sm_80)", "bulk_load"),
]


@pytest.mark.parametrize("body, arch, message, caret", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_located_errors(body, arch, message, caret):
    assert_body_error(body, arch, message, caret)


def test_cpu_target_refuses_without_emulation():
    with pytest.raises(CompileError) as ei:
        compile_source_to(COPY, "k.kc", "obj", "cpu")
    assert "is not available on this target (cpu" in str(ei.value) and "k.kc:" in str(ei.value)


CASES = [(0, 16, 32), (48, 496, 1024), (1008, 272, 16)]


def _run(target: str, **opts) -> None:
    import kcompiler as kc
    rng = fresh_rng()
    mod = kc.compile(COPY, target=target, path="k.kc", **opts)
    src = rng.integers(0, 256, 2048, dtype=np.uint8)
    for off, n0, off2 in CASES:
        out = np.zeros(1024, np.uint8)
        if target == "cpu":
            mod.k[1, 64](src, out, off, n0, off2, shared=1032)
        else:
            import torch
            s, o = torch.from_numpy(src).cuda(), torch.zeros(1024, dtype=torch.uint8, device="cuda")
            mod.k[1, 128](s, o, off, n0, off2, shared=1032)
            torch.cuda.synchronize()
            out = o.cpu().numpy()
        np.testing.assert_array_equal(out, _want(src, off, n0, off2), err_msg=f"off {off} n0 {n0} off2 {off2}")


def test_emulated_bulk_load():
    """On the CPU target's emulation: the spans land and nothing else changes."""
    _run("cpu", target_options={"emulate_wgmma": True})


@pytest.mark.parametrize("off, n0", [(8, 16), (0, 24)], ids=["source-misaligned", "size-not-16"])
def test_emulated_bulk_load_refuses_what_a_gpu_faults_on(off, n0):
    """The CPU emulation stops the launch where cp.async.bulk would fault (a source address or a
    run-time byte count that is not a multiple of 16), at the call's file:line:col."""
    import kcompiler as kc
    from kcompiler.runtime.device import LaunchError
    mod = kc.compile(COPY, target="cpu", target_options={"emulate_wgmma": True}, path="k.kc")
    src = np.zeros(2048, np.uint8)
    with pytest.raises(LaunchError) as e:
        mod.k[1, 64](src, np.zeros(1024, np.uint8), off, n0, 32, shared=1032)
    line = COPY.split("\n").index("        bulk_load(b, src + i64(off), u32(n0), bar);") + 1
    assert str(e.value) == (f"kernel 'k': bulk_load: the source address and the byte count must be multiples of "
                            f"16 at k.kc:{line}:9, thread (0,0,0) block (0,0,0) (a GPU faults on this)")


@pytest.mark.gpu
def test_gpu_bulk_load():
    """On the GPU (sm_90): the same spans, the threads released by the barrier's phase."""
    _run("nvptx")
