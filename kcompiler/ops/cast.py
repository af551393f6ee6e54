"""kcompiler.ops.cast: elementwise conversion between the language's scalar types by std.cast."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import arrays
from . import _common
from ._common import data_ptr, scalar_of, target_for, torch_dtype


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
    dst = scalar_of(dtype)
    if src is None or dst is None:
        raise TypeError(f"cast: no kernel type for {getattr(x, 'dtype', x)!r} -> {dtype!r}")
    if saturate and not dst.is_minifloat:
        raise TypeError(f"cast: saturate applies to small-float results, not {dst}")
    if arrays.is_torch_tensor(x):
        import torch  # deferred: torch is optional
        out = torch.empty(tuple(x.shape), dtype=torch_dtype(dst.name), device=x.device)
        flat_in, flat_out = x.contiguous().reshape(-1), out.reshape(-1)
    else:
        x = np.ascontiguousarray(x)
        out = np.empty(x.shape, arrays.numpy_dtype(dst))
        flat_in, flat_out = x.reshape(-1), out.reshape(-1)
    n = int(np.prod(x.shape)) if len(x.shape) else 1
    if n == 0:
        return out
    mod = _common.stdlib_module("cast", target_for(x, target))
    vec = 8 if data_ptr(flat_in) % (8 * src.size) == 0 else 1  # 8 elements at once where aligned
    block = 256
    grid = min((n + block * vec - 1) // (block * vec), 65536)
    mod.cast[grid, block](flat_in, flat_out, n, S=src.name, T=dst.name, SAT=saturate, VEC=vec,
                          stream=_common.stream_of(x))
    return out


__all__ = ["cast"]
