"""The CPU target through the whole pipeline: kernel-language sources compiled with
``kc.compile(..., target="cpu")`` and run on host threads, compared with numpy (random inputs, odd
sizes). Skipped while the frontend is not available."""
from __future__ import annotations

import re

import numpy as np
import pytest

from kcompiler.runtime.device import LaunchError

RNG = np.random.default_rng(99)


class CpuProgram:
    """A .kc source compiled for the CPU through the frontend, the IR passes that exist, the shared
    LLVM lowering and the CPU target; ``prog.name[grid, block](*args, shared=0)`` launches kernel
    ``name`` (no compile-time parameters)."""

    def __init__(self, src: str, warp_size: int = 32, check_bounds: bool = False):
        try:
            from kcompiler.frontend import check, load_program, lower
        except ImportError as e:
            pytest.skip(f"the frontend is not available: {e}")
        from kcompiler.backends.cpu import CpuTarget
        from kcompiler.backends.llvm import compile_ir
        from kcompiler.backends.target import CompileOptions
        from kcompiler.runtime.cpu import CpuDevice
        from kcompiler.runtime.device import Artifact, KernelParam

        t = CpuTarget(warp_size=warp_size)
        program = load_program(src, "test.kc")
        check(program, t)
        module = lower(program, t, kernels={k: {} for k in program.kernels})
        try:
            from kcompiler.ir.passes import run_default
        except ImportError:
            try:
                from kcompiler.ir.passes.inline import inline_calls
            except ImportError:
                pass
            else:
                inline_calls(module)
        else:
            run_default(module, t)
        ref = compile_ir(module, t, CompileOptions(check_bounds=check_bounds))
        binary = t.emit(ref, "obj")
        self.device = CpuDevice.get()
        self.kernels = {}
        for fn in module.kernels:
            name = fn.attrs.get("source_name", fn.name)
            art = Artifact("cpu", t.arch, fn.name, binary, "obj",
                           [KernelParam(v.hint, v.type) for v in fn.params], meta={"kernel": name})
            self.kernels[name] = (art, self.device.load(art))

    def __getattr__(self, name: str):
        art, handle = self.kernels[name]

        class _Config:
            def __getitem__(_, config):
                grid, block = config
                return lambda *args, shared=0: self.device.run(handle, art, grid, block, list(args), shared)
        return _Config()


def compile_cpu(src: str, warp_size: int = 32, check_bounds: bool = False) -> CpuProgram:
    return CpuProgram(src, warp_size, check_bounds)


REDUCE = """
// Block sums: a tree in shared memory (barrier in a loop), then a warp butterfly (shuffle_xor).
kernel block_sum(x: ptr<i32>, tree: ptr<i32>, warp: ptr<i32>, n: i32) {
    shared buf: [i32; 1024];
    let t = thread_id.x;
    let i = block_id.x * block_dim.x + t;
    var v: i32 = 0;
    if i < n {
        v = x[i];
    }
    buf[t] = v;
    barrier();
    var s = block_dim.x / 2;
    while s > 0 {
        if t < s {
            buf[t] += buf[t + s];
        }
        barrier();
        s /= 2;
    }
    if t == 0 {
        tree[block_id.x] = buf[0];
    }
    var off = warp_size / 2;
    while off > 0 {
        v += shuffle_xor(v, off);
        off /= 2;
    }
    if lane_id == 0 {
        atomic_add(warp + block_id.x, v);
    }
}
"""


@pytest.mark.parametrize("warp_size", [32, 64])
def test_block_sum_tree_and_warp(warp_size):
    m = compile_cpu(REDUCE, warp_size)
    block, n = 256, 5 * 256 + 37
    grid = (n + block - 1) // block
    x = RNG.integers(-10**6, 10**6, n, dtype=np.int32)
    tree, warp = np.zeros(grid, np.int32), np.zeros(grid, np.int32)
    m.block_sum[grid, block](x, tree, warp, n)
    want = np.add.reduceat(x, np.arange(0, n, block))
    np.testing.assert_array_equal(tree, want)
    np.testing.assert_array_equal(warp, want)


WARPS = """
kernel warps(x: ptr<i32>, out: ptr<u64>) {
    let i = block_id.x * block_dim.x + thread_id.x;
    let v = x[i];
    out[4 * i] = u64(shuffle_down(v, 1));
    out[4 * i + 1] = ballot(v > 0);
    out[4 * i + 2] = u64(read_first_lane(v));
    if lane_id % 2 == 1 {
        out[4 * i + 3] = active_mask();
    }
}
"""


