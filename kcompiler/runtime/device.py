"""The contract between the target-generic runtime (Module, Kernel, argument checking) and a device.

A :class:`Device` loads a compiled binary and launches its kernels. ``runtime/cuda.py`` implements
it with cuda-python's driver API, ``runtime/cpu.py`` with the host JIT and ``runtime/hip.py`` with
hip-python. Everything above this interface (argument checking against the kernel's signature, array
marshalling rules, the cache, specialisation) is shared.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Sequence, TypeVar

from ..ir.types import Type


@dataclass(frozen=True)
class KernelParam:
    """One parameter of a compiled kernel: its name and IR type (after specialisation)."""

    name: str
    type: Type


@dataclass
class Artifact:
    """The result of compiling one kernel specialisation for one target.

    ``binary``: what :meth:`Device.load` takes (cubin or PTX bytes on CUDA, HSACO on HIP, an LLVM
    object or IR text on the CPU); ``binary_kind`` says which ('cubin', 'ptx', 'hsaco', 'llvm-ir').
    ``symbol``: the kernel's symbol in the binary. ``params``: its runtime parameters, in order.
    ``static_shared``: bytes of static shared memory. ``meta``: anything else a device needs
    (e.g. the CPU target's warp size and bounds-check tables).
    """

    target: str
    arch: str
    symbol: str
    binary: bytes
    binary_kind: str
    params: list[KernelParam]
    static_shared: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


class LaunchError(RuntimeError):
    """A launch was refused or failed; the message names the kernel and the cause."""


class LaunchConfigError(LaunchError, ValueError):
    """A launch configuration the device cannot take: a grid or block dimension, a block's threads or
    its shared memory past the device's limits. A LaunchError that is also a ValueError, since the
    caller's values (an op's ``tiles``, say) are what is wrong."""


class DeviceAssertionError(LaunchError):
    """A device ``assert`` failed in a launch: the message is the line the failing thread printed
    (kernel, file:line:col, block, thread, condition, message; ir/assertion.py) where the runtime
    could read it back, else names the kernel and says to see the printed message. On CUDA the
    context is unusable afterwards (CUDA_ERROR_ASSERT, or ILLEGAL_INSTRUCTION for the trap), as
    after a failed CUDA ``assert``: every later call on it fails, and the process must start anew."""


_D = TypeVar("_D", bound="Device")
_INSTANCES: dict[tuple[type, int], "Device"] = {}
_INSTANCES_LOCK = threading.RLock()


class Device:
    """A place kernels run. Subclasses: CudaDevice, CpuDevice, HipDevice."""

    #: Canonical target name of the code this device runs ('nvptx', 'amdgcn', 'cpu').
    target: str = ""
    #: The chip, as the compiler's ``arch`` (e.g. 'sm_90a'), chosen for this device.
    arch: str = ""

    # Limits that size launches (kcompiler.ops: split-KV counts, persistent grids, tile checks). A GPU
    # device reads them from its driver; the defaults here, which the CPU target keeps, are an H100
    # SXM's (CUDA's device attributes there), so that the CPU target, standing in for a GPU in tests,
    # makes the choices that GPU would.
    #: Streaming multiprocessors (NVIDIA) or compute units (AMD).
    multiprocessor_count: int = 132
    #: Bytes of shared memory (LDS) one multiprocessor has for its resident blocks (sm_90: 228 KiB).
    shared_memory_per_multiprocessor: int = 228 * 1024
    #: Threads one multiprocessor holds at once.
    threads_per_multiprocessor: int = 2048
    #: The most shared memory (static and dynamic) one block may use, opted in (sm_90: 227 KiB).
    shared_memory_per_block: int = 227 * 1024

    @classmethod
    def count(cls) -> int:
        """How many devices of this class are here (what ``kc devices`` and the target ``auto``
        ask): 1 by default, a device that is always present (the host). Never raises."""
        return 1

    @classmethod
    def get(cls: type[_D], ordinal: int = 0) -> _D:
        """The process's one device object of this class for GPU ``ordinal`` (created on first use;
        the constructor's errors propagate)."""
        with _INSTANCES_LOCK:
            dev = _INSTANCES.get((cls, ordinal))
            if dev is None:
                dev = _INSTANCES[(cls, ordinal)] = cls(ordinal)  # type: ignore[call-arg]
            return dev  # type: ignore[return-value]

    def load(self, artifact: Artifact) -> Any:
        """Load ``artifact`` and return a handle that :meth:`launch` takes."""
        raise NotImplementedError

    def launch(self, handle: Any, artifact: Artifact, grid: tuple[int, int, int],
               block: tuple[int, int, int], args: Sequence[Any], shared: int = 0,
               stream: Any = None) -> None:
        """Run the kernel. ``args`` are already checked and marshalled by :meth:`marshal`."""
        raise NotImplementedError

    def marshal(self, artifact: Artifact, args: Sequence[Any],
                stream: Any = None) -> tuple[list[Any], list[Any]]:
        """Turn user arguments into launch arguments for a launch on ``stream``. Returns (launch
        args, copy-backs to run after the launch). Raises TypeError/ValueError naming the kernel and
        the parameter on a mismatch."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all work launched on this device."""

    def begin_capture(self, stream: Any = None) -> Any:
        """Start capturing this thread's launches on this device into a graph (runtime/graph.py;
        CUDA: stream capture on ``stream`` or a new stream). Returns a token for
        :meth:`end_capture`. Raises LaunchError where the device cannot capture (the default)."""
        raise LaunchError(f"{type(self).__name__} cannot capture launches into a graph "
                          f"(kc.graph() runs on CUDA devices and the CPU target)")

    def end_capture(self, token: Any, keep: bool = True) -> Any:
        """End a capture: an object with ``replay(stream=None)`` and ``close()``, or None when
        ``keep`` is False (the capture is dropped)."""
        raise LaunchError(f"{type(self).__name__} cannot capture launches into a graph")
