"""DLPack capsules made and read with ctypes (no C compiler): what :class:`DeviceArray`'s
``__dlpack__`` returns and what ``kcompiler.from_dlpack`` takes.

The structures are those of ``dlpack.h`` (github.com/dmlc/dlpack, ``include/dlpack/dlpack.h``,
DLPack 1.1): ``DLDevice``, ``DLDataType``, ``DLTensor``, the legacy ``DLManagedTensor`` (capsule name
``"dltensor"``, DLPack < 1.0) and ``DLManagedTensorVersioned`` (capsule name ``"dltensor_versioned"``,
DLPack >= 1.0). The exchange rules are the Python array API standard's (``__dlpack__(stream,
max_version, dl_device, copy)``): a consumer renames the capsule to ``"used_dltensor"`` /
``"used_dltensor_versioned"`` and calls the deleter when it no longer needs the memory; a capsule
never consumed calls the deleter when it is collected.

Data types (DLDataTypeCode of DLPack 1.1): ints, uints, floats and bools as usual; bfloat16 is
``kDLBfloat`` (4); the ml_dtypes FP8 formats have their own codes (7..14, 8 bits). ml_dtypes keeps
FP6 and FP4 values one to a byte, which DLPack calls "padded" sub-byte data: a versioned capsule
gives them their codes (15..17, 6 or 4 bits) with ``DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED``; a
legacy capsule, which has no flags, gives them as uint8 (the consumer views them back).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable

import numpy as np

# --- dlpack.h ------------------------------------------------------------------------------------

#: DLDeviceType values used here.
KDLCPU, KDLCUDA, KDLCUDA_HOST, KDLROCM, KDLCUDA_MANAGED = 1, 2, 3, 10, 13
#: DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED.
FLAG_READ_ONLY, FLAG_SUBBYTE_PADDED = 1 << 0, 1 << 2
#: The version this module writes in a versioned capsule.
VERSION = (1, 1)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# --- data types ----------------------------------------------------------------------------------

_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6
#: ml_dtypes name -> DLDataTypeCode (dlpack.h 1.1).
_SMALL_FLOATS = {"float8_e3m4": 7, "float8_e4m3": 8, "float8_e4m3b11fnuz": 9, "float8_e4m3fn": 10,
                 "float8_e4m3fnuz": 11, "float8_e5m2": 12, "float8_e5m2fnuz": 13, "float8_e8m0fnu": 14,
                 "float6_e2m3fn": 15, "float6_e3m2fn": 16, "float4_e2m1fn": 17}
_SUBBYTE_BITS = {"float6_e2m3fn": 6, "float6_e3m2fn": 6, "float4_e2m1fn": 4}


def dl_dtype(dtype: np.dtype, versioned: bool) -> tuple[int, int, bool]:
    """(DLDataTypeCode, bits, padded sub-byte) of a numpy / ml_dtypes dtype. Raises BufferError for
    a dtype DLPack cannot describe (a structured or non-native byte order one)."""
    dtype = np.dtype(dtype)
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and not np.little_endian):
        raise BufferError(f"DLPack holds data in native byte order only, not {dtype.str}")
    name = dtype.name
    if name == "bfloat16":
        return _BFLOAT, 16, False
    if name in _SMALL_FLOATS:
        if name in _SUBBYTE_BITS:
            if not versioned:
                return _UINT, 8, False  # no flag to say "padded": plain bytes
            return _SMALL_FLOATS[name], _SUBBYTE_BITS[name], True
        return _SMALL_FLOATS[name], 8, False
    kind = {"i": _INT, "u": _UINT, "f": _FLOAT, "c": _COMPLEX, "b": _BOOL}.get(dtype.kind)
    if kind is None:
        raise BufferError(f"DLPack has no data type for {dtype}")
    return kind, dtype.itemsize * 8, False


def numpy_dtype_of(code: int, bits: int, lanes: int, padded: bool = True) -> np.dtype:
    """The numpy (or ml_dtypes) dtype of a DLDataType (``padded``: sub-byte values one to a byte, as
    ml_dtypes holds them). Raises BufferError for one with none (packed FP6 / FP4 among them)."""
    if lanes != 1:
        raise BufferError(f"DLPack vector data types (lanes={lanes}) are not supported")
    if code == _BFLOAT and bits == 16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    for name, c in _SMALL_FLOATS.items():
        if c == code:
            if bits != _SUBBYTE_BITS.get(name, 8):
                raise BufferError(f"DLPack type code {code} ({name}) with {bits} bits")
            if name in _SUBBYTE_BITS and not padded:
                raise BufferError(f"packed {name} data (two or more values a byte) has no numpy dtype; "
                                  f"ml_dtypes holds one value a byte")
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, name))
    letter = {_INT: "i", _UINT: "u", _FLOAT: "f", _COMPLEX: "c", _BOOL: "b"}.get(code)
    if letter is None or bits % 8:
        raise BufferError(f"DLPack data type (code {code}, {bits} bits) has no numpy dtype")
    return np.dtype(f"{letter}{bits // 8}") if letter != "b" else np.dtype(np.bool_)


# --- the Python C API's capsules, through ctypes ---------------------------------------------------

_api = ctypes.pythonapi
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_new = _api.PyCapsule_New
_new.restype, _new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR]
_get = _api.PyCapsule_GetPointer
_get.restype, _get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_set_name = _api.PyCapsule_SetName
_set_name.restype, _set_name.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
# The destructor's capsule is being destroyed: it is passed as a bare address (never a py_object,
# which would take a reference to a dying object).
_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_get_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_is_valid = _api.PyCapsule_IsValid
_is_valid.restype, _is_valid.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]

# Capsule names: the C API keeps the pointer, so they live as long as the process.
_NAMES = {n: ctypes.create_string_buffer(n) for n in
          (b"dltensor", b"used_dltensor", b"dltensor_versioned", b"used_dltensor_versioned")}


def _name(n: bytes) -> int:
    return ctypes.addressof(_NAMES[n])


def _char_p(n: bytes) -> Any:
    return ctypes.cast(_name(n), ctypes.c_char_p)


#: Exported tensors still held by a consumer: address of the managed struct -> (struct, keep-alive).
_EXPORTS: dict[int, tuple[Any, Any]] = {}
_EXPORTS_LOCK = threading.Lock()


@_DELETER
def _deleter(address: int) -> None:
    with _EXPORTS_LOCK:
        _EXPORTS.pop(address, None)


@_CAPSULE_DESTRUCTOR
def _capsule_destructor(capsule: int) -> None:
    # Called when the capsule is collected: a consumer that took the tensor renamed it; otherwise
    # nobody will call the deleter, so call it here.
    for name in (b"dltensor", b"dltensor_versioned"):
        if _is_valid_raw(capsule, _char_p(name)):
            _deleter(_get_raw(capsule, _char_p(name)))
            return


def export(owner: Any, data: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype,
           device: tuple[int, int], versioned: bool, read_only: bool = False) -> Any:
    """A DLPack capsule over ``data`` (the address of the first element), ``shape``, ``strides``
    (in elements), ``dtype`` (numpy / ml_dtypes), ``device`` (DLDeviceType, device id). ``owner`` is
    kept alive until the consumer calls the deleter (or the capsule is collected unconsumed).
    ``versioned``: a DLManagedTensorVersioned capsule (DLPack >= 1.0), else the legacy one."""
    code, bits, padded = dl_dtype(dtype, versioned)
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    m: Any = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    t = m.dl_tensor
    # dlpack.h: the data pointer of a tensor of size zero should be NULL.
    t.data = data if int(np.prod(shape, dtype=np.int64)) else None
    t.device = DLDevice(*device)
    t.ndim = ndim
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    m.deleter = _deleter
    if versioned:
        m.version = DLPackVersion(*VERSION)
        m.flags = (FLAG_READ_ONLY if read_only else 0) | (FLAG_SUBBYTE_PADDED if padded else 0)
    address = ctypes.addressof(m)
    with _EXPORTS_LOCK:
        _EXPORTS[address] = (m, (owner, shape_arr, strides_arr))
    name = b"dltensor_versioned" if versioned else b"dltensor"
    return _new(address, _char_p(name), _capsule_destructor)


class Imported:
    """A tensor taken from a DLPack capsule: ``data`` (address of its first element, byte_offset
    added), ``shape``, ``strides`` (bytes), ``dtype``, ``device`` (DLDeviceType, id), ``read_only``;
    :meth:`release` calls the producer's deleter (once)."""

    def __init__(self, data: int, shape: tuple, strides: tuple, dtype: np.dtype, device: tuple,
                 read_only: bool, release: Callable[[], None]):
        self.data, self.shape, self.strides, self.dtype = data, shape, strides, dtype
        self.device, self.read_only = device, read_only
        self._release: Callable[[], None] | None = release

    def release(self) -> None:
        """Call the producer's deleter now (once: later calls do nothing); the memory must not be
        used after it."""
        f, self._release = self._release, None
        if f is not None:
            f()


