"""Module, Kernel and launches: the target-generic runtime above a :class:`Device`.

::

    mod = kcompiler.compile_file("examples/vadd.kc")
    mod.vadd[blocks, threads](a, b, out, n)                 # grid, block: int or 1-3 ints
    mod.scale[grid, (256,)](x, y, 2.0, n, VEC=8, stream=s)  # compile-time values by keyword

A launch infers the kernel's compile-time parameters from the argument types (an array of float16
gives ``T = f16`` for a ``ptr<T>`` parameter), compiles that specialisation once (memoised here and
in the on-disk cache), checks the arguments against its parameters (count, array dtypes, contiguity,
scalar ranges; a TypeError / ValueError names the kernel and the parameter) and launches.

Speed: the first launch with given argument types asks the device for a launcher specialised to them
(CUDA: a generated function that packs the arguments and calls ``cuLaunchKernel``); later launches
with arguments of the same types call it directly, with no inference and no lookups. Arguments of
other types make it raise ``ArgMismatch`` before launching, and the general path takes over.
"""
from __future__ import annotations

import operator
import threading
import weakref
from typing import Any, Callable

from ..backends.registry import find_backend
from ..diagnostics import CompileError
from . import arrays
from .arrays import ArgMismatch
from .device import Artifact, Device, LaunchError

_U32_MAX = (1 << 32) - 1


def _dims(kernel: str, what: str, v: Any) -> tuple[int, int, int]:
    """A grid or block shape as three positive ints. Raises TypeError / ValueError."""
    if type(v) is int:
        dims = [v]
    elif isinstance(v, (tuple, list)) and 1 <= len(v) <= 3:
        try:
            dims = [operator.index(d) for d in v]
        except TypeError:
            dims = None
    else:
        try:
            dims = [operator.index(v)]
        except TypeError:
            dims = None
    if dims is None:
        raise TypeError(f"{kernel}: {what} must be an int or a tuple of 1 to 3 ints, got {v!r}")
    for d in dims:
        if not 1 <= d <= _U32_MAX:
            raise ValueError(f"{kernel}: {what} dimensions must be at least 1 (and fit in 32 bits), "
                             f"got {v!r}")
    while len(dims) < 3:
        dims.append(1)
    return dims[0], dims[1], dims[2]


def _type_key(a: Any) -> Any:
    t = type(a)
    if t is int or t is float or t is bool:
        return t
    return t, getattr(a, "dtype", None)


#: Loaded kernels by device, then artifact key: modules compiled from the same source share them.
_HANDLES: "weakref.WeakKeyDictionary[Device, dict[str, Any]]" = weakref.WeakKeyDictionary()
_HANDLES_LOCK = threading.Lock()


class _Specialization:
    """One compiled specialisation of a kernel, loaded on the module's device on first use."""

    __slots__ = ("values", "artifact", "key", "_handle", "launchers")

    def __init__(self, values: dict[str, Any], artifact: Artifact, key: str):
        self.values = values
        self.artifact = artifact
        self.key = key
        self._handle: Any = None
        self.launchers: dict[Any, Callable | None] = {}

    def handle(self, device: Device) -> Any:
        if self._handle is None:
            with _HANDLES_LOCK:
                loaded = _HANDLES.setdefault(device, {})
                h = loaded.get(self.key)
                if h is None:
                    h = loaded[self.key] = device.load(self.artifact)
                self._handle = h
        return self._handle


