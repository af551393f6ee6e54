"""Autotuning a user's kernel: :func:`kcompiler.autotune` (``kc.autotune``) picks, for each class of arguments,
the fastest of a few configurations (compile-time values, launch shapes) by timing each on the
device, remembers the choice on disk, and launches with it.

::

    import kcompiler as kc
    mod = kc.compile_file("examples/saxpy.kc")
    saxpy = kc.autotune(mod.saxpy,
                        configs=[{"VEC": 2, "block": 128}, {"VEC": 4, "block": 256}, {"VEC": 8, "block": 256}],
                        key=["n"],
                        grid=lambda m: (m["n"] + m["VEC"] * m["block"] - 1) // (m["VEC"] * m["block"]),
                        restore=["y"])          # saxpy writes y in place: timing runs must not corrupt it
    saxpy(x, y, 2.0, n)                         # tunes at the first call for this n, then launches
    saxpy.best_config, saxpy.timings            # {'VEC': 4, 'block': 256}, [(config, seconds), ...]

How a configuration is timed (:func:`bench`): one launch first (it compiles the specialisation; a
configuration whose compile fails with CompileError or whose launch is refused with LaunchError, such
as one asking for more shared memory than a block may have, is skipped with a warning on the
``kcompiler.autotune`` logger and a progress note), then ``warmup`` launches, then ``repeats`` launches
each timed alone: between two CUDA events recorded on the launch's stream on CUDA; by the wall clock
from a synchronised device to the end of a synchronised launch elsewhere (HIP, the CPU target). The
time of a configuration is the median of its repeats, in seconds; the fastest wins, ties going to the
earlier configuration. When every configuration fails, :class:`~kcompiler.runtime.autotune.TuningFailed`
names each one and why.

The choice is recorded on disk by :mod:`kcompiler.runtime.autotune` (the cache folder,
``$KC_CACHE_DIR`` / ``~/.cache/kcompiler``, one checksummed JSON file per choice written through a
temporary file and renamed; a damaged file is a miss and tunes again). Its key: the kernel's name, the
text of its source and of the files it imports, the target, arch and device name, the compile options,
the module's compile-time defaults, the configurations, the values of the ``key`` arguments (an array's
shape and dtype, a scalar's value), the type of every argument, the call's own compile-time keywords
and kcompiler's version. The code of ``grid``, ``block`` and ``shared`` functions is not in it: after
changing one of them, delete the cache folder or change the configurations.
A process remembers its choices too: later calls with the same key launch at once.

``KC_TUNE=0`` (or ``off``, ``false``, ``no``): nothing is timed; a call uses the choice recorded on disk
for its key if there is one, else the first configuration (which is not recorded).

Launch shapes: ``grid``, ``block`` and ``shared`` (bytes of dynamic shared memory) are each an int, a
tuple of 1 to 3 ints, or a function of ``meta``, a dict of the call's arguments by parameter name and
the configuration's compile-time values (Triton's ``META``); ``block`` is computed first and is in
the ``meta`` that ``grid`` and ``shared`` get (as given: an int or a tuple). A configuration may give
its own ``grid``, ``block`` or ``shared`` (same forms), which win over the arguments of
:func:`autotune`; every other entry of a configuration is a compile-time parameter of the kernel.

Timing runs launch the kernel many times on the call's own arguments: a kernel that writes one of
its inputs (``y += ...``, an accumulating output) must name it in ``restore``: it is copied before
tuning and copied back before every run and once more before the launch that the call returns
(Triton's ``restore_value``). Outputs that a launch overwrites entirely need nothing. numpy arrays
are copied to a GPU and back at every launch, and those copies are timed: pass device arrays
(``kc.to_device``, torch or CuPy) to time the kernel alone. Tune before capturing into a graph
(``kc.graph``): a capture cannot time.
"""
from __future__ import annotations

