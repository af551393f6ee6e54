"""The memory layouts shared by CPU kernels, the native block scheduler and the Python runtime.

Three parties read these structures: the kernel code the CPU target emits (``target.py``), the block
scheduler generated as LLVM IR (``scheduler.py``) and the runtime that fills a launch from Python
(``runtime/cpu.py``, through ctypes). Each layout is one table below, so the three cannot disagree.

``ThreadContext``: one per emulated GPU thread; the kernel's hidden last parameter points at it.
``LaunchState``: one per launch; every host worker thread shares it (blocks are taken from
``next_block`` with an atomic add; the first error wins ``stop`` with a compare-and-swap).
"""
from __future__ import annotations

import ctypes

from llvmlite import ir as ll

_LL = {"ptr": ll.PointerType(), "i64": ll.IntType(64), "i32": ll.IntType(32),
       "i32x3": ll.ArrayType(ll.IntType(32), 3)}
_CT = {"ptr": ctypes.c_void_p, "i64": ctypes.c_int64, "i32": ctypes.c_int32, "i32x3": ctypes.c_int32 * 3}

#: Per-thread context. ``frame``: the coroutine frame (its handle); ``frame_buf``/``frame_cap``: the
#: thread's frame memory, reused from block to block; ``wait``: why the thread is suspended (WAIT_*);
#: ``site``: the barrier or warp operation it waits at (a location id, increasing in program order);
#: ``wop``/``wsrc``/``wval``: the warp operation posted (WARP_*), its source lane and this lane's value;
#: ``wres``: the result the scheduler writes back before resuming the thread. Spin-waits (the CPU
#: target's ``spin_point``): ``spin_site``/``spin_val`` the last atomic read in a loop (location id + 1,
#: 0: none; the value read), ``spin_n`` how many reads in a row found the value of the read before at
#: the same site, ``spin_total`` the reads since the thread last yielded there, ``spin`` 1 when the
#: thread yielded because the value it read had not changed (the scheduler's deadlock detection).
#: ``nbar``: the block's named barriers (16 i64, zeroed before each block: backends/cpu/named_barrier.py).
THREAD_FIELDS: list[tuple[str, str]] = [
    ("frame", "ptr"), ("frame_buf", "ptr"), ("frame_cap", "i64"), ("launch", "ptr"),
    ("shared", "ptr"), ("dyn_shared", "ptr"), ("wval", "i64"), ("wres", "i64"),
    ("thread_id", "i32x3"), ("block_id", "i32x3"), ("block_dim", "i32x3"), ("grid_dim", "i32x3"),
    ("lane_id", "i32"), ("warp_id", "i32"), ("wait", "i32"), ("site", "i32"),
    ("wop", "i32"), ("wsrc", "i32"), ("linear", "i32"), ("spin", "i32"),
    ("spin_val", "i64"), ("spin_site", "i32"), ("spin_n", "i32"), ("spin_total", "i32"), ("pad2", "i32"),
    ("nbar", "ptr"),
]

#: Per-launch state. ``start(args, ctx)``: the kernel's thunk (unpacks ``args``, a buffer of 8-byte
#: slots, and calls the kernel coroutine). ``table``/``ntable``: the bounds-check table, ``ntable``
#: pairs {i64 begin, i64 end} of host arrays. ``err_*``: the first error (ERR_*), who hit it and where
#: (``err_loc`` a location id; for a divergent barrier ``err_loc2``/``err_tid2`` the other thread's).
#: ``deadlock_seconds``: how long a block may make no progress before ERR_DEADLOCK (0: forever).
LAUNCH_FIELDS: list[tuple[str, str]] = [
    ("start", "ptr"), ("args", "ptr"), ("table", "ptr"), ("ntable", "i64"),
    ("static_shared", "i64"), ("dyn_shared", "i64"), ("next_block", "i64"), ("total_blocks", "i64"),
    ("err_addr", "i64"), ("err_nbytes", "i64"),
    ("grid", "i32x3"), ("block", "i32x3"), ("warp_size", "i32"), ("stop", "i32"),
    ("err_kind", "i32"), ("err_loc", "i32"), ("err_access", "i32"), ("err_loc2", "i32"),
    ("err_tid", "i32x3"), ("err_bid", "i32x3"), ("err_tid2", "i32x3"), ("deadlock_seconds", "i32"),
]

