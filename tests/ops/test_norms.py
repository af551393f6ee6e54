"""std.norms through kcompiler.ops: rms_norm (with the fused residual add), layer_norm, rotary_embedding
(GPT-NeoX and GPT-J styles, partial rotary) and the gated activations silu_and_mul / gelu_and_mul.

On the CPU target against numpy float64 references computed from the same (rounded) inputs, on fresh
random inputs of odd sizes; on CUDA (marked gpu) against torch, with torch views (a fused qkv tensor's
q and k, strided rows) and in place.

Tolerances, from the dtype's unit roundoff u (2^-24 f32, 2^-11 f16, 2^-8 bf16) and f32's u32 = 2^-24:
every result is computed in f32 and rounded once to its type (u |ref|), after f32 arithmetic whose
error is a few u32 of the magnitudes involved; a sum of n squares adds about n u32 relative (the
block reduction's order differs from numpy's), which 1 / sqrt halves. std.math's SiLU and GELU are
within 3 ulp (f32), their _rp forms (16-bit results) within about 2^-21 relative (docs/math.md).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from kcompiler import ops
from kcompiler.ops.norms import NORM_MAX_VECTORS, norm_launch

from .norms_util import DTYPES, RNG, TINY, U32, UNIT, check, f64, rand, residual_sum, rope_cache, rope_ref


# --- RMSNorm and LayerNorm ---------------------------------------------------------------------------

HIDDEN = [1, 7, 64, 200, 1000, 2056, 4097, 8192]
NORM_CASES = [(dt, n, t, res) for dt in DTYPES for n in HIDDEN for t in (1, 3) for res in ("none", "add", "write")]


@pytest.mark.slow(sample=12)
@pytest.mark.parametrize("dt,n,tokens,res", NORM_CASES)
def test_rms_norm_matches_float64(dt, n, tokens, res):
    x, w = rand((tokens, n), dt), rand(n, dt)
    r = rand((tokens, n), dt) if res != "none" else None
    r0 = None if r is None else r.copy()
    y = ops.rms_norm(x, w, 1e-6, residual=r, write_residual=res == "write", target="cpu")
    assert y.dtype == x.dtype and y.shape == x.shape
    h = f64(x) if r is None else residual_sum(x, r0, dt)
    inv = 1.0 / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-6)
    ref = h * inv * f64(w)
    bound = UNIT[dt] * np.abs(ref) + (n / 2 + 8) * U32 * np.abs(ref)
    check(y, ref, bound, f"rms_norm {dt} {tokens}x{n} residual {res}", dt)
    if res == "write":
        assert np.array_equal(f64(r), h), "the residual holds x + residual rounded to its type"
    elif res == "add":
        assert np.array_equal(f64(r), f64(r0)), "write_residual=False leaves the residual alone"


@pytest.mark.slow(sample=8)
@pytest.mark.parametrize("dt,n,tokens,affine", [(dt, n, t, a) for dt in DTYPES for n in HIDDEN for t in (1, 3)
                                                for a in ("wb", "w", "none")])
def test_layer_norm_matches_float64(dt, n, tokens, affine):
    x = rand((tokens, n), dt, 3.0) + DTYPES[dt](2.0)  # a nonzero mean: the two-pass variance matters
    w = rand(n, dt) if affine != "none" else None
    b = rand(n, dt) if affine == "wb" else None
    y = ops.layer_norm(x, w, b, 1e-5, target="cpu")
    h = f64(x)
    mean = h.mean(-1, keepdims=True)
    std = np.sqrt(((h - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    z = (h - mean) / std
    wf = f64(w) if w is not None else 1.0
    bf = f64(b) if b is not None else 0.0
    ref = z * wf + bf
    # the mean's error (n u32 |h|) enters every element through (h - mean) / std
    scale = (np.abs(z) + np.abs(h).max(-1, keepdims=True) / std) * np.abs(wf) + np.abs(bf)
    bound = UNIT[dt] * np.abs(ref) + (n + 16) * U32 * scale
    check(y, ref, bound, f"layer_norm {dt} {tokens}x{n} {affine}", dt)


def test_rms_norm_in_place_leading_dims_and_f32_weight():
    """out=x (vLLM's in-place form), 3-D x, a weight of another float type, a strided numpy x."""
    x = rand((2, 3, 96), "bf16")
    w = rand(96, "f32")
    r = rand((2, 3, 96), "bf16")
    h = residual_sum(x, r, "bf16")
    ref = h / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-5) * f64(w)
    y = ops.rms_norm(x, w, 1e-5, residual=r, out=x, target="cpu")
    assert y is x
    check(x, ref, UNIT["bf16"] * np.abs(ref) + 64 * U32 * np.abs(ref), "in place", "bf16")
    assert np.array_equal(f64(r), h)
    big = rand((4, 200), "f16")
    view = big[:, 50:150]  # rows 200 apart: copied, normalised, and the result is new
    y = ops.rms_norm(view, None, 1e-6, target="cpu")
    hv = f64(view)
    ref = hv / np.sqrt((hv * hv).mean(-1, keepdims=True) + 1e-6)
    check(y, ref, UNIT["f16"] * np.abs(ref) + 64 * U32 * np.abs(ref), "strided view", "f16")


