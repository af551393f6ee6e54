"""kcompiler.ops.moe's Hopper path (``gemm="sm90"``): the two expert GEMMs as grouped GEMMs of
std.matmul_sm90 (TMA + wgmma, warp-specialised, persistent; kernel ``matmul_sm90_grouped``, the
kernel's GROUPED option), between a gather and a weighted sum of std.moe_sm90.

For T tokens of hidden size H, E experts of intermediate size I, top_k choices a token (n = T * top_k
assignments a = t * top_k + j), with the routing aligned by :func:`kcompiler.ops.moe.moe_align` for
``block_m`` = :data:`BLOCK_M` (the wgmma tile's rows; P slots, each expert's run padded to whole
tiles)::

    x (T, H) --moe_sm90_gather--> xp (P, H) bf16: xp[p] = x[sorted_ids[p] // top_k] (0: padding),
                                  inv (n,): the slot of each assignment
    xp, w_gate_up (E, 2 I, H) --matmul_sm90_grouped, FUSE 1 (SwiGLU)--> h (P, I) bf16
    h, w_down (E, H, I) --matmul_sm90_grouped--> y (P, H) bf16
    y --moe_sm90_sum--> out[t] = sum_j w_tj y[inv[t * top_k + j]] (f32, in order j), x's dtype

Each grouped GEMM is one launch: a persistent grid sized on the host for the most tiles the routing
can have (P / BLOCK_M rows of tiles), whose blocks walk the (tile row, tile column) units of the
``num_tiles`` rows in use, read on the device (no host synchronisation); a tile row's expert,
``tile_expert[row]``, is B's outermost tensor-map coordinate. Rows of the slots past the tiles in
use are neither written nor read.

Weights bf16, or FP8 (ExpertWeights "fp8": E4M3 codes, an f32 scale per output channel of each
expert), where both operands of both GEMMs are E4M3 (wgmma multiplies no bf16 by FP8)::

    x --moe_sm90_quant (gather)--> xq (P, H) e4m3, sx (P,) f32: per row, sx = max(abs(x[t])) / 448
    xq, w_gate_up codes --matmul_sm90_grouped, SCALE 2, FUSE 1--> h = silu(g) * u, bf16, with
        g[p, i] = sx[p] * sw[e, i] * (xq[p] . Wq[e, i]),  u[p, i] = sx[p] * sw[e, I + i] * (xq[p] . Wq[e, I + i])
        (f32 products of f32 sums, dequantised before SwiGLU)
    h --moe_sm90_quant--> hq (P, I) e4m3, sh (P,) f32, the same rule per row of h
    hq, w_down codes --matmul_sm90_grouped, SCALE 2--> y[p, n] = sh[p] * swd[e, n] * (hq[p] . Wdq[e, n]), bf16

The accuracy contract of the FP8 path: the weights are used exactly as their codes and scales say;
the activations are quantised per token (each row of x, then each row of h) with a scale ``s = max(abs(row))
/ 448`` to E4M3 by round to nearest even, so each element v of a row is used as ``q * s`` with ``abs(q * s
- v) <= 2^-4 abs(v)`` (half an ulp of E4M3's 3 fraction bits) where ``abs(v) >= 2^-6 s``, else ``<= 2^-10
s`` (E4M3's subnormals: half of 2^-9); the rest is f32 accumulation and the bf16 roundings of h and y (as the bf16
path). x is quantised from its own values (not rounded to bf16 first); h from its bf16 value.
tests/ops/test_moe_sm90.py checks the quantisation bit for bit against numpy and the layer against a
float64 reference that quantises the same way, within the error these bounds allow.

MXFP4 weights (ExpertWeights "mxfp4", OCP MX v1.0: packed E2M1 codes, an E8M0 scale per 32 along K):
x gathered to bf16 as for bf16 weights, then both GEMMs by std.moe_sm90_mx's matmul_sm90_grouped_mxfp4
(:func:`grouped_gemm_mxfp4`), which copies the packed codes by TMA and decodes them exactly to bf16 in
shared memory (the stdlib module's header): the result is the bf16 path's on the decoded weights.

H and I multiples of 8 (TMA's 16-byte rows of bf16), of 16 for FP8 (of E4M3). ``ops.moe``'s "auto"
takes this path for bf16 on an sm_90 GPU from ops.MOE_SM90_MIN_ROWS_PER_EXPERT assignments an expert
and for MXFP4 from ops.MOE_SM90_MXFP4_MIN_ROWS_PER_EXPERT (measured: benchmarks/RESULTS.md), not
for FP8 (not yet measured; it quantises the activations).
Torch CUDA tensors on an sm_90 GPU, or numpy arrays on the CPU target's emulation of wgmma and TMA
(``target_options={"emulate_wgmma": True}``: slow, for tests)."""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from .. import compile_file
from ..frontend.program import stdlib_dir
from ..runtime import arrays
from ..runtime.tensormap import cached_tensor_map
from . import _common, matmul_sm90
from .moe_types import ExpertWeights, MoERouting
from .norms import _vec

