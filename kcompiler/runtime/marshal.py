"""What the GPU devices (CUDA in cuda.py, HIP in hip.py) share when they turn user arguments into
launch arguments.

- :func:`marshal_args`: checked user arguments → launch values (ints for pointers, Python numbers
  for scalars, bf16 as its 16 bits) and the copy-backs to run after the launch.
- :func:`device_pointer`: the rules for an array argument: a numpy array (or a host torch tensor) is
  copied to the device through a :class:`HostCopy` and back after the launch; a device array (torch
  GPU tensor, ``__cuda_array_interface__`` object) is passed as its pointer, with no copy.
- :func:`stream_handle`: a stream handle from the objects users pass as ``stream=``.
- :data:`STRUCT_CODES` and :func:`bf16_bits`: how scalars are packed into a parameter buffer.

Each device supplies the memory operations of its API (a :class:`HostCopy` subclass).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..ir.types import PointerType, TensorMapType
from . import arrays
from .device import Artifact

#: ``struct`` codes of the scalar types a kernel parameter may have (little-endian packing); bf16 is
#: packed from its 16 bits (:func:`bf16_bits`).
STRUCT_CODES = {"bool": "?", "i8": "b", "u8": "B", "i16": "h", "u16": "H", "i32": "i", "u32": "I",
                "i64": "q", "u64": "Q", "f16": "e", "bf16": "H", "f32": "f", "f64": "d"}


def bf16_bits(x: float) -> int:
    """The bits of ``x`` rounded to bfloat16 (round to nearest even, through ml_dtypes)."""
    import ml_dtypes

    return int(np.array(x, dtype=ml_dtypes.bfloat16).view(np.uint16))


def stream_handle(stream: Any, api: str = "CUDA") -> int:
    """A stream handle (``CUstream`` / ``hipStream_t`` as an int) from None (the default stream), an
    int, an object with ``__cuda_stream__`` (the CUDA stream protocol), a torch stream
    (``cuda_stream``, also on ROCm), a CuPy stream (``ptr``), a cuda-python / hip-python stream
    (``int()``). Raises TypeError otherwise; ``api`` names the API in the message."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        return int(proto()[1])
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    try:
        return int(stream)
    except (TypeError, ValueError):
        raise TypeError(f"stream must be an int handle or a {api} stream object (torch, CuPy, "
                        f"{api.lower()}-python), got {type(stream).__name__}") from None


class HostCopy:
    """A device copy of a host array, made when a numpy array is passed to a GPU kernel. Calling it
    (after the launch) waits for the device, copies the array back when ``writeback`` and frees the
    copy; :meth:`discard` frees it without copying (after a failed launch).

    Subclasses give the API's operations: ``_alloc(nbytes) -> address``, ``_to_device(dst, src,
    nbytes)``, ``_to_host(dst, src, nbytes)``, ``_free(address)`` and ``_sync()`` (wait for all work
    on the device); each raises LaunchError on failure."""

    __slots__ = ("ptr", "host", "nbytes", "writeback")

    def __init__(self, host: np.ndarray, writeback: bool):
        self.host, self.nbytes, self.writeback = host, host.nbytes, writeback
        self.ptr = 0
        if self.nbytes:
            self.ptr = self._alloc(self.nbytes)
            try:
                self._to_device(self.ptr, host.ctypes.data, self.nbytes)
            except BaseException:
                self.discard()
                raise

    def __call__(self) -> None:
        try:
            if self.nbytes and self.writeback:
                self._sync()  # the launch may be on any stream
                self._to_host(self.host.ctypes.data, self.ptr, self.nbytes)
        finally:
            self.discard()

    def discard(self) -> None:
        """Free the device copy without copying it back (after a failed launch); a second call does nothing."""
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            self._free(ptr)

    # the API's operations
    def _alloc(self, nbytes: int) -> int:
        raise NotImplementedError

    def _to_device(self, dst: int, src: int, nbytes: int) -> None:
        raise NotImplementedError

    def _to_host(self, dst: int, src: int, nbytes: int) -> None:
        raise NotImplementedError

    def _free(self, ptr: int) -> None:
        raise NotImplementedError

    def _sync(self) -> None:
        raise NotImplementedError


def device_pointer(kernel: str, param: str, x: Any, copybacks: list, copy: type[HostCopy],
                   ordinal: int, api: str = "CUDA") -> int:
    """The device address to pass for array argument ``x`` (already checked) of ``param``.

    numpy arrays and CPU torch tensors are copied in with ``copy(host, writeback)``, which is added
    to ``copybacks``; torch GPU tensors (``is_cuda``, also on ROCm) must be on device ``ordinal``;
    ``__cuda_array_interface__`` objects pass their pointer. Raises TypeError for a tensor on
    another device."""
    if arrays.is_kc_array(x):  # kc.to_device: already in device memory
        return arrays.kc_array_pointer(kernel, param, x, "amdgcn" if api == "HIP" else "nvptx", ordinal)
    if isinstance(x, np.ndarray):
        buf = copy(x, x.flags.writeable)
        copybacks.append(buf)
        return buf.ptr
    if arrays.is_torch_tensor(x) and not x.is_cuda:
        if x.device.type != "cpu":
            raise TypeError(f"{kernel}: parameter '{param}': a tensor on {x.device} cannot be "
                            f"passed to a {api} kernel")
        host = x.detach().view(-1).view(__import__("torch").uint8).numpy()
        buf = copy(host, True)
        copybacks.append(buf)
        return buf.ptr
    if arrays.is_torch_tensor(x) and x.device.index not in (None, ordinal):
        raise TypeError(f"{kernel}: parameter '{param}': the tensor is on {x.device}, the kernel "
                        f"runs on cuda:{ordinal}; move it there (tensor.to('cuda:{ordinal}'))")
    return arrays.device_pointer(x)


def marshal_args(artifact: Artifact, args: Sequence[Any],
                 pointer: Callable[[str, str, Any, list], int]) -> tuple[list[Any], list[Any]]:
    """Launch values for checked user ``args`` (``arrays.check_args``) and the copy-backs to run
    after the launch. ``pointer(kernel, param, x, copybacks)`` gives an array argument's address.
    On failure every copy made so far is discarded before the exception propagates."""
    kernel = artifact.meta.get("kernel", artifact.symbol)
    out: list[Any] = []
    copybacks: list[Any] = []
    try:
        for p, x in zip(artifact.params, args):
            if isinstance(p.type, PointerType):
                out.append(pointer(kernel, p.name, x, copybacks))
            elif isinstance(p.type, TensorMapType):
                if getattr(x, "kind", "cuda") != "cuda":
                    raise TypeError(f"{kernel}: parameter '{p.name}': a GPU kernel reads tensor maps of GPU "
                                    f"arrays, got {x!r}")
                out.append(x.raw)  # 128 bytes, passed by value
            elif p.type.name == "bf16":
                out.append(bf16_bits(arrays.check_scalar(kernel, p.name, p.type, x)))
            else:
                out.append(arrays.check_scalar(kernel, p.name, p.type, x))
    except BaseException:
        for cb in copybacks:
            cb.discard()
        raise
    return out, copybacks


__all__ = ["STRUCT_CODES", "bf16_bits", "stream_handle", "HostCopy", "device_pointer", "marshal_args"]
