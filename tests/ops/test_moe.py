"""std.moe through kcompiler.ops: moe_route (both modes, renormalisation, ties, -inf / NaN logits),
moe_align (vLLM's layout, checked slot for slot against a numpy construction), moe_sum, and ops.moe end
to end on the SIMT grouped GEMMs with bf16, FP8 and MXFP4 weights.

References are numpy float64 from the same inputs; weights are decoded by
kcompiler.ops.moe_types.dequantize_reference (the OCP MX / per-channel definitions), so an error in the
kernels' E2M1 / E8M0 / FP8 decoding is an O(1) relative error, far above the bounds.

Bounds, from u32 = 2^-24 (f32's unit roundoff): a dot product of K terms accumulated in f32 (fma) is
within (K + 2) u32 of the sum of the terms' magnitudes (the worst case of recursive summation, Higham
3.1; the products themselves are exact in f32 for these inputs up to one rounding each); std.math's exp
and silu are within 4 ulp; a value rounded to bf16 (x, h, out for bf16 activations) within 2^-8 of
itself. ops.moe's bound propagates these through h = silu(g) u (|silu'| <= 1.1) and the down projection
(:func:`moe_bound`), then doubles the total.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kcompiler import ops
from kcompiler.ops.moe_types import ExpertWeights, dequantize_reference

from .moe_util import DTYPES, RNG, U32, UNIT, align_ref, check_moe, f64, route_ref
from .moe_util import layer_weights as weights


# --- routing -------------------------------------------------------------------------------------------

def check_route(logits, top_k, mode, renormalize):
    ids, w = ops.moe_route(logits, top_k, mode=mode, renormalize=renormalize, target="cpu")
    rid, rw = route_ref(logits, top_k, mode, renormalize)
    assert ids.dtype == np.int32 and w.dtype == np.float32 and ids.shape == w.shape == rid.shape
    np.testing.assert_array_equal(ids, rid)
    assert np.isfinite(w).all()
    # exp within 4 ulp each, a sum of E (or top_k) terms within E u32, one division
    e = logits.shape[1]
    assert np.all(np.abs(f64(w) - rw) <= (e + 12) * U32 * rw + 2.0 ** -149)
    return ids, w


@pytest.mark.slow(sample=4)
@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("e,top_k", [(4, 1), (4, 4), (8, 2), (32, 4), (65, 8), (128, 6), (256, 8), (1, 1)])
@pytest.mark.parametrize("mode", ["softmax_topk", "topk_softmax"])
@pytest.mark.parametrize("renormalize", [False, True])
def test_route_matches_numpy(dt, e, top_k, mode, renormalize):
    logits = (RNG.standard_normal((37, e)) * 3).astype(DTYPES[dt])
    check_route(logits, top_k, mode, renormalize)


@pytest.mark.parametrize("mode", ["softmax_topk", "topk_softmax"])
def test_route_ties_go_to_the_lower_expert(mode):
    # logits from {-1, 0, 1}: most rows have ties at the cut and among the chosen
    logits = RNG.integers(-1, 2, (64, 40)).astype(np.float32)
    ids, _ = check_route(logits, 5, mode, False)
    for row, l in zip(ids, logits):
        assert list(row) == sorted(row, key=lambda i: (-l[i], i))


def test_route_nan_and_inf_logits_give_finite_weights():
    logits = RNG.standard_normal((6, 16)).astype(np.float32)
    logits[0, :] = -np.inf                 # all -inf: uniform, experts 0..k-1
    logits[1, 3] = np.nan                  # NaN counts as -inf
    logits[2, :] = np.nan
    logits[3, ::2] = -np.inf
    logits[4, 5] = np.inf                  # +inf dominates
    logits[4, 7] = np.inf
    logits = logits[:4]                    # +inf - inf is NaN in any softmax: not a case to promise
    for mode in ("softmax_topk", "topk_softmax"):
        for renorm in (False, True):
            ids, w = check_route(logits, 4, mode, renorm)
    assert list(ids[0]) == [0, 1, 2, 3] and np.allclose(w[0], 0.25)
    assert 3 not in ids[1]


def test_route_errors():
    logits = np.zeros((3, 8), np.float32)
    with pytest.raises(ValueError, match="top_k"):
        ops.moe_route(logits, 9, target="cpu")
    with pytest.raises(ValueError, match="top_k"):
        ops.moe_route(np.zeros((3, 4), np.float32), 5, target="cpu")
    with pytest.raises(ValueError, match="experts"):
        ops.moe_route(np.zeros((3, 257), np.float32), 2, target="cpu")
    with pytest.raises(ValueError, match="mode"):
        ops.moe_route(logits, 2, mode="sigmoid", target="cpu")
    with pytest.raises(TypeError, match="router_logits"):
        ops.moe_route(logits.astype(np.int32), 2, target="cpu")


# --- alignment -----------------------------------------------------------------------------------------

def random_ids(t, k, e):
    """Distinct experts within each row (as routing gives), skewed so that some experts get none."""
    p = RNG.dirichlet(np.full(e, 0.3))
    return np.stack([RNG.choice(e, k, replace=False, p=p) for _ in range(t)]).astype(np.int32).reshape(t, k)


@pytest.mark.slow(sample=4)
@pytest.mark.parametrize("t,k,e", [(1, 1, 1), (1, 4, 8), (7, 2, 4), (33, 4, 8), (300, 4, 33), (100, 8, 256),
                                   (5, 2, 1000), (2000, 1, 3)])
@pytest.mark.parametrize("bm", [1, 4, 16, 64])
def test_align_matches_numpy(t, k, e, bm):
    ids = random_ids(t, k, min(e, 64)) if e >= 64 else random_ids(t, k, e)
    r = ops.moe_align(ids, np.ones((t, k), np.float32), e, bm, target="cpu")
    want = align_ref(ids, e, bm)
    np.testing.assert_array_equal(r.sorted_ids, want[0])
    np.testing.assert_array_equal(r.tile_expert, want[1])
    assert int(r.num_tiles[0]) == want[2]
    # invariants, stated independently of the construction
    n = t * k
    real = r.sorted_ids[r.sorted_ids < n]
    assert sorted(real) == list(range(n))                        # each assignment exactly once
    assert np.all(r.sorted_ids <= n)                              # the rest: the sentinel
    for tile in range(int(r.num_tiles[0])):
        rows = r.sorted_ids[tile * bm:(tile + 1) * bm]
        rows = rows[rows < n]
        assert np.all(ids.reshape(-1)[rows] == r.tile_expert[tile]) and np.all(np.diff(rows) > 0)
    assert np.all(r.sorted_ids[int(r.num_tiles[0]) * bm:] == n)
    assert (r.block_m, r.top_k, r.num_experts, r.tokens) == (bm, k, e, t)


def test_align_leaves_out_ids_outside_the_experts():
    ids = np.array([[0, 3], [-1, 1], [2, 7], [3, 0]], np.int32)   # -1 and 7: experts of another rank (E = 4)
    r = ops.moe_align(ids, np.ones(ids.shape, np.float32), 4, 2, target="cpu")
    np.testing.assert_array_equal(r.sorted_ids[:10], [0, 7, 3, 8, 4, 8, 1, 6, 8, 8])
    np.testing.assert_array_equal(r.tile_expert[:6], [0, 1, 2, 3, -1, -1])
    assert int(r.num_tiles[0]) == 4


def test_align_errors():
    ids = np.zeros((2, 2), np.int32)
    w = np.ones((2, 2), np.float32)
    with pytest.raises(TypeError, match="topk_ids"):
        ops.moe_align(ids.astype(np.int64), w, 4, 16, target="cpu")
    with pytest.raises(TypeError, match="topk_weights"):
        ops.moe_align(ids, w[:1], 4, 16, target="cpu")
    with pytest.raises(ValueError, match="num_experts"):
        ops.moe_align(ids, w, 1025, 16, target="cpu")
    with pytest.raises(ValueError, match="block_m"):
        ops.moe_align(ids, w, 4, 0, target="cpu")


# --- moe_sum -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("src,dst", [("f32", "f32"), ("f32", "bf16"), ("bf16", "bf16"), ("f16", "f32")])
@pytest.mark.parametrize("k,h", [(1, 7), (3, 96), (4, 200), (8, 1)])
def test_moe_sum(src, dst, k, h):
    y = RNG.standard_normal((5 * k, h)).astype(DTYPES[src])
    out = ops.moe_sum(y, k, dtype=dst, target="cpu")
    ref = f64(y).reshape(5, k, h).sum(1)
    mag = np.abs(f64(y)).reshape(5, k, h).sum(1)
    assert out.dtype == DTYPES[dst] and out.shape == (5, h)
    assert np.all(np.abs(f64(out) - ref) <= k * U32 * mag * (1 + UNIT[dst]) + UNIT[dst] * np.abs(ref) + 2.0 ** -126)


def test_moe_sum_errors():
    with pytest.raises(ValueError, match="top_k"):
        ops.moe_sum(np.zeros((5, 8), np.float32), 2, target="cpu")
    with pytest.raises(ValueError, match="dtype"):
        ops.moe_sum(np.zeros((4, 8), np.float32), 2, dtype="f64", target="cpu")


# --- the layer -----------------------------------------------------------------------------------------

@pytest.mark.slow(sample=3)
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
@pytest.mark.parametrize("t", [1, 5, 33])
@pytest.mark.parametrize("e", [4, 8])
@pytest.mark.parametrize("top_k", [1, 2, 4])
@pytest.mark.parametrize("mode", ["softmax_topk", "topk_softmax"])
def test_moe_matches_float64_reference(fmt, t, e, top_k, mode):
    check_moe(fmt, t, e, top_k, mode)


@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
def test_moe_each_format(fmt):
    check_moe(fmt, 5, 8, 2, "softmax_topk", hid=160, inter=96, renormalize=False)


def test_moe_bf16_activations_and_separate_reduction_is_reproducible():
    x, logits, wg, wd, got = check_moe("mxfp4", 33, 8, 4, "topk_softmax", dt="bf16", reduce="separate")
    again = ops.moe(x, logits, wg, wd, 4, mode="topk_softmax", reduce="separate", target="cpu")
    np.testing.assert_array_equal(got.view(np.uint16), again.view(np.uint16))


def test_moe_takes_plain_bf16_weights():
    e, hid, inter = 4, 32, 96
    wg = (RNG.standard_normal((e, 2 * inter, hid)) * 0.1).astype(ml_dtypes.bfloat16)
    wd = (RNG.standard_normal((e, hid, inter)) * 0.1).astype(ml_dtypes.bfloat16)
    x = RNG.standard_normal((3, hid)).astype(np.float32)
    logits = RNG.standard_normal((3, e)).astype(np.float32)
    got = ops.moe(x, logits, wg, wd, 2, target="cpu")
    want = ops.moe(x, logits, ExpertWeights.bf16(wg), ExpertWeights.bf16(wd), 2, target="cpu")
    np.testing.assert_array_equal(got, want)


def test_moe_mxfp4_nan_scale_poisons_only_its_rows():
    e, hid, inter, t = 4, 64, 32, 6
    wg, wd = weights(e, 2 * inter, hid, "mxfp4"), weights(e, hid, inter, "mxfp4")
    scales = np.asarray(wd.scales).view(np.uint8).copy()
    scales[2, 5, 0] = 0xFF                       # E8M0 NaN: expert 2's output feature 5
    wd = ExpertWeights.mxfp4(wd.data, scales)
    x = RNG.standard_normal((t, hid)).astype(np.float32)
    logits = RNG.standard_normal((t, e)).astype(np.float32)
    logits[:3, 2] = 10.0                          # tokens 0-2 choose expert 2, 3-5 avoid it
    logits[3:, 2] = -10.0
    got = ops.moe(x, logits, wg, wd, 2, target="cpu")
    assert np.isnan(got[:3, 5]).all()
    assert np.isfinite(np.delete(got, 5, axis=1)).all() and np.isfinite(got[3:]).all()


def test_moe_errors():
    e, hid, inter = 4, 32, 64
    wg, wd = weights(e, 2 * inter, hid, "bf16"), weights(e, hid, inter, "bf16")
    x = np.zeros((2, hid), np.float32)
    logits = np.zeros((2, e), np.float32)
    with pytest.raises(ValueError, match="w_down"):
        ops.moe(x, logits, wg, wg, 2, target="cpu")
    with pytest.raises(ValueError, match="router_logits"):
        ops.moe(x, logits[:, :3], wg, wd, 2, target="cpu")
    with pytest.raises(ValueError, match="w_gate_up"):
        ops.moe(np.zeros((2, 64), np.float32), logits, wg, wd, 2, target="cpu")
    with pytest.raises(ValueError, match="reduce"):
        ops.moe(x, logits, wg, wd, 2, reduce="tree", target="cpu")
    with pytest.raises(TypeError, match="ExpertWeights"):
        ops.moe(x, logits, np.asarray(wg.data, np.float32), wd, 2, target="cpu")
    for bad in (None, logits.tolist()):  # not an array: a TypeError, not an AttributeError on .shape
        with pytest.raises(TypeError, match="router_logits must be an array"):
            ops.moe(x, bad, wg, wd, 2, target="cpu")


# --- CUDA ----------------------------------------------------------------------------------------------

#: E2M1's 16 values by code (OCP MX v1.0 §5.3.3), to decode MXFP4 weights on the GPU.
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def torch_weights(torch, e, n, k, fmt):
    """(ExpertWeights on the GPU, its values as float64 (E, N, K) on the GPU), made there: at this size
    numpy's quantisation would take minutes. The GPU decode is checked against dequantize_reference
    on the first expert."""
    if fmt == "mxfp4":
        packed = torch.randint(0, 256, (e, n, k // 2), dtype=torch.uint8, device="cuda")
        scales = torch.randint(119, 124, (e, n, k // 32), dtype=torch.uint8, device="cuda")
        lut = torch.tensor(E2M1, dtype=torch.float64, device="cuda")
        vals = torch.empty(e, n, k, dtype=torch.float64, device="cuda")
        for i in range(e):
            codes = torch.stack((packed[i] & 15, packed[i] >> 4), -1).reshape(n, k).long()
            vals[i] = lut[codes] * torch.exp2(scales[i].double() - 127).repeat_interleave(32, -1)
        w = ExpertWeights.mxfp4(packed, scales)
    elif fmt == "fp8":
        f = torch.randn(e, n, k, device="cuda") * 0.02
        s = f.abs().amax(-1) / 448.0
        codes = (f / s[..., None]).to(torch.float8_e4m3fn)
        vals = codes.double() * s.double()[..., None]
        w = ExpertWeights.fp8(codes, s)
    else:
        b = (torch.randn(e, n, k, device="cuda") * 0.02).to(torch.bfloat16)
        vals = b.double()
        w = ExpertWeights.bf16(b)
    def host(a):  # to numpy, bf16 and FP8 as ml_dtypes' types
        if a.dtype == torch.bfloat16:
            return a.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
        if a.dtype == torch.float8_e4m3fn:
            return a.view(torch.uint8).cpu().numpy().view(ml_dtypes.float8_e4m3fn)
        return a.cpu().numpy()
    first = ExpertWeights(w.format, host(w.data[:1]), None if w.scales is None else host(w.scales[:1]))
    assert np.array_equal(dequantize_reference(first), vals[:1].cpu().numpy())
    return w, vals


def torch_moe_ref(torch, x, ids, w, g_all, d_all):
    """float64 on the GPU: (out, bound), the bound as :func:`moe_ref`'s with h rounded to bf16 (both
    paths hold h in bf16; the tensor-core path's operands are then exact: x and h bf16, the weights
    bf16, FP8 and E2M1 values times powers of two)."""
    t_n, hid = x.shape
    inter = g_all.shape[1] // 2
    out = torch.zeros(t_n, hid, dtype=torch.float64, device="cuda")
    bound = torch.zeros_like(out)
    x64 = x.double()
    for e in torch.unique(ids).tolist():
        tok, j = torch.nonzero(ids == e, as_tuple=True)
        xs = x64[tok]
        g, u = xs @ g_all[e, :inter].T, xs @ g_all[e, inter:].T
        gm, um = xs.abs() @ g_all[e, :inter].abs().T, xs.abs() @ g_all[e, inter:].abs().T
        sg = torch.nn.functional.silu(g)
        h = sg * u
        dh = (hid + 2) * U32 * (1.1 * gm * u.abs() + sg.abs() * um) + (4 * U32 + 2.0 ** -8) * h.abs()
        wt = w[tok, j].double()[:, None]
        da = d_all[e].abs().T
        ym = (h.abs() + dh) @ da
        out.index_add_(0, tok, wt * (h @ d_all[e].T))
        bound.index_add_(0, tok, wt * (dh @ da + (inter + 2 + 32 + 8) * U32 * ym))
    return out, 2 * bound + 2.0 ** -8 * out.abs()


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "mxfp4"])
@pytest.mark.parametrize("t", [1, 64, 1000])
@pytest.mark.parametrize("gemm", ["auto", "simt"])
def test_moe_on_cuda_gpt_oss_shape(fmt, t, gemm):
    """E 32, top_k 4, H = I = 2880, bf16 activations, against float64 on the GPU, within
    :func:`torch_moe_ref`'s bound (h and the result rounded to bf16, f32 sums)."""
    torch = pytest.importorskip("torch")
    e, k, hid, inter = 32, 4, 2880, 2880
    wg, g_all = torch_weights(torch, e, 2 * inter, hid, fmt)
    wd, d_all = torch_weights(torch, e, hid, inter, fmt)
    x = torch.randn(t, hid, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(t, e, device="cuda", dtype=torch.float32)
    for reduce in ("atomic", "separate"):
        got = ops.moe(x, logits, wg, wd, k, mode="topk_softmax", reduce=reduce, gemm=gemm)
        assert got.dtype == torch.bfloat16 and got.shape == (t, hid) and got.is_cuda
        ids, w = ops.moe_route(logits, k, mode="topk_softmax")
        ref, bound = torch_moe_ref(torch, x, ids, w, g_all, d_all)
        err = (got.double() - ref).abs()
        assert bool((err <= bound + 2.0 ** -126).all()), (reduce, float((err / bound).max()))
        # the worst-case bound grows as sqrt(I) over the typical error: also the whole result's relative
        # error, about 2^-9 from bf16's roundings (random signs), which a wrong expert or decode passes
        assert float(err.norm() / ref.norm()) < 2.0 ** -6, (reduce, float(err.norm() / ref.norm()))


@pytest.mark.gpu
def test_route_and_align_on_cuda_equal_the_cpu_target():
    torch = pytest.importorskip("torch")
    logits = torch.randn(1000, 128, device="cuda")
    for mode in ("softmax_topk", "topk_softmax"):
        ids, w = ops.moe_route(logits, 8, mode=mode, renormalize=False)
        cids, cw = ops.moe_route(logits.cpu().numpy(), 8, mode=mode, renormalize=False, target="cpu")
        np.testing.assert_array_equal(ids.cpu().numpy(), cids)
        np.testing.assert_allclose(w.cpu().numpy(), cw, rtol=1e-6)
        r = ops.moe_align(ids, w, 128, 64)
        c = ops.moe_align(cids, cw, 128, 64, target="cpu")
        for a, b in ((r.sorted_ids, c.sorted_ids), (r.tile_expert, c.tile_expert), (r.num_tiles, c.num_tiles)):
            np.testing.assert_array_equal(a.cpu().numpy(), b)
    y = torch.randn(4000, 2880, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(ops.moe_sum(y, 4), y.float().view(1000, 4, 2880).sum(1).to(torch.bfloat16),
                               rtol=2 ** -7, atol=1e-5)


def test_route_and_align_with_wavefronts_of_64(monkeypatch):
    """The kernels take the warp size from the target (AMD CDNA's wavefront of 64 on the CPU target):
    routing's lanes hold 4 logits of 256, the scatter's block is one wavefront (the SIMT GEMMs use no
    warp operations)."""
    import functools

    from kcompiler import compile_file
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.ops import _common

    w64 = functools.lru_cache(None)(lambda name, target: compile_file(
        stdlib_dir() / f"{name}.kc", target="cpu", target_options={"warp_size": 64}))
    monkeypatch.setattr(_common, "stdlib_module", w64)
    logits = (RNG.standard_normal((300, 256)) * 3).astype(np.float32)
    ids, _ = check_route(logits, 8, "softmax_topk", False)
    r = ops.moe_align(ids, np.ones(ids.shape, np.float32), 256, 16, target="cpu")
    want = align_ref(ids, 256, 16)
    np.testing.assert_array_equal(r.sorted_ids, want[0])
    assert int(r.num_tiles[0]) == want[2]
