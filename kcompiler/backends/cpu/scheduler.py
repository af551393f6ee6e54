"""The native block scheduler of the CPU target, generated as LLVM IR.

Every GPU thread of a block is a coroutine (see ``target.py``): it runs until it reaches a barrier, a
warp operation or its end, records why it stopped in its ThreadContext (``abi.py``) and suspends.
``kc_run_blocks(LaunchState*)`` is what each host worker thread calls; it takes blocks from the
launch's atomic counter until none are left (or an error or Ctrl-C, through ``runtime/interrupt.py``,
set the launch's ``stop`` flag, which is checked before each block and after each thread's start and
resumption) and, per block:

1. starts every thread (the kernel's thunk runs the coroutine to its first suspension);
2. repeats until every thread has finished:
   - in each warp whose lanes wait at warp operations, takes the lanes waiting at the lowest site
     (sites number operations in program order, so lanes that diverged into a branch go before lanes
     waiting after it: the min-PC reconvergence heuristic) as the active lanes, computes every active
     lane's result (shuffle, ballot, active mask, first lane) and makes them runnable;
   - a thread that yielded (``nanosleep``: a spin loop backing off, or a spin point: an atomic read in
     a while loop that keeps finding the same value, ``CpuTarget.spin_point``) is runnable again at
     once; a warp with such a lane does not release its warp operation yet (the lane may be on its way);
   - when no warp operation is pending and every live thread waits at a barrier, releases the barrier
     (threads that returned early no longer take part, as on sm_70+); live threads waiting at different
     barriers are a divergent barrier, which a GPU would hang on or run incorrectly: the launch stops
     with that error;
   - resumes the runnable threads in order of their linear thread id; a round in which every thread
     resumed came back to a spin point having read an unchanged value is stalled, and stalled rounds
     lasting the launch's ``deadlock_seconds`` (``time()``, looked at every CLOCK_EVERY rounds) stop
     the launch with ERR_DEADLOCK.

All threads of a block run on one host thread, so shared memory needs no host atomics; blocks run in
parallel on the worker threads, so global atomics are real host atomics.

The module has no kernel in it: one copy is JIT-compiled per process and serves every kernel (a
kernel's thunk is reached through ``LaunchState.start``).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import llvmlite.binding as llvm
from llvmlite import ir as ll

from .abi import (ERR_DEADLOCK, ERR_DIVERGENT_BARRIER, ERR_OUT_OF_MEMORY, THREAD_TYPE, WAIT_BARRIER, WAIT_RUN,
                  WAIT_WARP, WARP_ACTIVE_MASK, WARP_BALLOT, WARP_SHUFFLE,
                  launch_field, load_launch, load_thread, store_launch, store_thread)

I1, I8, I32, I64 = ll.IntType(1), ll.IntType(8), ll.IntType(32), ll.IntType(64)
PTR = ll.PointerType()
RUN_BLOCKS = "kc_run_blocks"
#: The signature of a kernel's thunk: start(ptr args, ptr thread_context).
START_TYPE = ll.FunctionType(ll.VoidType(), [PTR, PTR])
#: Alignment of a block's shared memory (bytes).
SHARED_ALIGN = 256



@contextmanager
def counted_loop(b: ll.IRBuilder, lo: ll.Value, hi: ll.Value, name: str = "i") -> Iterator[ll.Value]:
    """``for i in [lo, hi)`` (unsigned compare) at ``b``'s position; yields i, and leaves ``b`` after
    the loop. The body may branch out of the loop (a terminated body block does not loop back)."""
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(lo.type, name=name)
    i.add_incoming(lo, pre)
    b.cbranch(b.icmp_unsigned("<", i, hi), body, done)
    b.position_at_end(body)
    yield i
    if not b.block.is_terminated:
        i.add_incoming(b.add(i, ll.Constant(lo.type, 1)), b.block)
        b.branch(head)
    b.position_at_end(done)

class FunctionPointer(ll.types._TypedPointerType):
    """A pointer that llvmlite may call through (it needs the function type) but prints as ``ptr``."""

    def _to_string(self) -> str:
        return "ptr"


def c32(v: int) -> ll.Constant:
    return ll.Constant(I32, v)


def c64(v: int) -> ll.Constant:
    return ll.Constant(I64, v)


class Var:
    """A mutable local: an entry-block alloca that mem2reg turns into SSA values."""

    def __init__(self, fb: "FunctionBuilder", t: ll.Type, init: ll.Value, name: str):
        self.b, self.t = fb.b, t
        self.slot = fb.entry_builder.alloca(t, name=name)
        self.b.store(init, self.slot)

    def get(self) -> ll.Value:
        return self.b.load(self.slot, typ=self.t)

    def set(self, v: ll.Value) -> None:
        self.b.store(v, self.slot)


class FunctionBuilder:
    """An IRBuilder with structured helpers (counted loops, if) for writing runtime code."""

    def __init__(self, fn: ll.Function):
        self.fn = fn
        entry = fn.append_basic_block("entry")
        self.entry_builder = ll.IRBuilder(entry)
        self.b = ll.IRBuilder(fn.append_basic_block("start"))

    def finish(self) -> None:
        self.entry_builder.branch(self.fn.blocks[1])

    def var(self, t: ll.Type, init: ll.Value, name: str = "") -> Var:
        return Var(self, t, init, name)

    def loop(self, lo: ll.Value, hi: ll.Value, name: str = "i") -> Iterator[ll.Value]:
        """:func:`counted_loop` at this scheduler's builder."""
        return counted_loop(self.b, lo, hi, name)

    @contextmanager
    def if_(self, cond: ll.Value, name: str = "if") -> Iterator[None]:
        b = self.b
        then = b.append_basic_block(f"{name}.then")
        after = b.append_basic_block(f"{name}.end")
        b.cbranch(cond, then, after)
        b.position_at_end(then)
        yield
        if not b.block.is_terminated:
            b.branch(after)
        b.position_at_end(after)


