"""AMD GPUs through the HIP runtime, with hip-python (``from hip import hip``: the HIP C API, each
function returning a tuple ``(hipError_t, results...)``).

A :class:`HipDevice` loads a code object (HSACO) with ``hipModuleLoadData``, finds the kernel with
``hipModuleGetFunction`` and launches it with ``hipModuleLaunchKernel``. Arguments are marshalled as on
CUDA (marshal.py): numpy arrays are copied to the GPU (``hipMalloc`` / ``hipMemcpyHtoD``) and back
after the launch, which then waits; torch (ROCm) tensors, CuPy arrays and other
``__cuda_array_interface__`` objects pass their device pointer.

The kernel's explicit arguments are packed into one buffer at the byte offsets and sizes that the
code object's metadata gives (AMDGPUUsage, "Code Object V3 Kernel Argument Metadata Map"; read by
codeobject.py) and passed through ``hipModuleLaunchKernel``'s ``extra`` argument, the array of
``void*`` ``{HIP_LAUNCH_PARAM_BUFFER_POINTER, buffer, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size,
HIP_LAUNCH_PARAM_END}`` (HIP's "Driver API" porting guide). The HIP runtime appends the hidden
arguments (block counts, group sizes, hostcall buffer...) itself. :func:`kernarg_layout` /
:func:`pack_kernargs` do the packing and need no GPU.

hip-python loads ``libamdhip64.so`` at its first call. Where that library is missing (no ROCm), where
hip-python is not installed, or where no AMD GPU is present, :func:`is_available` is False and the
first use of a device raises :class:`HipUnavailable` (a LaunchError) saying what is missing.
Errors of the HIP API raise LaunchError naming the error (``hipGetErrorName``, ``hipGetErrorString``)
and the kernel.
"""
from __future__ import annotations

import ctypes
import importlib.util
import re
import struct
import threading
from dataclasses import dataclass
from typing import Any, Sequence

from ..ir.types import PointerType, ScalarType, StructType
from .codeobject import ET_DYN, CodeObject, CodeObjectError, KernelInfo, read_code_object
from .device import Artifact, Device, LaunchConfigError, LaunchError
from .stdio import flush_c_stdio
from .marshal import STRUCT_CODES, HostCopy, device_pointer, marshal_args, stream_handle
from .hip_hostcall import check_printing_kernel


class HipUnavailable(LaunchError):
    """HIP cannot be used here: hip-python or the HIP runtime (libamdhip64.so) is missing, or there
    is no AMD GPU. The message says which, and how to get it."""


_INSTALL = ("install ROCm (https://rocm.docs.amd.com) or the rocm-sdk Python packages, or point "
            "ROCM_PATH or LD_LIBRARY_PATH at the folder that holds libamdhip64.so")

# --- the runtime library ------------------------------------------------------------------------

_lock = threading.Lock()
#: hip-python's ``hip.hip`` module, once it has loaded the HIP runtime.
_hip: Any = None
#: (number of devices, why HIP cannot be used or None), once probed.
_probe: tuple[int, str | None] | None = None


def _dlopen_detail(message: str) -> str:
    """The loader's own words from hip-python's "failed to dlopen 'b'libamdhip64.so'': b'...'"."""
    m = re.search(r"b'([^']*)'\s*$", message)
    return m.group(1) if m else message


def _library_missing() -> str | None:
    """Why libamdhip64.so cannot be loaded, found without importing all of hip-python (which takes
    tens of milliseconds): its own search (rocm_sdk, ROCM_PATH, the loader's path) then dlopen.
    None when it loads, or when hip-python's search helper is not where this version expects it."""
    try:
        from rocm.bindings.util.paths import get_library_path
        path = get_library_path("amdhip64")
    except Exception:  # noqa: BLE001 - another hip-python layout: let hip-python itself try
        return None
    try:
        ctypes.CDLL(path.decode() if isinstance(path, bytes) else str(path))
    except OSError as e:
        return f"the HIP runtime library libamdhip64.so could not be loaded ({e}): {_INSTALL}"
    return None


