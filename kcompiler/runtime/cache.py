"""The compilation cache: compiled kernels on disk, and in memory per process.

Where: ``$KC_CACHE_DIR``, else ``$XDG_CACHE_HOME/kcompiler``, else ``~/.cache/kcompiler``.
``KC_CACHE=0`` turns the disk cache off (the in-memory one stays).

Entries are files named by a sha256 key (``<key[:2]>/<key>.<kind>``), written to a temporary file and
renamed into place (``os.replace``), so a failed or interrupted compile leaves no entry and readers
never see half a file. Two kinds are stored:

- ``art``: one compiled kernel specialisation, an :class:`~kcompiler.runtime.device.Artifact`.
  Format (no pickle): the magic ``KCA1``, a little-endian u32 length, that many bytes of UTF-8 JSON
  (target, arch, symbol, binary kind, params as ``[name, type]`` with types in the language's
  spelling, static shared bytes, meta), then the binary.
- ``json``: small JSON records (the program manifests of ``pipeline.py``).

A damaged or unreadable entry is treated as a miss and overwritten by the next compile.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import tempfile
import threading
from pathlib import Path
from typing import Any

from ..ir.types import (SCALARS, TENSOR_MAP, AddressSpace, ArrayType, PointerType, Type, VectorType, VOID)
from .device import Artifact, KernelParam

_MAGIC = b"KCA1"


# --- atomic files -------------------------------------------------------------------------------

def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``:
    the file is either absent/old or complete, never half-written."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # mkstemp makes the file 0600; give it the mode an ordinary open() would (or the old file's).
        try:
            mode = os.stat(path).st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


_UMASK: int | None = None


def _umask() -> int:
    global _UMASK
    if _UMASK is None:
        _UMASK = os.umask(0o022)
        os.umask(_UMASK)
    return _UMASK


# --- types in text ------------------------------------------------------------------------------

_PTR = re.compile(r"^ptr<(.*)>$")
_VEC = re.compile(r"^vec<(.*),\s*(\d+)>$")
_ARR = re.compile(r"^\[(.*);\s*(\d+)\]$")


def _split_last_comma(s: str) -> tuple[str, str | None]:
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        c = s[i]
        if c in ">]":
            depth += 1
        elif c in "<[":
            depth -= 1
        elif c == "," and depth == 0:
            return s[:i].strip(), s[i + 1:].strip()
    return s.strip(), None


def type_from_str(s: str) -> Type:
    """Parse a type printed by ``str(Type)`` (``f32``, ``ptr<f16, shared>``, ``vec<f16, 8>``,
    ``[f32; 16]``). Raises ValueError for text that is not one."""
    s = s.strip()
    if s in SCALARS:
        return SCALARS[s]
    if s == "void":
        return VOID
    if s == "tensor_map":
        return TENSOR_MAP
    m = _VEC.match(s)
    if m:
        elem = type_from_str(m.group(1))
        return VectorType(elem, int(m.group(2)))  # type: ignore[arg-type]
    m = _ARR.match(s)
    if m:
        return ArrayType(type_from_str(m.group(1)), int(m.group(2)))
    m = _PTR.match(s)
    if m:
        inner, space = _split_last_comma(m.group(1))
        if space is not None and space in {a.value for a in AddressSpace}:
            return PointerType(type_from_str(inner), AddressSpace(space))
        return PointerType(type_from_str(m.group(1)))
    raise ValueError(f"not a type: {s!r}")


# --- artifacts ----------------------------------------------------------------------------------

def _json_default(x: Any) -> Any:
    if isinstance(x, Type):
        return {"__type__": str(x)}
    if isinstance(x, (bytes, bytearray)):
        return {"__hex__": bytes(x).hex()}
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    raise TypeError(f"cannot store {type(x).__name__} in the cache")


def _json_hook(d: dict) -> Any:
    if len(d) == 1:
        if "__type__" in d:
            return type_from_str(d["__type__"])
        if "__hex__" in d:
            return bytes.fromhex(d["__hex__"])
    return d


def dump_artifact(a: Artifact) -> bytes:
    """Serialise an Artifact (JSON header + binary; see the module docstring)."""
    head = {"target": a.target, "arch": a.arch, "symbol": a.symbol, "binary_kind": a.binary_kind,
            "params": [[p.name, str(p.type)] for p in a.params], "static_shared": a.static_shared,
            "meta": a.meta}
    h = json.dumps(head, default=_json_default, sort_keys=True).encode()
    binary = a.binary.encode() if isinstance(a.binary, str) else bytes(a.binary)
    return _MAGIC + struct.pack("<I", len(h)) + h + binary


def load_artifact(data: bytes) -> Artifact:
    """Inverse of :func:`dump_artifact`. Raises ValueError on damaged data."""
    if data[:4] != _MAGIC or len(data) < 8:
        raise ValueError("not a kcompiler artifact")
    (n,) = struct.unpack_from("<I", data, 4)
    if 8 + n > len(data):
        raise ValueError("truncated kcompiler artifact")
    head = json.loads(data[8:8 + n].decode(), object_hook=_json_hook)
    params = [KernelParam(name, type_from_str(t)) for name, t in head["params"]]
    return Artifact(target=head["target"], arch=head["arch"], symbol=head["symbol"],
                    binary=data[8 + n:], binary_kind=head["binary_kind"], params=params,
                    static_shared=int(head["static_shared"]), meta=head["meta"])


# --- keys ---------------------------------------------------------------------------------------

def canonical(value: Any) -> Any:
    """A JSON-able, order-independent form of a key part (dicts sorted, Types spelled, bool != int)."""
    if isinstance(value, Type):
        return ["type", str(value)]
    if isinstance(value, bool):
        return ["bool", value]
    if isinstance(value, dict):
        return [[str(k), canonical(v)] for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))]
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if value is None or isinstance(value, (int, float, str)):
        return value
    return ["repr", repr(value)]


def make_key(*parts: Any) -> str:
    """sha256 (hex) of the canonical JSON of ``parts``."""
    return hashlib.sha256(json.dumps(canonical(list(parts)), separators=(",", ":")).encode()).hexdigest()


_fingerprint: str | None = None


def compiler_fingerprint() -> str:
    """Identifies this compiler build: its version and the size and modification time of each of
    its source files (the package's .py/.lark files and the stdlib's .kc), so an edited compiler
    never reuses another's binaries. Computed once per process (stat only; about 0.2 ms)."""
    global _fingerprint
    if _fingerprint is None:
        from .. import __version__

        root = Path(__file__).resolve().parent.parent
        h = hashlib.sha256(__version__.encode())
        dirs = [root]
        try:
            import kcompiler.stdlib as _std  # noqa: PLC0415

            dirs.append(Path(next(iter(_std.__path__))))
        except Exception:  # noqa: BLE001 - a missing stdlib package only weakens the key
            pass
        for d in dirs:
            for dirpath, dirnames, filenames in os.walk(d):
                dirnames[:] = sorted(x for x in dirnames if x != "__pycache__")
                for fn in sorted(filenames):
                    if fn.endswith((".py", ".lark", ".kc")):
                        st = os.stat(os.path.join(dirpath, fn))
                        h.update(f"{os.path.relpath(os.path.join(dirpath, fn), d)}:{st.st_size}:"
                                 f"{st.st_mtime_ns}\n".encode())
        _fingerprint = h.hexdigest()[:32]
    return _fingerprint


