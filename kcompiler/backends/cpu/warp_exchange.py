"""What the CPU target's emulations of warp-wide instructions share (warp_matrix.py: mma.sync,
ldmatrix; mfma.py: MFMA): a warp's lanes exchanging values through their thread contexts, per-thread
scratch buffers, and internal helper functions emitted once per module."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as ll

from .abi import THREAD_TYPE, WARP_ACTIVE_MASK, WARP_SHUFFLE, load_thread

if TYPE_CHECKING:  # pragma: no cover
    from ..llvm.lower import LoweringContext
    from .target import CpuTarget

I64 = ll.IntType(64)


def exchange(target: "CpuTarget", ctx: "LoweringContext", what: str, value: ll.Value,
             helper: ll.Function, args: list[ll.Value]) -> None:
    """Every lane of the warp posts the i64 ``value`` and meets the others (one warp operation); then
    ``helper(thread_context, lane, *args)`` runs, reading the other lanes' posted values (their
    ThreadContexts lie in one array, by linear thread id, and ``wval`` keeps the posted value until
    the lane's next warp operation); then the lanes meet again, posting the same value, so that none
    posts another before every lane has read. Two suspensions, where a shuffle per word would take 8
    to 16."""
    co = target._coroutine(ctx, what)
    if co is None:  # a device function that was not inlined: the CPU target rejects it if called
        return
    lane = target.special(ctx, "lane_id", "x")
    target._warp_op(ctx, what, WARP_SHUFFLE, value, lane)
    ctx.b.call(helper, [co.ctx, lane] + args)
    # the same value again: lanes resumed before this one have posted here already, and the others
    # still read it
    target._warp_op(ctx, what, WARP_ACTIVE_MASK, value)


def posted(b: ll.IRBuilder, tctx: ll.Value, lane: ll.Value, src: ll.Value) -> ll.Value:
    """The i64 that lane ``src`` of this thread's warp posted, from this thread's context ``tctx``."""
    return load_thread(b, b.gep(tctx, [b.sext(b.sub(src, lane), I64)], source_etype=THREAD_TYPE), "wval")


def buffer(ctx: "LoweringContext", name: str, t: ll.Type, n: int) -> ll.Value:
    """A per-thread array of ``n`` ``t`` in the kernel's frame, one per name, shared by the ops (each
    op's exchange ends before the next op starts)."""
    key = "cpu.warp_matrix." + name
    if key not in ctx.state:
        ctx.state[key] = ctx.lowering.opaque(ctx.alloca(ll.ArrayType(t, n), name="kc." + name))
    return ctx.state[key]


def function(m: ll.Module, name: str, args: list[ll.Type]) -> tuple[ll.Function, bool]:
    """The internal ``void name(args)`` of module ``m`` and whether it is new (its body still to be
    written)."""
    g = m.globals.get(name)
    if g is not None:
        return g, False
    fn = ll.Function(m, ll.FunctionType(ll.VoidType(), args), name)
    fn.linkage = "internal"
    return fn, True


__all__ = ["buffer", "exchange", "function", "posted"]
