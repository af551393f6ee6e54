"""kcompiler.ops.matmul: ``a @ b`` by std.matmul (mma.sync, MFMA or SIMT) or, on Hopper, std.matmul_sm90,
with epilogues fused into the kernel; the tile choice and its autotuning; FP8 scaled_matmul."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import time
from typing import Any, Callable

import numpy as np

from .. import compile as compile_source
from ..diagnostics import CompileError
from ..frontend.program import stdlib_dir
from ..ir.types import SCALARS
from ..runtime import arrays
from ..runtime import autotune as _autotune  # a module reference: tests and tools may wrap autotune
from ..runtime.autotune import CandidateRejected
from ..runtime.device import Device, LaunchError
from . import _common, matmul_sm90
from ._common import data_ptr, empty_like, flat, scalar_of, target_for, torch_dtype


#: Tile configurations of std.matmul (BM, BN, BK, WM, WN, STAGES) that :func:`matmul` picks from.
MATMUL_TILES = {
    "mma_large": dict(BM=128, BN=128, BK=32, WM=64, WN=64, STAGES=3),  # 4 warps, 55.5 KiB of shared memory
    "mma_small": dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=3),    # 4 warps, 28.5 KiB
    "simt": dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=2),          # 4 warps, 32 elements a lane
}


#: What the autotuner of :func:`matmul` times on tensor cores: 4 or 8 warps with 64 x 64 or 32 x 32 /
#: 32 x 64 warp tiles, 3 or 4 stages, BK 32 or 64; shared memory 28.5 to 108 KiB (an A100 has 163, an
#: H100 227).
MATMUL_TUNE_CANDIDATES = [
    dict(BM=128, BN=128, BK=32, WM=64, WN=64, STAGES=3),
    dict(BM=128, BN=128, BK=32, WM=64, WN=64, STAGES=4),
    dict(BM=128, BN=128, BK=64, WM=64, WN=64, STAGES=3),
    dict(BM=128, BN=256, BK=32, WM=64, WN=64, STAGES=3),
    dict(BM=256, BN=128, BK=32, WM=64, WN=64, STAGES=3),
    dict(BM=64, BN=128, BK=32, WM=32, WN=64, STAGES=4),
    dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=3),
]


def matmul_tiles(M: int, N: int, K: int, tensor_cores: bool,
                 sms: int = Device.multiprocessor_count) -> dict[str, int]:
    """The tile sizes :func:`matmul` uses for an M x K by K x N product when it does not tune (the
    CPU target, the SIMT path, ``tune=False`` / ``KC_TUNE=0``, numpy inputs; see
    :func:`matmul_tuned_tiles`): a fixed heuristic, on a device of ``sms`` multiprocessors (default:
    :class:`~kcompiler.runtime.device.Device`'s fallback, an H100 SXM's 132)."""
    if not tensor_cores:
        return dict(MATMUL_TILES["simt"])
    # 128 x 128 tiles once there are enough of them to fill the GPU's multiprocessors
    big = -(-M // 128) * -(-N // 128) >= sms
    return dict(MATMUL_TILES["mma_large" if big else "mma_small"])


def matmul_shared_bytes(tiles: dict[str, int], itemsize: int, b_kmajor: bool, mfma: bool = False) -> int:
    """Dynamic shared memory std.matmul needs (the formulas stated in stdlib/matmul.kc): ``mfma`` for
    its AMD matrix-core path (two LDS stages of A's and B's tiles, XOR-swizzled, unpadded)."""
    bm, bn, bk, st = tiles["BM"], tiles["BN"], tiles["BK"], tiles["STAGES"]
    if mfma:
        return 2 * (bm + bn) * bk * itemsize
    b_tile = bn * (bk + 8) if b_kmajor else bk * (bn + 8)
    return st * (bm * (bk + 8) + b_tile) * itemsize


def _size_class(n: int) -> int:
    """The autotuner's class of a matrix dimension: the next power of two, at least 16."""
    return max(16, 1 << (max(n, 1) - 1).bit_length())


@functools.lru_cache(maxsize=None)
def _matmul_source_sha() -> str:
    d = stdlib_dir()
    return hashlib.sha256(b"".join((d / f).read_bytes() for f in ("matmul.kc", "epilogue.kc"))).hexdigest()[:16] \
        if d is not None else ""