# --- the cache ----------------------------------------------------------------------------------

def default_cache_dir() -> Path:
    env = os.environ.get("KC_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "kcompiler"


class KernelCache:
    """Artifacts and manifests by key: a per-process dict in front of a folder on disk.

    ``directory`` None means :func:`default_cache_dir` read at each use (so tests and users may set
    ``KC_CACHE_DIR`` at any time); ``disk=False`` keeps entries in memory only.
    Counters ``hits``, ``disk_hits``, ``misses`` help tests and benchmarks."""

    def __init__(self, directory: str | os.PathLike | None = None, disk: bool | None = None):
        self._directory = Path(directory) if directory is not None else None
        self._disk = disk
        self._mem: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self.hits = self.disk_hits = self.misses = 0

    @property
    def directory(self) -> Path:
        return self._directory if self._directory is not None else default_cache_dir()

    @property
    def disk_enabled(self) -> bool:
        if self._disk is not None:
            return self._disk
        return os.environ.get("KC_CACHE", "1").lower() not in ("0", "off", "false", "no")

    def path(self, key: str, kind: str) -> Path:
        return self.directory / key[:2] / f"{key}.{kind}"

    def clear_memory(self) -> None:
        with self._lock:
            self._mem.clear()

    # artifacts
    def get_artifact(self, key: str) -> Artifact | None:
        a = self._mem.get(("art", key))
        if a is not None:
            self.hits += 1
            return a
        if self.disk_enabled:
            try:
                data = self.path(key, "art").read_bytes()
                a = load_artifact(data)
            except (OSError, ValueError, KeyError, TypeError):
                a = None
            if a is not None:
                self.disk_hits += 1
                self._mem[("art", key)] = a
                return a
        self.misses += 1
        return None

    def put_artifact(self, key: str, a: Artifact) -> None:
        self._mem[("art", key)] = a
        if self.disk_enabled:
            try:
                atomic_write(self.path(key, "art"), dump_artifact(a))
            except OSError:
                pass  # a read-only or full cache folder costs speed, never correctness

    # small JSON records
    def get_json(self, key: str) -> Any:
        v = self._mem.get(("json", key))
        if v is not None:
            return v
        if self.disk_enabled:
            try:
                v = json.loads(self.path(key, "json").read_text())
            except (OSError, ValueError):
                return None
            self._mem[("json", key)] = v
            return v
        return None

    def put_json(self, key: str, value: Any) -> None:
        self._mem[("json", key)] = value
        if self.disk_enabled:
            try:
                atomic_write(self.path(key, "json"), json.dumps(value, sort_keys=True))
            except OSError:
                pass


#: The process-wide cache used by the pipeline and the runtime.
CACHE = KernelCache()


__all__ = ["KernelCache", "CACHE", "atomic_write", "dump_artifact", "load_artifact", "type_from_str",
           "make_key", "canonical", "compiler_fingerprint", "default_cache_dir"]
