"""NVIDIA's warp-level matrix instructions emulated on the CPU target, so that code written for the
tensor-core path (``comptime if target.has("mma")``) runs, and is checked, without a GPU. Enabled by
``CpuTarget(emulate_mma=True)`` (``target_options={"emulate_mma": True}``); off, the CPU target
has none of these features and the frontend refuses the builtins.

Each lane's fragments are those of PTX (backends/nvptx/mma.py states the layouts with their PTX ISA
sections). The lanes exchange them through the CPU target's warp operations: every lane posts the
address of its fragments (ldmatrix: its row address) and waits for the warp; each then reads what
it needs from the other lanes (``_exchange``), and the warp meets once more before any lane posts
again:

- ``mma``: lane (g, t) (g = lane / 4, t = lane % 4) reads rows g and g + 8 of A from lanes 4g ..
  4g+3 and columns 2t and 2t+1 of B from lanes 4(2t+j) .. +3, then computes its four elements of D
  in f32 (products of 16-bit and 8-bit floats are exact in f32; the sum runs in k order, where the
  tensor core's order and internal precision are unspecified).
- ``ldmatrix``: lane l reads the row address of row g of matrix j from lane 8j + g (with ``trans``,
  rows 2t and 2t+1) and loads its elements from shared memory.
- ``cp_async`` is deferred, as the hardware may defer it: the copy is queued per thread (the
  destination is filled with 0xFF bytes, a NaN in every float format, until then) and made at the
  ``cp_async_wait`` that requires it, so code that reads before waiting reads NaN, not the data.
  At most :data:`QUEUE` copies stay pending; beyond that the oldest is made early (also allowed).
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

from llvmlite import ir as ll

from .warp_exchange import buffer, exchange, function, posted
from ...numerics.formats import FORMATS
from ..errors import UnsupportedOnTarget
from ..nvptx.mma import mma_operands, mma_result
from ..nvptx.mma import ldmatrix_result
from ..nvptx.mma import cp_async_src_bytes

if TYPE_CHECKING:  # pragma: no cover
    from ..llvm.lower import LoweringContext
    from .target import CpuTarget

I8, I16, I32, I64 = ll.IntType(8), ll.IntType(16), ll.IntType(32), ll.IntType(64)
F32 = ll.FloatType()
PTR = ll.PointerType()

#: Copies one thread may have pending before the oldest is made early.
QUEUE = 64
#: A queued copy: destination, source, bytes read from the source, bytes written, its group.
_RECORD = ll.LiteralStructType([PTR, PTR, I32, I32, I32, I32])
#: A thread's queue: the records (a ring), head (oldest pending), tail (next free), committed groups.
_STATE = ll.LiteralStructType([ll.ArrayType(_RECORD, QUEUE), I32, I32, I32])
_HEAD, _TAIL, _COMMITTED = 1, 2, 3


def _c(v: int, t: ll.Type = I32) -> ll.Constant:
    return ll.Constant(t, v)


def _word(b: ll.IRBuilder, address: ll.Value, offset: int, t: ll.Type = I32) -> ll.Value:
    return b.load(b.inttoptr(b.add(address, _c(offset, I64)), PTR), typ=t)


def _slot(b: ll.IRBuilder, buf: ll.Value, k: int) -> ll.Value:
    return b.gep(buf, [_c(k)], source_etype=I32)


def _decode(target: "CpuTarget", ctx: "LoweringContext", words: list[ll.Value], elem: str) -> list[ll.Value]:
    """The f32 values of the elements packed in ``words`` (low bits first)."""
    b = ctx.b
    out: list[ll.Value] = []
    if elem in ("bf16", "f16"):
        for w in words:
            for half in (b.trunc(w, I16), b.trunc(b.lshr(w, _c(16)), I16)):
                if elem == "bf16":
                    out.append(b.bitcast(b.shl(b.zext(half, I32), _c(16)), F32))
                else:
                    out.append(b.fpext(b.bitcast(half, ll.HalfType()), F32))
        return out
    codes = [b.trunc(b.lshr(w, _c(8 * k)), I8) for w in words for k in range(4)]
    return target.minifloat_decode(ctx, codes, FORMATS[elem])


def mma(target: "CpuTarget", ctx: "LoweringContext", shape: str, a_type: str, b_type: str,
        a: list[ll.Value], bw: list[ll.Value], c: list[ll.Value]) -> list[ll.Value]:
    """Each lane posts the address of its fragments (the words a0..a3, b0, b1), and ``__kc_mma_<a>_<b>``
    computes its D from the other lanes' and its own C (see :func:`_mma_function`)."""
    b = ctx.b
    buf = buffer(ctx, "fragments", I32, 6)
    for k, w in enumerate(a + bw):
        b.store(w, _slot(b, buf, k))
    io = buffer(ctx, "accumulators", F32, 4)
    for k, x in enumerate(c):
        b.store(x, b.gep(io, [_c(k)], source_etype=F32))
    exchange(target, ctx, "mma_sync", b.ptrtoint(buf, I64), _mma_function(target, ctx, a_type, b_type), [io])
    return [b.load(b.gep(io, [_c(k)], source_etype=F32), typ=F32) for k in range(4)]


