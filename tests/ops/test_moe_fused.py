"""ops.moe_route_align's one-launch routing and alignment (std.moe's moe_route_align) against the four
launches of moe_route + moe_align, bit for bit, and ops.moe's prepared calls (kcompiler.ops.moe.PLANS):
scratch kept between calls, shape changes, the tensor-core path's launches against kcompiler.ops.moe_gemm's
functions. The kernels run bounds-checked on the CPU target (every global access checked as a GPU would
fault on it)."""
from __future__ import annotations

import functools
import importlib

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler import ops
from kcompiler.frontend.program import stdlib_dir
from kcompiler.ops import _common
from kcompiler.ops.moe_types import ExpertWeights

from .moe_util import align_ref, check_moe, moe_ref, route_ref
from ..draws import fresh_rng

moe_mod = importlib.import_module("kcompiler.ops.moe")  # ops.moe is the function

RNG = fresh_rng()
FIELDS = ("topk_ids", "topk_weights", "sorted_ids", "tile_expert", "num_tiles")


@functools.lru_cache(maxsize=None)
def _checked(name: str, mma: bool):
    return kc.compile_file(stdlib_dir() / f"{name}.kc", target="cpu", check_bounds=True,
                           target_options={"emulate_mma": True} if mma else {})


@pytest.fixture
def checked(monkeypatch):
    """ops' std.moe (and std.moe_gemm) replaced by bounds-checked modules; PLANS emptied around."""
    monkeypatch.setattr(_common, "stdlib_module", lambda name, target: _checked(name, False))
    moe_mod.PLANS.clear()
    yield
    moe_mod.PLANS.clear()


def logits_with_ties(t, e, dt):
    lg = (RNG.standard_normal((t, e)) * 2).astype(np.float32)
    if e > 2:
        lg[::2, e - 1] = lg[::2, 0]                     # ties across the row: the lower expert first
        lg[1::3, 1:3] = lg[1::3, 1:2]
    return lg.astype(dt)


def check_fused(t, k, e, bm, mode, renormalize, dt=np.float32):
    lg = logits_with_ties(t, e, dt)
    a = ops.moe_route_align(lg, k, bm, mode=mode, renormalize=renormalize, fused=True, target="cpu")
    b = ops.moe_route_align(lg, k, bm, mode=mode, renormalize=renormalize, fused=False, target="cpu")
    for f in FIELDS:
        x, y = np.asarray(getattr(a, f)), np.asarray(getattr(b, f))
        assert x.dtype == y.dtype and x.shape == y.shape, f
        np.testing.assert_array_equal(x.view(np.int32), y.view(np.int32), err_msg=f)
    # and the independent references
    rid, _ = route_ref(lg, k, mode, renormalize)
    np.testing.assert_array_equal(a.topk_ids, rid)
    want = align_ref(np.asarray(a.topk_ids), e, bm)
    np.testing.assert_array_equal(a.sorted_ids, want[0])
    assert int(a.num_tiles[0]) == want[2]
    assert (a.block_m, a.top_k, a.num_experts, a.tokens) == (bm, k, e, t)


@pytest.mark.slow(sample=1)
@pytest.mark.parametrize("t,k,e,bm,mode,renormalize,dt", [
    (64, 4, 32, 8, "topk_softmax", True, ml_dtypes.bfloat16),  # gpt-oss, T 64
    (7, 3, 5, 4, "softmax_topk", False, np.float32),         # E not a power of two, FULL
    (33, 8, 200, 16, "softmax_topk", True, np.float32),
])
def test_route_align_fused_equals_the_four_launches(checked, t, k, e, bm, mode, renormalize, dt):
    check_fused(t, k, e, bm, mode, renormalize, dt)


@pytest.mark.slow(sample=1)
@pytest.mark.parametrize("t,k,e", [(1, 1, 1), (1, 4, 32), (3, 2, 3), (16, 6, 97), (100, 8, 256), (128, 8, 64),
                                   (1024, 1, 7), (5, 8, 9)])
@pytest.mark.parametrize("bm", [1, 8, 64])
@pytest.mark.parametrize("mode,renormalize", [("softmax_topk", False), ("softmax_topk", True),
                                              ("topk_softmax", False)])