# ThreadContext.wait
WAIT_RUN, WAIT_BARRIER, WAIT_WARP, WAIT_DONE, WAIT_ERROR = 0, 1, 2, 3, 4
# ThreadContext.wop
WARP_SHUFFLE, WARP_BALLOT, WARP_ACTIVE_MASK, WARP_FIRST_LANE = 0, 1, 2, 3
# LaunchState.err_kind
ERR_NONE, ERR_BOUNDS, ERR_DIVERGENT_BARRIER, ERR_OUT_OF_MEMORY, ERR_MISALIGNED = 0, 1, 2, 3, 4
#: A device assert failed (``err_loc``: the assert); an array index out of range under check_bounds
#: (``err_addr``: the index, ``err_nbytes``: the array's length); no thread of a block could progress
#: (ERR_DEADLOCK, see scheduler.py).
ERR_ASSERT, ERR_INDEX, ERR_DEADLOCK = 5, 6, 7
#: A shared-memory access outside the block's shared memory under check_bounds (``err_addr``: its
#: offset from the start of the block's shared memory, ``err_nbytes``: its size).
ERR_SHARED = 8
#: An emulated instruction would fault on a GPU (``err_loc``: the call; the module's info says why,
#: by location: CpuTarget.fault).
ERR_FAULT = 9
# LaunchState.err_access
ACCESS_LOAD, ACCESS_STORE, ACCESS_ATOMIC = 0, 1, 2
ACCESS_NAMES = {ACCESS_LOAD: "load from", ACCESS_STORE: "store to", ACCESS_ATOMIC: "atomic on"}


def _struct(fields: list[tuple[str, str]]) -> ll.LiteralStructType:
    return ll.LiteralStructType([_LL[t] for _, t in fields])


THREAD_TYPE = _struct(THREAD_FIELDS)
LAUNCH_TYPE = _struct(LAUNCH_FIELDS)
_THREAD_INDEX = {n: i for i, (n, _) in enumerate(THREAD_FIELDS)}
_LAUNCH_INDEX = {n: i for i, (n, _) in enumerate(LAUNCH_FIELDS)}
_I32 = ll.IntType(32)


def _field_type(fields: list[tuple[str, str]], index: dict[str, int], name: str, dim: int | None) -> ll.Type:
    t = _LL[fields[index[name]][1]]
    return t.element if dim is not None else t


def thread_field(b: ll.IRBuilder, ctx: ll.Value, name: str, dim: int | None = None) -> ll.Value:
    """Address of ThreadContext field ``name`` (element ``dim`` of an xyz field) of ``*ctx``."""
    idx = [ll.Constant(_I32, 0), ll.Constant(_I32, _THREAD_INDEX[name])]
    if dim is not None:
        idx.append(ll.Constant(_I32, dim))
    return b.gep(ctx, idx, inbounds=True, source_etype=THREAD_TYPE)


def launch_field(b: ll.IRBuilder, st: ll.Value, name: str, dim: int | None = None) -> ll.Value:
    """Address of LaunchState field ``name`` (element ``dim`` of an xyz field) of ``*st``."""
    idx = [ll.Constant(_I32, 0), ll.Constant(_I32, _LAUNCH_INDEX[name])]
    if dim is not None:
        idx.append(ll.Constant(_I32, dim))
    return b.gep(st, idx, inbounds=True, source_etype=LAUNCH_TYPE)


def load_thread(b: ll.IRBuilder, ctx: ll.Value, name: str, dim: int | None = None) -> ll.Value:
    return b.load(thread_field(b, ctx, name, dim), typ=_field_type(THREAD_FIELDS, _THREAD_INDEX, name, dim))


def store_thread(b: ll.IRBuilder, ctx: ll.Value, name: str, value: ll.Value, dim: int | None = None) -> None:
    b.store(value, thread_field(b, ctx, name, dim))


def load_launch(b: ll.IRBuilder, st: ll.Value, name: str, dim: int | None = None) -> ll.Value:
    return b.load(launch_field(b, st, name, dim), typ=_field_type(LAUNCH_FIELDS, _LAUNCH_INDEX, name, dim))


def store_launch(b: ll.IRBuilder, st: ll.Value, name: str, value: ll.Value, dim: int | None = None) -> None:
    b.store(value, launch_field(b, st, name, dim))


class LaunchState(ctypes.Structure):
    """ctypes mirror of :data:`LAUNCH_FIELDS` (the runtime fills one per launch)."""

    _fields_ = [(n, _CT[t]) for n, t in LAUNCH_FIELDS]


class BoundsEntry(ctypes.Structure):
    """One host array of a launch under ``check_bounds``: bytes [begin, end)."""

    _fields_ = [("begin", ctypes.c_uint64), ("end", ctypes.c_uint64)]
