"""Arrays that live in a device's memory between kernels, without torch or CuPy.

    x = kc.to_device(np.arange(1024, dtype=np.float32))    # copied in once
    out = kc.device_array(1024, np.float32)                 # uninitialised device memory
    mod.vadd[4, 256](x, x, out, 1024)                       # passed by pointer: no copies
    host = out.copy_to_host()                               # or np.asarray(out)

numba-cuda's ``cuda.to_device`` / ``DeviceNDArray`` is the model. The memory comes from the device's
API: ``cuMemAlloc`` / ``cuMemcpy*`` (cuda-python's driver API) on CUDA, ``hipMalloc`` / ``hipMemcpy*``
(hip-python) on HIP, and a numpy buffer (host memory, 256-byte aligned as a GPU allocation is) on the
CPU target. It is freed when the last array viewing it is collected (one ``weakref.finalize`` per
allocation: never twice).

A :class:`DeviceArray` has numpy's ``shape``, ``strides`` (bytes), ``dtype``, ``size``, ``nbytes``
and ``ndim``, and ``device`` (the :class:`~kcompiler.runtime.device.Device` it lives on). Basic
indexing (ints, slices with steps, ``...``, ``None``) gives views of the same memory; a kernel takes
a C-contiguous one for a ``ptr<T>`` parameter and refuses a strided one with the usual error.

Interchange, with no copy:

- ``__cuda_array_interface__`` (version 3; CUDA arrays only). Its ``stream`` is the array's
  :attr:`DeviceArray.stream` (None for the default stream, as numba's DeviceNDArray gives). A kernel
  argument that is another library's array with a ``stream`` is synchronised on that stream before
  the launch (``cuStreamSynchronize``, as the interface's "Synchronization" section asks of a
  consumer and numba does when it imports one).
- DLPack (``__dlpack__(stream=...)``, ``__dlpack_device__``; runtime/dlpack.py), so that
  ``torch.from_dlpack(x)``, ``cupy.from_dlpack(x)`` and (CPU target) ``numpy.from_dlpack(x)`` view
  the memory; :func:`from_dlpack` takes theirs. ``__dlpack__(stream=s)`` makes stream ``s`` wait for
  the array's own stream (an event) when they differ, as the protocol asks of a producer.

Streams: ``to_device``, ``copy_to_host``, ``copy_from_host`` take ``stream=`` (an int handle or a
torch / CuPy / cuda-python stream): the copy is queued on it (``copy_to_host`` then waits for it, so
the host array is ready when it returns). A kernel launched with an array does not synchronise the
array's stream: launch on ``x.stream`` or synchronise first.

dtypes: any numpy dtype, and ml_dtypes' bfloat16, FP8, FP6 and FP4 (one value a byte, as ml_dtypes
holds them). The CUDA array interface's ``typestr`` has no code for the ml_dtypes formats: for them
it gives the unsigned integer of the same size (``<u2`` for bfloat16, ``|u1`` for FP8); DLPack
carries them by their own type codes.
"""
from __future__ import annotations

import ctypes
import operator
import weakref
from typing import Any

import numpy as np

from . import dlpack
from .device import Device, LaunchError
from .marshal import stream_handle

#: Alignment of a CPU-target allocation (bytes): what cudaMalloc guarantees.
HOST_ALIGN = 256


# --- the devices' memory operations --------------------------------------------------------------

class _CpuOps:
    """Host memory: numpy buffers and memmove; streams are accepted and have nothing to order."""

    kind = "cpu"

    def __init__(self, device: Device):
        self.device = device

    def alloc(self, nbytes: int) -> tuple[int, Any, Any]:
        buf = np.empty(nbytes + HOST_ALIGN, np.uint8)
        start = -buf.ctypes.data % HOST_ALIGN
        host = buf[start:start + nbytes]
        return host.ctypes.data, host, None

    def htod(self, dst: int, src: int, n: int, stream: int) -> None:
        ctypes.memmove(dst, src, n)

    dtoh = dtod = htod

    def sync(self, stream: int) -> None:
        pass

    def stream_wait(self, consumer: int, producer: int) -> None:
        pass


