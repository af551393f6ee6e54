"""The backend records and the registry that finds them: the one list of targets.

Each target is one folder, ``kcompiler/backends/<name>/``, whose ``__init__.py`` exports a
:class:`Backend` record named ``BACKEND``. Everything that lists targets (``kc.TARGETS``, the
aliases, ``get_target``, the default arch, ``kc compile``'s ``--target`` and output suffixes,
``kc targets``, ``kc devices``, the runtime's default device) asks this registry, so adding a target
touches its folder and nothing else.

Where the records come from, in this order (as Triton's ``_discover_backends``):

1. :data:`BUILTIN_BACKENDS`, the package's own folders;
2. the ``kcompiler.backends`` entry-point group: an installed package declares
   ``[project.entry-points."kcompiler.backends"] mytarget = "mypkg.backend:BACKEND"`` (the object
   may be a record or a module exporting ``BACKEND``); read at the first listing, or when a name is
   not found among 1 and 3, since reading the group costs tens of milliseconds;
3. :func:`register_backend`, for a record made at run time (tests, notebooks).

A record names its ``Target`` and runtime ``Device`` classes by import path (``"pkg.mod:Class"``),
loaded at first use: reading the registry imports neither llvmlite nor a GPU runtime, and this
module, a stage before ``runtime``, never imports it.
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from ..ir.builtin_surface import add_provider as add_builtin_provider
from ..ir.intrinsics import add_provider as add_intrinsic_provider

#: The package's own backends, by folder under ``kcompiler/backends``; the first is ``kc compile``'s
#: default target.
BUILTIN_BACKENDS = ("nvptx", "amdgcn", "cpu")
#: The entry-point group plug-in packages declare their records in.
ENTRY_POINT_GROUP = "kcompiler.backends"


def load_object(path: str) -> Any:
    """The object at ``path``, ``"package.module:attribute"`` (a module for ``"package.module"``).
    Raises ImportError / AttributeError as importing it does."""
    module, _, attr = path.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


@dataclass(frozen=True)
class Backend:
    """What kcompiler knows of one target without importing it.

    Attributes:
        name: the canonical target name; its Target's ``name`` and its Device's ``target``.
        vendor: who makes the chips, as messages name them ("unknown NVIDIA arch 'sm_75'").
        target: import path of the ``Target`` subclass (``"kcompiler.backends.nvptx.target:NvptxTarget"``),
            made as ``Target(arch, **target_options)``.
        aliases: other names users may write for it (``cuda`` for nvptx).
        archs: each architecture and its features (what ``Target.has`` answers for it). Empty when
            the Target checks ``arch`` itself (the CPU target takes any LLVM CPU name).
        default_arch: the arch when none is given and :attr:`detect_arch` finds no device.
        detect_arch: returns the local device's arch, or None without one. Called only when an arch
            is needed and none was given; it must import a GPU runtime only when it is called.
        device: import path of the runtime ``Device`` class (``"kcompiler.runtime.cuda:CudaDevice"``),
            or None for a target that compiles only. Its ``count()`` says how many are here and
            ``get(ordinal)`` gives one.
        binary_kind: what ``Target.emit(ref, "obj")`` makes ('cubin', 'hsaco', 'obj').
        binary_suffixes: file suffixes of that binary; ``kc compile`` writes the first.
        asm_kind: what ``--emit asm`` prints ('PTX', 'AMDGCN assembly').
        asm_suffixes: file suffixes that ask ``kc compile -o`` for assembly.
        host_code: the binary is code for this machine's own processor, so cache keys name it.
        cache_tag: part of every cache key of the target's binaries: a plug-in sets it to its version
            (the compiler's fingerprint covers only kcompiler's own files); '' for the built-in ones.
        arch_help: how ``kc compile --help`` describes ``--arch`` (default: the archs and default).
        intrinsics: import path of the module that registers the backend's target intrinsics
            (``kcompiler.ir.intrinsics.register_intrinsics``; intrinsics named ``"<name>.*"``), imported
            at the first lookup of such a name; None for a backend without any.
        builtins: import path of the backend's builtins of the kernel language, a tuple of
            ``kcompiler.ir.builtin_surface.SurfaceBuiltin`` (``wgmma``, ``mfma``...): ``"pkg.mod:BUILTINS"``
            (or a module exporting ``BUILTINS``), imported when the frontend first resolves a name
            that the language does not declare; None for a backend without any. Every registered
            backend's are seen, whatever the target.

    Raises ValueError for an empty name, an arch list without the default arch, or a binary
    kind without a suffix.
    """

    name: str
    vendor: str
    target: str
    aliases: tuple[str, ...] = ()
    archs: Mapping[str, frozenset[str]] = field(default_factory=dict)
    default_arch: str = ""
    detect_arch: Callable[[], str | None] | None = None
    device: str | None = None
    binary_kind: str = "obj"
    binary_suffixes: tuple[str, ...] = (".o",)
    asm_kind: str = "assembly"
    asm_suffixes: tuple[str, ...] = (".s",)
    host_code: bool = False
    cache_tag: str = ""
    arch_help: str = ""
    intrinsics: str | None = None
    builtins: str | None = None

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.lower():
            raise ValueError(f"a backend needs a lower-case name, not {self.name!r}")
        if self.archs and self.default_arch not in self.archs:
            raise ValueError(f"backend {self.name}: default arch {self.default_arch!r} is not one of its "
                             f"archs ({', '.join(self.archs)})")
        if not self.binary_suffixes:
            raise ValueError(f"backend {self.name}: binary_suffixes is empty")
        object.__setattr__(self, "archs", MappingProxyType({a: frozenset(f) for a, f in self.archs.items()}))
        object.__setattr__(self, "aliases", tuple(a.lower() for a in self.aliases))

    @property
    def names(self) -> tuple[str, ...]:
        """The name and the aliases."""
        return (self.name, *self.aliases)

    def target_class(self) -> type:
        """The Target subclass (imported now, at the first call)."""
        return load_object(self.target)

    def device_class(self) -> type | None:
        """The runtime Device class (imported now), or None for a target that compiles only."""
        return load_object(self.device) if self.device else None

    def check_arch(self, arch: str) -> None:
        """Raises ValueError naming the archs when ``arch`` is not one of :attr:`archs` (nothing
        when :attr:`archs` is empty: the Target checks it)."""
        if self.archs and arch not in self.archs:
            raise ValueError(f"unknown {self.vendor} arch {arch!r}; expected one of: {', '.join(self.archs)}")

    def local_arch(self) -> str:
        """The arch used when none is given: the local device's (:attr:`detect_arch`), else
        :attr:`default_arch`."""
        return (self.detect_arch() if self.detect_arch else None) or self.default_arch

    def describe_archs(self) -> str:
        """One line for help texts: the archs and the default, or :attr:`arch_help`."""
        if self.arch_help or not self.archs:
            return f"{self.name}: {self.arch_help or 'any'}"
        return f"{self.name}: {', '.join(self.archs)} (default: the GPU present, else {self.default_arch})"


_lock = threading.RLock()
_builtin: list[Backend] | None = None
_plugins: list[Backend] | None = None  # the entry-point group's, read once
_registered: list[Backend] = []


def _builtins() -> list[Backend]:
    global _builtin
    with _lock:
        if _builtin is None:
            _builtin = [load_object(f"kcompiler.backends.{name}:BACKEND") for name in BUILTIN_BACKENDS]
        return _builtin


def _entry_point_backends() -> list[Backend]:
    global _plugins
    with _lock:
        if _plugins is None:
            from importlib.metadata import entry_points  # deferred: importing it costs ~30 ms

            found = []
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                obj = ep.load()
                rec = getattr(obj, "BACKEND", obj)
                if not isinstance(rec, Backend):
                    raise TypeError(f"entry point {ep.name} = {ep.value} of group {ENTRY_POINT_GROUP} is "
                                    f"not a kcompiler Backend record (nor a module exporting BACKEND)")
                found.append(rec)
            _plugins = found
        return _plugins


def _unique(records: list[Backend]) -> tuple[Backend, ...]:
    out: list[Backend] = []
    taken: set[str] = set()
    for rec in records:
        if not taken.intersection(rec.names):
            out.append(rec)
            taken.update(rec.names)
    return tuple(out)


def backends() -> tuple[Backend, ...]:
    """Every backend: the built-in ones, then the entry-point group's, then the registered ones
    (a name or alias already taken keeps its first owner)."""
    with _lock:
        return _unique(_builtins() + _entry_point_backends() + _registered)


def register_backend(backend: Backend) -> Backend:
    """Add ``backend`` (a record made at run time) to the registry; returns it. Raises ValueError
    when its name or an alias is already a target's name or alias."""
    with _lock:
        for rec in _builtins() + _registered:
            clash = set(rec.names) & set(backend.names)
            if clash:
                raise ValueError(f"target name {', '.join(sorted(clash))} is taken by backend {rec.name}")
        _registered.append(backend)
    return backend


