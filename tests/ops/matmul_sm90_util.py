"""Helpers of the std.matmul_sm90 tests (test_matmul_sm90*.py): the CPU target's emulated module, the
float64 checks (numpy on the emulation, torch on the GPU), FP8 operands and the sm_90 GPU check."""
from __future__ import annotations

import pytest

from kcompiler.frontend.program import stdlib_dir


_EMU: dict = {}


def _emulated(source_epilogue: str | None = None):
    """std.matmul_sm90 for the CPU target with the Hopper instructions emulated (compiled once)."""
    import kcompiler as kc

    from kcompiler.ops import matmul_sm90
    key = source_epilogue or ""
    if key not in _EMU:
        opts = {"emulate_wgmma": True}
        _EMU[key] = kc.compile_file(stdlib_dir() / "matmul_sm90.kc", target="cpu", target_options=opts) \
            if source_epilogue is None else \
            kc.compile(source_epilogue.rstrip("\n") + "\n" + matmul_sm90._EPILOGUE_KERNEL, target="cpu",
                       target_options=opts, path="<epilogue>")
    return _EMU[key]


def _check64(c, ref, K, absprod, fp8=False):
    import numpy as np
    u_out = {np.dtype(np.float32): 2.0 ** -24}.get(c.dtype, 2.0 ** -8)
    tol = (16 if fp8 else 4) * K * 2.0 ** -24 * absprod + u_out * np.abs(ref) + 1e-30
    err = np.abs(c.astype(np.float64) - ref)
    assert np.isfinite(c.astype(np.float64)).all(), "an element left unwritten (NaN poison) or not finite"
    assert (err <= tol).all(), f"max error {err.max():.3g}, at {np.unravel_index(np.argmax(err - tol), err.shape)}"


def _fp8_operands(rng, fmt: str, M: int, N: int, K: int, per_row: bool):
    """Random FP8 ``fmt`` (an ml_dtypes name) a (M, K) and b (N, K), and f32 scales in [0.5, 1.5):
    one each, or per row of A and per column of C with ``per_row``."""
    import ml_dtypes
    import numpy as np
    dt = getattr(ml_dtypes, fmt)
    a = (2 * rng.standard_normal((M, K))).astype(dt)
    b = (2 * rng.standard_normal((N, K))).astype(dt)
    sa = (rng.random(M if per_row else 1) + 0.5).astype(np.float32)
    sb = (rng.random(N if per_row else 1) + 0.5).astype(np.float32)
    return a, b, sa, sb


def _reference_check(c, a, b, fp8: bool = False, scale=None):
    import torch
    ref = a.double() @ b.double()
    if scale is not None:
        ref = ref * scale
    K = a.shape[1]
    absprod = a.double().abs() @ b.double().abs()
    if scale is not None:
        absprod = absprod * scale.abs()
    u_out = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24}[c.dtype]
    tol = (16 if fp8 else 4) * K * 2.0 ** -24 * absprod + u_out * ref.abs() + 1e-30
    err = (c.double() - ref).abs()
    assert torch.isfinite(c).all(), "non-finite results (an element left unwritten?)"
    bad = err > tol
    if bad.any():
        i = int(torch.argmax((err - tol).flatten()))
        r, col = divmod(i, c.shape[1])
        raise AssertionError(f"C[{r}, {col}] = {float(c[r, col])}, want {float(ref[r, col])} "
                             f"({int(bad.sum())} elements off)")


def _sm90(torch):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (H100/H200)")


def _fp8_gpu_case(config: str, per_row: bool, K: int, split_k: int) -> None:
    """std.matmul_sm90 on the GPU in configuration ``config`` (matmul_sm90.CONFIGS) on FP8 e4m3 a (333, K)
    and a weight (1000, K), scaled per tensor or per row / column (``per_row``), split ``split_k`` ways,
    the output poisoned first, against torch in float64 (:func:`_reference_check`)."""
    import torch

    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module
    _sm90(torch)
    M, N = 333, 1000
    a = (torch.randn(M, K, device="cuda") * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(N, K, device="cuda") * 2).to(torch.float8_e4m3fn)
    sa = torch.rand(M if per_row else 1, device="cuda") + 0.5
    sb = torch.rand(N if per_row else 1, device="cuda") + 0.5
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    matmul_sm90.run(stdlib_module("matmul_sm90", "cuda"), a, w, out, scale_a=sa, scale_b=sb,
                    scale=2 if per_row else 1, config=matmul_sm90.CONFIGS[config], split_k=split_k)
    torch.cuda.synchronize()
    scale = sa.double()[:, None] * sb.double()[None, :] if per_row else sa.double() * sb.double()
    _reference_check(out, a.float(), w.float().T, fp8=True, scale=scale)
