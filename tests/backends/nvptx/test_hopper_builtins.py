"""The Hopper builtins of the NVPTX backend (wgmma, wgmma_desc, TMA, mbarrier, setmaxnreg,
fence_proxy_async, launch_bounds, the tensor_map parameter): the PTX each lowers to
(backends/nvptx/wgmma.py, tma.py), checked with FileCheck and assembled by ptxas for sm_90a, and the
located errors for misuse and for targets without the feature (sm_80, sm_90 without the "a", the CPU
target). std.matmul_sm90, the kernel built on them, is tested in tests/ops/test_matmul_sm90.py."""
from __future__ import annotations

import pytest

from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to

from ...filecheck_util import filecheck
from ...located_util import assert_body_error
from ...ptxas_util import needs_ptxas, ptxas


BUILTINS = """
kernel k(ta: tensor_map, out: ptr<f32>, n: i32) {
    launch_bounds(384, 1);
    let smem = dynamic_shared[bf16]();
    let bar = bitcast[ptr<u64, shared>](smem + 16384);
    if thread_id.x == 0 {
        mbarrier_init(bar, 1);
        fence_proxy_async();
    }
    barrier();
    if thread_id.x == 0 {
        mbarrier_arrive_expect_tx(bar, 16384);
        tma_load(smem, ta, bar, 64, block_id.x * 128);
    }
    mbarrier_wait(bar, 0);
    let done = mbarrier_try_wait(bar, 0);
    if thread_id.x < 128 {
        setmaxnreg_inc[232]();
        var acc = vec<f32, 64>(0.0);
        let d = wgmma_desc(smem, swizzle = 128, sbo = 1024);
        wgmma_fence();
        acc = wgmma[bf16](d, d + u64(2), acc, accumulate = n > 0);
        acc = wgmma[bf16](d, d, acc, trans_b = true);
        wgmma_commit();
        wgmma_wait[0]();
        if done { out[thread_id.x] = acc[0] + acc[63]; }
        mbarrier_arrive(bar);
    } else {
        setmaxnreg_dec[40]();
    }
}
"""


def test_builtins_ptx():
    """Each builtin's PTX (backends/nvptx/wgmma.py, tma.py), the tensor map a 64-aligned 128-byte grid
    constant read through cvta.param, launch bounds as .maxntid / .minnctapersm."""
    ptx = compile_source_to(BUILTINS, "k.kc", "asm", "nvptx", "sm_90a")
    filecheck(ptx, """
        CHECK: .extern .shared .align 1024 .b8 kc_dynamic_shared[];
        CHECK: .param .align 64 .b8 k_param_0[128]
        CHECK: .maxntid 384
        CHECK-NEXT: .minnctapersm 1
        CHECK: mov.b64 [[MAP:%rd[0-9]+]], k_param_0;
        CHECK: mbarrier.init.shared::cta.b64 [{{%r[0-9]+}}], {{%r[0-9]+}};
        CHECK: fence.proxy.async.shared::cta;
        CHECK: bar.sync 0;
        CHECK: cvta.param.u64 [[GMAP:%rd[0-9]+]], [[MAP]];
        CHECK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [{{%r[0-9]+}}], {{%r[0-9]+}};
        CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [{{%r[0-9]+}}], [[[GMAP]], {{{%r[0-9]+}}, {{%r[0-9]+}}}], [{{%r[0-9]+}}];
        CHECK: mbarrier.try_wait.parity.shared::cta.b64 p, [{{%r[0-9]+}}], {{%r[0-9]+}};
        CHECK-NEXT: @!p bra kc_mbar_wait;
        CHECK: mbarrier.try_wait.parity.shared::cta.b64
        CHECK: setmaxnreg.inc.sync.aligned.u32 232;
        CHECK: wgmma.fence.sync.aligned;
        CHECK: setp.ne.b32 p, {{%r[0-9]+}}, 0;
        CHECK-NEXT: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{(%r[0-9]+, ){63}%r[0-9]+}}}, {{%rd[0-9]+}}, {{%rd[0-9]+}}, p, 1, 1, 0, 0;
        CHECK: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 0, 1;
        CHECK: wgmma.commit_group.sync.aligned;
        CHECK: wgmma.wait_group.sync.aligned 0;
        CHECK: mbarrier.arrive.shared::cta.b64 _, [{{%r[0-9]+}}];
        CHECK: setmaxnreg.dec.sync.aligned.u32 40;
    """)


@needs_ptxas
def test_builtins_assemble(tmp_path):
    ptxas(compile_source_to(BUILTINS, "k.kc", "asm", "nvptx", "sm_90a"))


def test_descriptor_bits():
    """wgmma_desc: (addr & 0x3FFFF) >> 4 | (lbo >> 4) << 16 | (sbo >> 4) << 32 | mode << 62 (PTX ISA
    "Matrix Descriptor Format"); 128-byte swizzle is mode 1, 64-byte 2, 32-byte 3."""
    src = """
    kernel k(out: ptr<u64>) {
        let s = dynamic_shared[f16]();
        out[0] = wgmma_desc(s, swizzle = 64, lbo = 256, sbo = 512);
    }
    """
    ll = compile_source_to(src, "k.kc", "llvm", "nvptx", "sm_90a")
    const = (256 >> 4) << 16 | (512 >> 4) << 32 | 2 << 62
    # LLVM folds (addr & 0x3FFFF) >> 4 into (addr >> 4) & 0x3FFF
    assert "lshr" in ll and ("16383" in ll or "262143" in ll), ll
    assert "or " in ll and (str(const) in ll or str(const - (1 << 64)) in ll), ll


