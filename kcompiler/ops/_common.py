"""What the ops modules share: the standard library's modules (compiled once a process), the target an
array asks for, the device that runs a module's kernels on an array, and array helpers (new arrays of
an input's kind, flat aligned views, index arrays)."""
from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from numbers import Integral
from typing import Any, Callable

import numpy as np

from .. import compile_file
from ..frontend.program import stdlib_dir
from ..ir.types import SCALARS
from ..runtime import arrays
from ..runtime.device import Device


@functools.lru_cache(maxsize=None)
def stdlib_module(name: str, target: str) -> Any:
    """std.``name`` (stdlib/NAME.kc) compiled for ``target``, once a process (the disk cache keeps its
    kernels across processes). Raises RuntimeError when the standard library is not installed."""
    d = stdlib_dir()
    if d is None:
        raise RuntimeError("kcompiler's standard library (stdlib/) is not installed")
    return compile_file(d / f"{name}.kc", target=target)


@functools.lru_cache(maxsize=None)
def stdlib_module_ftz(name: str, target: str) -> Any:
    """std.``name`` compiled with the target option ``approx_ftz`` (PTX's ``.ftz`` approximations:
    ex2.approx.ftz, one instruction without the subnormal fix-up, as nvcc's --use_fast_math)."""
    return compile_file(stdlib_dir() / f"{name}.kc", target=target, target_options={"approx_ftz": True})


def attention_module(target: str) -> Any:
    """std.attention for ``target``; where the target has PTX's ``.ftz`` approximations (feature 'nvptx')
    compiled with ``approx_ftz`` (:func:`stdlib_module_ftz`; a probability below 2^-126 becomes 0):
    2-3 % faster prefill on the H100 (benchmarks/RESULTS.md), the same results within the tests'
    bounds."""
    return ftz_module("attention", target)


def ftz_module(name: str, target: str) -> Any:
    """std.``name`` for ``target``, with approx_ftz where the target has it (:func:`attention_module`)."""
    mod = stdlib_module(name, target)
    return stdlib_module_ftz(name, target) if mod.target_has("nvptx") else mod


def target_for(x: Any, target: str) -> str:
    """The target a kernel on array ``x`` runs on: ``target`` unless 'auto'; a CUDA array (torch, or
    the CUDA array interface) asks for 'cuda', anything else for 'auto' (kcompiler.compile's)."""
    if target != "auto":
        return target
    if arrays.is_torch_tensor(x) and x.is_cuda:
        return "cuda"
    if hasattr(x, "__cuda_array_interface__") and not isinstance(x, np.ndarray):
        return "cuda"
    return "auto"


def device_of(mod: Any, x: Any) -> Device:
    """The device that runs ``mod``'s kernels on array ``x``: the GPU that holds a torch CUDA tensor
    (of the module's device class, by ordinal), else the module's own device. Its limits
    (``multiprocessor_count``, ``shared_memory_per_multiprocessor``, ``threads_per_multiprocessor``,
    ``shared_memory_per_block``) size the ops' launches."""
    dev = mod.device
    if arrays.is_torch_tensor(x) and x.is_cuda and (x.device.index or 0) != getattr(dev, "ordinal", 0):
        return type(dev).get(x.device.index or 0)
    return dev


def stream_of(x: Any) -> Any:
    """torch's current stream on the device of CUDA tensor ``x`` (so that the kernels queue behind the
    caller's work and can be captured in a CUDA graph), as its raw handle (an int) where torch tells
    it without making a Stream object, else None (the default stream)."""
    if arrays.is_torch_tensor(x) and x.is_cuda:
        return _torch_stream_getter(x)()
    return None


def _torch_stream_getter(x: Any) -> Callable[[], Any]:
    """A function of no arguments giving torch's current stream on CUDA tensor ``x``'s device: its raw
    handle by ``torch._C._cuda_getCurrentRawStream`` (what torch's own generated kernels launch on),
    else the Stream object."""
    import torch  # deferred: torch is optional
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        index = x.get_device()
        return lambda: raw(index)
    device = x.device
    return lambda: torch.cuda.current_stream(device)


