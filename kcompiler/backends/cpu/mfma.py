"""AMD's MFMA emulated on the CPU target with wavefronts of 64 lanes, so that a kernel's MFMA path
(``comptime if target.has("mfma")``) runs, and is checked, without an AMD GPU. Enabled by
``CpuTarget(emulate_mfma=...)`` (``target_options={"emulate_mfma": "gfx950"}``, or ``"gfx942"``,
``"gfx90a"``; ``True`` is gfx950): ``target.has`` then answers as that chip does for the ``mfma*``
features (which forms exist; FP8 read as FNUZ on gfx942, OCP on gfx950), and warps have 64 lanes.

The lane layouts are those of backends/amdgcn/mfma.py: with E = M * K / 64 elements of A and B a
lane, A[i][k] is element k % E of lane i + M (k // E), B[k][j] element k % E of lane j + N (k // E),
and D[i][j] register 4 (q // G) + i % 4 of lane j + N (q % G), q = i // 4, G = 64 // N.

Each lane converts its E elements of A and of B to f32 (exact: bf16, f16 and FP8 values are f32
values) into a buffer in its frame, posts the buffer's address and meets the wavefront
(warp_matrix's exchange: two warp operations); then ``__kc_mfma_<shape>`` computes the lane's
registers of D from the other lanes' buffers and its own C, each as C + sum over k in k order of
the f32 products (the hardware's order and internal width are not specified).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as ll

from .warp_exchange import buffer, exchange, function, posted
from ..amdgcn.target import ARCHS
from ...numerics.formats import FORMATS
from ..amdgcn.intrinsics import mfma_feature
from ..amdgcn.mfma import operands
from ..errors import UnsupportedOnTarget

if TYPE_CHECKING:  # pragma: no cover
    from ..llvm.lower import LoweringContext
    from .target import CpuTarget

I16, I32, I64 = ll.IntType(16), ll.IntType(32), ll.IntType(64)
F32 = ll.FloatType()
PTR = ll.PointerType()

#: The most elements of A (and of B) a lane holds (the f8f6f4 forms), and of C.
_MAX_E, _MAX_C = 32, 16

#: The chips whose MFMA the CPU target can emulate (what ``emulate_mfma`` takes).
CHIPS = ("gfx90a", "gfx942", "gfx950")


def features(chip: str) -> frozenset[str]:
    """The ``mfma*`` features of AMD chip ``chip`` (the AMDGCN target's table). Raises ValueError for
    a chip outside :data:`CHIPS`."""

    if chip not in CHIPS:
        raise ValueError(f"cpu target: emulate_mfma emulates {', '.join(CHIPS)} (or True: gfx950), not {chip!r}")
    return frozenset(f for f in ARCHS[chip][1] if f.startswith("mfma"))


def _c(v: int, t: ll.Type = I32) -> ll.Constant:
    return ll.Constant(t, v)


def _to_f32(target: "CpuTarget", ctx: "LoweringContext", v: ll.Value, elem: str) -> list[ll.Value]:
    """The f32 values of the elements of LLVM vector ``v`` of IR element type ``elem`` (exact)."""
    b = ctx.b
    n = v.type.count
    xs = [b.extract_element(v, _c(k)) for k in range(n)]
    if elem == "f16":
        return [b.fpext(x, F32) for x in xs]
    if elem == "bf16":  # a bf16 is the high half of the f32 of the same value
        return [b.bitcast(b.shl(b.zext(b.bitcast(x, I16), I32), _c(16)), F32) for x in xs]
    return target.minifloat_decode(ctx, xs, FORMATS[elem])


def mfma(target: "CpuTarget", ctx: "LoweringContext", shape: str, a_type: str, b_type: str, a: ll.Value,
         bv: ll.Value, c: ll.Value) -> ll.Value:
    """One wavefront's ``v_mfma_f32_<shape>``: this lane's D (module docstring)."""
    b = ctx.b
    E = a.type.count
    ops = buffer(ctx, "mfma_operands", F32, 2 * _MAX_E)  # A's E values, then B's
    for k, x in enumerate(_to_f32(target, ctx, a, a_type) + _to_f32(target, ctx, bv, b_type)):
        b.store(x, b.gep(ops, [_c(k if k < E else _MAX_E + k - E)], source_etype=F32))
    io = buffer(ctx, "mfma_accumulators", F32, _MAX_C)
    R = c.type.count
    for r in range(R):
        b.store(b.extract_element(c, _c(r)), b.gep(io, [_c(r)], source_etype=F32))
    exchange(target, ctx, "mfma", b.ptrtoint(ops, I64), _mfma_function(ctx.module, shape), [io])
    d: ll.Value = ll.Constant(c.type, ll.Undefined)
    for r in range(R):
        d = b.insert_element(d, b.load(b.gep(io, [_c(r)], source_etype=F32), typ=F32), _c(r))
    return d


def _mfma_function(m: ll.Module, shape: str) -> ll.Function:
    """``void __kc_mfma_<shape>(ptr thread_context, i32 lane, ptr io)``: io holds this lane's R
    registers of C and receives D's: register r, at row i_r = 4 (G (r // 4) + lane // N) + r % 4 and
    column j = lane % N, gets C + sum over k of A[i_r][k] B[k][j], read from the posted buffers of
    lanes i_r + M (k // E) (A's value k % E) and j + N (k // E) (B's, after the _MAX_E of A's)."""
    M, N, K = (int(x) for x in shape.split("x"))
    E, R, G = M * K // 64, M * N // 64, 64 // N
    fn, new = function(m, f"__kc_mfma_{shape}", [PTR, I32, PTR])
    if not new:
        return fn
    fn.attributes.add("noinline")  # one copy, out of the kernel's coroutine
    tctx, lane, io = fn.args
    entry = fn.append_basic_block("entry")
    head, body, done = (fn.append_basic_block(x) for x in ("k.head", "k.body", "done"))
    b = ll.IRBuilder(entry)
    j = b.urem(lane, _c(N))
    group = b.udiv(lane, _c(N))
    rows = [b.add(_c(4 * G * (r // 4) + r % 4), b.mul(group, _c(4))) for r in range(R)]
    c0 = [b.load(b.gep(io, [_c(r)], source_etype=F32), typ=F32) for r in range(R)]
    b.branch(head)

    b.position_at_end(head)
    k = b.phi(I32, "k")
    k.add_incoming(_c(0), entry)
    accs = [b.phi(F32, f"acc{r}") for r in range(R)]
    for acc, x in zip(accs, c0):
        acc.add_incoming(x, entry)
    b.cbranch(b.icmp_unsigned("<", k, _c(K)), body, done)

    b.position_at_end(body)
    q, e = b.udiv(k, _c(E)), b.urem(k, _c(E))

    def operand(src_lane: ll.Value, index: ll.Value) -> ll.Value:
        buf = b.inttoptr(posted(b, tctx, lane, src_lane), PTR)
        return b.load(b.gep(buf, [index], source_etype=F32), typ=F32)

    bk = operand(b.add(j, b.mul(q, _c(N))), b.add(e, _c(_MAX_E)))
    nxt = []
    for acc, i in zip(accs, rows):
        ak = operand(b.add(i, b.mul(q, _c(M))), e)
        nxt.append(b.fadd(acc, b.fmul(ak, bk)))
    k.add_incoming(b.add(k, _c(1)), body)
    for acc, x in zip(accs, nxt):
        acc.add_incoming(x, body)
    b.branch(head)

    b.position_at_end(done)
    for r, acc in enumerate(accs):
        b.store(acc, b.gep(io, [_c(r)], source_etype=F32))
    b.ret_void()
    return fn


def emulate_mfma(target: "CpuTarget", ctx: "LoweringContext", op, args: list[ll.Value]) -> ll.Value:
    """The registry's CPU emulation of ``amdgcn.mfma`` (backends/amdgcn/intrinsics.py), as the
    emulated chip does: a form that chip lacks is refused as on the chip."""
    shape, a_type, b_type = operands(op)
    if not target.has(mfma_feature(shape, a_type)):
        raise UnsupportedOnTarget(f"mfma {shape} of {a_type} is not available on {target.arch} "
                                  f"(emulating {target.emulate_mfma})")
    return mfma(target, ctx, shape, a_type, b_type, *args)
