"""NVIDIA's target intrinsics (``nvptx.*``) as registry entries (kcompiler.ir.intrinsics): each
instruction's type rule, its LLVM lowering (mma.py; hopper.py for wgmma, TMA, mbarriers) and the
CPU target's emulation (backends/cpu/warp_matrix.py, backends/cpu/hopper.py). Imports no llvmlite:
the lowerings are named by import path.

=================================  ============  ===============  =========================================
intrinsic                          builtin       feature          operands -> result; attributes
=================================  ============  ===============  =========================================
nvptx.mma.sync                     mma_sync      mma              a, b, c -> vec<f32, 4>; shape
nvptx.ldmatrix                     ldmatrix      ldmatrix         p: ptr<T, shared> -> vec<T, N>; num, trans
nvptx.cp_async                     cp_async      cp_async         dst, src, src_bytes: u32; bytes
nvptx.cp_async.commit_group        cp_async_...  cp_async         (none)
nvptx.cp_async.wait_group          cp_async_...  cp_async         (none); n
nvptx.wgmma.mma_async              wgmma         wgmma            a, b, acc, scale_d -> acc; n, a_type, ...
nvptx.wgmma.fence / commit_group   wgmma_...     wgmma            (none)
nvptx.wgmma.wait_group             wgmma_wait    wgmma            (none); n
nvptx.wgmma.desc                   wgmma_desc    wgmma            p: ptr<T, shared> -> u64; swizzle, lbo, sbo
nvptx.tma.load                     tma_load      tma              dst, map, bar, c0, ... (1 to 5 coordinates)
nvptx.tma.store                    tma_store     tma              map, src: ptr<T, shared>, c0, ... (1 to 5)
nvptx.tma.bulk_load                bulk_load     tma              dst: ptr<T, shared>, src: ptr<T>, bytes: u32, bar
nvptx.tma.store_commit             tma_store...  tma              (none)
nvptx.tma.store_wait               tma_store...  tma              (none); n, read
nvptx.mbarrier.*                   mbarrier_*    mbarrier         bar: ptr<u64, shared>, [u32]
nvptx.setmaxnreg                   setmaxnreg_*  setmaxnreg       (none); n, increase
nvptx.fence.proxy_async            fence_pro...  tma              (none)
nvptx.cluster.ctarank              cluster_ct... cluster          (none) -> u32
nvptx.cluster.arrive / wait        cluster_a...  cluster          (none)
nvptx.mbarrier.arrive_cluster      mbarrier_...  cluster          bar: ptr<u64, shared>, rank: u32
nvptx.tma.load_multicast           tma_load_...  cluster          dst, map, bar, mask: u16, c0, ... (1 to 5)
nvptx.barrier.sync / arrive        barrier_...   named_barrier    id: u32; nthreads
=================================  ============  ===============  =========================================
"""
from __future__ import annotations

from ...ir.core import Op, Value
from ...ir.intrinsics import Intrinsic, bits, count_attr, pointer, register_intrinsics, require, result_type
from ...ir.types import (BF16, BOOL, F16, F32, F8E4M3, F8E5M2, I32, U16, U32, U64, AddressSpace, ScalarType,
                         VectorType)

#: Shapes of ``nvptx.mma.sync`` (PTX ``mma.sync.aligned.<shape>.row.col.f32.<a>.<b>.f32``).
MMA_SHAPES = ("m16n8k16", "m16n8k32")

_HERE = __package__
_CPU = "kcompiler.backends.cpu"


