"""The CPU device: kernels compiled by the cpu target run on host threads with GPU semantics.

Loading links the kernel's host object (``Artifact.binary``, from ``CpuTarget.emit(..., "obj")``; LLVM
IR text is accepted too) into an MCJIT engine. A launch fills a :class:`~kcompiler.backends.cpu.abi.
LaunchState` and calls the native block scheduler (``backends/cpu/scheduler.py``, JIT-compiled once
per process) from up to ``workers`` host threads at once; ctypes releases the GIL for the call, so
blocks run in parallel. Blocks are handed out by an atomic counter; the threads of a block run as
coroutines on the worker that took it.

Arguments: numpy arrays (C-contiguous) are passed by their address and written in place; read-only
arrays are copied first. PyTorch CPU tensors are passed by their memory (through numpy). GPU arrays (torch CUDA
tensors, ``__cuda_array_interface__`` objects) are refused with a TypeError. Under ``check_bounds``
each array is copied into its own 256-byte aligned buffer (as cudaMalloc's are) with 4 KiB guard zones
on both sides (so that a small overrun lands outside every argument and is reported) and copied back
after the launch; the memory the runtime itself hands the kernel (the hostcall buffer printf writes
to) is legal as well (``_runtime_memory``), every other address is reported.

Alignment: a GPU faults on a misaligned access (a ``vec<f32, 4>`` load from an address that is not a
multiple of 16). The CPU target compiles vector accesses with the element's alignment only, so a host
array from numpy's allocator (16-byte aligned) never crashes the process; under ``check_bounds`` every
access is checked for the alignment a GPU needs and a misaligned one is reported.

Errors (out-of-bounds or misaligned accesses and array indices out of range under ``check_bounds``,
divergent barriers, deadlocks of spinning threads, launch limits) are raised as
:class:`~kcompiler.runtime.device.LaunchError` naming the kernel, e.g.::

    kernel 'vadd': out-of-bounds store to 'out'[1000] (size 1000) at examples/vadd.kc:5:9,
    thread (8,0,0) block (3,0,0)

A failed device ``assert`` raises :class:`~kcompiler.runtime.device.DeviceAssertionError` with the line
the thread printed (the hostcall printf service keeps it: ``PrintfService.assertion_text``).

Ctrl-C stops a launch on the main thread between blocks and at every barrier, warp operation or
``nanosleep`` of its threads, and raises KeyboardInterrupt (``runtime/interrupt.py``).

Environment: ``KC_CPU_THREADS`` caps the worker threads (default: the host's CPU count);
``KC_CPU_DEADLOCK_SECONDS`` (default 10, 0: never) how long a block's runnable threads may all spin on
unchanged atomics before the launch stops with a deadlock error (:func:`deadlock_seconds_from_env`).
"""
from __future__ import annotations

import ctypes
import json
import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import llvmlite.binding as llvm
import numpy as np

from ..backends.cpu import abi
from ..backends.cpu.target import (INFO_SYMBOL, MAX_BLOCK_DIM, MAX_GRID_DIM, MAX_SHARED_BYTES,
                                   MAX_THREADS_PER_BLOCK, CpuTarget)
from ..ir.types import PointerType, ScalarType, StructType, TensorMapType, VectorType, sizeof
from . import arrays, interrupt
from .structs import pack_struct
from .arrays import ArgMismatch
from .device import Artifact, Device, DeviceAssertionError, LaunchConfigError, LaunchError
from .stdio import flush_c_stdio
from .printf_buffer import PrintfBuffer, buffer_bytes_from_env
from .hostcall import HostcallBuffer, HostcallListener, packets_for
from ..backends.cpu.scheduler import RUN_BLOCKS, build_scheduler_module
from ..backends.llvm import optimize
from ..backends.cpu import builtins
from .printf_buffer import read_format_table
from .cpu_guard import GUARD_BYTES, GuardedCopy, on_guarded_copies

#: Launches of fewer GPU threads than this per worker run on the calling thread alone.
SERIAL_THREADS = 2048

_RUN_BLOCKS_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_SCALAR_FORMATS = {"i8": "b", "u8": "B", "i16": "h", "u16": "H", "i32": "i", "u32": "I", "i64": "q",
                   "u64": "Q", "f32": "f", "f64": "d", "bool": "?"}


@dataclass
class PointerArg:
    """A marshalled array argument: its host address, size in bytes, element size and name."""

    address: int
    nbytes: int
    itemsize: int
    name: str
    array: Any = None  #: the numpy array (kept alive; copied between guard zones under check_bounds)