def _do_probe() -> tuple[int, str | None]:
    global _hip
    if importlib.util.find_spec("hip") is None:
        return 0, ("hip-python is not installed (pip install hip-python, or pip install "
                   "'kcompiler[amd]')")
    why = _library_missing()
    if why:
        return 0, why
    try:
        from hip import hip as mod
    except Exception as e:  # noqa: BLE001 - a broken installation: say so, never raise here
        return 0, f"hip-python cannot be imported: {type(e).__name__}: {e}"
    try:
        err, n = mod.hipGetDeviceCount()
    except RuntimeError as e:  # hip-python's "failed to dlopen 'libamdhip64.so'"
        return 0, (f"the HIP runtime library libamdhip64.so could not be loaded "
                   f"({_dlopen_detail(str(e))}): {_INSTALL}")
    except Exception as e:  # noqa: BLE001
        return 0, f"hipGetDeviceCount failed: {type(e).__name__}: {e}"
    _hip = mod
    if int(err) != 0 or not n:
        return 0, f"the HIP runtime finds no AMD GPU (hipGetDeviceCount: {_err_name(err)})"
    return int(n), None


def _probe_runtime() -> tuple[int, str | None]:
    """(number of HIP devices, None), or (0, why HIP cannot be used). Probed once; never raises."""
    global _probe
    with _lock:
        if _probe is None:
            try:
                _probe = _do_probe()
            except Exception as e:  # noqa: BLE001 - asking whether HIP is there must not fail
                _probe = (0, f"probing the HIP runtime failed: {type(e).__name__}: {e}")
        return _probe


def device_count() -> int:
    """Number of AMD GPUs the HIP runtime sees; 0 without hip-python, ROCm or a GPU. Never raises."""
    return _probe_runtime()[0]


def is_available() -> bool:
    """Whether a HIP device can be used here. Never raises."""
    return device_count() > 0


def unavailable_reason() -> str | None:
    """Why HIP cannot be used here, or None when it can."""
    return _probe_runtime()[1]


def arch_of(gcn_arch_name: str | bytes) -> str:
    """The processor of a HIP target ID (``hipDeviceProp_t.gcnArchName``): 'gfx90a:sramecc+:xnack-'
    → 'gfx90a'."""
    if isinstance(gcn_arch_name, bytes):
        gcn_arch_name = gcn_arch_name.split(b"\0", 1)[0].decode(errors="replace")
    return gcn_arch_name.split("\0", 1)[0].strip().split(":", 1)[0]


def detected_arch(ordinal: int = 0) -> str | None:
    """The processor of HIP device ``ordinal`` ('gfx942'), or None when there is none. Never raises."""
    if ordinal >= device_count():
        return None
    try:
        return HipDevice.get(ordinal).arch
    except LaunchError:
        return None


def _err_name(err: Any) -> str:
    """'hipErrorInvalidValue (invalid argument)' for a hipError_t."""
    name = getattr(err, "name", None) or f"hipError {int(err)}"
    try:
        _, n = _hip.hipGetErrorName(err)
        _, desc = _hip.hipGetErrorString(err)
        n = n.decode() if isinstance(n, bytes) else str(n)
        desc = desc.decode() if isinstance(desc, bytes) else str(desc)
        return f"{n} ({desc})" if desc and desc != n else n
    except Exception:  # noqa: BLE001 - naming an error must not raise another
        return name