def _t_mma(op: Op) -> None:
    a, b, c = (v.type for v in op.operands)
    acc = VectorType(F32, 4)
    shape = op.attrs["shape"]
    require(shape in MMA_SHAPES, f"mma shape={shape!r} is not one of {', '.join(MMA_SHAPES)}")
    require(c == acc, f"mma accumulator of type {c} (needs {acc})")
    require(result_type(op) == acc, f"mma gives {acc}, not {result_type(op)}")
    if shape == "m16n8k16":
        require(isinstance(a, VectorType) and a.elem in (F16, BF16) and a.count == 8,
                f"m16n8k16 A fragment of type {a} (needs vec<f16, 8> or vec<bf16, 8>)")
        require(b == VectorType(a.elem, 4), f"m16n8k16 B fragment of type {b} (needs vec<{a.elem}, 4>)")  # type: ignore[union-attr]
    else:
        f8 = (F8E4M3, F8E5M2)
        require(isinstance(a, VectorType) and a.elem in f8 and a.count == 16,
                f"m16n8k32 A fragment of type {a} (needs vec<f8e4m3, 16> or vec<f8e5m2, 16>)")
        require(isinstance(b, VectorType) and b.elem in f8 and b.count == 8,
                f"m16n8k32 B fragment of type {b} (needs vec<f8e4m3, 8> or vec<f8e5m2, 8>)")


