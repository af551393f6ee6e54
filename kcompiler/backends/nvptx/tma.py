"""The Tensor Memory Accelerator (TMA), the mbarriers its copies complete on, and the async-proxy fence,
on NVIDIA sm_90, written as inline PTX.

The instructions (PTX ISA 8.x):

- ``cp.async.bulk.tensor.Nd.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [map, {c0, ..}],
  [mbar];`` (section 9.7.9.25.5.2 "cp.async.bulk.tensor"; sm_90, PTX 8.0): copies the box the tensor map
  describes (CUtensorMap, made by ``cuTensorMapEncodeTiled``; kcompiler.runtime.tensormap) whose first
  element is at coordinates (c0 innermost, c1, ...) of the global tensor into shared memory at dst,
  laid out (and swizzled) as the map says; elements outside the tensor are written as zeros. When the
  bytes have landed the copy performs complete-tx of the box's full byte count on the mbarrier. ``map``
  is the generic address of the map, a grid-constant kernel parameter here (``.param`` space made
  generic by ``cvta.param``, which LLVM emits for a ``nvvm.grid_constant`` byval parameter).
- ``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size, [mbar];``
  (PTX ISA, "Data Movement and Conversion Instructions: cp.async.bulk"; sm_90, PTX 8.0; the same
  alignment rules in libcu++'s cuda::ptx::cp_async_bulk notes): the non-tensor bulk copy: ``size`` bytes (a
  multiple of 16) of contiguous global memory at src (16-byte aligned) into shared memory at dst
  (16-byte aligned), then complete-tx of ``size`` bytes on the mbarrier. No tensor map: the copy a
  kernel issues for a contiguous span (e.g. a block's rows of a weight matrix).
- ``cp.async.bulk.tensor.Nd.global.shared::cta.bulk_group [map, {c0, ..}], [src];`` (cp.async.bulk.tensor's section;
  sm_90, PTX 8.0): the store, shared -> global: the box at src (laid out and swizzled as the map
  says) is written to the tensor at coordinates (c0, ...); elements of the box outside the tensor
  are not written. It completes in the issuing thread's bulk async-groups:
  ``cp.async.bulk.commit_group;`` closes the thread's pending bulk copies into a group and
  ``cp.async.bulk.wait_group.read N;`` waits until at most N of its groups are still reading their
  shared-memory source (``.read``: the source may then be rewritten; without it, until the writes
  are done) (section 9.7.9.25.4 "cp.async.bulk.commit_group / wait_group"). The source's writes by
  other threads must be ordered before the store by ``fence.proxy.async.shared::cta`` in each writer
  and a barrier.
- ``mbarrier.init.shared::cta.b64 [bar], count;``, ``mbarrier.arrive.shared::cta.b64 _, [bar];``,
  ``mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], tx;`` (arrive and add tx to the bytes the
  current phase waits for) and ``mbarrier.try_wait.parity.shared::cta.b64 p, [bar], parity;`` (true once
  the phase of that parity has completed; a fresh barrier is in phase 0, so waiting on parity 1
  returns at once) (section 9.7.13.15 "mbarrier"; expect_tx sm_90, PTX 8.0).
- ``fence.proxy.async.shared::cta;`` (section 9.7.13.4 "membar / fence"): orders this thread's
  generic-proxy accesses to shared memory (ordinary loads and stores, mbarrier.init) before later
  async-proxy ones (TMA, wgmma reading the same memory).
"""
from __future__ import annotations

from llvmlite import ir as ll

from ..llvm.lower import LoweringContext

_I32, _I64 = ll.IntType(32), ll.IntType(64)

#: Alignment (bytes) TMA destinations get in shared memory: a 128-byte swizzle repeats every 1024
#: bytes, and wgmma descriptors assume tiles start at a multiple of that (base offset 0).
SHARED_ALIGN = 1024


def _shared(ctx: LoweringContext, p: ll.Value) -> ll.Value:
    return ctx.b.ptrtoint(p, _I32)


def _asm(ctx: LoweringContext, text: str, cons: str, args: list[ll.Value], ret: ll.Type | None = None):
    ftype = ll.FunctionType(ret or ll.VoidType(), [a.type for a in args])
    call = ctx.b.asm(ftype, text, cons + (",~{memory}" if cons else "~{memory}"), args, side_effect=True)
    return call


