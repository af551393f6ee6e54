"""The NVIDIA backend's builtins of the kernel language (kcompiler.ir.builtin_surface), read when the
frontend first resolves a name the language itself does not declare (the Backend record's
``builtins`` field names :data:`BUILTINS`):

- warp-level matrix operations and asynchronous copies, sm_80+ (comptime ``target.has("mma")``,
  ``"ldmatrix"``, ``"cp_async"``; ``"mma_fp8"`` for the FP8 form, sm_89+): ``mma_sync``, ``ldmatrix``,
  ``cp_async``, ``cp_async_commit``, ``cp_async_wait``, checked in builtins_mma.py; mma.py gives the
  fragment layouts (PTX ISA 8.x, "Matrix Fragments for mma.m16n8k16 / m16n8k32", "ldmatrix");
- Hopper, sm_90a: warpgroup MMA, TMA, bulk copies (``bulk_load``), mbarriers, setmaxnreg, TMA stores
  (``tma_store``, ``tma_store_commit``, ``tma_store_wait``) (``target.has("wgmma")``, ``"tma"``,
  ``"mbarrier"``, ``"setmaxnreg"``), checked in builtins_hopper.py; wgmma.py and tma.py give the PTX;
- thread-block clusters, sm_90 (``target.has("cluster")``): ``cluster_dims``, ``cluster_ctarank``,
  ``cluster_arrive``, ``cluster_wait``, ``mbarrier_arrive_cluster``, ``tma_load_multicast``, checked
  in builtins_cluster.py; cluster.py gives the PTX;
- named barriers, every NVIDIA arch (``target.has("named_barrier")``; the CPU target emulates them):
  ``barrier_sync``, ``barrier_arrive``, checked in builtins_barrier.py; named_barrier.py gives the PTX.

Each record's ``doc`` is the hint of its arity errors and what docs/LANGUAGE.md describes.
"""
from __future__ import annotations

from ...ir.builtin_surface import SurfaceBuiltin
from . import builtins_barrier as named_barrier
from . import builtins_cluster as cluster
from . import builtins_hopper as hopper
from . import builtins_mma as mma

#: The warp-level matrix builtins (sm_80+).
WARP_MATRIX = (
    SurfaceBuiltin("mma_sync", mma.mma_sync, 3, 3,
                   doc="mma_sync(a, b, c) -> vec<f32, 4>: D = A * B + C for one warp, each lane "
                       "holding its fragments: m16n8k16 with a: vec<bf16, 8>, b: vec<bf16, 4> (or "
                       "f16), c: vec<f32, 4>; m16n8k32 with a: vec<f8e4m3, 16>, b: vec<f8e4m3, 8> "
                       "(or f8e5m2, sm_89+)"),
    SurfaceBuiltin("ldmatrix", mma.ldmatrix, 1, 1, ("trans",), brackets="required",
                   doc="ldmatrix[vec<T, N>](p: ptr<T, shared>, trans = false) -> vec<T, N>: one warp loads N / 2 "
                       "(16-bit T; N / 4 for 8-bit T) 8x8 matrices, lane l giving the address of row l % 8 of "
                       "matrix l / 8; trans (16-bit T) transposes each"),
    SurfaceBuiltin("cp_async", mma.cp_async, 3, 4,
                   doc="cp_async(dst: ptr<T, shared>, src: ptr<T>, bytes[, src_bytes]): copy bytes "
                       "(4, 8 or 16, a compile-time value) from global to shared memory "
                       "asynchronously; only src_bytes (default bytes) are read, the rest of dst "
                       "is zero-filled"),
    SurfaceBuiltin("cp_async_commit", mma.cp_async_commit, 0, 0,
                   doc="cp_async_commit(): close this thread's group of cp_async copies"),
    SurfaceBuiltin("cp_async_wait", mma.cp_async_wait, 0, 0, brackets="required", bracket_what="a count",
                   doc="cp_async_wait[N](): wait until at most N of this thread's committed cp_async groups are "
                       "pending (then barrier() before other threads read the data)"),
)