import logging
import operator
import statistics
import threading
import time
from dataclasses import asdict
from typing import Any, Callable, Sequence

from . import arrays
from . import autotune as _autotune
from .autotune import CandidateRejected, TuningFailed
from .cache import KernelCache
from .device import Device, DeviceAssertionError, LaunchError
from .._version import __version__
from ..diagnostics import CompileError
from ..ir.types import Type

log = logging.getLogger("kcompiler.autotune")

#: Entries of a configuration that are launch shapes, not compile-time parameters.
LAUNCH_KEYS = ("grid", "block", "shared")


def bench(fn: Callable[[], None], device: Device, *, setup: Callable[[], None] | None = None,
          stream: Any = None, warmup: int = 3, repeats: int = 10) -> float:
    """The median time of ``fn()`` (one launch on ``device``, on ``stream``), in seconds.

    ``setup()`` (optional) runs before every run, untimed (restoring the arguments). ``warmup`` runs
    first, untimed; then ``repeats`` runs, each timed alone: on a CUDA device between two CUDA events
    recorded on ``stream`` (the thread's launch stream for None, as a launch's), elsewhere by
    :func:`time.perf_counter` from a synchronised device to the synchronised end of the run.
    Errors of ``fn`` propagate. Raises ValueError for ``warmup < 0`` or ``repeats < 1``."""
    if warmup < 0 or repeats < 1:
        raise ValueError(f"bench: warmup must be >= 0 and repeats >= 1, got {warmup} and {repeats}")
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    events = _cuda_events(device, stream) if getattr(device, "target", "") == "nvptx" else None
    times = []
    try:
        for _ in range(repeats):
            if setup is not None:
                setup()
            device.synchronize()
            if events is not None:
                times.append(events(fn))
            else:
                t0 = time.perf_counter()
                fn()
                device.synchronize()
                times.append(time.perf_counter() - t0)
    finally:
        if events is not None:
            events.close()
    return float(statistics.median(times))


class _CudaEvents:
    """Two CUDA events on one stream: ``events(fn)`` is the seconds between them around ``fn()``."""

    def __init__(self, device: Any, stream: Any):
        from . import cuda  # lazy: only a CUDA device times with events

        self._cuda, self._drv = cuda, cuda._drv
        device.make_current()
        self._stream = self._drv.CUstream(cuda._stream_handle(stream))
        self._start = cuda._check(self._drv.cuEventCreate(0), "cuEventCreate")
        try:
            self._end = cuda._check(self._drv.cuEventCreate(0), "cuEventCreate")
        except LaunchError:
            self._drv.cuEventDestroy(self._start)
            raise

    def __call__(self, fn: Callable[[], None]) -> float:
        check, drv = self._cuda._check, self._drv
        check(drv.cuEventRecord(self._start, self._stream), "cuEventRecord")
        fn()
        check(drv.cuEventRecord(self._end, self._stream), "cuEventRecord")
        check(drv.cuEventSynchronize(self._end), "cuEventSynchronize")
        return float(check(drv.cuEventElapsedTime(self._start, self._end), "cuEventElapsedTime")) * 1e-3

    def close(self) -> None:
        for e in (self._start, self._end):
            self._drv.cuEventDestroy(e)


def _cuda_events(device: Any, stream: Any) -> _CudaEvents | None:
    return _CudaEvents(device, stream) if hasattr(device, "make_current") else None


class Run:
    """One configuration's launch on the call's arguments, as a timer gets it: ``run()`` restores
    the ``restore`` arguments then launches (what a fake timer calls); ``run.setup()`` and
    ``run.launch()`` do each alone (what a real timer calls, timing only the launch)."""

    __slots__ = ("setup", "launch")

    def __init__(self, setup: Callable[[], None], launch: Callable[[], None]):
        self.setup, self.launch = setup, launch

    def __call__(self) -> None:
        self.setup()
        self.launch()


