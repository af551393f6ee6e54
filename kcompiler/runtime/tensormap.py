"""TMA tensor maps (CUDA's ``CUtensorMap``) made on the host, for kernel parameters of type ``tensor_map``.

A tensor map describes a tensor in global memory (address, sizes, byte strides, element type) and the
box one ``cp.async.bulk.tensor`` copies into shared memory (its sizes and the shared-memory swizzle).
It is encoded by the driver (``cuTensorMapEncodeTiled``, CUDA Driver API "Tensor Map Object Management";
through cuda-python) into 128 opaque bytes, which a launch passes by value (a grid-constant parameter,
backends/nvptx/target.py). Elements of a box outside the tensor are read as zeros, so tiles that
overhang the matrix need no masking.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from . import arrays

#: CUtensorMapDataType names by the element type's name in the language (FP8 moves as bytes).
_DATA_TYPES = {"bf16": "BFLOAT16", "f16": "FLOAT16", "f32": "FLOAT32", "f8e4m3": "UINT8", "f8e5m2": "UINT8",
               "i8": "UINT8", "u8": "UINT8", "i32": "INT32", "u32": "UINT32"}

#: CUtensorMapSwizzle names by the swizzle's width in bytes.
_SWIZZLES = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}


class TensorMap:
    """An encoded tensor map: ``raw`` (128 bytes, what the kernel receives), and what it was made from
    (``address``, ``dtype`` as the language names it, ``shape`` and ``box`` outermost first, ``swizzle``
    in bytes). Holds ``owner``, the array it maps, so that the memory outlives the map."""

    __slots__ = ("raw", "address", "dtype", "shape", "box", "swizzle", "owner", "kind")

    def __init__(self, raw: bytes, address: int, dtype: str, shape: tuple, box: tuple, swizzle: int, owner: Any,
                 kind: str = "cuda"):
        if len(raw) != 128:
            raise ValueError(f"a CUtensorMap is 128 bytes, not {len(raw)}")
        self.raw, self.address, self.dtype, self.shape, self.box, self.swizzle, self.owner = \
            raw, address, dtype, shape, box, swizzle, owner
        #: "cuda" (the driver's encoding) or "host" (the CPU target's, for numpy arrays)
        self.kind = kind

    def __repr__(self) -> str:
        return (f"TensorMap({self.kind}: {self.dtype}{list(self.shape)} at {self.address:#x}, box {list(self.box)}, "
                f"swizzle {self.swizzle})")


def tensor_map(x: Any, box: Sequence[int], swizzle: int = 128) -> TensorMap:
    """The tensor map of CUDA array ``x`` (a torch CUDA tensor or an ``__cuda_array_interface__``
    object, 1 to 5 dimensions, row-major with a contiguous last axis) for copies of ``box``-shaped
    tiles (sizes outermost first, each 1 to 256), swizzled in shared memory by ``swizzle`` bytes (0,
    32, 64 or 128; with a swizzle, a box row holds at most that many bytes).

    TMA's rules (cuTensorMapEncodeTiled): the address is 16-byte aligned and every stride but the last
    axis' a multiple of 16 bytes; a box row is a multiple of 16 bytes. Raises ValueError when one is
    broken, TypeError for an array of another kind or dtype, LaunchError when CUDA refuses.

    A numpy array gives a map in the CPU target's own format (``kind`` "host"), which its emulation of
    TMA reads (backends/cpu/hopper.py; 2-D); the same rules are checked."""
    t = arrays.array_scalar_type(x) if arrays.is_array(x) else None
    host = isinstance(x, np.ndarray)
    if t is None or t.name not in _DATA_TYPES or not (host or arrays.is_device_array(x)):
        raise TypeError(f"tensor_map: x must be a CUDA or numpy array of {', '.join(_DATA_TYPES)}, not "
                        f"{arrays.describe(x)}")
    if swizzle not in _SWIZZLES:
        raise ValueError(f"tensor_map: swizzle is 0, 32, 64 or 128 bytes, not {swizzle}")
    shape = tuple(int(s) for s in x.shape)
    box = tuple(int(b) for b in box)
    es = t.size
    if not 1 <= len(shape) <= 5 or len(box) != len(shape):
        raise ValueError(f"tensor_map: a {len(shape)}-D array takes a box of {len(shape)} sizes (1 to 5 axes), "
                         f"got {list(box)}")
    strides = tma_strides(shape, _byte_strides(x, es), es)
    if strides[-1] != es:
        raise ValueError("tensor_map: the last axis must be contiguous")
    address = x.ctypes.data if host else arrays.device_pointer(x)
    if address % 16:
        raise ValueError(f"tensor_map: the array's address {address:#x} is not 16-byte aligned")
    for axis, s in enumerate(strides[:-1]):
        if s % 16:
            raise ValueError(f"tensor_map: axis {axis}'s stride of {s} bytes is not a multiple of 16 (TMA's rule): "
                             f"pad the rows")
    if any(not 1 <= b <= 256 for b in box):
        raise ValueError(f"tensor_map: box sizes are 1 to 256, got {list(box)}")
    if (box[-1] * es) % 16:
        raise ValueError(f"tensor_map: a box row of {box[-1] * es} bytes is not a multiple of 16")
    if swizzle and box[-1] * es > swizzle:
        raise ValueError(f"tensor_map: a box row of {box[-1] * es} bytes exceeds the {swizzle}-byte swizzle")
    if host:
        words = [address, len(shape), es, swizzle] + [0] * 12
        for k, (n, st) in enumerate(zip(reversed(shape), reversed(strides))):
            words[4 + k], words[9 + k] = n, st
        for k, bx in enumerate(reversed(box)):
            words[14 + k // 4] |= bx << (16 * (k % 4))
        raw = np.array(words, dtype="<u8").tobytes()
        return TensorMap(raw, address, t.name, shape, box, swizzle, x, kind="host")
    from .cuda import _check, _drv  # lazy: cuda-python, needed only to encode on a CUDA device
    E = _drv
    dims = [E.cuuint64_t(s) for s in reversed(shape)]  # innermost first
    gstrides = [E.cuuint64_t(s) for s in reversed(strides[:-1])]
    boxdim = [E.cuuint32_t(b) for b in reversed(box)]
    ones = [E.cuuint32_t(1)] * len(shape)
    tm = _check(E.cuTensorMapEncodeTiled(
        getattr(E.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{_DATA_TYPES[t.name]}"), len(shape), address,
        dims, gstrides, boxdim, ones, E.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(E.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{_SWIZZLES[swizzle]}"),
        E.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        E.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
    raw = np.array([int(w) for w in tm.opaque], dtype="<u8").tobytes()
    return TensorMap(raw, address, t.name, shape, box, swizzle, x)



_CACHE: "OrderedDict[tuple, TensorMap]" = OrderedDict()
_CACHE_SIZE = 256


def cached_tensor_map(x: Any, box: Sequence[int], swizzle: int = 128) -> TensorMap:
    """:func:`tensor_map`, cached for torch CUDA tensors by what the encoding depends on (address,
    shape, strides, dtype, box, swizzle), the least recently used dropped past 256 maps. The cache
    holds no reference to ``x``: a later tensor at the same address with the same shape, strides and
    dtype gets the same map, which is right, since the encoding holds nothing else. Other arrays are
    not cached (a numpy array's host map is cheap). Raises what :func:`tensor_map` raises; a failure
    caches nothing."""
    if not arrays.is_torch_tensor(x):
        return tensor_map(x, box, swizzle)
    key = (x.data_ptr(), tuple(x.shape), tuple(x.stride()), str(x.dtype), tuple(box), swizzle)
    m = _CACHE.get(key)
    if m is None:
        m = tensor_map(x, box, swizzle)
        m.owner = None
        _CACHE[key] = m
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return m


def tma_strides(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> tuple[int, ...]:
    """Byte ``strides`` of an array of ``shape`` as a tensor map takes them: an axis of one element
    has no meaningful stride (torch reports any, e.g. 1 element for the rows of a (1, K) view), so it
    gets the packed one, rounded up to 16 bytes (the last axis: ``itemsize``)."""
    out = list(strides)
    packed = itemsize
    for axis in range(len(shape) - 1, -1, -1):
        if shape[axis] == 1:
            out[axis] = itemsize if axis == len(shape) - 1 else -(-packed // 16) * 16
        packed = out[axis] * shape[axis]
    return tuple(out)


def _byte_strides(x: Any, itemsize: int) -> tuple[int, ...]:
    if arrays.is_torch_tensor(x):
        return tuple(int(s) * itemsize for s in x.stride())
    if isinstance(x, np.ndarray):
        return tuple(int(s) for s in x.strides)
    cai = x.__cuda_array_interface__
    if cai.get("strides") is not None:
        return tuple(int(s) for s in cai["strides"])
    out, acc = [], itemsize
    for n in reversed(cai["shape"]):
        out.append(acc)
        acc *= int(n)
    return tuple(reversed(out))


__all__ = ["TensorMap", "cached_tensor_map", "tensor_map", "tma_strides"]
