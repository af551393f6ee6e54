"""NVIDIA's named barriers (``barrier_sync`` / ``barrier_arrive``: backends/nvptx/named_barrier.py)
emulated on the CPU target, which has them whenever its warps have 32 lanes.

Each block has 16 counting barriers (ids 0 .. 15; the builtins use 1 .. 15), one i64 each in a
per-block area the scheduler zeroes before the block's threads start (``ThreadContext.nbar``,
scheduler.py): the arrivals of the current phase (bits 0-31) and the phase number (bits 32-63).
An arrival adds 1; the ``nthreads``-th completes the phase (count 0, phase + 1). ``barrier_sync``
arrives, then, unless it completed the phase, waits until the phase number changes: a spin point
(``CpuTarget.spin_point``), yielding to the block's other threads, so that a barrier no thread can
complete stops the launch with the CPU target's deadlock error. The threads of a block share one
host thread, so each update is atomic. The GPU counts arrivals a warp at a time (32 each, every
lane of the warp calling: ``.aligned``); counted a thread at a time, the phases complete at the same
points for such programs. A run-time id outside 1 .. 15 stops the launch (a trap), where a GPU's
behaviour is undefined.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir as ll

from .abi import load_thread

if TYPE_CHECKING:  # pragma: no cover
    from ..llvm.lower import LoweringContext
    from .target import CpuTarget

I32, I64 = ll.IntType(32), ll.IntType(64)

#: Named barriers a block has (PTX: 16).
COUNT = 16


def emulate(target: "CpuTarget", ctx: "LoweringContext", op: Any, args: list[ll.Value]) -> None:
    """The registry's CPU emulation of ``nvptx.barrier.sync`` / ``nvptx.barrier.arrive`` (module
    docstring); ``args[0]``: the barrier id (i32)."""
    name = op.attrs["intrinsic"]
    co = target._coroutine(ctx, name.removeprefix("nvptx.").replace(".", "_"))
    if co is None:
        return None
    b = ctx.b
    bid = args[0]
    if not isinstance(bid, ll.Constant):
        bad = b.or_(b.icmp_unsigned("==", bid, ll.Constant(I32, 0)), b.icmp_unsigned(">=", bid, ll.Constant(I32, COUNT)))
        with b.if_then(bad, likely=False):
            target.fault(ctx, "named barrier id outside 1 to 15")
    n = int(op.attrs["nthreads"])
    slot = b.gep(load_thread(b, co.ctx, "nbar"), [b.zext(b.and_(bid, ll.Constant(I32, COUNT - 1)), I64)],
                 source_etype=I64)
    s = b.load(slot, typ=I64)
    phase = b.lshr(s, ll.Constant(I64, 32))
    count = b.add(b.and_(s, ll.Constant(I64, 0xFFFFFFFF)), ll.Constant(I64, 1))
    full = b.icmp_unsigned(">=", count, ll.Constant(I64, n))
    b.store(b.select(full, b.shl(b.add(phase, ll.Constant(I64, 1)), ll.Constant(I64, 32)),
                     b.or_(b.shl(phase, ll.Constant(I64, 32)), count)), slot)
    if name.endswith("arrive"):
        return None
    head = b.append_basic_block("nbar.wait")
    again = b.append_basic_block("nbar.again")
    done = b.append_basic_block("nbar.done")
    b.branch(head)
    b.position_at_end(head)
    now = b.load(slot, typ=I64)
    b.cbranch(b.icmp_unsigned("!=", b.lshr(now, ll.Constant(I64, 32)), phase), done, again)
    b.position_at_end(again)
    target.spin_point(ctx, now)  # a yield to the block's other threads (module docstring)
    b.branch(head)
    b.position_at_end(done)
    return None


__all__ = ["COUNT", "emulate"]