def autotune(kernel: Any, configs: Sequence[dict[str, Any]], key: Sequence[str] = (), *,
             grid: Any = None, block: Any = None, shared: Any = 0, restore: Sequence[str] = (),
             warmup: int = 3, repeats: int = 10,
             timer: Callable[[Run, dict[str, Any]], float] | None = None,
             cache: KernelCache | None = None) -> "Autotuned":
    """``kernel`` (a :class:`~kcompiler.Kernel`, ``module.name``) tuned over ``configs``: a callable
    that launches it with the fastest configuration for its arguments (see
    :mod:`kcompiler.runtime.tuning` for how it times and what it records).

    ``configs``: dicts, each of compile-time values (``{"BLOCK": 128}``) and optionally its own
    ``grid``, ``block``, ``shared``. ``key``: names of the kernel's parameters whose values (a
    scalar's value, an array's shape and dtype) decide the choice: a call with other values tunes
    again (Triton's ``key``). ``grid``, ``block``: the launch shape of configurations that give none;
    ``shared``: bytes of dynamic shared memory (default 0); each an int, a tuple, or a function of
    ``meta`` (the arguments by name and the configuration's values). ``restore``: names of array
    parameters the kernel writes in place, copied back around every timing run. ``warmup``,
    ``repeats``: the runs of :func:`bench`. ``timer(run, config)``: seconds for one configuration,
    replacing :func:`bench` (``run`` is a :class:`Run`; a test's fake timer calls ``run()`` and
    returns a number); ``cache``: a :class:`~kcompiler.runtime.cache.KernelCache` (default: the
    process's).

    Raises TypeError / ValueError now for a bad argument: not a kernel, no configurations, a
    configuration entry that is neither a compile-time parameter of the kernel nor a launch shape, a
    configuration without a grid or block, a ``key`` or ``restore`` name that is not a parameter."""
    return Autotuned(kernel, configs, key, grid=grid, block=block, shared=shared, restore=restore,
                     warmup=warmup, repeats=repeats, timer=timer, cache=cache)