def _call(what: str, fn: str, *args: Any) -> Any:
    """Call HIP API function ``fn`` through hip-python and unpack its ``(hipError_t, results...)``:
    None, the one result, or a tuple of them. Raises LaunchError("what: the error's name"), also when
    hip-python cannot find ``fn`` in this libamdhip64 (a hip-python made for another ROCm)."""
    try:
        result = getattr(_hip, fn)(*args)
    except RuntimeError as e:  # hip-python: "failed to load symbol ..." from dlsym
        raise LaunchError(f"{what}: {fn} is not in this HIP runtime ({e}); install the hip-python "
                          f"release that matches the installed ROCm") from None
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise LaunchError(f"{what}: {_err_name(err)}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        v = v.split(b"\0", 1)[0].decode(errors="replace")
    return str(v).split("\0", 1)[0].strip()


# --- the kernel arguments -----------------------------------------------------------------------

@dataclass(frozen=True)
class KernargLayout:
    """Where a kernel's explicit arguments sit in the buffer passed to ``hipModuleLaunchKernel``.

    ``layout``: a little-endian ``struct.Struct`` of the arguments, with the padding the metadata's
    offsets leave between them; ``size``: bytes passed as ``HIP_LAUNCH_PARAM_BUFFER_SIZE`` (the end of
    the last explicit argument rounded up to 8, where the hidden arguments begin); ``offsets``: each
    argument's byte offset."""

    kernel: str
    layout: struct.Struct
    size: int
    offsets: tuple[int, ...]

    def pack(self, values: Sequence[Any]) -> bytes:
        """The buffer for launch ``values`` (from :meth:`HipDevice.marshal`: ints for pointers, Python
        numbers, bf16 as its bits). Raises LaunchError when a value does not fit."""
        try:
            data = self.layout.pack(*values)
        except struct.error as e:  # marshal checked the values: a kcompiler bug
            raise LaunchError(f"kernel '{self.kernel}': cannot pack its arguments: {e}") from None
        return data + bytes(self.size - len(data))


def kernarg_layout(artifact: Artifact, kernel: KernelInfo) -> KernargLayout:
    """The layout of ``artifact``'s parameters in the kernarg buffer, from ``kernel``'s metadata.

    Each parameter must match its metadata argument, in order: a pointer an 8-byte ``global_buffer``,
    a scalar a ``by_value`` of the scalar's size. Raises LaunchError naming the kernel and the
    parameter otherwise (the code object was not compiled from this signature)."""
    name = artifact.meta.get("kernel", artifact.symbol)
    explicit = kernel.explicit_args
    if len(explicit) != len(artifact.params):
        raise LaunchError(f"kernel '{name}': its code object lists {len(explicit)} explicit "
                          f"argument{'s' * (len(explicit) != 1)}, its signature has "
                          f"{len(artifact.params)} parameter{'s' * (len(artifact.params) != 1)}")
    fmt, end = "<", 0
    for p, a in zip(artifact.params, explicit):
        t = p.type
        if isinstance(t, PointerType):
            code, kind = "Q", "global_buffer"
        elif isinstance(t, StructType):  # its bytes (marshal's pack_struct), by value
            code, kind = f"{t.size}s", "by_value"
        elif isinstance(t, ScalarType) and t.name in STRUCT_CODES:
            code, kind = STRUCT_CODES[t.name], "by_value"
        else:
            raise LaunchError(f"kernel '{name}': parameter '{p.name}' of type {t} cannot be passed "
                              f"from the host")
        size = struct.calcsize("<" + code)
        if (a.value_kind, a.size) != (kind, size) or a.offset < end:
            raise LaunchError(f"kernel '{name}': parameter '{p.name}' ({t}, {size} bytes, {kind}) does "
                              f"not match its code object argument '{a.name}' ({a.size} bytes at "
                              f"offset {a.offset}, {a.value_kind})")
        if a.offset > end:
            fmt += f"{a.offset - end}x"
        fmt += code
        end = a.offset + a.size
    return KernargLayout(name, struct.Struct(fmt), (end + 7) // 8 * 8,
                         tuple(a.offset for a in explicit))


def pack_kernargs(artifact: Artifact, values: Sequence[Any],
                  code_object: CodeObject | None = None) -> bytes:
    """The kernarg buffer for ``values`` (marshalled launch values), laid out as the metadata of
    ``artifact.binary`` (or of ``code_object``, already read) says. Raises LaunchError."""
    try:
        co = code_object or read_code_object(artifact.binary)
        kernel = co.kernel(artifact.symbol)
    except CodeObjectError as e:
        raise LaunchError(f"kernel '{artifact.symbol}': the code object is malformed: {e}") from None
    except KeyError as e:
        raise LaunchError(f"kernel '{artifact.symbol}': {e.args[0]}") from None
    return kernarg_layout(artifact, kernel).pack(values)


# --- the device ---------------------------------------------------------------------------------

@dataclass
class HipKernelHandle:
    """A loaded kernel: its hipModule_t and hipFunction_t, its metadata, the layout of its arguments,
    its static LDS in bytes, and the image (kept alive as long as the module)."""

    module: Any
    function: Any
    name: str
    kernel: KernelInfo
    layout: KernargLayout
    static_shared: int
    image: bytes


class _HipBuffer(HostCopy):
    """A device copy of a host array (see marshal.HostCopy) in memory from ``hipMalloc``, on the
    calling thread's current device."""

    __slots__ = ()

    def _alloc(self, nbytes: int) -> int:
        return int(_call("hipMalloc", "hipMalloc", nbytes))

    def _to_device(self, dst: int, src: int, nbytes: int) -> None:
        _call("hipMemcpyHtoD", "hipMemcpyHtoD", dst, src, nbytes)

    def _to_host(self, dst: int, src: int, nbytes: int) -> None:
        _call("hipMemcpyDtoH", "hipMemcpyDtoH", dst, src, nbytes)

    def _free(self, ptr: int) -> None:
        try:
            _hip.hipFree(ptr)
        except RuntimeError:  # freeing must not hide the error being raised
            pass

    def _sync(self) -> None:
        _call("hipDeviceSynchronize", "hipDeviceSynchronize")
        flush_c_stdio()  # the HIP runtime's printf output before this copy-back


class HipDevice(Device):
    """HIP device ``ordinal`` (use :meth:`get`: one object per device per process).

    ``arch``: its processor ('gfx942'); ``target_id``: with its features ('gfx942:sramecc+:xnack-');
    ``name``, ``warp_size``, ``max_shared`` (bytes of LDS a workgroup may use) and
    ``max_threads`` (work-items a workgroup may have), from ``hipGetDeviceProperties``.

    Raises HipUnavailable without hip-python, ROCm or an AMD GPU; LaunchError for a missing ordinal."""

    target = "amdgcn"

    @classmethod
    def count(cls) -> int:
        """AMD GPUs the HIP runtime sees (:func:`device_count`); never raises."""
        return device_count()

    def __init__(self, ordinal: int = 0):
        n, why = _probe_runtime()
        if why:
            raise HipUnavailable(f"HIP is not available: {why}")
        if not 0 <= ordinal < n:
            raise LaunchError(f"no HIP device {ordinal}: the HIP runtime sees {n} "
                              f"device{'s' * (n != 1)}")
        self.ordinal = ordinal
        self.make_current()
        props = _properties(ordinal)
        self.name = _text(props.name)
        self.target_id = _text(props.gcnArchName)
        self.arch = arch_of(self.target_id)
        self.warp_size = int(props.warpSize)
        self.max_shared = int(props.sharedMemPerBlock)
        self.max_threads = int(props.maxThreadsPerBlock)
        # the limits that size launches (Device's); a property hip-python lacks keeps Device's default
        for attr, prop in (("multiprocessor_count", "multiProcessorCount"),
                           ("shared_memory_per_multiprocessor", "maxSharedMemoryPerMultiProcessor"),
                           ("threads_per_multiprocessor", "maxThreadsPerMultiProcessor")):
            if getattr(props, prop, None):
                setattr(self, attr, int(getattr(props, prop)))
        self.shared_memory_per_block = self.max_shared

    def __repr__(self) -> str:
        return f"HipDevice({getattr(self, 'ordinal', '?')}: {getattr(self, 'name', '?')}, " \
               f"{getattr(self, 'target_id', '?')})"

    def make_current(self) -> None:
        """Make this the calling thread's current HIP device (``hipSetDevice``)."""
        _call("hipSetDevice", "hipSetDevice", self.ordinal)

    # --- loading ---
    def load(self, artifact: Artifact) -> HipKernelHandle:
        """Load a code object and find the kernel. Raises LaunchError when the binary is not a
        linked code object for this device's processor and features, or HIP refuses it."""
        name = artifact.meta.get("kernel", artifact.symbol)
        if artifact.binary_kind != "hsaco":
            raise LaunchError(f"HIP cannot load a {artifact.binary_kind!r} binary (kernel '{name}' was "
                              f"compiled for target {artifact.target})")
        what = (f"loading kernel '{name}' (code object for {artifact.arch}) on {self.name} "
                f"({self.target_id})")
        try:
            co = read_code_object(artifact.binary)
            kernel = co.kernel(artifact.symbol)
        except CodeObjectError as e:
            raise LaunchError(f"{what}: the code object is malformed: {e}") from None
        except KeyError as e:
            raise LaunchError(f"{what}: {e.args[0]}") from None
        if co.elf_type != ET_DYN:
            raise LaunchError(f"{what}: the code object is not linked (an ELF relocatable "
                              f"object): link it with ld.lld -shared")
        why = co.runs_on(self.target_id)
        if why:
            raise LaunchError(f"{what}: {why}; compile it with arch='{self.arch}'")
        layout = kernarg_layout(artifact, kernel)
        image = bytes(artifact.binary)
        self.make_current()
        module = _call(what, "hipModuleLoadData", image)
        fn = _call(what, "hipModuleGetFunction", module, artifact.symbol.encode())
        return HipKernelHandle(module, fn, name, kernel, layout, kernel.group_segment_fixed_size, image)

    # --- launching ---
    def marshal(self, artifact: Artifact, args: Sequence[Any],
                stream: Any = None) -> tuple[list[Any], list[Any]]:
        """Launch values and copy-backs (see marshal.marshal_args); arguments already checked."""
        self.make_current()
        return marshal_args(artifact, args, self._pointer)

    def _pointer(self, kernel: str, param: str, x: Any, copybacks: list) -> int:
        return device_pointer(kernel, param, x, copybacks, _HipBuffer, self.ordinal, "HIP")

    def launch(self, handle: HipKernelHandle, artifact: Artifact, grid: tuple[int, int, int],
               block: tuple[int, int, int], args: Sequence[Any], shared: int = 0,
               stream: Any = None) -> None:
        """Launch with marshalled ``args``: ``grid`` in workgroups, ``block`` in work-items,
        ``shared`` bytes of dynamic LDS, on ``stream`` (None: the default stream). Raises LaunchError
        naming the HIP error and the kernel (or, before launching, a block or LDS size the kernel
        cannot have)."""
        k = handle.kernel
        if any(a.value_kind == "hidden_hostcall_buffer" for a in k.args):
            check_printing_kernel(handle.name, runtime_version())
        threads = block[0] * block[1] * block[2]
        limit = min(k.max_flat_workgroup_size, self.max_threads or k.max_flat_workgroup_size)
        if threads > limit:
            raise LaunchConfigError(f"kernel '{handle.name}': a block of {tuple(block)} is {threads} "
                                    f"work-items; it may have at most {limit} on {self.name}")
        if self.max_shared and handle.static_shared + shared > self.max_shared:
            raise LaunchConfigError(f"kernel '{handle.name}': {shared} bytes of dynamic shared memory "
                                    f"(plus {handle.static_shared} static) exceed the {self.max_shared} "
                                    f"bytes a block may use on {self.name}")
        data = handle.layout.pack(args)
        buf = ctypes.create_string_buffer(data, max(len(data), 8))
        size = ctypes.c_size_t(len(data))
        config = (ctypes.c_void_p * 5)(_hip.HIP_LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(buf),
                                       _hip.HIP_LAUNCH_PARAM_BUFFER_SIZE, ctypes.addressof(size),
                                       _hip.HIP_LAUNCH_PARAM_END)
        s = stream_handle(stream, "HIP")
        self.make_current()
        # extra is passed as the address of the config array: hip-python reads a tuple given there
        # as argument values to pack itself, not as this array.
        _call(f"launching kernel '{handle.name}' with grid {tuple(grid)}, block {tuple(block)}, "
              f"{shared} bytes of dynamic shared memory", "hipModuleLaunchKernel",
              handle.function, *grid, *block, shared, s, None, ctypes.addressof(config))

    def synchronize(self) -> None:
        """Wait for the device, then flush C stdio, where the HIP runtime prints kernels' printf
        (hostcall and buffered: clr devhcprintf.cpp, ``vfprintf(stdout, ...)``; runtime/stdio.py)."""
        self.make_current()
        try:
            _call(f"synchronising {self.name}", "hipDeviceSynchronize")
        finally:
            flush_c_stdio()


_runtime_version: int | None = None


def runtime_version() -> int:
    """``hipRuntimeGetVersion`` (HIP_VERSION: major * 10^7 + minor * 10^5 + patch), asked once."""
    global _runtime_version
    if _runtime_version is None:
        _runtime_version = int(_call("asking the HIP runtime's version", "hipRuntimeGetVersion"))
    return _runtime_version


def _properties(ordinal: int) -> Any:
    """``hipDeviceProp_t`` of device ``ordinal`` (recent hip-python returns it; older versions fill one
    passed in)."""
    try:
        return _call("hipGetDeviceProperties", "hipGetDeviceProperties", ordinal)
    except TypeError:
        props = _hip.hipDeviceProp_t()
        return _call("hipGetDeviceProperties", "hipGetDeviceProperties", props, ordinal) or props


__all__ = ["HipDevice", "HipKernelHandle", "HipUnavailable", "KernargLayout", "kernarg_layout",
           "pack_kernargs", "device_count", "is_available", "unavailable_reason", "detected_arch",
           "arch_of", "runtime_version"]
