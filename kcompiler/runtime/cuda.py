"""NVIDIA GPUs through the CUDA driver API (cuda-python's ``cuda.bindings.driver``, or the legacy
``cuda.cuda`` module of cuda-python < 12.6).

A :class:`CudaDevice` uses the device's primary context (the one PyTorch, CuPy and Numba use, so their
pointers work here), loads cubin or PTX images with ``cuModuleLoadData`` (the driver assembles PTX
itself), and launches with ``cuLaunchKernel``.

The launch path has two speeds:

- the fast path (:meth:`CudaDevice.make_launcher`): for a kernel specialisation and the Python types
  of the arguments first seen with it (torch / CuPy CUDA arrays, other ``__cuda_array_interface__``
  objects, Python ints, floats and bools), a small Python function is generated that checks each
  argument's type, dtype, device and contiguity with ``is`` tests and one call each, packs the values
  into a preallocated parameter buffer with one ``struct.pack_into`` and calls ``cuLaunchKernelEx``
  of ``libcuda`` through a prepared zero-argument ctypes call (runtime/launchcall.py). Anything
  unexpected raises :class:`ArgMismatch` before the launch, and the caller falls back to
- the general path (:meth:`marshal` + :meth:`launch`): numpy arrays are copied to the device before the
  launch and back after it (the launch is then synchronous), numpy scalars are converted, and the
  launch goes through cuda-python.

Errors come back as :class:`~kcompiler.runtime.device.LaunchError` naming the CUDA error
(``cuGetErrorName``), its description and the kernel.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import os
import struct
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from . import cuda_driver
from ..backends.nvptx.archs import arch_of_cc as arch_of  # the arch names are the backend's data
from ..ir.types import PointerType, ScalarType, StructType, TensorMapType
from . import arrays
from .arrays import ArgMismatch
from .device import Artifact, Device, DeviceAssertionError, LaunchConfigError, LaunchError
from .stdio import flush_c_stdio
from .marshal import STRUCT_CODES as _STRUCT, HostCopy, bf16_bits as _bf16_bits, device_pointer, \
    marshal_args, stream_handle
from .printf_buffer import PrintfBuffer, buffer_bytes_from_env, read_format_table
from .hostcall import HostcallBuffer, HostcallListener, packets_for
from .launchcall import bound_call

try:  # cuda-python >= 12.6 (and 13)
    from cuda.bindings import driver as _drv
except ImportError:  # pragma: no cover - older cuda-python
    try:
        from cuda import cuda as _drv  # type: ignore[no-redef]
    except ImportError:
        _drv = None  # type: ignore[assignment]

#: Bytes of dynamic shared memory a kernel may use without opting in (CUDA C Programming Guide,
#: "Shared Memory": above 48 KB a kernel needs CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
DEFAULT_SHARED_LIMIT = 48 * 1024


def _err_name(err: Any) -> str:
    try:
        e, name = _drv.cuGetErrorName(err)
        e2, desc = _drv.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        desc = desc.decode() if isinstance(desc, bytes) else str(desc)
        return f"{name} ({desc})"
    except Exception:  # noqa: BLE001 - naming an error must not raise another
        return f"CUDA error {int(err)}"


#: CUDA_ERROR_ASSERT (a device assert: CUDA's __assertfail) and CUDA_ERROR_ILLEGAL_INSTRUCTION (PTX
#: ``trap``, which a failed kcompiler assert executes after printing its line).
_ASSERT_ERRORS = (710, 715)


def _failure(err: Any, what: str) -> LaunchError:
    """The exception for CUDA error ``err`` in ``what``: DeviceAssertionError for a failed device
    assert or trap (the context is unusable afterwards, as after a failed CUDA assert), else
    LaunchError."""
    if int(err) in _ASSERT_ERRORS:
        return DeviceAssertionError(
            f"{what}: {_err_name(err)}: device assertion failed (or the kernel trapped); see the printed "
            f"message for the kernel, file:line:col, block and thread. The CUDA context cannot be used "
            f"any more: every later CUDA call of this process fails (start a new process)")
    return LaunchError(f"{what}: {_err_name(err)}")


def _check(result: Any, what: str) -> Any:
    """Unpack a cuda-python result tuple, raising LaunchError(what + the error's name), or
    DeviceAssertionError (:func:`_failure`)."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise _failure(err, what)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


# --- device discovery ---------------------------------------------------------------------------

_discovery_lock = threading.Lock()
_device_count: int | None = None


def device_count() -> int:
    """Number of CUDA devices the driver sees; 0 without a driver, a GPU or cuda-python."""
    global _device_count
    with _discovery_lock:
        if _device_count is None:
            n = 0
            if _drv is not None:
                try:
                    if int(_drv.cuInit(0)[0]) == 0:
                        err, n = _drv.cuDeviceGetCount()
                        n = int(n) if int(err) == 0 else 0
                except Exception:  # noqa: BLE001 - no driver library: no device
                    n = 0
            _device_count = n
        return _device_count


def is_available() -> bool:
    """Whether CUDA finds at least one GPU here (False without cuda-python or a driver)."""
    return device_count() > 0


def detected_arch(ordinal: int = 0) -> str | None:
    """The arch of CUDA device ``ordinal``, or None when there is none."""
    if ordinal >= device_count():
        return None
    return CudaDevice.get(ordinal).arch


def _stream_handle(stream: Any) -> int:
    """A CUstream handle from the objects ``stream=`` accepts (see marshal.stream_handle); None is
    the thread's current launch stream (:data:`CURRENT`)."""
    if stream is None:
        return CURRENT.stream
    return stream_handle(stream, "CUDA")


class _CurrentStream(threading.local):
    """The stream a launch with ``stream=None`` goes to, per thread: 0 (the legacy default stream),
    or the capturing stream inside ``kc.graph()`` (runtime/graph.py)."""

    stream = 0


#: This thread's launch stream for ``stream=None`` (read by every launch; set by graph capture).
CURRENT = _CurrentStream()
#: How many captures (begin_capture without end_capture yet) the process has: while 0, the fast
#: launchers skip the thread-local read of CURRENT for stream=None.
_CAPTURES = [0]
_CAPTURES_LOCK = threading.Lock()

#: CUresult values of stream capture (cuda.h: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED ...
#: CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD), for which a failed launch's message says what to do.
_CAPTURE_ERRORS = frozenset(range(900, 909))


# --- the device ---------------------------------------------------------------------------------

@dataclass
class CudaKernelHandle:
    """A loaded kernel: its CUmodule, CUfunction (and the function's address for ctypes), and the
    dynamic shared memory it is allowed so far."""

    module: Any
    function: Any
    address: int
    name: str
    static_shared: int
    dynamic_limit: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: printf="buffered": the kernel writes printf records to the device's printf buffer, printed
    #: when a launch of it is synchronised (each such launch is).
    printf_buffered: bool = False
    #: The kernel calls grid_dependency_wait: it launches with programmatic stream serialisation
    #: (cuda_driver.launch_attributes), so it may start before the launch ahead of it ends.
    pdl: bool = False


class _DeviceBuffer(HostCopy):
    """A device copy of a host array (see marshal.HostCopy), through the driver API; the primary
    context must be current."""

    __slots__ = ()

    def _alloc(self, nbytes: int) -> int:
        return int(_check(_drv.cuMemAlloc(nbytes), "cuMemAlloc"))

    def _to_device(self, dst: int, src: int, nbytes: int) -> None:
        _check(_drv.cuMemcpyHtoD(dst, src, nbytes), "cuMemcpyHtoD")

    def _to_host(self, dst: int, src: int, nbytes: int) -> None:
        _check(_drv.cuMemcpyDtoH(dst, src, nbytes), "cuMemcpyDtoH")

    def _free(self, ptr: int) -> None:
        _drv.cuMemFree(ptr)

    def _sync(self) -> None:
        _check(_drv.cuCtxSynchronize(), "cuCtxSynchronize")
        flush_c_stdio()  # what vprintf printed before this copy-back's synchronisation


class CudaDevice(Device):
    """CUDA device ``ordinal`` (use :meth:`get`; one object per device per process).

    Raises LaunchError when cuda-python, the driver or the device is missing."""

    target = "nvptx"

    @classmethod
    def count(cls) -> int:
        """CUDA devices the driver sees (:func:`device_count`)."""
        return device_count()

    def __init__(self, ordinal: int = 0):
        if _drv is None:
            raise LaunchError("cuda-python is not installed (pip install cuda-python)")
        n = device_count()
        if ordinal >= n:
            raise LaunchError(f"no CUDA device {ordinal}: the driver sees {n} device{'s' * (n != 1)}")
        self.ordinal = ordinal
        self._hostcall_lock = threading.Lock()
        self._hostcall: Any = None  # (HostcallBuffer, HostcallListener) once a kernel prints by hostcall
        self._printf_lock = threading.Lock()
        self._printf: Any = None  # the PrintfBuffer once a printf="buffered" kernel is loaded
        self._printf_formats: dict[int, bytes] = {}
        self.device = _check(_drv.cuDeviceGet(ordinal), "cuDeviceGet")
        A = _drv.CUdevice_attribute
        major = _check(_drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                                 self.device), "cuDeviceGetAttribute")
        minor = _check(_drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                                 self.device), "cuDeviceGetAttribute")
        self.compute_capability = (int(major), int(minor))
        self.arch = arch_of(self.compute_capability)
        self.max_shared_optin = int(_check(_drv.cuDeviceGetAttribute(
            A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, self.device),
            "cuDeviceGetAttribute"))
        name = _check(_drv.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        self.name = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)
        self.context = _check(_drv.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        self.make_current()

    def __repr__(self) -> str:
        return f"CudaDevice({self.ordinal}: {self.name}, {self.arch})"

    def make_current(self) -> None:
        """Make this device's primary context current on the calling thread."""
        _check(_drv.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    # --- loading ---
    def load(self, artifact: Artifact) -> CudaKernelHandle:
        """Load a cubin or PTX image and find the kernel. Raises LaunchError (e.g. PTX the driver's
        JIT rejects, or a cubin for another chip)."""
        if artifact.binary_kind not in ("cubin", "ptx"):
            raise LaunchError(f"CUDA cannot load a {artifact.binary_kind!r} binary "
                              f"(compiled for target {artifact.target})")
        self.make_current()
        image = bytes(artifact.binary)
        if artifact.binary_kind == "ptx" and not image.endswith(b"\0"):
            image += b"\0"
        what = f"loading kernel '{artifact.symbol}' ({artifact.binary_kind} for {artifact.arch}) on " \
               f"{self.name} ({self.arch})"
        module = _check(_drv.cuModuleLoadData(image), what)
        fn = _check(_drv.cuModuleGetFunction(module, artifact.symbol.encode()), what)
        static = _check(_drv.cuFuncGetAttribute(
            _drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn), what)
        err, slot, _ = _drv.cuModuleGetGlobal(module, b"kc_hostcall_buffer")
        if err == _drv.CUresult.CUDA_SUCCESS:  # printf="hostcall": point the module at the buffer
            address = self.hostcall_buffer().device_address
            _check(_drv.cuMemcpyHtoD(slot, address.to_bytes(8, "little"), 8), what)
        err, slot, _ = _drv.cuModuleGetGlobal(module, b"kc_printf_buffer")
        buffered = err == _drv.CUresult.CUDA_SUCCESS
        if buffered:  # printf="buffered": point the module at the printf buffer, learn its formats
            address = self.printf_buffer().device_address
            _check(_drv.cuMemcpyHtoD(slot, address.to_bytes(8, "little"), 8), what)
            err, table, _ = _drv.cuModuleGetGlobal(module, b"kc_printf_formats")
            if err == _drv.CUresult.CUDA_SUCCESS:
                formats = read_format_table(lambda off, n: self._read_device(int(table) + off, n))
                with self._printf_lock:
                    self._printf_formats.update(formats)
        return CudaKernelHandle(module, fn, int(fn), artifact.meta.get("kernel", artifact.symbol),
                                int(static), max(DEFAULT_SHARED_LIMIT - int(static), 0),
                                printf_buffered=buffered, pdl=bool(artifact.meta.get("pdl", False)))

    def _read_device(self, address: int, n: int) -> bytes:
        out = ctypes.create_string_buffer(max(n, 1))
        if n:
            _check(_drv.cuMemcpyDtoH(ctypes.addressof(out), address, n), "cuMemcpyDtoH (printf buffer)")
        return out.raw[:n]

    def _write_device(self, address: int, data: bytes) -> None:
        _check(_drv.cuMemcpyHtoD(address, data, len(data)), "cuMemcpyHtoD (printf buffer)")

    def printf_buffer(self) -> Any:
        """This device's printf buffer for kernels compiled with ``printf="buffered"``
        (runtime/printf_buffer.py), ``KC_PRINTF_BUFFER`` bytes of device memory (default 4 MiB, the
        HIP runtime's size); created on first use. Its records are printed by :meth:`synchronize`."""
        with self._printf_lock:
            if self._printf is None:
                size = buffer_bytes_from_env()
                self.make_current()
                ptr = int(_check(_drv.cuMemAlloc(size), "cuMemAlloc (printf buffer)"))
                self._printf = PrintfBuffer(ptr, size, lambda off, n: self._read_device(ptr + off, n),
                                            lambda off, data: self._write_device(ptr + off, data))
            return self._printf

    def _drain_printf(self) -> None:
        """Print the printf buffer's records (the device must be idle: after cuCtxSynchronize)."""
        with self._printf_lock:
            pb, formats = self._printf, dict(self._printf_formats)
        if pb is not None:
            pb.drain(formats)

    def hostcall_buffer(self) -> Any:
        """This device's hostcall buffer for kernels compiled with ``printf="hostcall"`` (the device
        code AMD kernels use, std.hostcall), served by a listener thread; created on first use.

        Memory: ``KC_HOSTCALL_MEMORY=managed`` (default: cuMemAllocManaged; the host's atomic exchange
        on the ready stack and the GPU's compare-and-swap stay atomic with respect to each other on
        any platform, pages migrating on access) or ``pinned`` (cuMemHostAlloc mapped into the
        device: atomic between GPU and CPU only where the platform has native host atomics; on the
        H100 host here it corrupts packets). Packets: one per warp the device can hold
        (:meth:`resident_warps`), as the HIP runtime gives one per wavefront; ``KC_HOSTCALL_PACKETS``
        overrides the count."""
        with self._hostcall_lock:
            if self._hostcall is None:
                kind = os.environ.get("KC_HOSTCALL_MEMORY", "managed")
                self.make_current()
                buf = HostcallBuffer.allocate(lambda size, align: self._hostcall_memory(kind, size),
                                              packets_for(self.resident_warps()))
                self._hostcall = (buf, HostcallListener([buf]).start())
                # Kernels may still be printing when Python exits: wait for them, serve the rest.
                atexit.register(self._finish_hostcall)
            return self._hostcall[0]

    def _attribute(self, name: str) -> int:
        """The driver's ``CU_DEVICE_ATTRIBUTE_<name>`` of this device."""
        return int(_check(_drv.cuDeviceGetAttribute(getattr(_drv.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"),
                                                    self.device), "cuDeviceGetAttribute"))

    @functools.cached_property
    def multiprocessor_count(self) -> int:  # type: ignore[override]
        """Streaming multiprocessors (the driver's MULTIPROCESSOR_COUNT; 132 on an H100 SXM)."""
        return self._attribute("MULTIPROCESSOR_COUNT")

    @functools.cached_property
    def shared_memory_per_multiprocessor(self) -> int:  # type: ignore[override]
        """Bytes of shared memory a multiprocessor has (MAX_SHARED_MEMORY_PER_MULTIPROCESSOR; 233,472
        on sm_90)."""
        return self._attribute("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR")

    @functools.cached_property
    def threads_per_multiprocessor(self) -> int:  # type: ignore[override]
        """Threads a multiprocessor holds (MAX_THREADS_PER_MULTIPROCESSOR; 2048 on sm_90)."""
        return self._attribute("MAX_THREADS_PER_MULTIPROCESSOR")

    @property
    def shared_memory_per_block(self) -> int:  # type: ignore[override]
        """The most shared memory a block may opt in to (MAX_SHARED_MEMORY_PER_BLOCK_OPTIN; 232,448 on
        sm_90)."""
        return self.max_shared_optin

    def resident_warps(self) -> int:
        """How many warps the device can hold at once (SMs x threads per SM / 32; 8448 on an H100
        SXM): a hostcall buffer needs one packet per warp that may call, as the HIP runtime gives
        one per wavefront the GPU can hold."""
        return self.multiprocessor_count * self.threads_per_multiprocessor // 32

    def _finish_hostcall(self) -> None:
        try:
            self.synchronize()
        finally:
            self._hostcall[1].stop()

    def _hostcall_memory(self, kind: str, size: int) -> tuple[int, int, Any]:
        if kind == "pinned":
            flags = _drv.CU_MEMHOSTALLOC_DEVICEMAP | _drv.CU_MEMHOSTALLOC_PORTABLE
            host = _check(_drv.cuMemHostAlloc(size, flags), "cuMemHostAlloc (hostcall buffer)")
            dev = _check(_drv.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer")
            return int(host), int(dev), lambda: _drv.cuMemFreeHost(host)
        if kind != "managed":
            raise LaunchError(f"KC_HOSTCALL_MEMORY={kind!r}: expected 'managed' or 'pinned'")
        ptr = _check(_drv.cuMemAllocManaged(size, _drv.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL.value),
                     "cuMemAllocManaged (hostcall buffer)")
        return int(ptr), int(ptr), lambda: _drv.cuMemFree(ptr)

    def allow_dynamic_shared(self, h: CudaKernelHandle, nbytes: int) -> None:
        """Opt the kernel in to ``nbytes`` of dynamic shared memory (needed above 48 KB)."""
        with h.lock:
            if nbytes <= h.dynamic_limit:
                return
            if nbytes + h.static_shared > self.max_shared_optin:
                raise LaunchConfigError(f"kernel '{h.name}': {nbytes} bytes of dynamic shared memory (plus "
                                        f"{h.static_shared} static) exceed the {self.max_shared_optin} bytes "
                                        f"a block may use on {self.name}")
            _check(_drv.cuFuncSetAttribute(
                h.function, _drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                nbytes), f"kernel '{h.name}': setting its dynamic shared memory to {nbytes} bytes")
            h.dynamic_limit = nbytes

    # --- the general path ---
    def marshal(self, artifact: Artifact, args: Sequence[Any],
                stream: Any = None) -> tuple[list[Any], list[Any]]:
        """Launch arguments (ints for pointers, Python scalars) and copy-backs (callables to run
        after the launch; each also has ``discard()`` to free without copying, after a failure).
        Arguments must already be checked (``arrays.check_args``). A host array (numpy, CPU torch
        tensor), which is copied in and back with a wait, raises LaunchError while a CUDA graph is
        being captured (on ``stream``, or in the thread's global capture)."""
        self.make_current()
        host = [p.name for p, x in zip(artifact.params, args)
                if isinstance(p.type, PointerType) and not arrays.is_device_array(x)]
        if host and self.capturing(_stream_handle(stream)):
            kernel = artifact.meta.get("kernel", artifact.symbol)
            raise LaunchError(f"{kernel}: parameter '{host[0]}' is a host array, which is copied to the "
                              f"GPU and back around the launch (allocation, copies, a wait): not "
                              f"possible while a CUDA graph is being captured; pass a device array "
                              f"(torch CUDA tensor, CuPy array) that stays alive while the graph is used")
        return marshal_args(artifact, args, self._pointer)

    def capturing(self, stream: int) -> bool:
        """Whether stream handle ``stream`` is capturing a CUDA graph, or a capture elsewhere in
        global or thread-local mode forbids this thread's unsafe calls (the driver answers
        CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream then)."""
        err, status = _drv.cuStreamIsCapturing(_drv.CUstream(stream))
        if int(err) == 906:  # CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
            return True
        _check((err,), "cuStreamIsCapturing")
        return int(status) != int(_drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)

    # --- CUDA graphs (runtime/graph.py) ---
    def begin_capture(self, stream: Any = None) -> Any:
        """Start capturing launches of this thread into a CUDA graph: on ``stream`` (any object
        ``stream=`` takes), or on a new non-blocking stream when None; launches with ``stream=None``
        go to it until :meth:`end_capture`. Thread-local capture mode: this thread's calls that
        would break the capture (host copies, waits) are refused. Returns a token for end_capture."""
        self.make_current()
        owned = stream is None
        if owned:
            s = int(_check(_drv.cuStreamCreate(_drv.CUstream_flags.CU_STREAM_NON_BLOCKING.value),
                           "cuStreamCreate"))
        else:
            s = stream_handle(stream, "CUDA")
        try:
            _check(_drv.cuStreamBeginCapture(
                _drv.CUstream(s), _drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                "cuStreamBeginCapture")
        except BaseException:
            if owned:
                _drv.cuStreamDestroy(_drv.CUstream(s))
            raise
        token = (CURRENT.stream, s, owned)
        CURRENT.stream = s
        with _CAPTURES_LOCK:
            _CAPTURES[0] += 1
        return token

    def end_capture(self, token: Any, keep: bool = True) -> Any:
        """End the capture :meth:`begin_capture` started; returns the instantiated graph (a
        :class:`CudaGraphExec`), or None when ``keep`` is False (the capture is dropped, e.g. after
        an exception). Raises LaunchError when the driver reports the capture invalid."""
        prev, s, owned = token
        CURRENT.stream = prev
        with _CAPTURES_LOCK:
            _CAPTURES[0] -= 1
        try:
            err, graph = _drv.cuStreamEndCapture(_drv.CUstream(s))
            if not keep:
                if int(err) == 0 and graph is not None:
                    _drv.cuGraphDestroy(graph)
                return None
            _check((err,), "ending the CUDA graph capture (a call during it broke the capture)")
            try:
                exe = _check(_drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
            except BaseException:
                _drv.cuGraphDestroy(graph)
                raise
            return CudaGraphExec(self, graph, exe)
        finally:
            if owned:
                _drv.cuStreamDestroy(_drv.CUstream(s))

    def _pointer(self, kernel: str, param: str, x: Any, copybacks: list) -> int:
        return device_pointer(kernel, param, x, copybacks, _DeviceBuffer, self.ordinal, "CUDA")

    def launch(self, handle: CudaKernelHandle, artifact: Artifact, grid: tuple[int, int, int],
               block: tuple[int, int, int], args: Sequence[Any], shared: int = 0,
               stream: Any = None) -> None:
        """Launch with marshalled ``args`` (from :meth:`marshal`). Raises LaunchError naming the
        CUDA error and the kernel."""
        if shared > handle.dynamic_limit:
            self.allow_dynamic_shared(handle, shared)
        st = _param_struct(artifact)
        buf = ctypes.create_string_buffer(max(st.size, 8) + 64)
        base = ctypes.addressof(buf)
        pad = -base % 64  # a tensor map's bytes 64-aligned in host memory as in the layout
        try:
            st.pack_into(buf, pad, *args)
        except struct.error as e:  # marshal checked the values: this is a kcompiler bug
            raise LaunchError(f"kernel '{handle.name}': cannot pack its arguments: {e}") from None
        n = len(artifact.params)
        ptrs = (ctypes.c_void_p * max(n, 1))(*[base + pad + off for off in _param_offsets(artifact)])
        s = _stream_handle(stream)
        if handle.printf_buffered and self.capturing(s):
            raise LaunchError(f"kernel '{handle.name}' prints with printf=\"buffered\", which waits for "
                              f"the launch: it cannot be captured in a CUDA graph")
        pp = ctypes.addressof(ptrs)
        if handle.pdl:  # cuLaunchKernelEx with the programmatic-serialisation attribute
            cfg = cuda_driver.launch_config(grid, block, shared, s, True)
            args_ex = (cfg, ctypes.c_void_p(handle.address), ctypes.c_void_p(pp), None)
            call = lambda: cuda_driver.launch_ex_fn()(*args_ex)  # noqa: E731
        else:
            call = lambda: cuda_driver.launch_fn()(handle.address, *grid, *block, shared, s, pp, None)  # noqa: E731
        rc = call()
        if rc:
            _launch_failed(rc, self, handle, grid, block, shared, call)
        if handle.printf_buffered:  # its lines now, as the HIP runtime prints after the kernel
            self.synchronize()

    def synchronize(self) -> None:
        """Wait for the device; then print the printf buffer's records (printf="buffered") and
        flush C stdio, where CUDA's vprintf has written its lines (runtime/stdio.py)."""
        self.make_current()
        try:
            _check(_drv.cuCtxSynchronize(), f"synchronising {self.name}")
            if self._printf is not None:
                flush_c_stdio()  # vprintf's lines of earlier kernels first
                self._drain_printf()
        finally:
            flush_c_stdio()

    # --- the fast path ---
    def make_launcher(self, handle: CudaKernelHandle, artifact: Artifact,
                      args: Sequence[Any]) -> Callable[..., None] | None:
        """A launcher specialised to the Python types of ``args`` (already checked), or None when
        an argument needs the general path (numpy arrays, numpy scalars...). The launcher is called
        as ``f(grid3, block3, args, shared, stream)`` and raises ArgMismatch before launching when
        its arguments are not of those types. A printf="buffered" kernel has none (its launches
        synchronise and print)."""
        if handle.printf_buffered:
            return None
        return _generate_launcher(self, handle, artifact, args)


def _param_struct(artifact: Artifact, base: int = 0) -> struct.Struct:
    """The layout of a kernel's parameter buffer: each scalar or pointer in its own 8-byte slot,
    packed by struct (bf16 from its bits), a tensor map's 128 bytes at a multiple of 64 from the
    buffer's start (``base`` bytes precede the parameters in it)."""
    return struct.Struct("=" + "".join(f for f, _ in _param_layout(artifact, base)))


def _param_offsets(artifact: Artifact, base: int = 0) -> list[int]:
    """The byte offset of each parameter in :func:`_param_struct`'s buffer (``base`` included)."""
    return [off for _, off in _param_layout(artifact, base) if off is not None]


def _param_layout(artifact: Artifact, base: int) -> list[tuple[str, int | None]]:
    # (struct code, offset of the parameter or None for padding)
    out: list[tuple[str, int | None]] = []
    at = base
    for p in artifact.params:
        t = p.type
        if isinstance(t, TensorMapType):
            if at % 64:
                out.append((f"{64 - at % 64}x", None))
                at += 64 - at % 64
            out.append(("128s", at))
            at += 128
            continue
        if isinstance(t, StructType):  # its bytes (marshal's pack_struct), at its alignment
            if at % t.align:
                out.append((f"{t.align - at % t.align}x", None))
                at += t.align - at % t.align
            out.append((f"{t.size}s", at))
            at += t.size
            if at % 8:
                out.append((f"{8 - at % 8}x", None))
                at += 8 - at % 8
            continue
        if isinstance(t, PointerType):
            code = "Q"
        elif isinstance(t, ScalarType) and t.name in _STRUCT:
            code = _STRUCT[t.name]
        else:
            raise LaunchError(f"kernel '{artifact.symbol}': parameter '{p.name}' of type {t} cannot be "
                              f"passed from the host")
        size = struct.calcsize("=" + code)
        out.append((code + (f"{8 - size}x" if size < 8 else ""), at))
        at += 8
    return out


def _generate_launcher(dev: CudaDevice, h: CudaKernelHandle, artifact: Artifact,
                       args: Sequence[Any]) -> Callable[..., None] | None:
    params = artifact.params
    n = len(params)
    env: dict[str, Any] = {"ArgMismatch": ArgMismatch, "H": h, "dev": dev,
                           "_stream_handle": _stream_handle, "_bf16_bits": _bf16_bits,
                           "_fail": _launch_failed, "_cai_ptr": _cai_pointer}
    lines = ["def launch(grid, block, args, shared, stream):",
             f"    if len(args) != {n}: raise ArgMismatch"]
    if n:
        lines.append(f"    {''.join(f'a{i}, ' for i in range(n))}= args")
    values = []
    for i, (p, x) in enumerate(zip(params, args)):
        got = _launcher_arg(dev, i, p.type, x, env)
        if got is None:
            return None  # the general path
        lines.append(got[0])
        values.append(got[1])
    # One buffer: the launch configuration, then the parameter slots (8 bytes each). The
    # configuration is packed again only when it differs from the last launch's.
    cfg = struct.Struct("=" + cuda_driver.LAUNCH_CONFIG)
    st = _param_struct(artifact, cuda_driver.LAUNCH_CONFIG_SIZE)
    buf = ctypes.create_string_buffer(cfg.size + st.size + 64)
    pad = -ctypes.addressof(buf) % 64  # tensor maps 64-aligned in host memory, as in the layout
    base = ctypes.addressof(buf) + pad
    ptrs = (ctypes.c_void_p * max(n, 1))(*[base + off for off in _param_offsets(artifact, cuda_driver.LAUNCH_CONFIG_SIZE)])
    # cuLaunchKernelEx(&config, function, params, NULL) as one prepared call of no arguments
    call = bound_call(cuda_driver.launch_ex_fn(), base, h.address, ctypes.addressof(ptrs), 0)
    attrs, nattrs = cuda_driver.launch_attributes(h.pdl)
    env.update(pack=st.pack_into, packcfg=cfg.pack_into, PAD=pad, buf=buf, ptrs=ptrs, CALL=call, ATTRS=attrs,
               NATTRS=nattrs,
               CUR=CURRENT, CAPTURES=_CAPTURES, LAST=[None, None, None, None],
               OWNER=threading.get_ident(), get_ident=threading.get_ident)
    # The buffer belongs to the thread that made the launcher; other threads take the general path,
    # so two threads never fill it at once.
    lines += [
        "    if shared and (shared < 0 or shared > H.dynamic_limit): raise ArgMismatch",
        "    if get_ident() != OWNER: raise ArgMismatch",
        "    if stream is None: s = CUR.stream if CAPTURES[0] else 0",
        "    elif type(stream) is int: s = stream",
        "    else: s = _stream_handle(stream)",
        "    if grid is not LAST[0] or block is not LAST[1] or shared != LAST[2] or s != LAST[3]:",
        "        packcfg(buf, PAD, *grid, *block, shared, s, ATTRS, NATTRS)",
        "        LAST[:] = grid, block, shared, s",
        *([f"    pack(buf, PAD + {cuda_driver.LAUNCH_CONFIG_SIZE}, {', '.join(values)})"] if values else []),
        "    rc = CALL()",
        "    if rc: _fail(rc, dev, H, grid, block, shared, CALL)",
    ]
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<kcompiler launcher {h.name}>", "exec"), env)  # noqa: S102 - generated here
    fn = env["launch"]
    fn.source = src  # for debugging: print(kernel.last_launcher.source)
    return fn


def _launcher_arg(dev: CudaDevice, i: int, t: Any, x: Any, env: dict[str, Any]) -> tuple[str, str] | None:
    """The launcher's check of argument ``i`` (parameter type ``t``; ``x`` its value at this first
    call) and the expression of its parameter slot, as (line, value); what the check needs goes into
    ``env``. None where this argument takes the general path."""
    a = f"a{i}"
    if isinstance(t, PointerType):
        return _launcher_pointer(dev, i, x, env)
    if isinstance(t, TensorMapType):
        env[f"T{i}"] = type(x)
        return f"    if type({a}) is not T{i} or {a}.kind != 'cuda': raise ArgMismatch", f"{a}.raw"
    if isinstance(t, ScalarType) and t.name in _STRUCT:
        return _launcher_scalar(i, t, x, env)
    return None


def _launcher_pointer(dev: CudaDevice, i: int, x: Any, env: dict[str, Any]) -> tuple[str, str] | None:
    """:func:`_launcher_arg` of a pointer: a torch, CuPy, kc.to_device or CUDA-array-interface array
    on this device (numpy and host tensors are copied: the general path)."""
    a = f"a{i}"
    torch = sys.modules.get("torch")
    cupy = sys.modules.get("cupy")
    env[f"T{i}"] = type(x)
    if torch is not None and isinstance(x, torch.Tensor):
        if not x.is_cuda or x.device.index != dev.ordinal:
            return None
        env[f"D{i}"] = x.dtype
        # get_device(): -1 on the host, else the CUDA device's index (one call, both checks)
        return (f"    if type({a}) is not T{i} or {a}.dtype is not D{i} or "
                f"{a}.get_device() != {dev.ordinal} or not {a}.is_contiguous(): "
                f"raise ArgMismatch"), f"{a}.data_ptr()"
    if cupy is not None and isinstance(x, cupy.ndarray):
        env[f"D{i}"] = x.dtype
        return (f"    if type({a}) is not T{i} or {a}.dtype != D{i} or not "
                f"{a}.flags.c_contiguous: raise ArgMismatch"), f"{a}.data.ptr"
    if arrays.is_kc_array(x):  # kc.to_device arrays: their pointer, on this device only
        if x.device is not dev:
            return None
        env[f"D{i}"] = x.dtype
        return (f"    if type({a}) is not T{i} or {a}.dtype != D{i} or {a}.device is not dev "
                f"or not {a}.is_c_contiguous: raise ArgMismatch"), f"{a}.ptr"
    if hasattr(x, "__cuda_array_interface__"):
        env[f"D{i}"] = x.__cuda_array_interface__["typestr"]  # as spelt at the first call
        return f"    if type({a}) is not T{i}: raise ArgMismatch", f"_cai_ptr({a}, D{i})"
    return None


def _launcher_scalar(i: int, t: ScalarType, x: Any, env: dict[str, Any]) -> tuple[str, str]:
    """:func:`_launcher_arg` of a scalar. The Python types accepted: the language's natural ones,
    plus the numpy scalar type of this first call (np.float32(alpha) is common); struct packs numpy
    scalars as numbers."""
    a = f"a{i}"
    tx = type(x)
    if t.is_bool:
        ok = {bool, np.bool_}
    elif t.is_int:
        ok = {int} | ({tx} if issubclass(tx, np.integer) else set())
    else:
        ok = {int, float} | ({tx} if issubclass(tx, (np.integer, np.floating)) else set())
    env[f"S{i}"] = frozenset(ok)
    cond = f"type({a}) is not int" if ok == {int} else f"type({a}) not in S{i}"
    if t.is_int:
        lo, hi = arrays.scalar_range(t)
        cond += f" or not {lo} <= {a} <= {hi}"
    elif t.name in ("f16", "bf16", "f32"):
        # out-of-range floats take the general path, which explains the refusal
        big = {"f16": 65504.0, "bf16": 3.3895313892515355e38, "f32": 3.4028234663852886e38}
        cond += f" or abs({a}) > {big[t.name]!r}"
    if t.name == "bf16":
        value = f"_bf16_bits({a})"
    elif t.is_bool:
        value = f"bool({a})"
    elif t.is_float:
        value = f"float({a})"
    else:
        value = f"int({a})" if len(ok) > 1 else a
    return f"    if {cond}: raise ArgMismatch", value


def _cai_pointer(x: Any, typestr: str) -> int:
    # The pointer of a __cuda_array_interface__ array whose typestr is spelt as at the first call
    # (another spelling of the same dtype takes the general path) and that is C-contiguous.
    cai = x.__cuda_array_interface__
    if cai["typestr"] != typestr or (cai.get("strides") is not None and not arrays.is_contiguous(x)):
        raise ArgMismatch
    return arrays.cai_pointer(cai)  # synchronises an exported stream


def _launch_failed(rc: int, dev: CudaDevice, h: CudaKernelHandle, grid: tuple, block: tuple,
                   shared: int, retry: Callable[[], int]) -> None:
    # A thread that never made the context current gets CUDA_ERROR_INVALID_CONTEXT (201); make it
    # current and try once more before reporting.
    if rc == 201:
        dev.make_current()
        rc = retry()
        if rc == 0:
            return
    if rc in _ASSERT_ERRORS:  # an earlier launch's assert, reported by this one
        raise _failure(_drv.CUresult(rc), f"launching kernel '{h.name}'")
    hint = ""
    if rc in _CAPTURE_ERRORS:
        hint = ("; during a CUDA graph capture a launch must go to the capturing stream: under "
                "torch.cuda.graph pass stream=torch.cuda.current_stream(), inside kc.graph() leave "
                "stream=None")
    # a block past CUDA's limits (1024 threads, z to 64; x or y past 1024 means threads past it too) is the
    # caller's value at fault
    error = LaunchConfigError if block[0] * block[1] * block[2] > 1024 or block[2] > 64 else LaunchError
    raise error(f"launching kernel '{h.name}' with grid {tuple(grid)}, block {tuple(block)}, "
                f"{shared} bytes of dynamic shared memory: {_err_name(_drv.CUresult(rc))}{hint}")


class CudaGraphExec:
    """An instantiated CUDA graph (``CUgraphExec``) of captured launches: :meth:`replay` launches
    it with ``cuGraphLaunch``; :meth:`close` (or garbage collection) destroys it."""

    def __init__(self, device: CudaDevice, graph: Any, exe: Any):
        self.device, self._graph, self._exec = device, graph, exe

    def replay(self, stream: Any = None) -> None:
        """Launch the graph on ``stream`` (None: the thread's launch stream, the legacy default
        stream outside a capture); asynchronous like a launch. Raises LaunchError."""
        if self._exec is None:
            raise LaunchError("this CUDA graph was closed")
        _check(_drv.cuGraphLaunch(self._exec, _drv.CUstream(_stream_handle(stream))),
               "cuGraphLaunch (replaying a CUDA graph)")

    def close(self) -> None:
        """Destroy the executable graph and the graph (idempotent)."""
        exe, graph, self._exec, self._graph = self._exec, self._graph, None, None
        if exe is not None and _drv is not None:
            _drv.cuGraphExecDestroy(exe)
            _drv.cuGraphDestroy(graph)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone
            pass


__all__ = ["CudaDevice", "CudaKernelHandle", "CudaGraphExec", "CURRENT", "ArgMismatch", "device_count", "is_available",
           "detected_arch", "arch_of", "DEFAULT_SHARED_LIMIT"]