def import_capsule(capsule: Any) -> Imported:
    """Consume a DLPack capsule (renaming it ``used_...``, so only we call its deleter). Raises
    BufferError for a capsule already consumed, of an unknown major version, or of a data type
    numpy cannot hold (the deleter is then called)."""
    if _is_valid(capsule, _char_p(b"dltensor_versioned")):
        address = _get(capsule, _char_p(b"dltensor_versioned"))
        m: Any = DLManagedTensorVersioned.from_address(address)
        _set_name(capsule, _char_p(b"used_dltensor_versioned"))
        versioned = True
    elif _is_valid(capsule, _char_p(b"dltensor")):
        address = _get(capsule, _char_p(b"dltensor"))
        m = DLManagedTensor.from_address(address)
        _set_name(capsule, _char_p(b"used_dltensor"))
        versioned = False
    else:
        raise BufferError("not a DLPack capsule, or one already consumed")
    deleter = ctypes.cast(m.deleter, ctypes.c_void_p).value

    def release() -> None:
        if deleter:
            _DELETER(deleter)(address)

    try:
        if versioned and m.version.major != VERSION[0]:
            raise BufferError(f"DLPack {m.version.major}.{m.version.minor} tensor; this reader knows "
                              f"major version {VERSION[0]}")
        t = m.dl_tensor
        flags = int(m.flags) if versioned else 0
        dtype = numpy_dtype_of(t.dtype.code, t.dtype.bits, t.dtype.lanes, bool(flags & FLAG_SUBBYTE_PADDED))
        ndim = int(t.ndim)
        shape = tuple(int(t.shape[i]) for i in range(ndim))
        if t.strides:
            strides = tuple(int(t.strides[i]) * dtype.itemsize for i in range(ndim))
        else:  # NULL strides (DLPack < 1.0): C order
            strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * dtype.itemsize
                            for i in range(ndim))
        data = (t.data or 0) + int(t.byte_offset)
        return Imported(data, shape, strides, dtype, (int(t.device.device_type), int(t.device.device_id)),
                        bool(flags & FLAG_READ_ONLY), release)
    except BaseException:
        release()
        raise


__all__ = ["export", "import_capsule", "Imported", "dl_dtype", "numpy_dtype_of", "KDLCPU", "KDLCUDA",
           "KDLROCM", "VERSION"]
