"""Execution tests of the CPU target: kernels built as IR, compiled for the host, run with GPU semantics
(barriers, warp operations at warp size 32 and 64, shared memory, atomics, bounds checks, launch
limits) and compared with numpy on random inputs of odd sizes."""
from __future__ import annotations

import re

import numpy as np
import pytest

from kcompiler.backends.cpu import CpuTarget
from kcompiler.backends.llvm import compile_ir
from kcompiler.backends.target import CompileOptions
from kcompiler.diagnostics import CompileError, SourceFile, SourceSpan
from kcompiler.ir import Builder, Function, Module, Value
from kcompiler.ir.types import (ArrayType, BOOL, F32, F64, I32, I64, PointerType, U32, U64, VOID)
from kcompiler.runtime.arrays import ArgMismatch
from kcompiler.runtime.cpu import CpuDevice
from kcompiler.runtime.device import Artifact, KernelParam, LaunchConfigError, LaunchError

RNG = np.random.default_rng(1234)
_TARGETS: dict[int, CpuTarget] = {}


def cpu_target(warp_size: int = 32) -> CpuTarget:
    if warp_size not in _TARGETS:
        _TARGETS[warp_size] = CpuTarget(warp_size=warp_size)
    return _TARGETS[warp_size]


class Kernel:
    """A kernel built with the IR builder, compiled for the CPU and loaded; call it with
    ``k[grid, block](*args, shared=0)``."""

    def __init__(self, fn: Function, warp_size: int = 32, check_bounds: bool = False, opt_level: int = 3,
                 others: tuple[Function, ...] = ()):
        t = cpu_target(warp_size)
        ref = compile_ir(Module(fn.name, [fn, *others]), t, CompileOptions(opt_level=opt_level,
                                                                    check_bounds=check_bounds))
        self.artifact = Artifact("cpu", t.arch, fn.name, t.emit(ref, "obj"), "obj",
                                 [KernelParam(p.hint, p.type) for p in fn.params])
        self.device = CpuDevice.get()
        self.handle = self.device.load(self.artifact)

    def __getitem__(self, config):
        grid, block = config

        def launch(*args, shared: int = 0):
            self.device.run(self.handle, self.artifact, grid, block, list(args), shared)
        return launch


def kernel(name: str, **params) -> tuple[Function, Builder]:
    fn = Function(name, [Value(t, n) for n, t in params.items()], VOID, "kernel")
    return fn, Builder(fn.body)


def c(b: Builder, v, t=I32):
    return b.const(v, t)


def gid(b: Builder):
    return b.add(b.mul(b.special("block_id"), b.special("block_dim")), b.special("thread_id"))


def if_(b: Builder, cond):
    then, _ = b.if_(cond)
    return b.at(then)


# --- basics ------------------------------------------------------------------------------------

