"""Lowering tests for the NVPTX target: IR built directly → LLVM IR → PTX, checked FileCheck-style and
assembled with ptxas (when it is on PATH) so invalid PTX fails here, without a GPU."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from kcompiler.backends.llvm import compile_ir, lower_module
from kcompiler.backends.nvptx.target import ARCHS, NvptxTarget
from kcompiler.backends.target import CompileOptions
from kcompiler.ir import Builder, Function, Module, Value
from kcompiler.ir.types import (AddressSpace, ArrayType, BF16, F16, F32, F64, I32, I64, PointerType, U32,
                                VOID, VectorType)

from ...filecheck_util import filecheck

ptxas = shutil.which("ptxas")


def assemble(ptx: str, arch: str, tmp_path) -> str:
    """Run ptxas on ``ptx``; return its -v report (registers, spills)."""
    if ptxas is None:
        pytest.skip("ptxas not on PATH")
    src = tmp_path / "k.ptx"
    src.write_text(ptx)
    r = subprocess.run([ptxas, f"-arch={arch}", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stderr


def kernel(name: str, params: list[tuple[str, object]]) -> tuple[Function, Builder]:
    fn = Function(name, [Value(t, n) for n, t in params], VOID, "kernel")
    return fn, Builder(fn.body)


def global_index(b: Builder):
    return b.add(b.mul(b.special("block_id"), b.special("block_dim")), b.special("thread_id"))


def ptx_of(fn: Function, arch: str = "sm_90a") -> str:
    tgt = NvptxTarget(arch)
    return tgt.emit(compile_ir(Module("m", [fn]), tgt), "asm")


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_vadd_every_arch(arch, tmp_path):
    fn, b = kernel("vadd", [("a", PointerType(F32)), ("b", PointerType(F32)), ("out", PointerType(F32)),
                            ("n", I32)])
    a, bb, out, n = fn.params
    i = global_index(b)
    then, _ = b.if_(b.cmp("lt", i, n))
    with b.at(then):
        b.store(b.elemptr(out, i), b.add(b.load(b.elemptr(a, i)), b.load(b.elemptr(bb, i))))
    ptx = ptx_of(fn, arch)
    filecheck(ptx, f"""
        CHECK: .target {arch}
        CHECK: .visible .entry vadd(
        CHECK: mov.u32 {{{{.*}}}}, %ctaid.x
        CHECK: ld.global
        CHECK: add.f32
        CHECK: st.global
    """)
    assemble(ptx, arch, tmp_path)


def test_vector_load_is_16_bytes(tmp_path):
    fn, b = kernel("v4", [("x", PointerType(F32)), ("y", PointerType(F32))])
    x, y = fn.params
    i = b.mul(global_index(b), b.const(4, I32))
    v = b.load(b.ptrcast(b.elemptr(x, i), VectorType(F32, 4)), align=16)
    v = b.mul(v, b.splat(b.const(2.0, F32), 4))
    b.store(b.ptrcast(b.elemptr(y, i), VectorType(F32, 4)), v, align=16)
    ptx = ptx_of(fn)
    filecheck(ptx, """
        CHECK: ld.global.v4.{{b|f}}32
        CHECK: st.global.v4.{{b|f}}32
    """)
    assemble(ptx, "sm_90a", tmp_path)


def test_shared_barrier_shuffle_ballot_atomics(tmp_path):
    fn, b = kernel("machine", [("x", PointerType(F32)), ("cnt", PointerType(U32)), ("y", PointerType(F64))])
    x, cnt, y = fn.params
    tid = b.special("thread_id")
    tile = b.shared("tile", ArrayType(F32, 256))
    b.store(b.elemptr(tile, tid), b.load(b.elemptr(x, global_index(b))))
    b.barrier()
    v = b.load(b.elemptr(tile, b.xor_(tid, b.const(1, I32)) if hasattr(b, "xor_") else
                         b.binary("xor", tid, b.const(1, I32))))
    v = b.add(v, b.shuffle("down", v, b.const(16, I32)))
    v = b.add(v, b.shuffle("xor", v, b.const(8, I32)))
    d = b.cast(v, F64)
    d = b.add(d, b.shuffle("idx", d, b.const(0, I32)))  # a 64-bit shuffle is two 32-bit ones
    mask = b.ballot(b.cmp("gt", v, b.const(0.0, F32)))
    b.atomic("add", cnt, b.cast(mask, U32), scope="block")
    b.atomic("max", b.elemptr(cnt, b.const(1, I32)), b.cast(tid, U32), order="acq_rel", scope="device")
    b.atomic_cas(b.elemptr(cnt, b.const(2, I32)), b.const(0, U32), b.const(1, U32), order="seq_cst",
                 scope="system")
    dyn = b.dyn_shared(F64)
    b.store(b.elemptr(dyn, tid), d)
    b.barrier()
    b.store(b.elemptr(y, global_index(b)), b.load(b.elemptr(dyn, b.binary("xor", tid, b.const(3, I32)))))
    ptx = ptx_of(fn)
    filecheck(ptx, """
        CHECK: .extern .shared .align 16 .b8 kc_dynamic_shared[];
        CHECK: st.shared
        CHECK: bar.sync 0
        CHECK: shfl.sync.down.b32
        CHECK: shfl.sync.bfly.b32
        CHECK: shfl.sync.idx.b32
        CHECK: shfl.sync.idx.b32
        CHECK: vote.sync.ballot.b32
        CHECK: atom{{.*}}.global.add.u32
        CHECK: atom{{.*}}.max.u32
        CHECK: atom{{.*}}.cas.b32
    """)
    assemble(ptx, "sm_90a", tmp_path)


def test_loops_and_casts_assemble(tmp_path):
    fn, b = kernel("loops", [("x", PointerType(F16)), ("n", I64)])
    x, n = fn.params
    acc = b.alloca(F32, "acc")
    b.store(acc, b.const(0.0, F32))
    body, i = b.for_(b.const(0, I64), n, b.const(3, I64))
    with b.at(body):
        b.store(acc, b.add(b.load(acc), b.cast(b.load(b.elemptr(x, i)), F32)))
    cond, wbody = b.while_()
    with b.at(cond):
        b.condition(b.cmp("lt", b.load(acc), b.const(100.0, F32)))
    with b.at(wbody):
        b.store(acc, b.mul(b.load(acc), b.const(2.0, F32)))
    b.store(b.elemptr(x, b.const(0, I32)), b.cast(b.math("sqrt", b.load(acc)), F16))
    assemble(ptx_of(fn), "sm_90a", tmp_path)


def test_f64_fast_exp2_is_a_located_error():
    from kcompiler.diagnostics import CompileError, SourceFile, SourceSpan

    fn, b = kernel("bad", [("x", PointerType(F64))])
    span = SourceSpan(SourceFile("k.kc", "let y = fast_exp2(x[0]);\n"), 1, 9, 1, 24)
    with b.located(span):
        b.store(fn.params[0], b.math("fast_exp2", b.load(fn.params[0])))
    with pytest.raises(CompileError) as e:
        ptx_of(fn)
    assert "k.kc:1:9" in str(e.value) and "fast_exp2 on f64" in str(e.value)


def test_unknown_arch_is_refused():
    with pytest.raises(ValueError, match="sm_70"):
        NvptxTarget("sm_70")


def test_fast_math_flag_reaches_llvm():
    fn, b = kernel("fm", [("x", PointerType(F32))])
    b.store(fn.params[0], b.mul(b.load(fn.params[0]), b.const(3.0, F32)))
    text = str(lower_module(Module("m", [fn]), NvptxTarget(), CompileOptions(fast_math=True)))
    assert "fmul fast float" in text
    text = str(lower_module(Module("m", [fn]), NvptxTarget()))
    assert "fmul contract float" in text


def test_approximate_builtins_are_the_ptx_approx_instructions(tmp_path):
    """fast_exp2, fast_log2, fast_sin, fast_cos, fast_rsqrt, fast_rcp, fast_tanh are PTX's .approx.f32 (f16 through f32, vectors per
    lane); LLVM 22 aborted on fcos/flog2 before they were written as PTX. sqrt stays sqrt.rn."""
    fn, b = kernel("ap", [("x", PointerType(F32)), ("h", PointerType(F16)), ("v", PointerType(VectorType(F32, 2)))])
    x, h, v = fn.params
    acc = b.load(x)
    for f in ("fast_exp2", "fast_log2", "fast_sin", "fast_cos", "fast_rsqrt", "fast_rcp", "fast_tanh", "sqrt"):
        acc = b.add(acc, b.math(f, b.load(x)))
    b.store(x, acc)
    b.store(h, b.math("fast_tanh", b.load(h)))
    b.store(v, b.math("fast_rcp", b.load(v)))
    ptx = ptx_of(fn)
    filecheck(ptx, """
    CHECK: ex2.approx.f32
    CHECK: lg2.approx.f32
    CHECK: sin.approx.f32
    CHECK: cos.approx.f32
    CHECK: rsqrt.approx.f32
    CHECK: rcp.approx.f32
    CHECK: tanh.approx.f32
    CHECK: sqrt.rn.f32
    CHECK: cvt.f32.f16
    CHECK: tanh.approx.f32
    CHECK: cvt.rn.f16.f32
    CHECK: rcp.approx.f32
    CHECK: rcp.approx.f32
    """)
    assemble(ptx, "sm_90a", tmp_path)


# --- warp-level matrix operations and cp.async (backends/nvptx/mma.py) ------------------------------

def warp_matrix_kernel(elem) -> Function:
    """cp.async (16 bytes whole, 16 zero-filled, 8), commit, wait, then ldmatrix x4 and x2.trans
    feeding one mma.sync m16n8k16 of ``elem`` (F16 or BF16)."""
    from kcompiler.ir.verifier import verify

    fn, b = kernel("wm", [("a", PointerType(elem)), ("d", PointerType(VectorType(F32, 4))), ("n", U32)])
    a, d, n = fn.params
    smem = b.dyn_shared(elem)
    lane8 = b.mul(b.special("lane_id"), b.const(8, I32))
    dst, src = b.elemptr(smem, lane8), b.elemptr(a, lane8)
    b.intrinsic("nvptx.cp_async", [dst, src, b.const(16, U32)], bytes=16)
    b.intrinsic("nvptx.cp_async", [b.elemptr(dst, b.const(256, I32)), src, n], bytes=16)
    b.intrinsic("nvptx.cp_async", [b.elemptr(dst, b.const(512, I32)), src, b.const(8, U32)], bytes=8)
    b.intrinsic("nvptx.cp_async.commit_group")
    b.intrinsic("nvptx.cp_async.wait_group", n=1)
    b.barrier()
    fa = b.intrinsic("nvptx.ldmatrix", [dst], VectorType(elem, 8), num=4, trans=False)
    fb = b.intrinsic("nvptx.ldmatrix", [b.elemptr(dst, b.const(256, I32))], VectorType(elem, 4), num=2, trans=True)
    b.store(d, b.intrinsic("nvptx.mma.sync", [fa, fb, b.load(d)], VectorType(F32, 4), shape="m16n8k16"))
    verify(Module("m", [fn]))
    return fn


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("elem", [BF16, F16], ids=str)
def test_mma_ldmatrix_cp_async_are_ptx(arch, elem, tmp_path):
    ptx = ptx_of(warp_matrix_kernel(elem), arch)
    filecheck(ptx, f"""
        CHECK: cp.async.cg.shared.global [%r{{{{[0-9]+}}}}], [%rd{{{{[0-9]+}}}}], 16;
        CHECK: cp.async.cg.shared.global [%r{{{{[0-9]+}}}}], [%rd{{{{[0-9]+}}}}], 16, %r{{{{[0-9]+}}}};
        CHECK: cp.async.ca.shared.global [%r{{{{[0-9]+}}}}], [%rd{{{{[0-9]+}}}}], 8;
        CHECK: cp.async.commit_group;
        CHECK: cp.async.wait_group 1;
        CHECK: bar.sync 0
        CHECK: ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%r{{{{[0-9]+}}}}, %r{{{{[0-9]+}}}}, %r{{{{[0-9]+}}}}, %r{{{{[0-9]+}}}}}}, [%r{{{{[0-9]+}}}}];
        CHECK: ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {{%r{{{{[0-9]+}}}}, %r{{{{[0-9]+}}}}}}, [%r{{{{[0-9]+}}}}];
        CHECK: mma.sync.aligned.m16n8k16.row.col.f32.{elem}.{elem}.f32 {{{{.*}}}}, {{{{.*}}}}, {{{{.*}}}}, {{{{.*}}}};
    """)
    assemble(ptx, arch, tmp_path)


def test_fp8_mma_is_ptx_8_4_on_sm_89(tmp_path):
    from kcompiler.ir.types import F8E4M3, F8E5M2

    fn, b = kernel("f8", [("a", PointerType(VectorType(F8E4M3, 16))), ("b", PointerType(VectorType(F8E5M2, 8))),
                          ("d", PointerType(VectorType(F32, 4)))])
    a, bp, d = fn.params
    b.store(d, b.intrinsic("nvptx.mma.sync", [b.load(a), b.load(bp), b.load(d)], VectorType(F32, 4), shape="m16n8k32"))
    for arch in ("sm_89", "sm_90a"):
        ptx = ptx_of(fn, arch)
        filecheck(ptx, """
            CHECK: .version 8.4
            CHECK: mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32
        """)
        assemble(ptx, arch, tmp_path)
    from kcompiler.diagnostics import CompileError
    with pytest.raises(CompileError, match="FP8 mma needs sm_89"):
        ptx_of(fn, "sm_80")


@pytest.mark.parametrize("arch,elem,b_kmajor,aligned", [
    ("sm_80", "bf16", False, True), ("sm_90a", "f16", True, True), ("sm_90a", "bf16", True, False),
    ("sm_80", "f16", False, False)])
def test_std_matmul_tensor_core_path_assembles(arch, elem, b_kmajor, aligned, tmp_path):
    """std.matmul's tensor-core path at its large tile (128 x 128 x 32, 4 warps of 64 x 64, 3 stages):
    mma.sync, ldmatrix and cp.async (16-byte, zero-filling) in the PTX, assembled without spills."""
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import Source, emit

    params = dict(T=elem, BM=128, BN=128, BK=32, WM=64, WN=64, STAGES=3, OUT="bf16", B_KMAJOR=b_kmajor,
                  ALIGNED=aligned)
    ptx = emit(Source.from_file(stdlib_dir() / "matmul.kc"), "asm", target="nvptx", arch=arch,
               kernel="matmul", comptime=params)
    # per k tile: 2 k16 steps x 4 m16 tiles x 8 n8 tiles, unrolled
    assert ptx.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{elem}.{elem}.f32") == 64
    # (LLVM places the loop's blocks in its own order: the pieces are checked in any order)
    filecheck(ptx, f"""
        CHECK-DAG: cp.async.commit_group;
        CHECK-DAG: cp.async.wait_group 1;
        CHECK-DAG: bar.sync 0
        CHECK-DAG: ldmatrix.sync.aligned.m8n8.x4.shared.b16
        CHECK-DAG: ldmatrix.sync.aligned.m8n8.x4{'' if b_kmajor else '.trans'}.shared.b16
        CHECK-DAG: cp.async.wait_group 0;
    """)
    assert ("cp.async.cg.shared.global" in ptx) == aligned
    report = assemble(ptx, arch, tmp_path)
    assert "0 bytes spill stores, 0 bytes spill loads" in report, report


def test_arch_of_compute_capability_is_the_backends_data():
    """The compute capability -> arch table is NVIDIA backend data (archs.py), which the CUDA runtime
    reads: every arch it names is one the backend compiles for."""
    from kcompiler.backends.nvptx.archs import ARCH_OF_CC, arch_of_cc
    from kcompiler.runtime.cuda import arch_of

    assert arch_of is arch_of_cc
    assert set(ARCH_OF_CC.values()) <= set(ARCHS)
    assert arch_of_cc((9, 0)) == "sm_90a" and arch_of_cc((8, 7)) == "sm_86"
    assert arch_of_cc((10, 0)) == "sm_90" and arch_of_cc((7, 5)) == "sm_80"  # unknown: newest of its kind
