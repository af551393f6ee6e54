"""Warp-level matrix multiply-accumulate, ``ldmatrix`` and ``cp.async`` on NVIDIA (sm_80+), written as
inline PTX: LLVM 22's NVVM intrinsics for them exist but kcompiler needs the exact instruction
forms below (zero-filling cp.async, bf16 and FP8 mma) on every arch it targets, and inline PTX
is what ptxas checks and what CUTLASS emits.

The instructions (PTX ISA 8.x, section 9.7.14.5 "Warp Level Matrix Multiply-Accumulate
Instructions" and 9.7.9.25 "Data Movement: cp.async"):

``mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 d, a, b, c`` (sm_80; A and B of one
type) and ``mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32`` (sm_89, PTX ISA 8.4):
D (16 x 8) = A (16 x K) * B (K x 8) + C. With ``g = laneid >> 2`` (groupID) and ``t = laneid % 4``
(threadID_in_group), and E the elements per 32-bit register (2 for f16/bf16, 4 for FP8; K = 8E):

- A, four registers ("Matrix Fragments for mma.m16n8k16 with floating point type", Figure
  "fragment layout for matrix A with .f16/.bf16 type"; "... mma.m16n8k32", ".e4m3/.e5m2"):
  a0: row g,     cols tE .. tE+E-1;        a1: row g + 8, cols tE .. tE+E-1;
  a2: row g,     cols 4E + tE .. ;         a3: row g + 8, cols 4E + tE .. .
  (In the ISA's element numbering: row = g for a_i with i < E or 2E <= i < 3E, else g + 8;
  col = tE + i % E, plus 4E for i >= 2E.) Lower elements sit in the lower bits of a register.
- B, two registers: b0: rows (k) tE .. tE+E-1 of column g; b1: rows 4E + tE .. of column g.
- C and D, four f32: c0, c1: row g, cols 2t, 2t+1; c2, c3: row g + 8, cols 2t, 2t+1.

``ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16`` (sm_75; section "Warp-level matrix load
instruction: ldmatrix"): loads 1, 2 or 4 matrices of 8 x 8 16-bit elements (each row 16 contiguous
bytes, 16-byte aligned); lanes 8j .. 8j+7 give the addresses of rows 0..7 of matrix j. Lane l
receives one register per matrix: row g, elements 2t and 2t+1 (the first in the low half); with
``.trans``, elements (2t, g) and (2t+1, g), i.e. column g of the stored rows. So x4 of a 16 x 16
row-major A tile (matrix j = rows 8(j%2).., cols 8(j/2)..) gives exactly a0..a3 above, and x2.trans
of a 16 x 8 tile of a row-major K x N matrix B (matrix j = k rows 8j..) gives b0, b1; for FP8 the
same bytes move (an 8 x 16-byte row is 16 FP8 elements), giving the m16n8k32 A fragment from a
row-major 16 x 32 tile and the B fragment from an N x K (k contiguous) tile.

``cp.async.{ca,cg}.shared.global [dst], [src], cp-size{, src-size}`` (sm_80, PTX ISA 7.0): copies
cp-size bytes (4, 8 or 16; .cg, which bypasses L1, only takes 16) without the thread waiting; only
src-size bytes are read and the rest of dst is zero-filled. ``cp.async.commit_group`` closes the
thread's group, ``cp.async.wait_group N`` waits until at most N of its groups are pending; the copies
are visible to other threads after a barrier that follows the wait.
"""
from __future__ import annotations

from llvmlite import ir as ll

from ..errors import UnsupportedOnTarget
from ..llvm.lower import LoweringContext

_I32, _I64, _F32 = ll.IntType(32), ll.IntType(64), ll.FloatType()

#: PTX type names of the IR's element types.
PTX_TYPES = {"bf16": "bf16", "f16": "f16", "f8e4m3": "e4m3", "f8e5m2": "e5m2"}


#: Instructions of this file that need a newer PTX ISA than the one LLVM is asked for (PTX_FEATURES):
#: their opcode prefix and the version, from each instruction's "PTX ISA Notes".
_PTX_VERSIONS = (("mma.sync.aligned.m16n8k32.row.col.f32.e", (8, 4)),)


