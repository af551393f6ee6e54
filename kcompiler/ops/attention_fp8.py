"""kcompiler.ops.attention's FP8 path: E4M3 q, k and v on Hopper (stdlib/attention_sm90.kc with
T = f8e4m3, FlashAttention-3's FP8 forward), with FlashAttention-3's per-tensor or per-(batch, KV head)
descale factors."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from ..runtime import arrays
from ..runtime.tensormap import cached_tensor_map
from . import _common
from ._common import ArrayKind, check_same, contiguous, data_ptr, empty_like, flat, hopper_reason_not, target_for
from .attention_order import sm90_launch, sm90_tiles

#: Tiles of the FP8 Hopper prefill by causal (D 128 only): BN keys a step (32 to 256 by 32; V^T's
#: stages hold whole boxes of 128 keys), STAGES K/V buffers, OVERLAP, PINGPONG, TURNS, CONSUMERS as
#: ATTENTION_SM90_TILES. FlashAttention-3's FP8 D 128 block is 128 x 224 in its intra-warpgroup overlap
#: (Dao-AILab/flash-attention hopper/tile_size.h, tile_size_fwd_sm90, commit 07602ad): here BN 224 with
#: OVERLAP, PINGPONG, FA3_ORDER and TURNS 1 (no spills, the tile's 112 exp2 under P V in SASS) ran 804 /
#: 707 TFLOP/s full / causal against the defaults' 860 / 720 (H200, 2026-11-29; sequential BN 224 810 /
#: 696). The defaults: key tiles of 256, the sequential form with the two
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
#: PERSIST up to 8 key tiles of 256 (Sk <= 2048; kcompiler.ops.attention_order.sm90_launch), TFLOP/s with
#: V^T, default -> PERSIST (H200, 2026-11-29, bench_attention_fp8.py --variants default,default-persist):
#: full / causal B32 H16 S512 424 -> 478 / 225 -> 255, B16 H16 S1024 604 -> 641 / 369 -> 408, B8 H16
#: S2048 762 -> 781 / 542 -> 582; level or lower from 16 key tiles (B4 H32 S4096 854 -> 851 / 734 ->
#: 731, B2 H32 S8192 893 -> 872 / 817 -> 815).
ATTENTION_FP8_TILES = {False: dict(BN=256, STAGES=2, OVERLAP=False, PINGPONG=True, TURNS=1, PERSIST=True,
                                   PERSIST_TILES=8),
                       True: dict(BN=256, STAGES=3, OVERLAP=False, PINGPONG=True, TURNS=1, PERSIST=True,
                                  PERSIST_TILES=8)}


#: Short sequences: (causal, the most keys, the most keys with grouped-query attention, tiles over
#: ATTENTION_FP8_TILES[causal]), the first that matches a call with no tiles of its own (:func:`fp8_tiles`).
#: V^T made in the kernel (VT_SMEM 2, std.attention_sm90_vt) rather than by std.attention_vt_fp8's pass
#: through global memory, which costs O(Sk D) a KV head against the prefill's O(Sq Sk D) a query head: the
#: pass's share falls with the rows and with the query heads a KV head serves. H200,
#: benchmarks/bench_attention_ab.py --fp8 (benchmarks/RESULTS.md, 2026-11-29, twenty-fifth session), x the
#: pass: B32 H16 S512 causal 1.18 (1.29 in key tiles of 128), full 1.14; B16 H16 S1024 causal 1.13, full
#: 1.06; B8 H16 S2048 causal 1.04, full 0.97; B4 H32 S4096 0.91 full, 0.94 causal. H32 with 4 or 8 KV heads:
#: S512 causal 1.15-1.16, full 1.03; S1024 causal 1.03, full 0.94-0.96; S2048 causal 0.94-0.95.
ATTENTION_FP8_SHORT = [(True, 512, 512, dict(VT_SMEM=2, STAGES=2, BN=128)),
                       (True, 2048, 1024, dict(VT_SMEM=2, STAGES=2)),
                       (False, 1024, 512, dict(VT_SMEM=2, STAGES=2))]


def fp8_tiles(causal: bool, seqlen_k: int, tiles: dict[str, Any] | None = None,
              grouped: bool = False) -> dict[str, Any]:
    """The defaults of an FP8 call over ``seqlen_k`` keys: ATTENTION_FP8_TILES[causal], updated by the
    first entry of :data:`ATTENTION_FP8_SHORT` for ``causal`` with at least ``seqlen_k`` keys (its
    grouped-query count where ``grouped``: more query heads than KV heads), unless the caller gives
    ``tiles`` (then their base is ATTENTION_FP8_TILES[causal] alone, as their names say:
    kcompiler.ops.attention_order.sm90_tiles merges them)."""
    t = ATTENTION_FP8_TILES[bool(causal)]
    if not tiles:
        for c, keys, gqa_keys, extra in ATTENTION_FP8_SHORT:
            if c == bool(causal) and seqlen_k <= (gqa_keys if grouped else keys):
                return {**t, **extra}
    return t


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
                  out_dtype: str, fn: str = "attention", keep: Callable[[Fp8Plan], None] | None = None) -> Any:
    """:func:`kcompiler.ops.attention` for float8 e4m3 q, k and v (same shapes and layouts, no
    variable lengths): ``O = softmax(scale dq dk Q K^T) V dv`` with Q, K, V the e4m3 codes' values and
    dq, dk, dv the descale factors, O of ``out_dtype`` ('bf16' or 'f16'), LSE f32 as the 16-bit path's
    (natural log of the descaled scores' sum). S = Q K^T is FP8 wgmma (m64nNk32), P is rounded to e4m3
    in registers (.satfinite) for O += P V (FP8 wgmma with A from registers), f32 accumulation.

    V enters the product as B, which FP8 wgmma reads K-major only, so as V^T, its keys permuted within
    chunks of 32 to match P's register fragment (stdlib/attention_sm90.kc, p_frag): written by a first
    kernel (std.attention_vt_fp8: (B, Hkv, D, Sk rounded up to 32) in global memory) that the prefill
    reads by TMA, or, with VT_SMEM (:data:`ATTENTION_FP8_SHORT`'s defaults where the keys are few), made
    by the prefill's producer warps in its shared memory from V itself (std.attention_sm90_vt).

    Runs where std.attention_sm90 runs (an sm_90 GPU with torch CUDA tensors; the CPU target's wgmma
    emulation with numpy arrays). Raises ValueError where it cannot: a target without wgmma (FP8
    attention needs wgmma), D other than 128, variable lengths, mismatched shapes, tiles past the
    device's shared memory a block; TypeError unless q, k and v are all e4m3. ``keep``: given the call's
    :class:`Fp8Plan`, to prepare later calls (kcompiler.ops.attention.PLANS, which keeps it only under a
    key: none for descale arrays, :func:`plan_options`)."""
    from .attention import _attention_sm90_module, _prefill_shapes
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
    plan = Fp8Plan(q, p, layout, causal, scale, tiles, tgt, out_dtype, ds)
    plan.run(q, k, v, out, lse)
    if keep is not None:
        keep(plan)
    return (out, lse) if return_lse else out


def plan_options(descale_q: Any, descale_k: Any, descale_v: Any, out_dtype: str) -> tuple | None:
    """What the key of a prepared FP8 call (kcompiler.ops.attention.PLANS) holds beyond the 16-bit
    path's: the descale factors, the output type and :data:`ATTENTION_FP8_TILES` (so that a change of
    it takes effect); None where a descale factor is an array (its values live on the device: such
    calls take the unprepared path each time)."""
    values = (descale_q, descale_k, descale_v)
    if not all(x is None or isinstance(x, (int, float, np.floating, np.integer)) for x in values):
        return None
    return ("fp8", tuple(None if x is None else float(x) for x in values), out_dtype,
            tuple((c, tuple(t.items())) for c, t in ATTENTION_FP8_TILES.items()),  # (no sort: a call's cost)
            tuple((c, n, g, tuple(t.items())) for c, n, g, t in ATTENTION_FP8_SHORT))


class Fp8Plan:
    """The launches of an FP8 attention call for one shape, fixed at its first call (the 16-bit
    path's plan, kcompiler.ops.attention._Sm90Plan, is the model): std.attention_vt_fp8 into a fresh
    V^T, then std.attention_sm90 with T = f8e4m3; with VT_SMEM the prefill alone, on V. ``run``
    launches on checked arrays; calling the plan checks contiguity and (on a GPU) 16-byte alignment,
    allocates O and the LSE and runs (None: not for this plan). ``out`` and ``lse``: (shape, dtype) of
    the results. Host time of a call on the H200 (benchmarks/bench_attention_host.py, 2026-11-29, two
    launches): 80-110 us prepared, 270-360 unprepared, the 16-bit path's plan 31-40 (one launch)."""

    __slots__ = ("kind", "cuda", "launch", "scalars", "vt_launch", "vt_scalars", "vt", "layout", "boxes",
                 "maps", "ds", "out", "lse")

    def __init__(self, q: Any, p: Any, layout: str, causal: bool, scale: float, tiles: dict[str, Any] | None,
                 target: str, out_dtype: str, ds: Any):
        from .attention import _attention_sm90_module, attention_sm90_shared_bytes
        t = sm90_tiles(fp8_tiles(causal, p.Sk, tiles, p.H > p.HK), tiles)
        mod = _attention_sm90_module(target)
        dev = _common.device_of(mod, q)
        grid, threads, t = sm90_launch(t, p.Sq, p.H, p.B, dev.multiprocessor_count, seqlen_k=p.Sk, causal=bool(causal))
        s = p.strides
        self.kind = ArrayKind(q)
        self.cuda = self.kind.cuda
        shared = attention_sm90_shared_bytes(t, p.D, 1)
        if shared > dev.shared_memory_per_block:
            raise ValueError(f"attention: FP8 tiles {t} need {shared} bytes of shared memory a block, more than the "
                             f"device's {dev.shared_memory_per_block}: fewer STAGES or VT_SMEM stages, or a smaller BN")
        self.launch = mod.attention_prefill_sm90[grid, threads].bind(
            T="f8e4m3", OUT=out_dtype, D=p.D, CAUSAL=bool(causal), VARLEN=False, shared=shared, **t)
        self.scalars = (p.cq, p.ck, p.Sq, p.Sk, p.H // p.HK, p.H, p.B, s["o_sb"], s["o_ss"], s["o_sh"], p.l_sb, p.l_sh,
                        np.float32(scale))
        self.layout = layout
        self.boxes = ((1, 1, 64 * t.get("CONSUMERS", 2), 128), (1, 1, t["BN"], 128), (1, 1, p.D, 128))
        self.vt_launch = None
        if t.get("VT_SMEM"):  # V as it is, transposed in the kernel (std.attention_sm90_vt)
            self.boxes = self.boxes[:2] + self.boxes[1:2]
        else:  # V^T, keys permuted in chunks of 32 (attention_vt_fp8)
            skp = -(-p.Sk // 32) * 32
            self.vt = ((p.B, p.HK, p.D, skp), self.kind.dtype("f8e4m3"))
            self.vt_launch = _common.stdlib_module("attention_vt_fp8", target).attention_vt_fp8[
                (-(-p.Sk // 128), p.HK, p.B), 256].bind(D=p.D, shared=128 * (p.D + 4))
            self.vt_scalars = (p.Sk, skp, s["k_sb"], s["k_ss"], s["k_sh"])
        self.maps: OrderedDict[tuple, tuple] = OrderedDict()
        self.ds = flat(ds, 1)
        self.out = (tuple(q.shape), self.kind.dtype(out_dtype))
        self.lse = (p.lse_shape, self.kind.dtype("f32"))

    def run(self, q: Any, k: Any, v: Any, out: Any, lse: Any) -> None:
        """V^T of ``v``, then the prefill on ``q``, ``k`` and it (contiguous, of the plan's shapes),
        writing ``out`` and ``lse``."""
        from .attention import _bhsd_view
        stream = self.kind.stream()
        if self.vt_launch is None:  # VT_SMEM: the kernel reads V itself
            vt = v
        else:
            vt = self.kind.empty(*self.vt)
            self.vt_launch(_words(v), _words(vt), *self.vt_scalars, stream=stream)
        key = (data_ptr(q), data_ptr(k), data_ptr(vt)) if self.cuda else None
        maps = self.maps.get(key) if key is not None else None
        if maps is None:
            views = (_bhsd_view(q, self.layout, False), _bhsd_view(k, self.layout, False),
                     vt if self.vt_launch is not None else _bhsd_view(v, self.layout, False))
            maps = tuple(cached_tensor_map(x, box) for x, box in zip(views, self.boxes))
            if key is not None:
                self.maps[key] = maps
                if len(self.maps) > 8:
                    self.maps.popitem(last=False)
        if not self.cuda:  # (on CUDA O and the LSE come from torch.empty: contiguous, passed as they are)
            out, lse = flat(out, 1), flat(lse, 1)
        self.launch(*maps, out, lse, *self.scalars, self.ds, stream=stream)

    def __call__(self, q: Any, k: Any, v: Any, cq: Any = None, ck: Any = None) -> tuple | None:
        ok = self.kind.contiguous
        if cq is not None or ck is not None or not (ok(q) and ok(k) and ok(v)):
            return None
        if self.cuda and (q.data_ptr() | k.data_ptr() | v.data_ptr()) % 16:
            return None
        out, lse = self.kind.empty(*self.out), self.kind.empty(*self.lse)
        self.run(q, k, v, out, lse)
        return out, lse


def _words(x: Any) -> Any:
    """``x`` (contiguous, bytes a multiple of 4) as a flat int32 view."""
    f = flat(x, 16)
    if arrays.is_torch_tensor(f):
        import torch  # deferred: torch is optional
        return f.view(torch.uint8).view(torch.int32)
    return f.view(np.uint8).view(np.int32)


__all__ = ["ATTENTION_FP8_SHORT", "ATTENTION_FP8_TILES", "Fp8Plan", "attention_fp8", "descales",
           "fp8_tiles", "is_fp8", "plan_options"]
