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

import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

from ..ir.types import SCALARS
from ..runtime import arrays
from . import _common
from ._common import ArrayKind, data_ptr, empty_like, stream_of, target_for
from .decode import plan_key as decode_plan_key
from .moe_types import ExpertWeights, MoERouting, MXActivations
from .mx import mx_dequantize
from .norms import _vec

from . import moe_gemm, moe_sm90

#: Routing modes (:func:`moe_route`).
MOE_MODES = ("softmax_topk", "topk_softmax")
#: Most experts :func:`moe_route` takes (a warp a token, 8 logits a lane) and most choices a token.
MOE_ROUTE_MAX_EXPERTS = 256
MOE_ROUTE_MAX_TOP_K = 8
#: Most experts :func:`moe_align` takes (a block's shared counters).
MOE_ALIGN_MAX_EXPERTS = 1024
#: Assignments a block of the alignment's counting and scattering kernels walks.
MOE_ALIGN_CHUNK = 128
#: Most assignments (tokens x top_k) that :func:`moe_route_align` (and so :func:`moe`) routes and aligns
#: in one launch of one block (std.moe's ``moe_route_align``, its FUSED_MAX); more take the four launches
#: of :func:`moe_route` and :func:`moe_align`.
MOE_FUSED_MAX_ASSIGNMENTS = 1024
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
    if not arrays.is_array(a) or arrays.is_torch_tensor(a) != arrays.is_torch_tensor(like) or (
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
    x, ld, kw = _route_args(router_logits, top_k, mode, renormalize, "moe_route")
    tokens, experts = (int(d) for d in x.shape)
    ids = empty_like(x, (tokens, kw["TOPK"]), "i32")
    weights = empty_like(x, (tokens, kw["TOPK"]), "f32")
    if tokens:
        mod = _common.stdlib_module("moe", target_for(x, target))
        mod.moe_route[_route_config(tokens)](x, ld, ids, weights, tokens, experts, stream=stream_of(x), **kw)
    return ids, weights


def _route_args(router_logits: Any, top_k: Any, mode: str, renormalize: bool, fn: str) -> tuple[Any, int, dict]:
    """The checked router logits (2-D, unit stride along rows), their row stride and std.moe's
    compile-time values of the routing (T, EMAX, TOPK, FULL); TypeError / ValueError as
    :func:`moe_route` says."""
    src = _float_type(router_logits, fn, "router_logits")
    if mode not in MOE_MODES:
        raise ValueError(f"{fn}: mode must be one of {MOE_MODES}, not {mode!r}")
    x, ld = _rows_2d(router_logits, fn, "router_logits")
    experts = int(x.shape[1])
    if not 1 <= experts <= MOE_ROUTE_MAX_EXPERTS:
        raise ValueError(f"{fn}: 1 to {MOE_ROUTE_MAX_EXPERTS} experts (router_logits' columns), not {experts}")
    if not isinstance(top_k, (int, np.integer)) or not 1 <= top_k <= min(experts, MOE_ROUTE_MAX_TOP_K):
        raise ValueError(f"{fn}: top_k must be an integer in [1, {min(experts, MOE_ROUTE_MAX_TOP_K)}] "
                         f"(at most the experts, {experts}, and {MOE_ROUTE_MAX_TOP_K}), not {top_k!r}")
    return x, ld, dict(T=src.name, EMAX=-(-experts // 32) * 32, TOPK=int(top_k),
                       FULL=mode == "softmax_topk" and not renormalize)


def _route_config(tokens: int) -> tuple[int, int]:
    """std.moe's moe_route launch: 128 threads, 4 tokens a block with warps of 32, 2 with 64 (the
    kernel strides over the rest)."""
    return -(-tokens // 4), 128


def _fused_threads(tokens: int) -> int:
    """Threads of std.moe's moe_route_align block: a warp of 32 a token, 256 to FUSED_MAX (1024)."""
    return min(MOE_FUSED_MAX_ASSIGNMENTS, max(256, 1 << max(0, tokens * 32 - 1).bit_length()))


def moe_route_align(router_logits: Any, top_k: int, block_m: int, *, mode: str = "softmax_topk",
                    renormalize: bool = True, fused: bool | None = None, target: str = "auto") -> MoERouting:
    """:func:`moe_route` then :func:`moe_align` (E = router_logits' columns): the same
    :class:`~kcompiler.ops.moe_types.MoERouting`, bit for bit (ids, weights, sorted_ids, tile_expert,
    num_tiles), in fewer launches.

    ``fused``: None (the default) takes std.moe's ``moe_route_align`` — one launch of one block that
    routes the tokens (a warp a token, moe_route's code) and builds the whole layout in shared memory
    — where T * top_k <= :data:`MOE_FUSED_MAX_ASSIGNMENTS`, and the four launches of moe_route and
    moe_align (count, scan, scatter) above that; True insists on the one launch (ValueError where T *
    top_k is larger), False on the four. Arguments and errors as :func:`moe_route` and
    :func:`moe_align` (``block_m`` >= 1)."""
    fn = "moe_route_align"
    x, ld, kw = _route_args(router_logits, top_k, mode, renormalize, fn)
    if not isinstance(block_m, (int, np.integer)) or block_m < 1:
        raise ValueError(f"{fn}: block_m must be a positive integer, not {block_m!r}")
    tokens, e = (int(d) for d in x.shape)
    k, bm = kw["TOPK"], int(block_m)
    small = tokens * k <= MOE_FUSED_MAX_ASSIGNMENTS
    if fused and not small:
        raise ValueError(f"{fn}: fused routing takes at most {MOE_FUSED_MAX_ASSIGNMENTS} assignments, not "
                         f"{tokens} x {k}")
    if not (small if fused is None else fused):
        ids, wts = moe_route(x, k, mode=mode, renormalize=renormalize, target=target)
        return moe_align(ids, wts, e, bm, target=target)
    slots = MoERouting.padded_slots(tokens, k, e, bm)
    ids, wts = empty_like(x, (tokens, k), "i32"), empty_like(x, (tokens, k), "f32")
    sorted_ids, tile_expert = empty_like(x, (slots,), "i32"), empty_like(x, (slots // bm,), "i32")
    num_tiles = empty_like(x, (1,), "i32")
    mod = _common.stdlib_module("moe", target_for(x, target))
    mod.moe_route_align[1, _fused_threads(tokens)](x, ld, ids, wts, tokens, e, bm, sorted_ids, slots, tile_expert,
                                                   slots // bm, num_tiles, _common.const_f32(0.0, 1, x), 0,
                                                   stream=stream_of(x), **kw)
    return MoERouting(topk_ids=ids, topk_weights=wts, sorted_ids=sorted_ids, tile_expert=tile_expert,
                      num_tiles=num_tiles, block_m=bm, top_k=k, num_experts=e)


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
    mod = _common.stdlib_module("moe", target_for(y, target))
    launch, kw = _sum_launch(mod, y, out, rows, h, int(top_k))
    launch(y, out, h, stream=stream_of(y), **kw)
    return out


def _sum_launch(mod: Any, y: Any, out: Any, rows: int, h: int, top_k: int) -> tuple[Any, dict]:
    """std.moe's moe_sum launch (``kernel[grid, block]``) and compile-time values for y (rows *
    top_k, h) and out (rows, h): vectors of up to 16 bytes that divide h and fit both addresses."""
    src, osize = arrays.array_scalar_type(y), arrays.array_scalar_type(out).size
    vec = _vec(src.size, (h,), (data_ptr(y),))
    while vec > 1 and (16 // osize < vec or h % vec or data_ptr(out) % (vec * osize)):
        vec //= 2
    cols = -(-h // vec)
    block = 256 if cols >= 256 else max(64, -(-cols // 64) * 64)
    return mod.moe_sum[(rows, -(-cols // block)), block], dict(T=src.name, O=arrays.array_scalar_type(out).name,
                                                               VEC=vec, TOPK=top_k)


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
#: Assignments (T * top_k) an expert on average from which gemm='auto' takes the Hopper grouped GEMMs
#: (kcompiler.ops.moe_sm90) for bf16 x and weights on an sm_90 GPU. Measured on an H100 (2026-11-27,
#: benchmarks/bench_moe.py --sm90, ms a layer, sm90 against the mma.sync path): gpt-oss (E 32, top_k 4)
#: T 64 (8 an expert) 0.716 against 0.663, T 128 (16) 0.695 against 0.749, T 4096 1.68 against 7.86;
#: Mixtral (E 8, top_k 2) T 64 (16) 1.10 against 1.39, T 4096 4.55 against 33.0 (benchmarks/RESULTS.md).
MOE_SM90_MIN_ROWS_PER_EXPERT = 16
#: The same threshold for MXFP4 weights (std.moe_sm90_mx's grouped GEMM against kcompiler.ops.moe_gemm's
#: mma.sync decode; None: never). H100, benchmarks/bench_moe.py --sm90 --formats mxfp4 (2026-11-27, seventh
#: session, whole-program cubins; benchmarks/RESULTS.md), ms a layer, sm90 against mma.sync: gpt-oss (E 32,
#: top_k 4) T 256 (32 an expert) 0.742 against 0.674, T 512 (64) 0.716 against 1.107, T 1024 (128) 1.058
#: against 1.950; Mixtral (E 8, top_k 2) T 128 (32) 1.137 against 0.981, T 256 (64) 1.124 against 1.651
#: (B tiles of 256; with moe_sm90.choose_bn's 192 since, gpt-oss T 256 is 0.689 against 0.682: level).
#: Below 64 the Hopper kernel's time is flat (~0.73 ms gpt-oss, ~1.12 Mixtral): it decodes every weight
#: of every expert hit into shared memory whatever the rows. (The sixth session's hang of this kernel was its
#: setmaxnreg split, 64 + 2 x 224 > the block's pool of 3 x 168; now 64 + 2 x 216,
#: tests/ops/test_setmaxnreg_pool.py.)
MOE_SM90_MXFP4_MIN_ROWS_PER_EXPERT: int | None = 64

#: Threads a block of std.moe's SIMT GEMMs (its GEMM_THREADS).
MOE_SIMT_THREADS = 256


def moe(x: Any, router_logits: Any, w_gate_up: Any, w_down: Any, top_k: int, *, mode: str = "softmax_topk",
        renormalize: bool = True, reduce: str = "atomic", gemm: str = "auto", target: str = "auto") -> Any:
    """A mixture-of-experts MLP layer with SwiGLU experts: ``out[t] = sum_j w_tj * (silu(x[t] Wg[e]^T) *
    (x[t] Wu[e]^T)) Wd[e]^T`` over token t's top_k experts e = e_tj with weights w_tj.

    - ``x``: (T, H) activations, f32, bf16 or f16, or MXFP8 (:class:`~kcompiler.ops.moe_types.MXActivations`:
      dequantised to bf16 exactly, first or in the tensor-core GEMM's registers as
      kcompiler.ops.moe_gemm.MOE_MXFP8_X_IN_REGISTERS says; the result is bf16; see :func:`_moe_mxfp8`).
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
    - ``gemm``: 'auto' ('sm90' for bf16 x and weights on an sm_90 GPU from
      :data:`MOE_SM90_MIN_ROWS_PER_EXPERT` assignments an expert; else kcompiler.ops.moe_gemm's
      tensor-core grouped GEMMs for bf16 activations where the target has 'mma', else std.moe's SIMT
      ones), 'simt' or 'mma' (force one; 'mma' takes bf16 x only), or 'sm90'
      (kcompiler.ops.moe_sm90's grouped GEMMs of std.matmul_sm90, TMA + wgmma, for prefill-sized T on
      an sm_90 GPU or numpy arrays on the CPU target's emulation; bf16, FP8 or MXFP4 weights (FP8: x
      and h quantised per row to E4M3, moe_sm90's accuracy contract; 'auto' does not choose it for FP8;
      MXFP4: decoded exactly to bf16 in shared memory, chosen by 'auto' from
      :data:`MOE_SM90_MXFP4_MIN_ROWS_PER_EXPERT` when set), H and I multiples of 8 (16 for FP8);
      the sum is always the ordered one, ``reduce`` is not used).
    - ``target``: as every op ('auto': where x lives).

    Returns (T, H) in x's dtype and kind. The data flow is the module's (route -> align -> GEMM1 +
    SwiGLU -> GEMM2 (+ reduce)); all of it queued on the device, the host waits for nothing. Up to
    :data:`MOE_FUSED_MAX_ASSIGNMENTS` assignments, routing and alignment are one launch
    (:func:`moe_route_align`), which also zeroes the atomic sums. The host's work is prepared once a
    shape (``PLANS``: by the kinds, shapes, dtypes and devices of x, the logits and the weights' arrays,
    and the options): a later call checks contiguity and alignment, allocates the result and launches,
    with the scratch (routing, h, f32 sums; up to 16 MiB) kept a stream, and no copy between host and
    device. On the
    SIMT path the intermediate h (T * top_k, I) is held in x's dtype (f32 for f32 x), sums in f32.
    Raises TypeError for bad dtypes or kinds (weights must be of x's kind and device), ValueError for
    inconsistent shapes, ``top_k``, ``mode``, ``reduce`` or ``gemm``; 'sm90' also as
    kcompiler.ops.moe_sm90.reason_not says (RuntimeError on a GPU without wgmma)."""
    if isinstance(x, MXActivations):
        return _moe_mxfp8(x, router_logits, w_gate_up, w_down, top_k, mode=mode, renormalize=renormalize,
                          reduce=reduce, gemm=gemm, target=target)
    key = _plan_key(x, router_logits, w_gate_up, w_down, (top_k, mode, bool(renormalize), reduce, gemm, target))
    plan = PLANS.get(key) if key is not None else None
    if plan is not None:
        got = plan(x, router_logits, w_gate_up, w_down)
        if got is not None:
            return got
    inputs = (x, router_logits)
    fn = "moe"
    src = _float_type(x, fn, "x")
    if reduce not in ("atomic", "separate"):
        raise ValueError(f"{fn}: reduce must be 'atomic' or 'separate', not {reduce!r}")
    if gemm not in ("auto", "simt", "mma", "sm90"):
        raise ValueError(f"{fn}: gemm must be 'auto', 'simt', 'mma' or 'sm90', not {gemm!r}")
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
    _same_kind(router_logits, x, fn, "router_logits")
    if tuple(router_logits.shape) != (tokens, e):
        raise ValueError(f"{fn}: router_logits must be (T, E) = {(tokens, e)}, not {tuple(router_logits.shape)}")
    _route_args(router_logits, top_k, mode, renormalize, fn)
    if tokens == 0 or hidden == 0:
        return _zeros(x, (tokens, hidden), src.name)
    rows = {"bf16": MOE_SM90_MIN_ROWS_PER_EXPERT, "mxfp4": MOE_SM90_MXFP4_MIN_ROWS_PER_EXPERT}.get(wg.format)
    if gemm == "auto" and rows is not None and tokens * int(top_k) >= rows * e \
            and target_for(x, target) == "cuda" and src.name == "bf16" \
            and moe_sm90.reason_not(x, wg, wd) is None:  # FP8 on sm90 quantises x: not chosen for the user
        gemm = "sm90"
    if gemm == "sm90":
        why = moe_sm90.reason_not(x, wg, wd)
        if why is not None:
            raise why[0](f"{fn}: {why[1]}")
        ids, wts = moe_route(router_logits, top_k, mode=mode, renormalize=renormalize, target=target)
        routing = moe_align(ids, wts, e, moe_sm90.BLOCK_M, target=target)
        return moe_sm90.moe_sm90(x, routing, wg, wd, target=target)
    tgt = target_for(x, target)
    mod = _common.stdlib_module("moe", tgt)
    use_mma = gemm == "mma" or (gemm == "auto" and mod.target_has("mma")
                                and src.name == "bf16")
    if use_mma and src.name != "bf16":
        raise TypeError(f"{fn}: gemm='mma' (kcompiler.ops.moe_gemm) takes bf16 activations, not {src.name}")
    x, logits = _common.contiguous(x), _common.contiguous(router_logits)
    plan = _MoEPlan(mod, x, logits, wg, wd, int(top_k), mode, renormalize, reduce, use_mma, tgt)
    conv = plan.weights(w_gate_up, w_down)
    if key is not None and plan.aligned(x, *conv) and all(arrays.is_contiguous(a) for a in inputs) \
            and not (data_ptr(x) | data_ptr(conv[0]) | data_ptr(conv[2])) % 16:
        PLANS[key] = plan
        if len(PLANS) > _PLANS_MAX:
            PLANS.popitem(last=False)
    return plan.run(x, logits, w_gate_up, w_down)


def _moe_mxfp8(xq: MXActivations, router_logits: Any, w_gate_up: Any, w_down: Any, top_k: int, *, mode: str,
               renormalize: bool, reduce: str, gemm: str, target: str) -> Any:
    """:func:`moe` for MXFP8 activations (bf16 result): where kcompiler.ops.moe_gemm's tensor-core GEMMs
    run (``gemm`` 'mma', or 'auto' on a target with 'mma'), through its gate/up GEMM
    (:func:`~kcompiler.ops.moe_gemm.moe_gemm_swiglu`: x dequantised first or decoded in its registers);
    elsewhere ('simt', 'sm90', or no 'mma') x is dequantised to bf16 (``ops.mx_dequantize``, exact) for
    :func:`moe`."""
    codes = xq.codes
    if gemm not in ("auto", "simt", "mma") or not (gemm == "mma" or (
            gemm == "auto" and _common.stdlib_module("moe", target_for(codes, target)).target_has("mma"))):
        x = mx_dequantize(codes, xq.scales_as("e8m0"), "bf16", target=target)
        return moe(x, router_logits, w_gate_up, w_down, top_k, mode=mode, renormalize=renormalize, reduce=reduce,
                   gemm=gemm, target=target)
    fn = "moe"
    tokens, hidden = xq.shape
    wg = _weights(w_gate_up, fn, "w_gate_up", codes)
    wd = _weights(w_down, fn, "w_down", codes)
    e, n2, k1 = wg.shape
    if k1 != hidden or n2 % 2 or n2 == 0 or wd.shape != (e, hidden, n2 // 2):
        raise ValueError(f"{fn}: w_gate_up must be (E, 2 I, H) and w_down (E, H, I) with H = {hidden} (x's columns), "
                         f"not {wg.shape} and {wd.shape}")
    if reduce not in ("atomic", "separate"):
        raise ValueError(f"{fn}: reduce must be 'atomic' or 'separate', not {reduce!r}")
    if tuple(router_logits.shape) != (tokens, e):
        raise ValueError(f"{fn}: router_logits must be (T, E) = {(tokens, e)}, not {tuple(router_logits.shape)}")
    ids, wts = moe_route(router_logits, top_k, mode=mode, renormalize=renormalize, target=target)
    if tokens == 0:
        return empty_like(codes, (0, hidden), "bf16")
    routing = moe_align(ids, wts, e, moe_gemm.moe_block_m(tokens, top_k, e, wg.format), target=target)
    h = moe_gemm.moe_gemm_swiglu(xq, wg, routing, target=target)
    y = moe_gemm.moe_gemm_down(h, wd, routing, reduce=reduce, target=target)
    return moe_sum(y, top_k if reduce == "separate" else 1, dtype="bf16", target=target)


# --- prepared calls ------------------------------------------------------------------------------------

#: Prepared calls of :func:`moe` (:class:`_MoEPlan`) by :func:`_plan_key` (the kinds, shapes, dtypes and
#: devices of x, the router logits and the weights' arrays, and the options), the least recently made
#: dropped past 64.
PLANS: "OrderedDict[tuple, _MoEPlan]" = OrderedDict()
_PLANS_MAX = 64
#: Largest scratch (routing, h, the f32 sums) a plan keeps between calls, bytes; larger problems
#: allocate theirs at each call (through torch's caching allocator on a GPU), where it costs little
#: beside the GEMMs.
_SCRATCH_KEPT = 16 << 20


def _plan_key(x: Any, logits: Any, wg: Any, wd: Any, options: tuple) -> tuple | None:
    """The key of a prepared :func:`moe` call, or None where an argument is not a plain array or the
    options are not hashable."""
    arrs = [x, logits]
    fmts = []
    for w in (wg, wd):
        if isinstance(w, ExpertWeights):
            arrs.append(w.data)
            if w.scales is not None:
                arrs.append(w.scales)
            fmts.append(w.format)
        else:
            arrs.append(w)
            fmts.append(None)
    return decode_plan_key("moe", tuple(arrs), options + tuple(fmts))


class _MoEPlan:
    """:func:`moe` for one shape, prepared (its arguments checked once): the routing's and GEMMs'
    launches (``kernel[grid, block]`` objects), their compile-time values and sizes, and the scratch
    arrays kept between calls (:data:`_SCRATCH_KEPT`), one set a stream (a stream runs its calls in
    order, so a call's scratch is free when the next one starts on that stream; none is kept while
    torch captures a CUDA graph). :meth:`run` launches on checked arrays; calling the plan checks what
    :data:`PLANS`' key does not say (contiguity, 16-byte alignment where the tensor-core GEMMs want it),
    then runs (None: not for this plan). Launches a call: routing and alignment 1 (up to
    :data:`MOE_FUSED_MAX_ASSIGNMENTS` assignments; it also zeroes the atomic sums) or 4 (and a zero
    fill), the two GEMMs, and the sum or conversion into the result's dtype unless the f32 sums are
    the result."""

    def __init__(self, mod: Any, x: Any, logits: Any, wg: ExpertWeights, wd: ExpertWeights, top_k: int, mode: str,
                 renormalize: bool, reduce: str, use_mma: bool, target: str):
        self.kind = kind = ArrayKind(x)
        self.mod, self.mma = mod, use_mma
        src = arrays.array_scalar_type(x).name
        t, hidden = (int(d) for d in x.shape)
        e, n2, _ = wg.shape
        inter, n = n2 // 2, t * top_k
        self.sizes = (t, hidden, inter, e, top_k, n)
        _, ld, self.route_kw = _route_args(logits, top_k, mode, renormalize, "moe")
        self.ld = ld
        self.wfmt = (wg.format, wd.format)
        self.fused = n <= MOE_FUSED_MAX_ASSIGNMENTS
        bm = moe_gemm.moe_block_m(t, top_k, e, wg.format) if use_mma else moe_simt_block_m(t, top_k, e)
        self.bm, self.slots = bm, MoERouting.padded_slots(t, top_k, e, bm)
        tiles = self.slots // bm
        self.separate = reduce == "separate"
        atomic = not self.separate
        acc_shape = (n, hidden) if self.separate else (t, hidden)
        # the f32 sums are the result for f32 x on the SIMT path (atomic): a new array each call
        self.acc_is_out = atomic and not use_mma and src == "f32"
        chunks = max(1, -(-n // MOE_ALIGN_CHUNK))
        h_dt = "bf16" if use_mma else src
        spec = [("ids", (t, top_k), "i32"), ("wts", (t, top_k), "f32"), ("sorted", (self.slots,), "i32"),
                ("tile_expert", (tiles,), "i32"), ("num_tiles", (1,), "i32"), ("h", (n, inter), h_dt)]
        if not self.fused:
            spec.append(("counts", (chunks * e,), "i32"))
        if not self.acc_is_out:
            spec.append(("acc", acc_shape, "f32"))
        self.spec = [(name, shape, kind.dtype(dt)) for name, shape, dt in spec]
        nbytes = sum(int(np.prod(shape)) * SCALARS[dt].size for _, shape, dt in spec)
        self.keep = nbytes <= _SCRATCH_KEPT
        self.scratch: dict = {}
        self.acc_shape, self.out_shape, self.out_dt = acc_shape, (t, hidden), kind.dtype(src)
        self.f32 = kind.dtype("f32")
        # routing and alignment
        self.zero_n = t * hidden if atomic and self.fused else 0
        if self.fused:
            nt = _fused_threads(t)
            zblocks = min(-(-self.zero_n // (nt * 4)), 512)
            self.l_route = mod.moe_route_align[1 + zblocks, nt]
        else:
            self.l_route = mod.moe_route[_route_config(t)]
            self.chunks = chunks
            self.l_count = mod.moe_align_count[chunks, 128]
            self.l_scan = mod.moe_align_scan[1, max(64, 1 << (e - 1).bit_length())]
            self.l_scatter = mod.moe_align_scatter[chunks, 64]
        # the GEMMs
        self.weights(wg, wd)
        gdata, gscales, ddata, dscales = self.wconv
        if use_mma:
            gmod = _common.stdlib_module("moe_gemm", target)
            tk = moe_gemm.moe_gemm_tiles(bm, wg.format, "gate_up")
            tk2 = moe_gemm.moe_gemm_tiles(bm, wd.format, "down")
            dec = moe_gemm.MOE_MXFP4_DECODES[moe_gemm.MOE_MXFP4_DECODE]
            has = gmod.target_has("mma")
            self.mma1 = bool(has and hidden % moe_gemm.MOE_VALUES_PER_LOAD[wg.format] == 0
                             and data_ptr(gdata) % 16 == 0 and data_ptr(x) % 16 == 0)
            self.mma2 = bool(has and inter % moe_gemm.MOE_VALUES_PER_LOAD[wd.format] == 0
                             and data_ptr(ddata) % 16 == 0)
            gy = moe_gemm.moe_grid_tiles(t, top_k, e, bm)   # the tiles the routing can use, not every padded one
            self.l_g1 = gmod.moe_gemm1[(-(-inter // (16 * tk["MT"])), gy), 32 * tk["KW"]]
            self.kw_g1 = dict(MMA=self.mma1, DEC=dec, **tk)
            self.xsc = kind.empty((1,), kind.dtype("u8"))   # std.moe_gemm's MXFP8 scales of x: unread for bf16 x
            self.l_g2 = gmod.moe_gemm2[(-(-hidden // (16 * tk2["MT"])), gy), 32 * tk2["KW"]]
            self.kw_g2 = dict(MMA=self.mma2, ATOMIC=atomic, OUT="f32", DEC=dec, **tk2)
        else:
            self.mma1 = self.mma2 = False
            self.l_g1 = mod.moe_gemm1_simt[(tiles, -(-inter // MOE_SIMT_BN)), MOE_SIMT_THREADS]
            self.kw_g1 = dict(FMT=_FMT[wg.format], BM=bm, BN=MOE_SIMT_BN)
            self.l_g2 = mod.moe_gemm2_simt[(tiles, -(-hidden // MOE_SIMT_BN)), MOE_SIMT_THREADS]
            self.kw_g2 = dict(FMT=_FMT[wd.format], BM=bm, SEPARATE=self.separate, BN=MOE_SIMT_BN)
        # the sum (separate) or the conversion of the f32 sums into x's dtype
        self.l_sum = None
        if not self.acc_is_out:
            y = kind.empty(acc_shape, self.f32)
            out = kind.empty(self.out_shape, self.out_dt)
            self.l_sum, self.kw_sum = _sum_launch(mod, y, out, t, hidden, top_k if self.separate else 1)

    def weights(self, wg: Any, wd: Any) -> tuple:
        """The GEMMs' (data, scales) of both weights (kept for the last weights passed, by identity)."""
        last = getattr(self, "wlast", None)
        if last is not None and last[0]() is wg and last[1]() is wd:
            return self.wconv
        g = _weights(wg, "moe", "w_gate_up", wg.data if isinstance(wg, ExpertWeights) else wg)
        d = _weights(wd, "moe", "w_down", g.data)
        conv = moe_gemm._weights if self.mma else (lambda w, like, fn: _kernel_weights(w))
        self.wconv = (*conv(g, g.data, "moe"), *conv(d, d.data, "moe"))
        try:
            self.wlast = (weakref.ref(wg), weakref.ref(wd))
        except TypeError:
            self.wlast = None
        return self.wconv

    def aligned(self, x: Any, gdata: Any, gscales: Any, ddata: Any, dscales: Any) -> bool:
        """Whether the plan's tensor-core choices hold for these arrays (16-byte aligned where they
        said so) and the weights' arrays are contiguous (used in place, not copied)."""
        ok = self.kind.contiguous
        if not (ok(gdata) and ok(gscales) and ok(ddata) and ok(dscales)):
            return False
        return not ((self.mma1 and (data_ptr(x) | data_ptr(gdata)) % 16) or (self.mma2 and data_ptr(ddata) % 16))

    def _scratch(self, stream: Any, x: Any) -> dict:
        return _common.kept(self.scratch, (stream,) if self.keep else None, x,
                            lambda: {name: self.kind.empty(shape, dt) for name, shape, dt in self.spec}, 4)

    def __call__(self, x: Any, logits: Any, wg: Any, wd: Any) -> Any:
        ok = self.kind.contiguous
        if not (ok(x) and ok(logits)):
            return None
        if not self.aligned(x, *self.weights(wg, wd)):
            return None
        return self.run(x, logits, wg, wd)

    def run(self, x: Any, logits: Any, wg: Any, wd: Any) -> Any:
        """The layer on checked, contiguous arrays of the plan's shapes: returns the (T, H) result."""
        t, hidden, inter, e, top_k, n = self.sizes
        stream = self.kind.stream()
        b = self._scratch(stream, x)
        ids, wts, sorted_ids, tile_expert, num_tiles, h = (b["ids"], b["wts"], b["sorted"], b["tile_expert"],
                                                           b["num_tiles"], b["h"])
        acc = self.kind.empty(self.acc_shape, self.f32) if self.acc_is_out else b["acc"]
        slots, tiles, bm = self.slots, self.slots // self.bm, self.bm
        if self.fused:
            self.l_route(logits, self.ld, ids, wts, t, e, bm, sorted_ids, slots, tile_expert, tiles, num_tiles,
                         acc, self.zero_n, stream=stream, **self.route_kw)
        else:
            self.l_route(logits, self.ld, ids, wts, t, e, stream=stream, **self.route_kw)
            flat, counts = ids.reshape(-1), b["counts"]
            self.l_count(flat, n, e, counts, sorted_ids, slots, n, tile_expert, tiles, CHUNK=MOE_ALIGN_CHUNK,
                         stream=stream)
            self.l_scan(counts, self.chunks, e, bm, tile_expert, num_tiles, stream=stream)
            self.l_scatter(flat, n, e, counts, sorted_ids, CHUNK=MOE_ALIGN_CHUNK, stream=stream)
            if not self.separate:
                if self.kind.torch:
                    acc.zero_()
                else:
                    acc.fill(0)
        gdata, gscales, ddata, dscales = self.weights(wg, wd)
        if self.mma:
            self.l_g1(x, self.xsc, gdata, gscales, sorted_ids, tile_expert, num_tiles, h, n, top_k, inter, hidden,
                      stream=stream, **self.kw_g1)
            self.l_g2(h, ddata, dscales, sorted_ids, tile_expert, num_tiles, wts, acc, n, top_k, hidden, inter,
                      stream=stream, **self.kw_g2)
        else:
            self.l_g1(x, gdata, gscales, sorted_ids, tile_expert, num_tiles, h, n, top_k, hidden, inter,
                      stream=stream, **self.kw_g1)
            self.l_g2(h, ddata, dscales, sorted_ids, tile_expert, num_tiles, wts, acc, n, top_k, inter, hidden,
                      stream=stream, **self.kw_g2)
        if self.l_sum is None:
            return acc
        out = self.kind.empty(self.out_shape, self.out_dt)
        self.l_sum(acc, out, hidden, stream=stream, **self.kw_sum)
        return out


__all__ = ["MOE_ALIGN_CHUNK", "MOE_ALIGN_MAX_EXPERTS", "MOE_FUSED_MAX_ASSIGNMENTS", "MOE_MODES", "MOE_ROUTE_MAX_EXPERTS", "MOE_SM90_MIN_ROWS_PER_EXPERT", "MOE_ROUTE_MAX_TOP_K",
           "MOE_SIMT_BN", "MOE_SIMT_THREADS", "moe", "moe_align", "moe_route", "moe_route_align", "moe_simt_block_m", "moe_sum"]