@pytest.mark.parametrize("opt_level", [0, 3])
def test_vadd_odd_size(opt_level):
    fn, b = kernel("vadd", a=PointerType(F32), x=PointerType(F32), out=PointerType(F32), n=I32)
    a, x, out, n = fn.params
    i = gid(b)
    with if_(b, b.cmp("lt", i, n)):
        b.store(b.elemptr(out, i), b.add(b.load(b.elemptr(a, i)), b.load(b.elemptr(x, i))))
    k = Kernel(fn, opt_level=opt_level)
    N = 1237
    A, X = RNG.random(N, dtype=np.float32), RNG.random(N, dtype=np.float32)
    O = np.zeros(N, np.float32)
    k[(N + 127) // 128, 128](A, X, O, N)
    np.testing.assert_array_equal(O, A + X)


def test_special_registers_3d():
    """thread_id/block_id/block_dim/grid_dim in x, y, z and lane/warp ids of a 3-D launch."""
    fn, b = kernel("ids", out=PointerType(I32))
    (out,) = fn.params
    s = {f"{r}{d}": b.special(r, d) for r in ("thread_id", "block_id", "block_dim", "grid_dim") for d in "xyz"}
    # linear thread id within the block and linear block id
    lt = b.add(b.mul(b.add(b.mul(s["thread_idz"], s["block_dimy"]), s["thread_idy"]), s["block_dimx"]),
               s["thread_idx"])
    lb = b.add(b.mul(b.add(b.mul(s["block_idz"], s["grid_dimy"]), s["block_idy"]), s["grid_dimx"]),
               s["block_idx"])
    nthreads = b.mul(b.mul(s["block_dimx"], s["block_dimy"]), s["block_dimz"])
    g = b.add(b.mul(lb, nthreads), lt)
    base = b.mul(g, c(b, 4))
    vals = [lt, lb, b.special("lane_id"), b.special("warp_id")]
    for k, v in enumerate(vals):
        b.store(b.elemptr(out, b.add(base, c(b, k))), v)
    kern = Kernel(fn)
    grid, block = (3, 2, 2), (5, 3, 4)
    nt, nb = 60, 12
    out_a = np.full(nt * nb * 4, -1, np.int32)
    kern[grid, block](out_a)
    r = out_a.reshape(nb, nt, 4)
    np.testing.assert_array_equal(r[:, :, 0], np.tile(np.arange(nt), (nb, 1)))
    np.testing.assert_array_equal(r[:, :, 1], np.repeat(np.arange(nb)[:, None], nt, 1))
    np.testing.assert_array_equal(r[:, :, 2], np.tile(np.arange(nt) % 32, (nb, 1)))
    np.testing.assert_array_equal(r[:, :, 3], np.tile(np.arange(nt) // 32, (nb, 1)))


# --- barriers and shared memory ----------------------------------------------------------------

def _tree_reduce_kernel(block: int, opt_level: int = 3) -> Kernel:
    """Per-block sums: a shared-memory tree reduction with a barrier in the loop."""
    fn, b = kernel("tree_sum", x=PointerType(I32), out=PointerType(I32), n=I32)
    x, out, n = fn.params
    sh = b.shared("buf", ArrayType(I32, block))
    tid = b.special("thread_id")
    i = gid(b)
    v = b.alloca(I32)
    b.store(v, c(b, 0))
    with if_(b, b.cmp("lt", i, n)):
        b.store(v, b.load(b.elemptr(x, i)))
    b.store(b.elemptr(sh, tid), b.load(v))
    b.barrier()
    s = b.alloca(I32)
    b.store(s, b.value("shr", [b.special("block_dim"), c(b, 1)], I32))
    cond, body = b.while_()
    with b.at(cond):
        b.condition(b.cmp("gt", b.load(s), c(b, 0)))
    with b.at(body):
        sv = b.load(s)
        with if_(b, b.cmp("lt", tid, sv)):
            p = b.elemptr(sh, tid)
            b.store(p, b.add(b.load(p), b.load(b.elemptr(sh, b.add(tid, sv)))))
        b.barrier()
        b.store(s, b.value("shr", [sv, c(b, 1)], I32))
    with if_(b, b.cmp("eq", tid, c(b, 0))):
        b.store(b.elemptr(out, b.special("block_id")), b.load(b.elemptr(sh, c(b, 0))))
    return Kernel(fn, opt_level=opt_level)


@pytest.mark.parametrize("block,opt_level", [(64, 0), (256, 3), (1024, 3)])
def test_tree_reduction_barrier_in_loop(block, opt_level):
    k = _tree_reduce_kernel(block, opt_level)
    N = 3 * block + 77
    grid = (N + block - 1) // block
    X = RNG.integers(-1000, 1000, N, dtype=np.int32)
    O = np.zeros(grid, np.int32)
    k[grid, block](X, O, N)
    ref = np.add.reduceat(X, np.arange(0, N, block))
    np.testing.assert_array_equal(O, ref)


def test_prefix_sum_and_early_return():
    """Hillis-Steele inclusive scan in shared memory (two barriers per step, in a for loop). Threads
    past ``n`` return before the first barrier: the rest must not deadlock."""
    block = 128
    fn, b = kernel("scan", x=PointerType(I64), out=PointerType(I64), n=I32)
    x, out, n = fn.params
    sh = b.shared("buf", ArrayType(I64, block))
    tid = b.special("thread_id")
    with if_(b, b.cmp("ge", tid, n)):
        b.ret()
    b.store(b.elemptr(sh, tid), b.load(b.elemptr(x, tid)))
    b.barrier()
    body, off = b.for_(c(b, 0), c(b, 7), c(b, 1), "k")
    with b.at(body):
        d = b.value("shl", [c(b, 1), off], I32)
        t = b.alloca(I64)
        b.store(t, b.load(b.elemptr(sh, tid)))
        with if_(b, b.cmp("ge", tid, d)):
            b.store(t, b.add(b.load(t), b.load(b.elemptr(sh, b.sub(tid, d)))))
        b.barrier()
        b.store(b.elemptr(sh, tid), b.load(t))
        b.barrier()
    b.store(b.elemptr(out, tid), b.load(b.elemptr(sh, tid)))
    k = Kernel(fn)
    for n in (128, 97, 1):
        X = RNG.integers(-2**40, 2**40, block, dtype=np.int64)
        O = np.zeros(block, np.int64)
        k[1, block](X, O, n)
        np.testing.assert_array_equal(O[:n], np.cumsum(X[:n]))
        assert not O[n:].any()


def test_static_and_dynamic_shared_and_local_array():
    """Two static shared arrays and dynamic shared memory, reversed across the block through a
    barrier; a per-thread local array that lives across the barrier."""
    block = 96
    fn, b = kernel("shmem", x=PointerType(F32), out=PointerType(F32), out2=PointerType(I32))
    x, out, out2 = fn.params
    s1 = b.shared("a", ArrayType(F32, block))
    s2 = b.shared("b", ArrayType(I32, 3))
    dyn = b.dyn_shared(F32)
    tid = b.special("thread_id")
    g = gid(b)
    xv = b.load(b.elemptr(x, g))
    b.store(b.elemptr(s1, tid), xv)
    b.store(b.elemptr(dyn, tid), b.mul(xv, b.const(2.0, F32)))
    with if_(b, b.cmp("lt", tid, c(b, 3))):
        b.store(b.elemptr(s2, tid), b.add(tid, c(b, 100)))
    loc = b.alloca(ArrayType(I32, 16))
    body, j = b.for_(c(b, 0), c(b, 16), c(b, 1), "j")
    with b.at(body):
        b.store(b.elemptr(loc, j), b.mul(j, tid))
    b.barrier()
    r = b.sub(c(b, block - 1), tid)
    b.store(b.elemptr(out, g), b.add(b.load(b.elemptr(s1, r)), b.load(b.elemptr(dyn, r))))
    acc = b.alloca(I32)
    b.store(acc, b.load(b.elemptr(s2, b.value("rem", [tid, c(b, 3)], I32))))
    body, j = b.for_(c(b, 0), c(b, 16), c(b, 1), "j")
    with b.at(body):
        b.store(acc, b.add(b.load(acc), b.load(b.elemptr(loc, j))))
    b.store(b.elemptr(out2, g), b.load(acc))
    k = Kernel(fn)
    grid = 5
    X = RNG.random(grid * block, dtype=np.float32)
    O = np.zeros_like(X)
    O2 = np.zeros(grid * block, np.int32)
    k[grid, block](X, O, O2, shared=block * 4 + 8)
    Xr = X.reshape(grid, block)[:, ::-1]
    np.testing.assert_array_equal(O.reshape(grid, block), Xr + Xr * np.float32(2))
    t = np.arange(block)
    np.testing.assert_array_equal(O2.reshape(grid, block), np.tile(100 + t % 3 + 120 * t, (grid, 1)))


# --- warp operations ---------------------------------------------------------------------------

@pytest.mark.parametrize("warp_size,opt_level", [(32, 3), (64, 3), (32, 0)])
def test_warp_shuffles_ballot_first_lane(warp_size, opt_level):
    """xor butterfly sum, shuffle_down / up / idx, ballot and read_first_lane (i32, f64 and i64
    values) in a block whose last warp is partial."""
    block = 3 * warp_size - 11
    fn, b = kernel("warps", x=PointerType(I32), xd=PointerType(F64), out=PointerType(I64))
    x, xd, out = fn.params
    g = gid(b)
    lane = b.special("lane_id")
    v = b.load(b.elemptr(x, g))
    s = b.alloca(I32)
    b.store(s, v)
    for k in range(int(np.log2(warp_size)) - 1, -1, -1):
        b.store(s, b.add(b.load(s), b.shuffle("xor", b.load(s), c(b, 1 << k))))
    down = b.shuffle("down", v, c(b, 3))
    up = b.shuffle("up", v, c(b, 5))
    idx = b.shuffle("idx", v, b.value("rem", [b.mul(lane, c(b, 7)), c(b, warp_size)], I32))
    ballot = b.ballot(b.cmp("gt", v, c(b, 0)))
    first = b.value("read_first_lane", [b.add(v, c(b, 1000))], I32)
    dv = b.shuffle("xor", b.load(b.elemptr(xd, g)), c(b, 1))
    wide = b.shuffle("down", b.mul(b.cast(v, I64), b.const(1 << 33, I64)), c(b, 1))
    res = [b.cast(s_, I64) for s_ in (b.load(s), down, up, idx, first)] + [
        b.bitcast(ballot, I64), b.bitcast(dv, I64), wide]
    for k, r in enumerate(res):
        b.store(b.elemptr(out, b.add(b.mul(g, c(b, 8)), c(b, k))), r)
    kern = Kernel(fn, warp_size=warp_size, opt_level=opt_level)
    grid = 3
    n = grid * block
    X = RNG.integers(-50, 50, n, dtype=np.int32)
    XD = RNG.random(n)
    O = np.zeros(n * 8, np.int64)
    kern[grid, block](X, XD, O)
    O = O.reshape(grid, block, 8)
    for blk in range(grid):
        xb = X[blk * block:(blk + 1) * block].astype(np.int64)
        xdb = XD[blk * block:(blk + 1) * block]
        for w0 in range(0, block, warp_size):
            lanes = np.arange(min(warp_size, block - w0))
            xw, xdw, ow = xb[w0:w0 + len(lanes)], xdb[w0:w0 + len(lanes)], O[blk, w0:w0 + len(lanes)]
            m = len(lanes)
            # butterfly with lanes outside the (partial) warp giving back the lane's own value
            acc = xw.copy()
            for k in range(int(np.log2(warp_size)) - 1, -1, -1):
                src = lanes ^ (1 << k)
                acc = acc + np.where(src < m, acc[np.minimum(src, m - 1)], acc)
            np.testing.assert_array_equal(ow[:, 0], acc)
            src = lanes + 3
            np.testing.assert_array_equal(ow[:, 1], np.where(src < m, xw[np.minimum(src, m - 1)], xw))
            src = lanes - 5
            np.testing.assert_array_equal(ow[:, 2], np.where(src >= 0, xw[np.maximum(src, 0)], xw))
            src = (lanes * 7) % warp_size
            np.testing.assert_array_equal(ow[:, 3], np.where(src < m, xw[np.minimum(src, m - 1)], xw))
            np.testing.assert_array_equal(ow[:, 4], np.full(m, xw[0] + 1000))
            bits = sum(1 << int(l) for l in lanes if xw[l] > 0)
            np.testing.assert_array_equal(ow[:, 5].view(np.uint64), np.full(m, bits, np.uint64))
            src = lanes ^ 1
            np.testing.assert_array_equal(ow[:, 6].view(np.float64),
                                          np.where(src < m, xdw[np.minimum(src, m - 1)], xdw))
            src = lanes + 1
            np.testing.assert_array_equal(ow[:, 7], np.where(src < m, xw[np.minimum(src, m - 1)], xw) << 33)


@pytest.mark.parametrize("warp_size", [32, 64])
def test_divergent_warp_ops_use_the_active_lanes(warp_size):
    """Inside ``if lane % 3 == 1``, active_mask/ballot/read_first_lane see only those lanes; after the
    branch, the whole warp again."""
    fn, b = kernel("div", out=PointerType(U64))
    (out,) = fn.params
    lane = b.special("lane_id")
    g = gid(b)
    with if_(b, b.cmp("eq", b.value("rem", [lane, c(b, 3)], I32), c(b, 1))):
        b.store(b.elemptr(out, b.mul(g, c(b, 4))), b.value("active_mask", [], U64))
        b.store(b.elemptr(out, b.add(b.mul(g, c(b, 4)), c(b, 1))),
                b.ballot(b.cmp("lt", lane, c(b, 20))))
        b.store(b.elemptr(out, b.add(b.mul(g, c(b, 4)), c(b, 2))),
                b.cast(b.value("read_first_lane", [lane], I32), U64))
    b.store(b.elemptr(out, b.add(b.mul(g, c(b, 4)), c(b, 3))), b.value("active_mask", [], U64))
    k = Kernel(fn, warp_size=warp_size)
    block = warp_size * 2
    O = np.zeros(block * 4, np.uint64)
    k[1, block](O)
    O = O.reshape(block, 4)
    sel = [l for l in range(warp_size) if l % 3 == 1]
    mask = sum(1 << l for l in sel)
    full = (1 << warp_size) - 1
    for t in range(block):
        lane = t % warp_size
        if lane % 3 == 1:
            assert O[t, 0] == mask
            assert O[t, 1] == sum(1 << l for l in sel if l < 20)
            assert O[t, 2] == 1
        assert O[t, 3] == full


# --- atomics -----------------------------------------------------------------------------------

def test_histogram_atomic_add_max_cas():
    """atomic_add histogram from many blocks (vs np.bincount), atomic_max of all values, and
    atomic_cas where exactly one thread per slot wins."""
    bins = 37
    fn, b = kernel("hist", x=PointerType(I32), hist=PointerType(U32), mx=PointerType(I32),
                   slots=PointerType(I32), winners=PointerType(I32), n=I32)
    x, hist, mx, slots, winners, n = fn.params
    i = gid(b)
    with if_(b, b.cmp("lt", i, n)):
        v = b.load(b.elemptr(x, i))
        b.atomic("add", b.elemptr(hist, b.value("rem", [v, c(b, bins)], I32)), b.const(1, U32))
        b.atomic("max", b.elemptr(mx, c(b, 0)), v)
        old = b.atomic_cas(b.elemptr(slots, b.value("rem", [i, c(b, 5)], I32)), c(b, -1), i)
        with if_(b, b.cmp("eq", old, c(b, -1))):
            b.atomic("add", b.elemptr(winners, c(b, 0)), c(b, 1))
    k = Kernel(fn)
    N = 100_003
    X = RNG.integers(0, 10**6, N, dtype=np.int32)
    H = np.zeros(bins, np.uint32)
    MX = np.full(1, -1, np.int32)
    S = np.full(5, -1, np.int32)
    W = np.zeros(1, np.int32)
    k[(N + 255) // 256, 256](X, H, MX, S, W, N)
    np.testing.assert_array_equal(H, np.bincount(X % bins, minlength=bins))
    assert MX[0] == X.max()
    assert W[0] == 5
    assert all(s % 5 == j for j, s in enumerate(S))


# --- errors ------------------------------------------------------------------------------------

SRC = SourceFile("examples/vadd.kc", "kernel vadd(a: ptr<f32>, out: ptr<f32>, n: i32) {\n"
                                     "    let i = block_id.x * block_dim.x + thread_id.x;\n"
                                     "    if i < n {\n"
                                     "        out[i] = a[i];\n"
                                     "    }\n}\n")


def test_bounds_check_reports_store_with_source_line():
    fn, b = kernel("vadd", a=PointerType(F32), out=PointerType(F32), n=I32)
    a, out, n = fn.params
    i = gid(b)
    with if_(b, b.cmp("lt", i, n)):
        x = b.load(b.elemptr(a, i))
        with b.located(SourceSpan(SRC, 4, 9, 4, 15)):
            b.store(b.elemptr(out, i), x)
    k = Kernel(fn, check_bounds=True)
    A = RNG.random(1100, dtype=np.float32)
    O = np.zeros(1000, np.float32)
    k[9, 128](A, O, 1000)  # in bounds: fine
    np.testing.assert_array_equal(O, A[:1000])
    with pytest.raises(LaunchError) as e:
        k[9, 128](A, O, 1100)
    msg = str(e.value)
    m = re.fullmatch(r"kernel 'vadd': out-of-bounds store to 'out'\[(\d+)\] \(size 1000\) at "
                     r"examples/vadd\.kc:4:9, thread \((\d+),0,0\) block \((\d+),0,0\)", msg)
    assert m, msg
    idx, t, blk = map(int, m.groups())
    assert idx == blk * 128 + t and 1000 <= idx < 1100
    # a load out of bounds (no span: the kernel's name stands in)
    with pytest.raises(LaunchError, match=r"out-of-bounds load from 'a'\[\d+\] \(size 999\)"):
        k[9, 128](A[:999], O, 1000)


def test_launch_limits():
    fn, b = kernel("noop", out=PointerType(I32))
    k = Kernel(fn)
    O = np.zeros(1, np.int32)
    for grid, block, shared, pat in [
        (1, 1025, 0, r"block dimension x = 1025 is outside \[1, 1024\]"),
        (1, (1, 1, 65), 0, r"block dimension z = 65 is outside \[1, 64\]"),
        (1, (32, 33), 0, r"has 1056 threads"),
        ((1, 65536), 1, 0, r"grid dimension y = 65536"),
        (0, 1, 0, r"grid dimension x = 0"),
        (1, 1, 300_000, r"300000 bytes of dynamic shared memory"),
    ]:
        with pytest.raises(LaunchError, match=r"kernel 'noop': " + ".*" + pat) as e:
            k[grid, block](O, shared=shared)
        # the caller's values are at fault: also a ValueError (kcompiler.LaunchConfigError)
        assert isinstance(e.value, LaunchConfigError) and isinstance(e.value, ValueError)
    with pytest.raises(TypeError, match="noop"):
        k[1, 1](np.zeros(3, np.float32))


def test_divergent_barrier_is_reported_not_hung():
    fn, b = kernel("divbar", out=PointerType(I32))
    (out,) = fn.params
    tid = b.special("thread_id")
    then, else_ = b.if_(b.cmp("lt", tid, c(b, 16)))
    with b.at(then):
        with b.located(SourceSpan(SRC, 2, 5, 2, 14)):
            b.barrier()
    with b.at(else_):
        with b.located(SourceSpan(SRC, 3, 5, 3, 14)):
            b.barrier()
    b.store(b.elemptr(out, tid), tid)
    k = Kernel(fn)
    with pytest.raises(LaunchError, match=r"kernel 'divbar': divergent barrier in block \(\d+,0,0\): "
                                          r"thread \(0,0,0\) waits at the barrier at examples/vadd.kc:2:5 "
                                          r"while thread \(16,0,0\) waits at the one at examples/vadd.kc:3:5"):
        k[4, 64](np.zeros(64, np.int32))


# --- device functions, the fast launcher -------------------------------------------------------

def test_device_function_calls():
    """A device function without machine operations is an ordinary call; one that reads a special
    register must be inlined (here it is not: no inliner ran), else a CompileError at its use."""
    x = Value(F32, "x")
    sq = Function("sq", [x], F32, "device")
    b = Builder(sq.body)
    b.ret(b.mul(x, x))
    fn, b = kernel("use_sq", out=PointerType(F32), n=I32)
    out, n = fn.params
    i = gid(b)
    with if_(b, b.cmp("lt", i, n)):
        b.store(b.elemptr(out, i), b.call("sq", [b.cast(i, F32)], F32))
    k = Kernel(fn, others=(sq,))
    O = np.zeros(300, np.float32)
    k[3, 128](O, 300)
    np.testing.assert_array_equal(O, np.arange(300, dtype=np.float32) ** 2)

    tid = Function("my_tid", [], I32, "device")
    b = Builder(tid.body)
    with b.located(SourceSpan(SRC, 2, 38, 2, 49)):
        b.ret(b.special("thread_id"))
    fn, b = kernel("use_tid", out=PointerType(I32))
    b.store(b.elemptr(fn.params[0], c(b, 0)), b.call("my_tid", [], I32))
    with pytest.raises(CompileError, match=r"thread_id in device function 'my_tid'.*not inlined") as e:
        Kernel(fn, others=(tid,))
    assert "examples/vadd.kc:2:38" in str(e.value)
    # not called from any kernel: dead code, accepted
    fn, b = kernel("no_use", out=PointerType(I32))
    Kernel(fn, others=(tid,))


def test_fast_launcher():
    fn, b = kernel("axpb", x=PointerType(F32), out=PointerType(F32), a=F32, bb=I64, n=I32, neg=BOOL)
    x, out, a, bb, n, neg = fn.params
    i = gid(b)
    with if_(b, b.cmp("lt", i, n)):
        v = b.add(b.mul(a, b.load(b.elemptr(x, i))), b.cast(bb, F32))
        b.store(b.elemptr(out, i), b.select(neg, b.unary("neg", v), v))
    k = Kernel(fn)
    X = RNG.random(999, dtype=np.float32)
    O = np.zeros_like(X)
    args = [X, O, 1.5, 3, 999, True]
    launch = k.device.make_launcher(k.handle, k.artifact, args)
    assert launch is not None
    launch((8, 1, 1), (128, 1, 1), args, 0, None)
    np.testing.assert_allclose(O, -(np.float32(1.5) * X + 3), rtol=1e-6)
    for bad in ([X, O, 1.5, 2**63, 999, True], [X, O.astype(np.float64), 1.5, 3, 999, True],
                [X, O, 1.5, 3, 999, 1], [X, O, 1.5, 3, 999]):
        with pytest.raises(ArgMismatch):
            launch((8, 1, 1), (128, 1, 1), bad, 0, None)
    with pytest.raises(LaunchError, match="block dimension x = 2000"):
        launch((8, 1, 1), (2000, 1, 1), args, 0, None)


def test_array_arguments():
    """Read-only arrays are copied (the kernel may not write into them); GPU arrays and
    non-contiguous arrays are refused with errors naming the parameter."""
    fn, b = kernel("inc", x=PointerType(I32), n=I32)
    x, n = fn.params
    i = gid(b)
    with if_(b, b.cmp("lt", i, n)):
        p = b.elemptr(x, i)
        b.store(p, b.add(b.load(p), c(b, 1)))
    k = Kernel(fn)
    X = np.arange(10, dtype=np.int32)
    k[1, 32](X, 10)
    np.testing.assert_array_equal(X, np.arange(1, 11))
    ro = np.arange(10, dtype=np.int32)
    ro.flags.writeable = False
    k[1, 32](ro, 10)
    np.testing.assert_array_equal(ro, np.arange(10))

    class FakeCudaArray:
        __cuda_array_interface__ = {"shape": (10,), "typestr": "<i4", "data": (1 << 40, False),
                                    "version": 3, "strides": None}

    with pytest.raises(TypeError, match=r"inc: parameter 'x'.*GPU memory"):
        k[1, 32](FakeCudaArray(), 10)
    with pytest.raises(ValueError, match=r"inc: parameter 'x'.*not contiguous"):
        k[1, 32](np.zeros(20, np.int32)[::2], 10)
    with pytest.raises(TypeError, match=r"inc: parameter 'x'"):
        k[1, 32](np.zeros(10, np.int64), 10)
    with pytest.raises(ValueError, match=r"inc: parameter 'n'.*out of its range"):
        k[1, 32](X, 2**31)


def test_tiled_sgemm_2d_blocks():
    """C = A @ B with TILE x TILE blocks staging tiles through shared memory (two barriers per step
    of a runtime loop), odd sizes; f32 within a few ulps of a float64 reference."""
    T = 8
    fn, b = kernel("sgemm", a=PointerType(F32), bm=PointerType(F32), cm=PointerType(F32), m=I32, n=I32,
                   k=I32)
    a, bm, cm, m, n, k = fn.params
    ta, tb = b.shared("ta", ArrayType(F32, T * T)), b.shared("tb", ArrayType(F32, T * T))
    tx, ty = b.special("thread_id", "x"), b.special("thread_id", "y")
    row = b.add(b.mul(b.special("block_id", "y"), c(b, T)), ty)
    col = b.add(b.mul(b.special("block_id", "x"), c(b, T)), tx)
    acc = b.alloca(F32)
    b.store(acc, b.const(0.0, F32))
    steps = b.value("div", [b.add(k, c(b, T - 1)), c(b, T)], I32)
    zero = b.const(0.0, F32)
    body, t = b.for_(c(b, 0), steps, c(b, 1), "t")
    with b.at(body):
        ka, kb = b.add(b.mul(t, c(b, T)), tx), b.add(b.mul(t, c(b, T)), ty)
        slot = b.add(b.mul(ty, c(b, T)), tx)
        for tile, ok, src in ((ta, b.value("and", [b.cmp("lt", row, m), b.cmp("lt", ka, k)], BOOL),
                               lambda: b.elemptr(a, b.add(b.mul(row, k), ka))),
                              (tb, b.value("and", [b.cmp("lt", kb, k), b.cmp("lt", col, n)], BOOL),
                               lambda: b.elemptr(bm, b.add(b.mul(kb, n), col)))):
            then, else_ = b.if_(ok)
            with b.at(then):
                b.store(b.elemptr(tile, slot), b.load(src()))
            with b.at(else_):
                b.store(b.elemptr(tile, slot), zero)
        b.barrier()
        for kk in range(T):
            prod = b.mul(b.load(b.elemptr(ta, b.add(b.mul(ty, c(b, T)), c(b, kk)))),
                         b.load(b.elemptr(tb, b.add(c(b, kk * T), tx))))
            b.store(acc, b.add(b.load(acc), prod))
        b.barrier()
    with if_(b, b.value("and", [b.cmp("lt", row, m), b.cmp("lt", col, n)], BOOL)):
        b.store(b.elemptr(cm, b.add(b.mul(row, n), col)), b.load(acc))
    kern = Kernel(fn)
    M, N, K = 37, 29, 45
    A = RNG.standard_normal((M, K), dtype=np.float32)
    B = RNG.standard_normal((K, N), dtype=np.float32)
    C = np.zeros((M, N), np.float32)
    kern[((N + T - 1) // T, (M + T - 1) // T), (T, T)](A, B, C, M, N, K)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-5, atol=1e-5)
