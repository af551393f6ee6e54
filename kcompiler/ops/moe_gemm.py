"""kcompiler.ops.moe_gemm: the two grouped GEMMs of a mixture-of-experts layer, by std.moe_gemm's kernels
(stdlib/moe_gemm.kc): the gate/up projection with SwiGLU fused in its epilogue (:func:`moe_gemm_swiglu`)
and the down projection weighted by the routing weights (:func:`moe_gemm_down`), reduced over a token's
experts by f32 atomic adds or written per assignment for a separate sum. One launch each over every
(expert, tile) pair of a :class:`~kcompiler.ops.moe_types.MoERouting`; expert weights in bf16, FP8 with
per-channel scales or MXFP4 (:class:`~kcompiler.ops.moe_types.ExpertWeights`).

The routing's ``block_m`` is the GEMMs' tile of token slots: :func:`moe_block_m` gives the one these
kernels want for a batch, :func:`moe_gemm_tiles` the rest of the tiling. Where the target has NVIDIA's
mma.sync (``target_has("mma")``: sm_80 and later, or the CPU target's ``emulate_mma``) and K is a
multiple of the values a 16-byte weight load holds (8 bf16, 16 FP8, 32 MXFP4) the tensor-core path runs,
else the SIMT one (the CPU target, AMD)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import arrays
from . import _common
from ._common import data_ptr, empty_like, stream_of, target_for
from .moe_types import ExpertWeights, MoERouting, MXActivations
from .mx import mx_dequantize

#: K a lane's 16-byte weight load holds, by format (the tensor-core path needs K a multiple of it).
MOE_VALUES_PER_LOAD = {"bf16": 8, "fp8": 16, "mxfp4": 32}

#: Tiling by block_m: MT m16 tiles of weight rows a block (16 MT output features), KW warps splitting
#: K, U chunks of weight loads in flight a warp. Small tiles (decode) get 4 warps a block so that a
#: batch of a few tokens still puts enough loads in flight (one tile an expert).
MOE_GEMM_TILES = {8: dict(MT=1, KW=4, U=2), 16: dict(MT=1, KW=4, U=2), 32: dict(MT=1, KW=2, U=2),
                  64: dict(MT=1, KW=2, U=1)}


#: Per weight format, what the tensor-core path's tiling changes from :data:`MOE_GEMM_TILES`, for the
#: gate/up GEMM ("gate_up") and the down projection ("down") by block_m; and the most assignments an
#: expert (the mean) for which :func:`moe_block_m` takes 8 slots ("bm8_mean"; 8 where not given). MXFP4
#: (H100, benchmarks/bench_moe_gemm.py --variants, 2026-11-27, benchmarks/RESULTS.md): the down
#: projection with two m16 tiles a block (MT 2: twice the weight bytes in flight a warp) 1.05-1.16x at
#: T 1-64; block_m 16 with NTD (a tile of at most 8 assignments skips its second n8 tile) from a mean of
#: 4 assignments an expert, so that gpt-oss's T 64 (a mean of 8, 4 in 10 experts over 8) reads each
#: expert's weights once: 1.11x gate/up. At block_m 16 (H200, 2026-11-28, the same benchmark, gpt-oss T
#: 64): the down projection with launch bounds of 4 blocks an SM (LB 4: 127 registers where it took 130,
#: 3 blocks an SM; no spills, ptxas 13.0) 1.13-1.14x; gate/up in blocks of 2 warps (KW 2) 1.04-1.05x.
MOE_GEMM_FORMAT_TILES = {"mxfp4": {"gate_up": {16: dict(NTD=1, KW=2)},
                                   "down": {8: dict(MT=2), 16: dict(MT=2, NTD=1, LB=4)},
                                   "bm8_mean": 4}}


#: MXFP8 activations (:class:`MXActivations`) into :func:`moe_gemm_swiglu`: False (default) dequantises
#: them to bf16 first (``ops.mx_dequantize``, exact, one small launch) for the bf16-activation kernel;
#: True decodes them in the GEMM's registers as they are loaded (X = f8e4m3: no launch, but each lane
#: decodes its x vectors for every chunk). H200, gpt-oss MXFP4 gate/up (bench_moe_gemm.py --variants,
#: 2026-11-28): dequantising first 1.26-1.93x faster at T 1, 16 and 64. Both give the same bits but for
#: an E4M3 NaN element code, which the in-register decode reads as +-480 times its block's scale.
MOE_MXFP8_X_IN_REGISTERS = False


def moe_block_m(tokens: int, top_k: int, num_experts: int, fmt: str | None = None) -> int:
    """The tile of token slots (the routing's ``block_m``) for ``tokens`` tokens choosing ``top_k`` of
    ``num_experts`` experts: the smallest of 8, 16, 32 at least the mean number of assignments an expert
    (tokens * top_k / num_experts), so that a decode batch pads each expert's run to few slots (the
    weights are read once a tile: padding costs MMA work, not weight bytes); 32 above that (at 64 the
    MXFP4 gate/up kernel spills registers on sm_90: 255 registers and 60 bytes of spill stores, ptxas
    13.0, where 32 uses 186 and none). For weights of format ``fmt`` ('bf16', 'fp8', 'mxfp4'; None:
    any), 8 only up to :data:`MOE_GEMM_FORMAT_TILES`' "bm8_mean" assignments an expert where it gives one."""
    mean = tokens * top_k / max(num_experts, 1)
    if mean <= MOE_GEMM_FORMAT_TILES.get(fmt, {}).get("bm8_mean", 8):
        return 8
    return 16 if mean <= 16 else 32


