"""Thread-block cluster builtins (NVIDIA sm_90; backends/nvptx/cluster.py states the PTX): the
block's rank in its cluster, the cluster barrier, an mbarrier arrival on another block of the
cluster, the TMA copy multicast to several blocks, and the kernel's cluster shape. Each call is
type-checked (a located error for a wrong operand, and for a target without clusters: the CPU
target has none, so a kernel chooses its cluster path with ``comptime if target.has("cluster")``)
and lowered to the target intrinsic backends/nvptx/intrinsics.py registers.

Kept apart from hopper.py (whose builtins move into the backend, on branch ``vendor``) so that it
can be ported as one block.

Surface::
    cluster_dims(2, 1, 1)                          // in a kernel: launched in clusters of 2 x 1 x 1 blocks
    let r = cluster_ctarank()                      // u32: this block's rank in its cluster
    cluster_arrive(); cluster_wait()               // every thread of the cluster's blocks
    mbarrier_arrive_cluster(bar, rank)             // one arrival on block rank's barrier at bar's offset
    tma_load_multicast(dst, map, bar, mask, x, y)  // tma_load into the blocks of mask (u16, a bit a rank)
"""
from __future__ import annotations

from typing import Any

from ..ir.types import I32, U16, U32, U64, TensorMapType
from .builtin_registry import builtin, require_feature
from .hopper import _int_operand, _shared_ptr
from .values import VOIDV

#: The builtins this file lowers, and the target intrinsic whose feature each needs.
INTRINSIC_OF = {"cluster_ctarank": "nvptx.cluster.ctarank", "cluster_arrive": "nvptx.cluster.arrive",
                "cluster_wait": "nvptx.cluster.wait", "mbarrier_arrive_cluster": "nvptx.mbarrier.arrive_cluster",
                "tma_load_multicast": "nvptx.tma.load_multicast", "cluster_dims": "nvptx.cluster.ctarank"}


@builtin(*INTRINSIC_OF)
def lower_builtin(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    """Lower call ``e`` of cluster builtin ``f`` (a BuiltinRef) in FnLowering ``fl``."""
    name = f.fn.name
    require_feature(fl, INTRINSIC_OF[name], e.span, subject=name)
    if name == "cluster_ctarank":
        return fl.b.intrinsic("nvptx.cluster.ctarank", [], U32)
    if name in ("cluster_arrive", "cluster_wait"):
        fl.b.intrinsic(INTRINSIC_OF[name])
        return VOIDV
    if name == "mbarrier_arrive_cluster":
        bar = _shared_ptr(fl, e.args[0], name, "barrier", U64)
        fl.b.intrinsic("nvptx.mbarrier.arrive_cluster", [bar, _int_operand(fl, e.args[1], U32, "the block rank")])
        return VOIDV
    if name == "tma_load_multicast":
        return _tma_load_multicast(fl, e)
    return _cluster_dims(fl, e)


def _tma_load_multicast(fl: Any, e: Any) -> Any:
    """``tma_load_multicast(dst: ptr<T, shared>, map: tensor_map, bar: ptr<u64, shared>, mask, c0, ...)``."""
    dst = _shared_ptr(fl, e.args[0], "tma_load_multicast", "destination")
    m = fl._value(e.args[1])
    if not isinstance(m.type, TensorMapType):
        fl.fail(f"tma_load_multicast's second argument is a tensor_map (a kernel parameter made on the host), "
                f"found {m.type}", e.args[1].span)
    bar = _shared_ptr(fl, e.args[2], "tma_load_multicast", "barrier", U64)
    mask = _int_operand(fl, e.args[3], U16, "the multicast mask")
    coords = [_int_operand(fl, a, I32, "a TMA coordinate") for a in e.args[4:]]
    fl.b.intrinsic("nvptx.tma.load_multicast", [dst, m, bar, mask, *coords])
    return VOIDV


def _cluster_dims(fl: Any, e: Any) -> Any:
    """``cluster_dims(x, y = 1, z = 1)``: in a kernel's body, the shape of its clusters (compile-time
    integers, at most 8 blocks in all: the portable cluster size)."""
    if not fl.decl.is_kernel:
        fl.fail("cluster_dims belongs in a kernel's body", e.span)
    dims = [fl.comptime_int(a, "a cluster dimension") for a in e.args] + [1] * (3 - len(e.args))
    for a, d in zip(e.args, dims):
        if d < 1:
            fl.fail(f"a cluster dimension is at least 1, not {d}", a.span)
    if dims[0] * dims[1] * dims[2] > 8:
        fl.fail(f"a cluster of {dims[0]} x {dims[1]} x {dims[2]} blocks: at most 8 (the portable size)", e.span)
    fl.fn.attrs["cluster_dims"] = tuple(dims)
    return VOIDV


__all__ = ["INTRINSIC_OF", "lower_builtin"]
