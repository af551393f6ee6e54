"""The compilation cache: compiled kernels on disk, and in memory per process.

Where: ``$KC_CACHE_DIR``, else ``$XDG_CACHE_HOME/kcompiler``, else ``~/.cache/kcompiler``.
``KC_CACHE=0`` turns the disk cache off (the in-memory one stays).

Entries are files named by a sha256 key (``<key[:2]>/<key>.<kind>``), written to a temporary file and
renamed into place (``os.replace``), so a failed or interrupted compile leaves no entry and readers
never see half a file. Every entry carries sha256 checksums of what it holds, checked at every load.
The kinds stored:

- ``art``: one compiled kernel specialisation, an :class:`~kcompiler.runtime.device.Artifact`, and
- ``emit``: one output of ``kc compile`` (text or binary) with the files it was compiled from.
  Both are *records*, format (no pickle): the magic ``KCA2``, the 32-byte sha256 of the header, a
  little-endian u32 header length, that many bytes of UTF-8 JSON (the entry: for an artifact its
  target, arch, symbol, binary kind, params as ``[name, type]`` with types in the language's
  spelling, static shared bytes and meta), then the payload (the binary), whose size and sha256 the
  header holds (``payload_size``, ``payload_sha256``).
- ``json``: small JSON records (the program manifests of ``pipeline.py``, autotuning results), stored as
  ``{"sha256": "<hex>", "value": VALUE}`` where the digest is that of VALUE's text as written.

A missing entry is a miss. A damaged one (a checksum that does not match, a truncated or unreadable
file, JSON of the wrong shape) is a miss too: it is reported by a one-line warning on the
``kcompiler.cache`` logger naming the file, and the compile that follows replaces it atomically.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import struct
import tempfile
import threading
from pathlib import Path
from typing import Any

from .._version import __version__
from ..cachedir import default_cache_dir
from ..ir.types import Type, type_from_str, type_spelling
from .device import Artifact, KernelParam

_MAGIC = b"KCA2"
_DIGEST = 32  # bytes of a sha256 digest

#: Reports damaged cache entries (one line each, naming the file). Without logging configured, the
#: message reaches stderr through logging's last-resort handler.
log = logging.getLogger("kcompiler.cache")


class DamagedEntry(ValueError):
    """A cache entry that fails its checksum or has the wrong shape; the message says how."""


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




# --- artifacts ----------------------------------------------------------------------------------

def _json_default(x: Any) -> Any:
    if isinstance(x, Type):
        return {"__type__": type_spelling(x)}
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


def dump_record(head: dict[str, Any], payload: bytes) -> bytes:
    """A record (see the module docstring): ``head`` (JSON-able; Types and bytes are spelled) with
    the payload's size and sha256 added, its own checksum, then ``payload``."""
    head = dict(head, payload_size=len(payload), payload_sha256=hashlib.sha256(payload).hexdigest())
    h = json.dumps(head, default=_json_default, sort_keys=True).encode()
    return _MAGIC + hashlib.sha256(h).digest() + struct.pack("<I", len(h)) + h + payload


def load_record(data: bytes) -> tuple[dict[str, Any], bytes]:
    """Inverse of :func:`dump_record`: ``(head, payload)`` once both checksums match. Raises
    DamagedEntry (a ValueError) for anything else: another format, truncation, a flipped byte."""
    pre = len(_MAGIC) + _DIGEST + 4
    if len(data) < pre or data[:4] != _MAGIC:
        raise DamagedEntry("not a kcompiler cache record")
    (n,) = struct.unpack_from("<I", data, pre - 4)
    h = data[pre:pre + n]
    if len(h) != n or hashlib.sha256(h).digest() != data[4:4 + _DIGEST]:
        raise DamagedEntry("header checksum mismatch")
    try:
        head = json.loads(h.decode(), object_hook=_json_hook)
    except ValueError as e:  # cannot happen with a matching checksum unless the writer was wrong
        raise DamagedEntry(f"header is not JSON: {e}") from None
    if not isinstance(head, dict):
        raise DamagedEntry("header is not a JSON object")
    payload = data[pre + n:]
    if head.get("payload_size") != len(payload):
        raise DamagedEntry(f"payload of {len(payload)} bytes, expected {head.get('payload_size')}")
    if hashlib.sha256(payload).hexdigest() != head.get("payload_sha256"):
        raise DamagedEntry("payload checksum mismatch")
    return head, payload


