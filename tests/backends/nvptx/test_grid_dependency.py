"""Programmatic dependent launch (CUDA's PDL): ``grid_dependency_wait()`` and ``launch_dependents()``;
and ``prefetch_l2(p, bytes)``, the hint a kernel may give before such a wait.

NVIDIA sm_90+: griddepcontrol.wait / griddepcontrol.launch_dependents (PTX ISA 7.8), and a kernel that
calls grid_dependency_wait carries Artifact.meta["pdl"], which launches it with programmatic stream
serialisation (tests/runtime/test_launch_host.py checks the launch attribute). Elsewhere (sm_80, AMD,
the CPU target) launches never overlap, and both builtins do nothing. On the GPU: a chain of launches,
each reading the one before it after its wait, against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.backends.nvptx.target import NvptxTarget
from kcompiler.pipeline import Source, compile_kernel, compile_source_to, load

from ...ptxas_util import needs_ptxas, ptxas
from ...draws import fresh_rng

SRC = """
kernel step(x: ptr<f32>, y: ptr<f32>, n: i32) {
    let i = i32(block_id.x * block_dim.x + thread_id.x);
    launch_dependents();
    grid_dependency_wait();
    if i < n {
        y[i] = x[i] * 2.0 + 1.0;
    }
}

kernel plain(x: ptr<f32>, y: ptr<f32>, n: i32) {
    let i = i32(block_id.x * block_dim.x + thread_id.x);
    if i < n {
        y[i] = x[i];
    }
}
"""


@needs_ptxas
def test_sm90_emits_griddepcontrol():
    ptx = compile_source_to(SRC, "k.kc", "asm", "nvptx", "sm_90a")
    step = ptx.split(".entry step", 1)[1].split(".entry", 1)[0]
    trigger, wait = step.index("griddepcontrol.launch_dependents;"), step.index("griddepcontrol.wait;")
    assert trigger < wait < step.index("ld.global")
    ptxas(ptx, "sm_90a")


@pytest.mark.parametrize("target, arch", [("nvptx", "sm_80"), ("amdgcn", "gfx942")])
def test_without_pdl_nothing_is_emitted(target, arch):
    asm = compile_source_to(SRC, "k.kc", "asm", target, arch)
    assert "griddepcontrol" not in asm


def test_meta_marks_the_kernels_that_wait():
    prog = load(Source(SRC, "k.kc"))
    t = NvptxTarget("sm_90a")
    assert compile_kernel(prog, "step", {}, t).meta["pdl"] is True
    assert compile_kernel(prog, "plain", {}, t).meta["pdl"] is False


def test_cpu_target_runs_them_as_nothing():
    m = kc.compile(SRC, target="cpu", path="k.kc")
    x = fresh_rng().standard_normal(1000).astype(np.float32)
    y = np.full_like(x, np.nan)
    m.step[(8,), 128](x, y, x.size)
    np.testing.assert_array_equal(y, x * 2 + 1)


@pytest.mark.gpu
def test_a_chain_of_dependent_launches_reads_each_result():
    """Ten launches on one stream, each reading what the one before wrote only after its wait: the
    final values are numpy's whatever the overlap (a missing wait reads stale values here: the blocks
    of launch k + 1 start while launch k still writes)."""
    m = kc.compile(SRC, target="cuda", path="k.kc")
    n = 1 << 22
    x0 = fresh_rng().standard_normal(n).astype(np.float32)
    bufs = [kc.to_device(x0), kc.to_device(np.zeros_like(x0))]
    want = x0.astype(np.float64)
    for k in range(10):
        m.step[((n + 255) // 256,), 256](bufs[k % 2], bufs[(k + 1) % 2], n)
        want = want * 2 + 1
    got = bufs[0].copy_to_host()
    np.testing.assert_allclose(got, want, rtol=1e-6)


PREFETCH = """
kernel k(x: ptr<f32>, y: ptr<f32>, n: i32) {
    prefetch_l2(x + i64(block_id.x) * 1000, n * 4);
    y[thread_id.x] = x[thread_id.x];
}
"""


@needs_ptxas
def test_prefetch_l2_is_one_bulk_prefetch_on_sm90():
    """sm_90a: one cp.async.bulk.prefetch.L2.global over the 16-byte granules of the range (address
    rounded down, size up: PTX ISA 8.0 requires both aligned), skipped for an empty range; nothing on
    sm_80, AMD or the CPU target, which runs the kernel as if it were absent."""
    ptx = compile_source_to(PREFETCH, "k.kc", "asm", "nvptx", "sm_90a")
    assert ptx.count("cp.async.bulk.prefetch.L2.global") == 1 and "-16" in ptx
    ptxas(ptx, "sm_90a")
    for target, arch in (("nvptx", "sm_80"), ("amdgcn", "gfx942")):
        assert "prefetch" not in compile_source_to(PREFETCH, "k.kc", "asm", target, arch)
    m = kc.compile(PREFETCH, target="cpu", path="k.kc")
    x = fresh_rng().standard_normal(3000).astype(np.float32)
    y = np.zeros(32, np.float32)
    m.k[(3,), 32](x, y, 1000)
    np.testing.assert_array_equal(y, x[:32])


def test_prefetch_l2_takes_a_global_pointer():
    from kcompiler.diagnostics import CompileError
    src = """
kernel k(y: ptr<f32>) {
    let s = dynamic_shared[f32]();
    prefetch_l2(s, 64);
}
"""
    with pytest.raises(CompileError) as e:
        compile_source_to(src, "k.kc", "asm", "nvptx", "sm_90a")
    msg = str(e.value)
    assert "prefetch_l2 takes a global pointer" in msg and "k.kc:4:17" in msg and "^" in msg


@pytest.mark.gpu
def test_prefetch_l2_on_the_gpu_changes_nothing():
    """prefetch_l2 over ranges of any alignment and length, up to an array's last byte and empty: the
    kernel's copy is exact (the prefetch is a hint; its 16-byte rounding stays inside the granules, so
    inside the pages, the range touches)."""
    src = """
kernel k(x: ptr<u8>, y: ptr<u8>, n: i32) {
    let i = i32(block_id.x * block_dim.x + thread_id.x);
    if thread_id.x == 0 {
        let start = min(i32(block_id.x) * 977 + 3, n);
        prefetch_l2(x + start, min(1500 + i32(block_id.x) * 13, n - start));
    }
    if i < n {
        y[i] = x[i];
    }
}
"""
    m = kc.compile(src, target="cuda", path="k.kc")
    n = 100_003
    x = fresh_rng().integers(0, 256, n, dtype=np.uint8)
    dx, dy = kc.to_device(x), kc.to_device(np.zeros_like(x))
    m.k[((n + 127) // 128,), 128](dx, dy, n)
    np.testing.assert_array_equal(dy.copy_to_host(), x)
