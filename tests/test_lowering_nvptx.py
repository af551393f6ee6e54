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
from kcompiler.ir.types import (AddressSpace, ArrayType, F16, F32, F64, I32, I64, PointerType, U32,
                                VOID, VectorType)

from .filecheck_util import filecheck

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


def test_f64_exp2_is_a_located_error():
    from kcompiler.diagnostics import CompileError, SourceFile, SourceSpan

    fn, b = kernel("bad", [("x", PointerType(F64))])
    span = SourceSpan(SourceFile("k.kc", "let y = exp2(x[0]);\n"), 1, 9, 1, 19)
    with b.located(span):
        b.store(fn.params[0], b.math("exp2", b.load(fn.params[0])))
    with pytest.raises(CompileError) as e:
        ptx_of(fn)
    assert "k.kc:1:9" in str(e.value) and "exp2 on f64" in str(e.value)


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