def test_norm_launch_covers_every_row_length():
    for vec in (1, 2, 4, 8):
        for n in list(range(vec, 600, vec)) + [vec * k for k in (1023, 1024, 4097, 16384)]:
            block, nv = norm_launch(n, vec)
            assert block % 64 == 0 and 64 <= block <= 1024 and nv & (nv - 1) == 0
            assert block * nv * vec >= n
    with pytest.raises(ValueError, match="longer than the norm kernel holds"):
        norm_launch(NORM_MAX_VECTORS * 1024 * 8 + 8, 8)


def test_norm_errors():
    x = rand((2, 8), "f32")
    with pytest.raises(TypeError, match="rms_norm: x must be an array of f32, f16 or bf16"):
        ops.rms_norm(x.astype(np.float64), None)
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        ops.rms_norm(x, rand(9, "f32"))
    with pytest.raises(ValueError, match="residual must be an array of x's dtype and shape"):
        ops.rms_norm(x, None, residual=rand((2, 8), "f16"))
    with pytest.raises(ValueError, match="nonzero last dimension"):
        ops.layer_norm(np.zeros((3, 0), np.float32))


# --- rotary embeddings ---------------------------------------------------------------------------------

ROPE_CASES = [(dt, inter, d, rot, t) for dt in DTYPES for inter in (False, True)
              for d, rot in ((64, 64), (128, 64), (80, 80), (96, 32), (6, 4), (10, 6)) for t in (1, 5)]


@pytest.mark.slow(sample=10)
@pytest.mark.parametrize("dt,interleaved,d,rot,tokens", ROPE_CASES)
def test_rotary_matches_numpy(dt, interleaved, d, rot, tokens):
    hq, hk, max_pos = 4, 2, 300
    q, k = rand((tokens, hq, d), dt), rand((tokens, hk, d), dt)
    pos = RNG.integers(0, max_pos, tokens).astype(np.int64)
    cache = rope_cache(max_pos, rot, "f32" if dt == "f32" else dt)
    rq, mq = rope_ref(f64(q), pos, cache, rot, interleaved)
    rk, mk = rope_ref(f64(k), pos, cache, rot, interleaved)
    q2, k2 = ops.rotary_embedding(q, k, pos, cache, interleaved, target="cpu")
    assert q2 is q and k2 is k
    check(q, rq, UNIT[dt] * np.abs(rq) + 4 * U32 * mq, f"rope q {dt} interleaved={interleaved}", dt)
    check(k, rk, UNIT[dt] * np.abs(rk) + 4 * U32 * mk, f"rope k {dt} interleaved={interleaved}", dt)
    assert np.array_equal(f64(q)[..., rot:], f64(q2)[..., rot:])


def test_rotary_flat_heads_int32_positions_no_k_and_qkv_view():
    d, rot, hq, hk, t = 32, 16, 3, 1, 4
    cache = rope_cache(64, rot)
    pos = np.array([0, 63, 5, 17], np.int32)
    q = rand((t, hq * d), "f16")
    ref, m = rope_ref(f64(q).reshape(t, hq, d), pos, cache, rot, False)
    ops.rotary_embedding(q, None, pos, cache, head_size=d, target="cpu")
    check(q.reshape(t, hq, d), ref, UNIT["f16"] * np.abs(ref) + 4 * U32 * m, "flat q", "f16")
    qkv = rand((t, (hq + 2 * hk) * d), "bf16")  # q and k as strided views of a fused projection
    want = f64(qkv).copy()
    for lo, h in ((0, hq), (hq * d, hk)):
        want[:, lo:lo + h * d] = rope_ref(want[:, lo:lo + h * d].reshape(t, h, d), pos, cache, rot,
                                          True)[0].reshape(t, h * d)
    ops.rotary_embedding(qkv[:, :hq * d], qkv[:, hq * d:(hq + hk) * d], pos, cache, True, head_size=d,
                         target="cpu")
    check(qkv, want, UNIT["bf16"] * np.abs(want) + 8 * U32 * np.abs(want).max(), "qkv views", "bf16")


def test_rotary_errors():
    q = rand((2, 2, 8), "f32")
    cache = rope_cache(4, 8)
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 4\)"):
        ops.rotary_embedding(q, None, np.array([0, 4]), cache)
    with pytest.raises(ValueError, match="exceeds the head size"):
        ops.rotary_embedding(q, None, np.array([0, 1]), rope_cache(4, 16))
    with pytest.raises(ValueError, match="head_size given"):
        ops.rotary_embedding(q.reshape(2, 16), None, np.array([0, 1]), cache)
    with pytest.raises(TypeError, match="positions must hold int32 or int64"):
        ops.rotary_embedding(q, None, np.array([0.0, 1.0]), cache)
    with pytest.raises(ValueError, match="one position a token"):
        ops.rotary_embedding(q, None, np.array([0]), cache)


# --- gated activations ---------------------------------------------------------------------------------

