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

Weights bf16 (FP8 and MXFP4 take the other paths for now). H and I multiples of 8 (TMA's 16-byte
rows). ``ops.moe``'s "auto" takes it for bf16 on an sm_90 GPU from
ops.MOE_SM90_MIN_ROWS_PER_EXPERT assignments an expert (measured: benchmarks/RESULTS.md). Torch CUDA tensors on an sm_90 GPU, or numpy arrays on the CPU target's emulation of
wgmma and TMA (``target_options={"emulate_wgmma": True}``: slow, for tests)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import arrays
from ..runtime.tensormap import cached_tensor_map
from . import _common, matmul_sm90
from .moe_types import ExpertWeights, MoERouting
from .norms import _vec

#: The tile configuration of both grouped GEMMs (std.matmul_sm90's CONFIGS: 2 consumer warpgroups,
#: 128 x 256 tiles, 4 stages); GEMM1 (gated) writes tiles of 128 columns of h.
CONFIG = "128x256"
#: The rows of a tile, and so the routing's block_m on this path.
BLOCK_M = matmul_sm90.tile_m(matmul_sm90.CONFIGS[CONFIG])
#: Threads a block of the gather and of the sum.
THREADS = 128


def reason_not(x: Any, wg: ExpertWeights, wd: ExpertWeights) -> tuple[type, str] | None:
    """Why this path cannot run ops.moe on ``x`` with these weights, as (the exception to raise,
    the message), or None: it takes bf16 weights (TypeError), H and I multiples of 8 (ValueError),
    torch CUDA tensors (on an sm_90 GPU, else RuntimeError) or numpy arrays (the CPU target's
    emulation; TypeError for other arrays)."""
    if wg.format != "bf16" or wd.format != "bf16":
        return TypeError, f"gemm='sm90' takes bf16 weights (not {wg.format} and {wd.format}) for now"
    e, n2, h = wg.shape
    if h % 8 or (n2 // 2) % 8:
        return ValueError, f"gemm='sm90' needs H ({h}) and I ({n2 // 2}) multiples of 8 (TMA's 16-byte rows)"
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
                 config: dict | None = None, stream: Any = None) -> Any:
    """``c[p] = A[p] @ W[e]^T`` (or, ``gated``, silu(A[p] @ Wg[e]^T) * (A[p] @ Wu[e]^T)) for every
    slot p of the routing's tiles in use, e = ``routing.tile_expert[p // BM]``, by std.matmul_sm90's
    matmul_sm90_grouped (``mod``: that module, CUDA or the CPU emulation).

    ``a``: bf16 (P, K) with P = len(routing.sorted_ids); ``w``: bf16 (E, N, K), or gated (E, 2 N, K)
    (gate rows first); ``c``: bf16 (P, N); all contiguous, 16-byte aligned, K and N multiples of 8.
    ``config``: one of matmul_sm90.CONFIGS (default :data:`CONFIG`) whose tile rows are the
    routing's block_m. ``sms``: the persistent grid's most blocks. Returns c."""
    cfg = dict(config or matmul_sm90.CONFIGS[CONFIG])
    bm, bn = matmul_sm90.tile_m(cfg), cfg["BN"]
    if routing.block_m != bm or cfg.get("PINGPONG") or cfg.get("CLUSTER_M", 1) != 1:
        raise ValueError(f"grouped_gemm: a cooperative configuration without clusters of {routing.block_m} rows")
    P, K = (int(d) for d in a.shape)
    E, N = int(w.shape[0]), int(w.shape[1]) // (2 if gated else 1)
    ta = cached_tensor_map(a, (bm, 64))
    if gated:
        tb = cached_tensor_map(w.reshape(E, 2, N, K), (1, 1, bn // 2, 64))
    else:
        tb = cached_tensor_map(w, (1, bn, 64))
    cols = bn // 2 if gated else bn
    grid = max(1, min(sms, P // bm * -(-N // cols)))
    dummy = matmul_sm90._dummy_f32(a.device if arrays.is_torch_tensor(a) else None)
    params = dict(T="bf16", OUT="bf16", BK=64, BN=bn, CONSUMERS=cfg["CONSUMERS"], STAGES=cfg["STAGES"],
                  GROUP_M=cfg["GROUP_M"], ALIGNED=True, FUSE=1 if gated else 0)
    mod.matmul_sm90_grouped[grid, 128 * (cfg["CONSUMERS"] + 1)](
        ta, tb, c.reshape(-1), P, N, K, N, dummy, dummy, 1.0, routing.tile_expert, routing.num_tiles,
        shared=matmul_sm90.shared_bytes(cfg, "bf16"), stream=_common.stream_of(c) if stream is None else stream,
        **params)
    return c


def moe_sm90(x: Any, routing: MoERouting, wg: ExpertWeights, wd: ExpertWeights, *, target: str = "auto",
             config: dict | None = None, sms: int | None = None) -> Any:
    """The MoE layer's experts on the Hopper path (the module's data flow): ``out[t] = sum_j w_tj *
    (silu(x[t] Wg[e]^T) * (x[t] Wu[e]^T)) Wd[e]^T`` for x (T, H) of f32, bf16 or f16 (rounded to bf16
    for the GEMMs), ``routing`` from moe_align with block_m = :data:`BLOCK_M` (or ``config``'s tile
    rows), bf16 ExpertWeights wg (E, 2 I, H) and wd (E, H, I) of x's kind, where :func:`reason_not`
    finds nothing. h and y are bf16; sums in f32. Returns (T, H) in x's dtype and kind. ``sms``:
    the persistent grids' most blocks (default: the device's multiprocessors; 8 on the CPU)."""
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
    xp = _empty(x, (P, H), "bf16")
    inv = _common.empty_like(x, (max(n, 1),), "i32")
    vec = _vec(src.size, (H,), (_common.data_ptr(x),)) or 1
    mod.moe_sm90_gather[max(1, P), THREADS](x, H, routing.sorted_ids, routing.num_tiles, routing.block_m, n, k, H,
                                            xp, inv, T=src.name, VEC=vec, stream=stream)
    h = _empty(x, (P, inter), "bf16")
    grouped_gemm(gmod, xp, _aligned(wg.data), routing, h, gated=True, sms=sms, config=config, stream=stream)
    y = _empty(x, (P, H), "bf16")
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


__all__ = ["BLOCK_M", "CONFIG", "THREADS", "grouped_gemm", "moe_sm90", "reason_not"]