def _mma_function(target: "CpuTarget", ctx: "LoweringContext", a_type: str, b_type: str) -> ll.Function:
    """``void __kc_mma_<a>_<b>(ptr thread_context, i32 lane, ptr io)``: io holds c0..c3 and receives
    d0..d3 = c + (row of A) . (column of B), summed in k order, for lane (g, t) = (lane / 4, lane % 4):
    rows g and g + 8 of A, columns 2t and 2t + 1 of B. Word p (p = 0..7) of a row of A (k = pE ..
    pE + E - 1) is a0 (row g) / a1 (row g + 8) of lane 4g + p for p < 4, a2 / a3 of lane 4g + p - 4
    for p >= 4; word p of column n of B is b0 of lane 4n + p for p < 4, b1 of lane 4n + p - 4."""
    m = ctx.module
    fn, new = function(m, f"__kc_mma_{a_type}_{b_type}", [PTR, I32, PTR])
    if not new:
        return fn
    fn.attributes.add("noinline")  # one copy, out of the kernel's coroutine
    tctx, lane, io = fn.args
    saved = ctx.b
    b = ctx.b = ll.IRBuilder(fn.append_basic_block("entry"))  # _decode builds with ctx.b
    try:
        g, t = b.lshr(lane, _c(2)), b.and_(lane, _c(3))
        rows: list[list[ll.Value]] = [[], []]
        for r, offsets in ((0, (0, 8)), (1, (4, 12))):  # row g: a0, a2; row g + 8: a1, a3
            for off in offsets:
                for q in range(4):
                    rows[r].append(_word(b, posted(b, tctx, lane, b.add(b.shl(g, _c(2)), _c(q))), off))
        cols: list[list[ll.Value]] = [[], []]
        for j in range(2):
            n = b.add(b.shl(t, _c(1)), _c(j))
            for off in (16, 20):  # b0, b1
                for q in range(4):
                    cols[j].append(_word(b, posted(b, tctx, lane, b.add(b.shl(n, _c(2)), _c(q))), off))
        av = [_decode(target, ctx, r, a_type) for r in rows]
        bv = [_decode(target, ctx, col, b_type) for col in cols]
        for k, (r, j) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):  # c0..c3: (row g | g + 8, col 2t + j)
            slot = b.gep(io, [_c(k)], source_etype=F32)
            acc = b.load(slot, typ=F32)
            for x, y in zip(av[r], bv[j]):
                acc = b.fadd(acc, b.fmul(x, y))
            b.store(acc, slot)
        b.ret_void()
    finally:
        ctx.b = saved
    return fn


def ldmatrix(target: "CpuTarget", ctx: "LoweringContext", ptr: ll.Value, num: int, trans: bool) -> list[ll.Value]:
    """Each lane posts its row address; ``__kc_ldmatrix_x<num>[_trans]`` loads its words."""
    b = ctx.b
    buf = buffer(ctx, "fragments", I32, 6)
    exchange(target, ctx, "ldmatrix", b.ptrtoint(ptr, I64), _ldmatrix_function(ctx.module, num, trans), [buf])
    return [b.load(_slot(b, buf, j), typ=I32) for j in range(num)]


def _ldmatrix_function(m: ll.Module, num: int, trans: bool) -> ll.Function:
    """``void __kc_ldmatrix_x<num>[_trans](ptr thread_context, i32 lane, ptr out)``: out[j] = lane
    (g, t)'s word of matrix j, whose row r lane 8j + r gave: row g, elements 2t and 2t + 1; with
    trans, element g of rows 2t and 2t + 1."""
    fn, new = function(m, f"__kc_ldmatrix_x{num}{'_trans' if trans else ''}", [PTR, I32, PTR])
    if not new:
        return fn
    tctx, lane, out = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    g, t = b.lshr(lane, _c(2)), b.and_(lane, _c(3))
    for j in range(num):
        if not trans:
            row = posted(b, tctx, lane, b.add(g, _c(8 * j)))
            w = b.load(b.inttoptr(b.add(row, b.zext(b.shl(t, _c(2)), I64)), PTR), typ=I32)
        else:
            halves = []
            for i in range(2):
                row = posted(b, tctx, lane, b.add(b.shl(t, _c(1)), _c(8 * j + i)))
                p = b.inttoptr(b.add(row, b.zext(b.shl(g, _c(1)), I64)), PTR)
                halves.append(b.zext(b.load(p, typ=I16), I32))
            w = b.or_(halves[0], b.shl(halves[1], _c(16)))
        b.store(w, _slot(b, out, j))
    b.ret_void()
    return fn


