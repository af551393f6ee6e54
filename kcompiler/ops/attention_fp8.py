"""kcompiler.ops.attention's FP8 path: E4M3 q, k and v on Hopper (stdlib/attention_sm90.kc with
T = f8e4m3, FlashAttention-3's FP8 forward), with FlashAttention-3's per-tensor or per-(batch, KV head)
descale factors."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import arrays
from ..runtime.tensormap import cached_tensor_map
from . import _common
from ._common import check_same, contiguous, empty_like, flat, hopper_reason_not, target_for
from .attention_order import sm90_launch, sm90_tiles

#: Tiles of the FP8 Hopper prefill by causal (D 128 only): BN keys a step (128 or 256: whole slabs of
#: V^T's 128-byte rows), STAGES K/V buffers, OVERLAP, PINGPONG, TURNS, CONSUMERS as ATTENTION_SM90_TILES.
#: The defaults: key tiles of 256 (FlashAttention-3's FP8 tile at D 128), the sequential form with the two
#: consumer warpgroups taking turns (PINGPONG) on named barriers (TURNS 1, FlashAttention-3's scheduler
#: barriers), 3 stages where causal. H200, B4 H32 S4096 D128, TFLOP/s with V^T, bench_attention_fp8.py
#: --variants (benchmarks/RESULTS.md, 2026-11-28, the BN 128 default timed first and last: 758 both):
#: BN 256 828 (3 stages 830, RESCALE_SKIP 822) against BN 128's 758 (RESCALE_SKIP 781); causal 698
#: against 673. Under ncu (H200) the BN 128 kernel kept the tensor pipe 44 % busy and the MUFU 45 %: each
#: tile's fixed work (the row maxima's shuffles, O's rescale, the turns) is paid half as often at 256.
#: Measured at S 4096 only: a short key length pays up to 255 masked keys a row (Sk 300: 512 computed,
#: 384 at BN 128); ``tiles=dict(BN=128)`` takes the other.
#: Registers (ptxas 13.0, sm_90a, a consumer 240): BN 128 and 256, 2 or 3 stages, spill nothing (BN 256
#: had spilled 4-9 KB before the compiler's register work), nor does CONSUMERS 3 at BN 128 (160 registers;
#: 837-858 TFLOP/s, level with the default).
#: EXP2_POLY (opt-in) moves that many of a thread's exponentials a tile off the MUFU
#: (stdlib/attention_sm90.kc's header): slower on the H100 (600-622 against 683), none spills.
ATTENTION_FP8_TILES = {False: dict(BN=256, STAGES=2, OVERLAP=False, PINGPONG=True, TURNS=1),
                       True: dict(BN=256, STAGES=3, OVERLAP=False, PINGPONG=True, TURNS=1)}


def is_fp8(x: Any) -> bool:
    """Whether ``x`` is an array of float8 e4m3 (ml_dtypes.float8_e4m3fn, torch.float8_e4m3fn)."""
    t = arrays.array_scalar_type(x)  # None for what is not an array
    return t is not None and t.name == "f8e4m3"


def descales(values: tuple, B: int, HK: int, like: Any, fn: str) -> Any:
    """The kernel's descale array, f32 (3, B, HK) of ``like``'s kind and device: descale_q, descale_k,
    descale_v, each None (1), a float, or an array of one element or of shape (B, HK) (FlashAttention-3's
    per-(batch entry, KV head) factors). ValueError for another shape."""
    if all(x is None or isinstance(x, (int, float, np.floating, np.integer)) for x in values):
        return _common.const_rows(tuple(1.0 if x is None else x for x in values), B * HK, like)  # kept
    rows = []
    for name, x in zip(("descale_q", "descale_k", "descale_v"), values):
        if x is None or isinstance(x, (int, float, np.floating, np.integer)):
            x = 1.0 if x is None else float(x)
            rows.append(np.full((B, HK), x, np.float32) if not arrays.is_torch_tensor(like) else x)
            continue
        shape = tuple(x.shape)
        if int(np.prod(shape)) != 1 and shape != (B, HK):
            raise ValueError(f"{fn}: {name} must be a float, one element or of shape (B, Hkv) = {(B, HK)}, "
                             f"not of shape {shape}")
        rows.append(x)
    if arrays.is_torch_tensor(like):
        import torch  # deferred: torch is optional
        return torch.stack([torch.as_tensor(r, dtype=torch.float32, device=like.device).reshape(-1)
                            .expand(B * HK) if not isinstance(r, float) else
                            torch.full((B * HK,), r, dtype=torch.float32, device=like.device)
                            for r in rows]).contiguous()
    return np.stack([np.broadcast_to(np.asarray(_common.host_ints(r) if arrays.is_torch_tensor(r) else r,
                                                np.float32).reshape(-1), (B * HK,)) for r in rows]).copy()


def attention_fp8(q: Any, k: Any, v: Any, *, causal: bool, scale: float | None, layout: str, return_lse: bool,
                  tiles: dict[str, Any] | None, target: str, descale_q: Any, descale_k: Any, descale_v: Any,
                  out_dtype: str, fn: str = "attention") -> Any:
    """:func:`kcompiler.ops.attention` for float8 e4m3 q, k and v (same shapes and layouts, no
    variable lengths): ``O = softmax(scale dq dk Q K^T) V dv`` with Q, K, V the e4m3 codes' values and
    dq, dk, dv the descale factors, O of ``out_dtype`` ('bf16' or 'f16'), LSE f32 as the 16-bit path's
    (natural log of the descaled scores' sum). S = Q K^T is FP8 wgmma (m64nNk32), P is rounded to e4m3
    in registers (.satfinite) for O += P V (FP8 wgmma with A from registers), f32 accumulation.

    V enters the product as B, which FP8 wgmma reads K-major only: a first kernel (std.attention_vt_fp8)
    writes V^T, (B, Hkv, D, Sk rounded up to 32), its keys permuted within chunks of 32 to match P's
    register fragment (stdlib/attention_sm90.kc, p_frag), then the prefill kernel reads it by TMA.

    Runs where std.attention_sm90 runs (an sm_90 GPU with torch CUDA tensors; the CPU target's wgmma
    emulation with numpy arrays). Raises ValueError where it cannot: a target without wgmma (FP8
    attention needs wgmma), D other than 128, variable lengths, mismatched shapes; TypeError unless q,
    k and v are all e4m3."""
    from .attention import _bhsd_view, _prefill_shapes, attention_sm90_shared_bytes, _attention_sm90_module
    for name, x in (("k", k), ("v", v)):
        check_same(name, x, arrays.array_scalar_type(q), fn)
    if out_dtype not in ("bf16", "f16"):
        raise ValueError(f"{fn}: FP8 attention writes bf16 or f16 (out_dtype), not {out_dtype!r}")
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"{fn}: layout must be 'bshd' or 'bhsd', not {layout!r}")
    q, k, v = contiguous(q), contiguous(k), contiguous(v)
    p = _prefill_shapes(q, k, v, None, None, None, layout, fn)
    if p.D != 128:
        raise ValueError(f"{fn}: FP8 attention takes a head dimension of 128 (one 128-byte row: FP8 wgmma's "
                         f"k32 steps in the 128-byte swizzle), not {p.D}")
    tgt = target_for(q, target)
    why = hopper_reason_not("attention_sm90", lambda: _attention_sm90_module(tgt), tgt, (q, k, v))
    if why is not None:
        raise ValueError(f"{fn}: FP8 attention needs wgmma (NVIDIA sm_90a; Hopper's FP8 tensor-core path): {why}")
    out = empty_like(q, tuple(q.shape), out_dtype)
    lse = empty_like(q, p.lse_shape, "f32")
    if p.B == 0 or p.Sq == 0 or p.H == 0 or p.Sk == 0:
        if arrays.is_torch_tensor(lse):
            out.zero_()
            lse.fill_(float("-inf"))
        else:
            out.fill(0)
            lse.fill(-np.inf)
        return (out, lse) if return_lse else out
    scale = p.D ** -0.5 if scale is None else scale
    ds = descales((descale_q, descale_k, descale_v), p.B, p.HK, q, fn)
    mod = _attention_sm90_module(tgt)
    stream = _common.stream_of(q)
    # V^T, keys permuted in chunks of 32 (attention_vt_fp8)
    skp = -(-p.Sk // 32) * 32
    vt = empty_like(q, (p.B, p.HK, p.D, skp), "f8e4m3")
    s = p.strides
    _common.stdlib_module("attention_vt_fp8", tgt).attention_vt_fp8[(-(-p.Sk // 128), p.HK, p.B), 256](
        _words(v), _words(vt), p.Sk, skp, s["k_sb"], s["k_ss"], s["k_sh"], D=p.D, shared=128 * (p.D + 4),
        stream=stream)
    t = sm90_tiles(ATTENTION_FP8_TILES[bool(causal)], tiles)
    grid, threads, t = sm90_launch(t, p.Sq, p.H, p.B, _common.device_of(mod, q).multiprocessor_count)
    c = t.get("CONSUMERS", 2)
    maps = [cached_tensor_map(_bhsd_view(q, layout, False), (1, 1, 64 * c, 128)),
            cached_tensor_map(_bhsd_view(k, layout, False), (1, 1, t["BN"], 128)),
            cached_tensor_map(vt, (1, 1, p.D, 128))]
    mod.attention_prefill_sm90[grid, threads](
        *maps, flat(out, 1), flat(lse, 1), p.cq, p.ck, p.Sq, p.Sk, p.H // p.HK, s["o_sb"], s["o_ss"], s["o_sh"],
        p.l_sb, p.l_sh, np.float32(scale), flat(ds, 1), T="f8e4m3", OUT=out_dtype, D=p.D, CAUSAL=bool(causal),
        VARLEN=False, shared=attention_sm90_shared_bytes(t, p.D, 1), stream=stream, **t)
    return (out, lse) if return_lse else out


def _words(x: Any) -> Any:
    """``x`` (contiguous, bytes a multiple of 4) as a flat int32 view."""
    f = flat(x, 16)
    if arrays.is_torch_tensor(f):
        import torch  # deferred: torch is optional
        return f.view(torch.uint8).view(torch.int32)
    return f.view(np.uint8).view(np.int32)


__all__ = ["ATTENTION_FP8_TILES", "attention_fp8", "descales", "is_fp8"]