def moe_grid_tiles(tokens: int, top_k: int, num_experts: int, block_m: int) -> int:
    """The tiles std.moe_gemm's kernels launch (the grid's y) for a routing of ``tokens`` x ``top_k``
    assignments over ``num_experts`` experts in tiles of ``block_m`` slots: a bound on the tiles the
    routing's layout can use (each expert hit gets ceil(c / block_m) tiles for its c assignments, at
    most min(E, T top_k) experts are hit, so at most floor((T top_k + min(E, T top_k) (block_m - 1)) /
    block_m) tiles), never above the P / block_m tiles of :meth:`MoERouting.padded_slots`. A decode
    batch launches no block for the tiles that only pad (T = 1 at E = 32: 4 tiles, not 29; at E =
    128: 4, not 113)."""
    numel = tokens * top_k
    bound = (numel + min(num_experts, numel) * (block_m - 1)) // block_m
    return max(1, min(MoERouting.padded_slots(tokens, top_k, num_experts, block_m) // block_m, bound))


def moe_gemm_tiles(block_m: int, fmt: str | None = None, gemm: str = "gate_up") -> dict[str, int]:
    """The compile-time tiling (``BM``, ``MT``, ``KW``, ``U``, and NTD where set) of std.moe_gemm's
    kernels for a routing of ``block_m`` (a multiple of 8): :data:`MOE_GEMM_TILES`' entry, that of the
    next size up for other multiples of 8, with what :data:`MOE_GEMM_FORMAT_TILES` changes for weights of
    format ``fmt`` in GEMM ``gemm`` ('gate_up' or 'down'). Raises ValueError for a block_m that is not a
    positive multiple of 8."""
    if block_m <= 0 or block_m % 8:
        raise ValueError(f"moe_gemm: the routing's block_m must be a positive multiple of 8, not {block_m}")
    base = next((MOE_GEMM_TILES[bm] for bm in sorted(MOE_GEMM_TILES) if block_m <= bm), MOE_GEMM_TILES[64])
    return {"BM": block_m, **base, **MOE_GEMM_FORMAT_TILES.get(fmt, {}).get(gemm, {}).get(block_m, {})}


def _scalar(a: Any) -> str | None:
    t = arrays.array_scalar_type(a) if arrays.is_array(a) else None
    return t.name if t is not None else None


def _weights(w: ExpertWeights, like: Any, fn: str) -> tuple[Any, Any]:
    """(data, scales) arguments of the kernel for ``w``: scales as f32 (FP8), uint8 E8M0 bytes (MXFP4),
    or an unused one-element f32 array (bf16)."""
    if not isinstance(w, ExpertWeights):
        raise TypeError(f"{fn}: weights must be an ExpertWeights, not {type(w).__name__}")
    if arrays.is_torch_tensor(like) != arrays.is_torch_tensor(w.data):
        raise TypeError(f"{fn}: the weights must be arrays of the activations' kind ({arrays.describe(like)}), "
                        f"not {arrays.describe(w.data)}")
    data = _common.contiguous(w.data)
    if w.format == "bf16":
        return data, _common.const_f32(0.0, 1, like)
    scales = _common.contiguous(w.scales)
    if w.format == "mxfp4" and _scalar(scales) != "u8":
        scales = scales.view(np.uint8) if not arrays.is_torch_tensor(scales) else scales.view(_common.torch_dtype("u8"))
    return data, scales


def _routing(r: MoERouting, fn: str, num_experts: int, like: Any) -> tuple[int, int]:
    """(padded slots P, tiles) of routing ``r``, checked against the weights' experts."""
    if not isinstance(r, MoERouting):
        raise TypeError(f"{fn}: routing must be a MoERouting, not {type(r).__name__}")
    if r.num_experts != num_experts:
        raise ValueError(f"{fn}: the routing is for {r.num_experts} experts, the weights hold {num_experts}")
    for name in ("sorted_ids", "tile_expert", "num_tiles"):
        a = getattr(r, name)
        if _scalar(a) != "i32" or len(a.shape) != 1:
            raise TypeError(f"{fn}: routing.{name} must be a 1-D int32 array, not {arrays.describe(a)}")
        if arrays.is_torch_tensor(like) != arrays.is_torch_tensor(a):
            raise TypeError(f"{fn}: routing.{name} must be an array of the activations' kind")
    if _scalar(r.topk_weights) != "f32":
        raise TypeError(f"{fn}: routing.topk_weights must hold f32, not {arrays.describe(r.topk_weights)}")
    p = int(r.sorted_ids.shape[0])
    if p % r.block_m or int(r.tile_expert.shape[0]) != p // r.block_m:
        raise ValueError(f"{fn}: routing.sorted_ids ({p} slots) must be whole tiles of block_m = {r.block_m}, one "
                         f"routing.tile_expert entry each (found {int(r.tile_expert.shape[0])})")
    return p, p // r.block_m


def _launch_common(x: Any, w: ExpertWeights, routing: MoERouting, K: int, target: str, fn: str,
                   tuning: Any = None, gemm: str = "gate_up") -> tuple:
    """(module, data, scales, compile-time tiles, mma, tiles in the grid: 0 where nothing to do) for a
    launch on activations ``x`` of GEMM ``gemm`` ('gate_up' or 'down': :data:`MOE_GEMM_FORMAT_TILES`)."""
    data, scales = _weights(w, x, fn)
    tiles = _tuned(moe_gemm_tiles(routing.block_m, w.format, gemm), tuning, fn)
    _, ntiles = _routing(routing, fn, w.shape[0], x)
    grid, cap = tiles.pop("GRID", 1), tiles.pop("GY", 0)
    if ntiles and grid:
        ntiles = min(ntiles, moe_grid_tiles(routing.tokens, routing.top_k, routing.num_experts, routing.block_m))
    if ntiles and cap:
        ntiles, tiles["TL"] = min(ntiles, cap), 1   # fewer blocks than tiles: each loops over its tiles
    mod = _common.stdlib_module("moe_gemm", target_for(x, target))
    vpl = MOE_VALUES_PER_LOAD[w.format]
    mma = bool(mod.target_has("mma") and K % vpl == 0 and data_ptr(data) % 16 == 0 and data_ptr(x) % 16 == 0)
    return mod, data, scales, tiles, mma, ntiles


def _bf16_2d(a: Any, fn: str, name: str) -> None:
    if _scalar(a) != "bf16" or len(a.shape) != 2:
        raise TypeError(f"{fn}: {name} must be a 2-D bf16 array, not {arrays.describe(a)}")


#: MXFP4 decodes of the tensor-core path (std.moe_gemm's compile-time DEC): "mul" (a
#: pair of nibbles isolated by an AND, moved into place by one integer multiply, a second AND; the
#: second scale factor of scales above 128 multiplied under a predicate), "split" (the same decode,
#: each step compiled twice: a pass with one scale multiply a word and a one-instruction factor, taken
#: where no scale of the warp's step is above 128 or NaN, and a pass with both factors) and "shift"
#: (two shifts and ANDs a word, the earlier decode, kept for comparison in benchmarks).
MOE_MXFP4_DECODES = {"mul": 1, "shift": 0, "split": 2}

#: The decode :func:`moe_gemm_swiglu`, :func:`moe_gemm_down` and ops.moe use unless told: "split",
#: measured on an H100 (2026-11-27, benchmarks/bench_moe_gemm.py --variants, gpt-oss shape, one run):
#: gate/up 1.17x "mul" at T = 1 and 1.31x at T = 64 (1.72 and 1.95 TB/s of weights: 57% and 64% of
#: the 3.03 TB/s copy), down 1.11x and 1.03x; with scales above 128 (its two-factor pass) within noise
#: of "mul" (benchmarks/RESULTS.md).
MOE_MXFP4_DECODE = "split"

#: Compile-time parameters :func:`moe_gemm_swiglu` / :func:`moe_gemm_down` take in ``tuning`` (benchmark
#: variants of the tensor-core path), with the values each may have: the tiling (``MT``, ``KW``, ``U``:
#: :data:`MOE_GEMM_TILES`), ``CHK`` (1, the default: every weight load checked against K and the rows;
#: 0: rows past the matrix read its last row instead, whose sums are dropped, and steps whose chunks
#: all lie inside K load without checks) and ``PF`` (0, the default; 1: the next step's weight, scale
#: and x loads are issued before this step's decode and MMAs, twice the registers for them).
#: Further keys: ``XR`` (1: each lane reads its slots' x rows from the routing's sorted_ids, so that the
#: first weight loads wait for no barrier), ``NTD`` (1: a tile whose slots past the first 8 are all
#: empty skips the other n8 tiles' MMAs and x loads; a block_m 16 routing then reads each expert's weights
#: once at gpt-oss's T = 64 where block_m 8 splits 4 in 10 experts over two tiles, each reading them),
#: ``LB`` (launch bounds: registers capped so that LB blocks fit a multiprocessor; 0 none), ``TL``
#: (1: each block loops over tiles block_id.y, + grid_dim.y, ...), and two of the host: ``GRID`` (1,
#: the default: the grid's y is :func:`moe_grid_tiles`; 0: every tile of the routing's P / block_m)
#: and ``GY`` (a cap on the grid's y, which implies TL = 1; 0 none).
MOE_TUNING_KEYS = {"MT": (1, 2), "KW": (1, 2, 4, 8), "U": (1, 2, 3, 4), "CHK": (0, 1), "PF": (0, 1), "XR": (0, 1),
                   "NTD": (0, 1), "LB": (0, 3, 4, 5, 6, 8), "TL": (0, 1), "GRID": (0, 1), "GY": (0, 1, 2, 3, 4, 6, 8)}


def _tuned(tiles: dict[str, int], tuning: Any, fn: str) -> dict[str, int]:
    """``tiles`` with ``tuning``'s overrides (:data:`MOE_TUNING_KEYS`); ValueError for another key or value."""
    out = dict(tiles)
    for k, v in dict(tuning or {}).items():
        if k not in MOE_TUNING_KEYS or v not in MOE_TUNING_KEYS[k] or isinstance(v, bool):
            raise ValueError(f"{fn}: tuning {k}={v!r} is not one of "
                             f"{', '.join(f'{n} in {vs}' for n, vs in MOE_TUNING_KEYS.items())}")
        out[k] = int(v)
    return out


def _decode(decode: str | None, fn: str) -> int:
    decode = MOE_MXFP4_DECODE if decode is None else decode
    if decode not in MOE_MXFP4_DECODES:
        raise ValueError(f"{fn}: decode must be one of {sorted(MOE_MXFP4_DECODES)}, not {decode!r}")
    return MOE_MXFP4_DECODES[decode]


def _activations(x: Any, fn: str) -> tuple[Any, Any]:
    """(codes or bf16 values, the kernel's scale argument) of activations ``x``: a bf16 (T, H) array
    (its scales argument a one-element u8 array, unread) or an :class:`MXActivations` (its E8M0
    scales as u8 bytes)."""
    if isinstance(x, MXActivations):
        return _common.contiguous(x.codes), _common.contiguous(x.scales_as("u8"))
    _bf16_2d(x, fn, "x")
    x = _common.contiguous(x)
    one = empty_like(x, (1,), "u8")
    return x, one


def moe_gemm_swiglu(x: Any, w_gate_up: ExpertWeights, routing: MoERouting, *, out: Any = None,
                    target: str = "auto", decode: str | None = None, tuning: Any = None) -> Any:
    """The gate/up projection of a MoE layer with SwiGLU fused: for every assignment a = t * top_k + j
    (token t's j-th expert e), ``H[a] = silu(x[t] @ Wg[e]^T) * (x[t] @ Wu[e]^T)``.

    ``x``: bf16 (T, H), or :class:`~kcompiler.ops.moe_types.MXActivations` (MXFP8: E4M3 codes and
    E8M0 scales per 32 along H), dequantised to bf16 first or decoded in the kernel's registers as it
    loads them (:data:`MOE_MXFP8_X_IN_REGISTERS`), exactly either way (an E4M3 value times a power of
    two fits bf16 unless past its range; Hopper's mma.sync has no FP8 x bf16 product). ``w_gate_up``: :class:`ExpertWeights` of shape (E, 2 I, H), gate rows [0, I),
    up rows [I, 2 I); bf16, FP8 (the channel scales multiply the f32 sums) or MXFP4 (dequantised to
    bf16 exactly in registers). ``routing``: a :class:`MoERouting` of T tokens over E experts whose
    ``block_m`` is a multiple of 8 (:func:`moe_block_m`). Products of bf16 values, summed in f32, the
    SiLU by std.math's silu, H rounded once to bf16. Returns H, bf16 (T * top_k, I) of x's kind (or
    ``out``, filled; rows of assignments not in the routing are left alone). ``decode``: the MXFP4
    decode of the tensor-core path (:data:`MOE_MXFP4_DECODES`; None: :data:`MOE_MXFP4_DECODE`; the
    same values either way).
    ``tuning``: a mapping of compile-time overrides (:data:`MOE_TUNING_KEYS`; the same values either
    way), for benchmarks.

    Raises TypeError for other dtypes or kinds, ValueError for shapes that do not match, an unknown
    ``decode`` or ``tuning``."""
    fn = "moe_gemm_swiglu"
    dec = _decode(decode, fn)
    if isinstance(x, MXActivations) and not MOE_MXFP8_X_IN_REGISTERS:
        x = mx_dequantize(x.codes, x.scales_as("e8m0"), "bf16", target=target)
    x, xsc = _activations(x, fn)
    E, N, K = w_gate_up.shape
    if N % 2 or N == 0:
        raise ValueError(f"{fn}: w_gate_up must have 2 I rows (gate then up), not {N}")
    inter = N // 2
    T = int(x.shape[0])
    if int(x.shape[1]) != K:
        raise ValueError(f"{fn}: x has {int(x.shape[1])} features, the weights take K = {K}")
    if routing.tokens != T:
        raise ValueError(f"{fn}: the routing is for {routing.tokens} tokens, x has {T}")
    numel = T * routing.top_k
    if out is None:
        out = empty_like(x, (numel, inter), "bf16")
    else:
        _bf16_2d(out, fn, "out")
        if tuple(out.shape) != (numel, inter) or not arrays.is_contiguous(out):
            raise ValueError(f"{fn}: out must be a contiguous bf16 array of shape {(numel, inter)}, "
                             f"not {tuple(out.shape)}")
    mod, data, scales, tiles, mma, ntiles = _launch_common(x, w_gate_up, routing, K, target, fn, tuning)
    if numel == 0 or ntiles == 0:
        return out
    grid = (-(-inter // (16 * tiles["MT"])), ntiles)
    mod.moe_gemm1[grid, 32 * tiles["KW"]](x, xsc, data, scales, routing.sorted_ids, routing.tile_expert,
                                         routing.num_tiles, out, numel, routing.top_k, inter, K, MMA=mma, DEC=dec, stream=stream_of(x),
                                         **tiles)
    return out


def moe_gemm_down(h: Any, w_down: ExpertWeights, routing: MoERouting, *, reduce: str = "atomic", out: Any = None,
                  out_dtype: str = "f32", target: str = "auto", decode: str | None = None, tuning: Any = None) -> Any:
    """The down projection of a MoE layer, weighted by the routing: for every assignment a = t * top_k
    + j (token t's j-th expert e, weight p = routing.topk_weights[t, j]), ``Y[a] = p * (h[a] @
    Wd[e]^T)``.

    ``h``: bf16 (T * top_k, I) (:func:`moe_gemm_swiglu`'s H). ``w_down``: :class:`ExpertWeights` of
    shape (E, Hd, I), any format. Products of bf16 values summed in f32, times the FP8 channel scale
    and p in f32.

    ``reduce="atomic"``: the sum over a token's experts in the same kernel, by f32 atomic adds into
    ``out`` f32 (T, Hd): a new array is zero-filled here first; a given ``out`` is added into as it is
    (the caller zero-fills it, or passes what the sum should be added to: a residual, a shared
    expert's output). The order of the adds varies from run to run (f32 rounding differs in the last
    bits). ``reduce="separate"``: ``out`` (T * top_k, Hd) of ``out_dtype`` ('f32' or 'bf16', rounded
    once) gets Y, for a separate sum over each token's top_k rows. Returns ``out``. ``decode``,
    ``tuning``: as for :func:`moe_gemm_swiglu`.

    Raises TypeError for other dtypes or kinds, ValueError for shapes that do not match, another
    ``reduce``, an unknown ``decode`` or ``tuning``."""
    fn = "moe_gemm_down"
    dec = _decode(decode, fn)
    if reduce not in ("atomic", "separate"):
        raise ValueError(f"{fn}: reduce must be 'atomic' or 'separate', not {reduce!r}")
    if out_dtype not in ("f32", "bf16"):
        raise ValueError(f"{fn}: out_dtype must be 'f32' or 'bf16', not {out_dtype!r}")
    _bf16_2d(h, fn, "h")
    E, hidden, K = w_down.shape
    T, top_k = routing.tokens, routing.top_k
    numel = T * top_k
    if tuple(h.shape) != (numel, K):
        raise ValueError(f"{fn}: h must have shape (T * top_k, I) = {(numel, K)}, not {tuple(h.shape)}")
    atomic = reduce == "atomic"
    if atomic:
        oshape, odt = (T, hidden), "f32"
    else:
        oshape, odt = (numel, hidden), out_dtype
    if out is None:
        out = empty_like(h, oshape, odt)
        if atomic:
            if arrays.is_torch_tensor(out):
                out.zero_()
            else:
                out.fill(0)
    else:
        if (_scalar(out) != odt if atomic else _scalar(out) not in ("f32", "bf16")) or tuple(out.shape) != oshape \
                or not arrays.is_contiguous(out):
            raise ValueError(f"{fn}: out must be a contiguous {'f32' if atomic else 'f32 or bf16'} array of shape "
                             f"{oshape}, not {arrays.describe(out)}")
    h = _common.contiguous(h)
    mod, data, scales, tiles, mma, ntiles = _launch_common(h, w_down, routing, K, target, fn, tuning, "down")
    if numel == 0 or ntiles == 0:
        return out
    grid = (-(-hidden // (16 * tiles["MT"])), ntiles)
    mod.moe_gemm2[grid, 32 * tiles["KW"]](h, data, scales, routing.sorted_ids, routing.tile_expert, routing.num_tiles,
                                         routing.topk_weights, out, numel, top_k, hidden, K, MMA=mma, ATOMIC=atomic,
                                         OUT=_scalar(out), DEC=dec, stream=stream_of(h), **tiles)
    return out


__all__ = ["MOE_GEMM_FORMAT_TILES", "MOE_GEMM_TILES", "MOE_MXFP4_DECODE", "MOE_MXFP8_X_IN_REGISTERS", "MOE_MXFP4_DECODES", "MOE_TUNING_KEYS", "MOE_VALUES_PER_LOAD", "moe_block_m",
           "moe_gemm_down", "moe_gemm_swiglu", "moe_gemm_tiles", "moe_grid_tiles"]
