"""The thread-block cluster builtins of the NVPTX backend (backends/nvptx/builtins_cluster.py,
backends/nvptx/cluster.py): cluster_dims, cluster_ctarank, cluster_arrive / cluster_wait,
mbarrier_arrive_cluster and tma_load_multicast, the PTX each lowers to (PTX ISA 8.x; checked with
FileCheck) assembled by ptxas for sm_90a, and the located errors for misuse and for targets without
clusters (sm_80, the CPU target even with emulate_wgmma). std.matmul_sm90's CLUSTER_M = 2, built on
them, is tested in tests/ops/test_matmul_sm90.py (on the H100: clusters are not emulated)."""
from __future__ import annotations

import pytest

from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to

from ...filecheck_util import filecheck
from ...located_util import assert_body_error
from ...ptxas_util import needs_ptxas, ptxas

CLUSTER = """
kernel k(map: tensor_map, out: ptr<u32>) {
    cluster_dims(2);
    let smem = dynamic_shared[bf16]();
    let bar = bitcast[ptr<u64, shared>](smem + 8192);
    let r = cluster_ctarank();
    if thread_id.x == 0 {
        mbarrier_init(bar, 2);
        fence_proxy_async();
    }
    cluster_arrive();
    cluster_wait();
    if thread_id.x == 0 {
        mbarrier_arrive_expect_tx(bar, 8192);
        tma_load_multicast(smem + 2048 * i32(r), map, bar, 3, 0, 32 * i32(r));
        mbarrier_arrive_cluster(bar, r ^ 1u32);
        mbarrier_wait(bar, 0);
        out[block_id.x] = r;
    }
}
"""


def test_cluster_ptx():
    """cluster_dims as .explicitcluster / .reqnctapercluster (LLVM's "nvvm.cluster_dim"), the rank
    from %cluster_ctarank, the barrier's release / acquire halves, the remote arrival through mapa,
    and the multicast copy with its 16-bit mask."""
    ptx = compile_source_to(CLUSTER, "k.kc", "asm", "nvptx", "sm_90a")
    filecheck(ptx, """
        CHECK: .explicitcluster
        CHECK-NEXT: .reqnctapercluster 2, 1, 1
        CHECK: mov.u32 {{%r[0-9]+}}, %cluster_ctarank;
        CHECK: barrier.cluster.arrive.release;
        CHECK: barrier.cluster.wait.acquire;
        CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [{{%r[0-9]+}}], [{{%rd[0-9]+}}, {{{%r[0-9]+}}, {{%r[0-9]+}}}], [{{%r[0-9]+}}], {{%rs[0-9]+}};
        CHECK: mapa.shared::cluster.u32 ra, {{%r[0-9]+}}, {{%r[0-9]+}};
        CHECK-NEXT: mbarrier.arrive.shared::cluster.b64 _, [ra];
    """)


@needs_ptxas
def test_cluster_assembles():
    ptxas(compile_source_to(CLUSTER, "k.kc", "asm", "nvptx", "sm_90a"))


def test_no_cluster_directive_without_cluster_dims():
    ptx = compile_source_to("kernel k(p: ptr<u32>) {\n    p[0] = cluster_ctarank();\n}\n", "k.kc", "asm", "nvptx",
                            "sm_90")
    assert "%cluster_ctarank" in ptx and ".reqnctapercluster" not in ptx


ERRORS = [
    # (source snippet in a kernel body, arch, message part, caret text)
    ("cluster_dims(4, 3);", "sm_90a", "a cluster of 4 x 3 x 1 blocks: at most 8", "cluster_dims"),
    ("cluster_dims(0);", "sm_90a", "a cluster dimension is at least 1, not 0", "0"),
    ("cluster_dims(i32(p[0]));", "sm_90a", "cluster dimension", "i32(p[0])"),
    ("let r = cluster_ctarank();", "sm_80", "cluster_ctarank is not available on this target (nvptx sm_80)",
     "cluster_ctarank"),
    ("mbarrier_arrive_cluster(bitcast[ptr<u32, shared>](dynamic_shared[f16]()), 1);", "sm_90a",
     "mbarrier_arrive_cluster's barrier must be a ptr<u64, shared>", "bitcast"),
    ("mbarrier_arrive_cluster(bitcast[ptr<u64, shared>](dynamic_shared[f16]()), 1.5);", "sm_90a",
     "the block rank must be an integer", "1.5"),
    ("tma_load_multicast(dynamic_shared[f16](), p, bitcast[ptr<u64, shared>](dynamic_shared[f16]()), 3, 0);",
     "sm_90a", "tma_load_multicast's second argument is a tensor_map", "p"),
    ("tma_load_multicast(dynamic_shared[f16](), m, bitcast[ptr<u64, shared>](dynamic_shared[f16]()), 65536, 0);",
     "sm_90a", "the multicast mask must be an integer that fits in u16", "65536"),
]


@pytest.mark.parametrize("body, arch, message, caret", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_located_errors(body, arch, message, caret):
    assert_body_error(body, arch, message, caret)


def test_cluster_dims_only_in_kernels():
    src = "fn f() { cluster_dims(2); }\nkernel k(p: ptr<f32>) { f(); }\n"
    with pytest.raises(CompileError, match="cluster_dims belongs in a kernel's body"):
        compile_source_to(src, "bad.kc", "asm", "nvptx", "sm_90a")


def test_cpu_target_refuses_with_location():
    """The CPU target emulates no clusters, with emulate_wgmma or without: a located error."""
    import kcompiler as kc
    with pytest.raises(CompileError) as ei:
        kc.compile(CLUSTER, target="cpu", target_options={"emulate_wgmma": True}, path="k.kc").k.specialize()
    assert "is not available on this target (cpu" in str(ei.value) and "k.kc:3:" in str(ei.value)
