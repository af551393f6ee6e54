"""Array operations built from the standard library's kernels, callable from Python like numpy's.

Each takes host (numpy) or device (torch, CuPy) arrays and runs on ``target`` ('auto': where the
input lives — a CUDA tensor on the GPU, a numpy array on CUDA when there is a GPU, else the CPU
target). The kernels are compiled once per process and specialisation (the disk cache keeps them
across processes).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import numpy as np

from .frontend.program import stdlib_dir
from .ir.types import SCALARS
from .runtime import arrays


@functools.lru_cache(maxsize=None)
def _module(name: str, target: str) -> Any:
    from . import compile_file
    d = stdlib_dir()
    if d is None:
        raise RuntimeError("kcompiler's standard library (stdlib/) is not installed")
    return compile_file(d / f"{name}.kc", target=target)


def _target_for(x: Any, target: str) -> str:
    if target != "auto":
        return target
    if arrays.is_torch_tensor(x) and x.is_cuda:
        return "cuda"
    if hasattr(x, "__cuda_array_interface__") and not isinstance(x, np.ndarray):
        return "cuda"
    return "auto"


def cast(x: Any, dtype: Any, *, saturate: bool = False, target: str = "auto") -> Any:
    """``x`` converted elementwise to ``dtype`` by a kernel: a new array of ``x``'s shape and kind
    (numpy in, numpy out; torch in, torch out).

    ``dtype``: a numpy / ml_dtypes / torch dtype or a type name ('f8e4m3', 'bf16', ...). Into a small
    float, ``saturate=True`` clamps overflows and infinities to the largest finite value; the default
    gives ml_dtypes' (and torch's) results bit for bit. Raises TypeError for a dtype the language has
    no type for, or a conversion it does not make (small floats convert to and from floats only)."""
    src = arrays.array_scalar_type(x) if arrays.is_array(x) else None
    if src is None:
        x = np.asarray(x)
        src = arrays.scalar_of_dtype(x.dtype)
    dst = SCALARS.get(dtype) if isinstance(dtype, str) else arrays.scalar_of_dtype(dtype)
    if src is None or dst is None:
        raise TypeError(f"cast: no kernel type for {getattr(x, 'dtype', x)!r} -> {dtype!r}")
    if saturate and not dst.is_minifloat:
        raise TypeError(f"cast: saturate applies to small-float results, not {dst}")
    if arrays.is_torch_tensor(x):
        import torch
        out = torch.empty(tuple(x.shape), dtype=_torch_dtype(dst.name), device=x.device)
        flat_in, flat_out = x.contiguous().reshape(-1), out.reshape(-1)
    else:
        x = np.ascontiguousarray(x)
        out = np.empty(x.shape, arrays.numpy_dtype(dst))
        flat_in, flat_out = x.reshape(-1), out.reshape(-1)
    n = int(np.prod(x.shape)) if len(x.shape) else 1
    if n == 0:
        return out
    mod = _module("cast", _target_for(x, target))
    vec = 8 if _data_ptr(flat_in) % (8 * src.size) == 0 else 1  # 8 elements at once where aligned
    block = 256
    grid = min((n + block * vec - 1) // (block * vec), 65536)
    mod.cast[grid, block](flat_in, flat_out, n, S=src.name, T=dst.name, SAT=saturate, VEC=vec)
    return out


def mx_quantize(x: Any, fmt: str = "f8e4m3", *, target: str = "auto") -> tuple[Any, Any]:
    """OCP MX block quantisation of ``x`` (f32, f16 or bf16; the last axis a multiple of 32) into
    MXFP8, MXFP6, MXFP4 or MXINT8: ``(codes, scales)``, codes of ``fmt`` ('f8e4m3', 'f8e5m2',
    'f6e2m3', 'f6e3m2', 'f4e2m1'; one per byte, ml_dtypes' layout; 'int8': int8) with x's shape, E8M0 scales of
    shape ``x.shape[:-1] + (x.shape[-1] // 32,)``; numpy in, numpy out (torch in, torch out). The
    rules and choices are kcompiler.numerics.mx's, which gives the same bits on the host. Raises
    ValueError for another format or shape, TypeError for another dtype."""
    from .numerics import mx

    src = arrays.array_scalar_type(x) if arrays.is_array(x) else None
    if src is None or src.name not in ("f32", "f16", "bf16"):
        raise TypeError(f"mx_quantize: x must be an array of f32, f16 or bf16, not {arrays.describe(x)}")
    if fmt not in mx.ELEMENTS:
        raise ValueError(f"mx_quantize: fmt must be one of {sorted(mx.ELEMENTS)}, not {fmt!r}")
    shape = tuple(x.shape)
    if not shape or shape[-1] % mx.BLOCK:
        raise ValueError(f"mx_quantize: the last axis of {shape} must be a multiple of {mx.BLOCK}")
    scale_shape = shape[:-1] + (shape[-1] // mx.BLOCK,)
    codes, scales = _empty_like(x, shape, "i8" if fmt == "int8" else fmt), _empty_like(x, scale_shape, "e8m0")
    n = int(np.prod(shape))
    if n:
        mod = _module("mx", _target_for(x, target))
        mod.mx_quantize[(n + 8191) // 8192, 256](_flat(x), _flat(codes), _flat(scales), n, S=src.name,
                                                T="i8" if fmt == "int8" else fmt, EMAX=mx.ELEMENTS[fmt],
                                                INT=fmt == "int8")
    return codes, scales


def mx_dequantize(codes: Any, scales: Any, dtype: Any = np.float32, *, target: str = "auto") -> Any:
    """The values X * P_i of MX ``codes`` and their E8M0 ``scales`` (as :func:`mx_quantize` gives
    them), as ``dtype`` (f32, f16 or bf16); NaN where a scale is NaN."""
    from .numerics import mx

    t = arrays.array_scalar_type(codes) if arrays.is_array(codes) else None
    fmt = "int8" if t is not None and t.name == "i8" else (t.name if t is not None else "")
    if fmt not in mx.ELEMENTS:
        raise TypeError(f"mx_dequantize: codes must be of an MX element format ({', '.join(mx.ELEMENTS)}), "
                        f"not {arrays.describe(codes)}")
    dst = SCALARS.get(dtype) if isinstance(dtype, str) else arrays.scalar_of_dtype(dtype)
    if dst is None or dst.name not in ("f32", "f16", "bf16"):
        raise TypeError(f"mx_dequantize: dtype must be f32, f16 or bf16, not {dtype!r}")
    shape = tuple(codes.shape)
    if not shape or shape[-1] % mx.BLOCK:
        raise ValueError(f"mx_dequantize: the last axis of {shape} must be a multiple of {mx.BLOCK}")
    out = _empty_like(codes, shape, dst.name)
    n = int(np.prod(shape))
    if n:
        mod = _module("mx", _target_for(codes, target))
        mod.mx_dequantize[(n + 2047) // 2048, 256](_flat(codes), _flat(scales), _flat(out), n, T=t.name,
                                                  D=dst.name, INT=fmt == "int8")
    return out


def pack_fp4(codes: Any, *, target: str = "auto") -> Any:
    """FP4 (E2M1) ``codes``, one per byte, packed two to a byte by a kernel: the element of the lower
    index in the low nibble (NVIDIA's ``__nv_fp4x2_e2m1`` order); shape ``(..., n // 2)``, uint8.
    Raises ValueError for an odd last axis, TypeError for codes of another dtype."""
    t = arrays.array_scalar_type(codes) if arrays.is_array(codes) else None
    if t is None or t.name != "f4e2m1":
        raise TypeError(f"pack_fp4: codes must be f4e2m1, not {arrays.describe(codes)}")
    shape = tuple(codes.shape)
    if not shape or shape[-1] % 2:
        raise ValueError(f"pack_fp4: the last axis of {shape} must be even")
    out = _empty_like(codes, shape[:-1] + (shape[-1] // 2,), "u8")
    pairs = int(np.prod(shape)) // 2
    if pairs:
        mod = _module("mx", _target_for(codes, target))
        mod.pack_fp4[(pairs + 255) // 256, 256](_flat(codes), _flat(out), pairs)
    return out


def unpack_fp4(packed: Any, *, target: str = "auto") -> Any:
    """The inverse of :func:`pack_fp4`: f4e2m1 codes, one per byte, shape ``(..., 2 * n)``."""
    t = arrays.array_scalar_type(packed) if arrays.is_array(packed) else None
    if t is None or t.name != "u8":
        raise TypeError(f"unpack_fp4: packed must be uint8, not {arrays.describe(packed)}")
    shape = tuple(packed.shape)
    out = _empty_like(packed, shape[:-1] + (2 * shape[-1],), "f4e2m1")
    pairs = int(np.prod(shape))
    if pairs:
        mod = _module("mx", _target_for(packed, target))
        mod.unpack_fp4[(pairs + 255) // 256, 256](_flat(packed), _flat(out), pairs)
    return out


def pack_fp6(codes: Any, *, target: str = "auto") -> Any:
    """FP6 (E2M3 or E3M2) ``codes``, one per byte, packed four to three bytes by a kernel: one
    LSB-first bit stream per row (kcompiler.numerics.mx.pack_fp6 states the layout and its source);
    shape ``(..., 3 * n // 4)``, uint8. Raises ValueError unless the last axis is a multiple of 4,
    TypeError for codes of another dtype."""
    t = arrays.array_scalar_type(codes) if arrays.is_array(codes) else None
    if t is None or t.name not in ("f6e2m3", "f6e3m2"):
        raise TypeError(f"pack_fp6: codes must be f6e2m3 or f6e3m2, not {arrays.describe(codes)}")
    shape = tuple(codes.shape)
    if not shape or shape[-1] % 4:
        raise ValueError(f"pack_fp6: the last axis of {shape} must be a multiple of 4")
    out = _empty_like(codes, shape[:-1] + (3 * shape[-1] // 4,), "u8")
    groups = int(np.prod(shape)) // 4
    if groups:
        mod = _module("mx", _target_for(codes, target))
        mod.pack_fp6[(groups + 255) // 256, 256](_flat(codes), _flat(out), groups, T=t.name)
    return out


def unpack_fp6(packed: Any, fmt: str = "f6e2m3", *, target: str = "auto") -> Any:
    """The inverse of :func:`pack_fp6`: ``fmt`` ('f6e2m3' or 'f6e3m2') codes, one per byte, shape
    ``(..., 4 * n // 3)`` (numpy arrays: torch has no one-code-a-byte FP6 dtype). Raises ValueError
    for another format or a last axis that is not a multiple of 3, TypeError unless uint8."""
    t = arrays.array_scalar_type(packed) if arrays.is_array(packed) else None
    if t is None or t.name != "u8":
        raise TypeError(f"unpack_fp6: packed must be uint8, not {arrays.describe(packed)}")
    if fmt not in ("f6e2m3", "f6e3m2"):
        raise ValueError(f"unpack_fp6: fmt must be 'f6e2m3' or 'f6e3m2', not {fmt!r}")
    shape = tuple(packed.shape)
    if not shape or shape[-1] % 3:
        raise ValueError(f"unpack_fp6: the last axis of {shape} must be a multiple of 3")
    out = _empty_like(packed, shape[:-1] + (4 * shape[-1] // 3,), fmt)
    groups = int(np.prod(shape)) // 3
    if groups:
        mod = _module("mx", _target_for(packed, target))
        mod.unpack_fp6[(groups + 255) // 256, 256](_flat(packed), _flat(out), groups, T=fmt)
    return out


def nvfp4_quantize(x: Any, global_scale: float = 1.0, *, target: str = "auto") -> tuple[Any, Any]:
    """NVFP4 quantisation of ``x`` (f32, f16 or bf16; the last axis a multiple of 16): ``(codes,
    scales)``, FP4 (E2M1) codes one per byte with x's shape and E4M3 scales, one per 16 along the last
    axis; ``global_scale`` is the per-tensor f32 factor (kcompiler.numerics.mx.nvfp4_quantize gives
    the rules and the same bits on the host). Raises ValueError / TypeError for a bad shape or dtype."""
    src = arrays.array_scalar_type(x) if arrays.is_array(x) else None
    if src is None or src.name not in ("f32", "f16", "bf16"):
        raise TypeError(f"nvfp4_quantize: x must be an array of f32, f16 or bf16, not {arrays.describe(x)}")
    shape = tuple(x.shape)
    if not shape or shape[-1] % 16:
        raise ValueError(f"nvfp4_quantize: the last axis of {shape} must be a multiple of 16")
    codes, scales = _empty_like(x, shape, "f4e2m1"), _empty_like(x, shape[:-1] + (shape[-1] // 16,), "f8e4m3")
    n = int(np.prod(shape))
    if n:
        mod = _module("mx", _target_for(x, target))
        mod.nvfp4_quantize[(n + 2047) // 2048, 256](_flat(x), _flat(codes), _flat(scales),
                                                   np.float32(global_scale), n, S=src.name)
    return codes, scales


def nvfp4_dequantize(codes: Any, scales: Any, global_scale: float = 1.0, dtype: Any = np.float32, *,
                     target: str = "auto") -> Any:
    """The values FP4 * scale / global_scale of :func:`nvfp4_quantize`'s output, as ``dtype``."""
    dst = SCALARS.get(dtype) if isinstance(dtype, str) else arrays.scalar_of_dtype(dtype)
    if dst is None or dst.name not in ("f32", "f16", "bf16"):
        raise TypeError(f"nvfp4_dequantize: dtype must be f32, f16 or bf16, not {dtype!r}")
    if not codes.shape or codes.shape[-1] % 16:
        raise ValueError(f"nvfp4_dequantize: the last axis of {tuple(codes.shape)} must be a multiple of 16")
    out = _empty_like(codes, tuple(codes.shape), dst.name)
    n = int(np.prod(tuple(codes.shape)))
    if n:
        mod = _module("mx", _target_for(codes, target))
        mod.nvfp4_dequantize[(n + 2047) // 2048, 256](_flat(codes), _flat(scales), np.float32(global_scale),
                                                     _flat(out), n, D=dst.name)
    return out


#: The kernel behind :func:`math`: FN over arrays in 4-element vectors (16-byte accesses for f32; the
#: arrays are aligned: see _flat). Block b covers VV tiles of 4 * block_dim consecutive elements, one
#: after another, thread t the vector at 4t of each; a vector cut by n is done element by element.
#: No grid-stride loop: the grid covers n (math_launch). On the H100 this shape ran the long functions
#: 1-4% faster than a loop over the vectors, the short ones as fast (benchmarks/RESULTS.md, 2026-11-23).
_MATH_KERNEL = """
import std.math
kernel apply[T: type](INS, y: ptr<T>, n: i64) {
    let tile = i64(block_dim.x) * 4i64;
    var i = i64(block_id.x) * tile * VVi64 + i64(thread_id.x) * 4i64;
    for j in comptime range(0, VV) {
        if i + 4i64 <= n {
            LOADS
            var r: vec<T, 4>;
            for k in comptime range(0, 4) {
                r[k] = FN(ARGS_K);
            }
            store(y + i, r);
        } else {
            var m = i;
            while m < n {
                y[m] = FN(ARGS_M);
                m += 1i64;
            }
        }
        i += tile;
    }
}
"""


def math_kernel_source(fn: str, arity: int, vectors: int = 1) -> str:
    """The source of :func:`math`'s kernel ``apply[T](x0, ..., y, n)`` for std.math's ``fn``
    ('math.exp', 'math.fast_pow'), ``vectors`` 4-element vectors a thread (launch it with
    :func:`math_launch`)."""
    return (_MATH_KERNEL.replace("INS", ", ".join(f"x{k}: ptr<T>" for k in range(arity)))
            .replace("LOADS", "\n            ".join(f"let v{k} = load[vec<T, 4>](x{k} + i);" for k in range(arity)))
            .replace("ARGS_K", ", ".join(f"v{k}[k]" for k in range(arity)))
            .replace("ARGS_M", ", ".join(f"x{k}[m]" for k in range(arity)))
            .replace("VV", str(vectors))
            .replace("FN", fn))


def math_launch(n: int, vectors: int = 1) -> tuple[int, int]:
    """(grid, block) of :func:`math`'s kernel with ``vectors`` vectors a thread over ``n`` > 0
    elements: 256 threads a block (512 with 2 vectors: the faster on the H100 for gelu, the one
    function with 2), as many blocks as cover n."""
    block = 256 * vectors
    return -(-n // (4 * vectors * block)), block


@functools.lru_cache(maxsize=None)
def _math_module(name: str, fast: bool, arity: int, target: str, target_options: tuple = ()) -> Any:
    """The module of :func:`math`'s kernel for ``name``; compiled once per process (and cached on
    disk). ``target_options``: (name, value) pairs."""
    from . import compile as compile_source
    fn = f"{'fast_' if fast else ''}{name}"
    return compile_source(math_kernel_source(f"math.{fn}", arity, math_vectors(fn)), target=target,
                          path=f"<kcompiler.ops.math math.{fn}>",
                          target_options=dict(target_options) or None)


def math_vectors(fn: str) -> int:
    """4-element vectors a thread in :func:`math`'s kernel for std.math's ``fn`` ('gelu',
    'fast_gelu', 'exp_rp'): kcompiler.numerics.mathfns.FUNCTIONS[fn].vectors for the accurate
    functions, 1 for the others."""
    from .numerics.mathfns import FUNCTIONS
    return FUNCTIONS[fn].vectors if fn in FUNCTIONS else 1


def math(name: str, *args: Any, fast: bool = False, target: str = "auto",  # noqa: A001 - its name
         target_options: dict[str, Any] | None = None) -> Any:
    """std.math's ``name`` applied elementwise by a kernel: ``math("exp", x)``, ``math("pow", x, y)``;
    a new array of the inputs' shape and kind (numpy in, numpy out; torch in, torch out). ``name`` is
    any function of kcompiler.numerics.mathfns.FUNCTIONS (its documented ulp bound there and in
    docs/math.md); ``fast=True`` runs ``math.fast_<name>`` (the hardware approximations, for the
    names in mathfns.FAST). ``target_options``: the target's own options, as :func:`kcompiler.compile`
    takes them (``{"contract": "nvptx"}`` on the CPU). Inputs: f32, f16 or bf16 (f64 for the
    functions with an f64 version), all of one dtype and shape. Raises ValueError for an unknown
    function or a wrong argument count or shape, TypeError for another dtype."""
    from .numerics.mathfns import FAST, FUNCTIONS

    f = FUNCTIONS.get(name)
    if f is None:
        raise ValueError(f"math: unknown function {name!r}; one of {', '.join(FUNCTIONS)}")
    if fast and name not in FAST:
        raise ValueError(f"math: {name} has no fast version; the fast ones: {', '.join(FAST)}")
    if len(args) != f.arity:
        raise ValueError(f"math: {name} takes {f.arity} array{'s' if f.arity > 1 else ''}, got {len(args)}")
    x = args[0]
    src = arrays.array_scalar_type(x) if arrays.is_array(x) else None
    floats = ("f32", "f16", "bf16") + (("f64",) if f.f64 and not fast else ())
    if src is None or src.name not in floats:
        raise TypeError(f"math: {'fast ' if fast else ''}{name} takes arrays of {', '.join(floats)}, "
                        f"not {arrays.describe(x)}")
    for a in args[1:]:
        if not arrays.is_array(a) or arrays.array_scalar_type(a) != src or tuple(a.shape) != tuple(x.shape):
            raise ValueError(f"math: {name}'s arrays must share one dtype and shape ({src}, {tuple(x.shape)})")
    out = _empty_like(x, tuple(x.shape), src.name)
    n = int(np.prod(tuple(x.shape)))
    if n:
        mod = _math_module(name, fast, f.arity, _target_for(x, target),
                           tuple(sorted((target_options or {}).items())))
        grid, block = math_launch(n, math_vectors(("fast_" if fast else "") + name))
        mod.apply[grid, block](*[_flat(a) for a in args], _flat(out), n, T=src.name)
    return out


def _torch_dtype(name: str) -> Any:
    import torch
    if name not in _TORCH or not hasattr(torch, _TORCH[name]):
        raise TypeError(f"no torch dtype holds {name} one value a byte: pass numpy arrays for {name} results")
    return getattr(torch, _TORCH[name])


def _empty_like(x: Any, shape: tuple, name: str) -> Any:
    if arrays.is_torch_tensor(x):
        import torch
        return torch.empty(shape, dtype=_torch_dtype(name), device=x.device)
    return np.empty(shape, arrays.numpy_dtype(SCALARS[name]))


def _data_ptr(a: Any) -> int:
    """The device address of a torch or CUDA-array-interface array; 0 for a host array (copied to
    fresh, aligned device memory at launch, or used in place by the CPU target, which needs no
    alignment)."""
    if arrays.is_torch_tensor(a):
        return a.data_ptr() if a.is_cuda else 0
    if hasattr(a, "__cuda_array_interface__") and not isinstance(a, np.ndarray):
        return a.__cuda_array_interface__["data"][0]
    return 0


def _flat(a: Any, align: int = 32) -> Any:
    """``a`` as a contiguous 1-D array whose device data is ``align``-byte aligned (the stdlib's
    kernels access 8 elements at once): a misaligned torch view is copied. Host (numpy) arrays are
    copied to fresh, aligned device memory at launch, and the CPU target needs no alignment."""
    if not arrays.is_torch_tensor(a):
        return a.reshape(-1)
    flat = a.contiguous().view(-1)
    return flat if not flat.is_cuda or flat.data_ptr() % align == 0 else flat.clone()


#: torch dtypes of the language's types. FP6 and FP4 have none: torch's float4_e2m1fn_x2 holds two
#: codes a byte, kcompiler one, so results of those types are numpy arrays only.
_TORCH = {"i8": "int8", "u8": "uint8", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2", "f8e4m3fnuz": "float8_e4m3fnuz",
          "f8e5m2fnuz": "float8_e5m2fnuz", "e8m0": "float8_e8m0fnu", "f16": "float16", "bf16": "bfloat16",
          "f32": "float32", "f64": "float64"}

__all__ = ["attention", "cast", "math", "matmul", "merge_states", "mla_decode", "mx_dequantize", "mx_quantize", "nvfp4_dequantize", "nvfp4_quantize",
           "pack_fp4", "paged_decode", "pack_fp6", "unpack_fp4", "unpack_fp6"]


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


def matmul_tiles(M: int, N: int, K: int, tensor_cores: bool) -> dict[str, int]:
    """The tile sizes :func:`matmul` uses for an M x K by K x N product when it does not tune (the
    CPU target, the SIMT path, ``tune=False`` / ``KC_TUNE=0``, numpy inputs; see
    :func:`matmul_tuned_tiles`): a fixed heuristic."""
    if not tensor_cores:
        return dict(MATMUL_TILES["simt"])
    # 128 x 128 tiles once there are enough of them to fill the GPU (132 SMs on an H100 SXM)
    big = -(-M // 128) * -(-N // 128) >= 132
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
    import hashlib
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
    import time

    from .diagnostics import CompileError
    from .runtime.autotune import CandidateRejected, autotune
    from .runtime.device import LaunchError

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

    return autotune(problem, MATMUL_TUNE_CANDIDATES, time_one, default=default, enabled=tune, unit="s")


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
    from . import compile as compile_source
    return compile_source(source.rstrip("\n") + "\n" + _EPILOGUE_KERNEL, target=target,
                          path="<kcompiler.ops.matmul epilogue>")


def _unread_input(like: Any) -> Any:
    """A one-element f32 array of ``like``'s kind for an epilogue input that is not read. Not ``out``:
    a host array passed twice is copied to the device twice and back twice, the second copy back
    over the result."""
    return _torch_f32_scalar(str(like.device)) if arrays.is_torch_tensor(like) else np.zeros(1, np.float32)


@functools.lru_cache(maxsize=None)
def _torch_f32_scalar(device: str) -> Any:
    import torch
    return torch.zeros(1, dtype=torch.float32, device=device)


def _apart_from(x: Any, out: Any) -> Any:
    """Epilogue input ``x``, copied if it is a host array sharing memory with ``out`` (host arrays are
    copied to the device and back at a launch: its stale copy would land over the result)."""
    return x.copy() if isinstance(x, np.ndarray) and isinstance(out, np.ndarray) and np.shares_memory(x, out) else x


def _epilogue_inputs(ep: Epilogue, a: Any, M: int, N: int) -> list[Any]:
    """``ep``'s x and y, checked (kind, dtype, contiguity; a stock epilogue's shapes) and flattened;
    None for one it does not read."""
    want = EPILOGUES.get(ep.fn, (None, None)) if ep.source is None else ("any", "any")
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
        got.append(_flat(x, 1))
    return got


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

    On NVIDIA GPUs f16 and bf16 run on the
    tensor cores (mma.sync, ldmatrix, cp.async; stdlib/matmul.kc), f32 and every other target on
    the SIMT path. On an sm_90 GPU (H100), torch CUDA tensors whose rows are multiples of 16 bytes
    take the Hopper path instead (TMA, wgmma, warp-specialised persistent kernel;
    stdlib/matmul_sm90.kc, kcompiler.matmul_sm90), with its own tile choice (``tiles`` and the
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
    (kcompiler.matmul_sm90.PLANS): a later call on the same operands (the same addresses, shapes,
    strides, dtypes; an ``out`` like the first one's) skips the checks and the choices."""
    key = None
    if epilogue is None and tiles is None and tune is None and target == "auto":
        from . import matmul_sm90
        try:
            key = matmul_sm90.plan_key("matmul", (a, b), out, out_dtype)
            plan = matmul_sm90.PLANS.get(key) if key is not None else None
        except TypeError:  # an unhashable out_dtype: the checks below say what is wrong
            key = plan = None
        if plan is not None:
            return plan(out)
    copied = False  # a or b copied: no plan (it would keep the copy)
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
    outs = ("f32", "f16", "bf16", "f8e4m3", "f8e5m2")
    if isinstance(epilogue, str):
        epilogue = Epilogue(epilogue)
    if epilogue is not None and not isinstance(epilogue, Epilogue):
        raise TypeError(f"matmul: epilogue must be an ops.Epilogue or a stock epilogue's name, not {epilogue!r}")
    if isinstance(epilogue, Epilogue) and epilogue.source is None and epilogue.fn in BLOCK_EPILOGUES:
        epilogue = dataclasses.replace(epilogue, fn="identity", block=epilogue.fn)
    if epilogue is not None and epilogue.source is None and epilogue.fn not in EPILOGUES:
        raise ValueError(f"matmul: no stock epilogue {epilogue.fn!r}; the stock ones: {', '.join(EPILOGUES)} "
                         f"and the block ones {', '.join(BLOCK_EPILOGUES)} (or pass source=... defining it)")
    block = epilogue.block if epilogue is not None else None
    scales = None
    if block is not None:
        if block not in BLOCK_EPILOGUES:
            raise ValueError(f"matmul: no block epilogue {block!r}; the block epilogues: {', '.join(BLOCK_EPILOGUES)}")
        out, scales = _mx_outputs(a, out, out_dtype, block, M, N)
        out_dtype = None
    if out is not None:
        dst = arrays.array_scalar_type(out) if arrays.is_array(out) else None
        if dst is None or dst.name not in outs:
            raise TypeError(f"matmul: out must be an array of {', '.join(outs)}, not {arrays.describe(out)}")
        if tuple(out.shape) != (M, N) or not arrays.is_contiguous(out):
            raise ValueError(f"matmul: out must be a contiguous ({M}, {N}) array, not {tuple(out.shape)}"
                             f"{'' if arrays.is_contiguous(out) else ' (not contiguous)'}")
        if arrays.is_torch_tensor(out) != arrays.is_torch_tensor(a):
            raise TypeError("matmul: out must be of a's kind (numpy or torch)")
    else:
        dst = src if out_dtype is None else (SCALARS.get(out_dtype) if isinstance(out_dtype, str)
                                             else arrays.scalar_of_dtype(out_dtype))
        if dst is None or dst.name not in outs:
            raise TypeError(f"matmul: out_dtype must be one of {', '.join(outs)}, not {out_dtype!r}")
        out = _empty_like(a, (M, N), dst.name)
    ex = _epilogue_inputs(epilogue, a, M, N) if epilogue is not None else None
    result = out if scales is None else (out, scales)
    if M == 0 or N == 0:
        return result
    if not arrays.is_contiguous(a):
        a, copied = (a.contiguous() if arrays.is_torch_tensor(a) else np.ascontiguousarray(a)), True
    bt = b.T if hasattr(b, "T") else None
    b_kmajor = not arrays.is_contiguous(b) and bt is not None and arrays.is_contiguous(bt)
    if b_kmajor:
        b = bt  # (N, K), contiguous: B[k][n] = b[n * K + k]
    elif not arrays.is_contiguous(b):
        b, copied = (b.contiguous() if arrays.is_torch_tensor(b) else np.ascontiguousarray(b)), True
    tgt = _target_for(a, target)
    if tiles is None and tgt == "cuda":
        from . import matmul_sm90  # the Hopper path (TMA + wgmma, stdlib/matmul_sm90.kc) where it applies
        b90 = matmul_sm90.operand_b(a, b, out, b_kmajor)
        if b90 is not None:
            mod90, epi = _module("matmul_sm90", tgt), None
            if epilogue is not None:
                if epilogue.source is not None:
                    mod90 = matmul_sm90.epilogue_module(epilogue.source)
                fo = _flat(out, 1)
                epi = (f"epilogue.{epilogue.fn}" if epilogue.source is None else epilogue.fn,
                       ex[0] if ex[0] is not None else fo, ex[1] if ex[1] is not None else fo, epilogue.s)
            # a row-major B is read N-major (wgmma's transposed B) where TMA can describe its rows
            z = None if block is None else (_block_fn(epilogue), _e8m0_view(_flat(scales, 1)))
            go = matmul_sm90.prepare(mod90, a, b90[0], out, b_kmajor=b90[1], epilogue=epi, block=z)
            if not copied and b90[0] is b:
                matmul_sm90.remember(key, go, (M, N), out.dtype, out.device)
            go(out)
            return result
    mod = _module("matmul", tgt)
    tensor_cores = mod.target == "nvptx" and src.name in ("f16", "bf16")  # every NVIDIA arch here is sm_80+
    mfma = mod._program.target.has("mfma") and src.name in ("f16", "bf16")  # AMD CDNA: wavefronts of 64
    ldb = K if b_kmajor else N
    fa, fb, fo = _flat(a, 16), _flat(b, 16), _flat(out, 1)  # out is written in place: never copied
    aligned = K % 8 == 0 and ldb % 8 == 0 and N % 8 == 0 and all(_data_ptr(x) % 16 == 0 for x in (fa, fb, fo))
    params = dict(T=src.name, OUT=dst.name, B_KMAJOR=b_kmajor, ALIGNED=aligned)
    if epilogue is None:
        kernel, pack = mod.matmul, ()
    else:
        emod = mod if epilogue.source is None else _epilogue_module(epilogue.source, tgt)
        params["EPI"] = f"epilogue.{epilogue.fn}" if epilogue.source is None else epilogue.fn
        kernel = emod.matmul_epilogue if block is None else emod.matmul_block_epilogue
        pack = tuple(_unread_input(a) if x is None else _apart_from(x, out) for x in ex) + (np.float32(epilogue.s),)
        if block is not None:
            params.update(Z="e8m0", BLOCK=32, BEPI=_block_fn(epilogue))
            pack += (_e8m0_view(_flat(scales, 1)),)

    def run(t: dict[str, int], c: Any = fo, kernel: Any = kernel, pack: tuple = pack, params: dict = params) -> None:
        threads = t["BM"] // t["WM"] * (t["BN"] // t["WN"]) * (64 if mfma else 32)
        grid = (-(-N // t["BN"]), -(-M // t["BM"]))
        kernel[grid, threads](fa, fb, c, M, N, K, K, ldb, N, *pack,
                              shared=matmul_shared_bytes(t, src.size, b_kmajor, mfma), **params, **t)

    if tiles is not None:
        t = dict(tiles)
    elif not tensor_cores:
        t = matmul_tiles(M, N, K, False)
    else:
        problem = dict(op="matmul", M=_size_class(M), N=_size_class(N), K=_size_class(K), T=src.name, OUT=dst.name,
                       B_KMAJOR=b_kmajor, ALIGNED=aligned, target=mod.target, arch=mod.arch,
                       device=str(getattr(mod.device, "name", "")), source=_matmul_source_sha())
        on_device = _data_ptr(fa) != 0
        scratch = fo
        if on_device and epilogue is not None and any(x is not None and _data_ptr(x) == _data_ptr(fo) for x in ex):
            scratch = fo.clone() if arrays.is_torch_tensor(fo) else fo.copy()  # the epilogue reads out
        # timed without the epilogue (whose cost does not depend on the tiles): one choice for all
        plain = {k: v for k, v in params.items() if k != "EPI"}
        t = matmul_tuned_tiles(problem, lambda tt: run(tt, scratch, mod.matmul, (), plain), matmul_tiles(M, N, K, True),
                               tune=tune if on_device else False, synchronize=mod.device.synchronize)
    run(t)
    return result


def _block_fn(ep: Epilogue) -> str:
    """The block epilogue's fn as the kernel's module spells it: std.epilogue is ``epilogue`` in the
    stdlib's modules, ``kc_std_epilogue`` in the module of a user's epilogue source."""
    return f"{'epilogue' if ep.source is None else 'kc_std_epilogue'}.{ep.block}"


def _e8m0_view(x: Any) -> Any:
    """uint8 scales viewed as E8M0 (the block epilogues' z), in place."""
    if arrays.array_scalar_type(x).name == "e8m0":
        return x
    return x.view(_torch_dtype("e8m0")) if arrays.is_torch_tensor(x) else x.view(arrays.numpy_dtype(SCALARS["e8m0"]))


def _mx_outputs(a: Any, out: Any, out_dtype: Any, block: str, M: int, N: int) -> tuple[Any, Any]:
    """The (codes, scales) that :func:`matmul` with block epilogue ``block`` writes: ``out``'s pair,
    checked, or new arrays of a's kind."""
    fmt = BLOCK_EPILOGUES[block]
    if N % 32:
        raise ValueError(f"matmul: epilogue {block} quantises blocks of 32 columns: N = {N} is not a multiple of 32")
    if out_dtype is not None:
        want = SCALARS.get(out_dtype) if isinstance(out_dtype, str) else arrays.scalar_of_dtype(out_dtype)
        if want is None or want.name != fmt:
            raise TypeError(f"matmul: epilogue {block} gives {fmt} codes, not out_dtype {out_dtype!r}")
    if out is None:
        return _empty_like(a, (M, N), fmt), _empty_like(a, (M, N // 32), "e8m0")
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


# --- attention (stdlib/attention.kc) -------------------------------------------------------------------

#: Prefill tiles of std.attention on tensor cores, by head dimension: BM query rows a block (BM / WARPS
#: rows a warp), BN keys a step, STAGES K/V buffers; the fastest of benchmarks/bench_attention.py's
#: candidates on the H100 (B 4, H 32, S 4096, bf16, causal and not; benchmarks/RESULTS.md). Registers
#: (ptxas, sm_90a): 238 (D 64), 252 (D 128), 254 (D 256), none spilled.
ATTENTION_TILES = {64: dict(BM=128, BN=64, WARPS=4, STAGES=2), 128: dict(BM=128, BN=128, WARPS=8, STAGES=2),
                   256: dict(BM=128, BN=64, WARPS=8, STAGES=2)}
#: Prefill tiles of the SIMT path (a thread per query row).
ATTENTION_SIMT_TILES = dict(BM=64, BN=32, WARPS=2, STAGES=2)
#: Prefill tiles of the MFMA path (AMD CDNA; a wavefront per 16 query rows), by head dimension: within
#: gfx942's 64 KiB of LDS. Not tuned (no AMD GPU here).
ATTENTION_MFMA_TILES = {128: dict(BM=64, BN=64, WARPS=4, STAGES=1), 256: dict(BM=32, BN=32, WARPS=2, STAGES=1)}


def attention_shared_bytes(tiles: dict[str, int], head_dim: int, itemsize: int, tensor_cores: bool,
                           mfma: bool = False) -> int:
    """Dynamic shared memory of std.attention's prefill in bytes (the formulas stated in
    stdlib/attention.kc): Q's tile and STAGES tiles of K and V, rows padded to D + 8 elements, on
    tensor cores; on MFMA Q's and K's tiles (rows of D + 4) and V's transposed (rows of BN + 4); one
    tile of K and of V in SIMT."""
    if tensor_cores:
        return (tiles["BM"] + 2 * tiles["STAGES"] * tiles["BN"]) * (head_dim + 8) * itemsize
    if mfma:
        return ((tiles["BM"] + tiles["BN"]) * (head_dim + 4) + head_dim * (tiles["BN"] + 4)) * itemsize
    return 2 * tiles["BN"] * head_dim * itemsize


@functools.lru_cache(maxsize=None)
def _module_ftz(name: str, target: str) -> Any:
    from . import compile_file
    return compile_file(stdlib_dir() / f"{name}.kc", target=target, target_options={"approx_ftz": True})


def _attention_module(target: str) -> Any:
    """std.attention for ``target``; on NVIDIA compiled with ``approx_ftz`` (:func:`_module_ftz`:
    ex2.approx.ftz, one instruction without the subnormal fix-up, as FlashAttention's nvcc
    --use_fast_math; a probability below 2^-126 becomes 0): 2-3 % faster prefill on the H100
    (benchmarks/RESULTS.md), the same results within the tests' bounds."""
    mod = _module("attention", target)
    return _module_ftz("attention", target) if mod.target == "nvptx" else mod


def _contiguous(x: Any) -> Any:
    if arrays.is_contiguous(x):
        return x
    return x.contiguous() if arrays.is_torch_tensor(x) else np.ascontiguousarray(x)


def _query_type(q: Any, fn: str, name: str = "q") -> Any:
    """The scalar type of attention's query array ``q`` (f16, bf16 or f32); TypeError otherwise."""
    src = arrays.array_scalar_type(q) if arrays.is_array(q) else None
    if src is None or src.name not in ("f16", "bf16", "f32"):
        raise TypeError(f"{fn}: {name} must be an array of f16, bf16 or f32, not {arrays.describe(q)}")
    return src


def _check_same(name: str, x: Any, src: Any, fn: str) -> None:
    if not arrays.is_array(x) or arrays.array_scalar_type(x) != src:
        raise TypeError(f"{fn}: {name} must be an array of {src} like q, not {arrays.describe(x)}")


def _index_array(x: Any, like: Any, name: str, fn: str, n: int | None = None) -> Any:
    """``x`` as a contiguous int32 array of q's kind (numpy, or torch on q's device)."""
    if arrays.is_torch_tensor(like):
        import torch
        t = torch.as_tensor(x, device=like.device)
        if t.dtype != torch.int32:
            raise TypeError(f"{fn}: {name} must hold int32, not {t.dtype}")
        x = t.contiguous()
    else:
        if arrays.is_torch_tensor(x):
            x = x.cpu().numpy()
        x = np.ascontiguousarray(x)
        if x.dtype != np.int32:
            raise TypeError(f"{fn}: {name} must hold int32, not {x.dtype}")
    if len(x.shape) != 1 or (n is not None and x.shape[0] != n):
        raise ValueError(f"{fn}: {name} must be 1-D{f' of length {n}' if n is not None else ''}, "
                         f"not of shape {tuple(x.shape)}")
    return x


def _host_ints(x: Any) -> np.ndarray:
    return x.cpu().numpy() if arrays.is_torch_tensor(x) else np.asarray(x)


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None,
              cu_seqlens_q: Any = None, cu_seqlens_k: Any = None, max_seqlen_q: int | None = None,
              layout: str = "bshd", return_lse: bool = False, tiles: dict[str, int] | None = None,
              path: str = "auto", target: str = "auto") -> Any:
    """Softmax attention, flash-attention style (stdlib/attention.kc; no S x S matrix is formed):
    ``softmax(scale * q k^T [+ causal mask]) v`` per batch entry and query head, f32 accumulation,
    the result in q's dtype; with ``return_lse``, also the log-sum-exp of each row (f32, natural log,
    -inf for a row that sees no key, whose output is 0).

    Shapes (D the head dimension, a multiple of 16 up to 256 on tensor cores; Hq a multiple of Hkv,
    grouped-query attention where they differ):

    - ``layout='bshd'`` (FlashAttention's): q (B, Sq, Hq, D), k and v (B, Sk, Hkv, D), the result like
      q, LSE (B, Hq, Sq); ``layout='bhsd'`` (torch SDPA's): q (B, Hq, Sq, D), k and v (B, Hkv, Sk, D).
    - variable lengths (``cu_seqlens_q`` and ``cu_seqlens_k``, int32 of length B + 1: the sequences
      packed along the first axis, FlashAttention's varlen): q (total_q, Hq, D), k and v (total_k, Hkv,
      D), LSE (Hq, total_q); ``max_seqlen_q`` is read off cu_seqlens_q when not given.

    q, k and v: f16 or bf16 (tensor cores on NVIDIA sm_80+), or f32 (the SIMT path), one dtype; numpy
    in, numpy out; torch in, torch out. ``causal`` masks FlashAttention's way, bottom-right aligned:
    query i of a sequence of Sq queries and Sk keys sees keys j <= i + Sk - Sq (torch's is_causal when
    Sq == Sk). ``scale`` defaults to 1 / sqrt(D).

    ``path``: 'auto' takes the Hopper kernel (stdlib/attention_sm90.kc: TMA, wgmma, warp-specialised,
    FlashAttention-3's design) where :func:`attention_sm90_reason_not` finds nothing against it (an
    sm_90 GPU, torch CUDA tensors, f16/bf16, D 64 or 128), else std.attention (FlashAttention-2 on
    mma.sync on NVIDIA; MFMA on AMD; SIMT elsewhere); 'sm90' insists on the Hopper kernel (RuntimeError
    where it cannot run), 'fa2' on std.attention. ``tiles``: the kernel's tiles instead of the
    defaults: BM, BN, WARPS, STAGES for std.attention (:data:`ATTENTION_TILES`; given with path
    'auto', they choose std.attention), BN, STAGES, OVERLAP, PINGPONG for the Hopper kernel
    (:data:`ATTENTION_SM90_TILES`). Raises TypeError for other dtypes, ValueError for shapes that do
    not match."""
    fn = "attention"
    src = _query_type(q, fn)
    _check_same("k", k, src, fn)
    _check_same("v", v, src, fn)
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if varlen and (cu_seqlens_q is None or cu_seqlens_k is None):
        raise ValueError(f"{fn}: variable lengths need both cu_seqlens_q and cu_seqlens_k")
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"{fn}: layout must be 'bshd' or 'bhsd', not {layout!r}")
    if path not in ("auto", "sm90", "fa2"):
        raise ValueError(f"{fn}: path must be 'auto', 'sm90' or 'fa2', not {path!r}")
    rank = 3 if varlen else 4
    for name, x in (("q", q), ("k", k), ("v", v)):
        if len(x.shape) != rank:
            raise ValueError(f"{fn}: {name} must be {rank}-D ({'(total, H, D) with cu_seqlens' if varlen else layout}),"
                             f" not of shape {tuple(x.shape)}")
    if tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"{fn}: k and v must have one shape, not {tuple(k.shape)} and {tuple(v.shape)}")
    q, k, v = _contiguous(q), _contiguous(k), _contiguous(v)
    D = q.shape[-1]
    if varlen:
        (tq, H, _), (tk, HK, Dk) = tuple(q.shape), tuple(k.shape)
        cq = _index_array(cu_seqlens_q, q, "cu_seqlens_q", fn)
        B = cq.shape[0] - 1
        ck = _index_array(cu_seqlens_k, q, "cu_seqlens_k", fn, B + 1)
        hq_, hk_ = _host_ints(cq), _host_ints(ck)
        if B < 1 or hq_[0] != 0 or hk_[0] != 0 or (np.diff(hq_) < 0).any() or (np.diff(hk_) < 0).any() \
                or hq_[-1] > tq or hk_[-1] > tk:
            raise ValueError(f"{fn}: cu_seqlens must start at 0, not decrease, and end within q's {tq} and "
                             f"k's {tk} rows")
        Sq = int(max_seqlen_q) if max_seqlen_q is not None else int(np.diff(hq_).max())
        Sk = 0
        strides = dict(q_sb=0, q_ss=H * D, q_sh=D, k_sb=0, k_ss=HK * D, k_sh=D, o_sb=0, o_ss=H * D, o_sh=D)
        lse_shape, l_sb, l_sh = (H, tq), 0, tq
    else:
        if layout == "bshd":
            (B, Sq, H, _), (Bk, Sk, HK, Dk) = tuple(q.shape), tuple(k.shape)
            strides = dict(q_sb=Sq * H * D, q_ss=H * D, q_sh=D, k_sb=Sk * HK * D, k_ss=HK * D, k_sh=D,
                           o_sb=Sq * H * D, o_ss=H * D, o_sh=D)
        else:
            (B, H, Sq, _), (Bk, HK, Sk, Dk) = tuple(q.shape), tuple(k.shape)
            strides = dict(q_sb=H * Sq * D, q_ss=D, q_sh=Sq * D, k_sb=HK * Sk * D, k_ss=D, k_sh=Sk * D,
                           o_sb=H * Sq * D, o_ss=D, o_sh=Sq * D)
        if Bk != B:
            raise ValueError(f"{fn}: q has {B} batch entries but k has {Bk}")
        cq = ck = _index_array(np.zeros(1, np.int32), q, "cu_seqlens", fn)
        lse_shape, l_sb, l_sh = (B, H, Sq), H * Sq, Sq
    if Dk != D:
        raise ValueError(f"{fn}: q's head dimension is {D} but k's is {Dk}")
    if HK == 0 or H % HK:
        raise ValueError(f"{fn}: q's {H} heads must be a multiple of k's {HK} (grouped-query attention)")
    out = _empty_like(q, tuple(q.shape), src.name)
    lse = _empty_like(q, lse_shape, "f32")
    if B == 0 or Sq == 0 or H == 0 or D == 0 or int(np.prod(tuple(q.shape))) == 0:
        if arrays.is_torch_tensor(lse):
            lse.fill_(float("-inf"))
        else:
            lse.fill(-np.inf)
        return (out, lse) if return_lse else out
    if path == "sm90" or (path == "auto" and (tiles is None or "WARPS" not in tiles)):
        tgt = _target_for(q, target)
        why = attention_sm90_reason_not(q, k, v, out, D, Sk, varlen, tgt)
        if why is None:
            ends = (int(hq_[-1]), int(hk_[-1])) if varlen else None
            _attention_sm90(q, k, v, out, lse, cq, ck, Sq, Sk, H // HK, strides, l_sb, l_sh, layout, ends, causal,
                            D ** -0.5 if scale is None else scale, tiles, tgt)
            return (out, lse) if return_lse else out
        if path == "sm90":
            raise RuntimeError(f"{fn}: the Hopper path cannot run here: {why}")
    mod = _attention_module(_target_for(q, target))
    # the module's target decides the path, as the kernel's comptime test does (the CPU target with
    # emulate_mma takes the tensor-core path too)
    tensor_cores = mod._program.target.has("mma") and src.name in ("f16", "bf16")
    mfma = not tensor_cores and mod._program.target.has("mfma") and src.name in ("f16", "bf16")
    if (tensor_cores or mfma) and (D % 16 or D > 256):
        raise ValueError(f"{fn}: the head dimension must be a multiple of 16 up to 256, not {D}")
    if tiles is not None:
        t = dict(tiles)
    elif tensor_cores:
        t = dict(ATTENTION_TILES.get(D, ATTENTION_TILES[256 if D > 128 else 128 if D > 64 else 64]))
    elif mfma:
        t = dict(ATTENTION_MFMA_TILES[256 if D > 128 else 128])
    else:
        t = dict(ATTENTION_SIMT_TILES)
    threads = t["WARPS"] * 32 if tensor_cores else t["WARPS"] * 64 if mfma else t["BM"]
    fq, fk, fv, fo = _flat(q, 16), _flat(k, 16), _flat(v, 16), _flat(out, 1)
    aligned = D % 8 == 0 and all(_data_ptr(x) % 16 == 0 for x in (fq, fk, fv, fo))
    s = strides
    grid = (-(-Sq // t["BM"]), H, B)
    mod.attention_prefill[grid, threads](
        fq, fk, fv, fo, _flat(lse, 1), cq, ck, Sq, Sk, H // HK,
        s["q_sb"], s["q_ss"], s["q_sh"], s["k_sb"], s["k_ss"], s["k_sh"], s["k_sb"], s["k_ss"], s["k_sh"],
        s["o_sb"], s["o_ss"], s["o_sh"], l_sb, l_sh,
        np.float32(D ** -0.5 if scale is None else scale),
        T=src.name, D=D, CAUSAL=bool(causal), VARLEN=varlen, ALIGNED=aligned,
        shared=attention_shared_bytes(t, D, src.size, tensor_cores, mfma), **t)
    return (out, lse) if return_lse else out


#: Tiles of std.attention_sm90 (the Hopper prefill: 128 query rows a block, two consumer warpgroups of
#: 64), by (head dimension, causal): BN keys a step, STAGES K/V buffers, OVERLAP (FlashAttention-3's
#: intra-warpgroup overlap of the softmax with P V), PINGPONG (its inter-warpgroup turns). The fastest
#: of benchmarks/bench_attention.py's candidates on the H100 (B 4, H 32, S 4096, bf16; two runs,
#: benchmarks/RESULTS.md): at D 128 BN 128 in 2 stages, sequential: 425-436 TFLOP/s (causal 356-368);
#: OVERLAP 380 (310-322), OVERLAP + PINGPONG 372 (315), 3 stages 415 (351). At D 64 OVERLAP + PINGPONG
#: 301 (causal 215), sequential 283 (causal 246). Registers (ptxas, sm_90a): no spill but in the
#: causal D 128 OVERLAP forms (at most 16 bytes).
ATTENTION_SM90_TILES = {(128, False): dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=False),
                        (128, True): dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=False),
                        (64, False): dict(BN=128, STAGES=2, OVERLAP=True, PINGPONG=True),
                        (64, True): dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=False)}


def attention_sm90_shared_bytes(tiles: dict[str, Any], head_dim: int, itemsize: int = 2) -> int:
    """Dynamic shared memory of std.attention_sm90 in bytes (the formula stated in
    stdlib/attention_sm90.kc): Q's 128 rows and STAGES tiles of BN rows of K and of V, D elements each,
    then 3 + 4 * STAGES mbarriers."""
    return (128 + 2 * tiles["STAGES"] * tiles["BN"]) * head_dim * itemsize + 8 * (3 + 4 * tiles["STAGES"])


def _attention_sm90_module(target: str) -> Any:
    """std.attention_sm90 for ``target`` (with approx_ftz on NVIDIA, as :func:`_attention_module`)."""
    mod = _module("attention_sm90", target)
    return _module_ftz("attention_sm90", target) if mod.target == "nvptx" else mod


def attention_sm90_reason_not(q: Any, k: Any, v: Any, out: Any, head_dim: int, seqlen_k: int, varlen: bool,
                              target: str = "auto") -> str | None:
    """Why :func:`attention`'s Hopper path cannot compute this attention, or None when it can: it
    needs a target with wgmma (an sm_90 GPU; the CPU target's emulation for tests), f16 or bf16, D 64
    or 128, arrays the tensor maps can describe (device arrays on a GPU, numpy on the CPU target; 16-byte
    aligned rows) and keys (Sk > 0)."""
    t = arrays.array_scalar_type(q)
    if t is None or t.name not in ("f16", "bf16"):
        return "the Hopper path computes f16 and bf16"
    if head_dim not in (64, 128):
        return f"the Hopper path takes D = 64 or 128, not {head_dim} (D = 256 would need more registers)"
    if not varlen and seqlen_k == 0:
        return "no keys: a tensor map describes no empty tensor"
    why = _hopper_reason_not("attention_sm90", _attention_sm90_module, target, (q, k, v, out))
    if why is None and (any(_data_ptr(_flat(x, 1)) % 16 for x in (q, k, v)) or _data_ptr(_flat(out, 1)) % 4):
        return "TMA needs 16-byte aligned tensors"
    return why


def _hopper_reason_not(name: str, module: Callable[[str], Any], target: str, xs: tuple) -> str | None:
    """What keeps std.``name`` (a Hopper kernel fed by TMA tensor maps; ``module(target)`` compiles it)
    from running on arrays ``xs`` for ``target``, or None: 'auto' runs it on torch CUDA tensors only,
    the target must have wgmma (an sm_90 GPU, or the CPU target's emulation), and the arrays must be
    what its tensor maps can describe there (device arrays on a GPU, numpy ones on the CPU target)."""
    if target == "auto" and not (arrays.is_torch_tensor(xs[0]) and xs[0].is_cuda):
        return "the Hopper path runs on torch CUDA tensors"
    try:
        mod = module(target)
    except Exception as e:  # noqa: BLE001 - no CUDA here, no stdlib...: the path does not apply
        return f"std.{name} is not available ({e})"
    if not mod._program.target.has("wgmma"):
        return "the Hopper path needs an sm_90 GPU (wgmma, TMA)"
    device = mod.target != "cpu"
    if any(arrays.is_device_array(x) != device or (not device and not isinstance(x, np.ndarray)) for x in xs):
        return "the tensor maps need device arrays on a GPU (numpy ones on the CPU target)"
    return None


def _bhsd_view(x: Any, layout: str, end: int | None) -> Any:
    """``x`` as a (B, H, S, D) view for a tensor map: bshd transposed; varlen (total, H, D) as one batch
    entry of its first ``end`` rows (at least one: a map has no empty axis)."""
    if end is not None:
        x = x[:max(end, 1)]
        return x.permute(1, 0, 2)[None] if arrays.is_torch_tensor(x) else x.transpose(1, 0, 2)[None]
    if layout == "bhsd":
        return x
    return x.permute(0, 2, 1, 3) if arrays.is_torch_tensor(x) else x.transpose(0, 2, 1, 3)


def _attention_sm90(q: Any, k: Any, v: Any, out: Any, lse: Any, cq: Any, ck: Any, Sq: int, Sk: int, G: int,
                    strides: dict, l_sb: int, l_sh: int, layout: str, ends: tuple[int, int] | None, causal: bool,
                    scale: float, tiles: dict | None, target: str) -> None:
    """The launch of std.attention_sm90 (:func:`attention` checked the arguments; ``ends``: varlen's
    total rows of q and of k used, else None)."""
    from .runtime.tensormap import cached_tensor_map
    D = int(q.shape[-1])
    B = int(cq.shape[0]) - 1 if ends is not None else int(q.shape[0])
    H = int(q.shape[-2] if ends is not None or layout == "bshd" else q.shape[1])
    t = dict(ATTENTION_SM90_TILES[(D, bool(causal))])
    if tiles is not None:
        t.update(tiles)
    maps = [cached_tensor_map(_bhsd_view(x, layout, None if ends is None else ends[i > 0]), (1, 1, box, 64))
            for i, (x, box) in enumerate(((q, 128), (k, t["BN"]), (v, t["BN"])))]
    mod = _attention_sm90_module(target)
    s = strides
    grid = (-(-Sq // 128), H, B)
    mod.attention_prefill_sm90[grid, 384](
        *maps, _flat(out, 1), _flat(lse, 1), cq, ck, Sq, Sk, G, s["o_sb"], s["o_ss"], s["o_sh"], l_sb, l_sh,
        np.float32(scale), T=arrays.array_scalar_type(q).name, D=D, CAUSAL=bool(causal), VARLEN=ends is not None,
        shared=attention_sm90_shared_bytes(t, D), **t)


#: Streaming multiprocessors assumed by :func:`paged_decode`'s choice of splits where the device's
#: count is not at hand (numpy arrays, the CPU target): an H100 SXM's 132.
DECODE_SMS = 132
#: Shared memory a multiprocessor gives its blocks (sm_90: 228 KB, 1 KB of it reserved per block) and
#: the threads it holds; for the estimate of resident blocks in :func:`decode_splits`.
DECODE_SM_SHARED = 228 * 1024
DECODE_SM_THREADS = 2048


#: The SIMT decode's (WARPS, U, STAGES) by kind of cache: one query head a KV head (or two) in 16-bit
#: types, more (grouped-query attention, several query tokens), and FP8.
DECODE_SIMT = {"mha": dict(WARPS=4, U=4, STAGES=3), "gqa": dict(WARPS=4, U=2, STAGES=3),
               "fp8": dict(WARPS=4, U=8, STAGES=3)}
#: The tensor-core decode: RING (std.attention's paged_decode_ring: warps with private cp.async rings of
#: BN keys a step, STAGES deep; else paged_decode_tc: one warp a block, prefill_mma's tiles of BN
#: keys) and its tiles.
DECODE_TC_TILES = dict(RING=True, WARPS=4, BN=32, STAGES=2)
#: paged_decode_tc's tiles where RING is false.
DECODE_TC_SINGLE = dict(BN=64, STAGES=2)


def _sm_count(x: Any) -> int:
    """Multiprocessors of the CUDA device that holds torch tensor ``x``; :data:`DECODE_SMS` otherwise."""
    if arrays.is_torch_tensor(x) and x.is_cuda:
        return _device_sms(x.device.index if x.device.index is not None else 0)
    return DECODE_SMS


@functools.lru_cache(maxsize=None)
def _device_sms(index: int) -> int:
    import torch
    return int(torch.cuda.get_device_properties(index).multi_processor_count)


def _stream(x: Any) -> Any:
    """torch's current stream on the device of CUDA tensor ``x`` (so that the decode kernels queue behind
    the caller's work and can be captured in a CUDA graph), else None (the default stream)."""
    if arrays.is_torch_tensor(x) and x.is_cuda:
        import torch
        return torch.cuda.current_stream(x.device)
    return None


def decode_splits(units: int, max_len: int, sms: int, threads: int, shared: int, regs: int,
                  min_chunk: int = 256, max_splits: int = 64) -> int:
    """The number of chunks (split-KV) :func:`paged_decode` and :func:`mla_decode` cut each sequence
    into: ``units`` blocks a split (B x KV heads, or head groups), on ``sms`` multiprocessors, each
    holding as many blocks of ``threads`` threads, ``shared`` bytes and about ``regs`` registers a
    thread as its shared memory (:data:`DECODE_SM_SHARED`), threads and 64 K registers allow (the
    slots). The fewest splits whose blocks fill the slots in waves used to 90 % or more (so no last
    wave runs a few blocks alone; deeper cuts cost a merge_states pass), chunks of at least
    ``min_chunk`` keys; else the best-used count up to that bound."""
    per_sm = max(1, min(DECODE_SM_SHARED // (shared + 1024), DECODE_SM_THREADS // threads,
                        65536 // (threads * max(regs, 32)), 32))
    slots = sms * per_sm
    most = max(1, min(max_splits, -(-int(max_len) // min_chunk)))
    best, best_use = 1, 0.0
    for s in range(1, most + 1):
        waves = units * s / slots
        use = waves / -(-units * s // slots)
        if waves >= 1 and use >= 0.9:
            return s
        if use > best_use + 0.02:
            best, best_use = s, use
    return best


def decode_lanes(D: int, itemsize: int, DR: int = 0, rows: int = 1) -> int:
    """Lanes a cache row of the SIMT decode (its L), a power of two up to 32 dividing D (and DR) with
    a multiple of 4 bytes a lane (cp.async's sizes): one 16-byte piece a lane where that fits, more
    lanes where the block's ``rows`` query rows (heads times tokens) would otherwise hold more than 64
    values of q and of the output a lane (registers: FP8 with GQA 8:1 spilled at 16 elements a lane)."""
    def fits(L: int) -> bool:
        return L <= 32 and D % L == 0 and (not DR or DR % L == 0) and (D // L * itemsize) % 4 == 0 \
            and (not DR or (DR // L * itemsize) % 4 == 0)
    for L in (32, 16, 8, 4, 2, 1):
        if L <= max(D * itemsize // 16, 1) and fits(L):
            while rows * (D // L) > 64 and fits(2 * L):
                L *= 2
            return L
    raise ValueError(f"decode: no lane count fits a row of {D} (+ {DR}) elements of {itemsize} bytes")


def decode_shared_bytes(D: int, itemsize: int, G: int, QL: int, warps: int, unroll: int, stages: int, lanes: int,
                        DR: int = 0) -> int:
    """Dynamic shared memory of the SIMT decode (stdlib/attention.kc): the larger of the warps' rings
    of cache rows and the merge of the groups' states."""
    ring = warps * stages * (32 // lanes) * unroll * (D + DR if DR else 2 * D) * itemsize
    merge = warps * (32 // lanes) * QL * G * (D + 2) * 4
    return max(ring, merge)


def _f32_vector(x: Any, n: int, like: Any, name: str, fn: str) -> Any:
    """``x`` (a number or n numbers) as a contiguous f32 array of length n of q's kind. A number for a
    torch tensor is filled in on its device (no copy from the host, which would wait for the device's
    queue before the launch)."""
    if arrays.is_torch_tensor(like):
        import torch
        if isinstance(x, (int, float, np.floating, np.integer)):
            return torch.full((n,), float(x), dtype=torch.float32, device=like.device)
        t = torch.as_tensor(x, dtype=torch.float32, device=like.device).reshape(-1)
        t = t.expand(n).contiguous() if t.numel() == 1 else t.contiguous()
    else:
        t = np.ascontiguousarray(np.broadcast_to(np.asarray(_host_ints(x) if arrays.is_torch_tensor(x) else x,
                                                            np.float32).reshape(-1), (n,)))
    if tuple(t.shape) != (n,):
        raise ValueError(f"{fn}: {name} must be one number or {n} (one per KV head), not {tuple(t.shape)}")
    return t


def paged_decode(q: Any, k_cache: Any, v_cache: Any, block_table: Any, seq_lens: Any, *,
                 scale: float | None = None, k_scale: Any = None, v_scale: Any = None,
                 num_splits: int | None = None, max_seq_len: int | None = None, return_lse: bool = False,
                 warps: int | None = None, unroll: int | None = None, stages: int | None = None,
                 tensor_cores: bool | None = None, tc_tiles: dict[str, int] | None = None,
                 target: str = "auto") -> Any:
    """Decode attention of one query token a sequence over a paged KV cache (stdlib/attention.kc):
    ``softmax(scale * q k^T) v`` over the first ``seq_lens[b]`` tokens of sequence b.

    - q: (B, Hq, D) of f16, bf16 or f32; the result has q's shape and dtype; with ``return_lse`` also
      the log-sum-exp (B, Hq), f32, natural log. Or q: (B, QL, Hq, D), the last QL tokens of each
      sequence (their keys already in the cache, counted in seq_lens), token t seeing the keys before
      seq_lens[b] - (QL - 1 - t) (speculative decoding's verification); result (B, QL, Hq, D), LSE (B,
      QL, Hq); the SIMT path.
    - k_cache, v_cache: (pages, page_size, Hkv, D) (vLLM's and FlashAttention's paged layout), of q's
      dtype, or FP8 E4M3 (``float8_e4m3fn``) with per-KV-head scales ``k_scale`` and ``v_scale`` (a
      number or Hkv numbers: K = k_scale * k). Hq a multiple of Hkv (grouped-query attention). D a
      multiple of 16.
    - block_table: (B, max_pages) int32, the pages of each sequence in order; seq_lens: (B,) int32.
    - ``num_splits``: the keys of each sequence are cut into this many chunks, a block each, and the
      partial results combined by :func:`merge_states` (split-KV, FlashDecoding). Default
      (:func:`decode_splits`): the fewest that fill the device's multiprocessors (torch's count for
      a CUDA tensor, else :data:`DECODE_SMS`) with whole waves of resident blocks, chunks of at least
      256 keys.
    - ``max_seq_len``: the longest of seq_lens, if known: then seq_lens is not read on the host (no
      synchronisation with the GPU) nor checked against the block table.
    - ``warps``, ``unroll``, ``stages``: the SIMT kernel's WARPS, U (keys a group of lanes takes a
      step) and STAGES (steps of cache rows a warp has in shared memory, STAGES - 1 of them loading by
      cp.async while it computes one). Defaults: :data:`DECODE_SIMT` (the fastest on the H100,
      benchmarks/RESULTS.md).
    - ``tensor_cores``: the mma.sync path (the G = Hq / Hkv query heads of a KV head as the rows of an
      m16 tile, G <= 16; one query token; a cache of q's dtype, f16 or bf16; NVIDIA sm_80+), for
      grouped-query attention, where the SIMT path spends 4 shuffles a key and query head. Default:
      where G >= 4 and the target has it (benchmarks/RESULTS.md), the SIMT path otherwise.
      ``tc_tiles``: its kernel and tiles, default :data:`DECODE_TC_TILES` (RING: warps streaming
      their own keys through cp.async rings; RING False: one warp a block on prefill_mma's tiles,
      :data:`DECODE_TC_SINGLE`).

    numpy in, numpy out; torch in, torch out. Raises TypeError for other dtypes and ValueError for
    shapes that do not match."""
    fn = "paged_decode"
    src = _query_type(q, fn)
    kt = arrays.array_scalar_type(k_cache) if arrays.is_array(k_cache) else None
    if kt is None or kt.name not in (src.name, "f8e4m3") or arrays.array_scalar_type(v_cache) != kt:
        raise TypeError(f"{fn}: k_cache and v_cache must both be of q's dtype ({src}) or f8e4m3, not "
                        f"{arrays.describe(k_cache)} and {arrays.describe(v_cache)}")
    fp8 = kt.name == "f8e4m3"
    if fp8 and (k_scale is None or v_scale is None):
        raise ValueError(f"{fn}: an FP8 cache needs k_scale and v_scale")
    if len(q.shape) not in (3, 4) or len(k_cache.shape) != 4 or tuple(v_cache.shape) != tuple(k_cache.shape):
        raise ValueError(f"{fn}: q must be (B, Hq, D) or (B, QL, Hq, D) and both caches (pages, page_size, Hkv, D),"
                         f" not {tuple(q.shape)}, {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    qshape = tuple(q.shape)
    (B, QL, H, D), (pages, page, HK, Dk) = (qshape if len(qshape) == 4 else (qshape[0], 1) + qshape[1:]), \
        tuple(k_cache.shape)
    if Dk != D or D % 16:
        raise ValueError(f"{fn}: the head dimension must be a multiple of 16 and equal in q and the caches "
                         f"({D}, {Dk})")
    if HK == 0 or H % HK:
        raise ValueError(f"{fn}: q's {H} heads must be a multiple of the cache's {HK} (grouped-query attention)")
    bt = _index_array(block_table.reshape(-1) if arrays.is_array(block_table) else np.asarray(block_table).reshape(-1),
                      q, "block_table", fn)
    if len(block_table.shape) != 2 or block_table.shape[0] != B:
        raise ValueError(f"{fn}: block_table must be (B, max_pages) = ({B}, ...), not {tuple(block_table.shape)}")
    max_pages = int(block_table.shape[1])
    sl = _index_array(seq_lens, q, "seq_lens", fn, B)
    if max_seq_len is None:
        lens = _host_ints(sl)
        if (lens < 0).any() or (lens > max_pages * page).any():
            raise ValueError(f"{fn}: seq_lens must lie in 0 .. max_pages * page_size = {max_pages * page}")
        max_seq_len = int(lens.max()) if B else 0
    q, k_cache, v_cache = _contiguous(q), _contiguous(k_cache), _contiguous(v_cache)
    ks = _f32_vector(k_scale if fp8 else 1.0, HK, q, "k_scale", fn)
    vs = _f32_vector(v_scale if fp8 else 1.0, HK, q, "v_scale", fn)
    G = H // HK
    out = _empty_like(q, qshape, src.name)
    lse = _empty_like(q, qshape[:-1], "f32")
    if B == 0 or H == 0:
        return (out, lse) if return_lse else out
    mod = _attention_module(_target_for(q, target))
    sc = np.float32(D ** -0.5 if scale is None else scale)
    args = (_flat(q, 16), _flat(k_cache, 16), _flat(v_cache, 16), bt, sl, ks, vs)
    can_tc = (mod._program.target.has("mma") and not fp8 and src.name in ("f16", "bf16") and G <= 16 and QL == 1
              and all(_data_ptr(x) % 16 == 0 for x in args[:3] + (out,)))
    if tensor_cores and not can_tc:
        raise ValueError(f"{fn}: the tensor-core path needs NVIDIA sm_80+, f16/bf16 q and cache, one query token, "
                         f"at most 16 query heads a KV head and 16-byte aligned arrays")
    tc = can_tc and (G >= 4 if tensor_cores is None else bool(tensor_cores))
    if tc:
        tiles = {**DECODE_TC_TILES, **(tc_tiles or {})}
        if tiles["RING"]:
            tiles = {k: int(tiles[k]) for k in ("WARPS", "BN", "STAGES")}
            if min(tiles.values()) < 1 or tiles["BN"] % 16:
                raise ValueError(f"{fn}: tc_tiles: WARPS and STAGES at least 1, BN a multiple of 16, not {tiles}")
            tiles["RING"] = True
            threads, regs = tiles["WARPS"] * 32, 168
            shared = 16 * (D + 8) * src.size + max(tiles["WARPS"] * tiles["STAGES"] * 2 * tiles["BN"] * (D + 8)
                                                   * src.size, tiles["WARPS"] * 16 * (D + 2) * 4)
        else:
            tiles = {**DECODE_TC_SINGLE, **{k: v for k, v in (tc_tiles or {}).items() if k in ("BN", "STAGES")},
                     "BM": 16, "RING": False}
            threads, regs = 32, 255
            shared = (tiles["BM"] + 2 * tiles["STAGES"] * tiles["BN"]) * (D + 8) * src.size
    else:
        cfg = DECODE_SIMT["fp8" if fp8 else "gqa" if G * QL > 2 else "mha"]
        warps, unroll, stages = warps or cfg["WARPS"], unroll or cfg["U"], stages or cfg["STAGES"]
        lanes = decode_lanes(D, kt.size, rows=G * QL)
        tiles = dict(WARPS=int(warps), U=int(unroll), STAGES=int(stages), L=lanes)
        if min(tiles.values()) < 1:
            raise ValueError(f"{fn}: warps, unroll and stages must be at least 1, not {warps}, {unroll}, {stages}")
        threads = tiles["WARPS"] * 32
        regs = 48 + 8 * QL * G * (D // lanes) // 4  # about what ptxas -v reports at sm_90a
        shared = decode_shared_bytes(D, kt.size, G, QL, tiles["WARPS"], tiles["U"], tiles["STAGES"], lanes)
    if num_splits is None:
        num_splits = decode_splits(B * HK, max_seq_len, _sm_count(q), threads, shared, regs)
    num_splits = int(num_splits)
    if num_splits < 1:
        raise ValueError(f"{fn}: num_splits must be at least 1, not {num_splits}")
    part = out if num_splits == 1 else _empty_like(q, (B, num_splits, QL * H, D), "f32")
    part_lse = lse if num_splits == 1 else _empty_like(q, (B, num_splits, QL * H), "f32")
    kw = dict(T=src.name, KT=kt.name, D=D, G=G, PAGE=page, TC=tc, QL=QL, shared=shared, **tiles)
    mod.paged_decode[(num_splits, HK, B), threads](*args, _flat(part, 1), _flat(part_lse, 1), HK, max_pages,
                                                   num_splits, sc, OUT=arrays.array_scalar_type(part).name,
                                                   SPLIT=num_splits > 1, stream=_stream(q), **kw)
    if num_splits > 1:
        merge_states(part, part_lse, out=out.reshape(B, QL * H, D), lse_out=lse.reshape(B, QL * H), target=target)
    return (out, lse) if return_lse else out


def merge_states(v: Any, s: Any, *, out: Any = None, lse_out: Any = None, out_dtype: Any = None,
                 target: str = "auto") -> tuple[Any, Any]:
    """Combine S attention states of each row into one (stdlib/attention.kc's merge_states;
    FlashInfer's ``merge_states``, with natural-log LSEs): ``v`` (N, S, H, D), each state's output
    normalised over its own keys, ``s`` (N, S, H) f32 their log-sum-exps (-inf: no keys); returns
    ``(o, lse)``, o (N, H, D) = sum_s exp(s_s - lse) v_s and lse (N, H) = log sum_s exp(s_s), exactly
    the attention over the union of the states' keys (cascade attention, split-KV). ``v``: f32, f16 or
    bf16; o in ``out_dtype`` (default v's), or written into ``out`` / ``lse_out``. Raises TypeError /
    ValueError for dtypes and shapes that do not match."""
    fn = "merge_states"
    src = arrays.array_scalar_type(v) if arrays.is_array(v) else None
    if src is None or src.name not in ("f16", "bf16", "f32"):
        raise TypeError(f"{fn}: v must be an array of f32, f16 or bf16, not {arrays.describe(v)}")
    if not arrays.is_array(s) or arrays.array_scalar_type(s) is None or arrays.array_scalar_type(s).name != "f32":
        raise TypeError(f"{fn}: s must be an array of f32, not {arrays.describe(s)}")
    if len(v.shape) != 4 or tuple(s.shape) != tuple(v.shape[:3]):
        raise ValueError(f"{fn}: v must be (N, S, H, D) and s (N, S, H), not {tuple(v.shape)} and {tuple(s.shape)}")
    N, S, H, D = tuple(v.shape)
    if out is None:
        dst = src if out_dtype is None else (SCALARS.get(out_dtype) if isinstance(out_dtype, str)
                                             else arrays.scalar_of_dtype(out_dtype))
        if dst is None or dst.name not in ("f16", "bf16", "f32"):
            raise TypeError(f"{fn}: out_dtype must be f32, f16 or bf16, not {out_dtype!r}")
        out = _empty_like(v, (N, H, D), dst.name)
    dst = arrays.array_scalar_type(out)
    if tuple(out.shape) != (N, H, D) or not arrays.is_contiguous(out) or dst is None \
            or dst.name not in ("f16", "bf16", "f32"):
        raise ValueError(f"{fn}: out must be a contiguous ({N}, {H}, {D}) array of f32, f16 or bf16")
    if lse_out is None:
        lse_out = _empty_like(v, (N, H), "f32")
    if N * H == 0 or D == 0:
        return out, lse_out
    v, s = _contiguous(v), _contiguous(s)
    mod = _attention_module(_target_for(v, target))
    warps = 4
    mod.merge_states[-(-N * H // warps), warps * 32](_flat(v, 1), _flat(s, 1), _flat(out, 1), _flat(lse_out, 1),
                                                     N, S, H, D, T=src.name, OUT=dst.name, WARPS=warps,
                                                     stream=_stream(v))
    return out, lse_out


def scaled_matmul(a: Any, b: Any, scale_a: Any, scale_b: Any, *, out_dtype: Any = None, out: Any = None) -> Any:
    """FP8 ``(a @ b) * scale_a * scale_b`` by stdlib/matmul_sm90.kc: torch CUDA tensors on the Hopper
    path (:func:`kcompiler.matmul_sm90.scaled_matmul` gives the shapes, layouts, scales and errors),
    numpy arrays on the CPU target's emulation of it (:func:`kcompiler.scaled_matmul_cpu.scaled_matmul`)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        from .scaled_matmul_cpu import scaled_matmul as _cpu
        return _cpu(a, b, scale_a, scale_b, out_dtype=out_dtype, out=out)
    from .matmul_sm90 import scaled_matmul as _scaled_matmul
    return _scaled_matmul(a, b, scale_a, scale_b, out_dtype=out_dtype, out=out)


#: The fewest query heads for which ops.mla_decode's path 'auto' takes the Hopper kernel
#: (stdlib/mla_sm90.kc: 64 heads a block as wgmma's M, fewer are padded). H100, B 32, 8192 keys, latent
#: 512 + 64, bf16 (benchmarks/RESULTS.md, 2026-11-23): 128 heads 0.353 ms against the mma.sync kernel's
#: 0.612 (x1.73); 16 heads 0.227 against 0.191 (x0.84). 64 heads, one full tile, is the threshold.
MLA_SM90_MIN_HEADS = 64


def mla_decode(q_nope: Any, q_pe: Any, ckv_cache: Any, kpe_cache: Any, block_table: Any, seq_lens: Any, *,
               scale: float, num_splits: int | None = None, max_seq_len: int | None = None,
               return_lse: bool = False, heads_per_block: int | None = None, warps: int | None = None,
               unroll: int = 2, stages: int = 3, tensor_cores: bool | None = None, path: str = "auto",
               sm90_tiles: dict[str, int] | None = None, target: str = "auto") -> Any:
    """Multi-head latent attention decode (DeepSeek-V2/V3, absorbed form) over a paged latent cache
    (stdlib/attention.kc, ``mla_decode``): ``o[b, h] = sum_j softmax_j(scale * (q_nope[b, h] . c_j +
    q_pe[b, h] . k_pe_j)) c_j`` over the first ``seq_lens[b]`` tokens of sequence b.

    - q_nope: (B, H, D) (D = 512 in DeepSeek's models: the latent rank), q_pe: (B, H, DR) (64: the rope
      dimensions); f16 or bf16 (f32 on the CPU target too), one dtype. The result: (B, H, D) of that
      dtype (multiply by W_UV outside); with ``return_lse`` also the log-sum-exp (B, H), f32.
    - ckv_cache: (pages, page_size, D), kpe_cache: (pages, page_size, DR) (FlashInfer's MLA layout), of
      q's dtype; block_table (B, max_pages) int32; seq_lens (B,) int32.
    - ``scale``: the softmax scale (DeepSeek: 1 / sqrt(128 + 64) before the YaRN factor), required.
    - ``num_splits``, ``max_seq_len``: as :func:`paged_decode`; ``heads_per_block``: query heads a block
      (H must be a multiple; default 16 or the largest divisor of H below on tensor cores, 2 in SIMT);
      ``warps``, ``stages``: the kernel's (default 4 where D + DR and D are multiples of 64, and 3);
      ``unroll``: the SIMT kernel's U (see paged_decode).
    - ``tensor_cores``: stdlib/attention.kc's mla_decode_tc (the heads of a block as the rows of an m16
      tile, S's D + DR dimensions split over the warps, O's columns too; mma.sync, cp.async; f16/bf16,
      NVIDIA sm_80+, 16-byte aligned arrays). Default: where it can run; else the SIMT loop, which
      spends 2 (D + DR) + 2 D f32 operations a key and head on the FMA units (compute-bound at many
      heads: benchmarks/RESULTS.md).

    - ``path``: 'sm90' takes the Hopper kernel (stdlib/mla_sm90.kc: TMA through the block table, wgmma,
      a producer warpgroup and two consumers, 64 heads a block; FlashMLA's design; RuntimeError where
      :func:`mla_sm90_reason_not` finds something against it); 'generic' std.attention's
      ``mla_decode`` (mma.sync or SIMT as ``tensor_cores`` says). 'auto' takes the Hopper kernel
      where it can run, H is at least :data:`MLA_SM90_MIN_HEADS` (64: below, the mma.sync kernel's
      16-row tiles were faster on the H100) and none of ``heads_per_block``, ``warps``,
      ``tensor_cores`` is given; else 'generic'. ``sm90_tiles``: the Hopper kernel's BN (keys a
      step), STAGES and OVERLAP instead of :data:`MLA_SM90_TILES`.

    Every block reads its sequence's latent rows once per group of heads (the groups after the first
    mostly from L2). Raises TypeError / ValueError for dtypes and shapes that do not match."""
    fn = "mla_decode"
    if path not in ("auto", "sm90", "generic"):
        raise ValueError(f"{fn}: path must be 'auto', 'sm90' or 'generic', not {path!r}")
    if sm90_tiles is not None and set(sm90_tiles) - set(MLA_SM90_TILES):
        raise ValueError(f"{fn}: sm90_tiles takes {', '.join(MLA_SM90_TILES)}, not {sorted(set(sm90_tiles))}")
    src = _query_type(q_nope, fn, "q_nope")
    for name, x in (("q_pe", q_pe), ("ckv_cache", ckv_cache), ("kpe_cache", kpe_cache)):
        _check_same(name, x, src, fn)
    if len(q_nope.shape) != 3 or len(q_pe.shape) != 3 or len(ckv_cache.shape) != 3 or len(kpe_cache.shape) != 3:
        raise ValueError(f"{fn}: q_nope (B, H, D), q_pe (B, H, DR), ckv_cache (pages, page, D) and kpe_cache "
                         f"(pages, page, DR) expected, not {tuple(q_nope.shape)}, {tuple(q_pe.shape)}, "
                         f"{tuple(ckv_cache.shape)}, {tuple(kpe_cache.shape)}")
    (B, H, D), (B2, H2, DR) = tuple(q_nope.shape), tuple(q_pe.shape)
    pages, page, D2 = tuple(ckv_cache.shape)
    if (B2, H2) != (B, H) or D2 != D or tuple(kpe_cache.shape) != (pages, page, DR):
        raise ValueError(f"{fn}: shapes do not match: q_nope {tuple(q_nope.shape)}, q_pe {tuple(q_pe.shape)}, "
                         f"ckv_cache {tuple(ckv_cache.shape)}, kpe_cache {tuple(kpe_cache.shape)}")
    if D % 16 or DR % 16 or DR == 0:
        raise ValueError(f"{fn}: D ({D}) and DR ({DR}) must be multiples of 16")
    if len(block_table.shape) != 2 or block_table.shape[0] != B:
        raise ValueError(f"{fn}: block_table must be (B, max_pages) = ({B}, ...), not {tuple(block_table.shape)}")
    max_pages = int(block_table.shape[1])
    bt = _index_array(block_table.reshape(-1), q_nope, "block_table", fn)
    sl = _index_array(seq_lens, q_nope, "seq_lens", fn, B)
    if max_seq_len is None:
        lens = _host_ints(sl)
        if (lens < 0).any() or (lens > max_pages * page).any():
            raise ValueError(f"{fn}: seq_lens must lie in 0 .. max_pages * page_size = {max_pages * page}")
        max_seq_len = int(lens.max()) if B else 0
    q_nope, q_pe, ckv_cache, kpe_cache = (_contiguous(x) for x in (q_nope, q_pe, ckv_cache, kpe_cache))
    generic_options = heads_per_block is not None or warps is not None or tensor_cores is not None
    if path == "sm90" or (path == "auto" and H >= MLA_SM90_MIN_HEADS and not generic_options):
        tgt = _target_for(q_nope, target)
        tiles = {**MLA_SM90_TILES, **(sm90_tiles or {})}
        why = mla_sm90_reason_not(q_nope, q_pe, ckv_cache, kpe_cache, tiles, tgt)
        if why is None:
            return _mla_decode_sm90(q_nope, q_pe, ckv_cache, kpe_cache, bt, sl, max_pages, max_seq_len, scale,
                                    num_splits, return_lse, tiles, tgt)
        if path == "sm90":
            raise RuntimeError(f"{fn}: the Hopper path cannot run here: {why}")
    mod = _attention_module(_target_for(q_nope, target))
    can_tc = (mod._program.target.has("mma") and src.name in ("f16", "bf16")
              and all(_data_ptr(x) % 16 == 0 for x in (q_nope, q_pe, ckv_cache, kpe_cache)))
    if tensor_cores and not can_tc:
        raise ValueError(f"{fn}: the tensor-core path needs NVIDIA sm_80+, f16/bf16 arrays, 16-byte aligned")
    tc = can_tc if tensor_cores is None else bool(tensor_cores)
    G = int(heads_per_block) if heads_per_block is not None else \
        (max(g for g in range(1, 17) if H % g == 0) if tc and H else 2)
    if G < 1 or (H and H % G) or (tc and G > 16):
        raise ValueError(f"{fn}: H ({H}) must be a multiple of heads_per_block ({G}), at most 16 on tensor cores")
    unroll, stages = int(unroll), int(stages)
    if tc:
        warps = int(warps) if warps is not None else next((w for w in (4, 2, 1) if (D + DR) % (16 * w) == 0
                                                          and D % (16 * w) == 0))
        if warps < 1 or (D + DR) % (16 * warps) or D % (16 * warps) or stages < 1:
            raise ValueError(f"{fn}: on tensor cores D + DR and D must be multiples of 16 * warps ({warps}), "
                             f"stages at least 1")
        bn = 16
        shared = (16 + stages * bn) * (D + DR + 8) * src.size + warps * bn * 16 * 4
        regs, kw = 224, dict(TC=True, BN=bn)
    else:
        warps = int(warps) if warps is not None else 4
        if min(warps, unroll, stages) < 1:
            raise ValueError(f"{fn}: warps, unroll and stages must be at least 1, not {warps}, {unroll}, {stages}")
        lanes = decode_lanes(D, src.size, DR, G)
        shared = decode_shared_bytes(D, src.size, G, 1, warps, unroll, stages, lanes, DR)
        regs, kw = 48 + 8 * G * (D // lanes) // 4, dict(U=unroll, L=lanes)
    if num_splits is None:
        num_splits = decode_splits(B * H // G, max_seq_len, _sm_count(q_nope), warps * 32, shared, regs)
    num_splits, out, lse, part, part_lse = _mla_outputs(q_nope, B, H, D, src.name, num_splits)
    if B == 0 or H == 0:
        return (out, lse) if return_lse else out
    mod.mla_decode[(num_splits, H // G, B), warps * 32](
        _flat(q_nope, 64), _flat(q_pe, 16), _flat(ckv_cache, 64), _flat(kpe_cache, 16), bt, sl, _flat(part, 1),
        _flat(part_lse, 1), H // G, max_pages, num_splits, np.float32(scale), T=src.name,
        OUT=arrays.array_scalar_type(part).name, D=D, DR=DR, G=G, PAGE=page, WARPS=warps, STAGES=stages,
        SPLIT=num_splits > 1, shared=shared, stream=_stream(q_nope), **kw)
    if num_splits > 1:
        merge_states(part, part_lse, out=out, lse_out=lse, target=target)
    return (out, lse) if return_lse else out


def _mla_outputs(like: Any, B: int, H: int, D: int, dtype: str, num_splits: int) -> tuple:
    """(num_splits, out, lse, part, part_lse) of :func:`mla_decode`: the result (B, H, D) of ``dtype``
    and its LSE (B, H) f32, arrays of ``like``'s kind, and what the kernel writes: those for one split,
    else f32 partial states (B, num_splits, H, D) and their LSEs for merge_states. ValueError for
    num_splits < 1."""
    num_splits = int(num_splits)
    if num_splits < 1:
        raise ValueError(f"mla_decode: num_splits must be at least 1, not {num_splits}")
    out = _empty_like(like, (B, H, D), dtype)
    lse = _empty_like(like, (B, H), "f32")
    if num_splits == 1:
        return num_splits, out, lse, out, lse
    return (num_splits, out, lse, _empty_like(like, (B, num_splits, H, D), "f32"),
            _empty_like(like, (B, num_splits, H), "f32"))


#: Tiles of std.mla_sm90 (the Hopper MLA decode): BN keys a step (a tile serves as K and V), STAGES
#: tiles in the ring, OVERLAP (the softmax warpgroup issues S_j = Q K_j^T with P_{j-1} V_{j-1} and runs
#: tile j's softmax under the latter; needs 2 stages). FlashMLA's tiles (64 keys, 2 stages); at D 512 +
#: DR 64 they fill shared memory (:func:`mla_sm90_shared_bytes`: 229,672 bytes of sm_90's 232,448).
#: Not yet timed on a GPU.
MLA_SM90_TILES = dict(BN=64, STAGES=2, OVERLAP=False)
#: The most dynamic shared memory a block of sm_90 may have (227 KB).
SM90_MAX_SHARED = 232448


def mla_sm90_shared_bytes(D: int, DR: int, tiles: dict[str, int], itemsize: int = 2) -> int:
    """Dynamic shared memory of std.mla_sm90 in bytes (the formula stated in stdlib/mla_sm90.kc): Q's
    64 rows and STAGES tiles of BN rows, D + DR elements each, P (64 x BN, in slabs of 64 columns), 64
    f32 rescale factors, 5 + 2 STAGES mbarriers."""
    bn, st = tiles["BN"], tiles["STAGES"]
    return ((64 + st * bn) * (D + DR) + 64 * 64 * -(-bn // 64)) * itemsize + 256 + 8 * (5 + 2 * st)


def mla_sm90_splits(units: int, max_len: int, sms: int, bn: int, min_chunk: int = 256,
                    max_splits: int = 64) -> int:
    """The chunks (split-KV) std.mla_sm90 cuts each sequence into: ``units`` blocks a split (B x head
    blocks), one block a multiprocessor (its shared memory), ``sms`` of them. Going up from 1, a count
    is taken where it cuts the tiles of BN keys the busiest multiprocessor computes (waves x tiles a
    chunk, for sequences of ``max_len``) by 10 % or more, since each split adds merge_states work over
    f32 partial states (B 32, H 128, 2 splits: 17 MB written and read again); chunks of at least
    ``min_chunk`` keys. E.g. B 32, 8192 keys, 132 SMs: H 128, 2 (128 blocks, one wave, 64 tiles each;
    4 splits also give 64, in two waves); H 16: 4."""
    tiles = max(-(-int(max_len) // bn), 1)
    best, cost = 1, tiles * -(-units // sms)
    for s in range(2, max(1, min(max_splits, -(-int(max_len) // min_chunk))) + 1):
        c = -(-units * s // sms) * -(-tiles // s)
        if c < 0.9 * cost:
            best, cost = s, c
    return best


def _mla_sm90_module(target: str) -> Any:
    """std.mla_sm90 for ``target`` (with approx_ftz on NVIDIA, as :func:`_attention_module`)."""
    mod = _module("mla_sm90", target)
    return _module_ftz("mla_sm90", target) if mod.target == "nvptx" else mod


def mla_sm90_reason_not(q_nope: Any, q_pe: Any, ckv_cache: Any, kpe_cache: Any, tiles: dict[str, int],
                        target: str = "auto") -> str | None:
    """Why :func:`mla_decode`'s Hopper path cannot run on these arrays, or None when it can: it needs a
    target with wgmma (an sm_90 GPU; the CPU target's emulation for tests), f16 or bf16, D a multiple
    of 128 up to 512 and DR of 64 (slabs of 64 columns; half of D a consumer's wgmma of at most 256
    columns), a page size that is a multiple of 8 dividing BN or divided by it, up to 256 (TMA boxes of
    whole pages or whole tiles), the tiles within shared memory, and arrays the tensor maps can describe
    (device arrays on a GPU, numpy on the CPU target; 16-byte aligned)."""
    t = arrays.array_scalar_type(q_nope)
    D, DR, page = int(q_nope.shape[-1]), int(q_pe.shape[-1]), int(ckv_cache.shape[1])
    bn, st = int(tiles["BN"]), int(tiles["STAGES"])
    if t is None or t.name not in ("f16", "bf16"):
        return "the Hopper path computes f16 and bf16"
    if D % 128 or D > 512 or DR % 64 or DR == 0:
        return f"the Hopper path takes D a multiple of 128 up to 512 and DR of 64, not {D} and {DR}"
    if bn % 16 or not 16 <= bn <= 256 or st < 1 or (tiles.get("OVERLAP") and st < 2):
        return f"sm90_tiles: BN a multiple of 16 from 16 to 256 and STAGES at least 1 (2 with OVERLAP), not {tiles}"
    if page % 8 or page > 256 or (page % bn and bn % page):
        return f"the Hopper path takes pages of a multiple of 8 up to 256 that divide BN ({bn}) or that it " \
               f"divides, not {page}"
    if mla_sm90_shared_bytes(D, DR, tiles, t.size) > SM90_MAX_SHARED:
        return f"BN {bn} in {st} stages needs {mla_sm90_shared_bytes(D, DR, tiles, t.size)} bytes of shared " \
               f"memory, more than sm_90's {SM90_MAX_SHARED}"
    xs = (q_nope, q_pe, ckv_cache, kpe_cache)
    why = _hopper_reason_not("mla_sm90", _mla_sm90_module, target, xs)
    if why is None and any(_data_ptr(x) % 16 for x in xs):
        return "TMA needs 16-byte aligned tensors"
    return why


def _mla_decode_sm90(q_nope: Any, q_pe: Any, ckv: Any, kpe: Any, bt: Any, sl: Any, max_pages: int,
                     max_seq_len: int, scale: float, num_splits: int | None, return_lse: bool, tiles: dict,
                     target: str) -> Any:
    """The launch of std.mla_sm90 (:func:`mla_decode` checked the arguments, ``bt`` the flat block
    table, ``sl`` the lengths, both int32 of q's kind), with merge_states after a split."""
    from .runtime.tensormap import cached_tensor_map
    (B, H, D), DR, page = tuple(q_nope.shape), int(q_pe.shape[-1]), int(ckv.shape[1])
    src = arrays.array_scalar_type(q_nope)
    bn, st = int(tiles["BN"]), int(tiles["STAGES"])
    shared = mla_sm90_shared_bytes(D, DR, tiles, src.size)
    blocks = -(-H // 64)
    if num_splits is None:
        num_splits = mla_sm90_splits(B * blocks, max_seq_len, _sm_count(q_nope), bn)
    num_splits, out, lse, part, part_lse = _mla_outputs(q_nope, B, H, D, src.name, num_splits)
    if B == 0 or H == 0:
        return (out, lse) if return_lse else out
    rows = min(page, bn)
    maps = [cached_tensor_map(q_nope, (1, 64, 64)), cached_tensor_map(q_pe, (1, 64, 64)),
            cached_tensor_map(ckv, (1, rows, 64)), cached_tensor_map(kpe, (1, rows, 64))]
    mod = _mla_sm90_module(target)
    mod.mla_decode_sm90[(blocks, num_splits, B), 384](
        *maps, bt, sl, _flat(part, 1), _flat(part_lse, 1), H, max_pages, num_splits, np.float32(scale),
        T=src.name, OUT=arrays.array_scalar_type(part).name, D=D, DR=DR, PAGE=page, BN=bn, STAGES=st,
        OVERLAP=bool(tiles.get("OVERLAP", False)), shared=shared, stream=_stream(q_nope))
    if num_splits > 1:
        merge_states(part, part_lse, out=out, lse_out=lse, target=target)
    return (out, lse) if return_lse else out