def raise_ptx_version(ptx: str) -> str:
    """``ptx`` with its ``.version`` raised to what its inline instructions need (FP8 mma: 8.4). The
    rest of the module, emitted by LLVM for an older ISA, is valid in the newer one."""
    import re

    need = max((v for prefix, v in _PTX_VERSIONS if prefix in ptx), default=None)
    m = re.search(r"^\.version (\d+)\.(\d+)$", ptx, re.M)
    if need is None or m is None or (int(m.group(1)), int(m.group(2))) >= need:
        return ptx
    return ptx[:m.start()] + f".version {need[0]}.{need[1]}" + ptx[m.end():]


def _convergent(call: ll.Instruction) -> ll.Instruction:
    # A .sync.aligned warp instruction: LLVM must not make it depend on more control flow than it did.
    call.attributes.add("convergent")
    return call


def _shared_address(ctx: LoweringContext, p: ll.Value) -> ll.Value:
    """A shared-space pointer as the 32-bit address PTX's ``.shared`` operands take."""
    return ctx.b.ptrtoint(p, _I32)


def mma(ctx: LoweringContext, shape: str, a_type: str, b_type: str, a: list[ll.Value], b: list[ll.Value],
        c: list[ll.Value]) -> list[ll.Value]:
    """``mma.sync.aligned.<shape>.row.col.f32.<a>.<b>.f32`` (module docstring)."""
    if shape == "m16n8k16" and (a_type != b_type or a_type not in ("bf16", "f16")):
        raise UnsupportedOnTarget(f"mma m16n8k16 of {a_type} x {b_type}: A and B are both f16 or both bf16")
    if shape == "m16n8k32" and not {a_type, b_type} <= {"f8e4m3", "f8e5m2"}:
        raise UnsupportedOnTarget(f"mma m16n8k32 of {a_type} x {b_type}: A and B are FP8 (e4m3, e5m2)")
    text = (f"mma.sync.aligned.{shape}.row.col.f32.{PTX_TYPES[a_type]}.{PTX_TYPES[b_type]}.f32 "
            "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};")
    ret = ll.LiteralStructType([_F32] * 4)
    ftype = ll.FunctionType(ret, [_I32] * 6 + [_F32] * 4)
    d = _convergent(ctx.b.asm(ftype, text, "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", a + b + c, side_effect=False))
    return [ctx.b.extract_value(d, k) for k in range(4)]


def ldmatrix(ctx: LoweringContext, ptr: ll.Value, num: int, trans: bool) -> list[ll.Value]:
    """``ldmatrix.sync.aligned.m8n8.x<num>[.trans].shared.b16`` (module docstring)."""
    regs = ", ".join(f"${k}" for k in range(num))
    text = f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared.b16 {{{regs}}}, [${num}];"
    ret = _I32 if num == 1 else ll.LiteralStructType([_I32] * num)
    ftype = ll.FunctionType(ret, [_I32])
    # side effects: it reads memory (written by other threads before a barrier), so it must stay
    # after that barrier
    r = _convergent(ctx.b.asm(ftype, text, ",".join(["=r"] * num + ["r"]), [_shared_address(ctx, ptr)],
                              side_effect=True))
    return [r] if num == 1 else [ctx.b.extract_value(r, k) for k in range(num)]


def cp_async(ctx: LoweringContext, dst: ll.Value, src: ll.Value, nbytes: int, src_bytes: ll.Value | None) -> None:
    """``cp.async.{ca,cg}.shared.global`` (module docstring): .cg for 16 bytes, .ca for 4 and 8."""
    cache = "cg" if nbytes == 16 else "ca"
    args = [_shared_address(ctx, dst), ctx.b.ptrtoint(src, _I64)]
    types = [_I32, _I64]
    cons = "r,l"
    tail = ""
    if src_bytes is not None:
        args.append(src_bytes)
        types.append(_I32)
        cons += ",r"
        tail = ", $2"
    text = f"cp.async.{cache}.shared.global [$0], [$1], {nbytes}{tail};"
    ctx.b.asm(ll.FunctionType(ll.VoidType(), types), text, cons + ",~{memory}", args, side_effect=True)


def cp_async_commit(ctx: LoweringContext) -> None:
    """``cp.async.commit_group``."""
    ctx.b.asm(ll.FunctionType(ll.VoidType(), []), "cp.async.commit_group;", "~{memory}", [], side_effect=True)


