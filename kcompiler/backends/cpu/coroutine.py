"""GPU threads as LLVM coroutines: the prologue, suspension points and epilogue of a CPU kernel.

A CPU kernel is a switch-resumed LLVM coroutine (``presplitcoroutine``; LLVM's CoroSplit pass, part of
every O0-O3 pipeline, splits it into a ramp, a resume and a destroy function). Calling the kernel runs
its thread until the first suspension and stores the coroutine handle in ``ThreadContext.frame``; the
scheduler (``scheduler.py``) resumes it with ``llvm.coro.resume``. The thread records why it stops in
``ThreadContext.wait`` before each suspension; at its end it records WAIT_DONE (or WAIT_ERROR after a
failed bounds check) and suspends for the last time, so the frame is never destroyed by LLVM: the
thread's frame memory (``frame_buf``) belongs to the scheduler and is reused from block to block.

Reference: https://llvm.org/docs/Coroutines.html (switched-resume lowering).
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir as ll

from .abi import WAIT_DONE, WAIT_ERROR, load_thread, store_thread

I1, I8, I32, I64 = ll.IntType(1), ll.IntType(8), ll.IntType(32), ll.IntType(64)
PTR = ll.PointerType()
FRAME_ALLOC = "__kc_frame_alloc"
#: The least alignment of a thread's frame buffer: a cache line, enough for any AVX-512 spill.
FRAME_ALIGN = 64


class TokenType(ll.Type):
    """LLVM's ``token`` type (llvmlite has none); its only constant is ``none``."""

    null = "none"

    def _to_string(self) -> str:
        return "token"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenType)

    def __hash__(self) -> int:
        return hash(TokenType)


TOKEN = TokenType()


def _declare(module: ll.Module, name: str, ret: ll.Type, args: list[ll.Type]) -> ll.Function:
    g = module.globals.get(name)
    if g is None:
        g = ll.Function(module, ll.FunctionType(ret, args), name)
    return g


@dataclass
class Coroutine:
    """The blocks of one kernel coroutine that hooks branch to."""

    ctx: ll.Value            #: the ThreadContext pointer (the kernel's hidden parameter)
    done: ll.Block           #: the thread returned: record WAIT_DONE, final suspend
    error: ll.Block          #: a check failed: record WAIT_ERROR, final suspend
    suspend: ll.Block        #: where every suspension returns to the scheduler (coro.end; ret)
    cleanup: ll.Block        #: the destroy path (never taken: frames are not destroyed)


def begin(fn: ll.Function, b: ll.IRBuilder, ctx: ll.Value) -> Coroutine:
    """Emit the coroutine prologue at ``b`` (the kernel's first block after its allocas) and the
    shared epilogue blocks. ``fn`` gets the ``presplitcoroutine`` attribute."""
    m = fn.module
    set.add(fn.attributes, "presplitcoroutine")  # llvmlite's attribute list predates coroutines
    coro_id = _declare(m, "llvm.coro.id", TOKEN, [I32, PTR, PTR, PTR])
    coro_size = _declare(m, "llvm.coro.size.i64", I64, [])
    coro_align = _declare(m, "llvm.coro.align.i64", I64, [])
    coro_begin = _declare(m, "llvm.coro.begin", PTR, [TOKEN, PTR])
    null = ll.Constant(PTR, None)
    cid = b.call(coro_id, [ll.Constant(I32, 16), null, null, null], name="coro.id")
    size = b.call(coro_size, [], name="coro.size")
    # The frame's alignment is what CoroSplit chose for its spills (64 for AVX-512 vectors): LLVM
    # stores to the frame with aligned moves, so a malloc'd (16-aligned) frame would fault.
    align = b.call(coro_align, [], name="coro.align")
    mem = b.call(frame_alloc_function(m), [ctx, size, align], name="coro.mem")
    hdl = b.call(coro_begin, [cid, mem], name="coro.handle")
    store_thread(b, ctx, "frame", hdl)

    co = Coroutine(ctx, fn.append_basic_block("kc.done"), fn.append_basic_block("kc.error"),
                   fn.append_basic_block("kc.suspend"), fn.append_basic_block("kc.cleanup"))
    final = fn.append_basic_block("kc.final")
    trap = fn.append_basic_block("kc.resumed_after_end")
    e = ll.IRBuilder(co.done)
    store_thread(e, ctx, "wait", ll.Constant(I32, WAIT_DONE))
    e.branch(final)
    e.position_at_end(co.error)
    store_thread(e, ctx, "wait", ll.Constant(I32, WAIT_ERROR))
    e.branch(final)
    e.position_at_end(final)
    s = e.call(_declare(m, "llvm.coro.suspend", I8, [TOKEN, I1]), [ll.Constant(TOKEN, None), ll.Constant(I1, 1)])
    sw = e.switch(s, co.suspend)
    sw.add_case(ll.Constant(I8, 0), trap)
    sw.add_case(ll.Constant(I8, 1), co.cleanup)
    e.position_at_end(trap)
    e.unreachable()
    e.position_at_end(co.cleanup)
    e.branch(co.suspend)
    e.position_at_end(co.suspend)
    e.call(_declare(m, "llvm.coro.end", ll.VoidType(), [PTR, I1, TOKEN]),
           [hdl, ll.Constant(I1, 0), ll.Constant(TOKEN, None)])
    e.ret_void()
    return co