# --- cp.async: a per-thread queue of deferred copies -------------------------------------------------

def begin_function(ctx: "LoweringContext") -> None:
    """Give a kernel that uses cp_async its queue (in the thread's frame), emptied at its start."""
    if not any(op.name == "intrinsic" and op.attrs["intrinsic"].startswith("nvptx.cp_async")
               for op in ctx.ir_fn.body.walk()):
        return
    q = ctx.lowering.opaque(ctx.alloca(_STATE, name="kc.cp_async"))
    for f in (_HEAD, _TAIL, _COMMITTED):
        ctx.b.store(_c(0), _field(ctx.b, q, f))
    ctx.state["cpu.cp_async"] = q


def _field(b: ll.IRBuilder, q: ll.Value, f: int) -> ll.Value:
    return b.gep(q, [_c(0), _c(f)], source_etype=_STATE)


def _queue(ctx: "LoweringContext") -> ll.Value:
    q = ctx.state.get("cpu.cp_async")
    if q is None:  # a device function that was not inlined: the CPU target rejects it when called
        raise UnsupportedOnTarget("cp_async on the cpu target must be in a kernel (or inlined into one)")
    return q


def cp_async(target: "CpuTarget", ctx: "LoweringContext", dst: ll.Value, src: ll.Value, nbytes: int,
             src_bytes: ll.Value | None, op) -> None:
    b = ctx.b
    size = _c(nbytes) if src_bytes is None else src_bytes
    size = b.select(b.icmp_unsigned(">", size, _c(nbytes)), _c(nbytes), size)
    if ctx.options.check_bounds:
        # As a GPU: the source aligned to the copy's size and the bytes read inside one array.
        access = SimpleNamespace(name="load", span=op.span)
        if src_bytes is None:
            target.check_access(ctx, src, nbytes, access, align=nbytes)
        else:
            reads = b.append_basic_block("cp_async.reads")
            after = b.append_basic_block("cp_async.checked")
            b.cbranch(b.icmp_unsigned("!=", size, _c(0)), reads, after)
            b.position_at_end(reads)
            target.check_access(ctx, src, 1, access, align=nbytes)
            b.branch(after)
            b.position_at_end(after)
    b.call(_push_function(ctx.module), [_queue(ctx), dst, src, size, _c(nbytes)])


def cp_async_commit(ctx: "LoweringContext") -> None:
    b = ctx.b
    p = _field(b, _queue(ctx), _COMMITTED)
    b.store(b.add(b.load(p, typ=I32), _c(1)), p)


def cp_async_wait(ctx: "LoweringContext", n: int) -> None:
    b = ctx.b
    q = _queue(ctx)
    b.call(_drain_function(ctx.module), [q, b.sub(b.load(_field(b, q, _COMMITTED), typ=I32), _c(n))])


def _copy_function(m: ll.Module) -> ll.Function:
    """``void __kc_cp_async_copy(ptr dst, ptr src, i32 reads, i32 bytes)``: dst[i] = i < reads ?
    src[i] : 0 for i < bytes."""
    fn, new = function(m, "__kc_cp_async_copy", [PTR, PTR, I32, I32])
    if not new:
        return fn
    dst, src, reads, nbytes = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    head, body, done = (fn.append_basic_block(x) for x in ("head", "body", "done"))
    entry = b.block
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I32, "i")
    i.add_incoming(_c(0), entry)
    b.cbranch(b.icmp_unsigned("<", i, nbytes), body, done)
    b.position_at_end(body)
    i64 = b.zext(i, I64)
    ok = b.icmp_unsigned("<", i, reads)
    # the source byte is read only below `reads`
    rd, join = fn.append_basic_block("read"), fn.append_basic_block("join")
    here = b.block
    b.cbranch(ok, rd, join)
    b.position_at_end(rd)
    byte = b.load(b.gep(src, [i64], source_etype=I8), typ=I8)
    b.branch(join)
    b.position_at_end(join)
    v = b.phi(I8)
    v.add_incoming(_c(0, I8), here)
    v.add_incoming(byte, rd)
    b.store(v, b.gep(dst, [i64], source_etype=I8))
    i.add_incoming(b.add(i, _c(1)), join)
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()
    return fn


def _record(b: ll.IRBuilder, q: ll.Value, index: ll.Value, f: int) -> ll.Value:
    slot = b.urem(index, _c(QUEUE))
    return b.gep(q, [_c(0), _c(0), slot, _c(f)], source_etype=_STATE)


