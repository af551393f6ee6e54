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


class _SchedulerEmitter:
    """Writes ``kc_run_blocks`` step by step; each method emits one part of the module doc's algorithm.

    The state shared by the steps (the launch pointer, the block's dimensions, the thread contexts and
    shared memory, and the ``out``/``blocks`` blocks every step may branch to) lives on the instance.
    The methods are called in the order :meth:`emit` gives; each leaves the builder where the next begins.
    """

    def __init__(self, triple: str, data_layout: str):
        m = self.module = ll.Module(name="kc_cpu_scheduler")
        m.triple, m.data_layout = triple, data_layout
        self.data_layout = data_layout
        self.calloc = declare(m, "calloc", PTR, [I64, I64])
        self.aligned_alloc = declare(m, "aligned_alloc", PTR, [I64, I64])
        self.free = declare(m, "free", ll.VoidType(), [PTR])
        self.resume = declare(m, "llvm.coro.resume", ll.VoidType(), [PTR])
        self.cttz = declare(m, "llvm.cttz.i64", I64, [I64, I1])
        self.time = declare(m, "time", I64, [PTR])

        fn = self.fn = ll.Function(m, ll.FunctionType(ll.VoidType(), [PTR]), RUN_BLOCKS)
        fn.attributes.add("nounwind")
        self.L = fn.args[0]
        self.L.name = "launch"
        self.fb = FunctionBuilder(fn)
        self.b = self.fb.b
        self.out = fn.append_basic_block("out")
        self.blocks = fn.append_basic_block("blocks")

    def emit(self) -> ll.Module:
        """Emits the whole function and returns the module."""
        self.load_launch_state()
        self.allocate_block_state()
        self.init_thread_contexts()
        self.take_block_and_start_threads()
        self.release_warp_operations()
        self.release_barrier()
        self.resume_runnable()
        self.free_and_return()
        self.fb.finish()
        return self.module

    def ctx_at(self, i: ll.Value) -> ll.Value:
        """The ThreadContext of the block's thread with linear id ``i`` (i32)."""
        return self.b.gep(self.ctxs, [i], inbounds=True, source_etype=THREAD_TYPE)

    def load_launch_state(self) -> None:
        """Reads the launch's dimensions, warp size, shared-memory sizes, block count, arguments and
        thunk from the LaunchState; derives the thread and warp counts per block and the shared bytes."""
        b, L = self.b, self.L
        self.bdim = [load_launch(b, L, "block", d) for d in range(3)]
        self.gdim = [load_launch(b, L, "grid", d) for d in range(3)]
        bdim = self.bdim
        self.n = b.mul(b.mul(bdim[0], bdim[1]), bdim[2], name="nthreads")
        ws = self.ws = load_launch(b, L, "warp_size")
        self.nwarps = b.udiv(b.add(self.n, b.sub(ws, c32(1))), ws, name="nwarps")
        self.static = b.and_(b.add(load_launch(b, L, "static_shared"), c64(15)), c64(~15))
        # Shared memory is SHARED_ALIGN-aligned, as a GPU's is, and a multiple of it (C11 aligned_alloc).
        self.shbytes = b.and_(b.add(b.add(self.static, load_launch(b, L, "dyn_shared")),
                                    c64(2 * SHARED_ALIGN - 1)), c64(-SHARED_ALIGN))
        self.total = load_launch(b, L, "total_blocks")
        self.args = load_launch(b, L, "args")
        self.start = b.load(launch_field(b, L, "start"), typ=FunctionPointer(START_TYPE))
        # stalled rounds in a row of the current block, and when the first of them ended (time())
        self.stall_rounds = self.fb.var(I64, c64(0), "stall_rounds")
        self.stall_start = self.fb.var(I64, c64(0), "stall_start")

    def allocate_block_state(self) -> None:
        """Allocates this worker's thread contexts (calloc) and shared memory (aligned_alloc); on
        failure the launch stops with ``ERR_OUT_OF_MEMORY``. Leaves the builder at the ``init`` block."""
        b, fn, L = self.b, self.fn, self.L
        ctx_size = THREAD_TYPE.get_abi_size(llvm.create_target_data(self.data_layout))
        self.ctxs = b.call(self.calloc, [b.zext(self.n, I64), c64(ctx_size)], name="ctxs")
        self.shared = b.call(self.aligned_alloc, [c64(SHARED_ALIGN), self.shbytes], name="shared")
        # the block's named barriers (named_barrier.py): 16 i64, zeroed before each block
        self.nbar = b.alloca(ll.ArrayType(I64, 16), name="nbar")
        ok = b.and_(b.icmp_unsigned("!=", self.ctxs, ll.Constant(PTR, None)),
                    b.icmp_unsigned("!=", self.shared, ll.Constant(PTR, None)))
        oom = fn.append_basic_block("oom")
        init = fn.append_basic_block("init")
        b.cbranch(ok, init, oom)

        b.position_at_end(oom)
        with self.fb.if_(claim_error(b, L)):
            store_launch(b, L, "err_kind", c32(ERR_OUT_OF_MEMORY))
        b.branch(self.out)
        b.position_at_end(init)

    def init_thread_contexts(self) -> None:
        """Fills the fields of every thread's context that do not change from block to block (thread,
        lane and warp ids, dimensions, the launch and shared-memory pointers), then enters the loop
        over blocks."""
        b, L, bdim = self.b, self.L, self.bdim
        dyn_base = b.gep(self.shared, [self.static], source_etype=I8)
        with self.fb.loop(c32(0), self.n, "t") as t:
            c = self.ctx_at(t)
            bxy = b.mul(bdim[0], bdim[1])
            tid = [b.urem(t, bdim[0]), b.urem(b.udiv(t, bdim[0]), bdim[1]), b.udiv(t, bxy)]
            for d in range(3):
                store_thread(b, c, "thread_id", tid[d], d)
                store_thread(b, c, "block_dim", bdim[d], d)
                store_thread(b, c, "grid_dim", self.gdim[d], d)
            store_thread(b, c, "lane_id", b.urem(t, self.ws))
            store_thread(b, c, "warp_id", b.udiv(t, self.ws))
            store_thread(b, c, "linear", t)
            store_thread(b, c, "launch", L)
            store_thread(b, c, "shared", self.shared)
            store_thread(b, c, "dyn_shared", dyn_base)
            store_thread(b, c, "nbar", self.nbar)
        b.branch(self.blocks)

    def take_block_and_start_threads(self) -> None:
        """The head of the loop over blocks: unless the launch stopped, takes the next block from the
        launch's atomic counter (leaving when none is left), sets every thread's block id and starts it
        (runs its coroutine to the first suspension); then enters the scheduling round (``sched``)."""
        b, fn, L, gdim = self.b, self.fn, self.L, self.gdim
        b.position_at_end(self.blocks)
        got = fn.append_basic_block("got_block")
        b.cbranch(launch_stopped(b, L), self.out, got)
        b.position_at_end(got)
        blk = b.atomic_rmw("add", launch_field(b, L, "next_block"), c64(1), "monotonic")
        ramp = fn.append_basic_block("ramp")
        b.cbranch(b.icmp_unsigned(">=", blk, self.total), self.out, ramp)
        b.position_at_end(ramp)
        self.stall_rounds.set(c64(0))
        b.store(ll.Constant(ll.ArrayType(I64, 16), [0] * 16), self.nbar)
        gx, gy = b.zext(gdim[0], I64), b.zext(gdim[1], I64)
        bid = [b.trunc(b.urem(blk, gx), I32), b.trunc(b.urem(b.udiv(blk, gx), gy), I32),
               b.trunc(b.udiv(blk, b.mul(gx, gy)), I32)]
        with self.fb.loop(c32(0), self.n, "t") as t:
            c = self.ctx_at(t)
            for d in range(3):
                store_thread(b, c, "block_id", bid[d], d)
            store_thread(b, c, "wait", c32(WAIT_RUN))
            for f in ("spin_site", "spin_n", "spin_total", "spin"):
                store_thread(b, c, f, c32(0))
            b.call(self.start, [self.args, c])
            cont = fn.append_basic_block("ramp.cont")
            b.cbranch(launch_stopped(b, L), self.out, cont)
            b.position_at_end(cont)
        self.sched = fn.append_basic_block("sched")
        b.branch(self.sched)

    def release_warp_operations(self) -> None:
        """The first part of a scheduling round: in each warp with lanes waiting at warp operations
        and none runnable, the lanes at the lowest site are the active lanes; computes each one's
        result (shuffle, ballot, active mask, first lane) and makes it runnable. Sets
        ``self.released`` (i1 variable) when any warp was released."""
        b, fb = self.b, self.fb
        b.position_at_end(self.sched)
        self.released = fb.var(I1, ll.Constant(I1, 0), "released")
        no_site = c32(0x7FFFFFFF)
        with fb.loop(c32(0), self.nwarps, "w") as w:
            ws, n = self.ws, self.n
            lo = b.mul(w, ws)
            hi = b.select(b.icmp_unsigned("<", b.add(lo, ws), n), b.add(lo, ws), n)
            min_site = fb.var(I32, no_site, "min_site")
            lane_runs = fb.var(I1, ll.Constant(I1, 0), "lane_runs")
            with fb.loop(lo, hi, "l") as l:
                c = self.ctx_at(l)
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
                self._release_warp(lo, hi, site)

    def _release_warp(self, lo: ll.Value, hi: ll.Value, site: ll.Value) -> None:
        """Releases the warp of lanes ``[lo, hi)`` whose active lanes wait at ``site``: the active
        mask and ballot over the group, then each active lane's result (``wres``) by its ``wop``."""
        b, fb = self.b, self.fb
        mask = fb.var(I64, c64(0), "mask")
        bal = fb.var(I64, c64(0), "ballot")

        def in_group(c: ll.Value) -> ll.Value:
            return b.and_(b.icmp_unsigned("==", load_thread(b, c, "wait"), c32(WAIT_WARP)),
                          b.icmp_unsigned("==", load_thread(b, c, "site"), site))

        with fb.loop(lo, hi, "l") as l:
            c = self.ctx_at(l)
            bit = b.shl(c64(1), b.zext(b.sub(l, lo), I64))
            g = in_group(c)
            mask.set(b.select(g, b.or_(mask.get(), bit), mask.get()))
            pred = b.icmp_unsigned("!=", load_thread(b, c, "wval"), c64(0))
            bal.set(b.select(b.and_(g, pred), b.or_(bal.get(), bit), bal.get()))
        m_, bl = mask.get(), bal.get()
        first = b.add(lo, b.trunc(b.call(self.cttz, [m_, ll.Constant(I1, 1)]), I32))
        first_val = load_thread(b, self.ctx_at(first), "wval")
        with fb.loop(lo, hi, "l") as l:
            c = self.ctx_at(l)
            with fb.if_(in_group(c), "active"):
                op = load_thread(b, c, "wop")
                own = load_thread(b, c, "wval")
                src = load_thread(b, c, "wsrc")
                src_ok = b.icmp_unsigned("<", src, b.sub(hi, lo))
                src_c = b.select(src_ok, src, b.sub(l, lo))
                src_active = b.trunc(b.lshr(m_, b.zext(src_c, I64)), I1)
                src_val = load_thread(b, self.ctx_at(b.add(lo, src_c)), "wval")
                shuffled = b.select(src_active, src_val, own)
                # the last choice is WARP_FIRST_LANE
                res = b.select(b.icmp_unsigned("==", op, c32(WARP_SHUFFLE)), shuffled,
                               b.select(b.icmp_unsigned("==", op, c32(WARP_BALLOT)), bl,
                                        b.select(b.icmp_unsigned("==", op, c32(WARP_ACTIVE_MASK)), m_,
                                                 first_val)))
                store_thread(b, c, "wres", res)
                store_thread(b, c, "wait", c32(WAIT_RUN))
        self.released.set(ll.Constant(I1, 1))

    def release_barrier(self) -> None:
        """The second part of a round, when no warp was released: runnable (yielded) threads run
        first; if none is runnable and every live thread waits at one barrier, releases it; threads at
        different barriers stop the launch with ``ERR_DIVERGENT_BARRIER``; no thread waiting means the
        block is done (back to ``blocks``). Creates ``self.resume_all``, where every path continues."""
        b, fb, fn, L = self.b, self.fb, self.fn, self.L
        barrier = fn.append_basic_block("barrier")
        self.resume_all = fn.append_basic_block("resume")
        b.cbranch(self.released.get(), self.resume_all, barrier)

        b.position_at_end(barrier)
        first_t = fb.var(I32, c32(-1), "first_at_barrier")
        first_site = fb.var(I32, c32(0), "first_site")
        runnable = fb.var(I1, ll.Constant(I1, 0), "runnable")
        with fb.loop(c32(0), self.n, "t") as t:
            c = self.ctx_at(t)
            runnable.set(b.or_(runnable.get(),
                               b.icmp_unsigned("==", load_thread(b, c, "wait"), c32(WAIT_RUN))))
            with fb.if_(b.icmp_unsigned("==", load_thread(b, c, "wait"), c32(WAIT_BARRIER)), "at_barrier"):
                s = load_thread(b, c, "site")
                is_first = b.icmp_signed("<", first_t.get(), c32(0))
                with fb.if_(b.and_(b.not_(is_first), b.icmp_unsigned("!=", s, first_site.get())),
                            "divergent"):
                    with fb.if_(claim_error(b, L)):
                        c0 = self.ctx_at(first_t.get())
                        store_launch(b, L, "err_kind", c32(ERR_DIVERGENT_BARRIER))
                        store_launch(b, L, "err_loc", first_site.get())
                        store_launch(b, L, "err_loc2", s)
                        for d in range(3):
                            store_launch(b, L, "err_tid", load_thread(b, c0, "thread_id", d), d)
                            store_launch(b, L, "err_tid2", load_thread(b, c, "thread_id", d), d)
                            store_launch(b, L, "err_bid", load_thread(b, c, "block_id", d), d)
                    b.branch(self.out)
                first_site.set(b.select(is_first, s, first_site.get()))
                first_t.set(b.select(is_first, t, first_t.get()))
        release = fn.append_basic_block("barrier.release")
        settled = fn.append_basic_block("barrier.settled")
        b.cbranch(runnable.get(), self.resume_all, settled)  # threads that yielded run before any release
        b.position_at_end(settled)
        b.cbranch(b.icmp_signed("<", first_t.get(), c32(0)), self.blocks, release)  # nobody waits: block done
        b.position_at_end(release)
        with fb.loop(c32(0), self.n, "t") as t:
            c = self.ctx_at(t)
            at = b.icmp_unsigned("==", load_thread(b, c, "wait"), c32(WAIT_BARRIER))
            with fb.if_(at):
                store_thread(b, c, "wait", c32(WAIT_RUN))
        b.branch(self.resume_all)

    def resume_runnable(self) -> None:
        """The end of a round: resumes the runnable threads in linear-id order (leaving if the launch
        stopped), checks for a deadlock (:meth:`check_deadlock`), then starts the next round. A round
        is stalled when every thread it resumed yielded again at a spin point having read the value
        it read there before (ThreadContext.spin): none changed anything the others wait for."""
        b, fn = self.b, self.fn
        b.position_at_end(self.resume_all)
        stalled = self.fb.var(I1, ll.Constant(I1, 1), "stalled")
        with self.fb.loop(c32(0), self.n, "t") as t:
            c = self.ctx_at(t)
            with self.fb.if_(b.icmp_unsigned("==", load_thread(b, c, "wait"), c32(WAIT_RUN)), "runnable"):
                store_thread(b, c, "spin", c32(0))
                b.call(self.resume, [load_thread(b, c, "frame")])
                cont = fn.append_basic_block("resume.cont")
                b.cbranch(launch_stopped(b, self.L), self.out, cont)
                b.position_at_end(cont)
                spun = b.and_(b.icmp_unsigned("==", load_thread(b, c, "wait"), c32(WAIT_RUN)),
                              b.icmp_unsigned("!=", load_thread(b, c, "spin"), c32(0)))
                stalled.set(b.and_(stalled.get(), spun))
        self.check_deadlock(stalled.get())
        b.branch(self.sched)

    def check_deadlock(self, stalled: ll.Value) -> None:
        """Counts stalled rounds in a row; once they have lasted the launch's ``deadlock_seconds``
        (looked at every CLOCK_EVERY rounds; 0: never), stops the launch with ERR_DEADLOCK naming the
        first and last spinning thread and their sites, how many spin (``err_nbytes``) and how many
        wait at a barrier or warp operation (``err_addr``)."""
        b, fb, L = self.b, self.fb, self.L
        rounds, start = self.stall_rounds, self.stall_start
        null = ll.Constant(PTR, None)
        limit = b.sext(load_launch(b, L, "deadlock_seconds"), I64)
        with fb.if_(b.not_(stalled), "progress"):
            rounds.set(c64(0))
        with fb.if_(stalled, "stall"):
            r = b.add(rounds.get(), c64(1))
            rounds.set(r)
            with fb.if_(b.icmp_unsigned("==", r, c64(1)), "stall.first"):
                start.set(b.call(self.time, [null]))
            look = b.and_(b.icmp_unsigned("==", b.and_(r, c64(CLOCK_EVERY - 1)), c64(0)),
                          b.icmp_signed(">", limit, c64(0)))
            with fb.if_(look, "stall.look"):
                late = b.icmp_signed(">=", b.sub(b.call(self.time, [null]), start.get()), limit)
                with fb.if_(late, "deadlock"):
                    with fb.if_(claim_error(b, L), "deadlock.claim"):
                        self._report_deadlock()
                    b.branch(self.out)

    def _report_deadlock(self) -> None:
        """Fills the launch's ``err_*`` fields for ERR_DEADLOCK (see :meth:`check_deadlock`)."""
        b, fb, L = self.b, self.fb, self.L
        spinning = fb.var(I64, c64(0), "spinning")
        waiting = fb.var(I64, c64(0), "waiting")
        first = fb.var(I32, c32(-1), "first_spinning")
        last = fb.var(I32, c32(0), "last_spinning")
        with fb.loop(c32(0), self.n, "t") as t:
            w = load_thread(b, self.ctx_at(t), "wait")
            spins = b.icmp_unsigned("==", w, c32(WAIT_RUN))
            waits = b.or_(b.icmp_unsigned("==", w, c32(WAIT_BARRIER)), b.icmp_unsigned("==", w, c32(WAIT_WARP)))
            spinning.set(b.add(spinning.get(), b.zext(spins, I64)))
            waiting.set(b.add(waiting.get(), b.zext(waits, I64)))
            first.set(b.select(b.and_(spins, b.icmp_signed("<", first.get(), c32(0))), t, first.get()))
            last.set(b.select(spins, t, last.get()))
        c0, c1 = self.ctx_at(first.get()), self.ctx_at(last.get())
        store_launch(b, L, "err_kind", c32(ERR_DEADLOCK))
        store_launch(b, L, "err_loc", load_thread(b, c0, "site"))
        store_launch(b, L, "err_loc2", load_thread(b, c1, "site"))
        store_launch(b, L, "err_nbytes", spinning.get())
        store_launch(b, L, "err_addr", waiting.get())
        for d in range(3):
            store_launch(b, L, "err_tid", load_thread(b, c0, "thread_id", d), d)
            store_launch(b, L, "err_tid2", load_thread(b, c1, "thread_id", d), d)
            store_launch(b, L, "err_bid", load_thread(b, c0, "block_id", d), d)

    def free_and_return(self) -> None:
        """The ``out`` block: frees the coroutine frames, contexts and shared memory this worker
        allocated, and returns."""
        b = self.b
        b.position_at_end(self.out)
        is_null = b.icmp_unsigned("==", self.ctxs, ll.Constant(PTR, None))
        with self.fb.if_(b.not_(is_null), "free_frames"):
            with self.fb.loop(c32(0), self.n, "t") as t:
                b.call(self.free, [load_thread(b, self.ctx_at(t), "frame_buf")])
        b.call(self.free, [self.ctxs])
        b.call(self.free, [self.shared])
        b.ret_void()


def build_scheduler_module(triple: str, data_layout: str) -> ll.Module:
    """The LLVM module holding ``kc_run_blocks(ptr launch_state) -> void`` (see the module doc) for
    the host ``triple`` and ``data_layout`` (LLVM's strings)."""
    return _SchedulerEmitter(triple, data_layout).emit()
