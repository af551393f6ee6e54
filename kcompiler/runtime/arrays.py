"""What the runtime knows of the arrays and scalars users pass to kernels.

Four kinds of array are accepted for a ``ptr<T>`` parameter:

- kcompiler's own :class:`~kcompiler.runtime.device_array.DeviceArray` (``kc.to_device``), passed
  as its pointer on the device that holds it (another device's is refused);
- numpy arrays (host memory; a GPU device copies them in before the launch and back after it);
- objects with ``__cuda_array_interface__`` (CuPy, Numba, PyTorch CUDA tensors), passed as their
  device pointer with no copy (spec: numba.readthedocs.io, "CUDA Array Interface", version 3); one
  that exports a ``stream`` is synchronised on it first (``cuStreamSynchronize``: the spec's
  consumer rule, as numba applies it);
- PyTorch tensors, recognised by type so that the launch path reads ``data_ptr()`` instead of building
  the interface dict on every call.

An array must be C-contiguous, in native byte order and aligned to its element size, and its dtype
must be the pointee's scalar type (or, for a pointer to a vector, the vector's lane type). A 0-d
array is a one-element buffer; an empty one passes a pointer the kernel must not dereference. Scalars must fit their parameter's type. Every refusal is a TypeError
or ValueError naming the kernel, the parameter, what was expected and what was given.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ir.types import (BOOL, F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, SCALARS,
                        PointerType, ScalarType, Type, VectorType)

class ArgMismatch(Exception):
    """Raised by a device's fast launcher, before it launches anything, when the arguments are not of
    the types it was generated for; the caller then takes the general path (which gives the real
    error, or launches through the device's general marshalling)."""


# --- dtypes -------------------------------------------------------------------------------------

#: numpy dtype name -> the language's scalar type name. FP8/FP6/FP4/E8M0 come from ml_dtypes and
#: map only once the IR knows those scalar types (looked up by name in SCALARS).
_NUMPY_NAMES = {
    "bool": "bool", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2", "float8_e4m3fnuz": "f8e4m3fnuz",
    "float8_e5m2fnuz": "f8e5m2fnuz", "float8_e8m0fnu": "e8m0", "float6_e2m3fn": "f6e2m3",
    "float6_e3m2fn": "f6e3m2", "float4_e2m1fn": "f4e2m1",
}

_TORCH_NAMES = {
    "torch.bool": "bool", "torch.int8": "i8", "torch.int16": "i16", "torch.int32": "i32",
    "torch.int64": "i64", "torch.uint8": "u8", "torch.uint16": "u16", "torch.uint32": "u32",
    "torch.uint64": "u64", "torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float32": "f32",
    "torch.float64": "f64", "torch.float8_e4m3fn": "f8e4m3", "torch.float8_e5m2": "f8e5m2",
    "torch.float8_e4m3fnuz": "f8e4m3fnuz", "torch.float8_e5m2fnuz": "f8e5m2fnuz",
    "torch.float8_e8m0fnu": "e8m0",
}


#: :func:`scalar_of_dtype`'s answers by dtype object (what every launch and op asks first).
_BY_DTYPE: dict[Any, ScalarType | None] = {}


def scalar_of_dtype(dtype: Any) -> ScalarType | None:
    """The scalar type of a numpy / ml_dtypes / torch dtype, or None when the language has none."""
    try:
        return _BY_DTYPE[dtype]
    except (KeyError, TypeError):  # not seen yet, or unhashable
        pass
    got = _scalar_of_dtype(dtype)
    try:
        if len(_BY_DTYPE) < 256:
            _BY_DTYPE[dtype] = got
    except TypeError:
        pass
    return got


def _scalar_of_dtype(dtype: Any) -> ScalarType | None:
    if type(dtype).__module__.startswith("torch"):
        name = _TORCH_NAMES.get(str(dtype))
    else:
        try:
            name = _NUMPY_NAMES.get(np.dtype(dtype).name)
        except TypeError:
            return None
    return SCALARS.get(name) if name else None


def numpy_dtype(t: ScalarType) -> np.dtype:
    """The numpy dtype that holds values of scalar type ``t`` (bf16 and FP8 through ml_dtypes)."""
    for np_name, name in _NUMPY_NAMES.items():
        if name == t.name:
            try:
                return np.dtype(np_name)
            except TypeError:
                import ml_dtypes  # noqa: F401  (registers bfloat16 and the FP8 dtypes with numpy)
                return np.dtype(getattr(ml_dtypes, np_name))
    raise TypeError(f"no numpy dtype holds {t}")


# --- array classification -----------------------------------------------------------------------

def is_torch_tensor(x: Any) -> bool:
    """Whether ``x`` is a torch Tensor (or Parameter), told by its type's name and module, without
    importing torch."""
    t = type(x)
    return t.__name__ in ("Tensor", "Parameter") and t.__module__.startswith("torch")


def is_kc_array(x: Any) -> bool:
    """Whether ``x`` is a kcompiler DeviceArray (runtime/device_array.py), without importing it."""
    return getattr(type(x), "_kc_device_array", False) is True


def array_scalar_type(x: Any) -> ScalarType | None:
    """The element type of an array argument, or None if ``x`` is not an array we accept."""
    if isinstance(x, np.ndarray) or is_kc_array(x):
        return scalar_of_dtype(x.dtype)
    if is_torch_tensor(x):
        return scalar_of_dtype(x.dtype)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        try:
            return scalar_of_dtype(np.dtype(cai["typestr"]))
        except TypeError:
            return None
    return None


def is_array(x: Any) -> bool:
    """Whether ``x`` is passed as an array: a numpy ndarray, a kcompiler DeviceArray, a torch tensor or an object with
    ``__cuda_array_interface__`` (CuPy, numba-cuda, ...)."""
    return (isinstance(x, np.ndarray) or is_kc_array(x) or is_torch_tensor(x)
            or hasattr(x, "__cuda_array_interface__"))


def describe(x: Any) -> str:
    """A short description of an argument for error messages: 'numpy array of float64', 'int 3'."""
    if isinstance(x, np.ndarray):
        return f"numpy array of {x.dtype}"
    if is_kc_array(x):
        from .device_array import device_name

        return f"kcompiler DeviceArray of {x.dtype} on {device_name(x.device)}"
    if is_torch_tensor(x):
        return f"torch tensor of {x.dtype} on {x.device}"
    if hasattr(x, "__cuda_array_interface__"):
        try:
            dt = np.dtype(x.__cuda_array_interface__["typestr"])
        except Exception:  # noqa: BLE001 - describing must not fail
            dt = "?"
        return f"{type(x).__module__.split('.')[0]}.{type(x).__name__} of {dt}"
    if isinstance(x, (bool, np.bool_)):
        return f"bool {x}"
    if isinstance(x, (int, np.integer)):
        return f"{type(x).__name__} {x}"
    if isinstance(x, (float, np.floating)):
        return f"{type(x).__name__} {x!r}"
    return type(x).__name__


def arg_type(x: Any) -> Type | None:
    """The IR type an argument suggests, for inferring compile-time parameters.

    Arrays give ``ptr<elem>``; numpy scalars their scalar type; Python bools ``bool``; Python ints
    and floats give None (they fit many types and take the parameter's)."""
    if isinstance(x, (bool, np.bool_)):
        return BOOL
    if isinstance(x, np.generic):
        return scalar_of_dtype(x.dtype)
    if isinstance(x, (int, float)):
        return None
    elem = array_scalar_type(x)
    return PointerType(elem) if elem is not None else None


def is_contiguous(x: Any) -> bool:
    """Whether array ``x`` is C-contiguous (row-major, no gaps): numpy's and torch's own flag, else the
    ``__cuda_array_interface__`` strides (None means contiguous; extents of 1 may have any stride)."""
    if isinstance(x, np.ndarray):
        return x.flags.c_contiguous
    if is_kc_array(x):
        return x.is_c_contiguous
    if is_torch_tensor(x):
        return x.is_contiguous()
    cai = x.__cuda_array_interface__
    strides = cai.get("strides")
    if strides is None:
        return True
    expect = np.dtype(cai["typestr"]).itemsize
    for n, s in zip(reversed(cai["shape"]), reversed(strides)):
        if n > 1 and s != expect:
            return False
        expect *= n
    return True


def device_pointer(x: Any) -> int:
    """The device address of a CUDA array (torch tensor or ``__cuda_array_interface__`` object)."""
    if is_torch_tensor(x):
        return x.data_ptr()
    if is_kc_array(x):
        return x.ptr
    return cai_pointer(x.__cuda_array_interface__)


def cai_pointer(cai: dict) -> int:
    """The data pointer of a ``__cuda_array_interface__`` dict, after synchronising the stream it
    exports, if any (version 3's "Synchronization": a consumer synchronises on ``stream`` before
    using the data; 1 and 2 are the legacy and per-thread default streams, valid handles here)."""
    s = cai.get("stream")
    if s is not None:
        from .device_array import sync_cuda_stream  # lazy: the driver only when a stream is exported

        sync_cuda_stream(int(s))
    return int(cai["data"][0])


def kc_array_pointer(kernel: str, param: str, x: Any, target: str, ordinal: int) -> int:
    """The pointer of DeviceArray ``x`` for a kernel running on device ``ordinal`` of ``target``
    ('nvptx', 'amdgcn'). Raises TypeError naming the kernel and parameter when the array lives on
    another device."""
    d = x.device
    if d.target != target or getattr(d, "ordinal", 0) != ordinal:
        from .device_array import device_name

        here = f"{'cuda' if target == 'nvptx' else 'hip'}:{ordinal}"
        raise TypeError(f"{kernel}: parameter '{param}': the array is on {device_name(d)}, the kernel "
                        f"runs on {here}; copy it there with kc.to_device(x, device='{here}')")
    return x.ptr


def is_device_array(x: Any) -> bool:
    """Whether ``x`` lives in GPU memory (torch CUDA tensor, a kcompiler DeviceArray of a GPU, or a
    ``__cuda_array_interface__`` object)."""
    if is_torch_tensor(x):
        return x.is_cuda
    if is_kc_array(x):
        return x.device.target != "cpu"
    return hasattr(x, "__cuda_array_interface__")


# --- scalars ------------------------------------------------------------------------------------

def scalar_range(t: ScalarType) -> tuple[int, int]:
    """Inclusive range of an integer type."""
    if t.kind == "int":
        return -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1
    return 0, (1 << t.bits) - 1


def check_scalar(kernel: str, param: str, t: Type, x: Any) -> Any:
    """Check scalar argument ``x`` for parameter ``param`` of type ``t`` and return it as a Python
    value of the right kind (int, float or bool). Raises TypeError / ValueError naming both."""
    if not isinstance(t, ScalarType):
        raise TypeError(f"{kernel}: parameter '{param}' has type {t}, which cannot be passed from the "
                        f"host; got {describe(x)}")
    where = f"{kernel}: parameter '{param}' expects {t}"
    if is_array(x):
        raise TypeError(f"{where}, got {describe(x)}")
    if t.is_bool:
        if isinstance(x, (bool, np.bool_)):
            return bool(x)
        raise TypeError(f"{where} (True or False), got {describe(x)}")
    if t.is_int:
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise TypeError(f"{where} (an integer), got {describe(x)}")
        v = int(x)
        lo, hi = scalar_range(t)
        if not lo <= v <= hi:
            raise ValueError(f"{where}, but {v} is out of its range [{lo}, {hi}]")
        return v
    # float parameter: ints and floats are accepted; a value beyond the type's range becomes inf,
    # which is refused as the likely mistake it is.
    if isinstance(x, (bool, np.bool_)) or not (
            isinstance(x, (int, float, np.integer, np.floating))
            or (isinstance(x, np.generic) and x.dtype.kind == "V" and scalar_of_dtype(x.dtype))):
        raise TypeError(f"{where} (a number), got {describe(x)}")
    v = float(x)
    if math.isfinite(v) and t.name in ("f16", "bf16", "f32"):
        big = {"f16": 65504.0, "bf16": 3.3895313892515355e38, "f32": 3.4028234663852886e38}[t.name]
        if abs(v) > big:
            raise ValueError(f"{where}, but {v!r} is out of its range (largest finite {big!r})")
    return v


def check_array(kernel: str, param: str, t: PointerType, x: Any) -> None:
    """Check array argument ``x`` for pointer parameter ``param``: an accepted array, element dtype
    equal to the pointee's scalar type, C-contiguous. Raises TypeError / ValueError."""
    want = t.pointee.elem if isinstance(t.pointee, VectorType) else t.pointee
    where = f"{kernel}: parameter '{param}' expects {t} (an array of {want})"
    if not is_array(x):
        raise TypeError(f"{where}, got {describe(x)}")
    if type(want).__name__ == "StructType":  # a numpy structured array of the struct's C layout
        from .structs import struct_dtype

        sd = struct_dtype(want)
        if not (isinstance(x, np.ndarray) and x.dtype.names is not None and _same_layout(x.dtype, sd)):
            raise TypeError(f"{where} (numpy dtype {sd}, as kcompiler.runtime.structs.struct_dtype gives), "
                            f"got {describe(x)}")
        if not is_contiguous(x):
            raise ValueError(f"{where}: the array given is not contiguous; pass a contiguous copy")
        return
    elem = array_scalar_type(x)
    if elem != want:
        raise TypeError(f"{where}, got {describe(x)}")
    if not is_contiguous(x):
        raise ValueError(f"{where}: the array given is not contiguous; pass a contiguous copy "
                         f"(numpy.ascontiguousarray / tensor.contiguous() / device_array.copy())")
    layout = _layout_problem(x)
    if layout:
        raise ValueError(f"{where}: {layout}")


def _layout_problem(x: Any) -> str | None:
    """What keeps a kernel from reading array ``x`` as its pointee type, beyond dtype and contiguity:
    a non-native byte order or an address not a multiple of the element size. None if nothing."""
    if isinstance(x, np.ndarray) or is_kc_array(x):
        dt, addr = x.dtype, (x.ctypes.data if isinstance(x, np.ndarray) else x.ptr)
    elif is_torch_tensor(x):
        return None  # torch has native byte order and aligned storage
    else:
        cai = x.__cuda_array_interface__
        dt, addr = np.dtype(cai["typestr"]), int(cai["data"][0])
    if dt.byteorder == ">" or (dt.byteorder == "=" and not np.little_endian):
        return (f"the array given is big-endian ({dt.str}); kernels read native (little-endian) "
                f"values: pass x.astype(x.dtype.newbyteorder('='))")
    if addr % dt.itemsize:
        return (f"the array given is not aligned: its address 0x{addr:x} is not a multiple of its "
                f"{dt.itemsize}-byte elements; pass an aligned copy (numpy.array(x), which aligns)")
    return None


def _same_layout(a: np.dtype, b: np.dtype) -> bool:
    """Whether structured dtypes ``a`` and ``b`` have the same fields at the same offsets, of the same
    dtypes, and the same itemsize."""
    if a.itemsize != b.itemsize or a.names != b.names:
        return False
    for n in a.names:
        (fa, oa), (fb, ob) = a.fields[n][:2], b.fields[n][:2]
        if oa != ob:
            return False
        if fa.names is not None or fb.names is not None:
            if fa.names is None or fb.names is None or not _same_layout(fa, fb):
                return False
        elif fa != fb:
            return False
    return True


def check_args(kernel: str, params: list, args: tuple) -> None:
    """Check user arguments against a specialised kernel's parameters (``KernelParam`` list)."""
    if len(args) != len(params):
        names = ", ".join(f"{p.name}: {p.type}" for p in params)
        raise TypeError(f"{kernel}() takes {len(params)} argument{'s' if len(params) != 1 else ''} "
                        f"({names}), {len(args)} given")
    for p, x in zip(params, args):
        if isinstance(p.type, PointerType):
            check_array(kernel, p.name, p.type, x)
        elif str(p.type) == "tensor_map":
            if type(x).__name__ != "TensorMap" or not hasattr(x, "raw"):
                raise TypeError(f"{kernel}: parameter '{p.name}' expects a tensor_map "
                                f"(kcompiler.runtime.tensormap.tensor_map(array, box)), got {describe(x)}")
        elif type(p.type).__name__ == "StructType":
            from .structs import pack_struct

            pack_struct(kernel, p.name, p.type, x)
        else:
            check_scalar(kernel, p.name, p.type, x)


__all__ = ["scalar_of_dtype", "numpy_dtype", "arg_type", "array_scalar_type", "check_args",
           "check_array", "check_scalar", "describe", "is_array", "is_contiguous", "is_device_array",
           "device_pointer", "cai_pointer", "kc_array_pointer", "is_kc_array", "is_torch_tensor", "scalar_range", "BOOL", "F16", "BF16", "F32", "F64",
           "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64"]