FP8_WGMMA = """
kernel k(out: ptr<f32>, n: i32) {
    let s = dynamic_shared[f8e4m3]();
    var acc = vec<f32, 128>(0.0);
    wgmma_fence();
    acc = wgmma[f8e4m3, f8e5m2](wgmma_desc(s), wgmma_desc(s + 8192), acc);
    wgmma_commit();
    wgmma_wait[0]();
    out[thread_id.x] = acc[5];
}
"""


def test_fp8_wgmma(tmp_path):
    ptx = compile_source_to(FP8_WGMMA, "k.kc", "asm", "nvptx", "sm_90a")
    filecheck(ptx, "CHECK: wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e5m2 {{.*}}, p, 1, 1;")
    ptxas(ptx)


ERRORS = [
    # (source snippet in a kernel body, arch, message part, caret text)
    ("var acc = vec<f32, 3>(0.0); acc = wgmma[bf16](u64(0), u64(0), acc);", "sm_90a",
     "wgmma's accumulator must be vec<f32, N / 2>", "acc"),
    ("var acc = vec<f32, 8>(0.0); acc = wgmma[f32](u64(0), u64(0), acc);", "sm_90a",
     "wgmma multiplies bf16, f16, f8e4m3 or f8e5m2", "f32"),
    ("var acc = vec<f32, 8>(0.0); acc = wgmma[bf16, f16](u64(0), u64(0), acc);", "sm_90a",
     "A and B are both f16, both bf16", "wgmma"),
    ("var acc = vec<f32, 8>(0.0); acc = wgmma[bf16](1, u64(0), acc);", "sm_90a",
     "matrix descriptor (u64, from wgmma_desc)", "1"),
    ("var acc = vec<f32, 8>(0.0); acc = wgmma[f8e4m3](u64(0), u64(0), acc, trans_b = true);", "sm_90a",
     "trans_b applies to f16 and bf16", "trans_b"),
    ("var acc = vec<f32, 8>(0.0); acc = wgmma[bf16](u64(0), u64(0), acc);", "sm_90",
     "wgmma is not available on this target (nvptx sm_90)", "wgmma[bf16](u64(0), u64(0), acc)"),
    ("let d = wgmma_desc(p);", "sm_90a", "wgmma_desc's tile must be a ptr<f32, shared>", "p"),
    ("let d = wgmma_desc(dynamic_shared[f16](), swizzle = 48);", "sm_90a", "swizzle is 0, 32, 64 or 128", "48"),
    ("tma_load(dynamic_shared[f16](), p, bitcast[ptr<u64, shared>](dynamic_shared[f16]()), 0);", "sm_90a",
     "tma_load's second argument is a tensor_map", "p"),
    ("tma_load(dynamic_shared[f16](), m, bitcast[ptr<u32, shared>](dynamic_shared[f16]()), 0);", "sm_90a",
     "tma_load's barrier must be a ptr<u64, shared>", "bitcast"),
    ("mbarrier_init(bitcast[ptr<u64, shared>](dynamic_shared[f16]()), 1);", "sm_80",
     "mbarrier_init is not available on this target (nvptx sm_80)", "mbarrier_init"),
    ("mbarrier_wait(bitcast[ptr<u64, shared>](dynamic_shared[f16]()), 1.5);", "sm_90a",
     "the phase parity must be an integer", "1.5"),
    ("setmaxnreg_inc[230]();", "sm_90a", "a multiple of 8 from 24 to 256, not 230", "230"),
    ("setmaxnreg_dec[40]();", "sm_90", "setmaxnreg_dec is not available on this target (nvptx sm_90)",
     "setmaxnreg_dec"),
    ("wgmma_wait[9]();", "sm_90a", "group count must be 0 to 7", "9"),
    ("launch_bounds(2048);", "sm_90a", "thread count must be 1 to 1024", "2048"),
    ("var y: tensor_map;", "sm_90a", "would be a tensor_map without a value", "var y"),
    ("shared s: [tensor_map; 2];", "sm_90a", "there are no arrays of tensor_map", "[tensor_map; 2]"),
    ("let x = m + 1;", "sm_90a", "cannot apply '+' to tensor_map", "m + 1"),
]


@pytest.mark.parametrize("body, arch, message, caret", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_located_errors(body, arch, message, caret):
    assert_body_error(body, arch, message, caret)


def test_no_pointer_to_tensor_map():
    with pytest.raises(CompileError, match="tensor_map lives in no memory a program addresses") as ei:
        compile_source_to("kernel k(p: ptr<tensor_map>) {\n    p[0] = p[1];\n}\n", "bad.kc", "asm", "nvptx", "sm_90a")
    assert "bad.kc:1:13" in str(ei.value)


def test_launch_bounds_only_in_kernels():
    src = "fn f() { launch_bounds(128); }\nkernel k(p: ptr<f32>) { f(); }\n"
    with pytest.raises(CompileError, match="launch_bounds belongs in a kernel's body"):
        compile_source_to(src, "bad.kc", "asm", "nvptx", "sm_90a")


def test_cpu_target_refuses_with_location():
    """Without emulate_wgmma the CPU target has no TMA or wgmma: a located error."""
    with pytest.raises(CompileError) as ei:
        compile_source_to(BUILTINS, "k.kc", "obj", "cpu")
    assert "is not available on this target (cpu" in str(ei.value) and "k.kc:" in str(ei.value)