class ArrayKind:
    """What a prepared op call (kcompiler.ops.decode.PLANS) needs of its arrays' kind, fixed when the
    plan is made: ``empty(shape, dtype)`` a new array of the kind (torch on ``like``'s device, or
    numpy), ``dtype(name)`` the kind's dtype of a language type, ``stream()`` the stream to launch on
    (torch's current one on a GPU, else None), ``contiguous(x)`` whether an array of the kind is
    C-contiguous, ``torch`` and ``cuda`` flags, and ``device``."""

    __slots__ = ("torch", "cuda", "device", "empty", "stream", "contiguous")

    def __init__(self, like: Any):
        if arrays.is_torch_tensor(like):
            import torch  # deferred: torch is optional
            self.torch, self.cuda, self.device = True, bool(like.is_cuda), like.device
            device = like.device
            self.empty = lambda shape, dtype: torch.empty(shape, dtype=dtype, device=device)
            self.stream = _torch_stream_getter(like) if self.cuda else (lambda: None)
            self.contiguous = torch.Tensor.is_contiguous
        else:
            self.torch, self.cuda, self.device = False, False, None
            self.empty = np.empty
            self.stream = lambda: None
            self.contiguous = lambda x: x.flags.c_contiguous

    def dtype(self, name: str) -> Any:
        """The torch or numpy dtype of the language's type ``name``."""
        return torch_dtype(name) if self.torch else arrays.numpy_dtype(SCALARS[name])

    def holds(self, x: Any) -> bool:
        """Whether ``x`` is an array of this kind (a torch tensor on the same device, or a numpy
        array)."""
        if self.torch:
            return arrays.is_torch_tensor(x) and x.device == self.device
        return isinstance(x, np.ndarray)


#: Constant arrays (:func:`const_f32`, :func:`const_fill`, :func:`const_rows`), by (what, length,
#: device): kept for the process's life, since a CUDA graph may hold their addresses.
_CONSTS: dict = {}


def const_f32(value: float, n: int, like: Any) -> Any:
    """A contiguous f32 array of ``n`` elements equal to ``value`` of ``like``'s kind (torch on its
    device, filled there: no copy from the host). Made once and kept (up to 256 of them); never cached
    while torch's current stream is capturing a CUDA graph (the fill would run only at replay, and
    the memory would belong to the graph's pool): a fresh one is made then, as every call did."""
    return const_fill(value, n, like, "f32")


def const_fill(value: float | int, n: int, like: Any, dtype: str = "f32") -> Any:
    """:func:`const_f32` for ``dtype`` 'f32' or 'i32' (the same cache; the arrays must not be
    written). Raises KeyError for another dtype."""
    value = float(value) if dtype == "f32" else int(value)
    return _const((dtype, value, n), (value,), n, like, dtype)


def const_rows(values: tuple, n: int, like: Any) -> Any:
    """A contiguous f32 array of ``len(values) * n`` elements, run i (n elements) equal to
    ``values[i]``, of ``like``'s kind: kept as :func:`const_f32`'s are (e.g. FP8 attention's
    descale_q, descale_k, descale_v given as floats, one run each)."""
    values = tuple(float(v) for v in values)
    return _const(("rows", values, n), values, n, like, "f32")


def _const(key: tuple, values: tuple, n: int, like: Any, dtype: str) -> Any:
    """The kept array of ``key`` (made, where missing, of a run of n elements per value, filled on
    ``like``'s device), and its cache rule (:func:`const_f32`)."""
    np_dtype = {"f32": np.float32, "i32": np.int32}[dtype]
    if not arrays.is_torch_tensor(like):
        t = _CONSTS.get(key + (None,))
        if t is None:
            t = np.repeat(np.asarray(values, np_dtype), n)
            if len(_CONSTS) < 256:
                _CONSTS[key + (None,)] = t
        return t
    import torch  # deferred: torch is optional
    key = key + (like.device,)
    t = _CONSTS.get(key)
    if t is None:
        tdt = torch.float32 if dtype == "f32" else torch.int32
        runs = [torch.full((n,), v, dtype=tdt, device=like.device) for v in values]
        t = runs[0] if len(runs) == 1 else torch.cat(runs)
        if len(_CONSTS) < 256 and not (like.is_cuda and torch.cuda.is_current_stream_capturing()):
            _CONSTS[key] = t
    return t