def dump_artifact(a: Artifact) -> bytes:
    """Serialise an Artifact as a record (JSON header + binary; see the module docstring)."""
    head = {"target": a.target, "arch": a.arch, "symbol": a.symbol, "binary_kind": a.binary_kind,
            "params": [[p.name, type_spelling(p.type)] for p in a.params], "static_shared": a.static_shared,
            "meta": a.meta}
    binary = a.binary.encode() if isinstance(a.binary, str) else bytes(a.binary)
    return dump_record(head, binary)


def load_artifact(data: bytes) -> Artifact:
    """Inverse of :func:`dump_artifact`. Raises DamagedEntry (a ValueError) on damaged data or a
    header of the wrong shape."""
    head, binary = load_record(data)
    try:
        for k in ("target", "arch", "symbol", "binary_kind"):
            if not isinstance(head[k], str):
                raise DamagedEntry(f"{k} is not a string")
        params = head["params"]
        if not isinstance(params, list) or not all(
                isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in params):
            raise DamagedEntry("params is not a list of [name, type]")
        shared = head["static_shared"]
        if type(shared) is not int or shared < 0:
            raise DamagedEntry("static_shared is not a size")
        if not isinstance(head["meta"], dict):
            raise DamagedEntry("meta is not an object")
        kparams = [KernelParam(name, type_from_str(t)) for name, t in params]
    except KeyError as e:
        raise DamagedEntry(f"no {e.args[0]!r} in the header") from None
    except ValueError as e:
        raise DamagedEntry(str(e)) from None
    return Artifact(target=head["target"], arch=head["arch"], symbol=head["symbol"], binary=binary,
                    binary_kind=head["binary_kind"], params=kparams, static_shared=shared,
                    meta=head["meta"])


def dump_json(value: Any) -> bytes:
    """A JSON entry: ``{"sha256": <digest of VALUE's text>, "value": VALUE}``."""
    text = json.dumps(value, sort_keys=True)
    return (f'{{"sha256": "{hashlib.sha256(text.encode()).hexdigest()}", "value": {text}}}').encode()


_JSON_PREFIX = re.compile(rb'\{"sha256": "([0-9a-f]{64})", "value": ')


def load_json(data: bytes) -> Any:
    """Inverse of :func:`dump_json`. Raises DamagedEntry for anything else."""
    m = _JSON_PREFIX.match(data)
    if m is None or not data.endswith(b"}"):
        raise DamagedEntry("not a checksummed JSON entry")
    text = data[m.end():-1]
    if hashlib.sha256(text).hexdigest() != m.group(1).decode():
        raise DamagedEntry("checksum mismatch")
    try:
        return json.loads(text.decode())
    except ValueError as e:
        raise DamagedEntry(f"not JSON: {e}") from None


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
        root = Path(__file__).resolve().parent.parent
        h = hashlib.sha256(__version__.encode())
        dirs = [root]
        try:
            import kcompiler.stdlib as _std  # noqa: PLC0415 - lazy: an optional data package, may be absent

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