def matmul_tuned_tiles(problem: dict[str, Any], run: Any, default: dict[str, int], *,
                       tune: bool | None = None, synchronize: Any = None) -> dict[str, int]:
    """The tiles of :data:`MATMUL_TUNE_CANDIDATES` for ``problem`` (a JSON-able dict: what the choice
    depends on): the cached choice, else (tuning allowed by ``tune``, default ``KC_TUNE``) the fastest
    as timed by calling ``run(tiles)`` (one launch) and ``synchronize()`` (wait for the device),
    recorded in the cache folder (kcompiler.runtime.autotune), else ``default``. A candidate that
    does not compile or launch here is skipped; a tuning that fails leaves no record."""
    def time_one(t: dict[str, int]) -> float:
        try:
            run(t)  # compiles (or loads) the specialisation, and warms up
            synchronize()
        except (CompileError, LaunchError) as e:
            raise CandidateRejected(str(e)) from None
        t0 = time.perf_counter()
        run(t)
        synchronize()
        once = time.perf_counter() - t0
        reps = max(1, min(50, int(0.005 / max(once, 1e-7))))  # about 5 ms of launches
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(reps):
                run(t)
            synchronize()
            best = min(best, (time.perf_counter() - t0) / reps)
        return best

    return _autotune.autotune(problem, MATMUL_TUNE_CANDIDATES, time_one, default=default, enabled=tune, unit="s")


@dataclasses.dataclass(eq=False)
class Epilogue:
    """An epilogue for :func:`matmul`: a kernel-language fn applied to every element of the product
    in registers, before the store, in the matmul's own kernel: ``C[i][j] = OUT(fn(acc, i, j, ld, x,
    y, s))`` with ``acc`` the f32 accumulator (stdlib/epilogue.kc states the contract).

    ``fn``: a stock epilogue of std.epilogue (a key of :data:`EPILOGUES`), or the name of a fn that
    ``source`` defines, of the signature ``fn(acc: f32, row: i32, col: i32, ld: i32, x: ptr<X>, y:
    ptr<Y>, s: f32) -> f32`` (it may import std modules; a mistake in it is a CompileError located in
    that text). ``x``, ``y``: the arrays it reads (numpy or torch, as ``a``; contiguous; any dtype
    with a kernel type), None where it reads none; ``s``: an f32 scalar.

    ``block``: a block epilogue (std.epilogue's second kind, on blocks of 32 columns of a row) applied
    after ``fn``, one of :data:`BLOCK_EPILOGUES`: 'to_mxfp8_e4m3' or 'to_mxfp8_e5m2', OCP MXFP8
    quantisation of the result (kcompiler.numerics.mx's rules, bit for bit); :func:`matmul` then
    returns (codes, scales)."""

    fn: str
    x: Any = None
    y: Any = None
    s: float = 1.0
    source: str | None = None
    block: str | None = None


#: std.epilogue's fns, with the shapes of the ``x`` and ``y`` each reads ('N': a vector of N, per
#: column; 'M': of M, per row; 'MN': an M x N matrix like C; None: not read).
EPILOGUES: dict[str, tuple[str | None, str | None]] = {
    "identity": (None, None), "relu": (None, None), "gelu": (None, None), "gelu_tanh": (None, None),
    "silu": (None, None), "bias": ("N", None), "bias_relu": ("N", None), "bias_gelu": ("N", None),
    "bias_silu": ("N", None), "scale": (None, None), "scale_rows_cols": ("M", "N"), "residual": (None, "MN"),
    "scale_bias_residual": ("N", "MN"), "to_f8e4m3": (None, None), "to_f8e5m2": (None, None),
    "gelu_rp": (None, None), "silu_rp": (None, None), "bias_gelu_rp": ("N", None), "bias_silu_rp": ("N", None),
}

#: std.epilogue's row-wise fused epilogues (kcompiler.ops.matmul_fused states them), with the shapes
#: of the x and y each reads as :data:`EPILOGUES` gives them (N: C's columns): gated activations of a
#: (K, 2 N) gate-and-up b, and RMSNorm of C's rows (x the weight, y a residual, s the epsilon).
FUSED_EPILOGUES: dict[str, tuple[str | None, str | None]] = {
    "silu_and_mul": (None, None), "gelu_and_mul": (None, None), "gelu_tanh_and_mul": (None, None),
    "rms_norm": ("N", None), "add_rms_norm": ("N", "MN"), "fused_add_rms_norm": ("N", "MN")}