def declare(module: ll.Module, name: str, ret: ll.Type, args: list[ll.Type]) -> ll.Function:
    g = module.globals.get(name)
    if g is None:
        g = ll.Function(module, ll.FunctionType(ret, args), name)
    return g


def claim_error(b: ll.IRBuilder, launch: ll.Value) -> ll.Value:
    """i1: whether this thread is the first to stop the launch (it then fills the ``err_*`` fields).
    Later errors are dropped: the first one is reported."""
    pair = b.cmpxchg(launch_field(b, launch, "stop"), c32(0), c32(1), "acq_rel", "monotonic")
    return b.extract_value(pair, 1)


def launch_stopped(b: ll.IRBuilder, launch: ll.Value) -> ll.Value:
    v = b.load_atomic(launch_field(b, launch, "stop"), "monotonic", 4, typ=I32)
    return b.icmp_unsigned("!=", v, c32(0))


#: Stalled rounds between two looks at the clock (deadlock detection).
CLOCK_EVERY = 1024


def _deadlock_check(fb: FunctionBuilder, L: ll.Value, stalled: ll.Value, rounds: Var, start: Var,
                    n: ll.Value, ctx_at, time_fn: ll.Function, out: ll.Block) -> None:
    """After a scheduling round: count stalled rounds in a row; once they have lasted the launch's
    ``deadlock_seconds`` (looked at every CLOCK_EVERY rounds; 0: never), stop the launch with
    ERR_DEADLOCK naming the first and last spinning thread, their sites, how many spin
    (``err_nbytes``) and how many wait at a barrier or warp operation (``err_addr``)."""
    b = fb.b
    null = ll.Constant(PTR, None)
    limit = b.sext(load_launch(b, L, "deadlock_seconds"), I64)
    with fb.if_(b.not_(stalled), "progress"):
        rounds.set(c64(0))
    with fb.if_(stalled, "stall"):
        r = b.add(rounds.get(), c64(1))
        rounds.set(r)
        with fb.if_(b.icmp_unsigned("==", r, c64(1)), "stall.first"):
            start.set(b.call(time_fn, [null]))
        look = b.and_(b.icmp_unsigned("==", b.and_(r, c64(CLOCK_EVERY - 1)), c64(0)),
                      b.icmp_signed(">", limit, c64(0)))
        with fb.if_(look, "stall.look"):
            late = b.icmp_signed(">=", b.sub(b.call(time_fn, [null]), start.get()), limit)
            with fb.if_(late, "deadlock"):
                with fb.if_(claim_error(b, L), "deadlock.claim"):
                    spinning = fb.var(I64, c64(0), "spinning")
                    waiting = fb.var(I64, c64(0), "waiting")
                    first = fb.var(I32, c32(-1), "first_spinning")
                    last = fb.var(I32, c32(0), "last_spinning")
                    with fb.loop(c32(0), n, "t") as t:
                        c = ctx_at(t)
                        w = load_thread(b, c, "wait")
                        spins = b.icmp_unsigned("==", w, c32(WAIT_RUN))
                        waits = b.or_(b.icmp_unsigned("==", w, c32(WAIT_BARRIER)),
                                      b.icmp_unsigned("==", w, c32(WAIT_WARP)))
                        spinning.set(b.add(spinning.get(), b.zext(spins, I64)))
                        waiting.set(b.add(waiting.get(), b.zext(waits, I64)))
                        is_first = b.and_(spins, b.icmp_signed("<", first.get(), c32(0)))
                        first.set(b.select(is_first, t, first.get()))
                        last.set(b.select(spins, t, last.get()))
                    c0, c1 = ctx_at(first.get()), ctx_at(last.get())
                    store_launch(b, L, "err_kind", c32(ERR_DEADLOCK))
                    store_launch(b, L, "err_loc", load_thread(b, c0, "site"))
                    store_launch(b, L, "err_loc2", load_thread(b, c1, "site"))
                    store_launch(b, L, "err_nbytes", spinning.get())
                    store_launch(b, L, "err_addr", waiting.get())
                    for d in range(3):
                        store_launch(b, L, "err_tid", load_thread(b, c0, "thread_id", d), d)
                        store_launch(b, L, "err_tid2", load_thread(b, c1, "thread_id", d), d)
                        store_launch(b, L, "err_bid", load_thread(b, c0, "block_id", d), d)
                b.branch(out)