class KernelCache:
    """Artifacts and manifests by key: a per-process dict in front of a folder on disk.

    ``directory`` None means :func:`default_cache_dir` read at each use (so tests and users may set
    ``KC_CACHE_DIR`` at any time); ``disk=False`` keeps entries in memory only.
    Counters ``hits``, ``disk_hits``, ``misses``, ``damaged_entries`` help tests and benchmarks."""

    def __init__(self, directory: str | os.PathLike | None = None, disk: bool | None = None):
        self._directory = Path(directory) if directory is not None else None
        self._disk = disk
        self._mem: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self.hits = self.disk_hits = self.misses = self.damaged_entries = 0

    @property
    def directory(self) -> Path:
        """The folder of the on-disk entries: the one given, else :func:`default_cache_dir` now
        (``$KC_CACHE_DIR``, else ``~/.cache/kcompiler``)."""
        return self._directory if self._directory is not None else default_cache_dir()

    @property
    def disk_enabled(self) -> bool:
        """Whether entries are read from and written to disk: the ``disk`` given, else ``KC_CACHE``
        (``0``, ``off``, ``false`` or ``no`` turn it off; default on)."""
        if self._disk is not None:
            return self._disk
        return os.environ.get("KC_CACHE", "1").lower() not in ("0", "off", "false", "no")

    def path(self, key: str, kind: str) -> Path:
        """The file of entry ``key`` of ``kind`` (its suffix: 'ptx', 'json', ...):
        ``<directory>/<key[:2]>/<key>.<kind>``."""
        return self.directory / key[:2] / f"{key}.{kind}"

    def clear_memory(self) -> None:
        """Forget the entries held in this process's memory (the files on disk stay)."""
        with self._lock:
            self._mem.clear()

    def damaged(self, key: str, kind: str, reason: str) -> None:
        """Report the entry ``key.kind`` as damaged (one warning line naming its file) and drop it
        from memory, so that the caller's recompile replaces it."""
        with self._lock:
            self._mem.pop((kind, key), None)
        self.damaged_entries += 1
        log.warning("kcompiler: damaged cache entry %s (%s); recompiling and replacing it",
                    self.path(key, kind), reason)

    def _read(self, key: str, kind: str) -> bytes | None:
        """The bytes of an entry on disk; None when it is absent (or unreadable: then reported)."""
        try:
            return self.path(key, kind).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            self.damaged(key, kind, f"unreadable: {e.strerror or e}")
            return None

    def _write(self, key: str, kind: str, data: bytes) -> None:
        try:
            atomic_write(self.path(key, kind), data)
        except OSError:
            pass  # a read-only or full cache folder costs speed, never correctness

    # artifacts
    def get_artifact(self, key: str) -> Artifact | None:
        """The Artifact stored under ``key``, or None (a miss; a damaged entry is reported)."""
        a = self._mem.get(("art", key))
        if a is not None:
            self.hits += 1
            return a
        if self.disk_enabled:
            data = self._read(key, "art")
            if data is not None:
                try:
                    a = load_artifact(data)
                except ValueError as e:
                    self.damaged(key, "art", str(e))
                else:
                    self.disk_hits += 1
                    self._mem[("art", key)] = a
                    return a
        self.misses += 1
        return None

    def put_artifact(self, key: str, a: Artifact) -> None:
        """Store ``a`` under ``key`` (atomically replacing any entry there)."""
        self._mem[("art", key)] = a
        if self.disk_enabled:
            self._write(key, "art", dump_artifact(a))

    # records: a JSON head and a payload
    def get_record(self, key: str, kind: str) -> tuple[dict[str, Any], bytes] | None:
        """The ``(head, payload)`` record stored as ``key.kind``, or None (a miss; a damaged entry is
        reported)."""
        r = self._mem.get((kind, key))
        if r is not None:
            return r
        if self.disk_enabled:
            data = self._read(key, kind)
            if data is not None:
                try:
                    r = load_record(data)
                except ValueError as e:
                    self.damaged(key, kind, str(e))
                    return None
                self._mem[(kind, key)] = r
                return r
        return None

    def put_record(self, key: str, kind: str, head: dict[str, Any], payload: bytes) -> None:
        """Store a record as ``key.kind`` (see :func:`dump_record`)."""
        data = dump_record(head, payload)
        self._mem[(kind, key)] = load_record(data)
        if self.disk_enabled:
            self._write(key, kind, data)

    # small JSON records
    def get_json(self, key: str) -> Any:
        """The JSON value stored under ``key``, or None (a miss; a damaged entry is reported)."""
        v = self._mem.get(("json", key))
        if v is not None:
            return v
        if self.disk_enabled:
            data = self._read(key, "json")
            if data is None:
                return None
            try:
                v = load_json(data)
            except ValueError as e:
                self.damaged(key, "json", str(e))
                return None
            self._mem[("json", key)] = v
            return v
        return None

    def put_json(self, key: str, value: Any) -> None:
        """Store the JSON-able ``value`` under ``key``."""
        self._mem[("json", key)] = value
        if self.disk_enabled:
            self._write(key, "json", dump_json(value))


#: The process-wide cache used by the pipeline and the runtime.
CACHE = KernelCache()


__all__ = ["KernelCache", "CACHE", "DamagedEntry", "atomic_write", "dump_artifact", "load_artifact",
           "dump_record", "load_record", "dump_json", "load_json", "type_from_str",
           "make_key", "canonical", "compiler_fingerprint", "default_cache_dir"]