def suspend(co: Coroutine, b: ll.IRBuilder, wait: int, site: int) -> None:
    """Record ``wait`` and ``site`` in the thread's context and suspend; ``b`` continues in the block
    the scheduler resumes into."""
    store_thread(b, co.ctx, "site", ll.Constant(I32, site))
    store_thread(b, co.ctx, "wait", ll.Constant(I32, wait))
    s = b.call(_declare(b.module, "llvm.coro.suspend", I8, [TOKEN, I1]),
               [ll.Constant(TOKEN, None), ll.Constant(I1, 0)])
    resumed = b.append_basic_block("resumed")
    sw = b.switch(s, co.suspend)
    sw.add_case(ll.Constant(I8, 0), resumed)
    sw.add_case(ll.Constant(I8, 1), co.cleanup)
    b.position_at_end(resumed)


def frame_alloc_function(m: ll.Module) -> ll.Function:
    """``ptr __kc_frame_alloc(ptr ctx, i64 size, i64 align)``: the thread's frame buffer, grown when
    too small, aligned to ``align`` (at least :data:`FRAME_ALIGN`: the buffer is reused by every kernel
    the worker runs). The scheduler frees the buffers when the worker is done."""
    g = m.globals.get(FRAME_ALLOC)
    if g is not None:
        return g
    fn = ll.Function(m, ll.FunctionType(PTR, [PTR, I64, I64]), FRAME_ALLOC)
    fn.linkage = "internal"
    ctx, size, align = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    grow = fn.append_basic_block("grow")
    have = fn.append_basic_block("have")
    fail = fn.append_basic_block("fail")
    cap = load_thread(b, ctx, "frame_cap")
    # Buffers are FRAME_ALIGN-aligned; a frame wanting more (explicitly over-aligned locals) always
    # gets a fresh buffer.
    fits = b.and_(b.icmp_unsigned(">=", cap, size), b.icmp_unsigned("<=", align, ll.Constant(I64, FRAME_ALIGN)))
    b.cbranch(fits, have, grow)
    b.position_at_end(grow)
    b.call(_declare(m, "free", ll.VoidType(), [PTR]), [load_thread(b, ctx, "frame_buf")])
    al = b.select(b.icmp_unsigned("<", align, ll.Constant(I64, FRAME_ALIGN)), ll.Constant(I64, FRAME_ALIGN), align)
    rounded = b.and_(b.add(size, b.sub(al, ll.Constant(I64, 1))), b.neg(al))  # C11: a multiple of al
    new = b.call(_declare(m, "aligned_alloc", PTR, [I64, I64]), [al, rounded])
    store_thread(b, ctx, "frame_buf", new)
    store_thread(b, ctx, "frame_cap", size)
    b.cbranch(b.icmp_unsigned("==", new, ll.Constant(PTR, None)), fail, have)
    b.position_at_end(fail)
    b.call(_declare(m, "llvm.trap", ll.VoidType(), []), [])  # out of host memory for a thread's frame
    b.unreachable()
    b.position_at_end(have)
    b.ret(load_thread(b, ctx, "frame_buf"))
    return fn