class Launch:
    """``kernel[grid, block]``: call it with the kernel's arguments to launch."""

    __slots__ = ("kernel", "grid", "block")

    def __init__(self, kernel: "Kernel", grid: tuple[int, int, int], block: tuple[int, int, int]):
        self.kernel, self.grid, self.block = kernel, grid, block

    def __call__(self, *args: Any, shared: int = 0, stream: Any = None, **comptime: Any) -> None:
        """Launch with ``args`` (arrays and scalars, in the kernel's parameter order), ``shared``
        bytes of dynamic shared memory, on ``stream`` (None: the default stream; an int handle or a
        torch / CuPy / cuda-python stream), with compile-time values ``comptime`` by keyword.

        Raises TypeError / ValueError for arguments that do not fit the kernel, CompileError when the
        specialisation does not compile, LaunchError when the device refuses the launch."""
        k = self.kernel
        if comptime:
            try:
                fast = k._fast_kw.get(tuple(comptime.items()))
            except TypeError:  # an unhashable value: the general path explains it
                fast = None
        else:
            fast = k._fast
        if fast is not None:
            try:
                return fast(self.grid, self.block, args, shared, stream)
            except ArgMismatch:
                pass
        k._launch(self.grid, self.block, args, shared, stream, comptime)

    def bind(self, shared: int = 0, **comptime: Any) -> "BoundLaunch":
        """This launch with its dynamic shared memory and compile-time values fixed: a
        :class:`BoundLaunch`, called with the kernel's arguments alone (and ``stream=``). For a launch
        an op repeats at every call of one shape: it skips the lookup of the prepared launcher by
        the compile-time values that ``__call__`` makes."""
        return BoundLaunch(self, shared, comptime)

    def __repr__(self) -> str:
        return f"<launch of {self.kernel.name} grid={self.grid} block={self.block}>"


class BoundLaunch:
    """``kernel[grid, block].bind(shared=..., **comptime)``: call it as ``bound(*args, stream=None)``.
    Its first call takes :class:`Launch`'s path (which checks the arguments, compiles the
    specialisation and makes the prepared launcher: runtime/cuda.py); later calls go to that launcher
    directly, and back to :class:`Launch`'s path when it refuses the arguments (another type, a
    non-contiguous array...). Raises what :meth:`Launch.__call__` raises."""

    __slots__ = ("launch", "shared", "comptime", "_key", "_fast")

    def __init__(self, launch: Launch, shared: int, comptime: dict[str, Any]):
        self.launch, self.shared, self.comptime = launch, shared, dict(comptime)
        self._key = tuple(self.comptime.items())
        self._fast: Callable | None = None

    def __call__(self, *args: Any, stream: Any = None) -> None:
        fast = self._fast
        if fast is not None:
            try:
                return fast(self.launch.grid, self.launch.block, args, self.shared, stream)
            except ArgMismatch:
                pass
        self.launch(*args, shared=self.shared, stream=stream, **self.comptime)
        k = self.launch.kernel
        self._fast = k._fast_kw.get(self._key) if self._key else k._fast

    def __repr__(self) -> str:
        return f"<bound {self.launch!r} shared={self.shared}>"