@pytest.mark.parametrize("warp_size", [32, 64])
def test_warp_operations(warp_size):
    m = compile_cpu(WARPS, warp_size)
    block = 2 * warp_size
    x = RNG.integers(-5, 5, block, dtype=np.int32)
    out = np.zeros(4 * block, np.uint64)
    m.warps[1, block](x, out)
    out = out.reshape(block, 4)
    for w in range(2):
        xw = x[w * warp_size:(w + 1) * warp_size]
        lanes = np.arange(warp_size)
        down = np.where(lanes + 1 < warp_size, np.roll(xw, -1), xw).astype(np.int32)
        np.testing.assert_array_equal(out[w * warp_size:(w + 1) * warp_size, 0],
                                      down.astype(np.int64).astype(np.uint64))  # C: sign-extends
        assert (out[w * warp_size:(w + 1) * warp_size, 1] == sum(1 << int(l) for l in lanes if xw[l] > 0)).all()
        assert (out[w * warp_size:(w + 1) * warp_size, 2] == np.int64(xw[0]).astype(np.uint64)).all()
        odd = sum(1 << l for l in range(1, warp_size, 2))
        assert (out[w * warp_size + 1:(w + 1) * warp_size:2, 3] == odd).all()


HIST = """
kernel hist(x: ptr<i32>, h: ptr<u32>, mx: ptr<i32>, n: i32, bins: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i >= n {
        return;
    }
    atomic_add(h + x[i] % bins, 1);
    atomic_max(mx, x[i]);
}
"""


def test_histogram_atomics():
    m = compile_cpu(HIST)
    n, bins = 50_001, 19
    x = RNG.integers(0, 10**9, n, dtype=np.int32)
    h, mx = np.zeros(bins, np.uint32), np.zeros(1, np.int32)
    m.hist[(n + 127) // 128, 128](x, h, mx, n, bins)
    np.testing.assert_array_equal(h, np.bincount(x % bins, minlength=bins))
    assert mx[0] == x.max()


VADD = """kernel vadd(a: ptr<f32>, b: ptr<f32>, out: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        out[i] = a[i] + b[i];
    }
}
"""


def test_bounds_check_names_array_and_line():
    m = compile_cpu(VADD, check_bounds=True)
    a, b = RNG.random(1000, dtype=np.float32), RNG.random(1000, dtype=np.float32)
    out = np.zeros(1000, np.float32)
    m.vadd[8, 128](a, b, out, 1000)
    np.testing.assert_array_equal(out, a + b)
    with pytest.raises(LaunchError) as e:
        m.vadd[8, 128](a, b, out, 1024)
    msg = str(e.value)
    assert re.search(r"kernel 'vadd': out-of-bounds (load from '[ab]'|store to 'out')\[10\d\d\] "
                     r"\(size 1000\) at test\.kc:4:\d+, thread \(\d+,0,0\) block \(7,0,0\)", msg), msg


BARRIER_IN_FN = """
fn block_total(buf: ptr<i32, shared>, v: i32) -> i32 {
    buf[thread_id.x] = v;
    barrier();
    var s = block_dim.x / 2;
    while s > 0 {
        if thread_id.x < s {
            buf[thread_id.x] += buf[thread_id.x + s];
        }
        barrier();
        s /= 2;
    }
    let r = buf[0];
    barrier();
    return r;
}

kernel totals(x: ptr<i32>, out: ptr<i32>) {
    shared buf: [i32; 128];
    let i = block_id.x * block_dim.x + thread_id.x;
    let t = block_total(buf, x[i]);
    out[i] = t + block_total(buf, 1);
}
"""


def test_device_function_with_barriers():
    """A device function with barriers (inlined into the kernel by the IR inliner), called twice."""
    pytest.importorskip("kcompiler.ir.passes.inline", reason="the IR inliner is not written yet")
    m = compile_cpu(BARRIER_IN_FN)
    x = RNG.integers(-100, 100, 3 * 128, dtype=np.int32)
    out = np.zeros_like(x)
    m.totals[3, 128](x, out)
    np.testing.assert_array_equal(out, np.repeat(x.reshape(3, 128).sum(1) + 128, 128))


def test_kc_compile_end_to_end():
    """kc.compile(..., target="cpu") → Module → launch (the cached pipeline and the fast launcher)."""
    import kcompiler as kc
    try:
        m = kc.compile(VADD, target="cpu", path="vadd.kc")
        a, b = RNG.random(1001, dtype=np.float32), RNG.random(1001, dtype=np.float32)
        out = np.zeros(1001, np.float32)
        m.vadd[8, 128](a, b, out, 1001)
    except ImportError as e:  # the pipeline's IR passes are not all written yet
        pytest.skip(f"the pipeline is not complete: {e}")
    np.testing.assert_array_equal(out, a + b)
    out[:] = 0
    m.vadd[8, 128](a, b, out, 1001)  # the second launch takes the fast path
    np.testing.assert_array_equal(out, a + b)