#: std.epilogue's block epilogues (blocks of 32 columns of a row) and the element type of the result
#: each gives: MXFP8, with an (M, N / 32) matrix of E8M0 scales beside it.
BLOCK_EPILOGUES: dict[str, str] = {"to_mxfp8_e4m3": "f8e4m3", "to_mxfp8_e5m2": "f8e5m2"}

#: The kernel a user's epilogue source is compiled with (appended to the source, so that the lines of
#: the source keep their numbers in messages): std.matmul's body with the epilogue EPI given at launch.
_EPILOGUE_KERNEL = """
import std.matmul as kc_std_matmul
import std.epilogue as kc_std_epilogue
kernel matmul_epilogue[T: type, BM: i32, BN: i32, BK: i32, WM: i32, WN: i32, STAGES: i32, OUT: type, B_KMAJOR: bool,
                       ALIGNED: bool, X: type, Y: type,
                       EPI: fn(acc: f32, row: i32, col: i32, ld: i32, x: ptr<X>, y: ptr<Y>, s: f32) -> f32](
        a: ptr<T>, b: ptr<T>, c: ptr<OUT>, M: i32, N: i32, K: i32, lda: i32, ldb: i32, ldc: i32, x: ptr<X>,
        y: ptr<Y>, s: f32) {
    kc_std_matmul.gemm[T, BM, BN, BK, WM, WN, STAGES, OUT, B_KMAJOR, ALIGNED, X, Y, EPI, OUT, 0,
                       kc_std_epilogue.block_identity](a, b, c, M, N, K, lda, ldb, ldc, x, y, s, c);
}
kernel matmul_block_epilogue[T: type, BM: i32, BN: i32, BK: i32, WM: i32, WN: i32, STAGES: i32, OUT: type,
                             B_KMAJOR: bool, ALIGNED: bool, X: type, Y: type,
                             EPI: fn(acc: f32, row: i32, col: i32, ld: i32, x: ptr<X>, y: ptr<Y>, s: f32) -> f32,
                             Z: type, BLOCK: i32, BEPI: fn](
        a: ptr<T>, b: ptr<T>, c: ptr<OUT>, M: i32, N: i32, K: i32, lda: i32, ldb: i32, ldc: i32, x: ptr<X>,
        y: ptr<Y>, s: f32, z: ptr<Z>) {
    kc_std_matmul.gemm[T, BM, BN, BK, WM, WN, STAGES, OUT, B_KMAJOR, ALIGNED, X, Y, EPI, Z, BLOCK, BEPI](
        a, b, c, M, N, K, lda, ldb, ldc, x, y, s, z);
}
"""


@functools.lru_cache(maxsize=64)
def _epilogue_module(source: str, target: str) -> Any:
    return compile_source(source.rstrip("\n") + "\n" + _EPILOGUE_KERNEL, target=target,
                          path="<kcompiler.ops.matmul epilogue>")


def _unread_input(like: Any) -> Any:
    """A one-element f32 array of ``like``'s kind for an epilogue input that is not read. Not ``out``:
    a host array passed twice is copied to the device twice and back twice, the second copy back
    over the result."""
    return _torch_f32_scalar(str(like.device)) if arrays.is_torch_tensor(like) else np.zeros(1, np.float32)


@functools.lru_cache(maxsize=None)
def _torch_f32_scalar(device: str) -> Any:
    import torch  # deferred: torch is optional
    return torch.zeros(1, dtype=torch.float32, device=device)


def _apart_from(x: Any, out: Any) -> Any:
    """Epilogue input ``x``, copied if it is a host array sharing memory with ``out`` (host arrays are
    copied to the device and back at a launch: its stale copy would land over the result)."""
    return x.copy() if isinstance(x, np.ndarray) and isinstance(out, np.ndarray) and np.shares_memory(x, out) else x