def cp_async_wait(ctx: LoweringContext, n: int) -> None:
    """``cp.async.wait_group n`` (``cp.async.wait_all`` is wait_group 0 plus a commit)."""
    ctx.b.asm(ll.FunctionType(ll.VoidType(), []), f"cp.async.wait_group {n};", "~{memory}", [],
              side_effect=True)


# --- the registry's lowerings (intrinsics.py): (target, ctx, op, args) -------------------------------
# The operand and result conversions are shared with the CPU target's emulation (cpu/warp_matrix.py).

def _words(ctx: LoweringContext, x: ll.Value, n: int) -> list[ll.Value]:
    """A vector of 4 * n bytes as its n i32 words (the PTX fragment registers), low lanes first."""
    v = ctx.b.bitcast(x, ll.VectorType(_I32, n))
    return [ctx.b.extract_element(v, ll.Constant(_I32, k)) for k in range(n)]


def _vector(ctx: LoweringContext, t: ll.Type, xs: list[ll.Value]) -> ll.Value:
    out: ll.Value = ll.Constant(t, ll.Undefined)
    for k, x in enumerate(xs):
        out = ctx.b.insert_element(out, x, ll.Constant(_I32, k))
    return out


def mma_operands(ctx: LoweringContext, op, args: list[ll.Value]) -> tuple:
    """``nvptx.mma.sync``'s operands as :func:`mma` takes them: (shape, A's and B's element type
    names, A's 4 and B's 2 i32 words, C's 4 floats)."""
    at, bt = (x.type.elem.name for x in op.operands[:2])
    c = args[2]
    cs = [ctx.b.extract_element(c, ll.Constant(_I32, k)) for k in range(4)]
    return op.attrs["shape"], at, bt, _words(ctx, args[0], 4), _words(ctx, args[1], 2), cs


def mma_result(ctx: LoweringContext, args: list[ll.Value], d: list[ll.Value]) -> ll.Value:
    """D's four floats as the vec<f32, 4> of the op's result."""
    return _vector(ctx, args[2].type, d)


def ldmatrix_result(ctx: LoweringContext, op, words: list[ll.Value]) -> ll.Value:
    """ldmatrix's i32 words as the op's result vector."""
    vec = _vector(ctx, ll.VectorType(_I32, len(words)), words)
    return ctx.b.bitcast(vec, ctx.lowering.lltype(op.result.type))


def cp_async_src_bytes(op, args: list[ll.Value]) -> ll.Value | None:
    """cp_async's bytes read from the source, None where it is the constant copy size (no zero fill)."""
    owner = op.operands[2].owner
    whole = owner is not None and owner.name == "const" and owner.attrs["value"] == op.attrs["bytes"]
    return None if whole else args[2]


def lower_mma(target, ctx: LoweringContext, op, args: list[ll.Value]) -> ll.Value:
    """``nvptx.mma.sync``: FP8 shapes need sm_89 (``mma_fp8``)."""
    if op.attrs["shape"] == "m16n8k32" and not target.has("mma_fp8"):
        raise UnsupportedOnTarget(f"FP8 mma needs sm_89 or later, not {target.arch}")
    return mma_result(ctx, args, mma(ctx, *mma_operands(ctx, op, args)))


def lower_ldmatrix(target, ctx: LoweringContext, op, args: list[ll.Value]) -> ll.Value:
    """``nvptx.ldmatrix``."""
    return ldmatrix_result(ctx, op, ldmatrix(ctx, args[0], op.attrs["num"], bool(op.attrs["trans"])))


def lower_cp_async(target, ctx: LoweringContext, op, args: list[ll.Value]) -> None:
    """``nvptx.cp_async``."""
    cp_async(ctx, args[0], args[1], op.attrs["bytes"], cp_async_src_bytes(op, args))


def lower_cp_async_commit(target, ctx: LoweringContext, op, args: list[ll.Value]) -> None:
    """``nvptx.cp_async.commit_group``."""
    cp_async_commit(ctx)


def lower_cp_async_wait(target, ctx: LoweringContext, op, args: list[ll.Value]) -> None:
    """``nvptx.cp_async.wait_group``."""
    cp_async_wait(ctx, op.attrs["n"])