class Kernel:
    """A kernel of a :class:`Module`. ``kernel[grid, block](*args)`` launches it;
    :meth:`specialize` compiles a specialisation ahead of a launch."""

    def __init__(self, module: "Module", name: str):
        self.module = module
        self.name = name
        self._specs: dict[str, _Specialization] = {}
        self._by_types: dict[Any, _Specialization] = {}
        self._launches: dict[Any, Launch] = {}
        # The launcher of the last launch, without and with compile-time keywords (by their items).
        self._fast: Callable | None = None
        self._fast_kw: dict[tuple, Callable] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<kernel {self.name} of {self.module!r}>"

    @property
    def comptime_names(self) -> list[str]:
        """Names of the kernel's compile-time parameters (those ``comptime`` values bind)."""
        return self.module._program.comptime_names(self.name)

    @property
    def param_names(self) -> list[str]:
        """Names of the kernel's runtime parameters (the arguments of a launch), in order."""
        return self.module._program.param_names(self.name)

    def __getitem__(self, config: Any) -> Launch:
        try:
            launch = self._launches.get(config)
        except TypeError:  # an unhashable config (lists)
            launch = None
        if launch is not None:
            return launch
        if not isinstance(config, tuple) or len(config) != 2:
            raise TypeError(f"{self.name}: launch as kernel[grid, block](args...), with grid and block "
                            f"each an int or a tuple of 1 to 3 ints; got kernel[{config!r}]")
        launch = Launch(self, _dims(self.name, "grid", config[0]), _dims(self.name, "block", config[1]))
        try:
            if len(self._launches) < 256:
                self._launches[config] = launch
        except TypeError:
            pass
        return launch

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """A kernel is not called directly: it needs a launch configuration. Always raises TypeError
        that says how to launch it (``vadd[grid, block](a, b, out, n)``)."""
        params = ", ".join(self.param_names)
        raise TypeError(f"kernel '{self.name}' needs a launch configuration: launch it as "
                        f"{self.name}[grid, block]({params}) (grid: blocks, block: threads per block, "
                        f"each an int or a tuple of 1 to 3 ints), or {self.name}.launch(grid, block, ...)")

    def launch(self, grid: Any, block: Any, *args: Any, shared: int = 0, stream: Any = None,
               **comptime: Any) -> None:
        """Same as ``kernel[grid, block](*args, shared=..., stream=..., **comptime)``."""
        self[grid, block](*args, shared=shared, stream=stream, **comptime)

    # --- specialisation ---
    def _spec(self, values: dict[str, Any]) -> _Specialization:
        prog = self.module._program
        key = prog.artifact_key(self.name, values)
        spec = self._specs.get(key)
        if spec is None:
            with self._lock:
                spec = self._specs.get(key)
                if spec is None:
                    spec = _Specialization(values, prog.artifact(self.name, values), key)
                    self._specs[key] = spec
        return spec

    def specialize(self, *args: Any, **comptime: Any) -> Artifact:
        """Compile the specialisation for arguments like ``args`` (optional: only their types
        matter) and compile-time values ``comptime`` by keyword, without launching. Returns its
        Artifact."""
        types = [arrays.arg_type(a) for a in args] if args else [None] * len(self.param_names)
        values = self.module._values(self.name, types, comptime)
        return self._spec(values).artifact

    def _launch(self, grid: tuple, block: tuple, args: tuple, shared: Any, stream: Any,
                comptime: dict) -> None:
        if type(shared) is not int:
            try:
                shared = operator.index(shared)
            except TypeError:
                raise TypeError(f"{self.name}: shared must be an int (bytes of dynamic shared memory), "
                                f"got {shared!r}") from None
        if shared < 0:
            raise ValueError(f"{self.name}: shared must be >= 0 bytes, got {shared}")
        try:
            tkey: Any = (tuple(map(_type_key, args)), tuple(sorted(comptime.items())))
            hash(tkey)
        except TypeError:
            tkey = None
        spec = self._by_types.get(tkey) if tkey is not None else None
        if spec is None:
            types = [arrays.arg_type(a) for a in args]
            values = self.module._values(self.name, types, comptime)
            spec = self._spec(values)
            if tkey is not None:
                self._by_types[tkey] = spec
        art = spec.artifact
        arrays.check_args(self.name, art.params, args)
        device = self.module.device
        handle = spec.handle(device)
        if shared and hasattr(device, "allow_dynamic_shared") and shared > handle.dynamic_limit:
            device.allow_dynamic_shared(handle, shared)

        make = getattr(device, "make_launcher", None)
        if make is not None and tkey is not None:
            fast = spec.launchers.get(tkey, False)
            if fast is False:
                fast = make(handle, art, args)
                spec.launchers[tkey] = fast
            if fast is not None:
                try:
                    fast(grid, block, args, shared, stream)
                except ArgMismatch:
                    pass  # e.g. an infinite float: the general path launches it
                else:
                    if not comptime:
                        self._fast = fast
                    elif len(self._fast_kw) < 64:
                        try:
                            self._fast_kw[tuple(comptime.items())] = fast
                        except TypeError:
                            pass
                    return

        largs, copybacks = device.marshal(art, args, stream=stream)
        ok = False
        try:
            device.launch(handle, art, grid, block, largs, shared=shared, stream=stream)
            ok = True
        finally:
            for cb in copybacks:
                if ok and callable(cb):
                    cb()
                elif hasattr(cb, "discard"):
                    cb.discard()