#: The tile configuration of both grouped GEMMs (std.matmul_sm90's CONFIGS: 2 consumer warpgroups,
#: 128 x 256 tiles, 4 stages); GEMM1 (gated) writes tiles of 128 columns of h. (MXFP4's kernel takes
#: its BN from :func:`choose_bn`.)
CONFIG = "128x256"
#: The rows of a tile, and so the routing's block_m on this path.
BLOCK_M = matmul_sm90.tile_m(matmul_sm90.CONFIGS[CONFIG])
#: Threads a block of the gather and of the sum.
THREADS = 128


#: The widths of B's tile (BN) std.moe_sm90_mx's grouped GEMM (MXFP4) chooses from (:func:`choose_bn`),
#: the default first. The bf16 and FP8 grouped GEMMs keep :data:`CONFIG`'s 256: 192 measured level to 12 %
#: slower there (H100, 2026-11-27, bench_moe.py --sm90 --gemm-variants default,bn192; benchmarks/RESULTS.md).
MX_BN_CHOICES = (256, 192)


def expected_tiles(tokens: int, top_k: int, num_experts: int) -> float:
    """The rows of tiles (of :data:`BLOCK_M` slots) a routing of ``tokens`` x ``top_k`` assignments over
    ``num_experts`` experts is expected to use: each expert hit pads its run by (BLOCK_M - 1) / 2 slots
    on average, and min(E, T top_k) experts are hit at most (gpt-oss's T 1024: (4096 + 32 x 63.5) / 128
    = 47.9)."""
    n = tokens * top_k
    return (n + min(num_experts, n) * (BLOCK_M - 1) / 2) / BLOCK_M