def build_scheduler_module(triple: str, data_layout: str) -> ll.Module:
    """The LLVM module holding ``kc_run_blocks(ptr launch_state) -> void`` (see the module doc)."""
    m = ll.Module(name="kc_cpu_scheduler")
    m.triple, m.data_layout = triple, data_layout
    calloc = declare(m, "calloc", PTR, [I64, I64])
    aligned_alloc = declare(m, "aligned_alloc", PTR, [I64, I64])
    free = declare(m, "free", ll.VoidType(), [PTR])
    resume = declare(m, "llvm.coro.resume", ll.VoidType(), [PTR])
    cttz = declare(m, "llvm.cttz.i64", I64, [I64, I1])

    fn = ll.Function(m, ll.FunctionType(ll.VoidType(), [PTR]), RUN_BLOCKS)
    fn.attributes.add("nounwind")
    L = fn.args[0]
    L.name = "launch"
    fb = FunctionBuilder(fn)
    b = fb.b

    out = fn.append_basic_block("out")
    blocks = fn.append_basic_block("blocks")

    bdim = [load_launch(b, L, "block", d) for d in range(3)]
    gdim = [load_launch(b, L, "grid", d) for d in range(3)]
    n = b.mul(b.mul(bdim[0], bdim[1]), bdim[2], name="nthreads")
    ws = load_launch(b, L, "warp_size")
    nwarps = b.udiv(b.add(n, b.sub(ws, c32(1))), ws, name="nwarps")
    static = b.and_(b.add(load_launch(b, L, "static_shared"), c64(15)), c64(~15))
    # Shared memory is SHARED_ALIGN-aligned, as a GPU's is, and a multiple of it (C11 aligned_alloc).
    shbytes = b.and_(b.add(b.add(static, load_launch(b, L, "dyn_shared")), c64(2 * SHARED_ALIGN - 1)),
                     c64(-SHARED_ALIGN))
    total = load_launch(b, L, "total_blocks")
    args = load_launch(b, L, "args")
    start = b.load(launch_field(b, L, "start"), typ=FunctionPointer(START_TYPE))

    stall_rounds = fb.var(I64, c64(0), "stall_rounds")
    stall_start = fb.var(I64, c64(0), "stall_start")
    time_fn = declare(m, "time", I64, [PTR])
    ctx_size = THREAD_TYPE.get_abi_size(llvm.create_target_data(data_layout))
    ctxs = b.call(calloc, [b.zext(n, I64), c64(ctx_size)], name="ctxs")
    shared = b.call(aligned_alloc, [c64(SHARED_ALIGN), shbytes], name="shared")
    ok = b.and_(b.icmp_unsigned("!=", ctxs, ll.Constant(PTR, None)),
                b.icmp_unsigned("!=", shared, ll.Constant(PTR, None)))
    oom = fn.append_basic_block("oom")
    init = fn.append_basic_block("init")
    b.cbranch(ok, init, oom)

    b.position_at_end(oom)
    with fb.if_(claim_error(b, L)):
        store_launch(b, L, "err_kind", c32(ERR_OUT_OF_MEMORY))
    b.branch(out)

    def ctx_at(i: ll.Value) -> ll.Value:
        return b.gep(ctxs, [i], inbounds=True, source_etype=THREAD_TYPE)

    b.position_at_end(init)
    dyn_base = b.gep(shared, [static], source_etype=I8)
    with fb.loop(c32(0), n, "t") as t:
        c = ctx_at(t)
        bxy = b.mul(bdim[0], bdim[1])
        tid = [b.urem(t, bdim[0]), b.urem(b.udiv(t, bdim[0]), bdim[1]), b.udiv(t, bxy)]
        for d in range(3):
            store_thread(b, c, "thread_id", tid[d], d)
            store_thread(b, c, "block_dim", bdim[d], d)
            store_thread(b, c, "grid_dim", gdim[d], d)
        store_thread(b, c, "lane_id", b.urem(t, ws))
        store_thread(b, c, "warp_id", b.udiv(t, ws))
        store_thread(b, c, "linear", t)
        store_thread(b, c, "launch", L)
        store_thread(b, c, "shared", shared)
        store_thread(b, c, "dyn_shared", dyn_base)
    b.branch(blocks)

    # --- the loop over blocks -------------------------------------------------------------------
    b.position_at_end(blocks)
    got = fn.append_basic_block("got_block")
    b.cbranch(launch_stopped(b, L), out, got)
    b.position_at_end(got)
    blk = b.atomic_rmw("add", launch_field(b, L, "next_block"), c64(1), "monotonic")
    ramp = fn.append_basic_block("ramp")
    b.cbranch(b.icmp_unsigned(">=", blk, total), out, ramp)
    b.position_at_end(ramp)
    stall_rounds.set(c64(0))
    gx, gy = b.zext(gdim[0], I64), b.zext(gdim[1], I64)
    bid = [b.trunc(b.urem(blk, gx), I32), b.trunc(b.urem(b.udiv(blk, gx), gy), I32),
           b.trunc(b.udiv(blk, b.mul(gx, gy)), I32)]
    with fb.loop(c32(0), n, "t") as t:
        c = ctx_at(t)
        for d in range(3):
            store_thread(b, c, "block_id", bid[d], d)
        store_thread(b, c, "wait", c32(WAIT_RUN))
        store_thread(b, c, "spin_site", c32(0))
        store_thread(b, c, "spin_n", c32(0))
        store_thread(b, c, "spin_total", c32(0))
        store_thread(b, c, "spin", c32(0))
        b.call(start, [args, c])
        cont = fn.append_basic_block("ramp.cont")
        b.cbranch(launch_stopped(b, L), out, cont)
        b.position_at_end(cont)
    sched = fn.append_basic_block("sched")
    b.branch(sched)

    # --- one scheduling round -------------------------------------------------------------------
    b.position_at_end(sched)
    released = fb.var(I1, ll.Constant(I1, 0), "released")
    no_site = c32(0x7FFFFFFF)
    with fb.loop(c32(0), nwarps, "w") as w:
        lo = b.mul(w, ws)
        hi = b.select(b.icmp_unsigned("<", b.add(lo, ws), n), b.add(lo, ws), n)
        min_site = fb.var(I32, no_site, "min_site")
        lane_runs = fb.var(I1, ll.Constant(I1, 0), "lane_runs")
        with fb.loop(lo, hi, "l") as l:
            c = ctx_at(l)
            wait = load_thread(b, c, "wait")
            waiting = b.icmp_unsigned("==", wait, c32(WAIT_WARP))
            s = load_thread(b, c, "site")
            smaller = b.and_(waiting, b.icmp_unsigned("<", s, min_site.get()))
            min_site.set(b.select(smaller, s, min_site.get()))
            lane_runs.set(b.or_(lane_runs.get(), b.icmp_unsigned("==", wait, c32(WAIT_RUN))))
        site = min_site.get()
        # A lane that yielded (nanosleep) may still be on its way to the warp operation: the warp
        # waits for it.
        ready = b.and_(b.icmp_unsigned("!=", site, no_site), b.not_(lane_runs.get()))
        with fb.if_(ready, "warp_release"):
            mask = fb.var(I64, c64(0), "mask")
            bal = fb.var(I64, c64(0), "ballot")

            def in_group(c: ll.Value) -> ll.Value:
                return b.and_(b.icmp_unsigned("==", load_thread(b, c, "wait"), c32(WAIT_WARP)),
                              b.icmp_unsigned("==", load_thread(b, c, "site"), site))

            with fb.loop(lo, hi, "l") as l:
                c = ctx_at(l)
                bit = b.shl(c64(1), b.zext(b.sub(l, lo), I64))
                g = in_group(c)
                mask.set(b.select(g, b.or_(mask.get(), bit), mask.get()))
                pred = b.icmp_unsigned("!=", load_thread(b, c, "wval"), c64(0))
                bal.set(b.select(b.and_(g, pred), b.or_(bal.get(), bit), bal.get()))
            m_, bl = mask.get(), bal.get()
            first = b.add(lo, b.trunc(b.call(cttz, [m_, ll.Constant(I1, 1)]), I32))
            first_val = load_thread(b, ctx_at(first), "wval")
            with fb.loop(lo, hi, "l") as l:
                c = ctx_at(l)
                with fb.if_(in_group(c), "active"):
                    op = load_thread(b, c, "wop")
                    own = load_thread(b, c, "wval")
                    src = load_thread(b, c, "wsrc")
                    src_ok = b.icmp_unsigned("<", src, b.sub(hi, lo))
                    src_c = b.select(src_ok, src, b.sub(l, lo))
                    src_active = b.trunc(b.lshr(m_, b.zext(src_c, I64)), I1)
                    src_val = load_thread(b, ctx_at(b.add(lo, src_c)), "wval")
                    shuffled = b.select(src_active, src_val, own)
                    # the last choice is WARP_FIRST_LANE
                    res = b.select(b.icmp_unsigned("==", op, c32(WARP_SHUFFLE)), shuffled,
                                   b.select(b.icmp_unsigned("==", op, c32(WARP_BALLOT)), bl,
                                            b.select(b.icmp_unsigned("==", op, c32(WARP_ACTIVE_MASK)), m_,
                                                     first_val)))
                    store_thread(b, c, "wres", res)
                    store_thread(b, c, "wait", c32(WAIT_RUN))
            released.set(ll.Constant(I1, 1))

    barrier = fn.append_basic_block("barrier")
    resume_all = fn.append_basic_block("resume")
    b.cbranch(released.get(), resume_all, barrier)

    b.position_at_end(barrier)
    first_t = fb.var(I32, c32(-1), "first_at_barrier")
    first_site = fb.var(I32, c32(0), "first_site")
    runnable = fb.var(I1, ll.Constant(I1, 0), "runnable")
    with fb.loop(c32(0), n, "t") as t:
        c = ctx_at(t)
        runnable.set(b.or_(runnable.get(), b.icmp_unsigned("==", load_thread(b, c, "wait"), c32(WAIT_RUN))))
        with fb.if_(b.icmp_unsigned("==", load_thread(b, c, "wait"), c32(WAIT_BARRIER)), "at_barrier"):
            s = load_thread(b, c, "site")
            is_first = b.icmp_signed("<", first_t.get(), c32(0))
            with fb.if_(b.and_(b.not_(is_first), b.icmp_unsigned("!=", s, first_site.get())), "divergent"):
                with fb.if_(claim_error(b, L)):
                    c0 = ctx_at(first_t.get())
                    store_launch(b, L, "err_kind", c32(ERR_DIVERGENT_BARRIER))
                    store_launch(b, L, "err_loc", first_site.get())
                    store_launch(b, L, "err_loc2", s)
                    for d in range(3):
                        store_launch(b, L, "err_tid", load_thread(b, c0, "thread_id", d), d)
                        store_launch(b, L, "err_tid2", load_thread(b, c, "thread_id", d), d)
                        store_launch(b, L, "err_bid", load_thread(b, c, "block_id", d), d)
                b.branch(out)
            first_site.set(b.select(is_first, s, first_site.get()))
            first_t.set(b.select(is_first, t, first_t.get()))
    release = fn.append_basic_block("barrier.release")
    settled = fn.append_basic_block("barrier.settled")
    b.cbranch(runnable.get(), resume_all, settled)  # threads that yielded run before any release
    b.position_at_end(settled)
    b.cbranch(b.icmp_signed("<", first_t.get(), c32(0)), blocks, release)  # nobody waits: block done
    b.position_at_end(release)
    with fb.loop(c32(0), n, "t") as t:
        c = ctx_at(t)
        at = b.icmp_unsigned("==", load_thread(b, c, "wait"), c32(WAIT_BARRIER))
        with fb.if_(at):
            store_thread(b, c, "wait", c32(WAIT_RUN))
    b.branch(resume_all)

    b.position_at_end(resume_all)
    # A round is stalled when every thread it resumed yielded again at a spin point having read the
    # value it read there before (ThreadContext.spin): no thread changed anything the others wait for.
    stalled = fb.var(I1, ll.Constant(I1, 1), "stalled")
    with fb.loop(c32(0), n, "t") as t:
        c = ctx_at(t)
        with fb.if_(b.icmp_unsigned("==", load_thread(b, c, "wait"), c32(WAIT_RUN)), "runnable"):
            store_thread(b, c, "spin", c32(0))
            b.call(resume, [load_thread(b, c, "frame")])
            cont = fn.append_basic_block("resume.cont")
            b.cbranch(launch_stopped(b, L), out, cont)
            b.position_at_end(cont)
            spun = b.and_(b.icmp_unsigned("==", load_thread(b, c, "wait"), c32(WAIT_RUN)),
                          b.icmp_unsigned("!=", load_thread(b, c, "spin"), c32(0)))
            stalled.set(b.and_(stalled.get(), spun))
    _deadlock_check(fb, L, stalled.get(), stall_rounds, stall_start, n, ctx_at, time_fn, out)
    b.branch(sched)

    # --- the end: free what this worker allocated -------------------------------------------------
    b.position_at_end(out)
    is_null = b.icmp_unsigned("==", ctxs, ll.Constant(PTR, None))
    with fb.if_(b.not_(is_null), "free_frames"):
        with fb.loop(c32(0), n, "t") as t:
            b.call(free, [load_thread(b, ctx_at(t), "frame_buf")])
    b.call(free, [ctxs])
    b.call(free, [shared])
    b.ret_void()
    fb.finish()
    return m