class Module:
    """Compiled kernels of one source for one target. ``module.NAME`` is the :class:`Kernel` NAME
    (also ``module["NAME"]``); an unknown name raises AttributeError listing the kernels.

    ``comptime``: compile-time values used when a launch gives none: ``{"BLOCK": 128}`` for every kernel
    that declares BLOCK, or ``{"kernel_name": {"BLOCK": 128}}`` for one kernel."""

    def __init__(self, program: Any, device: Device | Callable[[], Device] | None = None,
                 comptime: dict[str, Any] | None = None):
        self._program = program
        self._device = device
        self._defaults = dict(comptime or {})
        self._kernels: dict[str, Kernel] = {}
        names = set(program.kernel_names)
        for k, v in self._defaults.items():
            if isinstance(v, dict) and k not in names:
                raise TypeError(f"comptime: no kernel named {k!r}; the module has "
                                f"{', '.join(sorted(names)) or 'no kernels'}")
            if not isinstance(v, dict) and not any(k in program.comptime_names(n) for n in names):
                raise TypeError(f"comptime: no kernel has a compile-time parameter named {k!r}")

    # --- kernels ---
    @property
    def kernels(self) -> list[str]:
        """Names of the kernels of this module."""
        return list(self._program.kernel_names)

    @property
    def target(self) -> str:
        """The canonical target this module was compiled for: 'nvptx', 'amdgcn' or 'cpu' (or a
        plug-in's name)."""
        return self._program.target_name

    @property
    def arch(self) -> str:
        """The architecture its kernels are compiled for: e.g. 'sm_90a' (nvptx), 'gfx942' (amdgcn), the
        host CPU's name (cpu)."""
        return self._program.arch

    def target_has(self, feature: str) -> bool:
        """Whether this module's target has ``feature`` ('mma', 'wgmma', 'mfma', 'nvptx', 'cpu', ...):
        what ``comptime target.has(...)`` answers in its kernels, so that the host picks the path the
        kernel's own compile-time test takes (the CPU target with ``emulate_mma`` has 'mma' too)."""
        return self._program.target.has(feature)

    def kernel(self, name: str) -> Kernel:
        """The kernel ``name`` of this module (also ``module.name`` and ``module[name]``); the same
        :class:`Kernel` object at each call. Raises AttributeError (KeyError through ``module[name]``)
        naming the module's kernels when it has none of that name."""
        k = self._kernels.get(name)
        if k is None:
            recheck = getattr(self._program, "has_kernel", None)  # a ProgramHandle's; test doubles lack it
            if name not in self._program.kernel_names and not (recheck and recheck(name)):
                raise AttributeError(f"module has no kernel {name!r}; its kernels are: "
                                     f"{', '.join(self.kernels) or 'none'}")
            k = self._kernels[name] = Kernel(self, name)
        return k

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self.kernel(name)
        except AttributeError as e:
            raise KeyError(str(e)) from None

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("_"):
            raise AttributeError(name)
        k = self.kernel(name)
        self.__dict__[name] = k  # later lookups skip __getattr__
        return k

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self.kernels))

    def __repr__(self) -> str:
        return f"<kcompiler.Module {self._program.source.path} target={self.target} arch={self.arch} " \
               f"kernels={self.kernels}>"

    # --- the device ---
    @property
    def device(self) -> Device:
        """The device this module's kernels run on (created on first use; LaunchError if none)."""
        d = self._device
        if d is None:
            d = self._device = device_for(self.target)
        elif not isinstance(d, Device) and callable(d):
            d = self._device = d()
        return d

    def _values(self, kernel: str, types: list, given: dict) -> dict[str, Any]:
        names = self._program.comptime_names(kernel)
        merged = {}
        if names:
            for k, v in self._defaults.items():
                if isinstance(v, dict):
                    if k == kernel:
                        merged.update(v)
                elif k in names:
                    merged.setdefault(k, v)
        merged.update(given)
        return self._program.infer_comptime(kernel, types, merged)

    def artifact(self, kernel: str, **comptime: Any) -> Artifact:
        """The compiled Artifact of ``kernel`` with compile-time values ``comptime`` (none inferred)."""
        return self.kernel(kernel).specialize(**comptime)


def device_for(target: str) -> Device:
    """The default device of a canonical target, device 0 of its backend's runtime: CUDA device 0
    (nvptx), HIP device 0 (amdgcn), the CPU emulator. Raises LaunchError when there is none
    (HipUnavailable without HIP) or the target has no runtime."""
    try:
        cls = find_backend(target).device_class()
    except ValueError:
        cls = None
    if cls is None:
        raise LaunchError(f"no runtime for target {target!r} yet")
    return cls.get(0)


__all__ = ["Module", "Kernel", "Launch", "BoundLaunch", "device_for", "CompileError"]
