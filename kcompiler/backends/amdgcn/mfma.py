"""AMD CDNA's matrix fused multiply-add (MFMA) through LLVM's ``llvm.amdgcn.mfma.*`` intrinsics.

Sources: *AMD Instinct MI300 (CDNA3) Instruction Set Architecture*, chapter 7 "Matrix Arithmetic
Instructions" (the MFMA opcodes, their FP8/BF8 operands, the operand layouts), *AMD Instinct CDNA4
ISA* (MI350, gfx950), same chapter (the 16-bit forms with twice the K, ``v_mfma_scale_*_f8f6f4``, FP8
read as OCP E4M3/E5M2), and LLVM's ``IntrinsicsAMDGPU.td`` for the intrinsics' operands. The layouts
below were checked entry by entry against AMD's Matrix Instruction Calculator (ROCm/
amd_matrix_instruction_calculator, ``--architecture cdna3 --matrix-layout``) for every CDNA3 form
used here.

The instructions, D = A (M x K) * B (K x N) + C with f32 C and D, one wavefront of 64 lanes:

======================  =========  ===========================================  ==========  ============
shape (M x N x K)       A, B type  instruction                                  a lane: A   a lane: C
======================  =========  ===========================================  ==========  ============
32x32x8, 16x16x16       bf16, f16  ``v_mfma_f32_<shape>_{bf16,f16}`` (gfx90a+)   4 elements  16 / 4 f32
32x32x16, 16x16x32      bf16, f16  same names (gfx950)                          8 elements  16 / 4 f32
32x32x16, 16x16x32      FP8        ``v_mfma_f32_<shape>_{fp8,bf8}_{fp8,bf8}``    8 (64 bits) 16 / 4 f32
                                   (gfx942: FNUZ E4M3/E5M2; gfx950: OCP)
32x32x64, 16x16x128     FP8        ``v_mfma_f32_<shape>_f8f6f4`` (gfx950; the   32 (256     16 / 4 f32
                                   unscaled form of ``v_mfma_scale_*``, OCP)    bits)
======================  =========  ===========================================  ==========  ============

Operand layouts, with E = M * K / 64 the elements of A (and of B) a lane holds, and lane l:

- A: lane l holds row ``i = l % M``, columns ``k = E * (l // M) + e`` for e = 0 .. E-1, element e in
  bits ``[w*e, w*e + w)`` of its registers (w the element's width: lower k in lower bits).
- B: the same with rows and columns exchanged: lane l holds column ``j = l % N``, rows ``k = E * (l // N)
  + e``.
- C and D: lane l holds column ``j = l % N``; with ``G = 64 // N`` lane groups (4 for 16x16, 2 for
  32x32), its register r holds row ``i = 4 * (G * (r // 4) + l // N) + r % 4``. So a 16x16 lane holds
  rows 4 (l // 16) .. +3, a 32x32 lane rows 8 q + 4 (l // 32) .. +3 in registers 4 q .. 4 q + 3.

For the forms of gfx950 (and for every form) the product needs only that A and B assign the k
of a lane's element e alike, which they do: the layouts of A and B are the same function. Where a
chip orders the k inside a lane's group differently from the formula above (the CDNA4 guide draws
the f8f6f4 operands as two stripes of 16), D is still A * B: the same permutation of K applies to
both. M and N, and C/D's layout, are as above for every form.

The accumulation: the products of bf16, f16 and FP8 values are exact in f32; how the hardware adds
the K products into C (order, internal width) is not specified; results match a float64 reference
within K * 2^-24 * (|A| |B|) + the rounding of C.
"""
from __future__ import annotations

from llvmlite import ir as ll

from ..errors import UnsupportedOnTarget
from ..llvm.lower import LoweringContext
from .intrinsics import mfma_feature

_I16, _I32, _I64 = ll.IntType(16), ll.IntType(32), ll.IntType(64)

#: FP8 names as the intrinsics spell them (``fp8`` = E4M3, ``bf8`` = E5M2; the chip decides the
#: flavour: FNUZ on gfx942, OCP on gfx950) and as the f8f6f4 format codes (CBSZ for A, BLGP for B).
_F8 = {"f8e4m3fnuz": ("fp8", 0), "f8e5m2fnuz": ("bf8", 1), "f8e4m3": ("fp8", 0), "f8e5m2": ("bf8", 1)}