#: The Hopper builtins (sm_90a).
HOPPER = (
    SurfaceBuiltin("wgmma", hopper.check, 3, 3, ("accumulate", "trans_b"), brackets="required",
                   bracket_what="the input type(s)",
                   doc="wgmma[T(, TB)](a_desc: u64, b_desc: u64, acc: vec<f32, N / 2>, accumulate = true, trans_b = "
                       "false) -> vec<f32, N / 2>: D (64 x N) = A (64 x K) * B (K x N) (+ acc) by one warpgroup; K is "
                       "16 for bf16/f16, 32 for f8e4m3/f8e5m2; A and B in shared memory (wgmma_desc)"),
    SurfaceBuiltin("wgmma_fence", hopper.check, 0, 0,
                   doc="wgmma_fence(): order the accumulators' register accesses before wgmma"),
    SurfaceBuiltin("wgmma_commit", hopper.check, 0, 0,
                   doc="wgmma_commit(): close the warpgroup's pending wgmmas into a group"),
    SurfaceBuiltin("wgmma_wait", hopper.check, 0, 0, brackets="required", bracket_what="a group count",
                   doc="wgmma_wait[N](): wait until at most N of the warpgroup's wgmma groups are pending"),
    SurfaceBuiltin("wgmma_desc", hopper.check, 1, 1, ("swizzle", "lbo", "sbo"),
                   doc="wgmma_desc(p: ptr<T, shared>, swizzle = 128, lbo = 16, sbo = 1024) -> u64: the matrix "
                       "descriptor of the tile at p (1024-byte aligned for a swizzle)"),
    SurfaceBuiltin("tma_load", hopper.check, 4, 8,
                   doc="tma_load(dst: ptr<T, shared>, map: tensor_map, bar: ptr<u64, shared>, c0, "
                       "...): copy the map's box at coordinates (c0 innermost) into dst; bar "
                       "receives its bytes (mbarrier_arrive_expect_tx)"),
    SurfaceBuiltin("bulk_load", hopper.check, 4, 4,
                   doc="bulk_load(dst: ptr<T, shared>, src: ptr<T>, bytes: u32, bar: ptr<u64, shared>): copy bytes "
                       "(a multiple of 16; dst and src 16-byte aligned) of contiguous global memory into dst; bar "
                       "receives them (mbarrier_arrive_expect_tx)"),
    SurfaceBuiltin("tma_store", hopper.check, 3, 7,
                   doc="tma_store(map: tensor_map, src: ptr<T, shared>, c0, ...): copy the box at src (laid out as "
                       "the map's box, swizzled as it says) into the map's tensor at coordinates (c0 innermost), "
                       "what lies outside the tensor not written; asynchronous: fence_proxy_async() in every "
                       "thread that wrote src, and a barrier, before it; then tma_store_commit()"),
    SurfaceBuiltin("tma_store_commit", hopper.check, 0, 0,
                   doc="tma_store_commit(): close this thread's pending tma_stores into a bulk async-group"),
    SurfaceBuiltin("tma_store_wait", hopper.check, 0, 0, ("read",), brackets="required",
                   bracket_what="a group count",
                   doc="tma_store_wait[N](read = true): wait until at most N of this thread's committed "
                       "tma_store groups are still reading their shared-memory source (read = false: still "
                       "writing global memory)"),
    SurfaceBuiltin("mbarrier_init", hopper.check, 2, 2, doc="mbarrier_init(bar: ptr<u64, shared>, count: u32)"),
    SurfaceBuiltin("mbarrier_arrive", hopper.check, 1, 1, doc="mbarrier_arrive(bar: ptr<u64, shared>)"),
    SurfaceBuiltin("mbarrier_arrive_expect_tx", hopper.check, 2, 2,
                   doc="mbarrier_arrive_expect_tx(bar: ptr<u64, shared>, bytes: u32): arrive, and make the phase "
                       "wait for that many more bytes of TMA copies"),
    SurfaceBuiltin("mbarrier_try_wait", hopper.check, 2, 2,
                   doc="mbarrier_try_wait(bar, parity: u32) -> bool: whether the phase "
                       "of that parity has completed"),
    SurfaceBuiltin("mbarrier_wait", hopper.check, 2, 2,
                   doc="mbarrier_wait(bar, parity: u32): wait until the phase of that parity "
                       "has completed"),
    SurfaceBuiltin("fence_proxy_async", hopper.check, 0, 0,
                   doc="fence_proxy_async(): order this thread's shared-memory writes "
                       "before TMA / wgmma accesses to them"),
    SurfaceBuiltin("setmaxnreg_inc", hopper.check, 0, 0, brackets="required", bracket_what="a register count",
                   doc="setmaxnreg_inc[N](): the warpgroup's registers a thread grow to N (a kernel with "
                       "launch_bounds)"),
    SurfaceBuiltin("setmaxnreg_dec", hopper.check, 0, 0, brackets="required", bracket_what="a register count",
                   doc="setmaxnreg_dec[N](): the warpgroup's registers a thread shrink to N"),
)

#: The thread-block cluster builtins (sm_90).
CLUSTER = (
    SurfaceBuiltin("cluster_dims", cluster.check, 1, 3,
                   doc="cluster_dims(x, y = 1, z = 1): in a kernel, launch it in clusters of x * y * z blocks (at "
                       "most 8; the grid a multiple of it)"),
    SurfaceBuiltin("cluster_ctarank", cluster.check, 0, 0,
                   doc="cluster_ctarank() -> u32: this block's rank in its cluster"),
    SurfaceBuiltin("cluster_arrive", cluster.check, 0, 0,
                   doc="cluster_arrive(): arrive on the cluster barrier (release)"),
    SurfaceBuiltin("cluster_wait", cluster.check, 0, 0,
                   doc="cluster_wait(): wait until every thread of the cluster's blocks has arrived (acquire)"),
    SurfaceBuiltin("mbarrier_arrive_cluster", cluster.check, 2, 2,
                   doc="mbarrier_arrive_cluster(bar: ptr<u64, shared>, rank: u32): one arrival on the mbarrier "
                       "at bar's offset in block rank of the cluster"),
    SurfaceBuiltin("tma_load_multicast", cluster.check, 5, 9,
                   doc="tma_load_multicast(dst, map, bar, mask: u16, c0, ...): tma_load's box into dst of every "
                       "block of the cluster whose rank's bit is set in mask, each completing on its bar"),
)

#: The named barriers (every NVIDIA arch).
NAMED_BARRIERS = (
    SurfaceBuiltin("barrier_sync", named_barrier.check, 2, 2,
                   doc="barrier_sync(id, nthreads): arrive on named barrier id (1 to 15; 0 is barrier()'s) and "
                       "wait until nthreads threads (a compile-time multiple of 32, barrier_arrive's counted) "
                       "have arrived; every thread of a warp calls it"),
    SurfaceBuiltin("barrier_arrive", named_barrier.check, 2, 2,
                   doc="barrier_arrive(id, nthreads): arrive on named barrier id (1 to 15), whose phase counts "
                       "nthreads threads (a compile-time multiple of 32), without waiting; every thread of a "
                       "warp calls it"),
)

#: Every NVIDIA builtin (what the Backend record names).
BUILTINS = (*WARP_MATRIX, *HOPPER, *CLUSTER, *NAMED_BARRIERS)

__all__ = ["BUILTINS", "CLUSTER", "HOPPER", "NAMED_BARRIERS", "WARP_MATRIX"]