def test_route_align_fused_sweep(checked, t, k, e, bm, mode, renormalize):
    check_fused(t, k, e, bm, mode, renormalize)


def test_route_align_sizes(checked):
    lg = RNG.standard_normal((257, 8)).astype(np.float32)
    with pytest.raises(ValueError, match="at most 1024 assignments"):
        ops.moe_route_align(lg, 4, 8, fused=True, target="cpu")
    with pytest.raises(ValueError, match="block_m"):
        ops.moe_route_align(lg, 4, 0, target="cpu")
    with pytest.raises(ValueError, match="top_k"):
        ops.moe_route_align(lg, 9, 8, target="cpu")


def moe_checked_against_reference(x, logits, wg, wd, k, reduce, unit):
    got = ops.moe(x, logits, wg, wd, k, reduce=reduce, target="cpu")
    ref, _, bound = moe_ref(x, logits, wg, wd, k, "softmax_topk", True, unit)
    bound = bound + 2.0 ** -8 * np.abs(ref) + 2.0 ** -126
    assert np.all(np.abs(got.astype(np.float64) - ref) <= bound)
    return got


@pytest.mark.slow(sample=1)
@pytest.mark.parametrize("reduce", ["separate", "atomic"])
def test_moe_plan_keeps_scratch_across_calls_and_shapes(checked, reduce):
    """Two calls of one shape share the plan's scratch (the atomic sums zeroed again), a result is not
    overwritten by the next call, another shape gets its own plan, and the first shape's plan still
    gives the same bits."""
    e, k, hid, inter = 5, 2, 64, 32
    wg = ExpertWeights.quantize(RNG.standard_normal((e, 2 * inter, hid)) * 0.1, "mxfp4")
    wd = ExpertWeights.quantize(RNG.standard_normal((e, hid, inter)) * 0.1, "mxfp4")

    def inputs(t):
        return (RNG.standard_normal((t, hid)).astype(ml_dtypes.bfloat16),
                (RNG.standard_normal((t, e)) * 2).astype(np.float32))
    x1, l1 = inputs(3)
    r1 = moe_checked_against_reference(x1, l1, wg, wd, k, reduce, 2.0 ** -8)
    keep = r1.copy()
    assert len(moe_mod.PLANS) == 1
    plan = next(iter(moe_mod.PLANS.values()))
    assert plan.keep and len(plan.scratch) == 1
    x2, l2 = inputs(3)
    moe_checked_against_reference(x2, l2, wg, wd, k, reduce, 2.0 ** -8)
    assert len(moe_mod.PLANS) == 1 and len(plan.scratch) == 1
    np.testing.assert_array_equal(r1.view(np.uint16), keep.view(np.uint16))
    x3, l3 = inputs(4)
    moe_checked_against_reference(x3, l3, wg, wd, k, reduce, 2.0 ** -8)
    assert len(moe_mod.PLANS) == 2
    again = ops.moe(x1, l1, wg, wd, k, reduce=reduce, target="cpu")
    if reduce == "separate":  # sums in order j: reproducible
        np.testing.assert_array_equal(again.view(np.uint16), keep.view(np.uint16))


@pytest.mark.slow(sample=0)
@pytest.mark.parametrize("reduce", ["atomic"])
def test_moe_plan_with_the_four_launches_and_f32_result(checked, reduce):
    """More than MOE_FUSED_MAX_ASSIGNMENTS assignments (routing and alignment in four launches, the
    atomic sums zero-filled apart), f32 x (the sums are the result: a new array each call)."""
    check = lambda: check_moe("bf16", 260, 8, 4, "softmax_topk", hid=32, inter=32)  # noqa: E731
    a = check()[-1]
    b = check()[-1]
    assert a is not b and len(moe_mod.PLANS) == 1


