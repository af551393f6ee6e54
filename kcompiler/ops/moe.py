"""kcompiler.ops.moe: a mixture-of-experts layer (:func:`moe`) and its steps — top-k routing
(:func:`moe_route`), the alignment of the tokens' choices by expert for a grouped GEMM
(:func:`moe_align`), and the sum of each token's expert rows (:func:`moe_sum`) — by std.moe's kernels
(stdlib/moe.kc), with the grouped GEMMs of kcompiler.ops.moe_gemm on targets with tensor cores.

Data flow of :func:`moe` for T tokens of hidden size H, E experts of intermediate size I, top_k
choices a token (assignment ``a = t * top_k + j``, n = T * top_k of them)::

    router_logits (T, E) --moe_route--> topk_ids (T, top_k) i32, topk_weights (T, top_k) f32
    topk_ids --moe_align--> MoERouting (sorted_ids, tile_expert, num_tiles: tiles of block_m rows, one
                            expert a tile; kcompiler/ops/moe_types.py)
    x (T, H), w_gate_up (E, 2 I, H) --GEMM1 + SwiGLU--> h (n, I): h[a] = silu(x[t] Wg[e]^T) * (x[t] Wu[e]^T)
    h, w_down (E, H, I) --GEMM2--> out (T, H) = sum_j topk_weights[t, j] * h[a] Wd[e]^T
                            ("atomic": f32 atomic adds into a token's row in GEMM2's epilogue;
                             "separate": GEMM2 writes n weighted rows, :func:`moe_sum` adds them)

Arrays are numpy (host; numpy out) or torch / CUDA-array-interface arrays on a GPU (device; results of
the same kind, kernels on torch's current stream). Weights are :class:`~kcompiler.ops.moe_types.
ExpertWeights` (bf16, FP8 with per-channel scales, MXFP4) of the inputs' kind."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import arrays
from . import _common
from ._common import data_ptr, empty_like, stream_of, target_for
from .moe_types import ExpertWeights, MoERouting, MXActivations
from .mx import mx_dequantize
from .norms import _vec

from . import moe_gemm

#: Routing modes (:func:`moe_route`).
MOE_MODES = ("softmax_topk", "topk_softmax")
#: Most experts :func:`moe_route` takes (a warp a token, 8 logits a lane) and most choices a token.
MOE_ROUTE_MAX_EXPERTS = 256
MOE_ROUTE_MAX_TOP_K = 8
#: Most experts :func:`moe_align` takes (a block's shared counters).
MOE_ALIGN_MAX_EXPERTS = 1024
#: Assignments a block of the alignment's counting and scattering kernels walks.
MOE_ALIGN_CHUNK = 128
#: The format code of each weight format in std.moe's SIMT GEMMs.
_FMT = {"bf16": 0, "fp8": 1, "mxfp4": 2}
FLOATS = ("f32", "f16", "bf16")


def _float_type(x: Any, fn: str, name: str) -> Any:
    src = arrays.array_scalar_type(x) if arrays.is_array(x) else None
    if src is None or src.name not in FLOATS:
        raise TypeError(f"{fn}: {name} must be an array of f32, f16 or bf16, not {arrays.describe(x)}")
    return src


def _zeros(like: Any, shape: tuple, name: str) -> Any:
    """A zero-filled array of ``like``'s kind (torch on its device: filled there)."""
    if arrays.is_torch_tensor(like):
        import torch  # deferred: torch is optional
        return torch.zeros(shape, dtype=_common.torch_dtype(name), device=like.device)
    return np.zeros(shape, arrays.numpy_dtype(_common.SCALARS[name]))


def _same_kind(a: Any, like: Any, fn: str, name: str) -> None:
    if arrays.is_torch_tensor(a) != arrays.is_torch_tensor(like) or (
            arrays.is_torch_tensor(a) and a.device != like.device):
        raise TypeError(f"{fn}: {name} must be an array of the same kind and device as the input "
                        f"({arrays.describe(like)}), not {arrays.describe(a)}")