@dataclass
class CpuKernelHandle:
    """A loaded kernel: the engine holding its code, the thunk's address and its description."""

    engine: Any
    name: str
    start: int
    warp_size: int
    static_shared: int
    check_bounds: bool
    params: list[tuple[int, int]]   #: (offset, size) of each argument in the argument buffer
    arg_bytes: int
    locations: list[str]
    #: Address of the module's ``kc_hostcall_buffer`` word (0: the kernel makes no hostcalls).
    hostcall_slot: int = 0
    #: Address of the module's ``kc_printf_buffer`` word (0: no printf="buffered" printf), and the
    #: module's formats by hash (its ``kc_printf_formats`` table).
    printf_slot: int = 0
    printf_formats: dict = field(default_factory=dict)
    #: why an emulated instruction faults, by location id (abi.ERR_FAULT; CpuTarget.fault)
    faults: dict = field(default_factory=dict)


_hostcall_lock = threading.Lock()
_hostcall: Any = None


_printf_lock = threading.Lock()  # one launch of a printf="buffered" kernel at a time uses the buffer
_printf: Any = None


def printf_buffer() -> Any:
    """The process's printf buffer for CPU kernels compiled with printf="buffered", in host memory
    (``KC_PRINTF_BUFFER`` bytes, default 4 MiB: runtime/printf_buffer.py). Created on first use."""
    global _printf
    with _hostcall_lock:
        if _printf is None:
            _printf = PrintfBuffer.in_host_memory(buffer_bytes_from_env())
        return _printf


def hostcall_buffer() -> Any:
    """The process's hostcall buffer for CPU kernels that print (std.hostcall), in host memory, with
    a listener thread serving it (printf output goes to sys.stdout). Created on first use."""
    global _hostcall
    with _hostcall_lock:
        if _hostcall is None:
            # A packet per waiting warp at most: workers x warps of a block is far below this.
            buf = HostcallBuffer.in_host_memory(packets_for(4096))
            listener = HostcallListener([buf]).start()
            _hostcall = (buf, listener)
        return _hostcall[0]


class _Scheduler:
    """The process-wide JIT-compiled ``kc_run_blocks`` (see backends/cpu/scheduler.py)."""

    _lock = threading.Lock()
    _fn: Any = None
    _engine: Any = None

    @classmethod
    def get(cls) -> Any:
        with cls._lock:
            if cls._fn is None:
                target = _host_target()
                ref = llvm.parse_assembly(str(build_scheduler_module(target.triple, target.data_layout)))
                ref.verify()
                optimize(ref, target, 2)  # also lowers llvm.coro.resume (CoroCleanup)
                cls._engine = llvm.create_mcjit_compiler(ref, target.target_machine(2))
                cls._engine.finalize_object()
                cls._fn = _RUN_BLOCKS_TYPE(cls._engine.get_function_address(RUN_BLOCKS))
            return cls._fn