class Autotuned:
    """A kernel with a set of configurations, made by :func:`kcompiler.autotune`. Calling it as
    ``tuned(*args, stream=None, **comptime)`` (the kernel's arguments in order, a stream, compile-time
    values that no configuration sets) picks the configuration for the arguments' key (from this
    process's memory, else the disk cache, else by timing, else the first under ``KC_TUNE=0``) and
    launches with it. Raises what a launch raises, and :class:`~kcompiler.runtime.autotune.TuningFailed`
    when every configuration fails to compile or launch."""

    def __init__(self, kernel: Any, configs: Sequence[dict[str, Any]], key: Sequence[str] = (), *,
                 grid: Any = None, block: Any = None, shared: Any = 0, restore: Sequence[str] = (),
                 warmup: int = 3, repeats: int = 10, timer: Callable[[Run, dict[str, Any]], float] | None = None,
                 cache: KernelCache | None = None):
        if not (hasattr(kernel, "comptime_names") and hasattr(kernel, "param_names") and hasattr(kernel, "module")):
            raise TypeError(f"autotune: expected a kernel (module.name), got {kernel!r}")
        self.kernel = kernel
        name = kernel.name
        if isinstance(configs, dict) or not isinstance(configs, (list, tuple)):
            raise TypeError(f"autotune({name}): configs must be a list of dicts, got {configs!r}")
        if not configs:
            raise ValueError(f"autotune({name}): configs is empty: give at least one configuration")
        comptime = set(kernel.comptime_names)
        self._params = list(kernel.param_names)
        for i, c in enumerate(configs):
            if not isinstance(c, dict):
                raise TypeError(f"autotune({name}): configuration {i} must be a dict, got {c!r}")
            bad = [k for k in c if k not in comptime and k not in LAUNCH_KEYS]
            if bad:
                raise TypeError(f"autotune({name}): configuration {i} sets {', '.join(map(repr, bad))}, which is "
                                f"not a compile-time parameter of {name} ({', '.join(sorted(comptime)) or 'none'}) "
                                f"nor a launch shape ({', '.join(LAUNCH_KEYS)})")
            for what, default in (("grid", grid), ("block", block)):
                if c.get(what, default) is None:
                    raise TypeError(f"autotune({name}): configuration {i} has no {what}: give {what}= to "
                                    f"autotune or a '{what}' entry in the configuration")
        for what, names in (("key", key), ("restore", restore)):
            if isinstance(names, str):
                raise TypeError(f"autotune({name}): {what} must be a list of parameter names, got {names!r}")
            bad = [n for n in names if n not in self._params]
            if bad:
                raise ValueError(f"autotune({name}): {what} names {', '.join(map(repr, bad))}, not a parameter of "
                                 f"{name}; its parameters are {', '.join(self._params) or 'none'}")
        if warmup < 0 or repeats < 1:
            raise ValueError(f"autotune({name}): warmup must be >= 0 and repeats >= 1, got {warmup} and {repeats}")
        #: The configurations, as given.
        self.configs: list[dict[str, Any]] = [dict(c) for c in configs]
        #: The names of the parameters whose values decide the choice.
        self.key: list[str] = list(key)
        self._key_idx = [self._params.index(n) for n in key]
        self._restore_idx = [(n, self._params.index(n)) for n in restore]
        self._grid, self._block, self._shared = grid, block, shared
        self._warmup, self._repeats, self._timer, self._cache = warmup, repeats, timer, cache
        self._cands = [_describe(i, c) for i, c in enumerate(self.configs)]
        self._set_names = {k for c in self.configs for k in c}
        self._chosen: dict[Any, int] = {}
        self._times: dict[Any, list[float | None]] = {}
        self._last: Any = None
        self._lock = threading.Lock()
        #: Why each configuration was skipped in the last tuning: index -> message.
        self.rejected: dict[int, str] = {}

    def __repr__(self) -> str:
        return f"<autotuned {self.kernel.name}: {len(self.configs)} configs, key={self.key}>"

    # --- inspection ---
    @property
    def best_config(self) -> dict[str, Any] | None:
        """The configuration the last call launched with (None before a call)."""
        return None if self._last is None else dict(self.configs[self._chosen[self._last]])

    @property
    def timings(self) -> list[tuple[dict[str, Any], float | None]]:
        """For the last call's key: each configuration with its median time in seconds (None where it
        was skipped), as timed in this process or recorded in the cache; empty where nothing was timed
        (``KC_TUNE=0`` without a record)."""
        times = self._times.get(self._last) or []
        return [(dict(c), t) for c, t in zip(self.configs, times)]

    # --- launching ---
    def __call__(self, *args: Any, stream: Any = None, **comptime: Any) -> None:
        clash = [k for k in comptime if k in self._set_names] if comptime else None
        if clash:
            raise TypeError(f"{self.kernel.name}: {', '.join(map(repr, clash))} is set by the autotuned "
                            f"configurations; do not pass it to the call")
        enabled = _autotune.tuning_enabled()
        k = self._memo_key(args, comptime, enabled)
        i = self._chosen.get(k)
        if i is None:
            with self._lock:
                i = self._chosen.get(k)
                if i is None:
                    i = self._choose(k, args, comptime, stream, enabled)
        self._last = k
        self._launch(self.configs[i], args, stream, comptime)

    def _memo_key(self, args: tuple, comptime: dict, enabled: bool) -> Any:
        try:
            vals = tuple(_key_value(args[j]) if j < len(args) else None for j in self._key_idx)
            k = (vals, tuple(map(_type_key, args)), tuple(sorted(comptime.items())), enabled)
            hash(k)
            return k
        except TypeError:
            return (repr(args), repr(comptime), enabled)

    def _shape(self, config: dict, meta_args: dict | None, args: tuple) -> tuple[Any, Any, Any]:
        """(grid, block, shared) of ``config`` for ``args``."""
        g, b, s = (config.get(n, d) for n, d in (("grid", self._grid), ("block", self._block), ("shared", self._shared)))
        if callable(g) or callable(b) or callable(s):
            meta = dict(zip(self._params, args)) if meta_args is None else dict(meta_args)
            meta.update((k, v) for k, v in config.items() if k not in LAUNCH_KEYS)
            if callable(b):
                b = b(meta)
            meta["block"] = b
            if callable(g):
                g = g(meta)
            if callable(s):
                s = s(meta)
        return g, b, s

    def _launch(self, config: dict, args: tuple, stream: Any, comptime: dict) -> None:
        g, b, s = self._shape(config, None, args)
        values = {k: v for k, v in config.items() if k not in LAUNCH_KEYS}
        self.kernel[g, b](*args, shared=s, stream=stream, **values, **comptime)

    # --- choosing ---
    def _problem(self, args: tuple, comptime: dict) -> dict[str, Any]:
        mod = self.kernel.module
        prog = mod._program
        device = mod.device
        defaults = {k: ({kk: _encode(vv) for kk, vv in v.items()} if isinstance(v, dict) else _encode(v))
                    for k, v in mod._defaults.items()}
        return {"op": "kernel", "kernel": self.kernel.name, "source": prog.manifest.get("source_key", ""),
                "target": mod.target, "arch": mod.arch, "device": str(getattr(device, "name", type(device).__name__)),
                "options": asdict(prog.options), "target_options": prog.target_opts, "defaults": defaults,
                "key": {n: _key_json(args[j]) if j < len(args) else None for n, j in zip(self.key, self._key_idx)},
                "types": [str(arrays.arg_type(a)) for a in args],
                "comptime": {k: _encode(v) for k, v in sorted(comptime.items())}, "version": __version__}

    def _choose(self, k: Any, args: tuple, comptime: dict, stream: Any, enabled: bool) -> int:
        problem = self._problem(args, comptime)
        name = self.kernel.name
        label = f"{name}" + (f" ({', '.join(f'{n}={v}' for n, v in problem['key'].items())})" if self.key else "")
        snaps: list[Callable[[], None]] = []  # taken before the first timing run, not on a cache hit
        device = self.kernel.module.device

        def setup() -> None:
            for restore_one in snaps:
                restore_one()
            if snaps:  # a torch or CuPy copy runs on its library's stream: done before a launch on ours
                device.synchronize()

        rejected: dict[int, str] = {}
        meta_args = dict(zip(self._params, args))

        def time_one(cand: dict[str, Any]) -> float:
            i = cand["config"]
            config = self.configs[i]
            g, b, s = self._shape(config, meta_args, args)
            values = {kk: v for kk, v in config.items() if kk not in LAUNCH_KEYS}
            launch_cfg = self.kernel[g, b]

            def launch() -> None:
                launch_cfg(*args, shared=s, stream=stream, **values, **comptime)

            run = Run(setup, launch)
            if len(snaps) < len(self._restore_idx):
                snaps[:] = [_snapshot(name, n, args[j]) for n, j in self._restore_idx]
            try:
                run()  # compiles (or loads) the specialisation: a failure here skips the configuration
                device.synchronize()
                if self._timer is not None:
                    return float(self._timer(run, dict(config)))
                return bench(launch, device, setup=setup, stream=stream, warmup=self._warmup, repeats=self._repeats)
            except DeviceAssertionError:
                raise  # the context is gone: no other configuration can run
            except (CompileError, LaunchError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                rejected[i] = f"{type(e).__name__}: {first}"
                log.warning("kcompiler: autotune %s: configuration %d %s skipped: %s", name, i,
                            _brief(config), rejected[i])
                raise CandidateRejected(rejected[i]) from None

        try:
            chosen = _autotune.autotune(problem, self._cands, time_one, enabled=enabled, cache=self._cache,
                                        unit="s", label=label)
        except TuningFailed:
            lines = "\n".join(f"  configuration {i} {_brief(self.configs[i])}: {m}" for i, m in sorted(rejected.items()))
            raise TuningFailed(f"autotune {name}: every configuration failed to compile or launch:\n{lines}") from None
        finally:
            self.rejected = rejected
            setup()  # the arguments as the caller gave them, for the launch that follows
        i = int(chosen["config"])
        rec = (self._cache if self._cache is not None else _autotune.CACHE).get_json(
            _autotune.tuning_key(problem, self._cands))
        times = rec.get("times") if isinstance(rec, dict) else None
        self._times[k] = list(times) if isinstance(times, list) and len(times) == len(self.configs) else []
        self._chosen[k] = i
        return i


def _describe(i: int, config: dict[str, Any]) -> dict[str, Any]:
    """A configuration as the JSON-able candidate the cache records: its index, its compile-time
    values, its launch shapes (a function by its name)."""
    out: dict[str, Any] = {"config": i}
    for k, v in config.items():
        if callable(v):
            out[k] = f"<fn {getattr(v, '__qualname__', type(v).__name__)}>"
        elif k in LAUNCH_KEYS:
            out[k] = list(v) if isinstance(v, (tuple, list)) else operator.index(v)
        else:
            out[k] = _encode(v)
    return out


def _encode(v: Any) -> Any:
    """A compile-time value as JSON, as the pipeline's cache keys write it: ints, floats, bools and
    strings as themselves, numpy scalars as Python ones, types as ``{"type": "f32"}``, anything else
    (a fn) as ``{"repr": ...}``."""
    if isinstance(v, Type):
        return {"type": str(v)}
    if isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "item") and not isinstance(v, type):
        return v.item()
    return {"repr": repr(v)}