def choose_bn(N: int, gated: bool, tiles_m: float, sms: int) -> int:
    """BN for std.moe_sm90_mx's grouped GEMM writing N columns of C (``gated``: from 2 N rows of B, BN /
    2 columns a tile) over ``tiles_m`` rows of tiles (:func:`expected_tiles`) on a persistent grid of
    ``sms`` blocks: the width of :data:`MX_BN_CHOICES` of the least cost, a later one only where it costs
    matmul_sm90.WAVE_MARGIN less. The cost is the grid's rounds, ceil(tiles_m ceil(N / cols) / sms),
    times the dequantising warps' rounds a k-step, ceil(2 BN / 96) (96 threads, a task a row of B and
    scale block of 32 k; their decode bounds the kernel): 6 at 256 (the last only a third busy), 4 at 192.
    Measured (H100, bench_moe.py --sm90 --gemm-variants default,bn192): 192 gives 1.07-1.17x at gpt-oss
    (N = 2880) T 256-4096 and Mixtral (4096, 14336) T 1024-4096; at Mixtral T 256 the down GEMM's 8 x 16
    tiles of 256 fill one round of 132 and 22 columns of 192 need two (0.75x): the rule keeps 256."""
    def cost(bn: int) -> int:
        cols = bn // 2 if gated else bn
        return math.ceil(tiles_m * -(-N // cols) / sms) * -(-2 * bn // 96)

    best = MX_BN_CHOICES[0]
    for bn in MX_BN_CHOICES[1:]:
        if cost(bn) < (1 - matmul_sm90.WAVE_MARGIN) * cost(best):
            best = bn
    return best


#: The weight formats this path takes (both GEMMs' weights in one of them).
FORMATS = ("bf16", "fp8", "mxfp4")
#: Pipeline stages of the MXFP4 grouped GEMM (std.moe_sm90_mx; 4 fill 225 KB of shared memory).
MX_STAGES = 4


def reason_not(x: Any, wg: ExpertWeights, wd: ExpertWeights) -> tuple[type, str] | None:
    """Why this path cannot run ops.moe on ``x`` with these weights, as (the exception to raise,
    the message), or None: it takes bf16, FP8 or MXFP4 weights, both of one format (TypeError), H and
    I multiples of 8, of 16 for FP8 (ValueError: TMA's 16-byte rows; MXFP4's are multiples of 32 by
    construction), torch CUDA tensors
    (on an sm_90 GPU, else RuntimeError) or numpy arrays (the CPU target's emulation; TypeError for
    other arrays)."""
    if wg.format not in FORMATS or wd.format != wg.format:
        return TypeError, (f"gemm='sm90' takes bf16, fp8 or mxfp4 weights, both of one format (not {wg.format} "
                           f"and {wd.format})")
    e, n2, h = wg.shape
    m = 16 if wg.format == "fp8" else 8
    if h % m or (n2 // 2) % m:
        return ValueError, (f"gemm='sm90' needs H ({h}) and I ({n2 // 2}) multiples of {m} with {wg.format} "
                            "weights (TMA's 16-byte rows)")
    if arrays.is_torch_tensor(x) and x.is_cuda:
        if not _common.stdlib_module("matmul_sm90", "cuda").target_has("wgmma"):
            return RuntimeError, "gemm='sm90' needs an sm_90 GPU (wgmma, TMA)"
    elif not isinstance(x, np.ndarray):
        return TypeError, "gemm='sm90' takes torch CUDA tensors or numpy arrays"
    return None


def _empty(like: Any, shape: tuple, name: str) -> Any:
    """A new array of ``like``'s kind whose data is 16-byte aligned (TMA's rule; numpy's allocator
    promises less)."""
    if arrays.is_torch_tensor(like):
        return _common.empty_like(like, shape, name)
    dt = np.dtype(arrays.numpy_dtype(_common.SCALARS[name]))
    count = int(np.prod(shape))
    buf = np.empty(count * dt.itemsize + 16, np.uint8)
    off = -buf.ctypes.data % 16
    return buf[off:off + count * dt.itemsize].view(dt).reshape(shape)


def _aligned(a: Any) -> Any:
    """``a`` contiguous with 16-byte aligned data (a copy where it is not)."""
    a = _common.contiguous(a)
    if arrays.is_torch_tensor(a):
        return a if a.data_ptr() % 16 == 0 else a.clone()
    if a.ctypes.data % 16 == 0:
        return a
    b = _empty(a, tuple(a.shape), arrays.array_scalar_type(a).name)
    b[...] = a
    return b


def grouped_gemm(mod: Any, a: Any, w: Any, routing: MoERouting, c: Any, *, gated: bool, sms: int,
                 config: dict | None = None, stream: Any = None, scale_a: Any = None, scale_w: Any = None) -> Any:
    """``c[p] = A[p] @ W[e]^T`` (or, ``gated``, silu(A[p] @ Wg[e]^T) * (A[p] @ Wu[e]^T)) for every
    slot p of the routing's tiles in use, e = ``routing.tile_expert[p // BM]``, by std.matmul_sm90's
    matmul_sm90_grouped (``mod``: that module, CUDA or the CPU emulation).

    ``a``: (P, K) with P = len(routing.sorted_ids) and ``w``: (E, N, K), or gated (E, 2 N, K) (gate
    rows first), both bf16 or both f8e4m3; ``c``: bf16 (P, N); all contiguous, 16-byte aligned, K
    and N multiples of 16 bytes' elements. FP8 takes ``scale_a`` (f32, one per slot: A's rows are
    ``A[p] * scale_a[p]``) and ``scale_w`` (f32 (E, N) or gated (E, 2 N): W[e, n] is ``w[e, n] *
    scale_w[e, n]``), applied to the f32 products before SwiGLU; bf16 takes neither. ``config``: one
    of matmul_sm90.CONFIGS (default :data:`CONFIG`) whose tile rows are the routing's block_m.
    ``sms``: the persistent grid's most blocks. Returns c."""
    cfg = dict(config or matmul_sm90.CONFIGS[CONFIG])
    bm, bn = matmul_sm90.tile_m(cfg), cfg["BN"]
    if routing.block_m != bm or cfg.get("PINGPONG") or cfg.get("CLUSTER_M", 1) != 1:
        raise ValueError(f"grouped_gemm: a cooperative configuration without clusters of {routing.block_m} rows")
    t = arrays.array_scalar_type(a).name
    if t not in ("bf16", "f8e4m3") or arrays.array_scalar_type(w).name != t:
        raise TypeError(f"grouped_gemm: a and w both bf16 or both f8e4m3, not {arrays.describe(a)} and "
                        f"{arrays.describe(w)}")
    if (scale_a is None) != (t == "bf16") or (scale_w is None) != (t == "bf16"):
        raise ValueError("grouped_gemm: f8e4m3 operands take scale_a and scale_w, bf16 ones neither")
    bk = matmul_sm90.BK[t]
    P, K = (int(d) for d in a.shape)
    E, N = int(w.shape[0]), int(w.shape[1]) // (2 if gated else 1)
    ta = cached_tensor_map(a, (bm, bk))
    if gated:
        tb = cached_tensor_map(w.reshape(E, 2, N, K), (1, 1, bn // 2, bk))
    else:
        tb = cached_tensor_map(w, (1, bn, bk))
    cols = bn // 2 if gated else bn
    grid = max(1, min(sms, P // bm * -(-N // cols)))
    dummy = matmul_sm90._dummy_f32(a.device if arrays.is_torch_tensor(a) else None)
    sa = dummy if scale_a is None else scale_a.reshape(-1)
    sb = dummy if scale_w is None else scale_w.reshape(-1)
    params = dict(T=t, OUT="bf16", BK=bk, BN=bn, CONSUMERS=cfg["CONSUMERS"], STAGES=cfg["STAGES"],
                  GROUP_M=cfg["GROUP_M"], ALIGNED=True, FUSE=1 if gated else 0, SCALE=0 if scale_a is None else 2)
    mod.matmul_sm90_grouped[grid, 128 * (cfg["CONSUMERS"] + 1)](
        ta, tb, c.reshape(-1), P, N, K, N, sa, sb, dummy, dummy, 1.0, routing.tile_expert, routing.num_tiles,
        shared=matmul_sm90.shared_bytes(cfg, t), stream=_common.stream_of(c) if stream is None else stream,
        **params)
    return c


def mx_shared_bytes(stages: int = MX_STAGES, bn: int = 256) -> int:
    """Dynamic shared memory of std.moe_sm90_mx's kernel: the A and bf16 B stages (128 bytes a row),
    1024 bytes of mbarriers, the packed stages (32 bytes a row of B)."""
    return stages * (BLOCK_M + bn) * 128 + 1024 + stages * bn * 32


@functools.lru_cache(maxsize=None)
def _mx_cpu_module() -> Any:
    """std.moe_sm90_mx for the CPU target with wgmma, TMA and mbarriers emulated (compiled once a
    process, as matmul_sm90._cpu_module)."""
    return compile_file(stdlib_dir() / "moe_sm90_mx.kc", target="cpu", target_options={"emulate_wgmma": True})


def grouped_gemm_mxfp4(mod: Any, a: Any, w: ExpertWeights, routing: MoERouting, c: Any, *, gated: bool, sms: int,
                       stages: int = MX_STAGES, stream: Any = None, **tiles: Any) -> Any:
    """:func:`grouped_gemm` with MXFP4 weights (ExpertWeights "mxfp4": packed E2M1 codes (E, N, K / 2)
    or gated (E, 2 N, K / 2), E8M0 scales (E, N or 2 N, K / 32)), by std.moe_sm90_mx's
    matmul_sm90_grouped_mxfp4 (``mod``: that module), which dequantises each k-step's codes exactly
    to bf16 in shared memory before the wgmmas: ``c[p] = A[p] @ W[e]^T`` with W the decoded weights
    (or gated, silu(gate) * up). ``a``: bf16 (P, K), ``c``: bf16 (P, N), both contiguous and 16-byte
    aligned; the routing's block_m is :data:`BLOCK_M`. ``tiles``: the kernel's other compile-time
    parameters (STAGES overrides ``stages``; BN, GROUP_M, DQ_REGS, CONS_REGS: the benchmark's
    variants, bench_moe.py's GEMM_VARIANTS). Returns c."""
    if routing.block_m != BLOCK_M:
        raise ValueError(f"grouped_gemm_mxfp4: the routing's block_m must be {BLOCK_M}, not {routing.block_m}")
    if arrays.array_scalar_type(a).name != "bf16" or w.format != "mxfp4":
        raise TypeError(f"grouped_gemm_mxfp4: a bf16 and mxfp4 weights, not {arrays.describe(a)} and {w.format}")
    from .moe_gemm import _weights
    tiles = dict(tiles)
    stages = int(tiles.pop("STAGES", stages))
    data, scales = _weights(w, a, "grouped_gemm_mxfp4")
    data = _aligned(data)
    bn = int(tiles.get("BN", 256))
    P, K = (int(d) for d in a.shape)
    E, R = int(data.shape[0]), int(data.shape[1])
    N = R // 2 if gated else R
    ta = cached_tensor_map(a, (BLOCK_M, matmul_sm90.BK["bf16"]))
    if gated:
        tp = cached_tensor_map(data.reshape(E, 2, N, K // 2), (1, 1, bn // 2, 32), swizzle=0)
    else:
        tp = cached_tensor_map(data, (1, bn, 32), swizzle=0)
    cols = bn // 2 if gated else bn
    grid = max(1, min(sms, P // BLOCK_M * -(-N // cols)))
    mod.matmul_sm90_grouped_mxfp4[grid, 384](
        ta, tp, scales.reshape(-1), c.reshape(-1), P, N, K, N, routing.tile_expert, routing.num_tiles,
        shared=mx_shared_bytes(stages, bn), stream=_common.stream_of(c) if stream is None else stream,
        OUT="bf16", STAGES=stages, FUSE=1 if gated else 0, **tiles)
    return c


def quantize_rows(mod: Any, src: Any, routing: MoERouting, q: Any, sq: Any, inv: Any = None, *,
                  stream: Any = None) -> None:
    """std.moe_sm90's moe_sm90_quant (``mod``: that module): every slot p of the routing's tiles in use
    quantised to E4M3 with one f32 scale, ``q[p] * sq[p]`` ~ its row (the module docstring's rule).
    With ``inv`` (i32 (T top_k,), written): ``src`` is x (T, H), slot p's row is x's row of its
    assignment's token (zeros for padding slots), as moe_sm90_gather; else ``src`` is (P, H), row p.
    ``q``: f8e4m3 (P, H), 16-byte aligned; ``sq``: f32 (P,)."""
    t = arrays.array_scalar_type(src)
    H = int(src.shape[1])
    P = int(routing.sorted_ids.shape[0])
    n = routing.tokens * routing.top_k
    vec = _vec(t.size, (H,), (_common.data_ptr(src),)) or 1
    gather = inv is not None
    inv = inv if gather else routing.num_tiles  # not written when not gathering
    mod.moe_sm90_quant[max(1, P), THREADS](src, H, routing.sorted_ids, routing.num_tiles, routing.block_m, n,
                                           routing.top_k, H, q, sq, inv, T=t.name, VEC=vec, GATHER=gather,
                                           stream=_common.stream_of(src) if stream is None else stream)


def moe_sm90(x: Any, routing: MoERouting, wg: ExpertWeights, wd: ExpertWeights, *, target: str = "auto",
             config: dict | None = None, sms: int | None = None, mx_tiles: dict | None = None) -> Any:
    """The MoE layer's experts on the Hopper path (the module's data flow): ``out[t] = sum_j w_tj *
    (silu(x[t] Wg[e]^T) * (x[t] Wu[e]^T)) Wd[e]^T`` for x (T, H) of f32, bf16 or f16, ``routing`` from
    moe_align with block_m = :data:`BLOCK_M` (or ``config``'s tile rows), ExpertWeights wg (E, 2 I, H)
    and wd (E, H, I) of x's kind, both bf16 (x rounded to bf16 for the GEMMs), both FP8 (x and h
    quantised per row to E4M3: the module docstring's accuracy contract) or both MXFP4 (x rounded to
    bf16, the weights decoded exactly: :func:`grouped_gemm_mxfp4`; ``mx_tiles`` its compile-time
    parameters), where :func:`reason_not` finds nothing. h and y are bf16; sums in f32. Returns (T, H) in x's dtype and kind. ``sms``:
    the persistent grids' most blocks (default: the device's multiprocessors; 8 on the CPU). MXFP4:
    each GEMM's BN is :func:`choose_bn`'s for the expected rows of tiles, unless ``mx_tiles`` gives it."""
    src = arrays.array_scalar_type(x)
    T, H = (int(d) for d in x.shape)
    E, n2, _ = wg.shape
    inter = n2 // 2
    k = routing.top_k
    n = T * k
    cuda = arrays.is_torch_tensor(x)
    if cuda:
        gmod = _common.stdlib_module("matmul_sm90", "cuda")
        sms = sms or _common.device_of(gmod, x).multiprocessor_count
    else:
        gmod = matmul_sm90._cpu_module()
        sms = sms or 8
    mod = _common.stdlib_module("moe_sm90", _common.target_for(x, target))
    stream = _common.stream_of(x)
    x = _common.contiguous(x)
    P = int(routing.sorted_ids.shape[0])
    inv = _common.empty_like(x, (max(n, 1),), "i32")
    h = _empty(x, (P, inter), "bf16")
    y = _empty(x, (P, H), "bf16")
    if wg.format == "fp8":
        xq, sx = _empty(x, (P, H), "f8e4m3"), _common.empty_like(x, (P,), "f32")
        quantize_rows(mod, x, routing, xq, sx, inv, stream=stream)
        grouped_gemm(gmod, xq, _aligned(wg.data), routing, h, gated=True, sms=sms, config=config, stream=stream,
                     scale_a=sx, scale_w=_common.contiguous(wg.scales))
        hq, sh = _empty(x, (P, inter), "f8e4m3"), _common.empty_like(x, (P,), "f32")
        quantize_rows(mod, h, routing, hq, sh, stream=stream)
        grouped_gemm(gmod, hq, _aligned(wd.data), routing, y, gated=False, sms=sms, config=config, stream=stream,
                     scale_a=sh, scale_w=_common.contiguous(wd.scales))
    else:
        xp = _empty(x, (P, H), "bf16")
        vec = _vec(src.size, (H,), (_common.data_ptr(x),)) or 1
        mod.moe_sm90_gather[max(1, P), THREADS](x, H, routing.sorted_ids, routing.num_tiles, routing.block_m, n, k,
                                                H, xp, inv, T=src.name, VEC=vec, stream=stream)
        if wg.format == "mxfp4":
            xmod = _common.stdlib_module("moe_sm90_mx", "cuda") if cuda else _mx_cpu_module()
            tiles, tiles_m = dict(mx_tiles or {}), expected_tiles(T, k, E)
            bn_g, bn_d = choose_bn(inter, True, tiles_m, sms), choose_bn(H, False, tiles_m, sms)
            grouped_gemm_mxfp4(xmod, xp, wg, routing, h, gated=True, sms=sms, stream=stream, **{"BN": bn_g, **tiles})
            grouped_gemm_mxfp4(xmod, h, wd, routing, y, gated=False, sms=sms, stream=stream, **{"BN": bn_d, **tiles})
        else:
            grouped_gemm(gmod, xp, _aligned(wg.data), routing, h, gated=True, sms=sms, config=config, stream=stream)
            grouped_gemm(gmod, h, _aligned(wd.data), routing, y, gated=False, sms=sms, config=config, stream=stream)
    out = _common.empty_like(x, (T, H), src.name)
    ov = 8
    while ov > 1 and (16 // src.size < ov or H % ov or _common.data_ptr(out) % (ov * src.size)):
        ov //= 2
    cols = -(-H // ov)
    block = 256 if cols >= 256 else max(64, -(-cols // 64) * 64)
    mod.moe_sm90_sum[(T, -(-cols // block)), block](y, H, inv, _common.contiguous(routing.topk_ids).reshape(-1),
                                                    _common.contiguous(routing.topk_weights).reshape(-1), E, H, out,
                                                    O=src.name, VEC=ov, TOPK=k, stream=stream)
    return out


__all__ = ["BLOCK_M", "CONFIG", "FORMATS", "MX_BN_CHOICES", "MX_STAGES", "THREADS", "choose_bn", "expected_tiles",
           "grouped_gemm", "grouped_gemm_mxfp4", "moe_sm90", "mx_shared_bytes", "quantize_rows", "reason_not"]