class _KeepAlive:
    """A copy-back that only keeps a temporary alive until the launch is over."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __call__(self) -> None:
        self.obj = None

    def discard(self) -> None:
        self.obj = None


class _Capture(threading.local):
    #: The launches recorded on this thread while kc.graph() captures (None otherwise).
    launches: list | None = None


_CAPTURE = _Capture()


class CpuGraph:
    """Launches recorded by a capture on the CPU target (their parameter buffers as packed at the
    launch: the same arrays and scalars), run again in order by :meth:`replay`."""

    def __init__(self, device: "CpuDevice", launches: list):
        self.device, self.launches = device, launches

    def replay(self, stream: Any = None) -> None:
        """Run the recorded launches in order (synchronously, like every CPU launch); inside
        another capture they are recorded there instead. Raises LaunchError as a launch does."""
        if self.launches is None:
            raise LaunchError("this graph was closed")
        for handle, grid, block, shared, buf, table in self.launches:
            self.device._execute(handle, grid, block, shared, buf, table)

    def close(self) -> None:
        """Drop the recorded launches (idempotent)."""
        self.launches = None


def _torch_host_view(x: Any) -> np.ndarray:
    """A torch CPU tensor's memory as a numpy array (no copy): its own dtype where numpy has it, else
    (bfloat16, the FP8 types, which ``Tensor.numpy()`` refuses) an integer dtype of its size, the same
    bytes, which is all a launch reads off it (address and size)."""
    try:
        return x.numpy()
    except TypeError:
        import torch  # deferred: torch is optional; x is a torch tensor
        same = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
        return x.view(same).numpy()


class CpuDevice(Device):
    """The host CPU as a kcompiler device (use :meth:`get`: one per process).

    ``workers``: host threads a launch may use (default ``KC_CPU_THREADS`` or the CPU count)."""

    target = "cpu"
    _instance: "CpuDevice | None" = None
    _lock = threading.Lock()

    @classmethod
    def get(cls, ordinal: int = 0) -> "CpuDevice":
        """The process's one CPU device (``ordinal`` must be 0: the host is one device)."""
        if ordinal != 0:
            raise LaunchError(f"no CPU device {ordinal}: the host is device 0")
        with cls._lock:
            if cls.__dict__.get("_instance") is None:  # a subclass (a plug-in's) gets its own
                cls._instance = cls()
            return cls._instance

    def __init__(self, workers: int | None = None):
        env = os.environ.get("KC_CPU_THREADS", "").strip()
        if workers is None and env:
            if not env.isdigit() or int(env) < 1:
                raise LaunchError(f"KC_CPU_THREADS must be a positive integer, not {env!r}")
            workers = int(env)
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.arch = llvm.get_host_cpu_name() if _llvm_ready() else "host"
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._engine_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CpuDevice({self.arch}, {self.workers} worker thread{'s' * (self.workers != 1)})"

    # --- loading ---
    def load(self, artifact: Artifact) -> CpuKernelHandle:
        """Link the kernel's object (or JIT-compile its LLVM IR). Raises LaunchError for a binary of
        another target or one that does not hold the kernel."""
        if artifact.target != self.target:
            raise LaunchError(f"kernel '{artifact.symbol}': the CPU device cannot load code compiled for "
                              f"target {artifact.target} ({artifact.binary_kind})")
        target = _host_target()

        builtins.install(target.target_machine(2))  # compiler-rt's float conversions, once
        with self._engine_lock:
            if artifact.binary_kind in ("obj", "so"):
                empty = llvm.parse_assembly(f'target triple = "{target.triple}"\n'
                                            f'target datalayout = "{target.data_layout}"\n')
                engine = llvm.create_mcjit_compiler(empty, target.target_machine(2))
                engine.add_object_file(llvm.ObjectFileRef.from_data(bytes(artifact.binary)))
            elif artifact.binary_kind in ("llvm-ir", "llvm"):
                text = artifact.binary.decode() if isinstance(artifact.binary, bytes) else artifact.binary
                engine = llvm.create_mcjit_compiler(llvm.parse_assembly(text), target.target_machine(2))
            else:
                raise LaunchError(f"kernel '{artifact.symbol}': the CPU device cannot load a "
                                  f"{artifact.binary_kind!r} binary")
            engine.finalize_object()
            addr = engine.get_global_value_address(INFO_SYMBOL)
            hostcall_slot = engine.get_global_value_address("kc_hostcall_buffer")
            printf_slot = engine.get_global_value_address("kc_printf_buffer")
            formats_at = engine.get_global_value_address("kc_printf_formats")
        if not addr:
            raise LaunchError(f"kernel '{artifact.symbol}': the binary has no {INFO_SYMBOL} (not built by "
                              f"the cpu target?)")
        info = json.loads(ctypes.string_at(addr).decode())
        k = info["kernels"].get(artifact.symbol)
        if k is None:
            raise LaunchError(f"kernel '{artifact.symbol}' is not in its binary (it has: "
                              f"{', '.join(info['kernels']) or 'none'})")
        start = engine.get_function_address(k["thunk"])
        name = artifact.meta.get("kernel", artifact.symbol)
        return CpuKernelHandle(engine, name, start, int(info["warp_size"]), int(k["static_shared"]),
                               bool(k["check_bounds"]), [tuple(p) for p in k["params"]],
                               int(k["arg_bytes"]), list(info["locations"]), hostcall_slot,
                               printf_slot, _formats_at(formats_at),
                               {int(i): m for i, m in info.get("faults", {}).items()})

    # --- arguments ---
    def marshal(self, artifact: Artifact, args: Sequence[Any],
                stream: Any = None) -> tuple[list[Any], list[Any]]:
        """Launch arguments (:class:`PointerArg` for arrays, bytes for scalars) and copy-backs (only
        keep-alives of temporary copies: arrays are passed in place). ``args`` must already be
        checked (``arrays.check_args``); TypeError names the kernel and parameter of a GPU array."""
        kernel = artifact.meta.get("kernel", artifact.symbol)
        out: list[Any] = []
        copybacks: list[Any] = []
        for p, x in zip(artifact.params, args):
            if isinstance(p.type, PointerType):
                out.append(self._pointer(kernel, p.name, p.type, x, copybacks))
            elif isinstance(p.type, TensorMapType):
                if getattr(x, "kind", None) != "host":
                    raise TypeError(f"{kernel}: parameter '{p.name}': the cpu target reads tensor maps of "
                                    f"numpy arrays (tensor_map(numpy_array, box)), got {x!r}")
                raw = np.frombuffer(bytearray(x.raw), dtype=np.uint8)
                out.append(PointerArg(raw.ctypes.data, raw.nbytes, 1, p.name, raw))
            elif isinstance(p.type, StructType):
                out.append(pack_struct(kernel, p.name, p.type, x))
            else:
                out.append(_pack_scalar(arrays.check_scalar(kernel, p.name, p.type, x), p.type))
        return out, copybacks

    @staticmethod
    def _pointer(kernel: str, param: str, t: PointerType, x: Any, copybacks: list) -> PointerArg:
        itemsize = sizeof(t.pointee.elem if isinstance(t.pointee, VectorType) else t.pointee)
        if arrays.is_kc_array(x):  # kc.to_device(..., device="cpu"): its numpy view
            if x.device.target != "cpu":
                raise TypeError(f"{kernel}: parameter '{param}': {arrays.describe(x)} lives in GPU "
                                f"memory; the cpu target runs on host memory (x.copy_to_host())")
            x = x.host_ndarray()
        elif arrays.is_torch_tensor(x):
            if x.device.type != "cpu":
                raise TypeError(f"{kernel}: parameter '{param}': the tensor is on {x.device}; the cpu "
                                f"target runs on host memory (pass tensor.cpu())")
            x = _torch_host_view(x.detach())
        elif not isinstance(x, np.ndarray):
            raise TypeError(f"{kernel}: parameter '{param}': {arrays.describe(x)} lives in GPU memory; "
                            f"the cpu target runs on host memory (pass a numpy array)")
        if not x.flags.writeable:  # the kernel may write: never into memory numpy says is read-only
            x = x.copy()
            copybacks.append(_KeepAlive(x))
        return PointerArg(x.ctypes.data, x.nbytes, itemsize, param, x)

    # --- launching ---
    def launch(self, handle: CpuKernelHandle, artifact: Artifact, grid: tuple[int, int, int],
               block: tuple[int, int, int], args: Sequence[Any], shared: int = 0,
               stream: Any = None) -> None:
        """Run the kernel to completion (launches on the CPU are synchronous; ``stream`` is ignored).
        ``args`` come from :meth:`marshal`. Raises LaunchError for a launch outside the limits or an
        error found while running."""
        if handle.check_bounds and _CAPTURE.launches is not None:
            raise LaunchError(f"kernel '{handle.name}' checks bounds (check_bounds=True), which runs it "
                              f"on guarded copies made for one launch: it cannot be captured in a graph")
        buf = ctypes.create_string_buffer(max(handle.arg_bytes, 8))
        table: list[PointerArg] = []
        guarded: list[GuardedCopy] = []
        if handle.check_bounds:
            args = on_guarded_copies(args, guarded)
        for (off, size), a in zip(handle.params, args):
            if isinstance(a, PointerArg):
                struct.pack_into("Q", buf, off, a.address)
                table.append(a)
            else:
                ctypes.memmove(ctypes.addressof(buf) + off, a, min(size, len(a)))
        try:
            self._execute(handle, grid, block, shared, buf, table)
        finally:
            for g in guarded:  # what the kernel wrote before an error is kept, as on a GPU
                g()

    def _execute(self, handle: CpuKernelHandle, grid: Any, block: Any, shared: int, buf: Any,
                 table: list[PointerArg]) -> None:
        """Run the launch (:meth:`_run_blocks`); for a kernel that prints, C stdio is flushed before
        and after (runtime/stdio.py), and a printf="buffered" kernel's records are printed after
        the launch (one such launch at a time)."""
        captured = _CAPTURE.launches
        if captured is not None:  # kc.graph(): recorded, run at each replay
            captured.append((handle, grid, block, shared, buf, table))
            return
        if handle.hostcall_slot or handle.printf_slot:
            flush_c_stdio()  # what C stdio holds comes before the kernel's lines
        if not handle.printf_slot:
            try:
                self._run_blocks(handle, grid, block, shared, buf, table)
            finally:
                if handle.hostcall_slot:
                    flush_c_stdio()
            return
        with _printf_lock:
            pb = printf_buffer()
            ctypes.c_uint64.from_address(handle.printf_slot).value = pb.device_address
            try:
                self._run_blocks(handle, grid, block, shared, buf, table)
            finally:
                pb.drain(handle.printf_formats)
                flush_c_stdio()

    def _run_blocks(self, handle: CpuKernelHandle, grid: Any, block: Any, shared: int, buf: Any,
                    table: list[PointerArg]) -> None:
        """Check the launch's limits, fill its LaunchState and run the scheduler on the workers."""
        grid, block = _dims(handle.name, "grid", grid), _dims(handle.name, "block", block)
        _check_limits(handle, grid, block, shared)
        runtime_memory = _runtime_memory(handle)
        st = abi.LaunchState()
        st.start = handle.start
        st.args = ctypes.addressof(buf)
        entries = None
        if handle.check_bounds:
            # Legal memory: the arrays passed to the kernel and what the runtime itself hands it.
            table = table + runtime_memory
            entries = (abi.BoundsEntry * max(len(table), 1))()
            for i, a in enumerate(table):
                entries[i].begin, entries[i].end = a.address, a.address + a.nbytes
            st.table, st.ntable = ctypes.addressof(entries), len(table)
        st.static_shared, st.dyn_shared = handle.static_shared, shared
        blocks = grid[0] * grid[1] * grid[2]
        st.total_blocks = blocks
        st.grid[0], st.grid[1], st.grid[2] = grid
        st.block[0], st.block[1], st.block[2] = block
        st.warp_size = handle.warp_size
        st.deadlock_seconds = deadlock_seconds_from_env()
        run = _Scheduler.get()
        # Handing blocks to other threads costs tens of microseconds: small launches run here.
        threads = blocks * block[0] * block[1] * block[2]
        nworkers = min(self.workers, blocks, max(1, threads // SERIAL_THREADS))
        ptr = ctypes.addressof(st)
        interrupted: list[bool] = []
        asserts_before = _hostcall[1].printf.assertion_serial if _hostcall is not None else 0

        def stop() -> None:  # Ctrl-C (runtime/interrupt.py): the scheduler sees the flag and returns
            interrupted.append(True)
            st.stop = 1

        futures: list[Any] = []
        with interrupt.interruptible(stop, f"kernel '{handle.name}'"):
            try:
                if nworkers > 1:
                    pool = self._executor()
                    futures = [pool.submit(run, ptr) for _ in range(nworkers - 1)]
                run(ptr)
            finally:
                _join(futures, stop)
        if interrupted:
            raise KeyboardInterrupt
        if st.err_kind != abi.ERR_NONE:
            error = DeviceAssertionError if st.err_kind == abi.ERR_ASSERT else LaunchError
            raise error(_error_message(handle, st, table, grid, block, asserts_before))

    def run(self, handle: CpuKernelHandle, artifact: Artifact, grid: Any, block: Any,
            args: Sequence[Any], shared: int = 0) -> None:
        """Check, marshal and launch (a launch without the Module/Kernel layer: tests, tools)."""
        arrays.check_args(artifact.meta.get("kernel", artifact.symbol), artifact.params, tuple(args))
        margs, copybacks = self.marshal(artifact, args)
        try:
            self.launch(handle, artifact, grid, block, margs, shared)
        finally:
            for cb in copybacks:
                cb()

    # --- the fast path ---
    def make_launcher(self, handle: CpuKernelHandle, artifact: Artifact,
                      args: Sequence[Any]) -> Callable[..., None] | None:
        """A launcher for arguments of the Python types of ``args`` (writeable C-contiguous numpy
        arrays of the parameters' dtypes; Python ints, floats and bools), or None when an argument
        needs the general path or the kernel checks bounds. Called as ``f(grid, block, args, shared,
        stream)``; raises ArgMismatch, before launching, for arguments it was not made for."""
        if handle.check_bounds:
            return None
        kinds: list[tuple] = []
        for p, x in zip(artifact.params, args):
            t = p.type
            if isinstance(t, PointerType):
                elem = t.pointee.elem if isinstance(t.pointee, VectorType) else t.pointee
                if not isinstance(x, np.ndarray) or not isinstance(elem, ScalarType):
                    return None
                kinds.append(("ptr", x.dtype))
            elif isinstance(t, ScalarType) and t.name in _SCALAR_FORMATS and type(x) in (int, float, bool):
                if t.is_int:
                    kinds.append(("int", _SCALAR_FORMATS[t.name], *arrays.scalar_range(t)))
                elif t.is_float:
                    kinds.append(("float", _SCALAR_FORMATS[t.name]))
                else:
                    kinds.append(("bool", "?"))
            else:
                return None
        if len(kinds) != len(artifact.params):
            return None
        offsets = [off for off, _ in handle.params]
        size = max(handle.arg_bytes, 8)
        pack_into, execute = struct.pack_into, self._execute
        ndarray = np.ndarray
        f32_max = 3.4028234663852886e38

        def launch(grid: Any, block: Any, args: Sequence[Any], shared: int, stream: Any) -> None:
            if len(args) != len(kinds):
                raise ArgMismatch
            buf = ctypes.create_string_buffer(size)
            for x, kind, off in zip(args, kinds, offsets):
                k = kind[0]
                if k == "ptr":
                    if type(x) is not ndarray or x.dtype != kind[1] or not x.flags.c_contiguous \
                            or not x.flags.writeable:
                        raise ArgMismatch
                    pack_into("Q", buf, off, x.ctypes.data)
                elif k == "int":
                    if type(x) is not int or not kind[2] <= x <= kind[3]:
                        raise ArgMismatch
                    pack_into(kind[1], buf, off, x)
                elif k == "float":
                    if type(x) not in (float, int) or (kind[1] == "f" and not abs(x) <= f32_max):
                        raise ArgMismatch
                    pack_into(kind[1], buf, off, x)
                else:
                    if type(x) is not bool:
                        raise ArgMismatch
                    pack_into("?", buf, off, x)
            execute(handle, grid, block, shared, buf, [])

        return launch

    def synchronize(self) -> None:
        """Launches are synchronous on the CPU: nothing to wait for."""

    # --- graphs (runtime/graph.py) ---
    def begin_capture(self, stream: Any = None) -> Any:
        """Record this thread's launches (not run) until :meth:`end_capture`, as a CUDA stream
        capture does; ``stream`` is ignored. Raises LaunchError inside another capture."""
        if _CAPTURE.launches is not None:
            raise LaunchError("a graph capture is already under way on this thread")
        _CAPTURE.launches = []
        return None

    def end_capture(self, token: Any, keep: bool = True) -> "CpuGraph | None":
        """The recorded launches as a :class:`CpuGraph` (None when ``keep`` is False)."""
        launches, _CAPTURE.launches = _CAPTURE.launches, None
        return CpuGraph(self, launches or []) if keep else None

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="kc-cpu")
            return self._pool


def _join(futures: list[Any], stop: Callable[[], None]) -> None:
    """Wait for every worker of a launch, also through Ctrl-C (which stops the launch): its arrays
    must outlive the workers. Re-raises the KeyboardInterrupt after."""
    interrupted = False
    for f in futures:
        while True:
            try:
                f.result()
                break
            except KeyboardInterrupt:
                interrupted = True
                stop()
    if interrupted:
        raise KeyboardInterrupt


#: How long a block may make no progress before the launch stops with a deadlock (seconds).
DEADLOCK_SECONDS = 10


def deadlock_seconds_from_env() -> int:
    """``KC_CPU_DEADLOCK_SECONDS``: how long (whole seconds) every runnable thread of a block may spin
    on atomics whose value does not change before the launch stops with a deadlock error; 0 waits
    forever (Ctrl-C still stops it). Default :data:`DEADLOCK_SECONDS`. Raises ValueError for a
    value that is not a whole number from 0 to 2**31 - 1."""
    text = os.environ.get("KC_CPU_DEADLOCK_SECONDS", "").strip()
    if not text:
        return DEADLOCK_SECONDS
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v < 2**31:
        raise ValueError(f"KC_CPU_DEADLOCK_SECONDS={text!r}: expected whole seconds, 0 or more")
    return v


def _runtime_memory(handle: CpuKernelHandle) -> list[PointerArg]:
    """The memory the runtime itself hands ``handle``'s kernel for a launch, not passed as an
    argument (now: the hostcall buffer of a kernel that prints, whose address this writes into the
    module's ``kc_hostcall_buffer``, and the printf buffer of a printf="buffered" kernel). The kernel may access all of it: under ``check_bounds`` each
    range joins the launch's bounds table beside the argument arrays, and a message about an
    access near one names it (``'<hostcall buffer>'[i]``)."""
    out = []
    if handle.printf_slot:  # printf="buffered": the buffer _execute has set
        pb = printf_buffer()
        out.append(PointerArg(pb.device_address, pb.size, 4, "<printf buffer>"))
    if not handle.hostcall_slot:
        return out
    buf = hostcall_buffer()  # printf: the process's hostcall buffer, served by its listener
    ctypes.c_uint64.from_address(handle.hostcall_slot).value = buf.device_address
    return out + [PointerArg(buf.device_address, buf.size, 8, "<hostcall buffer>")]


def _formats_at(address: int) -> dict:
    """The printf formats of a module's ``kc_printf_formats`` table at ``address`` (0: none)."""
    if not address:
        return {}
    return read_format_table(lambda off, n: ctypes.string_at(address + off, n))


_HOST: CpuTarget | None = None


def _host_target() -> CpuTarget:
    """The host's CpuTarget, for its triple, data layout and fresh target machines."""
    global _HOST
    if _HOST is None:
        _HOST = CpuTarget()
    return _HOST


def _llvm_ready() -> bool:
    try:
        llvm.initialize_native_target()
        return True
    except Exception:  # noqa: BLE001 - only for the device's description
        return False


def _pack_scalar(v: Any, t: Any) -> bytes:
    if isinstance(t, ScalarType):
        if t.name == "f16":
            return np.float16(v).tobytes()
        if t.name == "bf16":
            import ml_dtypes
            return np.array(v, dtype=ml_dtypes.bfloat16).tobytes()
        return struct.pack("<" + _SCALAR_FORMATS[t.name], v)
    raise TypeError(f"cannot pass a value of type {t} from the host")


def _dims(kernel: str, what: str, d: Any) -> tuple[int, int, int]:
    if isinstance(d, (int, np.integer)):
        d = (int(d),)
    try:
        t = tuple(int(x) for x in d)
    except TypeError:
        raise LaunchError(f"kernel '{kernel}': {what} must be an int or a tuple of up to 3 ints, "
                          f"not {d!r}") from None
    if not 1 <= len(t) <= 3:
        raise LaunchError(f"kernel '{kernel}': {what} {d!r} has {len(t)} dimensions; expected 1 to 3")
    return (t + (1, 1))[:3]  # type: ignore[return-value]


def _check_limits(h: CpuKernelHandle, grid: tuple, block: tuple, shared: int) -> None:
    name = h.name
    for what, dims, limit in (("block", block, MAX_BLOCK_DIM), ("grid", grid, MAX_GRID_DIM)):
        for axis, n, m in zip("xyz", dims, limit):
            if not 1 <= n <= m:
                raise LaunchConfigError(f"kernel '{name}': {what} dimension {axis} = {n} is outside [1, {m}] "
                                        f"({what} {dims})")
    n = block[0] * block[1] * block[2]
    if n > MAX_THREADS_PER_BLOCK:
        raise LaunchConfigError(f"kernel '{name}': block {block} has {n} threads; at most "
                                f"{MAX_THREADS_PER_BLOCK} are allowed")
    if shared < 0:
        raise LaunchConfigError(f"kernel '{name}': dynamic shared memory of {shared} bytes is negative")
    if h.static_shared + shared > MAX_SHARED_BYTES:
        raise LaunchConfigError(f"kernel '{name}': {shared} bytes of dynamic shared memory plus "
                                f"{h.static_shared} static exceed the {MAX_SHARED_BYTES} bytes a block may use")


def _xyz(a: Any) -> str:
    return f"({a[0]},{a[1]},{a[2]})"


def _loc(h: CpuKernelHandle, i: int) -> str:
    return h.locations[i] if 0 <= i < len(h.locations) else "<unknown location>"


def _what(table: list[PointerArg], addr: int, n: int) -> str:
    """The element an address of an n-byte access names: 'x'[i] of the nearest array (guard zones
    separate them), or the bare address."""
    best, dist = None, None
    for a in table:
        d = 0 if a.address <= addr < a.address + max(a.nbytes, 1) else \
            (a.address - addr if addr < a.address else addr - (a.address + a.nbytes) + 1)
        if dist is None or d < dist:
            best, dist = a, d
    if best is not None and dist is not None and dist <= 1 << 20:
        index = (addr - best.address) // best.itemsize
        return (f"'{best.name}'[{index}] (size {best.nbytes // best.itemsize})"
                + (f", {n} bytes" if n != best.itemsize else ""))
    return f"address {addr:#x} ({n} bytes; not in any array passed to the kernel)"


def _error_message(h: CpuKernelHandle, st: abi.LaunchState, table: list[PointerArg], grid: tuple,
                   block: tuple, asserts_before: int = 0) -> str:
    who = f"thread {_xyz(st.err_tid)} block {_xyz(st.err_bid)}"
    if st.err_kind == abi.ERR_MISALIGNED:
        access = abi.ACCESS_NAMES.get(st.err_access, "access to")
        addr, n = st.err_addr & (2**64 - 1), st.err_nbytes
        return (f"kernel '{h.name}': misaligned {access} {_what(table, addr, n)} at {_loc(h, st.err_loc)}, "
                f"{who}: the address {addr:#x} is not a multiple of the access's alignment, which a GPU "
                f"faults on")
    if st.err_kind == abi.ERR_FAULT:
        why = h.faults.get(st.err_loc, "an emulated instruction faulted")
        return f"kernel '{h.name}': {why} at {_loc(h, st.err_loc)}, {who} (a GPU faults on this)"
    if st.err_kind == abi.ERR_BOUNDS:
        access = abi.ACCESS_NAMES.get(st.err_access, "access to")
        addr, n = st.err_addr & (2**64 - 1), st.err_nbytes
        return f"kernel '{h.name}': out-of-bounds {access} {_what(table, addr, n)} at {_loc(h, st.err_loc)}, {who}"
    if st.err_kind == abi.ERR_DIVERGENT_BARRIER:
        return (f"kernel '{h.name}': divergent barrier in block {_xyz(st.err_bid)}: thread "
                f"{_xyz(st.err_tid)} waits at the barrier at {_loc(h, st.err_loc)} while thread "
                f"{_xyz(st.err_tid2)} waits at the one at {_loc(h, st.err_loc2)}; every thread of a block "
                f"that has not returned must reach the same barrier (a GPU would hang or misbehave)")
    if st.err_kind == abi.ERR_ASSERT:
        return _assertion_message(h, st, asserts_before)
    if st.err_kind == abi.ERR_INDEX:
        access = abi.ACCESS_NAMES.get(st.err_access, "access to")
        return (f"kernel '{h.name}': out-of-bounds {access} an array element at {_loc(h, st.err_loc)}, {who}: "
                f"index {st.err_addr} is out of range for an array of {st.err_nbytes} elements")
    if st.err_kind == abi.ERR_SHARED:
        access = abi.ACCESS_NAMES.get(st.err_access, "access to")
        static = (h.static_shared + 15) // 16 * 16  # where the dynamic part starts (scheduler.py)
        off = st.err_addr
        where = (f"dynamic shared memory at byte {off - static}" if off >= static
                 else f"shared memory at byte {off}")
        return (f"kernel '{h.name}': out-of-bounds {access} {where} ({st.err_nbytes} bytes) at "
                f"{_loc(h, st.err_loc)}, {who}: the block has {h.static_shared} bytes of static shared "
                f"memory and {st.dyn_shared} of dynamic shared memory (the launch's shared=)")
    if st.err_kind == abi.ERR_DEADLOCK:
        return _deadlock_message(h, st)
    if st.err_kind == abi.ERR_OUT_OF_MEMORY:
        return (f"kernel '{h.name}': out of host memory for a block of {block} threads "
                f"({h.static_shared + st.dyn_shared} bytes of shared memory)")
    return f"kernel '{h.name}': failed with error {st.err_kind} ({who})"


def _assertion_message(h: CpuKernelHandle, st: abi.LaunchState, since: int) -> str:
    """The line the failing thread printed (ir/assertion.py), as the hostcall printf service kept it
    during this launch (its ``assertion_serial`` was ``since`` before); where it did not
    (printf="buffered" prints after the launch), the location and the thread."""
    loc, block, thread = _loc(h, st.err_loc), tuple(st.err_bid), tuple(st.err_tid)
    text = _hostcall[1].printf.assertion_text(loc, block, thread, since) if _hostcall is not None else None
    if text is None:
        return (f"kernel '{h.name}': device assertion failed at {loc}, thread {_xyz(thread)} block "
                f"{_xyz(block)}; see the printed message")
    return text if text.startswith(f"{loc}: kernel '{h.name}'") else f"kernel '{h.name}': {text}"


def _deadlock_message(h: CpuKernelHandle, st: abi.LaunchState) -> str:
    """ERR_DEADLOCK (scheduler.py): the block's threads that can run all spin on atomics whose value
    does not change."""
    spinning, waiting = st.err_nbytes, st.err_addr
    first = f"thread {_xyz(st.err_tid)} at {_loc(h, st.err_loc)}"
    others = (f", ..., thread {_xyz(st.err_tid2)} at {_loc(h, st.err_loc2)}" if spinning > 1 else "")
    rest = f"; {waiting} other thread{'s' * (waiting != 1)} wait at a barrier or warp operation" if waiting else ""
    return (f"kernel '{h.name}': deadlock in block {_xyz(st.err_bid)}: no progress for "
            f"{st.deadlock_seconds} s: {spinning} thread{'s' * (spinning != 1)} spin on an atomic whose "
            f"value does not change ({first}{others}){rest}: nothing in the block will change it "
            f"(KC_CPU_DEADLOCK_SECONDS sets how long to wait)")


__all__ = ["CpuDevice", "CpuKernelHandle", "PointerArg", "GUARD_BYTES"]