def _epilogue_inputs(ep: Epilogue, a: Any, M: int, N: int) -> list[Any]:
    """``ep``'s x and y, checked (kind, dtype, contiguity; a stock epilogue's shapes) and flattened;
    None for one it does not read."""
    want = EPILOGUES.get(ep.fn, FUSED_EPILOGUES.get(ep.fn, (None, None))) if ep.source is None else ("any", "any")
    shapes = {"N": (N,), "M": (M,), "MN": (M, N)}
    got = []
    for name, x, w in (("x", ep.x, want[0]), ("y", ep.y, want[1])):
        if x is None:
            if w is not None and w != "any":
                raise ValueError(f"matmul: epilogue {ep.fn} reads {name}, an array of shape {shapes[w]}")
            got.append(None)
            continue
        if not arrays.is_array(x) or arrays.array_scalar_type(x) is None:
            raise TypeError(f"matmul: epilogue input {name} must be an array, not {arrays.describe(x)}")
        if arrays.is_torch_tensor(x) != arrays.is_torch_tensor(a):
            raise TypeError(f"matmul: epilogue input {name} must be of a's kind (numpy or torch)")
        if w is None:
            raise ValueError(f"matmul: epilogue {ep.fn} does not read {name}")
        if w != "any" and tuple(x.shape) != shapes[w]:
            raise ValueError(f"matmul: epilogue {ep.fn} reads {name} of shape {shapes[w]}, not {tuple(x.shape)}")
        if not arrays.is_contiguous(x):
            raise ValueError(f"matmul: epilogue input {name} must be contiguous")
        got.append(flat(x, 1))
    return got


def _hopper_plan(a: Any, b: Any, out: Any, out_dtype: Any, plain: bool) -> tuple[Any, Any]:
    """(key, plan) of :func:`matmul`'s kept Hopper launch for these operands (kcompiler.ops.matmul_sm90
    .PLANS); (None, None) unless the call is ``plain`` (no epilogue, tiles, tune or target), and a
    None plan where none is kept yet."""
    if not plain:
        return None, None
    try:
        key = matmul_sm90.plan_key("matmul", (a, b), out, out_dtype)
        return key, (matmul_sm90.PLANS.get(key) if key is not None else None)
    except TypeError:  # an unhashable out_dtype: matmul's checks say what is wrong
        return None, None