def test_moe_plan_on_the_tensor_core_path_equals_moe_gemm(monkeypatch):
    """The plan launches std.moe_gemm's kernels itself: the same bits as moe_route_align,
    moe_gemm_swiglu, moe_gemm_down (separate) and moe_sum, twice with new inputs (the second call
    planned), on the CPU target's emulated mma.sync."""
    monkeypatch.setattr(_common, "stdlib_module", lambda name, target: _checked(name, True))
    moe_mod.PLANS.clear()
    e, k, hid, inter, t = 4, 2, 64, 32, 3
    wg = ExpertWeights.quantize(RNG.standard_normal((e, 2 * inter, hid)) * 0.1, "mxfp4")
    wd = ExpertWeights.quantize(RNG.standard_normal((e, hid, inter)) * 0.1, "bf16")
    try:
        for _ in range(2):
            x = RNG.standard_normal((t, hid)).astype(ml_dtypes.bfloat16)
            lg = RNG.standard_normal((t, e)).astype(np.float32)
            got = ops.moe(x, lg, wg, wd, k, reduce="separate", target="cpu")
            r = ops.moe_route_align(lg, k, ops.moe_block_m(t, k, e), target="cpu")
            h = ops.moe_gemm_swiglu(x, wg, r, target="cpu")
            y = ops.moe_gemm_down(h, wd, r, reduce="separate", target="cpu")
            want = ops.moe_sum(y, k, dtype="bf16", target="cpu")
            np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
        assert len(moe_mod.PLANS) == 1 and next(iter(moe_mod.PLANS.values())).mma
    finally:
        moe_mod.PLANS.clear()


@pytest.mark.gpu
@pytest.mark.parametrize("t", [1, 4, 16, 64, 300])
def test_route_align_fused_on_cuda_equals_the_four_launches_and_the_cpu_target(t):
    torch = pytest.importorskip("torch")
    for e, k in ((32, 4), (128, 8), (97, 3)):
        lg = torch.randn(t, e, device="cuda")
        lg[::2, e - 1] = lg[::2, 0]
        for mode, renorm in (("softmax_topk", False), ("softmax_topk", True), ("topk_softmax", True)):
            a = ops.moe_route_align(lg, k, 8, mode=mode, renormalize=renorm, fused=t * k <= 1024)
            b = ops.moe_route_align(lg, k, 8, mode=mode, renormalize=renorm, fused=False)
            c = ops.moe_route_align(lg.cpu().numpy(), k, 8, mode=mode, renormalize=renorm, fused=False, target="cpu")
            for f in FIELDS:
                x, y, z = getattr(a, f), getattr(b, f), np.asarray(getattr(c, f))
                assert torch.equal(x.view(torch.int32), y.view(torch.int32)), f
                if f != "topk_weights":
                    np.testing.assert_array_equal(x.cpu().numpy(), z, err_msg=f)


@pytest.mark.gpu
def test_moe_plan_on_cuda_across_calls_and_streams():
    """The planned call on torch CUDA tensors gives what the four-launch routing with
    kcompiler.ops.moe_gemm's functions gives (separate: bit for bit), on the current stream and on a
    side stream (its own scratch), call after call with new inputs."""
    torch = pytest.importorskip("torch")
    e, k, hid, inter = 32, 4, 256, 256
    wg = ExpertWeights.mxfp4(torch.randint(0, 256, (e, 2 * inter, hid // 2), dtype=torch.uint8, device="cuda"),
                             torch.randint(118, 122, (e, 2 * inter, hid // 32), dtype=torch.uint8, device="cuda"))
    wd = ExpertWeights.mxfp4(torch.randint(0, 256, (e, hid, inter // 2), dtype=torch.uint8, device="cuda"),
                             torch.randint(118, 122, (e, hid, inter // 32), dtype=torch.uint8, device="cuda"))
    side = torch.cuda.Stream()
    for t in (1, 16, 64, 16, 1):
        for stream in (torch.cuda.current_stream(), side):
            with torch.cuda.stream(stream):
                x = torch.randn(t, hid, device="cuda", dtype=torch.bfloat16)
                lg = torch.randn(t, e, device="cuda")
                got = ops.moe(x, lg, wg, wd, k, reduce="separate")
                r = ops.moe_route_align(lg, k, ops.moe_block_m(t, k, e), fused=False)
                y = ops.moe_gemm_down(ops.moe_gemm_swiglu(x, wg, r), wd, r, reduce="separate")
                want = ops.moe_sum(y, k, dtype="bf16")
                assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (t, stream)
    torch.cuda.synchronize()
