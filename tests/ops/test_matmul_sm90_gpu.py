"""std.matmul's Hopper path on an sm_90 GPU (marked gpu; skipped elsewhere): ops.matmul and
ops.scaled_matmul against torch in float64 on fresh random inputs of many shapes, odd M, N and K among
them (M, N, K not multiples of the tile; K a multiple of 8 for 16-bit types, 16 for FP8: TMA's 16-byte
stride rule), with the output poisoned first; every config, the ping-pong form, FP8 and MX epilogues,
small-M split-K, the kept launch and tensor maps. The tolerance is test_matmul.py's (f32 accumulation of K
exact products, then one rounding), a factor 4 looser for FP8, whose tensor-core accumulation is
narrower. The same kernels on the CPU target's emulation: test_matmul_sm90.py."""
from __future__ import annotations

import pytest

from .matmul_sm90_util import _fp8_gpu_case, _reference_check, _sm90

SHAPES = [(128, 256, 64), (1, 1, 8), (17, 33, 72), (200, 300, 136), (257, 513, 1000), (64, 4096, 4096),
          (16, 4096, 8192), (1000, 777, 1024), (2048, 2048, 2048), (129, 255, 4104),
          (128, 14336, 4096)]  # 128 x 112 tiles (K-major B; N-major: 64 x 128)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype, out_dtype, b_kmajor", [("bfloat16", "bfloat16", True), ("float16", "float32", True),
                                                        ("bfloat16", "float32", False)])
def test_ops_matmul_hopper(shape, dtype, out_dtype, b_kmajor):
    import torch

    from kcompiler import ops
    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module
    _sm90(torch)
    M, N, K = shape
    dt, ot = getattr(torch, dtype), getattr(torch, out_dtype)
    a = torch.randn(M, K, device="cuda").to(dt)
    b = torch.randn(N, K, device="cuda").to(dt).T if b_kmajor else torch.randn(K, N, device="cuda").to(dt)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=ot)
    # the Hopper path: row-major B N-major (wgmma's transposed B) where TMA can describe its rows, else copied
    # K-major (odd N: rows of N * 2 bytes not a multiple of 16)
    got = matmul_sm90.operand_b(stdlib_module("matmul_sm90", "cuda"), a, b.T if b_kmajor else b, out, b_kmajor)
    assert got is not None and got[1] == (b_kmajor or (N * 2) % 16 != 0)
    c = ops.matmul(a, b, out=out)
    torch.cuda.synchronize()
    _reference_check(c, a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["128x256", "128x128", "64x128", "64x64", "64x112", "64x32", "64x128/4", "pp64x256",
                                    "pp128x128", "pp64x256/3", "c2x128x256", "c2pp128x128"])
@pytest.mark.parametrize("b_kmajor", [True, False])
def test_every_config(config, b_kmajor):
    import torch

    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module
    _sm90(torch)
    name, _, split = config.partition("/")
    if not b_kmajor and matmul_sm90.CONFIGS[name]["BN"] % 64:
        pytest.skip("an N-major B takes BN a multiple of 64 (its 64-column boxes)")
    # one-consumer tiles also at small M (AROWS: a stage holds M rows of A rounded up to 8, more stages)
    for M in (333, 13) if matmul_sm90.CONFIGS[name]["CONSUMERS"] == 1 else (333,):
        N, K = 1000, 520
        a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        b = torch.randn(N, K, device="cuda").to(torch.bfloat16)
        if not b_kmajor:
            b = b.T.contiguous()
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        matmul_sm90.run(stdlib_module("matmul_sm90", "cuda"), a, b, out, b_kmajor=b_kmajor,
                        config=matmul_sm90.CONFIGS[name], split_k=int(split or 1))
        torch.cuda.synchronize()
        _reference_check(out, a, b.T if b_kmajor else b)


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["pp64x256", "pp128x128", "c2pp128x128"])
@pytest.mark.parametrize("stages", [4, 5])
def test_pingpong_many_units(config, stages):
    """Ping-pong on the H100 with many units a block (a grid of 16 blocks over 16 x 12 or 8 x 23 tiles,
    units of 40 k-steps, many times STAGES): both consumers on several units, skipping the other's
    k-steps (the launch failed here before the consumers' order barrier); against torch in float64."""
    import torch

    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module
    _sm90(torch)
    M, N, K = 1000, 2900, 2560
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    matmul_sm90.run(stdlib_module("matmul_sm90", "cuda"), a, b, out, config=dict(matmul_sm90.CONFIGS[config],
                    STAGES=stages), sms=16, split_k=1)
    torch.cuda.synchronize()
    _reference_check(out, a, b.T)


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["128x256", "pp64x256", "pp128x128", "c2x128x256", "c2pp128x128"])
@pytest.mark.parametrize("per_row", [False, True])
def test_fp8_variants(config, per_row):
    """FP8 (e4m3, BK = 128) through each variant (ping-pong, clusters) on an odd shape, scaled per tensor
    or per row / column, against torch in float64; 3 row-tiles of 128 leave the second pair of a
    cluster half past M."""
    _fp8_gpu_case(config, per_row, 528, 1)