class _CudaOps:
    """CUDA through cuda-python's driver API, in the device's primary context."""

    kind = "cuda"

    def __init__(self, device: Any):
        from . import cuda

        self.device, self.drv, self.check = device, cuda._drv, cuda._check

    def _stream(self, h: int) -> Any:
        return self.drv.CUstream(h)

    def alloc(self, nbytes: int) -> tuple[int, Any, Any]:
        self.device.make_current()
        ptr = int(self.check(self.drv.cuMemAlloc(nbytes), f"cuMemAlloc of {nbytes} bytes on {self.device.name}"))
        return ptr, None, self._free

    def _free(self, ptr: int) -> None:
        try:
            self.device.make_current()
            self.drv.cuMemFree(ptr)
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone already
            pass

    def htod(self, dst: int, src: int, n: int, stream: int) -> None:
        self.device.make_current()
        self.check(self.drv.cuMemcpyHtoDAsync(dst, src, n, self._stream(stream)), "cuMemcpyHtoDAsync")

    def dtoh(self, dst: int, src: int, n: int, stream: int) -> None:
        self.device.make_current()
        self.check(self.drv.cuMemcpyDtoHAsync(dst, src, n, self._stream(stream)), "cuMemcpyDtoHAsync")
        self.sync(stream)

    def dtod(self, dst: int, src: int, n: int, stream: int) -> None:
        self.device.make_current()
        self.check(self.drv.cuMemcpyDtoDAsync(dst, src, n, self._stream(stream)), "cuMemcpyDtoDAsync")

    def sync(self, stream: int) -> None:
        self.device.make_current()
        self.check(self.drv.cuStreamSynchronize(self._stream(stream)), "cuStreamSynchronize")

    def stream_wait(self, consumer: int, producer: int) -> None:
        """Make stream ``consumer`` wait for the work queued so far on ``producer`` (an event)."""
        d = self.drv
        self.device.make_current()
        ev = self.check(d.cuEventCreate(d.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        try:
            self.check(d.cuEventRecord(ev, self._stream(producer)), "cuEventRecord")
            self.check(d.cuStreamWaitEvent(self._stream(consumer), ev, 0), "cuStreamWaitEvent")
        finally:
            d.cuEventDestroy(ev)


class _HipOps:
    """HIP through hip-python (``hipMalloc``, ``hipMemcpy*Async``, ``hipStreamSynchronize``), on the
    device made current with ``hipSetDevice``."""

    kind = "hip"

    def __init__(self, device: Any):
        from . import hip

        self.device, self.call, self.hip = device, hip._call, hip

    def alloc(self, nbytes: int) -> tuple[int, Any, Any]:
        self.device.make_current()
        return int(self.call(f"hipMalloc of {nbytes} bytes", "hipMalloc", nbytes)), None, self._free

    def _free(self, ptr: int) -> None:
        try:
            self.device.make_current()
            self.hip._hip.hipFree(ptr)
        except Exception:  # noqa: BLE001 - at interpreter exit the runtime may be gone already
            pass

    def htod(self, dst: int, src: int, n: int, stream: int) -> None:
        self.device.make_current()
        self.call("hipMemcpyHtoDAsync", "hipMemcpyHtoDAsync", dst, src, n, stream)

    def dtoh(self, dst: int, src: int, n: int, stream: int) -> None:
        self.device.make_current()
        self.call("hipMemcpyDtoHAsync", "hipMemcpyDtoHAsync", dst, src, n, stream)
        self.sync(stream)

    def dtod(self, dst: int, src: int, n: int, stream: int) -> None:
        self.device.make_current()
        self.call("hipMemcpyDtoDAsync", "hipMemcpyDtoDAsync", dst, src, n, stream)

    def sync(self, stream: int) -> None:
        self.device.make_current()
        self.call("hipStreamSynchronize", "hipStreamSynchronize", stream)

    def stream_wait(self, consumer: int, producer: int) -> None:
        self.device.make_current()
        ev = self.call("hipEventCreate", "hipEventCreate")
        try:
            self.call("hipEventRecord", "hipEventRecord", ev, producer)
            self.call("hipStreamWaitEvent", "hipStreamWaitEvent", consumer, ev, 0)
        finally:
            self.hip._hip.hipEventDestroy(ev)


_OPS: "weakref.WeakKeyDictionary[Device, Any]" = weakref.WeakKeyDictionary()


def _ops(device: Device) -> Any:
    ops = _OPS.get(device)
    if ops is None:
        cls = {"cpu": _CpuOps, "nvptx": _CudaOps, "amdgcn": _HipOps}.get(device.target)
        if cls is None:
            raise LaunchError(f"device arrays are not available on {device!r} (target {device.target})")
        ops = _OPS[device] = cls(device)
    return ops


def resolve_device(device: Any = None) -> Device:
    """The device ``device`` names: a :class:`Device`; an object with a ``device`` attribute (a
    Module); None or 'auto' (CUDA, else HIP, else the CPU target, as ``target='auto'`` chooses);
    a target name or alias with an optional ordinal ('cpu', 'cuda', 'cuda:1', 'hip:0', 'nvptx');
    an int (that ordinal of the 'auto' target). Raises ValueError for an unknown name, LaunchError
    when the device is missing."""
    if isinstance(device, Device):
        return device
    if device is not None and isinstance(getattr(device, "device", None), Device):
        return device.device
    from ..backends.registry import backends, find_backend

    ordinal = 0
    name = "auto"
    if isinstance(device, str):
        name, _, idx = device.partition(":")
        if idx:
            if not idx.isdigit():
                raise ValueError(f"device {device!r}: expected 'TARGET' or 'TARGET:ORDINAL'")
            ordinal = int(idx)
    elif device is not None:
        try:
            ordinal = operator.index(device)
        except TypeError:
            raise TypeError(f"device must be a Device, a target name ('cuda:1', 'cpu'), an ordinal or "
                            f"None, got {type(device).__name__}") from None
    if name == "auto":
        for backend in backends():
            cls = backend.device_class()
            if cls is not None and cls.count() > 0:
                return cls.get(ordinal)
        raise LaunchError("no device here")
    from ..backends import canonical_target

    cls = find_backend(canonical_target(name)).device_class()
    if cls is None:
        raise LaunchError(f"target {name!r} has no runtime")
    return cls.get(ordinal)


# --- memory and arrays ---------------------------------------------------------------------------

class _Memory:
    """One allocation (or one imported DLPack tensor's memory); freed when collected."""

    __slots__ = ("ptr", "nbytes", "device", "host", "_fin", "__weakref__")

    def __init__(self, device: Device, nbytes: int):
        self.device, self.nbytes = device, nbytes
        ops = _ops(device)
        self.host = None
        self._fin = None
        if nbytes == 0 and ops.kind != "cpu":
            self.ptr = 0  # never dereferenced: nothing to allocate
            return
        self.ptr, self.host, free = ops.alloc(nbytes)
        if free is not None:
            self._fin = weakref.finalize(self, free, self.ptr)

    @classmethod
    def imported(cls, device: Device, ptr: int, nbytes: int, host: Any, release: Any) -> "_Memory":
        m = cls.__new__(cls)
        m.device, m.nbytes, m.ptr, m.host = device, nbytes, ptr, host
        m._fin = weakref.finalize(m, release)
        return m


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def _shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (tuple, list)):
        dims = tuple(operator.index(n) for n in shape)
    else:
        dims = (operator.index(shape),)
    if any(n < 0 for n in dims):
        raise ValueError(f"negative dimensions are not allowed: {dims}")
    return dims


def _cai_typestr(dtype: np.dtype) -> str:
    if dtype.kind == "V" and not dtype.fields:  # ml_dtypes: bits as unsigned integers
        return np.dtype(f"u{dtype.itemsize}").str
    return dtype.str


class DeviceArray:
    """An n-dimensional array in a device's memory (see the module's description).

    Made by :func:`to_device`, :func:`device_array` or :func:`from_dlpack`, not directly.
    ``stream`` (an int handle, 0 the default stream): the stream its data is produced on; its CUDA
    array interface exports it and ``__dlpack__`` orders a consumer's stream after it."""

    _kc_device_array = True  # how runtime/arrays.py recognises it without importing this module

    __slots__ = ("_mem", "shape", "strides", "dtype", "_offset", "stream", "_contiguous", "__weakref__")

    def __init__(self, mem: _Memory, shape: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype,
                 offset: int = 0, stream: int = 0):
        self._mem, self.shape, self.strides, self.dtype = mem, tuple(shape), tuple(strides), np.dtype(dtype)
        self._offset, self.stream = offset, stream
        c = _c_strides(self.shape, self.dtype.itemsize)
        self._contiguous = all(n <= 1 or s == cs for n, s, cs in zip(self.shape, self.strides, c))

    # --- what numpy has ---
    @property
    def device(self) -> Device:
        """The device whose memory holds the array."""
        return self._mem.device

    @property
    def ptr(self) -> int:
        """The address of the first element (``x[0, ..., 0]``) in the device's memory."""
        return self._mem.ptr + self._offset if self._mem.ptr else 0

    @property
    def ndim(self) -> int:
        """The number of dimensions (``len(shape)``; 0 for a 0-d array)."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes of the elements (``size * itemsize``), as numpy counts them."""
        return self.size * self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes of one element (the dtype's itemsize)."""
        return self.dtype.itemsize

    @property
    def is_c_contiguous(self) -> bool:
        """Whether the elements lie in C order with no gaps (what a kernel's ``ptr<T>`` takes)."""
        return self._contiguous

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d device array")
        return self.shape[0]

    def __repr__(self) -> str:
        where = _device_name(self.device)
        return f"<kcompiler.DeviceArray shape={self.shape} dtype={self.dtype} on {where}>"

    # --- views ---
    def _as_numpy_layout(self) -> np.ndarray:
        # A numpy array with this shape, strides and dtype over one element of scratch memory: numpy
        # computes basic indexing on it; nothing is ever read through it.
        scratch = np.zeros(1, self.dtype)
        return np.lib.stride_tricks.as_strided(scratch, self.shape, self.strides)

    def __getitem__(self, key: Any) -> "DeviceArray":
        """A view: basic indexing only (ints, slices, ``...``, ``None``). Raises IndexError as numpy
        does, TypeError for an index array (that would be a copy)."""
        keys = key if isinstance(key, tuple) else (key,)
        for k in keys:
            if not (k is None or k is Ellipsis or isinstance(k, slice) or _is_int(k)):
                raise TypeError(f"device arrays take basic indexing only (ints, slices, ..., None), "
                                f"got {type(k).__name__}; copy to the host for fancy indexing")
        if not any(k is Ellipsis for k in keys):
            keys = keys + (Ellipsis,)  # an all-int index gives a 0-d view, not a scalar read
        layout = self._as_numpy_layout()
        view = layout[keys]
        delta = view.__array_interface__["data"][0] - layout.__array_interface__["data"][0]
        return DeviceArray(self._mem, view.shape, view.strides, self.dtype, self._offset + delta, self.stream)

    def view(self, dtype: Any) -> "DeviceArray":
        """The same memory as another dtype of the same itemsize (e.g. uint8 -> float4_e2m1fn).
        Raises ValueError for a different itemsize."""
        dtype = np.dtype(dtype)
        if dtype.itemsize != self.dtype.itemsize:
            raise ValueError(f"view as {dtype}: its itemsize {dtype.itemsize} differs from {self.dtype}'s "
                             f"{self.dtype.itemsize}")
        return DeviceArray(self._mem, self.shape, self.strides, dtype, self._offset, self.stream)

    def reshape(self, *shape: Any) -> "DeviceArray":
        """A view with another shape (one dimension may be -1) of a C-contiguous array. Raises
        ValueError for a non-contiguous array or a size that does not match."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        dims = [operator.index(n) for n in shape]
        if dims.count(-1) > 1:
            raise ValueError("reshape: only one dimension may be -1")
        if -1 in dims:
            rest = int(np.prod([n for n in dims if n != -1], dtype=np.int64))
            dims[dims.index(-1)] = self.size // rest if rest else 0
        if int(np.prod(dims, dtype=np.int64)) != self.size or any(n < 0 for n in dims):
            raise ValueError(f"cannot reshape a device array of size {self.size} into shape {tuple(shape)}")
        if not self._contiguous:
            raise ValueError("reshape of a non-contiguous device array: copy it first (x.copy())")
        return DeviceArray(self._mem, tuple(dims), _c_strides(tuple(dims), self.itemsize), self.dtype,
                           self._offset, self.stream)

    def _span(self) -> tuple[int, int]:
        """(first, end) byte offsets, from the array's first element, of the memory it touches."""
        if self.size == 0:
            return 0, 0
        lo = sum(s * (n - 1) for n, s in zip(self.shape, self.strides) if s < 0)
        hi = sum(s * (n - 1) for n, s in zip(self.shape, self.strides) if s > 0)
        return lo, hi + self.itemsize

    # --- copies ---
    def copy_to_host(self, ary: np.ndarray | None = None, stream: Any = None) -> np.ndarray:
        """The array's values in host memory: a new C-contiguous numpy array, or ``ary`` (of the same
        shape and dtype) filled. ``stream``: the stream the copy is queued on (default: the
        array's); it is waited for before this returns."""
        s = self._stream(stream)
        if ary is not None and (ary.shape != self.shape or ary.dtype != self.dtype):
            raise ValueError(f"copy_to_host: the array given is {ary.shape} {ary.dtype}; this one is "
                             f"{self.shape} {self.dtype}")
        out = ary if ary is not None and ary.flags.c_contiguous else np.empty(self.shape, self.dtype)
        ops = _ops(self.device)
        if self.size:
            if self._contiguous:
                ops.dtoh(out.ctypes.data, self.ptr, self.nbytes, s)
            else:  # the bytes the view spans, then numpy picks the elements out
                lo, hi = self._span()
                raw = np.empty(hi - lo, np.uint8)
                ops.dtoh(raw.ctypes.data, self.ptr + lo, hi - lo, s)
                strided = np.ndarray(self.shape, self.dtype, raw, -lo, self.strides)
                out[...] = strided
        else:
            ops.sync(s)
        if ary is not None and out is not ary:
            ary[...] = out
            return ary
        return out

    def copy_from_host(self, ary: Any, stream: Any = None) -> None:
        """Copy host array ``ary`` (same shape and dtype) into this C-contiguous array, queued on
        ``stream`` (default: the array's). Raises ValueError for a mismatch or a strided array."""
        ary = np.asarray(ary, order="C")
        if ary.shape != self.shape or ary.dtype != self.dtype:
            raise ValueError(f"copy_from_host: the array given is {ary.shape} {ary.dtype}; this one is "
                             f"{self.shape} {self.dtype}")
        if not self._contiguous:
            raise ValueError("copy_from_host into a non-contiguous device array view")
        if self.size:
            _ops(self.device).htod(self.ptr, ary.ctypes.data, self.nbytes, self._stream(stream))

    def copy(self, stream: Any = None) -> "DeviceArray":
        """A C-contiguous copy on the same device (device to device when the array is contiguous,
        through the host otherwise)."""
        s = self._stream(stream)
        out = device_array(self.shape, self.dtype, device=self.device, stream=s)
        if self.size:
            if self._contiguous:
                _ops(self.device).dtod(out.ptr, self.ptr, self.nbytes, s)
            else:
                out.copy_from_host(self.copy_to_host(stream=s), stream=s)
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if copy is False:
            raise ValueError("a device array's values reach numpy only as a copy (np.asarray copies; "
                             "copy=False cannot be honoured)")
        host = self.copy_to_host()
        return host if dtype is None else host.astype(dtype, copy=False)

    def _stream(self, stream: Any) -> int:
        if stream is None:
            return self.stream
        return stream_handle(stream, "HIP" if self.device.target == "amdgcn" else "CUDA")

    # --- interchange ---
    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA array interface, version 3 (numba.readthedocs.io, "CUDA Array Interface"); only
        arrays in CUDA memory have one (AttributeError otherwise)."""
        if self.device.target != "nvptx":
            raise AttributeError(f"__cuda_array_interface__: the array is in {_device_name(self.device)} "
                                 f"memory, not CUDA's")
        return {"shape": self.shape, "typestr": _cai_typestr(self.dtype),
                "data": (self.ptr, False), "version": 3,
                "strides": None if self._contiguous else self.strides,
                "stream": self.stream or None}

    def __dlpack_device__(self) -> tuple[int, int]:
        """(DLDeviceType, device id): (1, 0) on the CPU target, (2, n) on CUDA, (10, n) on HIP."""
        t = self.device.target
        if t == "cpu":
            return dlpack.KDLCPU, 0
        return (dlpack.KDLCUDA if t == "nvptx" else dlpack.KDLROCM), int(getattr(self.device, "ordinal", 0))

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: Any = None, copy: bool | None = None) -> Any:
        """A DLPack capsule viewing this array (the Python array API's protocol). ``stream``: the
        consumer's stream (CUDA / ROCm: None or 1 the legacy default stream, 2 the per-thread one,
        -1 no synchronisation, else a handle): it is made to wait for the array's stream when they
        differ. ``max_version`` >= (1, 0) gives a versioned capsule (DLPack 1.1), else the legacy
        one. ``copy=True`` and another ``dl_device`` raise BufferError (no copies are made here)."""
        if copy:
            raise BufferError("__dlpack__(copy=True): a device array exports its memory, never a copy")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"__dlpack__: the array is on {self.__dlpack_device__()}, not {dl_device}")
        if self.device.target != "cpu" and stream != -1:
            consumer = 0 if stream in (None, 1) else stream_handle(stream)
            producer = 0 if self.stream in (0, 1) else self.stream
            if consumer != producer:
                _ops(self.device).stream_wait(consumer, producer)
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        item = self.itemsize
        if any(s % item for s in self.strides):
            raise BufferError("DLPack strides count elements: this view's strides are not multiples of "
                              "its itemsize")
        return dlpack.export(self, self.ptr, self.shape, tuple(s // item for s in self.strides),
                             self.dtype, self.__dlpack_device__(), versioned)

    # --- for the launch path (runtime/arrays.py) ---
    def host_ndarray(self) -> np.ndarray:
        """The numpy view of a CPU-target array's memory (how the CPU target launches it). Raises
        TypeError for an array in GPU memory."""
        if self.device.target != "cpu" or self._mem.host is None:
            raise TypeError(f"the array is in {_device_name(self.device)} memory, not the host's")
        base = self._mem.host
        if self.size == 0:
            return np.empty(self.shape, self.dtype)
        return np.ndarray(self.shape, self.dtype, base, self._offset, self.strides)


def _is_int(k: Any) -> bool:
    if isinstance(k, (bool, np.bool_)):
        return False
    try:
        operator.index(k)
    except TypeError:
        return False
    return True


def _device_name(device: Device) -> str:
    t = device.target
    if t == "cpu":
        return "cpu (host)"
    return f"{'cuda' if t == 'nvptx' else 'hip'}:{getattr(device, 'ordinal', 0)}"


def device_name(device: Device) -> str:
    """'cuda:0', 'hip:1' or 'cpu (host)': how messages name a device."""
    return _device_name(device)


# --- the public functions ------------------------------------------------------------------------

def device_array(shape: Any, dtype: Any = np.float32, *, device: Any = None, stream: Any = None) -> DeviceArray:
    """A new uninitialised C-contiguous array of ``shape`` (an int or a tuple) and ``dtype`` (numpy
    or ml_dtypes) in ``device``'s memory (see :func:`resolve_device`; default: the 'auto' target's
    device 0). ``stream`` becomes the array's stream. Raises LaunchError when the device cannot
    allocate it."""
    dev = resolve_device(device)
    dims, dt = _shape(shape), np.dtype(dtype)
    nbytes = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
    s = stream_handle(stream, "HIP" if dev.target == "amdgcn" else "CUDA")
    return DeviceArray(_Memory(dev, nbytes), dims, _c_strides(dims, dt.itemsize), dt, 0, s)


def to_device(ary: Any, *, device: Any = None, stream: Any = None, copy: bool = True) -> DeviceArray:
    """A device copy of host array ``ary`` (anything ``numpy.asarray`` takes; copied in C order), in
    ``device``'s memory (:func:`resolve_device`), queued on ``stream`` (which becomes the array's).
    A :class:`DeviceArray` already on that device is returned as is (``copy=False``) or copied.
    Raises LaunchError when the device cannot allocate or copy."""
    dev = resolve_device(device)
    if isinstance(ary, DeviceArray):
        if ary.device is dev:
            return ary.copy(stream) if copy else ary
        ary = ary.copy_to_host()
    host = np.asarray(ary, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
    out = device_array(host.shape, host.dtype, device=dev, stream=stream)
    out.copy_from_host(host)
    return out


def from_dlpack(obj: Any, *, stream: Any = None) -> DeviceArray:
    """A :class:`DeviceArray` viewing (no copy) the memory of ``obj``, any object with ``__dlpack__``
    and ``__dlpack_device__`` (a torch tensor, a CuPy or numpy array), or a DLPack capsule. CPU
    memory becomes a CPU-target array, CUDA memory one of that CUDA device, ROCm memory one of that
    HIP device. ``stream``: the stream the caller will use the array on (default: the legacy default
    stream), which the producer orders after its own work. The producer's memory is released when
    the last view of it is collected. Raises BufferError for memory or a dtype kcompiler cannot use."""
    if hasattr(obj, "__dlpack__"):
        dev_type, dev_id = obj.__dlpack_device__()
        kwargs: dict[str, Any] = {}
        if int(dev_type) in (dlpack.KDLCUDA, dlpack.KDLROCM):
            kwargs["stream"] = 1 if stream is None else stream_handle(stream)
        try:
            capsule = obj.__dlpack__(max_version=dlpack.VERSION, **kwargs)
        except TypeError:  # a producer older than DLPack 1.0's keyword
            capsule = obj.__dlpack__(**kwargs)
    else:
        capsule = obj
    t = dlpack.import_capsule(capsule)
    try:
        dev_type, dev_id = t.device
        if dev_type == dlpack.KDLCPU:
            device = resolve_device("cpu")
        elif dev_type == dlpack.KDLCUDA:
            device = resolve_device(f"cuda:{dev_id}")
        elif dev_type == dlpack.KDLROCM:
            device = resolve_device(f"hip:{dev_id}")
        else:
            raise BufferError(f"DLPack device type {dev_type}: kcompiler takes CPU (1), CUDA (2) and ROCm "
                              f"(10) memory")
        probe = DeviceArray.__new__(DeviceArray)
        probe.shape, probe.strides, probe.dtype = t.shape, t.strides, t.dtype
        lo, hi = DeviceArray._span(probe)
        host = None
        if device.target == "cpu" and hi > lo:
            host = np.ctypeslib.as_array((ctypes.c_uint8 * (hi - lo)).from_address(t.data + lo))
        mem = _Memory.imported(device, t.data + lo if hi > lo else t.data, hi - lo, host, t.release)
    except BaseException:
        t.release()
        raise
    return DeviceArray(mem, t.shape, t.strides, t.dtype, -lo, 0 if stream is None else stream_handle(stream))


def sync_cuda_stream(handle: int) -> None:
    """``cuStreamSynchronize(handle)`` in the current context (the CUDA array interface's consumer
    synchronisation: runtime/arrays.py calls it for a ``stream`` another library exports)."""
    from . import cuda

    if cuda._drv is not None:
        cuda._check(cuda._drv.cuStreamSynchronize(cuda._drv.CUstream(handle)), "cuStreamSynchronize")


__all__ = ["DeviceArray", "device_array", "to_device", "from_dlpack", "resolve_device", "device_name",
           "sync_cuda_stream", "HOST_ALIGN"]