def kept(cache: dict, key: Any, like: Any, make: Callable[[], Any], limit: int) -> Any:
    """Scratch kept between calls: ``cache[key]``, made by ``make()`` where missing. A fresh one, not
    kept, where ``key`` is None (the caller keeps none, e.g. for host arrays), while torch captures a
    CUDA graph on ``like``'s stream (the memory would belong to the graph's pool), or once ``cache``
    holds ``limit`` entries. Callers key by stream where launches on two streams may overlap (a stream
    runs its calls in order, so one set a stream is never in use twice at once)."""
    got = cache.get(key) if key is not None else None
    if got is None:
        got = make()
        if key is not None and len(cache) < limit and not capturing(like):
            cache[key] = got
    return got


def capturing(x: Any) -> bool:
    """Whether ``x`` is a torch CUDA tensor and torch's current stream is capturing a CUDA graph
    (``torch.cuda.graph``): then an op must not wait for the device (no autotuning, no host reads)."""
    if not (arrays.is_torch_tensor(x) and x.is_cuda):
        return False
    import torch  # deferred: torch is optional
    return torch.cuda.is_current_stream_capturing()


def zeros_i32(like: Any) -> Any:
    """A one-element int32 zero of ``like``'s kind (numpy, or torch on its device, filled on the device:
    no copy from the host, which a CUDA graph capture refuses)."""
    if arrays.is_torch_tensor(like):
        import torch  # deferred: torch is optional
        return torch.zeros(1, dtype=torch.int32, device=like.device)
    return np.zeros(1, np.int32)