@pytest.mark.gpu
def test_hopper_epilogues():
    """A stock epilogue reading a bias (x) and a user's epilogue source, on the Hopper path, against
    torch in float64 applied to the float64 product."""
    import torch

    from kcompiler import ops
    _sm90(torch)
    M, N, K = 300, 520, 264
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    w = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    bias = torch.randn(N, device="cuda").to(torch.bfloat16)
    c = ops.matmul(a, w.T, epilogue=ops.Epilogue("bias_relu", x=bias), out_dtype=torch.float32)
    ref = torch.relu(a.double() @ w.double().T + bias.double())
    assert ((c.double() - ref).abs() <= 1e-3 * (1 + ref.abs())).all()
    src = "fn twice_plus_row(acc: f32, row: i32, col: i32, ld: i32, x: ptr<f32>, y: ptr<f32>, s: f32) -> f32 {\n" \
          "    return s * acc + f32(row);\n}\n"
    c = ops.matmul(a, w.T, epilogue=ops.Epilogue("twice_plus_row", s=2.0, source=src), out_dtype=torch.float32)
    ref = 2 * (a.double() @ w.double().T) + torch.arange(M, device="cuda", dtype=torch.float64)[:, None]
    assert ((c.double() - ref).abs() <= 1e-3 * (1 + ref.abs())).all()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(128, 256, 128), (17, 33, 80), (300, 520, 1040), (1024, 4096, 4096),
                                   (16, 4096, 14336)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("fmt, per_row", [("float8_e4m3fn", False), ("float8_e4m3fn", True),
                                          ("float8_e5m2", False)])
