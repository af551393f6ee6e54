"""Warpgroup-level matrix multiply-accumulate (``wgmma``), its shared-memory matrix descriptors and
``setmaxnreg`` on NVIDIA sm_90a, written as inline PTX (as mma.py does for mma.sync).

The instructions (PTX ISA 8.x, section 9.7.15 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
Instructions"):

``wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.{bf16,f16} d, a-desc, b-desc, p, 1, 1, 0, tB;``
and ``wgmma.mma_async.sync.aligned.m64nNk32.f32.{e4m3,e5m2}.{e4m3,e5m2} d, a-desc, b-desc, p, 1, 1;``
(N a multiple of 8 from 8 to 256): D (64 x N, f32) = A (64 x K) * B (K x N) + (p ? D : 0), issued by
the 4 warps of a warpgroup (128 consecutive threads whose first warp index is a multiple of 4). A and B
are read from shared memory through descriptors. D is held in registers, N / 2 f32 a thread: with
warp w = (thread % 128) / 32, lane l, g = l / 4 and t = l % 4, register 4j + r (j = 0 .. N/8 - 1) holds
row 16w + g + 8 (r / 2), column 8j + 2t + r % 2 ("Register Fragments and Shared Memory Matrix Layouts",
"Matrix Fragments for wgmma.m64nNk16 / m64nNk32", the D fragment figure): each n8 slice is laid out as
mma.sync's m16n8 accumulator, the warp taking rows 16w .. 16w + 15. The last immediate, tB, transposes
B ("imm-trans-b": 1 reads B stored N-major, i.e. a row-major K x N matrix); 16-bit types only.
With A in registers (16-bit types: ``wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 d, {a0, a1, a2,
a3}, b-desc, p, 1, 1, tB;``, no imm-trans-a) a thread holds 8 elements of A in four .b32 registers, the
layout of mma.sync m16n8k16's A fragment with warp w taking rows 16w .. 16w + 15 ("Matrix Fragments for
wgmma.m64nNk16", the A figure): elements 0, 1 at (row 16w + g, k 2t, 2t + 1), 2, 3 at (row + 8, same
k), 4, 5 at (row, k 2t + 8, 2t + 9), 6, 7 at (row + 8, k + 8). Two n8 slices of a D fragment, rounded
to 16 bits, are one such A fragment (FlashAttention's P = softmax(S) feeding O += P V). FP8 (m64nNk32,
``{a0, a1, a2, a3}`` too, no tB): 16 elements, 4 to a register, lower k in lower bytes, the layout of
mma.sync m16n8k32's A fragment ("Matrix Fragments for wgmma.m64nNk32", the A figure for .e4m3/.e5m2;
mma.py): a0 (row 16w + g, k 4t .. 4t + 3), a1 (row + 8, same k), a2 (row, k 16 + 4t ..), a3 (row + 8,
k 16 + 4t ..); CUTLASS's GMMA::ALayout_64x32 (cute/atom/mma_traits_sm90_gmma.hpp) says the same.

``wgmma.fence.sync.aligned`` orders register accesses to D before a wgmma; ``wgmma.commit_group`` closes
the warpgroup's pending wgmmas into a group; ``wgmma.wait_group N`` waits until at most N groups are
pending (their D registers may then be read and their shared memory reused).

Matrix descriptor (section 9.7.15.5.1 "Matrix Descriptor Format"), a 64-bit value:
bits 0-13 the start address, (addr & 0x3FFFF) >> 4; bits 16-29 the leading-dimension byte offset >> 4;
bits 32-45 the stride-dimension byte offset >> 4; bits 49-51 the base offset (0: the swizzle pattern's
1024-byte period starts at an aligned address, as kcompiler's tiles do); bits 62-63 the swizzle mode
(0 none, 1 128-byte, 2 64-byte, 3 32-byte). For a K-major tile swizzled by 128 bytes (rows of 128
bytes, the layout TMA writes with CU_TENSOR_MAP_SWIZZLE_128B) the stride offset is 1024 (8 rows) and
the leading offset is unused; the k-th 32-byte slice of the rows starts 32k bytes further (the
hardware applies the swizzle to the address it forms, which is why tiles are 1024-byte aligned).

``setmaxnreg.{inc,dec}.sync.aligned.u32 N`` (section 9.7.17.x "setmaxnreg"; N a multiple of 8 from 24
to 256): the warpgroup's per-thread register budget grows or shrinks to N. It takes effect only in a
kernel with a register cap at entry (``launch_bounds``), which is how a producer warpgroup hands its
registers to the consumers of a warp-specialised kernel.
"""
from __future__ import annotations

from llvmlite import ir as ll

from ..errors import UnsupportedOnTarget
from ..llvm.lower import LoweringContext

_I1, _I32, _I64, _F32 = ll.IntType(1), ll.IntType(32), ll.IntType(64), ll.FloatType()

#: PTX type names of the element types wgmma reads, and the K of one instruction for each.
WGMMA_TYPES = {"bf16": ("bf16", 16), "f16": ("f16", 16), "f8e4m3": ("e4m3", 32), "f8e5m2": ("e5m2", 32)}