def tma_load(ctx: LoweringContext, dst: ll.Value, tensor_map: ll.Value, bar: ll.Value,
             coords: list[ll.Value]) -> None:
    """``cp.async.bulk.tensor.<len(coords)>d`` global -> shared, completing on ``bar`` (module
    docstring); ``coords`` are i32, innermost first."""
    n = len(coords)
    cs = ", ".join(f"${3 + k}" for k in range(n))
    text = (f"cp.async.bulk.tensor.{n}d.shared::cluster.global.mbarrier::complete_tx::bytes "
            f"[$0], [$1, {{{cs}}}], [$2];")
    m = ctx.b.ptrtoint(tensor_map, _I64)
    _asm(ctx, text, ",".join(["r", "l", "r"] + ["r"] * n), [_shared(ctx, dst), m, _shared(ctx, bar)] + coords)


def bulk_load(ctx: LoweringContext, dst: ll.Value, src: ll.Value, nbytes: ll.Value, bar: ll.Value) -> None:
    """``cp.async.bulk`` global -> shared of ``nbytes`` (i32) bytes, completing on ``bar`` (module
    docstring)."""
    text = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$0], [$1], $2, [$3];"
    # a global pointer's generic address is its global address (as cp.async's source, mma.py)
    _asm(ctx, text, "r,l,r,r", [_shared(ctx, dst), ctx.b.ptrtoint(src, _I64), nbytes, _shared(ctx, bar)])


def tma_store(ctx: LoweringContext, tensor_map: ll.Value, src: ll.Value, coords: list[ll.Value]) -> None:
    """``cp.async.bulk.tensor.<len(coords)>d`` shared -> global, into the thread's bulk async-group
    (module docstring); ``coords`` are i32, innermost first."""
    n = len(coords)
    cs = ", ".join(f"${2 + k}" for k in range(n))
    text = f"cp.async.bulk.tensor.{n}d.global.shared::cta.bulk_group [$0, {{{cs}}}], [$1];"
    m = ctx.b.ptrtoint(tensor_map, _I64)
    _asm(ctx, text, ",".join(["l", "r"] + ["r"] * n), [m, _shared(ctx, src)] + coords)


def bulk_commit(ctx: LoweringContext) -> None:
    """``cp.async.bulk.commit_group``."""
    _asm(ctx, "cp.async.bulk.commit_group;", "", [])


def bulk_wait(ctx: LoweringContext, n: int, read: bool) -> None:
    """``cp.async.bulk.wait_group(.read) n``."""
    _asm(ctx, f"cp.async.bulk.wait_group{'.read' if read else ''} {int(n)};", "", [])


def mbarrier_init(ctx: LoweringContext, bar: ll.Value, count: ll.Value) -> None:
    """``mbarrier.init.shared::cta.b64 [bar], count``."""
    _asm(ctx, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r", [_shared(ctx, bar), count])


def mbarrier_arrive(ctx: LoweringContext, bar: ll.Value) -> None:
    """``mbarrier.arrive.shared::cta.b64 _, [bar]`` (release, CTA scope)."""
    _asm(ctx, "mbarrier.arrive.shared::cta.b64 _, [$0];", "r", [_shared(ctx, bar)])


def mbarrier_arrive_expect_tx(ctx: LoweringContext, bar: ll.Value, nbytes: ll.Value) -> None:
    """``mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], nbytes``."""
    _asm(ctx, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r", [_shared(ctx, bar), nbytes])


def mbarrier_try_wait(ctx: LoweringContext, bar: ll.Value, parity: ll.Value) -> ll.Value:
    """``mbarrier.try_wait.parity``: an i32, 1 once the phase of ``parity`` has completed."""
    text = ("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\n\t"
            "selp.u32 $0, 1, 0, p;\n\t}")
    return _asm(ctx, text, "=r,r,r", [_shared(ctx, bar), parity], _I32)


def mbarrier_wait(ctx: LoweringContext, bar: ll.Value, parity: ll.Value) -> None:
    """Spin on ``mbarrier.try_wait.parity`` until the phase of ``parity`` has completed (the label is
    local to the braces, so the block may appear many times in one function)."""
    text = ("{\n\t.reg .pred p;\n\tkc_mbar_wait:\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [$0], $1;\n\t"
            "@!p bra kc_mbar_wait;\n\t}")
    _asm(ctx, text, "r,r", [_shared(ctx, bar), parity])


def fence_proxy_async(ctx: LoweringContext) -> None:
    """``fence.proxy.async.shared::cta``."""
    _asm(ctx, "fence.proxy.async.shared::cta;", "", [])