def gelu64(a, approximate):
    if approximate == "tanh":
        return 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))
    erf = np.vectorize(math.erf)
    return 0.5 * a * (1 + erf(a / math.sqrt(2)))


ACT_CASES = [(dt, act, d, t) for dt in DTYPES for act in ("silu", "gelu", "gelu_tanh")
             for d in (1, 7, 64, 1000, 4104) for t in (1, 3)]


@pytest.mark.slow(sample=10)
@pytest.mark.parametrize("dt,act,d,tokens", ACT_CASES)
def test_act_and_mul_matches_float64(dt, act, d, tokens):
    x = rand((tokens, 2 * d), dt, 3.0)
    g, u = f64(x)[:, :d], f64(x)[:, d:]
    if act == "silu":
        y, a = ops.silu_and_mul(x, target="cpu"), g / (1 + np.exp(-g))
    else:
        approx = "tanh" if act == "gelu_tanh" else "none"
        y, a = ops.gelu_and_mul(x, approx, target="cpu"), gelu64(g, approx)
    assert y.shape == (tokens, d) and y.dtype == x.dtype
    ref = a * u
    act_err = 8 * U32 if dt == "f32" else 2.0 ** -20  # std.math's bound, or the _rp forms' (docs/math.md)
    bound = UNIT[dt] * np.abs(ref) + (act_err * np.abs(a) + 4 * U32 * np.abs(g)) * np.abs(u)
    check(y, ref, bound, f"{act}_and_mul {dt} {tokens}x{d}", dt)


def test_act_and_mul_errors():
    with pytest.raises(ValueError, match="last dimension must be even"):
        ops.silu_and_mul(np.zeros((2, 7), np.float32))
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        ops.gelu_and_mul(np.zeros((2, 8), np.float32), "fast")
    with pytest.raises(TypeError, match="silu_and_mul: x must be an array"):
        ops.silu_and_mul(np.zeros((2, 8), np.int32))


# --- CUDA against torch ------------------------------------------------------------------------------

TORCH_DT = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


@pytest.mark.gpu
@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("n,tokens", [(2048, 1), (4096, 77), (8192, 513), (5120, 8), (1000, 3), (7, 5)])
def test_norms_on_cuda_match_torch(dt, n, tokens):
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, TORCH_DT[dt])
    x = torch.randn(tokens, n, device="cuda", dtype=tdt)
    r = torch.randn(tokens, n, device="cuda", dtype=tdt)
    w = torch.randn(n, device="cuda", dtype=tdt)
    b = torch.randn(n, device="cuda", dtype=tdt)
    h = (x.float() + r.float()).to(tdt)
    r1 = r.clone()
    y = ops.rms_norm(x, w, 1e-6, residual=r1)
    hf = h.double()
    ref = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    assert torch.equal(r1, h)
    tol = UNIT[dt] + (n / 2 + 8) * U32
    assert ((y.double() - ref).abs() <= tol * ref.abs() + TINY[dt]).all()
    ln = ops.layer_norm(x, w, b, 1e-5)
    lref = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
    assert torch.allclose(ln.double(), lref, rtol=2 * UNIT[dt], atol=(n + 16) * U32 * 8 + 2 * UNIT[dt] * 4)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_on_cuda_in_place_on_qkv_views(dt, interleaved):
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, TORCH_DT[dt])
    t, hq, hk, d, rot = 37, 32, 8, 128, 64
    qkv = torch.randn(t, (hq + 2 * hk) * d, device="cuda", dtype=tdt)
    q, k = qkv[:, :hq * d], qkv[:, hq * d:(hq + hk) * d]
    pos = torch.randint(0, 4096, (t,), device="cuda")
    cache = torch.from_numpy(rope_cache(4096, rot)).cuda()
    want_q, _ = rope_ref(q.double().cpu().numpy().reshape(t, hq, d), pos.cpu().numpy(), cache.cpu().numpy(), rot,
                         interleaved)
    ops.rotary_embedding(q, k.view(t, hk, d), pos, cache, interleaved, head_size=d)
    got = q.double().cpu().numpy().reshape(t, hq, d)
    check(got, want_q, UNIT[dt] * np.abs(want_q) + 8 * U32 * np.abs(want_q).max(), "cuda rope q", dt)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", list(DTYPES))
def test_act_and_mul_on_cuda_match_torch(dt):
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, TORCH_DT[dt])
    x = torch.randn(300, 2 * 14336, device="cuda", dtype=tdt) * 3
    d = 14336
    g, u = x[:, :d].double(), x[:, d:].double()
    ref = torch.nn.functional.silu(g) * u
    y = ops.silu_and_mul(x)
    assert ((y.double() - ref).abs() <= 2 * UNIT[dt] * ref.abs() + 16 * U32 * (g.abs() + 1) * u.abs() + TINY[dt]).all()
    for approx in ("none", "tanh"):
        ref = torch.nn.functional.gelu(g, approximate=approx) * u
        y = ops.gelu_and_mul(x, approx)
        assert ((y.double() - ref).abs() <= 2 * UNIT[dt] * ref.abs() + 16 * U32 * (g.abs() + 1) * u.abs() + TINY[dt]).all()