#: torch dtypes of the language's types. FP6 and FP4 have none: torch's float4_e2m1fn_x2 holds two
#: codes a byte, kcompiler one, so results of those types are numpy arrays only.
TORCH_DTYPES = {"bool": "bool", "i8": "int8", "u8": "uint8", "i16": "int16", "u16": "uint16", "i32": "int32",
                "u32": "uint32", "i64": "int64", "u64": "uint64", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
                "f8e4m3fnuz": "float8_e4m3fnuz", "f8e5m2fnuz": "float8_e5m2fnuz", "e8m0": "float8_e8m0fnu",
                "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


def torch_dtype(name: str) -> Any:
    """The torch dtype of the language's type ``name``; TypeError where torch has none."""
    import torch  # deferred: torch is optional
    if name not in TORCH_DTYPES or not hasattr(torch, TORCH_DTYPES[name]):
        raise TypeError(f"torch has no dtype for {name} (FP6 and FP4 are one code a byte here, two in torch's "
                        f"float4_e2m1fn_x2): pass numpy arrays for {name} results")
    return getattr(torch, TORCH_DTYPES[name])


def scalar_of(dtype: Any) -> Any:
    """The language's scalar type of ``dtype`` (a type name, or a numpy / ml_dtypes / torch dtype), or
    None (also for None, which numpy would read as float64)."""
    if dtype is None:
        return None
    return SCALARS.get(dtype) if isinstance(dtype, str) else arrays.scalar_of_dtype(dtype)


def empty_like(x: Any, shape: tuple, name: str) -> Any:
    """A new array of ``shape`` and type ``name`` of ``x``'s kind (numpy, or torch on x's device)."""
    if arrays.is_torch_tensor(x):
        import torch  # deferred: torch is optional
        return torch.empty(shape, dtype=torch_dtype(name), device=x.device)
    return np.empty(shape, arrays.numpy_dtype(SCALARS[name]))


def data_ptr(a: Any) -> int:
    """The device address of a torch or CUDA-array-interface array; 0 for a host array (copied to
    fresh, aligned device memory at launch, or used in place by the CPU target, which needs no
    alignment)."""
    if arrays.is_torch_tensor(a):
        return a.data_ptr() if a.is_cuda else 0
    if hasattr(a, "__cuda_array_interface__") and not isinstance(a, np.ndarray):
        return a.__cuda_array_interface__["data"][0]
    return 0


def flat(a: Any, align: int = 32) -> Any:
    """``a`` as a contiguous 1-D array whose device data is ``align``-byte aligned (the stdlib's
    kernels access 8 elements at once): a misaligned torch view is copied. Host (numpy) arrays are
    copied to fresh, aligned device memory at launch, and the CPU target needs no alignment."""
    if not arrays.is_torch_tensor(a):
        return a.reshape(-1)
    f = a.contiguous().view(-1)
    return f if not f.is_cuda or f.data_ptr() % align == 0 else f.clone()


def contiguous(x: Any) -> Any:
    """``x``, or a contiguous copy of it of its kind."""
    if arrays.is_contiguous(x):
        return x
    return x.contiguous() if arrays.is_torch_tensor(x) else np.ascontiguousarray(x)


def host_ints(x: Any) -> np.ndarray:
    """``x`` (numpy or torch) as a host numpy array."""
    return x.cpu().numpy() if arrays.is_torch_tensor(x) else np.asarray(x)


def query_type(q: Any, fn: str, name: str = "q") -> Any:
    """The scalar type of an attention's query array ``q`` (f16, bf16 or f32); TypeError otherwise."""
    src = arrays.array_scalar_type(q) if arrays.is_array(q) else None
    if src is None or src.name not in ("f16", "bf16", "f32"):
        raise TypeError(f"{fn}: {name} must be an array of f16, bf16 or f32, not {arrays.describe(q)}")
    return src


def check_same(name: str, x: Any, src: Any, fn: str) -> None:
    """TypeError unless ``x`` is an array of scalar type ``src`` (q's)."""
    if not arrays.is_array(x) or arrays.array_scalar_type(x) != src:
        raise TypeError(f"{fn}: {name} must be an array of {src} like q, not {arrays.describe(x)}")


def check_tiles(tiles: Any, keys: Iterable[str], fn: str) -> dict[str, int]:
    """A caller's ``tiles`` (the tile sizes of an op's kernel, given instead of its choice) as a dict of
    exactly ``keys``, each a positive int. Raises TypeError where ``tiles`` is not a mapping, ValueError
    naming the keys missing or not taken, or a value that is not a positive int; the kernel's own rules
    (a multiple of 16, shared memory that fits) are its errors."""
    keys = tuple(keys)
    if not isinstance(tiles, Mapping):
        raise TypeError(f"{fn}: tiles is a dict of {', '.join(keys)}, not {type(tiles).__name__}")
    missing = [k for k in keys if k not in tiles]
    other = [str(k) for k in tiles if k not in keys]
    if missing or other:
        raise ValueError(f"{fn}: tiles takes {', '.join(keys)}" + (f"; missing {', '.join(missing)}" if missing else "")
                         + (f"; no {', '.join(other)}" if other else ""))
    for k in keys:
        v = tiles[k]
        if not isinstance(v, Integral) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{fn}: tiles' {k} is a positive int, not {v!r}")
    return {k: int(tiles[k]) for k in keys}


def index_array(x: Any, like: Any, name: str, fn: str, n: int | None = None) -> Any:
    """``x`` as a contiguous 1-D int32 array of ``like``'s kind (numpy, or torch on its device), of
    length ``n`` if given; TypeError / ValueError otherwise."""
    if x is None or isinstance(x, (str, bytes)):
        raise TypeError(f"{fn}: {name} must be an int32 array, not {x!r}")
    if arrays.is_torch_tensor(like):
        import torch  # deferred: torch is optional
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


def hopper_reason_not(name: str, mod: Any, target: str, xs: tuple) -> str | None:
    """What keeps std.``name`` (a Hopper kernel fed by TMA tensor maps; ``mod()`` compiles it) from
    running on arrays ``xs`` for ``target``, or None: 'auto' runs it on torch CUDA tensors only, the
    target must have wgmma (an sm_90 GPU, or the CPU target's emulation), and the arrays must be what
    its tensor maps can describe there (device arrays on a GPU, numpy ones on the CPU target)."""
    if target == "auto" and not (arrays.is_torch_tensor(xs[0]) and xs[0].is_cuda):
        return "the Hopper path runs on torch CUDA tensors"
    try:
        m = mod()
    except Exception as e:  # noqa: BLE001 - no CUDA here, no stdlib...: the path does not apply
        return f"std.{name} is not available ({e})"
    if not m.target_has("wgmma"):
        return "the Hopper path needs an sm_90 GPU (wgmma, TMA)"
    on_host = m.target_has("cpu")  # the CPU target's emulation reads numpy arrays in place
    if any(arrays.is_device_array(x) == on_host or (on_host and not isinstance(x, np.ndarray)) for x in xs):
        return "the tensor maps need device arrays on a GPU (numpy ones on the CPU target)"
    return None