def test_scaled_matmul(shape, fmt, per_row):
    import torch

    from kcompiler import ops
    _sm90(torch)
    M, N, K = shape
    dt = getattr(torch, fmt)
    a = (torch.randn(M, K, device="cuda") * 2).to(dt)
    b = (torch.randn(N, K, device="cuda") * 2).to(dt).T  # K-major, as torch._scaled_mm wants it too
    if per_row:
        sa = torch.rand(M, 1, device="cuda") + 0.5
        sb = torch.rand(1, N, device="cuda") + 0.5
    else:
        sa = torch.rand((), device="cuda") + 0.5
        sb = torch.rand((), device="cuda") + 0.5
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    c = ops.scaled_matmul(a, b, sa, sb, out=out)
    torch.cuda.synchronize()
    _reference_check(c, a.float(), b.float(), fp8=True, scale=(sa.double() * sb.double()))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(16, 2048, 4096), (16, 2048, 14336), (40, 1000, 4104), (16, 256, 8192)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_small_m_split_k(shape, out_dtype):
    """Small M: ops.matmul's default split-K on the Hopper path (matmul_sm90.choose_split: the K loop of
    each tile in shares whose f32 partial products the kernel sums itself), with and without an
    epilogue, against torch in float64."""
    import torch

    from kcompiler import ops
    from kcompiler.ops import matmul_sm90
    _sm90(torch)
    M, N, K = shape
    assert matmul_sm90.choose_split(M, N, K, matmul_sm90.choose(M, N, K), 64) > 1
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda").to(torch.bfloat16).T
    out = torch.full((M, N), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
    c = ops.matmul(a, b, out=out)
    torch.cuda.synchronize()
    _reference_check(c, a, b)
    if out_dtype == "float32":  # the epilogue applied once, to the sum of the shares
        bias = torch.randn(N, device="cuda")
        out.fill_(float("nan"))
        c = ops.matmul(a, b, out=out, epilogue=ops.Epilogue("bias", x=bias))
        torch.cuda.synchronize()
        _reference_check(c - bias, a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("shape, b_kmajor", [((300, 512, 264), True), ((64, 4096, 4096), True),
                                             ((129, 320, 1040), False), ((1000, 1024, 520), True)],
                         ids=lambda s: str(s))
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_mx_epilogue_hopper(shape, b_kmajor, fmt):
    """ops.matmul(..., epilogue='to_mxfp8_*') on the Hopper path: the codes and E8M0 scales bit for bit
    ops.mx_quantize's of the same kernel's f32 result, also composed after a bias + GELU."""
    import torch

    from kcompiler import ops
    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module
    _sm90(torch)
    M, N, K = shape
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda").to(torch.bfloat16).T if b_kmajor else \
        torch.randn(K, N, device="cuda").to(torch.bfloat16)
    bias = torch.randn(N, device="cuda")
    for ep, per in ((f"to_mxfp8_{fmt}", None), (ops.Epilogue("bias_gelu", x=bias, block=f"to_mxfp8_{fmt}"),
                                               "epilogue.bias_gelu")):
        codes, scales = ops.matmul(a, b, epilogue=ep)
        # the same kernel's f32 result, unsplit (the block epilogue never splits K)
        f32 = torch.empty(M, N, device="cuda")
        b90, kmajor = matmul_sm90.operand_b(stdlib_module("matmul_sm90", "cuda"), a, b.T if b_kmajor else b, f32, b_kmajor)
        matmul_sm90.run(stdlib_module("matmul_sm90", "cuda"), a, b90, f32, b_kmajor=kmajor, split_k=1,
                        epilogue=None if per is None else (per, bias, f32.view(-1), 1.0))
        want_c, want_s = ops.mx_quantize(f32, f"f8{fmt}")
        torch.cuda.synchronize()
        assert codes.dtype == want_c.dtype and scales.dtype == want_s.dtype
        assert torch.equal(scales.view(torch.uint8), want_s.view(torch.uint8))
        assert torch.equal(codes.view(torch.uint8), want_c.view(torch.uint8))


@pytest.mark.gpu
def test_repeated_calls_take_the_kept_launch():
    """ops.matmul and scaled_matmul keep their launch (matmul_sm90.PLANS) for the same operands: later
    calls read the operands' new contents and the scales' new values, write the out they are given
    (or a new one), and a different operand (another address, a row-major B that is copied) gets its own."""
    import torch

    from kcompiler import ops
    from kcompiler.ops import matmul_sm90
    _sm90(torch)
    M, N, K = 16, 4096, 4096
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    w = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    matmul_sm90.PLANS.clear()
    c1 = ops.matmul(a, w.T)
    assert len(matmul_sm90.PLANS) == 1
    a.copy_(torch.randn(M, K, device="cuda"))
    c2 = ops.matmul(a, w.T)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    c3 = ops.matmul(a, w.T, out)
    torch.cuda.synchronize()
    assert c2.data_ptr() != c1.data_ptr() and c3 is out and len(matmul_sm90.PLANS) == 2
    _reference_check(c2, a, w.T)
    _reference_check(c3, a, w.T)
    b_odd = torch.randn(K, 4100, device="cuda").to(torch.bfloat16)  # rows of 8200 bytes: copied K-major
    _reference_check(ops.matmul(a, b_odd), a, b_odd)
    assert len(matmul_sm90.PLANS) == 2
    a8 = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    w8 = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
    sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
    ops.scaled_matmul(a8, w8.T, sa, sb)
    sa.fill_(0.25)
    c = ops.scaled_matmul(a8, w8.T, sa, sb)
    torch.cuda.synchronize()
    assert len(matmul_sm90.PLANS) == 3
    _reference_check(c, a8.float(), w8.float().T, fp8=True, scale=torch.tensor(0.5, dtype=torch.float64))


@pytest.mark.gpu
def test_tensor_map_errors():
    import torch

    from kcompiler.runtime.tensormap import tensor_map
    _sm90(torch)
    x = torch.zeros(64, 100, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="not a multiple of 16"):
        tensor_map(x[:, :99], (64, 64))  # a row stride of 200 bytes is fine, 99-wide rows fine; offset...
    with pytest.raises(ValueError, match="exceeds the 128-byte swizzle"):
        tensor_map(torch.zeros(64, 128, device="cuda", dtype=torch.bfloat16), (64, 128))
    with pytest.raises(TypeError, match="CUDA or numpy array"):
        tensor_map(torch.zeros(4, 4), (4, 4))
    m = tensor_map(torch.zeros(64, 128, device="cuda", dtype=torch.bfloat16), (64, 64))
    assert len(m.raw) == 128 and "box [64, 64]" in repr(m)


@pytest.mark.gpu
def test_cached_tensor_map():
    """cached_tensor_map returns the same encoded map for the same tensor and box, a new one for another
    box or view, and caches nothing when the encoding is refused."""
    import torch

    from kcompiler.runtime import tensormap
    _sm90(torch)
    x = torch.randn(64, 128, device="cuda").to(torch.bfloat16)
    m = tensormap.cached_tensor_map(x, (64, 64))
    assert tensormap.cached_tensor_map(x, (64, 64)) is m and m.owner is None
    assert tensormap.cached_tensor_map(x, (32, 64)) is not m
    assert tensormap.cached_tensor_map(x[:32], (32, 64)).raw != m.raw
    before = dict(tensormap._CACHE)
    with pytest.raises(ValueError, match="exceeds the 128-byte swizzle"):
        tensormap.cached_tensor_map(x, (64, 128))
    assert dict(tensormap._CACHE) == before