def _make_oldest(b: ll.IRBuilder, m: ll.Module, q: ll.Value, head: ll.Value) -> None:
    """Make the copy at ``head`` and advance head."""
    args = [b.load(_record(b, q, head, k), typ=t) for k, t in ((0, PTR), (1, PTR), (2, I32), (3, I32))]
    b.call(_copy_function(m), args)
    b.store(b.add(head, _c(1)), _field(b, q, _HEAD))


def _push_function(m: ll.Module) -> ll.Function:
    """``void __kc_cp_async_push(ptr q, ptr dst, ptr src, i32 reads, i32 bytes)``: queue a copy in the
    current (uncommitted) group, the destination filled with 0xFF until it is made."""
    fn, new = function(m, "__kc_cp_async_push", [PTR, PTR, PTR, I32, I32])
    if not new:
        return fn
    q, dst, src, reads, nbytes = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    full, push = fn.append_basic_block("full"), fn.append_basic_block("push")
    head = b.load(_field(b, q, _HEAD), typ=I32)
    tail = b.load(_field(b, q, _TAIL), typ=I32)
    b.cbranch(b.icmp_unsigned("==", b.sub(tail, head), _c(QUEUE)), full, push)
    b.position_at_end(full)
    _make_oldest(b, m, q, head)
    b.branch(push)
    b.position_at_end(push)
    for k, v in enumerate((dst, src, reads, nbytes)):
        b.store(v, _record(b, q, tail, k))
    b.store(b.load(_field(b, q, _COMMITTED), typ=I32), _record(b, q, tail, 4))
    b.store(b.add(tail, _c(1)), _field(b, q, _TAIL))
    memset = m.globals.get("llvm.memset.p0.i32") or ll.Function(
        m, ll.FunctionType(ll.VoidType(), [PTR, I8, I32, ll.IntType(1)]), "llvm.memset.p0.i32")
    b.call(memset, [dst, _c(0xFF, I8), nbytes, _c(0, ll.IntType(1))])
    b.ret_void()
    return fn


def _drain_function(m: ll.Module) -> ll.Function:
    """``void __kc_cp_async_drain(ptr q, i32 groups)``: make every pending copy of groups < ``groups``
    (oldest first)."""
    fn, new = function(m, "__kc_cp_async_drain", [PTR, I32])
    if not new:
        return fn
    q, groups = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    head_bb, test, body, done = (fn.append_basic_block(x) for x in ("head", "test", "body", "done"))
    b.branch(head_bb)
    b.position_at_end(head_bb)
    head = b.load(_field(b, q, _HEAD), typ=I32)
    tail = b.load(_field(b, q, _TAIL), typ=I32)
    b.cbranch(b.icmp_unsigned("==", head, tail), done, test)
    b.position_at_end(test)
    group = b.load(_record(b, q, head, 4), typ=I32)
    b.cbranch(b.icmp_signed("<", group, groups), body, done)
    b.position_at_end(body)
    _make_oldest(b, m, q, head)
    b.branch(head_bb)
    b.position_at_end(done)
    b.ret_void()
    return fn


# --- the registry's emulations (backends/nvptx/intrinsics.py): (target, ctx, op, args) -------------

def emulate_mma(target: "CpuTarget", ctx: "LoweringContext", op, args: list[ll.Value]) -> ll.Value:
    """``nvptx.mma.sync`` on the CPU target."""
    return mma_result(ctx, args, mma(target, ctx, *mma_operands(ctx, op, args)))


def emulate_ldmatrix(target: "CpuTarget", ctx: "LoweringContext", op, args: list[ll.Value]) -> ll.Value:
    """``nvptx.ldmatrix`` on the CPU target."""
    return ldmatrix_result(ctx, op, ldmatrix(target, ctx, args[0], op.attrs["num"], bool(op.attrs["trans"])))


def emulate_cp_async(target: "CpuTarget", ctx: "LoweringContext", op, args: list[ll.Value]) -> None:
    """``nvptx.cp_async`` on the CPU target."""
    cp_async(target, ctx, args[0], args[1], op.attrs["bytes"], cp_async_src_bytes(op, args), op)


def emulate_cp_async_commit(target: "CpuTarget", ctx: "LoweringContext", op, args: list[ll.Value]) -> None:
    """``nvptx.cp_async.commit_group`` on the CPU target."""
    cp_async_commit(ctx)


def emulate_cp_async_wait(target: "CpuTarget", ctx: "LoweringContext", op, args: list[ll.Value]) -> None:
    """``nvptx.cp_async.wait_group`` on the CPU target."""
    cp_async_wait(ctx, op.attrs["n"])