def _t_ldmatrix(op: Op) -> None:
    p = pointer(op.operands[0])
    num, trans = op.attrs["num"], op.attrs["trans"]
    require(p.space == AddressSpace.SHARED, f"ldmatrix from {p} (needs a shared pointer)")
    e = p.pointee
    require(isinstance(e, ScalarType) and not e.is_bool and bits(e) in (8, 16),
            f"ldmatrix of {e} (needs elements of 8 or 16 bits)")
    require(num in (1, 2, 4), f"ldmatrix num={num!r} (1, 2 or 4 matrices)")
    require(isinstance(trans, bool), f"ldmatrix trans={trans!r} (needs a bool)")
    require(not trans or bits(e) == 16, f"ldmatrix trans of {e}: transposes 16-bit elements only")
    want = VectorType(e, num * 32 // bits(e))  # type: ignore[arg-type]
    require(result_type(op) == want, f"ldmatrix of {num} matrices of {e} gives {want}, not {result_type(op)}")


def _t_cp_async(op: Op) -> None:
    d, s = pointer(op.operands[0], "destination"), pointer(op.operands[1], "source")
    require(d.space == AddressSpace.SHARED, f"cp_async into {d} (needs a shared pointer)")
    require(s.space in (AddressSpace.GLOBAL, AddressSpace.CONST), f"cp_async from {s} (needs a global pointer)")
    require(d.pointee == s.pointee, f"cp_async from {s} into {d}: element types differ")
    require(op.operands[2].type == U32, f"cp_async source size of type {op.operands[2].type} (needs u32)")
    require(op.attrs["bytes"] in (4, 8, 16), f"cp_async of {op.attrs['bytes']!r} bytes (4, 8 or 16)")


def _t_mbar(op: Op) -> None:
    name = op.attrs["intrinsic"]
    p = pointer(op.operands[0], "mbarrier")
    require(p.space == AddressSpace.SHARED and p.pointee == U64, f"{name} on {p} (needs a ptr<u64, shared>)")
    for v in op.operands[1:]:
        require(v.type == U32, f"{name} operand of type {v.type} (needs u32)")
    if name == "nvptx.mbarrier.try_wait":
        require(result_type(op) == BOOL, f"mbarrier_try_wait gives bool, not {result_type(op)}")


def _t_wgmma(op: Op) -> None:
    da, db, acc, scale = op.operands
    n = op.attrs["n"]
    per = 8 if op.attrs["a_type"] in ("bf16", "f16") else 16
    a_regs = isinstance(da.type, VectorType) and da.type.count == per \
        and getattr(da.type.elem, "name", None) == op.attrs["a_type"]
    require((da.type == U64 or a_regs) and db.type == U64,
            f"wgmma operands of types {da.type}, {db.type} (need u64 descriptors; A also vec<bf16|f16, 8> "
            "or vec<f8e4m3|f8e5m2, 16>)")
    require(isinstance(n, int) and 8 <= n <= 256 and n % 8 == 0, f"wgmma n={n!r} (a multiple of 8 from 8 to 256)")
    want = VectorType(F32, n // 2)
    require(acc.type == want and result_type(op) == want,
            f"wgmma m64n{n} accumulator {acc.type} and result {result_type(op)} (need {want})")
    require(scale.type == BOOL, f"wgmma scale_d of type {scale.type} (needs bool)")
    a, b = op.attrs["a_type"], op.attrs["b_type"]
    require((a == b and a in ("bf16", "f16")) or {a, b} <= {"f8e4m3", "f8e5m2"},
            f"wgmma of {a} x {b} (both f16, both bf16, or FP8)")
    require(not op.attrs["trans_b"] or a in ("bf16", "f16"), "wgmma trans_b applies to 16-bit types")


def _t_wgmma_desc(op: Op) -> None:
    p = pointer(op.operands[0])
    require(p.space == AddressSpace.SHARED, f"wgmma_desc of {p} (needs a shared pointer)")
    require(op.attrs["swizzle"] in (0, 32, 64, 128), f"wgmma_desc swizzle={op.attrs['swizzle']!r} (0, 32, 64, 128)")
    for k in ("lbo", "sbo"):
        v = op.attrs[k]
        require(isinstance(v, int) and 0 <= v < 1 << 18 and v % 16 == 0,
                f"wgmma_desc {k}={v!r} (a multiple of 16 below 2^18)")
    require(result_type(op) == U64, f"wgmma_desc gives u64, not {result_type(op)}")


def _t_tma_operands(op: Op, name: str, dst: Value, m: Value, bar: Value, coords: list[Value]) -> None:
    require(1 <= len(coords) <= 5, f"{name} with {len(coords)} coordinates (1 to 5)")
    d = pointer(dst, "destination")
    require(d.space == AddressSpace.SHARED, f"{name} into {d} (needs a shared pointer)")
    require(str(m.type) == "tensor_map", f"{name} map of type {m.type} (needs tensor_map)")
    b = pointer(bar, "mbarrier")
    require(b.space == AddressSpace.SHARED and b.pointee == U64, f"{name} completing on {b} (needs ptr<u64, shared>)")
    for c in coords:
        require(c.type == I32, f"{name} coordinate of type {c.type} (needs i32)")


def _t_tma_load(op: Op) -> None:
    require(len(op.operands) > 3, f"tma_load with {len(op.operands) - 3} coordinates (1 to 5)")
    _t_tma_operands(op, "tma_load", *op.operands[:3], list(op.operands[3:]))


def _t_bulk_load(op: Op) -> None:
    dst, src, nbytes, bar = op.operands
    d, s = pointer(dst, "destination"), pointer(src, "source")
    require(d.space == AddressSpace.SHARED, f"bulk_load into {d} (needs a shared pointer)")
    require(s.space == AddressSpace.GLOBAL, f"bulk_load from {s} (needs a global pointer)")
    require(nbytes.type == U32, f"bulk_load byte count of type {nbytes.type} (needs u32)")
    b = pointer(bar, "mbarrier")
    require(b.space == AddressSpace.SHARED and b.pointee == U64,
            f"bulk_load completing on {b} (needs ptr<u64, shared>)")


def _t_tma_store(op: Op) -> None:
    require(len(op.operands) > 2, f"tma_store with {len(op.operands) - 2} coordinates (1 to 5)")
    m, src, coords = op.operands[0], op.operands[1], list(op.operands[2:])
    require(1 <= len(coords) <= 5, f"tma_store with {len(coords)} coordinates (1 to 5)")
    require(str(m.type) == "tensor_map", f"tma_store map of type {m.type} (needs tensor_map)")
    s = pointer(src, "source")
    require(s.space == AddressSpace.SHARED, f"tma_store from {s} (needs a shared pointer)")
    for c in coords:
        require(c.type == I32, f"tma_store coordinate of type {c.type} (needs i32)")


def _t_tma_store_wait(op: Op) -> None:
    n = count_attr(op)
    require(0 <= n <= 63, f"tma_store_wait {n} (0 to 63 groups)")
    require(isinstance(op.attrs["read"], bool), f"tma_store_wait read={op.attrs['read']!r} (needs a bool)")


def _t_tma_load_multicast(op: Op) -> None:
    require(len(op.operands) > 4, f"tma_load_multicast with {len(op.operands) - 4} coordinates (1 to 5)")
    mask = op.operands[3]
    require(mask.type == U16, f"tma_load_multicast mask of type {mask.type} (needs u16: a bit a block rank)")
    _t_tma_operands(op, "tma_load_multicast", *op.operands[:3], list(op.operands[4:]))


def _t_cluster(op: Op) -> None:
    name = op.attrs["intrinsic"]
    if name == "nvptx.cluster.ctarank":
        require(result_type(op) == U32, f"cluster_ctarank gives u32, not {result_type(op)}")
    elif name == "nvptx.mbarrier.arrive_cluster":
        p = pointer(op.operands[0], "mbarrier")
        require(p.space == AddressSpace.SHARED and p.pointee == U64,
                f"mbarrier_arrive_cluster on {p} (needs a ptr<u64, shared>)")
        require(op.operands[1].type == U32, f"mbarrier_arrive_cluster rank of type {op.operands[1].type} (needs u32)")


def _t_named_barrier(op: Op) -> None:
    n = op.attrs["nthreads"]
    require(op.operands[0].type == U32, f"named barrier id of type {op.operands[0].type} (needs u32)")
    require(isinstance(n, int) and 32 <= n <= 1024 and n % 32 == 0,
            f"named barrier nthreads={n!r} (a multiple of 32 from 32 to 1024)")


def _t_setmaxnreg(op: Op) -> None:
    n = count_attr(op)
    require(24 <= n <= 256 and n % 8 == 0, f"setmaxnreg {n} (a multiple of 8 from 24 to 256)")


#: What each feature of these intrinsics is, with the chips that have it (``Intrinsic.needs``: the
#: frontend's "not available on this target" message; archs.py says which arch has which feature).
FEATURE_DOCS = {
    "mma": "tensor-core mma.sync (NVIDIA sm_80 or later)",
    "mma_fp8": "FP8 mma.sync (NVIDIA sm_89 or later)",
    "ldmatrix": "ldmatrix (NVIDIA sm_75 or later, kcompiler: sm_80)",
    "cp_async": "cp.async (NVIDIA sm_80 or later)",
    "wgmma": "warpgroup MMA (wgmma, NVIDIA sm_90a)",
    "tma": "the TMA copy engine (NVIDIA sm_90)",
    "mbarrier": "mbarriers with transaction counts (NVIDIA sm_90)",
    "setmaxnreg": "setmaxnreg (NVIDIA sm_90a)",
    "cluster": "thread-block clusters (NVIDIA sm_90)",
    "named_barrier": "named barriers (NVIDIA bar.sync / bar.arrive with an id and a thread count)",
}


def _hopper(name: str, builtin: str, feature: str, operands: int | None, **kw) -> Intrinsic:
    # clusters have no CPU emulation (the CPU target lacks the feature: the frontend refuses them there)
    emulate = None if feature == "cluster" else f"{_CPU}.hopper:emulate"
    return Intrinsic(name=f"nvptx.{name}", builtin=builtin, feature=feature, operands=operands,
                     lower=f"{_HERE}.hopper:lower", emulate=emulate, needs={feature: FEATURE_DOCS[feature]}, **kw)


def _warp(name: str, builtin: str, feature: str, operands: int, function: str, **kw) -> Intrinsic:
    needs = {f: FEATURE_DOCS[f] for f in ((feature, "mma_fp8") if feature == "mma" else (feature,))}
    return Intrinsic(name=f"nvptx.{name}", builtin=builtin, feature=feature, operands=operands,
                     lower=f"{_HERE}.mma:lower_{function}", emulate=f"{_CPU}.warp_matrix:emulate_{function}",
                     needs=needs, **kw)


#: Every NVIDIA intrinsic, registered when this module is imported.
INTRINSICS = (
    _warp("mma.sync", "mma_sync", "mma", 3, "mma", attrs=("shape",), result=True, type_rule=_t_mma,
          tables={"shapes": MMA_SHAPES},
          doc="d = a * b + c by one warp; per lane: m16n8k16 a vec<T, 8>, b vec<T, 4> (T f16 or bf16), "
              "m16n8k32 a vec<F8, 16>, b vec<F8', 8>; c and d vec<f32, 4> (layouts: mma.py)"),
    _warp("ldmatrix", "ldmatrix", "ldmatrix", 1, "ldmatrix", attrs=("num", "trans"), result=True,
          type_rule=_t_ldmatrix,
          doc="p: ptr<T, shared> -> vec<T, N>: num (1, 2, 4) 8x8 matrices of 16-bit elements loaded by one "
              "warp, each lane giving a row address; trans: bool"),
    _warp("cp_async", "cp_async", "cp_async", 3, "cp_async", attrs=("bytes",), type_rule=_t_cp_async,
          doc="dst: ptr<T, shared>, src: ptr<T>, src_bytes: u32: copy attr bytes (4, 8, 16) "
              "asynchronously, src_bytes of them read from src, the rest zero-filled"),
    _warp("cp_async.commit_group", "cp_async_commit", "cp_async", 0, "cp_async_commit",
          doc="close this thread's group of cp_async copies"),
    _warp("cp_async.wait_group", "cp_async_wait", "cp_async", 0, "cp_async_wait", attrs=("n",),
          type_rule=count_attr, doc="wait until at most attr n of this thread's cp_async groups are pending"),
    _hopper("wgmma.mma_async", "wgmma", "wgmma", 4, attrs=("n", "a_type", "b_type", "trans_b"), result=True,
            type_rule=_t_wgmma,
            doc="a_desc: u64 (or a vec<bf16|f16, 8> / vec<F8, 16> fragment), b_desc: u64, acc: vec<f32, n / 2>, scale_d: "
                "bool -> vec<f32, n / 2>: D (64 x n) = A * B + (scale_d ? acc : 0) by one warpgroup"),
    _hopper("wgmma.fence", "wgmma_fence", "wgmma", 0, doc="order accumulator accesses before wgmma"),
    _hopper("wgmma.commit_group", "wgmma_commit", "wgmma", 0,
            doc="close the warpgroup's pending wgmmas into a group"),
    _hopper("wgmma.wait_group", "wgmma_wait", "wgmma", 0, attrs=("n",), type_rule=count_attr,
            doc="wait until at most attr n of the warpgroup's wgmma groups are pending"),
    _hopper("wgmma.desc", "wgmma_desc", "wgmma", 1, attrs=("swizzle", "lbo", "sbo"), result=True,
            type_rule=_t_wgmma_desc,
            doc="p: ptr<T, shared> -> u64: the matrix descriptor of the tile at p (swizzle bytes 0/32/64/128, "
                "leading and stride byte offsets)"),
    _hopper("tma.load", "tma_load", "tma", None, type_rule=_t_tma_load,
            doc="dst: ptr<T, shared>, map: tensor_map, bar: ptr<u64, shared>, c0: i32, ...: copy the map's box "
                "at coordinates (c0 innermost, ...) into dst, completing on bar"),
    _hopper("tma.bulk_load", "bulk_load", "tma", 4, type_rule=_t_bulk_load,
            doc="dst: ptr<T, shared>, src: ptr<T>, bytes: u32 (a multiple of 16, both addresses 16-byte aligned), "
                "bar: ptr<u64, shared>: copy bytes of contiguous global memory into dst, completing on bar"),
    _hopper("tma.store", "tma_store", "tma", None, type_rule=_t_tma_store,
            doc="map: tensor_map, src: ptr<T, shared>, c0: i32, ...: copy the box at src to the map's tensor at "
                "coordinates (c0 innermost, ...), what lies outside the tensor not written; in the thread's bulk "
                "async-group"),
    _hopper("tma.store_commit", "tma_store_commit", "tma", 0,
            doc="close this thread's pending TMA stores into a bulk async-group"),
    _hopper("tma.store_wait", "tma_store_wait", "tma", 0, attrs=("n", "read"), type_rule=_t_tma_store_wait,
            doc="wait until at most attr n of this thread's bulk async-groups are pending (read: only their "
                "reading of shared memory)"),
    _hopper("mbarrier.init", "mbarrier_init", "mbarrier", 2, type_rule=_t_mbar, doc="bar, count: u32"),
    _hopper("mbarrier.arrive", "mbarrier_arrive", "mbarrier", 1, type_rule=_t_mbar, doc="bar"),
    _hopper("mbarrier.arrive_expect_tx", "mbarrier_arrive_expect_tx", "mbarrier", 2, type_rule=_t_mbar,
            doc="bar, bytes: u32"),
    _hopper("mbarrier.try_wait", "mbarrier_try_wait", "mbarrier", 2, result=True, type_rule=_t_mbar,
            doc="bar, parity: u32 -> bool: whether the phase of that parity has completed"),
    _hopper("mbarrier.wait", "mbarrier_wait", "mbarrier", 2, type_rule=_t_mbar,
            doc="bar, parity: u32: until that phase completes"),
    _hopper("setmaxnreg", "setmaxnreg", "setmaxnreg", 0, attrs=("n", "increase"), type_rule=_t_setmaxnreg,
            doc="the warpgroup's register budget a thread becomes attr n (increase: bool)"),
    _hopper("fence.proxy_async", "fence_proxy_async", "tma", 0,
            doc="order generic-proxy shared-memory accesses before async-proxy ones"),
    _hopper("cluster.ctarank", "cluster_ctarank", "cluster", 0, result=True, type_rule=_t_cluster,
            doc="-> u32: the block's rank in its cluster"),
    _hopper("cluster.arrive", "cluster_arrive", "cluster", 0,
            doc="arrive on the cluster barrier (release; every thread of the cluster's blocks)"),
    _hopper("cluster.wait", "cluster_wait", "cluster", 0,
            doc="wait until every thread of the cluster has arrived (acquire)"),
    _hopper("mbarrier.arrive_cluster", "mbarrier_arrive_cluster", "cluster", 2, type_rule=_t_cluster,
            doc="bar: ptr<u64, shared>, rank: u32: one arrival on the mbarrier at bar's offset in block rank "
                "of the cluster"),
    _hopper("tma.load_multicast", "tma_load_multicast", "cluster", None, type_rule=_t_tma_load_multicast,
            doc="dst, map, bar, mask: u16, c0: i32, ...: tma_load's box into dst of every block of the "
                "cluster whose rank's bit is set in mask, each completing on its bar"),
)

#: Named barriers (named_barrier.py): every NVIDIA arch, and the CPU target with warps of 32
#: (backends/cpu/named_barrier.py); not AMD.
NAMED_BARRIERS = tuple(
    Intrinsic(name=f"nvptx.barrier.{kind}", builtin=f"barrier_{kind}", feature="named_barrier", operands=1,
              attrs=("nthreads",), type_rule=_t_named_barrier, lower=f"{_HERE}.named_barrier:lower",
              emulate=f"{_CPU}.named_barrier:emulate", needs={"named_barrier": FEATURE_DOCS["named_barrier"]},
              doc=f"id: u32 (1 to 15): {what} named barrier id, attr nthreads threads (a multiple of 32) counting")
    for kind, what in (("sync", "arrive on and wait at"), ("arrive", "arrive on, without waiting,")))

register_intrinsics(*INTRINSICS, *NAMED_BARRIERS)

__all__ = ["FEATURE_DOCS", "INTRINSICS", "MMA_SHAPES", "NAMED_BARRIERS"]