def _brief(config: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}={getattr(v, '__qualname__', v) if callable(v) else v}" for k, v in config.items()) + "}"


def _key_value(x: Any) -> Any:
    """A hashable value of a key argument: an array's shape and dtype, a scalar itself."""
    if arrays.is_array(x):
        return tuple(x.shape), str(x.dtype)
    return x


def _key_json(x: Any) -> Any:
    """A key argument as JSON: ``{"shape": [...], "dtype": "float32"}`` for an array, a scalar's
    value (numpy scalars as Python ones), else its repr."""
    if arrays.is_array(x):
        return {"shape": [int(d) for d in x.shape], "dtype": str(x.dtype)}
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    if hasattr(x, "item"):
        return x.item()
    return repr(x)


def _type_key(a: Any) -> Any:
    t = type(a)
    return t if t in (int, float, bool) else (t, str(getattr(a, "dtype", "")))


def _snapshot(kernel: str, name: str, x: Any) -> Callable[[], None]:
    """A copy of array ``x`` now, and the function that copies it back into ``x`` (torch tensors,
    numpy arrays, kcompiler DeviceArrays, CuPy-like arrays). Raises TypeError for anything else."""
    if arrays.is_torch_tensor(x):
        saved = x.clone()
        return lambda: x.copy_(saved)
    if getattr(x, "_kc_device_array", False):
        host = x.copy_to_host()
        return lambda: x.copy_from_host(host)
    import numpy as np  # lazy: as the rest of the runtime

    if isinstance(x, np.ndarray):
        saved = x.copy()
        return lambda: np.copyto(x, saved)
    if arrays.is_array(x) and hasattr(x, "copy") and hasattr(x, "__setitem__"):
        saved = x.copy()

        def put() -> None:
            x[...] = saved
        return put
    raise TypeError(f"autotune({kernel}): restore names {name!r}, which is {arrays.describe(x)}: only arrays "
                    f"can be restored")


__all__ = ["autotune", "Autotuned", "Run", "bench", "LAUNCH_KEYS"]