def _rows_2d(x: Any, fn: str, name: str) -> tuple[Any, int]:
    """2-D ``x`` with unit stride along its last axis, and its row stride (elements)."""
    if len(tuple(x.shape)) != 2:
        raise ValueError(f"{fn}: {name} must be 2-D, not of shape {tuple(x.shape)}")
    if arrays.is_torch_tensor(x):
        if x.stride(-1) != 1 or x.stride(0) < x.shape[1]:
            x = x.contiguous()
        return x, int(x.stride(0)) if x.shape[0] > 1 else int(x.shape[1])
    x = np.ascontiguousarray(x)
    return x, int(x.shape[1])


# --- routing -------------------------------------------------------------------------------------------

def moe_route(router_logits: Any, top_k: int, *, mode: str = "softmax_topk", renormalize: bool = True,
              target: str = "auto") -> tuple[Any, Any]:
    """Each token's ``top_k`` experts and their weights from its router logits.

    ``router_logits``: (T, E) of f32, bf16 or f16, 1 <= E <= :data:`MOE_ROUTE_MAX_EXPERTS`;
    1 <= ``top_k`` <= min(E, :data:`MOE_ROUTE_MAX_TOP_K`). Returns ``(topk_ids, topk_weights)``: int32 and
    float32 arrays of shape (T, top_k) of the input's kind, the experts in order of decreasing logit,
    ties to the lower expert index.

    Modes, with l a token's logits (math in f32, softmax by std.math's exp after subtracting the
    row's maximum):

    - ``"softmax_topk"``: p = softmax(l) over all E experts, the top_k largest p, weights p
      (Mixtral, DeepSeek, Qwen-MoE); with ``renormalize`` the weights divided by their sum, so they sum
      to 1;
    - ``"topk_softmax"``: the top_k largest logits, weights the softmax over those top_k only (gpt-oss);
      they sum to 1 already, so ``renormalize`` changes nothing.

    (``softmax_topk`` renormalised equals ``topk_softmax`` in exact arithmetic; both compute
    exp(l_j - max l) / sum over the chosen.) A NaN logit counts as -inf; a row of only -inf / NaN
    logits counts as all equal. One warp a token (std.moe's ``moe_route``). Raises TypeError for
    another dtype, ValueError for bad shapes, ``top_k`` or ``mode``."""
    fn = "moe_route"
    src = _float_type(router_logits, fn, "router_logits")
    if mode not in MOE_MODES:
        raise ValueError(f"{fn}: mode must be one of {MOE_MODES}, not {mode!r}")
    x, ld = _rows_2d(router_logits, fn, "router_logits")
    tokens, experts = (int(d) for d in x.shape)
    if not 1 <= experts <= MOE_ROUTE_MAX_EXPERTS:
        raise ValueError(f"{fn}: 1 to {MOE_ROUTE_MAX_EXPERTS} experts (router_logits' columns), not {experts}")
    if not isinstance(top_k, (int, np.integer)) or not 1 <= top_k <= min(experts, MOE_ROUTE_MAX_TOP_K):
        raise ValueError(f"{fn}: top_k must be an integer in [1, {min(experts, MOE_ROUTE_MAX_TOP_K)}] "
                         f"(at most the experts, {experts}, and {MOE_ROUTE_MAX_TOP_K}), not {top_k!r}")
    top_k = int(top_k)
    ids = empty_like(x, (tokens, top_k), "i32")
    weights = empty_like(x, (tokens, top_k), "f32")
    if tokens:
        mod = _common.stdlib_module("moe", target_for(x, target))
        full = mode == "softmax_topk" and not renormalize
        # 128 threads: 4 tokens a block with warps of 32, 2 with 64 (the kernel strides over the rest)
        mod.moe_route[-(-tokens // 4), 128](x, ld, ids, weights, tokens, experts, T=src.name,
                                            EMAX=-(-experts // 32) * 32, TOPK=top_k, FULL=full,
                                            stream=stream_of(x))
    return ids, weights


# --- alignment -----------------------------------------------------------------------------------------

def moe_align(topk_ids: Any, topk_weights: Any, num_experts: int, block_m: int, *,
              target: str = "auto") -> MoERouting:
    """The tokens' choices grouped by expert for a grouped GEMM (vLLM's ``moe_align_block_size``).

    ``topk_ids``: int32 (T, top_k); ``topk_weights``: float32 (T, top_k) of the same kind (kept in the
    result for the down projection); ``num_experts``: E, 1 to :data:`MOE_ALIGN_MAX_EXPERTS`; ``block_m``:
    the rows of a GEMM tile (>= 1). Returns a :class:`~kcompiler.ops.moe_types.MoERouting` whose
    arrays are of the input's kind and computed on the device (the host reads nothing back):

    - ``sorted_ids`` (P,): the assignments a = t * top_k + j grouped by expert in increasing expert
      order, within an expert in increasing a (so the layout depends on topk_ids alone: reproducible),
      each expert's run padded to a multiple of block_m with the sentinel T * top_k, and the slots past
      the last tile the sentinel too; P = :meth:`MoERouting.padded_slots`;
    - ``tile_expert`` (P // block_m,): each tile's expert, -1 past ``num_tiles``; experts without
      assignments get no tile;
    - ``num_tiles`` (1,): the tiles in use.

    Ids outside [0, E) are left out (their assignments appear nowhere: expert parallelism's experts of
    another rank). Three small kernels (std.moe: count per chunk of :data:`MOE_ALIGN_CHUNK` assignments,
    scan in one block, scatter a warp a chunk). Raises TypeError / ValueError for bad dtypes, shapes
    or sizes."""
    fn = "moe_align"
    if arrays.array_scalar_type(topk_ids) is None or arrays.array_scalar_type(topk_ids).name != "i32" \
            or len(tuple(topk_ids.shape)) != 2:
        raise TypeError(f"{fn}: topk_ids must be a 2-D array of int32, not {arrays.describe(topk_ids)}")
    if arrays.array_scalar_type(topk_weights) is None or arrays.array_scalar_type(topk_weights).name != "f32" \
            or tuple(topk_weights.shape) != tuple(topk_ids.shape):
        raise TypeError(f"{fn}: topk_weights must be a float32 array of topk_ids' shape "
                        f"{tuple(topk_ids.shape)}, not {arrays.describe(topk_weights)}")
    _same_kind(topk_weights, topk_ids, fn, "topk_weights")
    if not isinstance(num_experts, (int, np.integer)) or not 1 <= num_experts <= MOE_ALIGN_MAX_EXPERTS:
        raise ValueError(f"{fn}: num_experts must be in [1, {MOE_ALIGN_MAX_EXPERTS}], not {num_experts!r}")
    if not isinstance(block_m, (int, np.integer)) or block_m < 1:
        raise ValueError(f"{fn}: block_m must be a positive integer, not {block_m!r}")
    tokens, top_k = (int(d) for d in topk_ids.shape)
    e, bm = int(num_experts), int(block_m)
    n = tokens * top_k
    slots = MoERouting.padded_slots(tokens, top_k, e, bm)
    if slots >= 2 ** 31:
        raise ValueError(f"{fn}: {slots} slots exceed int32 indices")
    ids = _common.contiguous(topk_ids)
    sorted_ids = empty_like(ids, (slots,), "i32")
    tile_expert = empty_like(ids, (slots // bm,), "i32")
    num_tiles = empty_like(ids, (1,), "i32")
    chunks = max(1, -(-n // MOE_ALIGN_CHUNK))
    counts = empty_like(ids, (chunks * e,), "i32")
    mod = _common.stdlib_module("moe", target_for(ids, target))
    stream = stream_of(ids)
    flat = ids.reshape(-1)
    mod.moe_align_count[chunks, 128](flat, n, e, counts, sorted_ids, slots, n, tile_expert, slots // bm,
                                     CHUNK=MOE_ALIGN_CHUNK, stream=stream)
    mod.moe_align_scan[1, max(64, 1 << (e - 1).bit_length())](counts, chunks, e, bm, tile_expert, num_tiles,
                                                              stream=stream)
    # 64 threads: one wavefront of 64, or two warps of 32 of which the first works
    mod.moe_align_scatter[chunks, 64](flat, n, e, counts, sorted_ids, CHUNK=MOE_ALIGN_CHUNK, stream=stream)
    return MoERouting(topk_ids=topk_ids, topk_weights=topk_weights, sorted_ids=sorted_ids,
                      tile_expert=tile_expert, num_tiles=num_tiles, block_m=bm, top_k=top_k, num_experts=e)


# --- reduction -----------------------------------------------------------------------------------------

def moe_sum(y: Any, top_k: int, *, dtype: str | None = None, out: Any = None, target: str = "auto") -> Any:
    """``out[t, :] = sum_j y[t * top_k + j, :]``: the reduction of the down projection's "separate"
    mode (the routing weights are already applied to y's rows).

    ``y``: (T * top_k, H) of f32, bf16 or f16; ``top_k`` >= 1 (1: a conversion). Returns (T, H) of
    ``dtype`` (a type name: 'f32', 'bf16', 'f16'; default y's) of y's kind, or fills ``out``. Sums in
    f32 in order j = 0, 1, ..., rounded once, vectors of up to 16 bytes (std.moe's ``moe_sum``).
    Raises TypeError / ValueError for bad dtypes or shapes."""
    fn = "moe_sum"
    src = _float_type(y, fn, "y")
    if not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"{fn}: top_k must be a positive integer, not {top_k!r}")
    if len(tuple(y.shape)) != 2 or y.shape[0] % top_k:
        raise ValueError(f"{fn}: y must be (T * top_k, H), not of shape {tuple(y.shape)} with top_k {top_k}")
    rows, h = int(y.shape[0]) // int(top_k), int(y.shape[1])
    if out is None:
        name = dtype or src.name
        if name not in FLOATS:
            raise ValueError(f"{fn}: dtype must be one of {FLOATS}, not {name!r}")
        out = empty_like(y, (rows, h), name)
    else:
        name = _float_type(out, fn, "out").name
        _same_kind(out, y, fn, "out")
        if tuple(out.shape) != (rows, h) or not arrays.is_contiguous(out):
            raise ValueError(f"{fn}: out must be a contiguous ({rows}, {h}) array, not {tuple(out.shape)}")
    if rows == 0 or h == 0:
        return out
    y = _common.contiguous(y)
    osize = arrays.array_scalar_type(out).size
    vec = _vec(src.size, (h,), (data_ptr(y),))
    while vec > 1 and (16 // osize < vec or h % vec or data_ptr(out) % (vec * osize)):
        vec //= 2
    cols = -(-h // vec)
    block = 256 if cols >= 256 else max(64, -(-cols // 64) * 64)
    mod = _common.stdlib_module("moe", target_for(y, target))
    mod.moe_sum[(rows, -(-cols // block)), block](y, out, h, T=src.name, O=name, VEC=vec, TOPK=int(top_k),
                                                  stream=stream_of(y))
    return out


# --- the layer -----------------------------------------------------------------------------------------

def _weights(w: Any, fn: str, name: str, like: Any) -> ExpertWeights:
    """``w`` as ExpertWeights (a plain bf16 (E, N, K) array is wrapped), of ``like``'s kind."""
    if not isinstance(w, ExpertWeights):
        if not arrays.is_array(w):
            raise TypeError(f"{fn}: {name} must be ExpertWeights or a bf16 (E, N, K) array, not {type(w).__name__}")
        w = ExpertWeights.bf16(w)
    _same_kind(w.data, like, fn, f"{name}.data")
    if w.scales is not None:
        _same_kind(w.scales, like, fn, f"{name}.scales")
    return w


def _kernel_weights(w: ExpertWeights) -> tuple[Any, Any]:
    """(data, scales) as std.moe's SIMT GEMMs take them: contiguous; MXFP4 scales as uint8 bytes; the
    data again as the (unread) scales of bf16."""
    data = _common.contiguous(w.data)
    if w.format == "bf16":
        return data, data
    s = _common.contiguous(w.scales)
    if w.format == "mxfp4" and arrays.array_scalar_type(s).name != "u8":
        if arrays.is_torch_tensor(s):
            import torch  # deferred: torch is optional
            s = s.view(torch.uint8)
        else:
            s = s.view(np.uint8)
    return data, s


def moe_simt_block_m(tokens: int, top_k: int, num_experts: int) -> int:
    """The tile rows of std.moe's SIMT GEMMs (and so the routing's ``block_m`` on that path): 16, 32
    or 64, the smallest at least the mean assignments an expert (fewer padding rows for decode)."""
    mean = tokens * top_k / max(1, num_experts)
    return 16 if mean <= 16 else 32 if mean <= 32 else 64


#: Columns of a tile of std.moe's SIMT GEMMs (BN).
MOE_SIMT_BN = 64
#: Threads a block of std.moe's SIMT GEMMs (its GEMM_THREADS).
MOE_SIMT_THREADS = 256


def moe(x: Any, router_logits: Any, w_gate_up: Any, w_down: Any, top_k: int, *, mode: str = "softmax_topk",
        renormalize: bool = True, reduce: str = "atomic", gemm: str = "auto", target: str = "auto") -> Any:
    """A mixture-of-experts MLP layer with SwiGLU experts: ``out[t] = sum_j w_tj * (silu(x[t] Wg[e]^T) *
    (x[t] Wu[e]^T)) Wd[e]^T`` over token t's top_k experts e = e_tj with weights w_tj.

    - ``x``: (T, H) activations, f32, bf16 or f16, or MXFP8 (:class:`~kcompiler.ops.moe_types.MXActivations`:
      decoded to bf16 in registers by the tensor-core GEMM, dequantised to bf16 first for the SIMT
      one; the result is bf16).
    - ``router_logits``: (T, E) router logits (f32, bf16, f16), routed by :func:`moe_route` with
      ``mode`` ('softmax_topk' or 'topk_softmax', defined there) and ``renormalize``.
    - ``w_gate_up``: :class:`~kcompiler.ops.moe_types.ExpertWeights` of shape (E, 2 I, H) (rows
      [0, I) the gate, [I, 2 I) the up projection), or a plain bf16 (E, 2 I, H) array; bf16, FP8 with
      per-channel scales, or MXFP4 (H a multiple of 32).
    - ``w_down``: ExpertWeights (or a bf16 array) of shape (E, H, I); MXFP4 needs I a multiple of 32.
    - ``top_k``: experts a token, 1 to min(E, 8).
    - ``reduce``: 'atomic' (GEMM2 adds each weighted row into the token's f32 row with atomic adds:
      the order of a token's top_k additions, hence the last bits, may vary from run to run on a GPU)
      or 'separate' (GEMM2 writes the T * top_k weighted rows, :func:`moe_sum` adds them in order j:
      reproducible).
    - ``gemm``: 'auto' (kcompiler.ops.moe_gemm's tensor-core grouped GEMMs for bf16 activations where
      the target has 'mma', else std.moe's SIMT ones), 'simt' or 'mma'
      (force one; 'mma' takes bf16 x only).
    - ``target``: as every op ('auto': where x lives).

    Returns (T, H) in x's dtype and kind. The data flow is the module's (route -> align -> GEMM1 +
    SwiGLU -> GEMM2 (+ reduce)); all of it queued on the device, the host waits for nothing. On the
    SIMT path the intermediate h (T * top_k, I) is held in x's dtype (f32 for f32 x), sums in f32.
    Raises TypeError for bad dtypes or kinds (weights must be of x's kind and device), ValueError for
    inconsistent shapes, ``top_k``, ``mode``, ``reduce`` or ``gemm``."""
    fn = "moe"
    xq = x if isinstance(x, MXActivations) else None   # MXFP8: x stands in (bf16, unread) until a GEMM needs it
    if xq is not None:
        x = empty_like(xq.codes, xq.shape, "bf16")
    src = _float_type(x, fn, "x")
    if reduce not in ("atomic", "separate"):
        raise ValueError(f"{fn}: reduce must be 'atomic' or 'separate', not {reduce!r}")
    if gemm not in ("auto", "simt", "mma"):
        raise ValueError(f"{fn}: gemm must be 'auto', 'simt' or 'mma', not {gemm!r}")
    if len(tuple(x.shape)) != 2:
        raise ValueError(f"{fn}: x must be (T, H), not of shape {tuple(x.shape)}")
    tokens, hidden = (int(d) for d in x.shape)
    wg = _weights(w_gate_up, fn, "w_gate_up", x)
    wd = _weights(w_down, fn, "w_down", x)
    e, n2, k1 = wg.shape
    if k1 != hidden or n2 % 2 or n2 == 0:
        raise ValueError(f"{fn}: w_gate_up must be (E, 2 I, H) with H = {hidden} (x's columns), not {wg.shape}")
    inter = n2 // 2
    if wd.shape != (e, hidden, inter):
        raise ValueError(f"{fn}: w_down must be (E, H, I) = {(e, hidden, inter)} for w_gate_up {wg.shape}, "
                         f"not {wd.shape}")
    if tuple(router_logits.shape) != (tokens, e):
        raise ValueError(f"{fn}: router_logits must be (T, E) = {(tokens, e)}, not {tuple(router_logits.shape)}")
    _same_kind(router_logits, x, fn, "router_logits")
    ids, wts = moe_route(router_logits, top_k, mode=mode, renormalize=renormalize, target=target)
    if tokens == 0 or hidden == 0:
        return _zeros(x, (tokens, hidden), src.name)
    tgt = target_for(x, target)
    mod = _common.stdlib_module("moe", tgt)
    use_mma = gemm == "mma" or (gemm == "auto" and mod.target_has("mma")
                                and src.name == "bf16")
    if use_mma and src.name != "bf16":
        raise TypeError(f"{fn}: gemm='mma' (kcompiler.ops.moe_gemm) takes bf16 activations, not {src.name}")
    x = _common.contiguous(x)
    stream = stream_of(x)
    if use_mma:
        routing = moe_align(ids, wts, e, moe_gemm.moe_block_m(tokens, top_k, e), target=target)
        h = moe_gemm.moe_gemm_swiglu(x if xq is None else xq, wg, routing, target=target)
        y = moe_gemm.moe_gemm_down(h, wd, routing, reduce=reduce, target=target)
        if reduce == "separate":
            return moe_sum(y, top_k, dtype=src.name, target=target)
        return y if arrays.array_scalar_type(y) == src else moe_sum(y, 1, dtype=src.name, target=target)
    if xq is not None:
        x = mx_dequantize(xq.codes, xq.scales_as("e8m0"), "bf16", target=target)
    bm = moe_simt_block_m(tokens, top_k, e)
    routing = moe_align(ids, wts, e, bm, target=target)
    n = tokens * top_k
    tiles = int(routing.tile_expert.shape[0])
    gdata, gscales = _kernel_weights(wg)
    ddata, dscales = _kernel_weights(wd)
    h = empty_like(x, (n, inter), src.name)
    mod.moe_gemm1_simt[(tiles, -(-inter // MOE_SIMT_BN)), MOE_SIMT_THREADS](
        x, gdata, gscales, routing.sorted_ids, routing.tile_expert, routing.num_tiles, h, n, top_k, hidden, inter,
        FMT=_FMT[wg.format], BM=bm, BN=MOE_SIMT_BN, stream=stream)
    flat_w = wts.reshape(-1)
    separate = reduce == "separate"
    acc = empty_like(x, (n, hidden), "f32") if separate else _zeros(x, (tokens, hidden), "f32")
    mod.moe_gemm2_simt[(tiles, -(-hidden // MOE_SIMT_BN)), MOE_SIMT_THREADS](
        h, ddata, dscales, routing.sorted_ids, routing.tile_expert, routing.num_tiles, flat_w, acc, n, top_k,
        inter, hidden, FMT=_FMT[wd.format], BM=bm, SEPARATE=separate, BN=MOE_SIMT_BN, stream=stream)
    if separate:
        return moe_sum(acc, top_k, dtype=src.name, target=target)
    return acc if src.name == "f32" else moe_sum(acc, 1, dtype=src.name, target=target)


__all__ = ["MOE_ALIGN_CHUNK", "MOE_ALIGN_MAX_EXPERTS", "MOE_MODES", "MOE_ROUTE_MAX_EXPERTS", "MOE_ROUTE_MAX_TOP_K",
           "MOE_SIMT_BN", "MOE_SIMT_THREADS", "moe", "moe_align", "moe_route", "moe_simt_block_m", "moe_sum"]