def unregister_backend(name: str) -> None:
    """Remove the backend that :func:`register_backend` added under ``name`` (nothing if none)."""
    with _lock:
        _registered[:] = [b for b in _registered if b.name != name]


def _lookup(name: str, records: list[Backend] | tuple[Backend, ...]) -> Backend | None:
    for rec in records:
        if name in rec.names:
            return rec
    return None


def find_backend(name: str) -> Backend:
    """The backend of a target name or alias (any case). The entry-point group is read only when
    ``name`` is none of the built-in or registered ones. Raises ValueError listing the names
    accepted."""
    key = name.lower() if isinstance(name, str) else None
    with _lock:
        rec = _lookup(key, _builtins() + _registered) if key else None
        if rec is None and key:
            rec = _lookup(key, backends())
    if rec is None:
        raise ValueError(f"unknown target {name!r}; expected one of: {', '.join(sorted(target_aliases()))}")
    return rec


def target_names() -> tuple[str, ...]:
    """The canonical names of every backend, in registry order."""
    return tuple(b.name for b in backends())


def target_aliases() -> dict[str, str]:
    """Every name users may write (names and aliases), mapped to its canonical target name."""
    return {n: b.name for b in backends() for n in b.names}


__all__ = ["Backend", "BUILTIN_BACKENDS", "ENTRY_POINT_GROUP", "backends", "find_backend", "load_object",
           "register_backend", "target_aliases", "target_names", "unregister_backend"]


def _provide_intrinsics(name: str) -> None:
    """Load the intrinsic table of the backend that ``name``'s prefix names (nothing if none has one)."""
    try:
        rec = find_backend(name.split(".", 1)[0])
    except ValueError:
        return
    if rec.intrinsics:
        load_object(rec.intrinsics)


add_intrinsic_provider(_provide_intrinsics)


_builtins_cache: tuple[tuple[Backend, ...], tuple[Any, ...]] | None = None


def _provide_builtins() -> tuple[Any, ...]:
    """The language builtins of every registered backend (``Backend.builtins``), in registry order;
    each backend's object imported at the first call that sees it."""
    global _builtins_cache
    with _lock:
        recs = backends()
        if _builtins_cache is None or _builtins_cache[0] != recs:
            found: list[Any] = []
            for rec in recs:
                if rec.builtins:
                    obj = load_object(rec.builtins)
                    found.extend(getattr(obj, "BUILTINS", obj))
            _builtins_cache = (recs, tuple(found))
        return _builtins_cache[1]


add_builtin_provider(_provide_builtins)