#: Descriptor swizzle modes by the swizzle's width in bytes (0: none).
SWIZZLE_MODES = {0: 0, 128: 1, 64: 2, 32: 3}


def _void(ctx: LoweringContext, text: str) -> None:
    call = ctx.b.asm(ll.FunctionType(ll.VoidType(), []), text, "~{memory}", [], side_effect=True)
    call.attributes.add("convergent")


def wgmma(ctx: LoweringContext, n: int, a_type: str, b_type: str, a_desc: ll.Value, b_desc: ll.Value,
          acc: list[ll.Value], scale_d: ll.Value, trans_b: bool) -> list[ll.Value]:
    """``wgmma.mma_async`` m64nNk16 (bf16/f16) or m64nNk32 (FP8) with f32 accumulators (module
    docstring): ``a_desc`` an i64 descriptor, or (16-bit types) a vector of 8 elements, this thread's
    A fragment in registers; ``acc`` is this thread's N / 2 floats of D, ``scale_d`` an i1 (false: D = A * B).
    Returns the new N / 2 floats. Raises UnsupportedOnTarget for types or an N wgmma does not have."""
    (pa, ka), (pb, kb) = WGMMA_TYPES[a_type], WGMMA_TYPES[b_type]
    if ka != kb or (ka == 16 and a_type != b_type):
        raise UnsupportedOnTarget(f"wgmma of {a_type} x {b_type}: A and B are both f16, both bf16, or both FP8")
    if not (8 <= n <= 256 and n % 8 == 0) or len(acc) != n // 2:
        raise UnsupportedOnTarget(f"wgmma m64n{n}: N must be a multiple of 8 from 8 to 256")
    if trans_b and ka != 16:
        raise UnsupportedOnTarget("wgmma reads FP8 B K-major only: trans_b applies to f16 and bf16")
    m = n // 2
    regs = ", ".join(f"${k}" for k in range(m))
    if isinstance(a_desc.type, ll.VectorType):  # A from registers: 8 16-bit or 16 8-bit elements as 4 .b32
        v = ctx.b.bitcast(a_desc, ll.VectorType(_I32, 4))
        a_ops = [ctx.b.extract_element(v, ll.Constant(_I32, k)) for k in range(4)]
        a_text = "{" + ", ".join(f"${m + k}" for k in range(4)) + "}"
        tail = f", 1, 1, {int(trans_b)}" if ka == 16 else ", 1, 1"
        a_cons = ["r"] * 4
    else:
        a_ops, a_text, a_cons = [a_desc], f"${m}", ["l"]
        tail = f", 1, 1, 0, {int(trans_b)}" if ka == 16 else ", 1, 1"
    nb = m + len(a_ops)
    text = ("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $" + str(nb + 1) + ", 0;\n\t"
            f"wgmma.mma_async.sync.aligned.m64n{n}k{ka}.f32.{pa}.{pb} {{{regs}}}, {a_text}, ${nb}, p{tail};\n\t}}")
    cons = ",".join(["=f"] * m + a_cons + ["l", "r"] + [str(k) for k in range(m)])
    ftype = ll.FunctionType(ll.LiteralStructType([_F32] * m), [a.type for a in a_ops] + [_I64, _I32] + [_F32] * m)
    d = ctx.b.asm(ftype, text, cons, a_ops + [b_desc, ctx.b.zext(scale_d, _I32)] + acc, side_effect=True)
    d.attributes.add("convergent")
    return [ctx.b.extract_value(d, k) for k in range(m)]


def wgmma_fence(ctx: LoweringContext) -> None:
    """``wgmma.fence.sync.aligned``."""
    _void(ctx, "wgmma.fence.sync.aligned;")


def wgmma_commit(ctx: LoweringContext) -> None:
    """``wgmma.commit_group.sync.aligned``."""
    _void(ctx, "wgmma.commit_group.sync.aligned;")


def wgmma_wait(ctx: LoweringContext, n: int) -> None:
    """``wgmma.wait_group.sync.aligned n``."""
    _void(ctx, f"wgmma.wait_group.sync.aligned {n};")


def wgmma_desc(ctx: LoweringContext, ptr: ll.Value, swizzle: int, lbo: int, sbo: int) -> ll.Value:
    """The 64-bit matrix descriptor of the shared-memory tile at ``ptr`` (module docstring); ``lbo``
    and ``sbo`` in bytes (multiples of 16 below 2^18)."""
    b = ctx.b
    addr = b.zext(b.ptrtoint(ptr, _I32), _I64)
    start = b.lshr(b.and_(addr, ll.Constant(_I64, 0x3FFFF)), ll.Constant(_I64, 4))
    const = ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 | SWIZZLE_MODES[swizzle] << 62
    return b.or_(start, ll.Constant(_I64, const))


def setmaxnreg(ctx: LoweringContext, n: int, increase: bool) -> None:
    """``setmaxnreg.{inc,dec}.sync.aligned.u32 n``."""
    _void(ctx, f"setmaxnreg.{'inc' if increase else 'dec'}.sync.aligned.u32 {n};")
