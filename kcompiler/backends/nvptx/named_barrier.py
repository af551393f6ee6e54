"""NVIDIA's named barriers (PTX ISA 8.x, "Parallel Synchronization and Communication Instructions:
bar, barrier"), written as inline PTX:

- ``barrier.sync.aligned a, b;`` (``bar.sync a, b``): the thread arrives on barrier ``a`` (0 to 15)
  and waits until ``b`` threads (a multiple of the warp size, 32) have arrived on it; then the
  barrier is reset for its next use.
- ``barrier.arrive.aligned a, b;`` (``bar.arrive a, b``): the thread arrives on barrier ``a`` without
  waiting (``b`` counts these arrivals and the waiting threads' together): a producer's signal to
  the threads that wait with ``barrier.sync``.

``.aligned``: every thread of the warp executes the same instruction (the builtins' contract, as
CUTLASS's ``NamedBarrier::sync`` / ``arrive`` issue it: ``bar.sync`` / ``bar.arrive``). The count is
kept in warps (each warp's arrival adds 32). Barrier 0 is the one ``barrier()`` (``__syncthreads``,
``bar.sync 0``) uses; the builtins refuse it (builtins_barrier.py). Both order the memory accesses of
the threads taking part (the PTX memory model's "bar{.cta}.sync/arrive ... release / acquire pattern").
Unlike an mbarrier (a try_wait loop on a phase in shared memory), the wait is the hardware's own
(``BAR.SYNC.DEFER_BLOCKING`` / ``BAR.ARV`` in SASS).
"""
from __future__ import annotations

from llvmlite import ir as ll

from ...ir.intrinsics import get
from ..errors import UnsupportedOnTarget
from ..llvm.lower import LoweringContext
from .tma import _asm


def lower(target, ctx: LoweringContext, op, args: list[ll.Value]) -> None:
    """``nvptx.barrier.sync`` / ``nvptx.barrier.arrive`` (operand: the barrier id, i32; attribute
    ``nthreads``) as ``barrier.{sync,arrive}.aligned id, nthreads;`` (an immediate id where it is a
    constant)."""
    name = op.attrs["intrinsic"]
    if not target.has(get(name).feature):
        raise UnsupportedOnTarget(f"{name} needs an NVIDIA target, not {target.arch}")
    kind = "sync" if name.endswith("sync") else "arrive"
    n = int(op.attrs["nthreads"])
    bid = args[0]
    if isinstance(bid, ll.Constant):
        _asm(ctx, f"barrier.{kind}.aligned {int(bid.constant)}, {n};", "", [])
    else:
        _asm(ctx, f"barrier.{kind}.aligned $0, {n};", "r", [bid])


__all__ = ["lower"]
