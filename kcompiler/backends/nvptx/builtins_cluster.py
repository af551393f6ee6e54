"""The checks of the thread-block cluster builtins (NVIDIA sm_90; cluster.py states the PTX with its
PTX ISA sections): the block's rank in its cluster, the cluster barrier, an mbarrier arrival on another
block of the cluster, the TMA copy multicast to several blocks, and the kernel's cluster shape. Written
against :class:`~kcompiler.ir.builtin_surface.BuiltinCall`; each call is type-checked (a located error
for a wrong operand, and for a target without clusters: the CPU target has none, so a kernel chooses
its cluster path with ``comptime if target.has("cluster")``) and lowered to the target intrinsic
intrinsics.py registers; builtins.py declares the names.

Surface::
    cluster_dims(2, 1, 1)                          // in a kernel: launched in clusters of 2 x 1 x 1 blocks
    let r = cluster_ctarank()                      // u32: this block's rank in its cluster
    cluster_arrive(); cluster_wait()               // every thread of the cluster's blocks
    mbarrier_arrive_cluster(bar, rank)             // one arrival on block rank's barrier at bar's offset
    tma_load_multicast(dst, map, bar, mask, x, y)  // tma_load into the blocks of mask (u16, a bit a rank)
"""
from __future__ import annotations

from ...ir.builtin_surface import BuiltinCall
from ...ir.core import Value
from ...ir.types import I32, U16, U32, U64, TensorMapType
from .builtins_hopper import int_operand, shared_ptr

#: The builtins checked here and the target intrinsic whose feature each needs.
INTRINSIC_OF = {"cluster_ctarank": "nvptx.cluster.ctarank", "cluster_arrive": "nvptx.cluster.arrive",
                "cluster_wait": "nvptx.cluster.wait", "mbarrier_arrive_cluster": "nvptx.mbarrier.arrive_cluster",
                "tma_load_multicast": "nvptx.tma.load_multicast", "cluster_dims": "nvptx.cluster.ctarank"}


def check(call: BuiltinCall) -> Value | None:
    """Check and lower one call of a cluster builtin (its name: ``call.builtin.name``)."""
    name = call.builtin.name
    call.require_feature(INTRINSIC_OF[name], subject=name)
    if name == "cluster_ctarank":
        return call.emit("nvptx.cluster.ctarank", [], U32)
    if name in ("cluster_arrive", "cluster_wait"):
        call.emit(INTRINSIC_OF[name])
        return None
    if name == "mbarrier_arrive_cluster":
        bar = shared_ptr(call, 0, name, "barrier", U64)
        call.emit("nvptx.mbarrier.arrive_cluster", [bar, int_operand(call, 1, U32, "the block rank")])
        return None
    if name == "tma_load_multicast":
        _tma_load_multicast(call)
        return None
    _cluster_dims(call)
    return None


def _tma_load_multicast(call: BuiltinCall) -> None:
    """``tma_load_multicast(dst: ptr<T, shared>, map: tensor_map, bar: ptr<u64, shared>, mask, c0, ...)``."""
    dst = shared_ptr(call, 0, "tma_load_multicast", "destination")
    m = call.value(1)
    if not isinstance(m.type, TensorMapType):
        call.fail(f"tma_load_multicast's second argument is a tensor_map (a kernel parameter made on the host), "
                  f"found {m.type}", 1)
    bar = shared_ptr(call, 2, "tma_load_multicast", "barrier", U64)
    mask = int_operand(call, 3, U16, "the multicast mask")
    coords = [int_operand(call, i, I32, "a TMA coordinate") for i in range(4, call.nargs)]
    call.emit("nvptx.tma.load_multicast", [dst, m, bar, mask, *coords])


def _cluster_dims(call: BuiltinCall) -> None:
    """``cluster_dims(x, y = 1, z = 1)``: in a kernel's body, the shape of its clusters (compile-time
    integers, at most 8 blocks in all: the portable cluster size)."""
    if not call.is_kernel:
        call.fail("cluster_dims belongs in a kernel's body")
    dims = [call.comptime_int(i, "a cluster dimension") for i in range(call.nargs)] + [1] * (3 - call.nargs)
    for i in range(call.nargs):
        if dims[i] < 1:
            call.fail(f"a cluster dimension is at least 1, not {dims[i]}", i)
    if dims[0] * dims[1] * dims[2] > 8:
        call.fail(f"a cluster of {dims[0]} x {dims[1]} x {dims[2]} blocks: at most 8 (the portable size)")
    call.set_function_attr("cluster_dims", tuple(dims))


__all__ = ["INTRINSIC_OF", "check"]
