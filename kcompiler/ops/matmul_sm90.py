"""The host side of std.matmul's Hopper path (stdlib/matmul_sm90.kc): when it applies, the TMA tensor
maps of A and B, the kernel a call takes and its persistent launch, kept by shape (:data:`PLANS`). The
tile configurations and their choice live in kcompiler.ops.matmul_sm90_tiles (re-exported here).
kcompiler.ops.matmul and kcompiler.ops.scaled_matmul call :func:`run` where :func:`reason_not` finds
nothing against it; numpy FP8 arrays run the same kernel on the CPU target's emulation
(:func:`scaled_matmul_cpu`).
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from .. import compile as compile_source, compile_file
from ..frontend.program import stdlib_dir
from ..ir.types import SCALARS
from ..runtime import arrays
from ..runtime.tensormap import cached_tensor_map
from . import _common
from .matmul_sm90_tiles import (BK, CHOICE_MAX_M, CHOICES, CONFIGS, ONE_WAVE, SMALL_M_SHARED, SMALLEST,
                                WAVE_ALTERNATIVES, WAVE_MARGIN, choose, choose_split, shared_bytes, small_m_rows,
                                tail_shares, tile_m)


def reason_not(mod: Any, a: Any, b: Any, out: Any, b_kmajor: bool = True) -> str | None:
    """Why the Hopper path cannot compute ``out = a @ B`` with ``mod`` (std.matmul_sm90 compiled for
    the tensors' GPU), or None when it can. a: M x K row-major; b: B stored N x K row-major
    (``b_kmajor``) or K x N row-major (N-major, 16-bit types only). It needs contiguous torch CUDA
    tensors, a target with wgmma (sm_90a), a dtype of :data:`BK`, and rows of a multiple of 16 bytes
    starting 16-byte aligned (TMA's rules)."""
    if not all(arrays.is_torch_tensor(x) and x.is_cuda for x in (a, b, out)):
        return "the Hopper path takes torch CUDA tensors"
    if not mod.target_has("wgmma"):
        return "the Hopper path needs an sm_90 GPU"
    t = arrays.array_scalar_type(a)
    if t is None or t.name not in BK or arrays.array_scalar_type(b) != t:
        return "the Hopper path multiplies bf16, f16, f8e4m3 or f8e5m2"
    if not b_kmajor and t.size != 2:
        return "wgmma reads FP8 B K-major only"
    if not (a.is_contiguous() and b.is_contiguous() and out.is_contiguous()):
        return "the Hopper path takes contiguous matrices"
    if 0 in tuple(a.shape) + tuple(b.shape):
        return "a tensor map describes no empty matrix"
    if any((int(x.shape[1]) * t.size) % 16 or x.data_ptr() % 16 for x in (a, b)):
        return _ROWS
    return None


_ROWS = "TMA needs rows of a multiple of 16 bytes, 16-byte aligned"


def operand_b(mod: Any, a: Any, b: Any, out: Any, b_kmajor: bool) -> tuple[Any, bool] | None:
    """B as the Hopper path takes it for ``out = a @ B`` (``mod`` and b as :func:`reason_not` takes
    them): ``(b, b_kmajor)`` where :func:`reason_not` finds nothing against it; for a row-major B
    whose rows TMA cannot describe (N not a multiple of 16 bytes) a K-major copy, ``(B^T contiguous,
    True)``, where that one's rows can be; else None (the path does not apply)."""
    why = reason_not(mod, a, b, out, b_kmajor)
    if why is None:
        return b, b_kmajor
    if b_kmajor or why != _ROWS or (int(a.shape[1]) * a.element_size()) % 16 or a.data_ptr() % 16:
        return None
    bt = b.t().contiguous()
    return (bt, True) if reason_not(mod, a, bt, out, True) is None else None


def tma_store_applies(cfg: dict, out: Any, split_k: int, block: Any, fuse: Any) -> bool:
    """Whether configuration ``cfg``'s TMA store epilogue (EPI_TMA) can store into ``out`` (M, N): a
    16-bit out (bf16, f16) whose rows TMA can describe (N a multiple of 8, 16-byte aligned), a
    cooperative tile (clusters or not), no split-K, no block or fused epilogue (the kernel's rule)."""
    o = arrays.array_scalar_type(out)
    if not cfg.get("EPI_TMA") or o is None or o.name not in ("bf16", "f16") or split_k != 1 or block is not None \
            or fuse is not None or cfg.get("PINGPONG"):
        return False
    address = arrays.device_pointer(out) if arrays.is_device_array(out) else out.ctypes.data
    return int(out.shape[1]) % 8 == 0 and address % 16 == 0


def run(mod: Any, a: Any, b: Any, out: Any, **options: Any) -> Any:
    """``out = EPI(scale * (a @ B))``: :func:`prepare`'s launch, made for ``out``. Returns out."""
    return prepare(mod, a, b, out, **options)(out)


def prepare(mod: Any, a: Any, b: Any, out: Any, *, b_kmajor: bool = True, scale_a: Any = None,
            scale_b: Any = None, scale: int = 0, config: dict | None = None, epilogue: tuple | None = None,
            block: tuple | None = None, stream: Any = None, sms: int | None = None,
            split_k: int | None = None, fuse: tuple | None = None) -> Callable[[Any], Any]:
    """``out = EPI(scale * (a @ B))`` by std.matmul_sm90 (``mod``: that module, compiled for CUDA, or a
    module of a user's epilogue that defines kernel matmul_sm90_epilogue, :func:`epilogue_module`):
    a (M, K) and b (B as (N, K) with ``b_kmajor``, else (K, N)) of one dtype of :data:`BK`, out (M, N)
    of f32, bf16, f16 or FP8, all contiguous torch CUDA tensors that :func:`reason_not` accepts.
    ``scale``: 0 none, 1 by ``scale_a[0] * scale_b[0]`` (per tensor), 2 by ``scale_a[row] *
    scale_b[col]`` (per row of A, per column of C); scales are f32 CUDA tensors. ``epilogue``: None, or
    (EPI, x, y, s): the epilogue fn's name as the module sees it, its inputs (flat CUDA tensors) and
    scalar. ``block``: None, or (BEPI, z): a block epilogue (std.epilogue's second kind, blocks of 32
    columns; N must be a multiple of 32) applied after ``epilogue`` and its array z (the MX epilogues:
    the (M, N / 32) E8M0 scales, written); it takes kernel matmul_sm90_block_epilogue. ``config``: one
    of :data:`CONFIGS` (a dict, or its name; default :func:`choose`); one with TAIL_SPLIT (the tail split:
    the partial last wave's tiles cut along K into shares, :func:`tail_shares`) takes the split-K
    workspace for them, and no split-K, clusters, ping-pong, block epilogue, RMSNorm or user's epilogue
    module (ValueError). ``sms``: the blocks of the persistent grid (default:
    the device's multiprocessors). ``split_k`` > 1 cuts each tile's K loop into that many work units
    whose f32 partial products the kernel adds up itself (in share order: deterministic) before the
    epilogue and the store, through a workspace kept per device (:func:`_split_workspace`; launches
    on several streams at once must not split); not with ``block``; None (default):
    :func:`choose_split`, 1 with ``block``; a configuration with CLUSTER_M > 1 takes no split
    (ValueError) and rounds the grid down to whole clusters. A configuration with EPI_TMA stores C by
    TMA (kernel matmul_sm90_tma, a tensor map of each output made at its call) where
    :func:`tma_store_applies`, else as one without. numpy arrays run on the CPU target's
    emulation (``mod`` compiled with ``target_options={"emulate_wgmma": True}``; no clusters there).

    ``fuse``: None, or (FUSE, GLU), std.epilogue's fused row-wise epilogues (with ``epilogue``, whose
    x, y and s they read; no scales, no ``block``): FUSE 1, a gated activation GLU ('epilogue.silu_and_mul',
    ...): b is the K-major (2 N, K) gate-and-up weight (gate rows first), out (M, N), read through a
    3-D tensor map of b as (2, N, K) (two boxes of BN / 2 rows a stage; K a multiple of 8); FUSE 2 to 4,
    RMSNorm of out's rows, which ``config``'s BN must hold (N <= BN; never split).

    Returns the launch as a callable ``go(c)`` (returns c): it computes the product into ``c``, ``out``
    or an array like it (shape, strides, dtype, device, 16-byte alignment), with everything else fixed
    now: the tensor maps of a and B (their addresses, shapes and strides; not their contents, which
    are read at each launch), the choices, the workspace, the epilogue's inputs (with ``block``
    and no ``epilogue``: out's own address stands in for the unread inputs). kcompiler.ops keeps such
    launches for repeated calls on the same operands (their host work then is the launch alone)."""
    M, K = (int(s) for s in a.shape)
    N = int(b.shape[0] if b_kmajor else b.shape[1])
    gated = fuse is not None and fuse[0] == 1
    if gated:
        N //= 2  # C's columns: half of B's
    t = arrays.array_scalar_type(a).name
    o = arrays.array_scalar_type(out).name
    sms = sms or (_common.device_of(mod, a).multiprocessor_count if arrays.is_torch_tensor(a) else 8)
    if isinstance(config, str):
        if config not in CONFIGS:
            raise ValueError(f"matmul_sm90.run: no configuration {config!r}; CONFIGS: {', '.join(CONFIGS)}")
        config = CONFIGS[config]
    cfg = dict(config) if config is not None else \
        choose(M, 2 * N if gated else N, K, sms, b_kmajor, 32 if gated or block is not None else 8)
    bk = BK[t]
    bm = tile_m(cfg)
    cm = cfg.get("CLUSTER_M", 1)
    tail_split = int(cfg.pop("TAIL_SPLIT", 0))
    if tail_split:
        _tail_split_check(mod, cfg, tail_split, split_k, block, fuse)
        split_k = 1
    # small M: fewer rows of A a stage, more stages (small_m_rows: not with the TMA store), on the plain and
    # epilogue kernels; a configuration's own AROWS stands, 0 for none
    if "AROWS" not in cfg and block is None:
        cfg.update(small_m_rows(M, cfg))
    if cfg.get("AROWS") == 0:
        del cfg["AROWS"]
    if "AROWS" in cfg and (M > cfg["AROWS"] or block is not None or cfg.get("EPI_TMA")):
        raise ValueError(f"matmul_sm90.run: AROWS {cfg['AROWS']} holds M <= AROWS rows, without a block epilogue "
                         f"or the TMA store (M = {M})")
    ta = cached_tensor_map(a, (cfg.get("AROWS", bm), bk))
    if gated:  # cooperative, without clusters (the kernel's FUSE rule)
        tb = cached_tensor_map(b.reshape(2, N, K), (1, cfg["BN"] // 2, bk))
    else:
        # clusters: each block of a cluster loads its 1 / CLUSTER_M of the B tile (multicast to all)
        tb = cached_tensor_map(b, (cfg["BN"] // cm, bk) if b_kmajor else (bk, 64))
    tiles = -(-M // bm) * -(-N // (cfg["BN"] // 2 if gated else cfg["BN"]))
    grid = max(1, min(tiles, sms))
    if cm > 1:  # whole clusters, each on CLUSTER_M tiles of a column at once
        grid = max(cm, min(-(-M // (bm * cm)) * -(-N // cfg["BN"]) * cm, sms // cm * cm))
        if split_k not in (None, 1):
            raise ValueError("matmul_sm90.run: clusters (CLUSTER_M > 1) do not split K")
        split_k = 1
    if split_k is None:
        split_k = choose_split(M, 2 * N if gated else N, K, cfg, bk, sms) \
            if block is None and (fuse is None or gated) else 1
    if scale_a is None:
        scale_a = scale_b = _dummy_f32(a.device if arrays.is_torch_tensor(a) else None)  # not read (scale 0)
    aligned = arrays.device_pointer(out) % 16 == 0 and N % 2 == 0 if arrays.is_device_array(out) else N % 2 == 0
    epi_tma = cfg.pop("EPI_TMA", 0)
    epi_bar = bool(cfg.pop("EPI_BAR", False))  # the TMA store's meeting on named barriers (that kernel's only)
    params = dict(T=t, OUT=o, BK=bk, SCALE=scale, ALIGNED=aligned, B_KMAJOR=b_kmajor, **cfg)
    ws, counts = scale_a, _dummy_u32(a.device if arrays.is_torch_tensor(a) else None)  # not read unsplit
    if split_k > 1:
        if block is not None:
            raise ValueError("matmul_sm90.run: split-K does not take a block epilogue")
        ws, counts = _split_workspace(a, tiles * 2 * bm, split_k * cfg["BN"] // 2)  # a slot a thread of a tile
        tiles *= split_k
        grid = max(1, min(tiles, sms))
        params["SPLIT_K"] = int(split_k)
    if tail_split:
        params["TAIL_SPLIT"] = tail_split
        tail, shares = tail_shares(tiles, grid, tail_split)
        if shares > 1:  # the tail's partials: `shares` of them for each thread of a tail tile
            ws, counts = _split_workspace(a, tail * 2 * bm, shares * cfg["BN"] // 2)
    args = [ta, tb, None, M, N, K, N, scale_a, scale_b]
    kernel = _kernel(mod, cfg, params, args, out, epi_tma, epi_bar, epilogue, block, fuse, split_k, ws, counts)
    launch = kernel[grid, 128 * (cfg["CONSUMERS"] + 1)]
    return _launcher(launch, args[:2], args[3:], shared_bytes(cfg, t), params, stream,
                     epi_box(cfg) if cfg["EPI_TMA"] else 0)


def _tail_split_check(mod: Any, cfg: dict, tail_split: int, split_k: int | None, block: Any, fuse: Any) -> None:
    """:func:`prepare`'s checks of a configuration with TAIL_SPLIT (the kernel's rule: at least 2; a
    cooperative tile without clusters, split-K, a block epilogue or a fused RMSNorm; std.matmul_sm90's own
    kernels, not a user's epilogue module's). Raises ValueError."""
    if tail_split < 2 or cfg.get("PINGPONG") or cfg.get("CLUSTER_M", 1) > 1 or split_k not in (None, 1) \
            or block is not None or (fuse is not None and fuse[0] != 1) or not hasattr(mod, "matmul_sm90_tma"):
        raise ValueError("matmul_sm90.run: TAIL_SPLIT is at least 2, for a cooperative tile without clusters, "
                         "split-K, a block epilogue or RMSNorm, on std.matmul_sm90's own kernels")


def _kernel(mod: Any, cfg: dict, params: dict, args: list, out: Any, epi_tma: int, epi_bar: bool,
            epilogue: tuple | None, block: tuple | None, fuse: tuple | None, split_k: int, ws: Any,
            counts: Any) -> Any:
    """:func:`prepare`'s kernel of ``mod`` for its options, with ``params`` (the comptime values) and
    ``args`` (a, B, C's place, M, N, K, ldc, the scales) completed for it in place: matmul_sm90_tma
    where configuration ``cfg``'s TMA store (``epi_tma``; ``epi_bar``: its meeting on named barriers)
    applies (:func:`tma_store_applies`; set in ``cfg["EPI_TMA"]``, 0 where not), else
    matmul_sm90_block_epilogue (``block``), matmul_sm90 (no ``epilogue``) or matmul_sm90_epilogue
    (with ``fuse``'s FUSE and GLU)."""
    # (a user's epilogue module, epilogue_module, has no matmul_sm90_tma: the register store there)
    cfg["EPI_TMA"] = epi_tma if tma_store_applies({**cfg, "EPI_TMA": epi_tma}, out, split_k, block, fuse) \
        and hasattr(mod, "matmul_sm90_tma") else 0
    if cfg["EPI_TMA"]:
        fn, x, y, s = epilogue if epilogue is not None else ("epilogue.identity", out.reshape(-1),
                                                             out.reshape(-1), 1.0)
        kernel = mod.matmul_sm90_tma
        params.update(EPI=fn, EPI_TMA=cfg["EPI_TMA"], **({"EPI_BAR": True} if epi_bar else {}))
        args += [x, y, float(s), ws, counts]
    elif block is not None:
        fn, x, y, s = epilogue if epilogue is not None else ("epilogue.identity", out.reshape(-1),
                                                             out.reshape(-1), 1.0)
        kernel = mod.matmul_sm90_block_epilogue
        params.update(EPI=fn, BLOCK=32, BEPI=block[0])
        args += [x, y, float(s), block[1]]
    elif epilogue is None:
        kernel = mod.matmul_sm90
        args += [ws, counts]
    else:
        fn, x, y, s = epilogue
        kernel = mod.matmul_sm90_epilogue
        params["EPI"] = fn
        if fuse is not None:
            params.update(FUSE=int(fuse[0]), GLU=fuse[1])
        args += [x, y, float(s), ws, counts]
    return kernel


def epi_box(cfg: dict) -> int:
    """The columns of a box of the TMA store epilogue (std.matmul_sm90_store's store_tile_tma: C's tensor
    map has box (64, epi_box), swizzled by its 2 epi_box bytes): 64 where the tile's BN is a multiple of
    64, else 32 (BN 224)."""
    return 64 if cfg["BN"] % 64 == 0 else 32


def _launcher(launch: Any, head: list, tail: list, shared: int, params: dict, stream: Any,
              box: int) -> Callable[[Any], Any]:
    """:func:`prepare`'s ``go(c)`` (returns c): ``launch`` (the kernel and its grid) on ``head`` (the
    tensor maps of a and B), C (its flat view, after the tensor map of this call's C where ``box``, the
    columns of that map's box, :func:`epi_box`, is not 0: the TMA store), ``tail`` (the other
    arguments), ``shared`` bytes of shared memory and ``params``;
    on ``stream``, or torch's current stream of c at each call where None."""
    if box:
        def go(c: Any) -> Any:  # the tensor map of this call's C (box: 64 rows of `box` columns, swizzled)
            launch(*head, cached_tensor_map(c, (64, box), swizzle=2 * box), c.reshape(-1), *tail,
                   shared=shared, stream=_common.stream_of(c) if stream is None else stream, **params)
            return c
        return go

    def go(c: Any) -> Any:
        # stream None: torch's current stream of c at each call (a kept plan may run under
        # torch.cuda.graph or another torch.cuda.stream than where it was made)
        launch(*head, c.reshape(-1), *tail, shared=shared,
               stream=_common.stream_of(c) if stream is None else stream, **params)
        return c
    return go


#: Launches prepared for repeated calls (kcompiler.ops.matmul, :func:`scaled_matmul`), by :func:`plan_key`:
#: the host's work for a call on the same operands is then the key and the launch (tens of microseconds
#: less, which is most of a small-M product's time: benchmarks/RESULTS.md).
PLANS: "OrderedDict[tuple, Callable[[Any], Any]]" = OrderedDict()


def plan_key(kind: str, operands: tuple, out: Any, *extra: Any) -> tuple | None:
    """The key of a prepared launch for torch ``operands`` (address, shape, strides, dtype, device
    each) and ``out`` (None, or its shape, strides, dtype, device and 16-byte alignment: its address
    is an argument of each launch); None where an operand is not a torch tensor. ``extra``: the
    call's other arguments that the launch depends on (hashable)."""
    try:
        key = tuple((x.data_ptr(), x.shape, x.stride(), x.dtype, x.device) for x in operands)
        o = None if out is None else (out.shape, out.stride(), out.dtype, out.device, out.data_ptr() % 16 == 0)
    except AttributeError:  # numpy, CuPy, ...: no plans
        return None
    return (kind, key, o, extra)


def remember(key: tuple | None, go: Callable[[Any], Any], shape: tuple, dtype: Any, device: Any) -> None:
    """Keep ``go`` (a :func:`prepare` launch) under ``key`` as a plan taking the output, or None for a
    new one of ``shape``, ``dtype`` on ``device``."""
    if key is None:
        return

    def plan(c: Any) -> Any:
        if c is None:
            import torch  # deferred: torch is optional
            c = torch.empty(shape, dtype=dtype, device=device)
        return go(c)
    PLANS[key] = plan
    if len(PLANS) > 512:
        PLANS.popitem(last=False)


_WORKSPACES: dict = {}


def _split_workspace(like: Any, slots: int, per_slot: int) -> tuple[Any, Any]:
    """Split-K's workspace on ``like``'s device: ``slots * per_slot`` f32 for the partial products and
    ``slots`` u32 counts, zero (the kernel leaves them zero). Kept per device and grown as needed; a
    numpy pair for numpy ``like`` (the CPU target's emulation), fresh each time."""
    if not arrays.is_torch_tensor(like):
        return np.zeros(slots * per_slot, np.float32), np.zeros(slots, np.uint32)
    import torch  # deferred: torch is optional
    key = str(like.device)
    ws, counts = _WORKSPACES.get(key, (None, None))
    if ws is None or ws.numel() < slots * per_slot or counts.numel() < slots:
        ws = torch.empty(max(slots * per_slot, 1 << 20), dtype=torch.float32, device=like.device)
        counts = torch.zeros(max(slots, 1 << 14), dtype=torch.uint32, device=like.device)
        _WORKSPACES[key] = (ws, counts)
    return ws, counts


@functools.lru_cache(maxsize=None)
def _dummy_f32(device: Any) -> Any:
    """A one-element f32 array on ``device`` (a torch device; None: a numpy array)."""
    if device is None:
        return np.zeros(1, np.float32)
    import torch  # deferred: torch is optional
    return torch.zeros(1, dtype=torch.float32, device=device)


@functools.lru_cache(maxsize=None)
def _dummy_u32(device: Any) -> Any:
    """A one-element u32 array on ``device`` (a torch device; None: a numpy array)."""
    if device is None:
        return np.zeros(1, np.uint32)
    import torch  # deferred: torch is optional
    return torch.zeros(1, dtype=torch.uint32, device=device)


#: The kernel a user's epilogue source is compiled with (appended to it, so that its lines keep their
#: numbers in messages), as kcompiler.ops does for std.matmul.
_EPILOGUE_KERNEL = """
import std.matmul_sm90 as kc_std_matmul_sm90
import std.epilogue as kc_std_epilogue
kernel matmul_sm90_epilogue[T: type, OUT: type, BK: i32, BN: i32, CONSUMERS: i32, STAGES: i32, GROUP_M: i32,
                            SCALE: i32, ALIGNED: bool, B_KMAJOR: bool, X: type, Y: type,
                            EPI: fn(acc: f32, row: i32, col: i32, ld: i32, x: ptr<X>, y: ptr<Y>, s: f32) -> f32,
                            SPLIT_K: i32 = 1, PINGPONG: bool = false, WG_M: i32 = 1, CLUSTER_M: i32 = 1,
                            AROWS: i32 = 0](
        ta: tensor_map, tb: tensor_map, c: ptr<OUT>, M: i32, N: i32, K: i32, ldc: i32, sa: ptr<f32>,
        sb: ptr<f32>, x: ptr<X>, y: ptr<Y>, s: f32, ws: ptr<f32>, counts: ptr<u32>) {
    launch_bounds(128 * (CONSUMERS + 1), 1);
    comptime if CLUSTER_M > 1 {
        cluster_dims(CLUSTER_M);
    }
    kc_std_matmul_sm90.gemm_sm90[T, OUT, BK, BN, CONSUMERS, STAGES, GROUP_M, SCALE, ALIGNED, B_KMAJOR, SPLIT_K, X, Y,
                                 EPI, OUT, 0, kc_std_epilogue.block_identity, PINGPONG, WG_M, CLUSTER_M, 0,
                                 kc_std_epilogue.silu_and_mul, false, 0, false, 0, AROWS](
        ta, tb, c, M, N, K, ldc, sa, sb, x, y, s, c, ws, counts, bitcast[ptr<i32>](counts), bitcast[ptr<i32>](counts),
        ta);
}
kernel matmul_sm90_block_epilogue[T: type, OUT: type, BK: i32, BN: i32, CONSUMERS: i32, STAGES: i32, GROUP_M: i32,
                                  SCALE: i32, ALIGNED: bool, B_KMAJOR: bool, X: type, Y: type,
                                  EPI: fn(acc: f32, row: i32, col: i32, ld: i32, x: ptr<X>, y: ptr<Y>, s: f32) -> f32,
                                  Z: type, BLOCK: i32, BEPI: fn, PINGPONG: bool = false, WG_M: i32 = 1,
                                  CLUSTER_M: i32 = 1](
        ta: tensor_map, tb: tensor_map, c: ptr<OUT>, M: i32, N: i32, K: i32, ldc: i32, sa: ptr<f32>,
        sb: ptr<f32>, x: ptr<X>, y: ptr<Y>, s: f32, z: ptr<Z>) {
    launch_bounds(128 * (CONSUMERS + 1), 1);
    comptime if CLUSTER_M > 1 {
        cluster_dims(CLUSTER_M);
    }
    kc_std_matmul_sm90.gemm_sm90[T, OUT, BK, BN, CONSUMERS, STAGES, GROUP_M, SCALE, ALIGNED, B_KMAJOR, 1, X, Y, EPI,
                                 Z, BLOCK, BEPI, PINGPONG, WG_M, CLUSTER_M](
        ta, tb, c, M, N, K, ldc, sa, sb, x, y, s, z, sa, bitcast[ptr<u32>](sb), bitcast[ptr<i32>](sb),
        bitcast[ptr<i32>](sb), ta);
}
"""


@functools.lru_cache(maxsize=64)
def epilogue_module(source: str, target: str = "cuda", arch: str | None = None) -> Any:
    """A module of a user's epilogue ``source`` with kernel matmul_sm90_epilogue (std.matmul_sm90's
    body calling the source's fn), for CUDA (``target``/``arch`` as kcompiler.compile takes them)."""
    return compile_source(source.rstrip("\n") + "\n" + _EPILOGUE_KERNEL, target=target, arch=arch,
                          path="<kcompiler.ops.matmul epilogue (Hopper path)>")


def scaled_matmul(a: Any, b: Any, scale_a: Any, scale_b: Any, *, out_dtype: Any = None, out: Any = None) -> Any:
    """``(a @ b) * scale_a * scale_b`` for FP8 ``a`` (M, K) and ``b`` (K, N) (f8e4m3 or f8e5m2, mixed
    allowed; torch CUDA tensors), f32 accumulation, the scales applied to the f32 result before its
    one rounding into ``out_dtype`` (bf16 default, f16 or f32) — torch._scaled_mm's contract. ``b`` is
    K-major (``b.T`` contiguous: the layout wgmma reads FP8 in; a Linear weight ``w`` gives ``b =
    w.T``). Scales are f32 tensors: one element each (per tensor), or ``scale_a`` of M elements ((M,
    1) or (M,)) and ``scale_b`` of N ((1, N) or (N,)) (per row of A, per column of B). Runs on the
    Hopper path only (an sm_90 GPU). Raises TypeError / ValueError for arguments that do not fit,
    RuntimeError where the Hopper path cannot run. numpy FP8 arrays: :func:`scaled_matmul_cpu` (the
    same kernel on the CPU target's emulation; kcompiler.ops.scaled_matmul sends them there)."""
    import torch  # deferred: torch is optional

    key = plan_key("scaled_matmul", (a, b, scale_a, scale_b), out, out_dtype) \
        if isinstance(scale_a, torch.Tensor) and isinstance(scale_b, torch.Tensor) else None
    plan = PLANS.get(key) if key is not None else None
    if plan is not None:
        return plan(out)
    fp8 = ("f8e4m3", "f8e5m2")
    ta, tb = (arrays.array_scalar_type(x) if arrays.is_array(x) else None for x in (a, b))
    if ta is None or tb is None or ta.name not in fp8 or tb.name not in fp8:
        raise TypeError(f"scaled_matmul: a and b must be FP8 (f8e4m3, f8e5m2), not {arrays.describe(a)} and "
                        f"{arrays.describe(b)}")
    if ta != tb:
        raise TypeError("scaled_matmul: a and b of one FP8 type (mixed e4m3 x e5m2 is not wired up yet)")
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"scaled_matmul: a (M, K) and b (K, N), not {tuple(a.shape)} and {tuple(b.shape)}")
    M, K = (int(x) for x in a.shape)
    N = int(b.shape[1])
    b_nk = b.T
    if not b_nk.is_contiguous():
        raise ValueError("scaled_matmul: b must be K-major (b.T contiguous), as wgmma reads FP8")
    name = "bf16" if out_dtype is None else (out_dtype if isinstance(out_dtype, str)
                                              else arrays.scalar_of_dtype(out_dtype).name)
    if name not in ("bf16", "f16", "f32"):
        raise TypeError(f"scaled_matmul: out_dtype must be bf16, f16 or f32, not {out_dtype!r}")
    if out is None:
        out = torch.empty((M, N), dtype=getattr(torch, _common.TORCH_DTYPES[name]), device=a.device)
    elif tuple(out.shape) != (M, N) or not out.is_contiguous():
        raise ValueError(f"scaled_matmul: out must be a contiguous ({M}, {N}) tensor")
    sa = torch.as_tensor(scale_a, dtype=torch.float32, device=a.device).reshape(-1).contiguous()
    sb = torch.as_tensor(scale_b, dtype=torch.float32, device=a.device).reshape(-1).contiguous()
    if sa.numel() == 1 and sb.numel() == 1:
        mode = 1
    elif sa.numel() == M and sb.numel() == N:
        mode = 2
    else:
        raise ValueError(f"scaled_matmul: scales of one element each, or of M = {M} and N = {N} elements, not "
                         f"{sa.numel()} and {sb.numel()}")
    if M == 0 or N == 0 or K == 0:
        return out.zero_()
    mod = _common.stdlib_module("matmul_sm90", "cuda")
    why = reason_not(mod, a, b_nk, out, True)
    if why is not None:
        raise RuntimeError(f"scaled_matmul: {why}")
    go = prepare(mod, a, b_nk, out, scale_a=sa, scale_b=sb, scale=mode)
    # a plan only where the scales are the caller's tensors, not copies: they are read at each launch
    if key is not None and sa.data_ptr() == scale_a.data_ptr() and sb.data_ptr() == scale_b.data_ptr():
        remember(key, go, (M, N), out.dtype, out.device)
    return go(out)


# --- numpy FP8 arrays: the same kernel on the CPU target's emulation ------------------------------------
# std.matmul_sm90 (TMA, wgmma, mbarriers) run on the CPU target's emulation of those instructions
# (``target_options={"emulate_wgmma": True}``, backends/cpu/hopper.py), with torch._scaled_mm's
# contract; no torch needed.

_FP8 = ("f8e4m3", "f8e5m2")
_OUTS = ("bf16", "f16", "f32")


@functools.lru_cache(maxsize=None)
def _cpu_module() -> Any:
    """std.matmul_sm90 for the CPU target with wgmma, TMA and mbarriers emulated (compiled once a
    process; the disk cache keeps it across processes)."""
    d = stdlib_dir()
    if d is None:
        raise RuntimeError("kcompiler's standard library (stdlib/) is not installed")
    return compile_file(d / "matmul_sm90.kc", target="cpu", target_options={"emulate_wgmma": True})


def _scale(s: Any, name: str) -> np.ndarray:
    try:
        v = np.asarray(s, dtype=np.float32)
    except (TypeError, ValueError):
        raise TypeError(f"scaled_matmul: {name} must be f32 numbers (a numpy array or a float), not "
                        f"{arrays.describe(s)}") from None
    return np.ascontiguousarray(v.reshape(-1))


def _padded(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``x`` as a C-contiguous, 16-byte aligned (rows, cols) array, zero past its own columns (TMA
    reads rows of a multiple of 16 bytes from a 16-byte aligned address)."""
    if x.shape == (rows, cols) and x.flags.c_contiguous and x.ctypes.data % 16 == 0:
        return x
    buf = np.zeros(rows * cols + 16, np.uint8)  # FP8: one byte an element
    off = -buf.ctypes.data % 16
    y = buf[off:off + rows * cols].view(x.dtype).reshape(rows, cols)
    y[:, :x.shape[1]] = x
    return y


def scaled_matmul_cpu(a: Any, b: Any, scale_a: Any, scale_b: Any, *, out_dtype: Any = None,
                      out: Any = None) -> np.ndarray:
    """``(a @ b) * scale_a * scale_b`` for numpy FP8 ``a`` (M, K) and ``b`` (K, N) of one type
    (ml_dtypes float8_e4m3fn or float8_e5m2), on the CPU target.

    f32 accumulation; the scales multiply the f32 product, which is then rounded once into
    ``out_dtype`` (bf16, the default, as ml_dtypes.bfloat16; f16; f32; a numpy / ml_dtypes dtype or
    the type's name) or written into ``out``, a C-contiguous (M, N) numpy array of one of those
    (returned). Scales (f32; floats are converted): one element each (per tensor), or ``scale_a`` of
    M elements ((M, 1) or (M,)) and ``scale_b`` of N ((1, N) or (N,)) (per row of A, per column of B),
    as torch._scaled_mm takes them. ``b`` may have any layout (torch wants it K-major, ``w.T``; here
    it is copied to the layout the kernel reads, and K is padded with zeros to a multiple of 16).

    Raises TypeError for arrays that are not numpy FP8 of one type, or another out dtype, ValueError
    for shapes or scales that do not fit."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        raise TypeError(f"scaled_matmul: a and b must both be numpy arrays (or both torch CUDA tensors), "
                        f"not {arrays.describe(a)} and {arrays.describe(b)}")
    ta, tb = arrays.array_scalar_type(a), arrays.array_scalar_type(b)
    if ta is None or tb is None or ta.name not in _FP8 or tb.name not in _FP8:
        raise TypeError(f"scaled_matmul: a and b must be FP8 (ml_dtypes float8_e4m3fn, float8_e5m2), not "
                        f"{arrays.describe(a)} and {arrays.describe(b)}")
    if ta != tb:
        raise TypeError(f"scaled_matmul: a and b of one FP8 type, not {ta} and {tb} (mixed e4m3 x e5m2 is "
                        "not wired up yet)")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"scaled_matmul: a (M, K) and b (K, N), not {a.shape} and {b.shape}")
    (M, K), N = a.shape, b.shape[1]
    if out is None:
        dst = arrays.scalar_of_dtype(out_dtype) if out_dtype is not None and not isinstance(out_dtype, str) \
            else None
        name = "bf16" if out_dtype is None else (out_dtype if isinstance(out_dtype, str) else
                                                 (dst.name if dst is not None else None))
        if name not in _OUTS:
            raise TypeError(f"scaled_matmul: out_dtype must be bf16, f16 or f32, not {out_dtype!r}")
        out = np.empty((M, N), arrays.numpy_dtype(SCALARS[name]))
    else:
        t = arrays.array_scalar_type(out) if isinstance(out, np.ndarray) else None
        if t is None or t.name not in _OUTS:
            raise TypeError(f"scaled_matmul: out must be a numpy array of bf16, f16 or f32, not "
                            f"{arrays.describe(out)}")
        if out.shape != (M, N) or not out.flags.c_contiguous:
            raise ValueError(f"scaled_matmul: out must be a C-contiguous ({M}, {N}) array, not {out.shape}")
    sa, sb = _scale(scale_a, "scale_a"), _scale(scale_b, "scale_b")
    if sa.size == 1 and sb.size == 1:
        mode = 1
    elif sa.size == M and sb.size == N:
        mode = 2
    else:
        raise ValueError(f"scaled_matmul: scales of one element each, or of M = {M} and N = {N} elements, "
                         f"not {sa.size} and {sb.size}")
    if M == 0 or N == 0:
        return out
    if K == 0:
        out[...] = 0
        return out
    kp = -(-K // 16) * 16
    a2 = _padded(a, M, kp)
    b_nk = _padded(b.T, N, kp)
    return run(_cpu_module(), a2, b_nk, out, scale_a=sa, scale_b=sb, scale=mode)


__all__ = ["BK", "CHOICES", "CHOICE_MAX_M", "CONFIGS", "PLANS", "ONE_WAVE", "SMALLEST", "SMALL_M_SHARED", "WAVE_ALTERNATIVES", "WAVE_MARGIN",
           "choose", "choose_split", "epi_box", "epilogue_module", "operand_b", "plan_key", "prepare", "reason_not",
           "remember", "run", "scaled_matmul", "scaled_matmul_cpu", "shared_bytes", "small_m_rows", "tail_shares",
           "tile_m", "tma_store_applies"]
