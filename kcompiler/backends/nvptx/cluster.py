"""Thread-block clusters on NVIDIA sm_90, written as inline PTX: the block's rank in its cluster, the
cluster-wide barrier, an mbarrier arrival on another block's barrier, and the TMA copy multicast to
several blocks of the cluster. A kernel is launched in clusters by its ``.reqnctapercluster``
directive (``cluster_dims``; target.py sets LLVM's ``"nvvm.cluster_dim"`` attribute, which LLVM 22
emits as ``.explicitcluster`` and ``.reqnctapercluster x, y, z``): cuLaunchKernel then launches its
grid in clusters of that shape (the grid a multiple of it), no launch attribute needed (CUDA C++
Programming Guide, "Thread Block Clusters": a compile-time cluster size).

The instructions (PTX ISA 8.x; each sm_90, PTX 7.8 or 8.0):

- ``mov.u32 r, %cluster_ctarank;`` (section "Special Registers": ``%cluster_ctarank``, the block's
  rank in its cluster, 0 .. ``%cluster_nctarank`` - 1).
- ``barrier.cluster.arrive.release;`` and ``barrier.cluster.wait.acquire;`` (section "Parallel
  Synchronization and Communication Instructions: barrier.cluster"): every thread of every block of
  the cluster arrives; wait returns once all have (release / acquire at cluster scope: the writes
  before the arrival, mbarrier.init included, are visible after the wait). Not ``.aligned``: the
  threads of a warp may reach it apart.
- ``mapa.shared::cluster.u32 d, a, rank;`` (section "Data Movement and Conversion Instructions:
  mapa"): the shared::cluster address of the variable at shared::cta address ``a`` in block ``rank``
  of the cluster; then ``mbarrier.arrive.shared::cluster.b64 _, [d];`` (section "mbarrier.arrive": a
  remote barrier takes an arrival whose state is discarded, hence ``_``), with the default semantics,
  release at CTA scope, as CUTLASS's ``ClusterBarrier::arrive(cta_id, pred)`` (include/cutlass/
  arch/barrier.h) issues it. ``.release.cluster`` compiles to ``MEMBAR.ALL.GPU`` before each arrival
  (nvdisasm of sm_90a, ptxas 13.0): a full GPU-scope fence per consumer warp per k-step, which held
  std.matmul_sm90's 2-block clusters at ~0.4x of the unclustered kernel on an H100.
- ``cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster
  [dst], [map, {c0, ..}], [bar], mask;`` (section "cp.async.bulk.tensor"): the box lands at the same
  shared-memory offset ``dst`` in every block whose rank has its bit set in the 16-bit ``mask``, and
  each of them receives complete-tx of the box's bytes on its mbarrier at offset ``bar``.
"""
from __future__ import annotations

from llvmlite import ir as ll

from ..llvm.lower import LoweringContext
from .tma import _asm, _shared

_I16, _I32, _I64 = ll.IntType(16), ll.IntType(32), ll.IntType(64)


def cluster_ctarank(ctx: LoweringContext) -> ll.Value:
    """``%cluster_ctarank`` as an i32 (u32 in the IR)."""
    return _asm(ctx, "mov.u32 $0, %cluster_ctarank;", "=r", [], _I32)


def cluster_arrive(ctx: LoweringContext) -> None:
    """``barrier.cluster.arrive.release``."""
    _asm(ctx, "barrier.cluster.arrive.release;", "", [])


def cluster_wait(ctx: LoweringContext) -> None:
    """``barrier.cluster.wait.acquire``."""
    _asm(ctx, "barrier.cluster.wait.acquire;", "", [])


def mbarrier_arrive_cluster(ctx: LoweringContext, bar: ll.Value, rank: ll.Value) -> None:
    """One arrival (release, CTA scope: the module docstring says why) on the mbarrier at ``bar``'s
    offset in block ``rank`` of the cluster (``mapa``, then ``mbarrier.arrive`` on the shared::cluster
    address)."""
    text = ("{\n\t.reg .b32 ra;\n\tmapa.shared::cluster.u32 ra, $0, $1;\n\t"
            "mbarrier.arrive.shared::cluster.b64 _, [ra];\n\t}")
    _asm(ctx, text, "r,r", [_shared(ctx, bar), rank])


def tma_load_multicast(ctx: LoweringContext, dst: ll.Value, tensor_map: ll.Value, bar: ll.Value, mask: ll.Value,
                       coords: list[ll.Value]) -> None:
    """``cp.async.bulk.tensor.<len(coords)>d ... .multicast::cluster`` global -> shared of the blocks
    of ``mask`` (i16, a bit a rank), completing on their mbarriers at ``bar``'s offset; ``coords`` are
    i32, innermost first."""
    n = len(coords)
    cs = ", ".join(f"${4 + k}" for k in range(n))
    text = (f"cp.async.bulk.tensor.{n}d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
            f"[$0], [$1, {{{cs}}}], [$2], $3;")
    m = ctx.b.ptrtoint(tensor_map, _I64)
    _asm(ctx, text, ",".join(["r", "l", "r", "h"] + ["r"] * n),
         [_shared(ctx, dst), m, _shared(ctx, bar), mask] + coords)


__all__ = ["cluster_arrive", "cluster_ctarank", "cluster_wait", "mbarrier_arrive_cluster", "tma_load_multicast"]