def intrinsic(shape: str, a_type: str, b_type: str) -> str:
    """The LLVM intrinsic of an MFMA form (module docstring). The bf16 forms of gfx90a take their
    operands as i16 vectors (``*bf16.1k``: the second bf16 MFMA of CDNA2, K twice CDNA1's)."""
    if a_type in ("bf16", "f16"):
        if shape in ("32x32x8", "16x16x16"):
            return f"llvm.amdgcn.mfma.f32.{shape}{a_type}{'.1k' if a_type == 'bf16' else ''}"
        return f"llvm.amdgcn.mfma.f32.{shape}.{a_type}"
    if shape in ("32x32x16", "16x16x32"):
        return f"llvm.amdgcn.mfma.f32.{shape}.{_F8[a_type][0]}.{_F8[b_type][0]}"
    return f"llvm.amdgcn.mfma.scale.f32.{shape}.f8f6f4.v8i32.v8i32"


def mfma(ctx: LoweringContext, shape: str, a_type: str, b_type: str, a: ll.Value, b: ll.Value,
         c: ll.Value) -> ll.Value:
    """D = A * B + C by ``v_mfma_f32_<shape>_*`` (module docstring): ``a``, ``b`` this lane's fragments
    (vectors of bf16/f16, or of FP8 codes as i8), ``c`` its f32 accumulators; returns D's. CBSZ,
    ABID and BLGP (the broadcast controls) are 0: every lane's own operands."""
    M, N, K = (int(x) for x in shape.split("x"))
    n = M * K // 64
    bld = ctx.b
    zero = ll.Constant(_I32, 0)
    if a_type != b_type and a_type in ("bf16", "f16"):
        raise UnsupportedOnTarget(f"mfma of {a_type} x {b_type}: 16-bit A and B have one type")
    if a_type == "bf16" and shape in ("32x32x8", "16x16x16"):
        ops = [bld.bitcast(x, ll.VectorType(_I16, n)) for x in (a, b)]  # the *.1k intrinsics take i16
    elif a_type in ("bf16", "f16"):
        ops = [a, b]
    else:  # FP8 codes packed into 64 or 256 bits
        t = _I64 if n == 8 else ll.VectorType(_I32, 8)
        ops = [bld.bitcast(x, t) for x in (a, b)]
    if shape in ("32x32x64", "16x16x128"):
        # the scaled intrinsic with both scales 0 is the unscaled instruction (LLVM selects
        # v_mfma_f32_<shape>_f8f6f4); CBSZ and BLGP give A's and B's formats
        extra = [ll.Constant(_I32, _F8[a_type][1]), ll.Constant(_I32, _F8[b_type][1])] + [zero] * 4
    else:
        extra = [zero] * 3
    args = ops + [c] + extra
    fn = ctx.declare(intrinsic(shape, a_type, b_type), c.type, [x.type for x in args])
    call = bld.call(fn, args)
    call.attributes.add("convergent")  # the wavefront's lanes exchange operands
    return call


def operands(op) -> tuple[str, str, str]:
    """``amdgcn.mfma``'s shape and its A and B element type names (shared with the CPU emulation)."""
    return (op.attrs["shape"], *(x.type.elem.name for x in op.operands[:2]))


def lower_mfma(target, ctx: LoweringContext, op, args: list[ll.Value]) -> ll.Value:
    """The registry's lowering of ``amdgcn.mfma`` (intrinsics.py). The frontend checked the form
    against the features (``mfma``, ``mfma_fp8``, ``mfma_gfx950``); this is the backstop for IR built
    directly, which would otherwise abort LLVM ("Cannot select")."""
    shape, a_type, b_type = operands(op)
    if not target.has(mfma_feature(shape, a_type)):
        raise UnsupportedOnTarget(f"mfma {shape} of {a_type} is not available on {target.arch}")
    return mfma(ctx, shape, a_type, b_type, *args)
