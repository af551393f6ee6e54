"""kcompiler.ops.matmul's row-wise fused epilogues (std.epilogue's FUSE, stdlib/epilogue.kc): a gated
activation of a merged gate-and-up projection (SwiGLU, GeGLU) and RMSNorm of the output rows, computed
in the product's own kernel instead of a second kernel over its result. :func:`kcompiler.ops.matmul`
sends an epilogue named in :data:`FUSED` here.

Gated (``epilogue='silu_and_mul'``, 'gelu_and_mul', 'gelu_tanh_and_mul'): ``b`` is (K, 2 N), columns 0
.. N - 1 the gate's and N .. 2 N - 1 the up projection's (``w_gate_up.T`` of vLLM's merged (2 N, K)
weight, gate rows first); the result is (M, N), ``act(a @ b[:, :N]) * (a @ b[:, N:])``, each element
rounded once from f32. The kernels read the two halves in place (no reordered copy of the weight):
std.matmul loads matching column groups of 8 of both halves into one B tile (the gate's and up's
products of an output element then lie in one thread's registers; on AMD's MFMA path in lanes 8 apart,
exchanged by one shuffle), std.matmul_sm90 two TMA boxes of BN / 2 rows a stage through a 3-D tensor
map of the weight seen as (2, N, K).

RMSNorm (``epilogue=rms_norm_epilogue(weight, eps, residual)``, or ops.Epilogue('rms_norm' /
'add_rms_norm' / 'fused_add_rms_norm', x=weight, y=residual, s=eps)): ``out = h / sqrt(mean(h^2) +
eps) * weight`` over each row of h = a @ b (f32, unrounded), or with a residual h = residual's
dtype(a @ b + residual), as ops.rms_norm(a @ b, weight, eps, residual) computes it; 'fused_add_rms_norm'
also writes h into the residual (vLLM's fused_add_rms_norm). One block must hold whole rows: N at
most :data:`NORM_MAX_N` (the widest tile), else ValueError.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import arrays
import sys

from . import _common, matmul_sm90
from . import matmul as _  # noqa: F401  (the module: kcompiler.ops.matmul is the function once ops is imported)

_mm = sys.modules[__package__ + ".matmul"]
from ._common import data_ptr, flat, target_for

#: The fused epilogues: name -> (FUSE of std.epilogue, the gate fn GLU for FUSE 1).
FUSED: dict[str, tuple[int, str | None]] = {
    "silu_and_mul": (1, "epilogue.silu_and_mul"), "gelu_and_mul": (1, "epilogue.gelu_and_mul"),
    "gelu_tanh_and_mul": (1, "epilogue.gelu_tanh_and_mul"),
    "rms_norm": (2, None), "add_rms_norm": (3, None), "fused_add_rms_norm": (4, None)}

#: The widest row the RMSNorm epilogue normalises: the widest tile's BN on every path.
NORM_MAX_N = 256

#: std.matmul tiles of the RMSNorm epilogue by the BN that holds the row (tensor cores; SIMT).
_NORM_TILES_MMA = {64: dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=3),
                   128: dict(BM=64, BN=128, BK=32, WM=32, WN=64, STAGES=4),
                   256: dict(BM=64, BN=256, BK=32, WM=32, WN=64, STAGES=3)}
_NORM_TILES_SIMT = {64: dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=2),
                    128: dict(BM=64, BN=128, BK=32, WM=32, WN=64, STAGES=2),
                    256: dict(BM=32, BN=256, BK=32, WM=16, WN=128, STAGES=2)}
#: ... on AMD's MFMA path (std.matmul_amd: 32x32 MFMA tiles, 2 to 4 wavefronts of 64 across the row;
#: not timed on AMD hardware, which none of kcompiler's machines has)
_NORM_TILES_MFMA = {64: dict(BM=32, BN=64, BK=32, WM=32, WN=32, STAGES=2),
                    128: dict(BM=32, BN=128, BK=32, WM=32, WN=64, STAGES=2),
                    256: dict(BM=32, BN=256, BK=32, WM=32, WN=64, STAGES=2)}
#: std.matmul_sm90's configuration of the RMSNorm epilogue by that BN (one consumer warpgroup). Rows
#: of 129 to 256 take std.matmul's tensor-core path instead: with BN = 256 the Hopper store spills
#: (ptxas -v: the 128 accumulators of h, the weights and the residual's addresses beside them).
_NORM_CONFIGS_SM90 = {64: "64x64", 128: "64x128"}


def rms_norm_epilogue(weight: Any, eps: float = 1e-6, residual: Any = None, *,
                      write_residual: bool = False) -> _mm.Epilogue:
    """The :class:`~kcompiler.ops.Epilogue` of RMSNorm over the rows of a product: ``ops.matmul(a, b,
    epilogue=rms_norm_epilogue(w, eps))`` is ``ops.rms_norm(a @ b, w, eps)`` in one kernel (a @ b
    normalised from its f32 accumulators, rounded once). ``weight``: (N,) of any float type;
    ``residual``: None, or an (M, N) array like the result, added first (h = residual's
    dtype(a @ b + residual), normalised), and with ``write_residual`` overwritten with h in place, as
    vLLM's fused_add_rms_norm does. N (the columns of b) must be at most :data:`NORM_MAX_N`:
    :func:`kcompiler.ops.matmul` raises ValueError otherwise."""
    name = "rms_norm" if residual is None else ("fused_add_rms_norm" if write_residual else "add_rms_norm")
    return _mm.Epilogue(name, x=weight, y=residual, s=float(eps))


def fused_matmul(a: Any, b: Any, out: Any, ep: _mm.Epilogue, out_dtype: Any, tiles: dict | None,
                 tune: bool | None, target: str) -> Any:
    """:func:`kcompiler.ops.matmul` with the fused epilogue ``ep`` (a name of :data:`FUSED`; the module
    docstring states each): checks, the Hopper path where it applies, else std.matmul (tensor cores
    or SIMT). Returns ``out`` or a new (M, N) array. Raises ValueError for shapes that do not fit
    (an odd number of gated columns, a row wider than a tile for RMSNorm) and for a block epilogue
    after it; TypeError as :func:`kcompiler.ops.matmul` does."""
    fuse, glu = FUSED[ep.fn]
    if ep.block is not None:
        raise ValueError(f"matmul: epilogue {ep.fn} takes no block epilogue after it")
    src = _mm._operand_type(a, b)
    (M, K), NB = tuple(int(s) for s in a.shape), int(b.shape[1])
    gated = fuse == 1
    if gated and NB % 2:
        raise ValueError(f"matmul: epilogue {ep.fn} reads b as (K, 2 N), gate columns then up columns: b has "
                         f"{NB} columns, an odd number")
    N = NB // 2 if gated else NB
    if not gated and N > NORM_MAX_N:
        raise ValueError(f"matmul: epilogue {ep.fn} normalises whole rows inside one block's tile: N = {N} exceeds "
                         f"the widest tile (BN = {NORM_MAX_N}); run ops.rms_norm on the product instead")
    if tiles is not None:
        tiles = _common.check_tiles(tiles, _mm.MATMUL_TILES["simt"], "matmul")
    if tiles is not None and not gated and tiles["BN"] < N:
        raise ValueError(f"matmul: epilogue {ep.fn} needs the tile to hold a whole row: N = {N} exceeds the tile's "
                         f"BN = {tiles['BN']}")
    out, dst = _mm._matmul_out(a, out, out_dtype, src, M, N)
    x, y = _mm._epilogue_inputs(ep, a, M, N)
    if fuse == 4 and (np.shares_memory(y, out) if isinstance(out, np.ndarray) and isinstance(y, np.ndarray)
                      else data_ptr(y) == data_ptr(out)):
        raise ValueError(f"matmul: epilogue {ep.fn} writes the residual and the result: they must not be one array")
    if M == 0 or N == 0:
        return out
    a = _common.contiguous(a)
    bt = b.T if hasattr(b, "T") else None
    b_kmajor = not arrays.is_contiguous(b) and bt is not None and arrays.is_contiguous(bt)
    b = bt if b_kmajor else _common.contiguous(b)  # K-major: (2 N or N, K) contiguous
    tgt = target_for(a, target)
    fo = flat(out, 1)
    unread = _mm._unread_input(a)
    xs = x if x is not None else unread
    ys = y if y is not None else unread
    if tiles is None and arrays.is_torch_tensor(a) and a.is_cuda and (b_kmajor if gated else N <= 128):
        mod90 = _common.stdlib_module("matmul_sm90", tgt)
        if matmul_sm90.reason_not(mod90, a, b, out, b_kmajor) is None:
            cfg = None if gated else matmul_sm90.CONFIGS[_NORM_CONFIGS_SM90[_norm_bn(N)]]
            epi = ("epilogue.identity", xs if x is not None else fo, ys if y is not None else fo, ep.s)
            matmul_sm90.prepare(mod90, a, b, out, b_kmajor=b_kmajor, config=cfg, epilogue=epi,
                                fuse=(fuse, glu or "epilogue.silu_and_mul"))(out)
            return out
    mod = _common.stdlib_module("matmul", tgt)
    # the path the kernel's comptime tests take, as kcompiler.ops.matmul's: MFMA (AMD CDNA, wavefronts
    # of 64), else mma.sync, else SIMT
    mfma = mod.target_has("mfma") and src.name in ("f16", "bf16")
    tensor_cores = not mfma and mod.target_has("mma") and src.name in ("f16", "bf16")
    ldb = K if b_kmajor else NB
    fa, fb = flat(a, 16), flat(b, 16)
    aligned = K % 8 == 0 and ldb % 8 == 0 and N % 8 == 0 and all(data_ptr(v) % 16 == 0 for v in (fa, fb, fo))
    params = dict(T=src.name, OUT=dst.name, B_KMAJOR=b_kmajor, ALIGNED=aligned, EPI="epilogue.identity", FUSE=fuse)
    if glu is not None:
        params["GLU"] = glu
    pack = (_mm._apart_from(xs, out), ys, np.float32(ep.s))  # y (a residual it may write) stays the caller's
    NL = 16 * -(-N // 8) if gated else N  # B's logical columns (gated: groups of 8 of each half, interleaved)
    stream = _common.stream_of(a)

    def run(t: dict[str, int]) -> None:
        threads = t["BM"] // t["WM"] * (t["BN"] // t["WN"]) * (64 if mfma else 32)
        grid = (-(-NL // t["BN"]), -(-M // t["BM"]))
        mod.matmul_epilogue[grid, threads](fa, fb, fo, M, N, K, K, ldb, N, *pack,
                                           shared=_mm.matmul_shared_bytes(t, src.size, b_kmajor, mfma), stream=stream,
                                           **params, **t)

    if tiles is not None:
        t = tiles
    elif not gated:
        t = dict((_NORM_TILES_MFMA if mfma else _NORM_TILES_MMA if tensor_cores else _NORM_TILES_SIMT)[_norm_bn(N)])
    elif not tensor_cores:
        t = _mm.matmul_tiles(M, NL, K, False)
    else:
        t = _gated_tiles(mod, a, run, params, (M, NL, K), glu, tune)
    run(t)
    return out


def _norm_bn(n: int) -> int:
    """The narrowest tile width of 64, 128, 256 that holds a row of ``n``."""
    return next(bn for bn in (64, 128, 256) if n <= bn)


def _gated_tiles(mod: Any, a: Any, run: Any, params: dict, mnk: tuple[int, int, int], glu: str,
                 tune: bool | None) -> dict[str, int]:
    """Tensor-core tiles of the gated product: :func:`kcompiler.ops.matmul_tuned_tiles` timing the
    gated kernel itself (it reads no input but a and b) on device arrays, for the size class of the
    (M, 2 N, K) product; :func:`kcompiler.ops.matmul_tiles` otherwise."""
    M, NL, K = mnk
    problem = dict(op="matmul_gated", GLU=glu, M=_mm._size_class(M), N=_mm._size_class(NL), K=_mm._size_class(K),
                   **{k: params[k] for k in ("T", "OUT", "B_KMAJOR", "ALIGNED")}, target=mod.target, arch=mod.arch,
                   device=str(getattr(mod.device, "name", "")), source=_mm._matmul_source_sha())
    on_device = data_ptr(a) != 0
    default = _mm.matmul_tiles(M, NL, K, True, _common.device_of(mod, a).multiprocessor_count)
    return _mm.matmul_tuned_tiles(problem, run, default, tune=tune if on_device and not _common.capturing(a) else False,
                                  synchronize=mod.device.synchronize)


__all__ = ["FUSED", "NORM_MAX_N", "fused_matmul", "rms_norm_epilogue"]