def matmul(a: Any, b: Any, out: Any = None, epilogue: Epilogue | str | None = None, *, out_dtype: Any = None,
           tiles: dict[str, int] | None = None, tune: bool | None = None, target: str = "auto") -> Any:
    """``a @ b`` by std.matmul: f32 accumulation, one rounding into the result's dtype; with an
    ``epilogue``, ``epilogue(a @ b)`` computed in the same kernel.

    ``a``: (M, K), ``b``: (K, N), both f32, f16 or bf16 (one dtype), numpy arrays or torch tensors
    (numpy in, numpy out; torch in, torch out). A ``b`` whose transpose is contiguous (``w.T`` of an
    (N, K) weight) is read in place (the kernel's B_KMAJOR); other non-contiguous inputs are copied.
    ``out``: a contiguous (M, N) array of f32, f16, bf16, f8e4m3 or f8e5m2 to write into
    (returned); else a new one of ``out_dtype`` (default: a's dtype, as numpy and torch); FP8 results
    are rounded to nearest even without saturation (the epilogues to_f8e4m3 / to_f8e5m2 scale and
    saturate first). ``epilogue``: an :class:`Epilogue`, or the name of a stock one that reads no
    inputs ('relu', 'gelu', 'silu', ...; :data:`EPILOGUES`).

    MXFP8 results: ``epilogue='to_mxfp8_e4m3'`` (or 'to_mxfp8_e5m2', or an :class:`Epilogue` with
    ``block=`` one of them after its own fn) quantises the product in the kernel, per block of 32
    columns of a row, as OCP MX v1.0 says (kcompiler.numerics.mx.quantize of the f32 result, bit for
    bit), and returns ``(codes, scales)``: codes (M, N) f8e4m3 / f8e5m2, scales (M, N / 32) E8M0
    (ml_dtypes float8_e8m0fnu / torch float8_e8m0fnu; uint8 accepted in ``out``), as
    :func:`mx_quantize` gives them; ``out`` is then None or such a pair. N must be a multiple of 32.

    Fused row-wise epilogues (:data:`FUSED_EPILOGUES`, kcompiler.ops.matmul_fused): 'silu_and_mul',
    'gelu_and_mul', 'gelu_tanh_and_mul' take ``b`` (K, 2 N), the gate's columns then the up
    projection's (``w_gate_up.T`` of a merged (2 N, K) weight), and return (M, N) ``act(a @ b[:, :N])
    * (a @ b[:, N:])``; ``epilogue=ops.rms_norm_epilogue(weight, eps, residual)`` returns RMSNorm of
    the rows of ``a @ b`` (N at most 256: a row inside one block's tile; ValueError otherwise).

    On NVIDIA GPUs f16 and bf16 run on the
    tensor cores (mma.sync, ldmatrix, cp.async; stdlib/matmul.kc), f32 and every other target on
    the SIMT path. On an sm_90 GPU (H100), torch CUDA tensors whose rows are multiples of 16 bytes
    take the Hopper path instead (TMA, wgmma, warp-specialised persistent kernel;
    stdlib/matmul_sm90.kc, kcompiler.ops.matmul_sm90), with its own tile choice (``tiles`` and the
    autotuner apply to the other paths; passing ``tiles`` asks for them).

    Tiles: ``tiles`` (BM, BN, BK, WM, WN, STAGES) if given; else, on tensor cores, the autotuner's
    choice (:func:`matmul_tuned_tiles`) for this size class (M, N, K each to the next power of
    two), dtypes, layout, target, arch and device: the first call with device arrays (torch CUDA
    tensors, CuPy) times the plain product (no epilogue) with each of :data:`MATMUL_TUNE_CANDIDATES`
    on them, writing ``out`` (a scratch copy where the epilogue reads ``out``), and caches the
    fastest on disk;
    numpy inputs, which are copied at each launch, use a cached choice or :func:`matmul_tiles`.
    ``tune=False`` or ``KC_TUNE=0`` turns timing off; the CPU target never times.

    Raises TypeError for other dtypes or mixed ones, ValueError for shapes that do not match (not
    2-D, inner sizes that differ, a wrong ``out`` or epilogue input), CompileError for an
    epilogue's source that does not compile (located in that source).

    A product without epilogue, tiles, tune or target on the Hopper path keeps its launch
    (kcompiler.ops.matmul_sm90.PLANS): a later call on the same operands (the same addresses, shapes,
    strides, dtypes; an ``out`` like the first one's) skips the checks and the choices."""
    key, plan = _hopper_plan(a, b, out, out_dtype, epilogue is None and tiles is None and tune is None
                             and target == "auto")
    if plan is not None:
        return plan(out)
    src, (M, K), N = _operand_type(a, b), tuple(a.shape), int(b.shape[1])
    epilogue = _checked_epilogue(epilogue)
    if epilogue is not None and epilogue.source is None and epilogue.fn in FUSED_EPILOGUES:
        from . import matmul_fused  # deferred: it builds on this module
        return matmul_fused.fused_matmul(a, b, out, epilogue, out_dtype, tiles, tune, target)
    block = epilogue.block if epilogue is not None else None
    scales = None
    if block is not None:
        out, scales = _mx_outputs(a, out, out_dtype, block, M, N)
        out_dtype = None
    out, dst = _matmul_out(a, out, out_dtype, src, M, N)
    ex = _epilogue_inputs(epilogue, a, M, N) if epilogue is not None else None
    result = out if scales is None else (out, scales)
    if M == 0 or N == 0:
        return result
    copied = not arrays.is_contiguous(a)  # a or b copied: no plan (it would keep the copy)
    a = _common.contiguous(a)
    bt = b.T if hasattr(b, "T") else None
    b_kmajor = not arrays.is_contiguous(b) and bt is not None and arrays.is_contiguous(bt)
    if b_kmajor:
        b = bt  # (N, K), contiguous: B[k][n] = b[n * K + k]
    elif not arrays.is_contiguous(b):
        b, copied = _common.contiguous(b), True
    tgt = target_for(a, target)
    # the Hopper path's tensor maps describe CUDA tensors; the module's target (wgmma) decides in it
    hopper = tiles is None and arrays.is_torch_tensor(a) and a.is_cuda
    if hopper and _matmul_hopper(a, b, out, b_kmajor, epilogue, ex, scales, tgt, None if copied else key):
        return result
    mod = _common.stdlib_module("matmul", tgt)
    # the path the kernel's comptime tests take: MFMA (AMD CDNA, wavefronts of 64), else mma.sync
    mfma = mod.target_has("mfma") and src.name in ("f16", "bf16")
    tensor_cores = not mfma and mod.target_has("mma") and src.name in ("f16", "bf16")
    ldb = K if b_kmajor else N
    fa, fb, fo = flat(a, 16), flat(b, 16), flat(out, 1)  # out is written in place: never copied
    aligned = K % 8 == 0 and ldb % 8 == 0 and N % 8 == 0 and all(data_ptr(x) % 16 == 0 for x in (fa, fb, fo))
    params = dict(T=src.name, OUT=dst.name, B_KMAJOR=b_kmajor, ALIGNED=aligned)
    kernel, pack = _epilogue_launch(mod, epilogue, ex, scales, a, out, tgt, params)
    stream = _common.stream_of(a)  # torch's current stream: queued behind the caller's work, capturable

    def run(t: dict[str, int], c: Any = fo, kernel: Any = kernel, pack: tuple = pack, params: dict = params) -> None:
        threads = t["BM"] // t["WM"] * (t["BN"] // t["WN"]) * (64 if mfma else 32)
        grid = (-(-N // t["BN"]), -(-M // t["BM"]))
        kernel[grid, threads](fa, fb, c, M, N, K, K, ldb, N, *pack,
                              shared=matmul_shared_bytes(t, src.size, b_kmajor, mfma), stream=stream, **params, **t)

    if tiles is not None:
        t = _common.check_tiles(tiles, MATMUL_TILES["simt"], "matmul")
    elif not tensor_cores:
        t = matmul_tiles(M, N, K, False)
    else:
        t = _autotuned_tiles(mod, a, run, fo, ex, params, (M, N, K), tune)
    run(t)
    return result


def _autotuned_tiles(mod: Any, a: Any, run: Callable[..., None], fo: Any, ex: list | None, params: dict,
                     mnk: tuple[int, int, int], tune: bool | None) -> dict[str, int]:
    """:func:`matmul`'s tiles on tensor cores: :func:`matmul_tuned_tiles` for this size class, dtypes,
    layout, target, arch and device, timing ``run(tiles, c, kernel, pack, params)`` of the plain
    product into ``fo`` (a scratch copy where the epilogue's inputs ``ex`` read it) where a is on a device;
    the default :func:`matmul_tiles` for the device's multiprocessors."""
    M, N, K = mnk
    problem = dict(op="matmul", M=_size_class(M), N=_size_class(N), K=_size_class(K), T=params["T"],
                   OUT=params["OUT"], B_KMAJOR=params["B_KMAJOR"], ALIGNED=params["ALIGNED"], target=mod.target,
                   arch=mod.arch, device=str(getattr(mod.device, "name", "")), source=_matmul_source_sha())
    on_device = data_ptr(a) != 0
    scratch = fo
    if on_device and ex is not None and any(x is not None and data_ptr(x) == data_ptr(fo) for x in ex):
        scratch = fo.clone() if arrays.is_torch_tensor(fo) else fo.copy()  # the epilogue reads out
    # timed without the epilogue (whose cost does not depend on the tiles): one choice for all
    plain = {k: v for k, v in params.items() if k != "EPI"}
    default = matmul_tiles(M, N, K, True, _common.device_of(mod, a).multiprocessor_count)
    return matmul_tuned_tiles(problem, lambda tt: run(tt, scratch, mod.matmul, (), plain), default,
                              tune=tune if on_device and not _common.capturing(a) else False,
                              synchronize=mod.device.synchronize)


def _operand_type(a: Any, b: Any) -> Any:
    """The scalar type of :func:`matmul`'s a and b, checked (arrays of f32, f16 or bf16, one dtype,
    2-D, inner sizes equal): TypeError / ValueError otherwise."""
    for name, x in (("a", a), ("b", b)):
        if not arrays.is_array(x):
            raise TypeError(f"matmul: {name} must be an array, not {arrays.describe(x)}")
    src = arrays.array_scalar_type(a)
    if src is None or src.name not in ("f32", "f16", "bf16"):
        raise TypeError(f"matmul: a must be an array of f32, f16 or bf16, not {arrays.describe(a)}")
    if arrays.array_scalar_type(b) != src:
        raise TypeError(f"matmul: a and b must have one dtype; a is {src}, b is {arrays.describe(b)}")
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ValueError(f"matmul: a and b must be 2-D, not {tuple(a.shape)} and {tuple(b.shape)}")
    (M, K), (K2, N) = tuple(a.shape), tuple(b.shape)
    if K != K2:
        raise ValueError(f"matmul: a is {M} x {K} but b is {K2} x {N}: inner sizes differ")
    return src


def _checked_epilogue(epilogue: Epilogue | str | None) -> Epilogue | None:
    """:func:`matmul`'s ``epilogue`` as an :class:`Epilogue` (a block epilogue's name as identity
    followed by it), checked against the stock ones: TypeError / ValueError otherwise."""
    if isinstance(epilogue, str):
        epilogue = Epilogue(epilogue)
    if epilogue is not None and not isinstance(epilogue, Epilogue):
        raise TypeError(f"matmul: epilogue must be an ops.Epilogue or a stock epilogue's name, not {epilogue!r}")
    if epilogue is None:
        return None
    if epilogue.source is None and epilogue.fn in BLOCK_EPILOGUES:
        epilogue = dataclasses.replace(epilogue, fn="identity", block=epilogue.fn)
    if epilogue.source is None and epilogue.fn not in EPILOGUES and epilogue.fn not in FUSED_EPILOGUES:
        raise ValueError(f"matmul: no stock epilogue {epilogue.fn!r}; the stock ones: {', '.join(EPILOGUES)}, "
                         f"the fused ones {', '.join(FUSED_EPILOGUES)} and the block ones {', '.join(BLOCK_EPILOGUES)} "
                         "(or pass source=... defining it)")
    if epilogue.block is not None and epilogue.block not in BLOCK_EPILOGUES:
        raise ValueError(f"matmul: no block epilogue {epilogue.block!r}; the block epilogues: "
                         f"{', '.join(BLOCK_EPILOGUES)}")
    return epilogue


_OUTS = ("f32", "f16", "bf16", "f8e4m3", "f8e5m2")


def _matmul_out(a: Any, out: Any, out_dtype: Any, src: Any, M: int, N: int) -> tuple[Any, Any]:
    """(out, its scalar type): :func:`matmul`'s ``out`` checked, or a new (M, N) array of a's kind and
    ``out_dtype`` (default a's). TypeError / ValueError for one that does not fit."""
    if out is not None:
        dst = arrays.array_scalar_type(out) if arrays.is_array(out) else None
        if dst is None or dst.name not in _OUTS:
            raise TypeError(f"matmul: out must be an array of {', '.join(_OUTS)}, not {arrays.describe(out)}")
        if tuple(out.shape) != (M, N) or not arrays.is_contiguous(out):
            raise ValueError(f"matmul: out must be a contiguous ({M}, {N}) array, not {tuple(out.shape)}"
                             f"{'' if arrays.is_contiguous(out) else ' (not contiguous)'}")
        if arrays.is_torch_tensor(out) != arrays.is_torch_tensor(a):
            raise TypeError("matmul: out must be of a's kind (numpy or torch)")
        return out, dst
    dst = src if out_dtype is None else scalar_of(out_dtype)
    if dst is None or dst.name not in _OUTS:
        raise TypeError(f"matmul: out_dtype must be one of {', '.join(_OUTS)}, not {out_dtype!r}")
    return empty_like(a, (M, N), dst.name), dst


def _matmul_hopper(a: Any, b: Any, out: Any, b_kmajor: bool, epilogue: Epilogue | None, ex: list | None,
                   scales: Any, tgt: str, key: tuple | None) -> bool:
    """Run :func:`matmul` on the Hopper path (TMA + wgmma, stdlib/matmul_sm90.kc) where it applies,
    keeping the launch under ``key`` (None: keep none); False where it does not apply."""
    mod90 = _common.stdlib_module("matmul_sm90", tgt)
    b90 = matmul_sm90.operand_b(mod90, a, b, out, b_kmajor)
    if b90 is None:
        return False
    epi = None
    if epilogue is not None:
        if epilogue.source is not None:
            mod90 = matmul_sm90.epilogue_module(epilogue.source, tgt)
        fo = flat(out, 1)
        epi = (f"epilogue.{epilogue.fn}" if epilogue.source is None else epilogue.fn,
               ex[0] if ex[0] is not None else fo, ex[1] if ex[1] is not None else fo, epilogue.s)
    # a row-major B is read N-major (wgmma's transposed B) where TMA can describe its rows
    z = None if scales is None else (_block_fn(epilogue), _e8m0_view(flat(scales, 1)))
    go = matmul_sm90.prepare(mod90, a, b90[0], out, b_kmajor=b90[1], epilogue=epi, block=z)
    if b90[0] is b:
        matmul_sm90.remember(key, go, tuple(out.shape), out.dtype, out.device)
    go(out)
    return True


def _epilogue_launch(mod: Any, epilogue: Epilogue | None, ex: list | None, scales: Any, a: Any, out: Any,
                     tgt: str, params: dict) -> tuple[Any, tuple]:
    """(kernel, its arguments after ldc) of std.matmul for ``epilogue`` (None: the plain product),
    adding its compile-time values to ``params``."""
    if epilogue is None:
        return mod.matmul, ()
    emod = mod if epilogue.source is None else _epilogue_module(epilogue.source, tgt)
    params["EPI"] = f"epilogue.{epilogue.fn}" if epilogue.source is None else epilogue.fn
    kernel = emod.matmul_epilogue if epilogue.block is None else emod.matmul_block_epilogue
    pack = tuple(_unread_input(a) if x is None else _apart_from(x, out) for x in ex) + (np.float32(epilogue.s),)
    if epilogue.block is not None:
        params.update(Z="e8m0", BLOCK=32, BEPI=_block_fn(epilogue))
        pack += (_e8m0_view(flat(scales, 1)),)
    return kernel, pack


def _block_fn(ep: Epilogue) -> str:
    """The block epilogue's fn as the kernel's module spells it: std.epilogue is ``epilogue`` in the
    stdlib's modules, ``kc_std_epilogue`` in the module of a user's epilogue source."""
    return f"{'epilogue' if ep.source is None else 'kc_std_epilogue'}.{ep.block}"


def _e8m0_view(x: Any) -> Any:
    """uint8 scales viewed as E8M0 (the block epilogues' z), in place."""
    if arrays.array_scalar_type(x).name == "e8m0":
        return x
    return x.view(torch_dtype("e8m0")) if arrays.is_torch_tensor(x) else x.view(arrays.numpy_dtype(SCALARS["e8m0"]))


def _mx_outputs(a: Any, out: Any, out_dtype: Any, block: str, M: int, N: int) -> tuple[Any, Any]:
    """The (codes, scales) that :func:`matmul` with block epilogue ``block`` writes: ``out``'s pair,
    checked, or new arrays of a's kind."""
    fmt = BLOCK_EPILOGUES[block]
    if N % 32:
        raise ValueError(f"matmul: epilogue {block} quantises blocks of 32 columns: N = {N} is not a multiple of 32")
    if out_dtype is not None:
        want = scalar_of(out_dtype)
        if want is None or want.name != fmt:
            raise TypeError(f"matmul: epilogue {block} gives {fmt} codes, not out_dtype {out_dtype!r}")
    if out is None:
        return empty_like(a, (M, N), fmt), empty_like(a, (M, N // 32), "e8m0")
    if not (isinstance(out, tuple) and len(out) == 2 and all(arrays.is_array(x) for x in out)):
        raise TypeError(f"matmul: with epilogue {block}, out is a pair (codes, scales) of arrays, not "
                        f"{arrays.describe(out)}")
    codes, scales = out
    for name, x, shape, types in (("codes", codes, (M, N), (fmt,)), ("scales", scales, (M, N // 32), ("e8m0", "u8"))):
        t = arrays.array_scalar_type(x)
        if t is None or t.name not in types:
            raise TypeError(f"matmul: out's {name} must be an array of {' or '.join(types)}, not {arrays.describe(x)}")
        if tuple(x.shape) != shape or not arrays.is_contiguous(x):
            raise ValueError(f"matmul: out's {name} must be a contiguous {shape} array, not {tuple(x.shape)}")
        if arrays.is_torch_tensor(x) != arrays.is_torch_tensor(a):
            raise TypeError("matmul: out must be of a's kind (numpy or torch)")
    return codes, scales


def scaled_matmul(a: Any, b: Any, scale_a: Any, scale_b: Any, *, out_dtype: Any = None, out: Any = None) -> Any:
    """FP8 ``(a @ b) * scale_a * scale_b`` by stdlib/matmul_sm90.kc: torch CUDA tensors on the Hopper
    path (:func:`kcompiler.ops.matmul_sm90.scaled_matmul` gives the shapes, layouts, scales and
    errors), numpy arrays on the CPU target's emulation of it
    (:func:`kcompiler.ops.matmul_sm90.scaled_matmul_cpu`)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return matmul_sm90.scaled_matmul_cpu(a, b, scale_a, scale_b, out_dtype=out_dtype, out=out)
    return matmul_sm90.scaled_matmul(a, b, scale_a, scale_b, out_dtype=out_dtype, out=out)


__all__ = ["BLOCK_EPILOGUES", "EPILOGUES", "FUSED_EPILOGUES", "Epilogue", "MATMUL_TILES", "MATMUL_TUNE_CANDIDATES",
           "matmul", "matmul_shared_bytes", "matmul_tiles", "matmul_tuned_tiles", "scaled_matmul"]
