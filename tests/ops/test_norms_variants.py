"""The launch variants of std.norms's kernels (kcompiler/ops/norms_plans.py): each plan covers its rows
(pure Python, every variant over many shapes), each variant's kernel matches the float64 references of
norms_util.py on the CPU target (the tables set to that variant), the cluster split assembles for
sm_90a without spills, and on CUDA (marked gpu) every variant matches torch at odd sizes."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from kcompiler import ops
from kcompiler.frontend.program import stdlib_dir
from kcompiler.ops import norms_plans as P

from ..ptxas_util import needs_ptxas, ptxas
from .norms_util import TINY, U32, UNIT, check, f64, rand, residual_sum, rope_cache, rope_ref


@contextlib.contextmanager
def variant(table: str, name: str):
    """Every shape of ``table`` (norms_plans.NORM_TILES, ACT_TILES, ROTARY_TILES) given variant ``name``."""
    old = getattr(P, table)
    setattr(P, table, {(P.ANY, P.ANY): name})
    P.clear_plans()
    try:
        yield
    finally:
        setattr(P, table, old)
        P.clear_plans()


SHAPES = [(rows, n) for rows in (1, 2, 3, 16, 17, 64, 65, 131, 1025) for n in (1, 8, 200, 1000, 2880, 5128, 8192,
                                                                                 16384, 32768)]


def test_norm_plans_cover_their_rows():
    for name in P.NORM_VARIANTS:
        for rows, n in SHAPES:
            for vec in (1, 8):
                for cluster in (False, True):
                    for layer in (False, True):
                        try:
                            grid, block, nv, per, split = P.norm_plan(rows, n, vec, layer, cluster, 132, name)
                        except ValueError as e:  # past what a block holds, and not split over a cluster
                            assert n > P.NORM_MAX_VECTORS * 1024 * vec and "longer than" in str(e)
                            continue
                        what = (name, rows, n, vec, cluster, layer)
                        assert block % 64 == 0 and 64 <= block <= 1024 and nv & (nv - 1) == 0, what
                        assert nv * per <= P.NORM_MAX_VECTORS and per >= 1, what
                        assert block * nv * vec * split >= n, what
                        assert split == 1 or (cluster and not layer and per == 1 and rows * split <= 264), what
                        assert split in (1, 2, 4, 8) and grid == -(-rows // per) * split, what
    # the "split" variant fills the machine where the rows are few and long
    assert P.norm_plan(16, 8192, 8, False, True, 132, "split")[4] == 8
    assert P.norm_plan(64, 8192, 8, False, True, 132, "split")[4] == 4
    assert P.norm_plan(1025, 8192, 8, False, True, 132, "split")[4] == 1


def test_act_and_rotary_plans_cover_their_rows():
    for name in P.ACT_VARIANTS:
        for rows, d in SHAPES:
            for vec in (1, 8):
                gy, block, nv = P.act_plan(rows, d, vec, 132, name)
                span = block * nv * vec
                assert block % 64 == 0 and 64 <= block <= 256 and nv in (1, 2, 4), (name, rows, d)
                assert gy * span >= d and (gy - 1) * span < d, (name, rows, d, vec)
    for name in P.ROTARY_VARIANTS:
        for tokens, items in SHAPES:
            gy, block, ni = P.rotary_plan(tokens, items, 8, 132, name)
            assert block % 64 == 0 and 64 <= block <= 512 and ni in (1, 2), (name, tokens, items)
            assert gy == 1 or (gy - 1) * block * ni < items <= gy * block * ni, (name, tokens, items)
    assert P.act_plan(16, 8192, 8, 132, "fill") == (16, 64, 1)  # few tokens: small blocks, more of them
    assert P.act_plan(8192, 8192, 8, 132, "fill") == (2, 256, 2)


def test_plans_are_cached_and_the_table_picks_by_shape():
    with variant("NORM_TILES", "base"):
        P.NORM_TILES = {(64, P.ANY): "wide", (P.ANY, 4096): "rows2", (P.ANY, P.ANY): "base"}
        assert P.norm_plan(16, 8192, 8, False, False, 132) == P.norm_plan(16, 8192, 8, False, False, 132, "wide")
        assert P.norm_plan(100, 4096, 8, False, False, 132)[3] == 2
        assert P.norm_plan(100, 8192, 8, False, False, 132) == P.norm_plan(100, 8192, 8, False, False, 132, "base")
        assert P.norm_plan(100, 8192, 8, False, False, 132) is P.norm_plan(100, 8192, 8, False, False, 132)


@pytest.mark.parametrize("name", ["wide", "rows2", "rows4", "split"])
def test_norm_variant_on_cpu(name):
    """RMSNorm with the residual written back (bf16, 5 rows: rows4's second block holds one) and
    LayerNorm (f32, weight and bias) in the variant's configuration."""
    x, w, r = rand((5, 1000), "bf16"), rand(1000, "bf16"), rand((5, 1000), "bf16")
    h = residual_sum(x, r, "bf16")
    with variant("NORM_TILES", name):
        y = ops.rms_norm(x, w, 1e-6, residual=r, target="cpu")
        ref = h / np.sqrt((h * h).mean(-1, keepdims=True) + 1e-6) * f64(w)
        check(y, ref, UNIT["bf16"] * np.abs(ref) + 508 * U32 * np.abs(ref), f"rms_norm {name}", "bf16")
        assert np.array_equal(f64(r), h)
        if name in ("rows4", "rows2"):
            xl, wl, bl = rand((7, 200), "f32", 3.0), rand(200, "f32"), rand(200, "f32")
            y = ops.layer_norm(xl, wl, bl, 1e-5, target="cpu")
            a = f64(xl)
            mu = a.mean(-1, keepdims=True)
            ref = (a - mu) / np.sqrt(((a - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * f64(wl) + f64(bl)
            check(y, ref, 1e-5 * (np.abs(ref) + np.abs(f64(wl))), f"layer_norm {name}", "f32")


@pytest.mark.parametrize("name", ["nv2", "nv4", "b64"])
def test_act_variant_on_cpu(name):
    d = 4104  # 513 vectors of 8: a partly filled last block in every variant
    x = rand((3, 2 * d), "bf16", 3.0)
    g, u = f64(x)[:, :d], f64(x)[:, d:]
    with variant("ACT_TILES", name):
        y = ops.silu_and_mul(x, target="cpu")
    a = g / (1 + np.exp(-g))
    ref = a * u
    check(y, ref, UNIT["bf16"] * np.abs(ref) + (2.0 ** -20 * np.abs(a) + 4 * U32 * np.abs(g)) * np.abs(u),
          f"silu_and_mul {name}", "bf16")


@pytest.mark.parametrize("name,interleaved", [("b64", False), ("ni2", False), ("ni2", True)])
def test_rotary_variant_on_cpu(name, interleaved):
    """48 heads of 4 items (192): b64 splits a token over 3 blocks, ni2 gives threads 2 items (the
    second past the end for half of them)."""
    hq, hk, d, rot, t = 40, 8, 64, 64, 3
    q, k = rand((t, hq, d), "bf16"), rand((t, hk, d), "bf16")
    pos = RNG_POS.integers(0, 100, t)
    cache = rope_cache(100, rot)
    rq, mq = rope_ref(f64(q), pos, cache, rot, interleaved)
    rk, mk = rope_ref(f64(k), pos, cache, rot, interleaved)
    with variant("ROTARY_TILES", name):
        ops.rotary_embedding(q, k, pos, cache, interleaved, target="cpu")
    check(q, rq, UNIT["bf16"] * np.abs(rq) + 4 * U32 * mq, f"rope q {name}", "bf16")
    check(k, rk, UNIT["bf16"] * np.abs(rk) + 4 * U32 * mk, f"rope k {name}", "bf16")


RNG_POS = np.random.default_rng(5)


@needs_ptxas
def test_norm_split_assembles_for_sm90():
    """The cluster split: .reqnctapercluster SPLIT, the cluster barrier, no spills; a 1024-thread block
    (MAXT) within 64 registers."""
    from kcompiler.pipeline import emit_file
    base = dict(T="bf16", WT="bf16", BT="bf16", VEC=8, LN=False, WRITE=True, HAS_W=True, HAS_B=False, RES=True)
    ptx = emit_file(stdlib_dir() / "norms.kc", "asm", "nvptx", "sm_90a", kernel="norm",
                    comptime=dict(base, NV=2, ROWS=1, SPLIT=4, MAXT=256))
    assert ".reqnctapercluster 4, 1, 1" in ptx and "barrier.cluster.wait.acquire" in ptx
    assert " 0 bytes spill stores" in ptxas(ptx, verbose=True)
    ptx = emit_file(stdlib_dir() / "norms.kc", "asm", "nvptx", "sm_90a", kernel="norm",
                    comptime=dict(base, NV=1, ROWS=4, SPLIT=1, MAXT=1024))
    assert ".maxntid 1024" in ptx and "reqnctapercluster" not in ptx


# --- CUDA against torch ------------------------------------------------------------------------------

GPU_NORM = [(name, n, t) for name in P.NORM_VARIANTS for n in (2880, 5128) for t in (1, 3, 17, 1025)]


@pytest.mark.gpu
@pytest.mark.parametrize("name,n,tokens", GPU_NORM + [("base", 32768, 3), ("split", 8192, 1), ("split", 4096, 64)])
def test_norm_variants_on_cuda(name, n, tokens):
    torch = pytest.importorskip("torch")
    x = torch.randn(tokens, n, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(tokens, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    h = (x.float() + r.float()).to(torch.bfloat16).double()
    ref = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    tol = UNIT["bf16"] + (n / 2 + 8) * U32
    with variant("NORM_TILES", name):
        for _ in range(2):  # twice: the split's partial sums of one call do not leak into the next
            r1 = r.clone()
            y = ops.rms_norm(x, w, 1e-6, residual=r1)
            assert torch.equal(r1.double(), h)
            assert ((y.double() - ref).abs() <= tol * ref.abs() + TINY["bf16"]).all(), (name, n, tokens)
        y = ops.rms_norm(x, w, 1e-6)
        xf = x.double()
        ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
        assert ((y.double() - ref).abs() <= tol * ref.abs() + TINY["bf16"]).all(), (name, n, tokens)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(P.ACT_VARIANTS))
@pytest.mark.parametrize("d,tokens", [(2880, 1), (5128, 3), (8192, 17), (2880, 1025)])
def test_act_variants_on_cuda(name, d, tokens):
    torch = pytest.importorskip("torch")
    x = torch.randn(tokens, 2 * d, device="cuda", dtype=torch.bfloat16) * 3
    g, u = x[:, :d].double(), x[:, d:].double()
    ref = torch.nn.functional.silu(g) * u
    with variant("ACT_TILES", name):
        y = ops.silu_and_mul(x)
    assert ((y.double() - ref).abs() <= 2 * UNIT["bf16"] * ref.abs() + 16 * U32 * (g.abs() + 1) * u.abs()
            + TINY["bf16"]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(P.ROTARY_VARIANTS))
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("heads,tokens", [((40, 8), 1), ((64, 16), 3), ((20, 4), 17), ((64, 8), 1025)])
def test_rotary_variants_on_cuda(name, interleaved, heads, tokens):
    torch = pytest.importorskip("torch")
    (hq, hk), d, rot = heads, 128, 128
    q = torch.randn(tokens, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(tokens, hk, d, device="cuda", dtype=torch.bfloat16)
    pos = torch.randint(0, 4096, (tokens,), device="cuda")
    cache = torch.from_numpy(rope_cache(4096, rot)).cuda()
    want_q, mq = rope_ref(q.double().cpu().numpy(), pos.cpu().numpy(), cache.cpu().numpy(), rot, interleaved)
    want_k, mk = rope_ref(k.double().cpu().numpy(), pos.cpu().numpy(), cache.cpu().numpy(), rot, interleaved)
    with variant("ROTARY_TILES", name):
        ops.rotary_embedding(q, k, pos, cache, interleaved)
    check(q.double().cpu().numpy(), want_q, UNIT["bf16"] * np.abs(want_q) + 8 * U32 * mq, f"rope q {name}", "bf16")
    check(k.double().cpu().numpy(), want_k, UNIT["bf16"] * np.abs(want_k) + 8 * U32 * mk, f"rope k {name}", "bf16")
