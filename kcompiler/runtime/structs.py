"""Structs between the host and a kernel: the numpy structured dtype of a
:class:`~kcompiler.ir.types.StructType` (C layout: ``offsets`` and ``itemsize`` as the compiler lays
the struct out, what ``np.dtype(..., align=True)`` gives for the same fields), and the bytes of a
struct argument passed by value.

A struct parameter takes one of (docs/LANGUAGE.md, "Structs"):

- a numpy structured scalar (``arr[0]`` of an array of :func:`struct_dtype`, or any ``np.void``
  with the same field names),
- a dict ``{field: value}`` with every field exactly once,
- a tuple (or list) of the field values in declaration order.

Field values follow the rules of scalar arguments (an int for an integer field, a number for a float,
True/False for bool); nested structs take any of the three forms again; array and vector fields a
sequence of the right length. A ``ptr<...>`` field takes an integer address (the host cannot know
where a device will place an array inside a struct).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..ir.types import ArrayType, PointerType, ScalarType, StructType, Type, VectorType


def _field_dtype(t: Type) -> Any:
    from .arrays import numpy_dtype

    if isinstance(t, StructType):
        return struct_dtype(t)
    if isinstance(t, ArrayType):
        return (_field_dtype(t.elem), (t.count,))
    if isinstance(t, VectorType):
        return (numpy_dtype(t.elem), (t.count,))
    if isinstance(t, PointerType):
        return np.uint64
    if isinstance(t, ScalarType):
        return numpy_dtype(t)
    raise TypeError(f"{t} has no numpy dtype")


def struct_dtype(t: StructType) -> np.dtype:
    """The numpy structured dtype of struct ``t``: its fields by name at the compiler's offsets, with
    its size as ``itemsize`` (so an array of it has the stride of a kernel's array of it)."""
    return np.dtype({"names": [n for n, _ in t.fields], "formats": [_field_dtype(f) for _, f in t.fields],
                     "offsets": list(t.offsets), "itemsize": t.size})


def _assign(kernel: str, where: str, t: Type, x: Any) -> Any:
    """``x`` checked for a field (or parameter) of type ``t``, as a value numpy stores in its dtype."""
    from .arrays import check_scalar, describe

    if isinstance(t, StructType):
        names = [n for n, _ in t.fields]
        if isinstance(x, np.void) and x.dtype.names is not None:
            if list(x.dtype.names) != names:
                raise TypeError(f"{kernel}: {where} expects struct {t} with fields {', '.join(names)}; the numpy "
                                f"value has fields {', '.join(x.dtype.names)}")
            vals = [x[n] for n in names]
        elif isinstance(x, dict):
            extra = [k for k in x if k not in names]
            missing = [n for n in names if n not in x]
            if extra or missing:
                raise TypeError(f"{kernel}: {where} expects struct {t} ({', '.join(names)}): "
                                + (f"unknown field {', '.join(map(str, extra))}" if extra else "")
                                + ("; " if extra and missing else "")
                                + (f"missing field {', '.join(missing)}" if missing else ""))
            vals = [x[n] for n in names]
        elif isinstance(x, (tuple, list)):
            if len(x) != len(names):
                raise TypeError(f"{kernel}: {where} expects struct {t}: {len(names)} values "
                                f"({', '.join(names)}), got {len(x)}")
            vals = list(x)
        else:
            raise TypeError(f"{kernel}: {where} expects struct {t} (a numpy structured scalar, a dict or a "
                            f"tuple of its fields), got {describe(x)}")
        return tuple(_assign(kernel, f"{where} field '{n}'", ft, v) for (n, ft), v in zip(t.fields, vals))
    if isinstance(t, (ArrayType, VectorType)):
        seq = list(np.asarray(x).reshape(-1)) if isinstance(x, np.ndarray) else x
        if not isinstance(seq, (list, tuple)) or len(seq) != t.count:
            raise TypeError(f"{kernel}: {where} expects {t} ({t.count} values), got {describe(x)}")
        return [_assign(kernel, where, t.elem, v) for v in seq]
    if isinstance(t, PointerType):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or not 0 <= int(x) < 1 << 64:
            raise TypeError(f"{kernel}: {where} is a {t}: pass an integer address, got {describe(x)}")
        return int(x)
    if isinstance(x, np.generic) and not isinstance(x, np.void):
        x = x.item()
    return check_scalar(kernel, where, t, x)


def pack_struct(kernel: str, param: str, t: StructType, x: Any) -> bytes:
    """The ``t.size`` bytes of struct argument ``x`` for parameter ``param`` (padding zero). Raises
    TypeError / ValueError naming the kernel, the parameter and the field."""
    out = np.zeros((), struct_dtype(t))
    out[()] = _assign(kernel, f"parameter '{param}'", t, x)
    return out.tobytes()


__all__ = ["struct_dtype", "pack_struct"]
