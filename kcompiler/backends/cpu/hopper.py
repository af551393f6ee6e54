"""NVIDIA's Hopper instructions (wgmma, TMA copies and stores, mbarriers, setmaxnreg, fence.proxy.async) emulated on
the CPU target, so that code written for sm_90a (``comptime if target.has("wgmma")``: std.matmul_sm90)
runs, and is checked, without a GPU. Enabled by ``CpuTarget(emulate_wgmma=True)``
(``target_options={"emulate_wgmma": True}``); off, the CPU target has none of these features and the
frontend refuses the builtins.

What each does here (the PTX semantics are stated in backends/nvptx/wgmma.py and tma.py):

- Shared-memory addresses that the instructions exchange (matrix descriptors, TMA destinations) are
  offsets from the block's dynamic shared memory, whose start stands for the 1024-aligned start of a
  GPU's shared window: the swizzles, which act on address bits 4-9, then act alike.
- ``tma_load`` (1-D to 5-D) copies the box at once, element by element: element (r, c) of the box (c
  innermost, r counting the box's rows over its outer axes, the innermost of them fastest) comes from
  global (c0 + c, c1 + r1, c2 + r2, ...), zero outside the tensor, and lands at byte offset
  ``r * box_row_bytes + c * size`` from the destination, swizzled: for an S-byte swizzle (32, 64, 128),
  address bits 4 .. 4 + log2(S / 16) are XORed with bits 7 .. (PTX ISA "Tensor copy: swizzling modes";
  CUTLASS's Swizzle<3, 4, 3> for 128 bytes). Then complete-tx of the box's bytes on the barrier.
- ``bulk_load`` copies its bytes at once (a byte loop), then complete-tx of them on the barrier; a
  source address or byte count that is not a multiple of 16 stops the launch (LaunchError naming it
  and the call's file:line:col: CpuTarget.fault), as the instruction faults on a GPU.
- ``tma_store`` (1-D to 5-D) is the reverse copy, at once: box element (r, c) is read from the same
  swizzled offset of the source and written to global (c0 + c, c1 + r1, ...) where that lies inside
  the tensor (TMA clips the box there); ``tma_store_commit`` and ``tma_store_wait`` do nothing (the
  store is complete when issued, which a GPU may also do).
- An mbarrier's 8 bytes hold: pending arrivals (bits 0-15), the arrival count (16-31), the
  transaction count (32-62, signed) and the phase parity (63). A phase completes when no arrival and
  no byte is pending; ``mbarrier_try_wait(bar, parity)`` is true once the phase of that parity has
  completed (the current phase's parity differs); ``mbarrier_wait`` yields to the other threads until
  then (a spin point: a block whose every thread waits on unchanging barriers stops the launch with
  the CPU target's deadlock error). The threads of a block share a host thread, so each operation is
  atomic.
- ``wgmma``: each thread computes its own N / 2 elements of D (wgmma's D fragment) from A and B in
  shared memory, decoding the descriptors as PTX's canonical layouts ("Shared Memory Matrix Layout",
  "Strides"): K-major, element (row, k) at ``start + (row % 8) * S + (row / 8) * SBO + k * size``;
  N-major B (trans_b), element (k, n) at ``start + (n % (S / size)) * size + (n / (S / size)) * LBO +
  (k % 8) * S + (k / 8) * SBO``; then swizzled as above. Only swizzled layouts (S = 32, 64, 128) are
  read. With A in registers (a vec<bf16|f16, 8> or vec<f8e4m3|f8e5m2, 16> fragment), a thread gathers the two rows of A it
  needs from its quad's fragments by warp shuffles. Products are exact in f32 and summed in k order
  (the tensor cores' order and internal precision are unspecified). The instruction is computed when issued, which a GPU may also do;
  ``wgmma_wait`` makes the warp's lanes meet (each has then computed its part), which is what lets a
  warp's lane 0 release the shared memory it read; ``wgmma_fence``, ``wgmma_commit``, ``setmaxnreg``
  and ``fence_proxy_async`` do nothing here.

The host makes tensor maps for the CPU target in its own 128-byte format
(kcompiler.runtime.tensormap, ``host_tensor_map``): 16 little-endian u64: the global address, rank,
element size, swizzle bytes, sizes (innermost first, 5 slots), byte strides (innermost first, 5
slots), the box sizes packed 16 bits each (slots 14, 15).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from llvmlite import ir as ll

from ..errors import UnsupportedOnTarget
from .scheduler import counted_loop
from ..nvptx.wgmma import SWIZZLE_MODES

if TYPE_CHECKING:  # pragma: no cover
    from ..llvm.lower import LoweringContext
    from .target import CpuTarget

I1, I8, I16, I32, I64 = ll.IntType(1), ll.IntType(8), ll.IntType(16), ll.IntType(32), ll.IntType(64)
F32 = ll.FloatType()
PTR = ll.PointerType()

#: The features the emulation gives the CPU target.
FEATURES = frozenset({"wgmma", "tma", "mbarrier", "setmaxnreg"})

#: Operations of the mbarrier helper.
_INIT, _ARRIVE, _EXPECT_TX, _COMPLETE_TX, _TRY_WAIT = range(5)

#: Element sizes and the K of one wgmma, by the language's type names.
_TYPES = {"bf16": (2, 16), "f16": (2, 16), "f8e4m3": (1, 32), "f8e5m2": (1, 32)}


def _c(v: int, t: ll.Type = I64) -> ll.Constant:
    return ll.Constant(t, v)


def _loop(b: ll.IRBuilder, n: ll.Value, name: str, body: Callable[[ll.Value], None]) -> None:
    """``for i in [0, n): body(i)`` (i of n's type, n >= 0) at the builder's position."""
    with counted_loop(b, ll.Constant(n.type, 0), n, name) as i:
        body(i)


def _swizzle(b: ll.IRBuilder, off: ll.Value, width: ll.Value) -> ll.Value:
    """Byte offset ``off`` (i64) under the ``width``-byte swizzle (0: none): bits 4.. ^= bits 7.."""
    mask = b.select(b.icmp_unsigned("==", width, _c(0)), _c(0), b.sub(b.lshr(width, _c(4)), _c(1)))
    return b.xor(off, b.shl(b.and_(b.lshr(off, _c(7)), mask), _c(4)))


def _helper(m: ll.Module, name: str, ret: ll.Type, args: list[ll.Type]) -> tuple[ll.Function, bool]:
    fn = m.globals.get(name)
    if fn is not None:
        return fn, False
    fn = ll.Function(m, ll.FunctionType(ret, args), name)
    fn.linkage = "internal"
    return fn, True


def _mbar_helper(m: ll.Module) -> ll.Function:
    """``i32 __kc_emu_mbarrier(ptr bar, i32 op, i32 arg)`` (module docstring)."""
    fn, new = _helper(m, "__kc_emu_mbarrier", I32, [PTR, I32, I32])
    if not new:
        return fn
    bar, op, arg = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    s = b.load(bar, typ=I64)
    pending = b.and_(s, _c(0xFFFF))
    expected = b.and_(b.lshr(s, _c(16)), _c(0xFFFF))
    tx = b.ashr(b.shl(s, _c(1)), _c(33))  # bits 32-62, sign-extended
    phase = b.lshr(s, _c(63))
    a64 = b.sext(arg, I64)
    is_ = {k: b.icmp_unsigned("==", op, _c(k, I32)) for k in range(5)}
    init = is_[_INIT]
    pending = b.select(init, a64, pending)
    expected = b.select(init, a64, expected)
    tx = b.select(init, _c(0), tx)
    phase = b.select(init, _c(0), phase)
    arrives = b.or_(is_[_ARRIVE], is_[_EXPECT_TX])
    pending = b.select(arrives, b.sub(pending, _c(1)), pending)
    tx = b.select(is_[_EXPECT_TX], b.add(tx, a64), tx)
    tx = b.select(is_[_COMPLETE_TX], b.sub(tx, a64), tx)
    updates = b.or_(arrives, is_[_COMPLETE_TX])
    complete = b.and_(updates, b.and_(b.icmp_signed("==", pending, _c(0)), b.icmp_signed("==", tx, _c(0))))
    phase = b.select(complete, b.xor(phase, _c(1)), phase)
    pending = b.select(complete, expected, pending)
    word = b.or_(b.or_(b.and_(pending, _c(0xFFFF)), b.shl(b.and_(expected, _c(0xFFFF)), _c(16))),
                 b.or_(b.shl(b.and_(tx, _c(0x7FFFFFFF)), _c(32)), b.shl(phase, _c(63))))
    keep = is_[_TRY_WAIT]
    b.store(b.select(keep, s, word), bar)
    done = b.icmp_unsigned("!=", phase, a64)
    b.ret(b.select(keep, b.zext(done, I32), _c(0, I32)))
    return fn


def _tma_helper(m: ll.Module, store: bool = False) -> ll.Function:
    """``void __kc_emu_tma(ptr dynbase, ptr dst, ptr map, ptr bar, ptr coords)``: coords, 5 i32
    (innermost first; those past the map's rank are 0). ``store``: ``__kc_emu_tma_store``, the same
    arguments (dst: the shared-memory source; bar unused), copying the box the other way, only the
    elements inside the tensor."""
    fn, new = _helper(m, "__kc_emu_tma_store" if store else "__kc_emu_tma", ll.VoidType(), [PTR, PTR, PTR, PTR, PTR])
    if not new:
        return fn
    base, dst, tmap, bar, coords = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))

    def field(k: int) -> ll.Value:
        return b.load(b.gep(tmap, [_c(k)], source_etype=I64), typ=I64)
    addr, rank, es, width = field(0), field(1), field(2), field(3)
    dims = [field(4 + k) for k in range(5)]
    strides = [field(9 + k) for k in range(5)]
    packed = [field(14), field(15)]
    # box sizes, innermost first; 1 past the rank (no such axis)
    boxes = [b.select(b.icmp_unsigned("<", _c(k), rank),
                      b.and_(b.lshr(packed[k // 4], _c(16 * (k % 4))), _c(0xFFFF)), _c(1)) for k in range(5)]
    cs = [b.sext(b.load(b.gep(coords, [_c(k)], source_etype=I32), typ=I32), I64) for k in range(5)]
    rowbytes = b.mul(boxes[0], es)
    rows = b.mul(b.mul(boxes[1], boxes[2]), b.mul(boxes[3], boxes[4]))
    rel = b.sub(b.ptrtoint(dst, I64), b.ptrtoint(base, I64))

    def row(r: ll.Value) -> None:
        # the row's coordinates along axes 1 .. 4 (mixed radix of the box sizes); inside the tensor?
        rem, inside, src = r, ll.Constant(I1, 1), addr
        for k in range(1, 5):
            g = b.add(cs[k], b.urem(rem, boxes[k]))
            rem = b.udiv(rem, boxes[k])
            ok = b.and_(b.icmp_signed(">=", g, _c(0)), b.icmp_signed("<", g, dims[k]))
            inside = b.and_(inside, b.or_(b.icmp_unsigned(">=", _c(k), rank), ok))
            src = b.add(src, b.mul(g, b.select(b.icmp_unsigned(">=", _c(k), rank), _c(0), strides[k])))

        def byte(cb: ll.Value) -> None:
            gx = b.add(cs[0], b.udiv(cb, es))
            ok = b.and_(inside, b.and_(b.icmp_signed(">=", gx, _c(0)), b.icmp_signed("<", gx, dims[0])))
            at = b.add(src, b.add(b.mul(gx, es), b.urem(cb, es)))
            off = _swizzle(b, b.add(rel, b.add(b.mul(r, rowbytes), cb)), width)
            if store:
                with b.if_then(ok):
                    v = b.load(b.gep(base, [off], source_etype=I8), typ=I8)
                    b.store(v, b.inttoptr(at, PTR))
                return
            v = b.load(b.inttoptr(b.select(ok, at, addr), PTR), typ=I8)
            b.store(b.select(ok, v, ll.Constant(I8, 0)), b.gep(base, [off], source_etype=I8))
        _loop(b, rowbytes, "cb", byte)
    _loop(b, rows, "r", row)
    if not store:
        b.call(_mbar_helper(m), [bar, _c(_COMPLETE_TX, I32), b.trunc(b.mul(rows, rowbytes), I32)])
    b.ret_void()
    return fn


def _bulk_helper(m: ll.Module) -> ll.Function:
    """``void __kc_emu_bulk(ptr dst, ptr src, i32 bytes, ptr bar)``: bulk_load (module docstring)."""
    fn, new = _helper(m, "__kc_emu_bulk", ll.VoidType(), [PTR, PTR, I32, PTR])
    if not new:
        return fn
    dst, src, nbytes, bar = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))

    def byte(i: ll.Value) -> None:
        b.store(b.load(b.gep(src, [i], source_etype=I8), typ=I8), b.gep(dst, [i], source_etype=I8))
    _loop(b, b.zext(nbytes, I64), "i", byte)
    b.call(_mbar_helper(m), [bar, _c(_COMPLETE_TX, I32), nbytes])
    b.ret_void()
    return fn


def _fp8_table(m: ll.Module, fmt: str) -> ll.Value:
    """A [256 x float] constant: each FP8 code's value (through ml_dtypes, the project's reference)."""
    name = f"__kc_emu_{fmt}_values"
    gv = m.globals.get(name)
    if gv is None:
        import ml_dtypes
        dt = {"f8e4m3": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}[fmt]
        vals = np.arange(256, dtype=np.uint8).view(dt).astype(np.float32)
        t = ll.ArrayType(F32, 256)
        gv = ll.GlobalVariable(m, t, name)
        gv.linkage = "internal"
        gv.global_constant = True
        gv.initializer = ll.Constant(t, [ll.Constant(F32, float(v)) for v in vals])
    return gv


def _element(b: ll.IRBuilder, m: ll.Module, p: ll.Value, t: str) -> ll.Value:
    """The element of type ``t`` at ``p`` as f32."""
    if t == "bf16":
        return b.bitcast(b.shl(b.zext(b.load(p, typ=I16), I32), _c(16, I32)), F32)
    if t == "f16":
        return b.fpext(b.load(p, typ=ll.HalfType()), F32)
    table = _fp8_table(m, t)
    return b.load(b.gep(table, [_c(0), b.zext(b.load(p, typ=I8), I64)], source_etype=ll.ArrayType(F32, 256)),
                  typ=F32)


def _wgmma_helper(m: ll.Module, n: int, ta: str, tb: str, trans_b: bool, a_regs: bool = False) -> ll.Function:
    """``void __kc_emu_wgmma_<..>(ptr dynbase, i64 a_desc, i64 b_desc, ptr acc, i32 tid, i1 scale_d)``:
    this thread's N / 2 accumulators (f32 at acc) of D = A B (+ D). With ``a_regs`` A is ``ptr a_rows``
    instead of a descriptor: this thread's two rows of A (:func:`_gather_a_rows`)."""
    name = f"__kc_emu_wgmma_n{n}_{ta}_{tb}{'_tb' if trans_b else ''}{'_ra' if a_regs else ''}"
    fn, new = _helper(m, name, ll.VoidType(), [PTR, PTR if a_regs else I64, I64, PTR, I32, I1])
    if not new:
        return fn
    base, da, db, acc, tid, scale_d = fn.args
    b = ll.IRBuilder(fn.append_basic_block("entry"))
    total = b.alloca(F32)
    es_a, kdim = _TYPES[ta]
    es_b = _TYPES[tb][0]

    def decode(d: ll.Value) -> tuple[ll.Value, ll.Value, ll.Value, ll.Value]:
        start = b.shl(b.and_(d, _c(0x3FFF)), _c(4))
        lbo = b.shl(b.and_(b.lshr(d, _c(16)), _c(0x3FFF)), _c(4))
        sbo = b.shl(b.and_(b.lshr(d, _c(32)), _c(0x3FFF)), _c(4))
        mode = b.lshr(d, _c(62))  # 1: 128 bytes, 2: 64, 3: 32
        width = b.select(b.icmp_unsigned("==", mode, _c(0)), _c(0), b.lshr(_c(256), mode))
        return start, lbo, sbo, width
    if not a_regs:
        sa, _, sbo_a, wa = decode(da)
    sb, lbo_b, sbo_b, wb = decode(db)
    t = b.zext(b.urem(tid, _c(128, I32)), I64)
    w, lane = b.udiv(t, _c(32)), b.urem(t, _c(32))
    g, q = b.udiv(lane, _c(4)), b.urem(lane, _c(4))

    def kmajor(start: ll.Value, sbo: ll.Value, width: ll.Value, mn: ll.Value, k: ll.Value, es: int) -> ll.Value:
        return b.add(start, b.add(b.add(b.mul(b.urem(mn, _c(8)), width), b.mul(b.udiv(mn, _c(8)), sbo)),
                                  b.mul(k, _c(es))))

    def output(r: ll.Value) -> None:
        row = b.add(b.add(b.mul(w, _c(16)), g), b.mul(_c(8), b.udiv(b.urem(r, _c(4)), _c(2))))
        col = b.add(b.add(b.mul(_c(8), b.udiv(r, _c(4))), b.mul(_c(2), q)), b.urem(r, _c(2)))
        slot = b.gep(acc, [r], source_etype=F32)
        b.store(b.select(scale_d, b.load(slot, typ=F32), ll.Constant(F32, 0.0)), total)

        def term(k: ll.Value) -> None:
            if a_regs:  # row 16 w + g + 8 h is this thread's row h
                h = b.udiv(b.urem(r, _c(4)), _c(2))
                ap = b.gep(da, [b.mul(b.add(b.mul(h, _c(kdim)), k), _c(es_a))], source_etype=I8)
            else:
                ap = b.gep(base, [_swizzle(b, kmajor(sa, sbo_a, wa, row, k, es_a), wa)], source_etype=I8)
            if trans_b:
                per = b.udiv(wb, _c(es_b))  # elements of n in a swizzled row
                boff = b.add(sb, b.add(b.add(b.mul(b.urem(col, per), _c(es_b)), b.mul(b.udiv(col, per), lbo_b)),
                                       b.add(b.mul(b.urem(k, _c(8)), wb), b.mul(b.udiv(k, _c(8)), sbo_b))))
            else:
                boff = kmajor(sb, sbo_b, wb, col, k, es_b)
            av = _element(b, m, ap, ta)
            bv = _element(b, m, b.gep(base, [_swizzle(b, boff, wb)], source_etype=I8), tb)
            b.store(b.fadd(b.load(total, typ=F32), b.fmul(av, bv)), total)
        _loop(b, _c(kdim), "k", term)
        b.store(b.load(total, typ=F32), slot)
    _loop(b, _c(n // 2), "r", output)
    b.ret_void()
    return fn


def _gather_a_rows(target: "CpuTarget", ctx: "LoweringContext", frag: ll.Value, tid: ll.Value) -> ll.Value:
    """The two rows of A this thread's D elements need (16w + g and + 8, k = 0 .. K - 1), gathered from
    the register fragments of its quad (lanes 4g .. 4g + 3, module docstring of backends/nvptx/wgmma.py)
    by warp shuffles, into a [2 x 32 bytes] array (16 16-bit or 32 FP8 elements a row: both fragments
    put register k of lane 4g + src at the same word); returns a pointer to it."""
    b = ctx.b
    w = b.bitcast(frag, ll.VectorType(I32, 4))
    regs = [b.extract_element(w, _c(k, I32)) for k in range(4)]
    rows = ctx.alloca(ll.ArrayType(I32, 16), name="wgmma_a_rows")
    quad = b.and_(b.urem(tid, _c(32, I32)), _c(~3 & 0xFFFFFFFF, I32))
    for src in range(4):
        lane = b.add(quad, _c(src, I32))
        for k in range(4):
            # register k of lane 4g + src: row g + 8 (k % 2), the pair of k's 2 src (+ 8 for k >= 2)
            x = target.shuffle(ctx, "idx", regs[k], lane)
            b.store(x, b.gep(rows, [_c(0, I32), _c(8 * (k % 2) + 4 * (k // 2) + src, I32)]))
    return b.bitcast(rows, PTR)


def _linear_tid(target: "CpuTarget", ctx: "LoweringContext") -> ll.Value:
    b = ctx.b
    tx, ty, tz = (target.special(ctx, "thread_id", d) for d in "xyz")
    nx, ny = (target.special(ctx, "block_dim", d) for d in "xy")
    return b.add(tx, b.mul(nx, b.add(ty, b.mul(ny, tz))))


#: The Hopper intrinsics' names (backends/nvptx/intrinsics.py) by the builtins' names this file uses.
_NAMES = {"wgmma.mma_async": "wgmma", "wgmma.fence": "wgmma_fence", "wgmma.commit_group": "wgmma_commit",
          "wgmma.wait_group": "wgmma_wait", "wgmma.desc": "wgmma_desc", "tma.load": "tma_load",
          "tma.bulk_load": "bulk_load",
          "tma.store": "tma_store", "tma.store_commit": "tma_store_commit", "tma.store_wait": "tma_store_wait",
          "mbarrier.init": "mbarrier_init", "mbarrier.arrive": "mbarrier_arrive",
          "mbarrier.arrive_expect_tx": "mbarrier_arrive_expect_tx", "mbarrier.try_wait": "mbarrier_try_wait",
          "mbarrier.wait": "mbarrier_wait", "setmaxnreg": "setmaxnreg", "fence.proxy_async": "fence_proxy_async"}


def emulate(target: "CpuTarget", ctx: "LoweringContext", op: Any, args: list[ll.Value]) -> ll.Value | None:
    """The registry's CPU emulation of a Hopper intrinsic (``nvptx.wgmma.*``, ``nvptx.tma.load``,
    ``nvptx.mbarrier.*``...; module docstring)."""
    full = op.attrs["intrinsic"]
    b, m, name, at = ctx.b, ctx.module, _NAMES.get(full.removeprefix("nvptx."), full), op.attrs
    if name in ("wgmma_fence", "wgmma_commit", "setmaxnreg", "fence_proxy_async", "tma_store_commit",
                "tma_store_wait"):
        return None
    if name == "wgmma_wait":
        target.warp_sync(ctx)  # the warp's lanes have each computed their part (module docstring)
        return None
    base = target.dynamic_shared(ctx)
    if name == "wgmma_desc":
        rel = b.sub(b.ptrtoint(args[0], I64), b.ptrtoint(base, I64))
        const = (((at["lbo"] >> 4) & 0x3FFF) << 16 | ((at["sbo"] >> 4) & 0x3FFF) << 32
                 | SWIZZLE_MODES[at["swizzle"]] << 62)
        return b.or_(b.lshr(b.and_(rel, _c(0x3FFFF)), _c(4)), ll.Constant(I64, const))
    if name == "wgmma":
        n = at["n"]
        acc = ctx.alloca(ll.VectorType(F32, n // 2), name="wgmma_acc")
        b.store(args[2], acc)
        tid = _linear_tid(target, ctx)
        a = args[0]
        if isinstance(a.type, ll.VectorType):
            a = _gather_a_rows(target, ctx, a, tid)
        helper = _wgmma_helper(m, n, at["a_type"], at["b_type"], bool(at["trans_b"]), a.type != I64)
        b.call(helper, [base, a, args[1], acc, tid, args[3]])
        return b.load(acc, typ=ll.VectorType(F32, n // 2))
    if name == "tma_load":
        coords = ctx.alloca(ll.ArrayType(I32, 5), name="tma_coords")
        for k in range(5):
            b.store(args[3 + k] if 3 + k < len(args) else _c(0, I32), b.gep(coords, [_c(0, I32), _c(k, I32)]))
        b.call(_tma_helper(m), [base, args[0], args[1], args[2], b.bitcast(coords, PTR)])
        return None
    if name == "bulk_load":
        # cp.async.bulk faults on a misaligned source or size (PTX: multiples of 16): so does this
        bad = b.icmp_unsigned("!=", b.and_(b.or_(b.ptrtoint(args[1], I64), b.zext(args[2], I64)), _c(15)), _c(0))
        with b.if_then(bad, likely=False):
            target.fault(ctx, "bulk_load: the source address and the byte count must be multiples of 16")
        b.call(_bulk_helper(m), list(args))
        return None
    if name == "tma_store":
        coords = ctx.alloca(ll.ArrayType(I32, 5), name="tma_coords")
        for k in range(5):
            b.store(args[2 + k] if 2 + k < len(args) else _c(0, I32), b.gep(coords, [_c(0, I32), _c(k, I32)]))
        b.call(_tma_helper(m, store=True), [base, args[1], args[0], ll.Constant(PTR, None), b.bitcast(coords, PTR)])
        return None
    mbar = _mbar_helper(m)
    if name == "mbarrier_init":
        b.call(mbar, [args[0], _c(_INIT, I32), args[1]])
    elif name == "mbarrier_arrive":
        b.call(mbar, [args[0], _c(_ARRIVE, I32), _c(0, I32)])
    elif name == "mbarrier_arrive_expect_tx":
        b.call(mbar, [args[0], _c(_EXPECT_TX, I32), args[1]])
    elif name == "mbarrier_try_wait":
        return b.icmp_unsigned("!=", b.call(mbar, [args[0], _c(_TRY_WAIT, I32), args[1]]), _c(0, I32))
    elif name == "mbarrier_wait":
        head = b.append_basic_block("mbar.wait")
        again = b.append_basic_block("mbar.again")
        done = b.append_basic_block("mbar.done")
        b.branch(head)
        b.position_at_end(head)
        ok = b.call(mbar, [args[0], _c(_TRY_WAIT, I32), args[1]])
        b.cbranch(b.icmp_unsigned("!=", ok, _c(0, I32)), done, again)
        b.position_at_end(again)
        # a yield to the block's other threads; a spin point, so that a wait no thread can end (every
        # thread of the block waiting, the barriers unchanged) stops the launch as a deadlock
        target.spin_point(ctx, b.load(args[0], typ=I64))
        b.branch(head)
        b.position_at_end(done)
    else:
        raise UnsupportedOnTarget(f"{name} is not emulated on the cpu target")
    return None


__all__ = ["FEATURES", "emulate"]
