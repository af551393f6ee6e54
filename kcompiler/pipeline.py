"""Source to artifact: the stages of a compile, each printable, and the cache in front of them.

    source ──frontend.load_program──▶ Program ──frontend.lower──▶ ir.Module ──passes, verify──▶
    ir.Module ──backends.llvm.compile_ir──▶ LLVM module ──Target.emit──▶ PTX / cubin / object

:func:`compile_kernel` runs every stage for one kernel specialisation and returns an
:class:`~kcompiler.runtime.device.Artifact`; :func:`emit` stops at any stage for ``kc compile --emit``.

:class:`ProgramHandle` is what a runtime :class:`~kcompiler.runtime.module.Module` holds: a source,
a target and options, with two layers of cache (``runtime/cache.py``):

- a *manifest* per (source text, path, target, arch): the kernels and their compile-time parameters,
  the files the source imports with their sha256, and the compile-time values inferred so far for
  argument types seen before. A manifest is written only after the program parsed and checked, so a
  warm start trusts it after re-hashing the imported files, and runs no frontend at all;
- an *artifact* per (source and imports, kernel, compile-time values, target, arch, target options,
  options, compiler version): the binary, loaded without running the frontend or LLVM.
"""
from __future__ import annotations

import hashlib
import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from .backends import canonical_target, default_arch, find_backend
from .backends.target import CompileOptions, Target
from .diagnostics import CompileError
from .ir.types import Type
from .gcscope import fewer_collections
from .limits import check_inlined_size, check_region_depth, check_resources, deep_recursion
from .ir.types import type_from_str
from .runtime.cache import CACHE, KernelCache, compiler_fingerprint, make_key
from .runtime.device import Artifact, KernelParam
from .backends import get_target
from .ir.printer import print_module
from . import progress
from .ir.verifier import verify

#: The stages ``emit`` can stop after, in order.
STAGES = ("ast", "ir", "llvm", "asm", "obj")


# --- sources ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """A kernel-language source: its text, the path messages print, and the folder its own
    (non-std) imports are searched in."""

    text: str
    path: str = "<string>"
    base_dir: str = field(default_factory=os.getcwd)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "Source":
        """Read ``path`` (UTF-8). Raises OSError if it cannot be read."""
        p = Path(path)
        return cls(p.read_text(encoding="utf-8"), str(path), str(p.resolve().parent))

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def load(source: Source, keep_going: bool = False) -> Any:
    """Parse ``source`` into the frontend's Program. Raises CompileError (with ``keep_going``, only for
    syntax and import errors: the others wait in ``Program.errors`` for the type checker's)."""
    from .frontend import load_program  # lazy: lark, which a warm compile from the cache never loads

    return load_program(source.text, source.path, keep_going)


def program_imports(program: Any) -> list[tuple[str, str]]:
    """(resolved path, text) of every file ``program`` read besides its own source, stdlib included."""
    return sorted(program.imported_files.items())


# --- compile-time values -------------------------------------------------------------------------

def encode_value(v: Any) -> Any:
    """A compile-time value as JSON: ints and bools as themselves, types as {"type": "f32"}."""
    if isinstance(v, Type):
        return {"type": str(v)}
    if isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "item") and not isinstance(v, type):  # numpy scalars (not numpy's classes)
        return v.item()
    raise TypeError(f"compile-time value {v!r} of type {type(v).__name__} is not an int, bool or type")


def decode_value(v: Any) -> Any:
    if isinstance(v, dict) and "type" in v:
        return type_from_str(v["type"])
    return v


def parse_param_value(text: str) -> Any:
    """A ``-P NAME=VALUE`` value: an integer (``128``, ``0x80``), ``true``/``false``, a type name
    (``f16``, ``ptr<f32>``), or a fn's name for a compile-time fn parameter (``relu``,
    ``epilogue.bias``: returned as the string). Raises ValueError otherwise."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(t, 0)
    except ValueError:
        pass
    try:
        return type_from_str(t)
    except ValueError:
        pass
    if re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)?", t):
        return t
    raise ValueError(f"{text!r} is not an integer, true/false, a type name or a fn name")


# --- the stages ---------------------------------------------------------------------------------

def resolve_target(target: str | Target, arch: str | None = None, **target_opts: Any) -> Target:
    """A Target object from a name or alias (``cuda`` → nvptx) and arch, or ``target`` itself."""
    if isinstance(target, Target):
        return target

    return get_target(target, arch, **target_opts)


@deep_recursion()
@fewer_collections()
def lower_to_ir(program: Any, target: Target, kernels: dict[str, dict[str, Any]]) -> Any:
    """Lower the given kernel specialisations, run the default passes, verify. Returns ir.Module.

    Raises CompileError, also where inlining nests regions deeper than kcompiler/limits.py allows or a
    kernel passes its target's resource limits (local arrays, parameters: limits.check_resources)."""
    from .frontend import lower  # lazy: lark and numpy, which a warm compile from the cache never loads
    from .ir.passes import run_default  # lazy: numpy (constant folding), as above

    module = lower(program, target, kernels=kernels)
    check_region_depth(module)
    verify(module)
    check_inlined_size(module)  # before inlining makes the copies
    run_default(module, target)
    check_region_depth(module)
    check_resources(module, target)  # local arrays, parameters: after inlining, before LLVM
    verify(module)
    return module


def _emit_binary(target: Target, ref: Any, module: Any = None) -> tuple[bytes, str]:
    """The loadable binary of an optimised LLVM module and its kind ('cubin', 'ptx', 'obj'...).
    What the target's tools reject (LLVM's code generator, ptxas, ld.lld) comes back as an
    InternalCompilerError naming the kernels of ``module`` (the IR module) and the stage."""
    from .backends.llvm import emission  # lazy: llvmlite, as above
    try:
        with emission(module, target, "obj"):
            out = target.emit(ref, "obj")
        kind = target.binary_kind
    except Exception as e:
        # No assembler here (no ptxas): the CUDA driver assembles PTX itself when the
        # module is loaded, so the text is a loadable binary too.
        if type(e).__name__ != "CubinUnavailable":
            raise
        with emission(module, target, "asm"):
            out, kind = target.emit(ref, "asm"), "ptx"
    return (out.encode() if isinstance(out, str) else bytes(out)), kind


def compile_kernel(program: Any, kernel_name: str, comptime: dict[str, Any], target: Target,
                   options: CompileOptions | None = None) -> Artifact:
    """Compile one specialisation of ``kernel_name`` (``comptime``: its compile-time values) for
    ``target``: frontend lowering → IR passes → verifier → LLVM → ``target`` emission.

    Raises CompileError for a program the compiler rejects."""
    module = lower_to_ir(program, _frontend_target(target, options), {kernel_name: dict(comptime)})
    return artifact_of_ir(module, kernel_name, target, options, comptime)


def comptime_keyword(comptime: Any, params: Any, where: str, stacklevel: int = 3) -> Any:
    """The compile-time values given as ``comptime=`` or as ``params=``, the keyword's deprecated
    older name (a DeprecationWarning names ``where``, the function called). Raises TypeError when
    both are given."""
    if params is None:
        return comptime
    if comptime is not None:
        raise TypeError(f"{where}: give compile-time values as comptime= or params=, not both")
    warnings.warn(f"{where}(params=...) is deprecated: the keyword is comptime=", DeprecationWarning,
                  stacklevel=stacklevel)
    return params


def _frontend_target(target: Target, options: CompileOptions | None) -> Target:
    """The target as the frontend sees it: with ``fast_math`` on, ``target.has("fast_math")`` is
    true, so std.math picks its fast versions (docs/math.md); with ``release`` on,
    ``target.has("release")`` is, and device asserts compile to nothing (C's NDEBUG)."""
    extra = {name for name in ("fast_math", "release") if options is not None and getattr(options, name)}
    if not extra:
        return target
    import copy
    t = copy.copy(target)
    t.features = frozenset(target.features) | extra
    return t


@deep_recursion()
def artifact_of_ir(module: Any, kernel_name: str, target: Target, options: CompileOptions | None = None,
                   comptime: dict[str, Any] | None = None) -> Artifact:
    """Compile a (lowered, verified) IR module holding kernel ``kernel_name`` (its
    ``attrs['source_name']`` or its symbol) into an Artifact: LLVM → ``target`` emission."""
    from .backends.llvm import compile_ir  # lazy: llvmlite, as the frontend above

    options = options or CompileOptions()
    fn = _find_kernel(module, kernel_name)
    ref = compile_ir(module, target, options)
    binary, kind = _emit_binary(target, ref, module)
    names = fn.attrs.get("param_names") or [v.hint for v in fn.params]
    kparams = [KernelParam(str(n) if n else f"arg{i}", v.type)
               for i, (n, v) in enumerate(zip(names, fn.params))]
    meta = {"kernel": kernel_name, "warp_size": target.warp_size,
            "comptime": {k: encode_value(v) for k, v in (comptime or {}).items()},
            "check_bounds": options.check_bounds,
            # a kernel that waits for the launch before it may start early (runtime/cuda.py)
            "pdl": any(op.name == "grid_dependency_wait" for f in module.functions for op in f.body.walk())}
    return Artifact(target=target.name, arch=target.arch, symbol=fn.name, binary=binary,
                    binary_kind=kind, params=kparams,
                    static_shared=int(fn.attrs.get("shared_bytes", 0) or 0), meta=meta)


def _find_kernel(module: Any, kernel_name: str) -> Any:
    for f in module.kernels:
        if f.attrs.get("source_name", f.name) == kernel_name:
            return f
    raise CompileError(f"kernel '{kernel_name}' was not produced by lowering")


def select_kernels(program: Any, kernel: str | None, comptime: dict[str, Any]) -> dict[str, dict]:
    """The kernels to compile (all, or ``kernel``) with the compile-time values of ``comptime`` each
    declares.

    Raises CompileError for an unknown kernel, ValueError for a parameter no selected kernel has."""
    names = list(program.kernels)
    if kernel is not None:
        if kernel not in program.kernels:
            raise CompileError(f"no kernel named '{kernel}'; the file defines: "
                               f"{', '.join(names) or 'no kernels'}")
        names = [kernel]
    out: dict[str, dict] = {}
    used: set[str] = set()
    for n in names:
        declared = {p.name for p in program.signature(n).comptime}
        out[n] = {k: v for k, v in comptime.items() if k in declared}
        used |= declared & comptime.keys()
    unknown = sorted(set(comptime) - used)
    if unknown:
        raise ValueError(f"no kernel {'named ' + repr(kernel) + ' ' if kernel else ''}has a compile-time "
                         f"parameter {', '.join(unknown)}")
    return out


@deep_recursion()
def emit(source: Source | Any, stage: str, target: str | Target = "nvptx", arch: str | None = None,
         kernel: str | None = None, comptime: dict[str, Any] | None = None,
         options: CompileOptions | None = None, *, params: dict[str, Any] | None = None) -> str | bytes:
    """Run the pipeline up to ``stage`` and return its printed form.

    ``source``: a Source or an already loaded Program. ``stage``: 'ast' (the parsed program), 'ir'
    (kcompiler IR after passes), 'llvm' (optimised LLVM IR), 'asm' (PTX / host assembly, text) or
    'obj' (cubin / object, bytes). ``kernel``: one kernel (default all); ``comptime``: compile-time
    values applied to each kernel that declares them (``params=``: its deprecated older name, with a
    DeprecationWarning). Raises CompileError, ValueError (bad stage / compile-time value), TypeError
    (both ``comptime`` and ``params``)."""
    comptime = comptime_keyword(comptime, params, "emit", stacklevel=4)  # 4: deep_recursion's frame
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; expected one of: {', '.join(STAGES)}")
    program = load(source, keep_going=True) if isinstance(source, Source) else source
    if stage == "ast":
        from .frontend import dump_ast  # lazy: lark, which a warm compile from the cache never loads

        if program.errors:
            raise CompileError(program.errors)
        return dump_ast(program)
    tgt = resolve_target(target, arch)
    options = options or CompileOptions()
    from .frontend import check  # lazy: lark, which a warm compile from the cache never loads

    frontend_target = _frontend_target(tgt, options)
    check(program, frontend_target)  # as the lowering sees the target: fast_math and release too
    kernels = select_kernels(program, kernel, dict(comptime or {}))
    module = lower_to_ir(program, frontend_target, kernels)
    if stage == "ir":
        return print_module(module)
    from .backends.llvm import compile_ir, emission  # lazy: llvmlite, as the frontend above

    with progress.step(f"compiling {', '.join(progress.spelled(k, v) for k, v in kernels.items())} for "
                       f"{tgt.name} {tgt.arch}"):
        ref = compile_ir(module, tgt, options)
        if stage == "llvm":
            return str(ref)
        with emission(module, tgt, stage):
            return tgt.emit(ref, stage)


def emit_cached(source: Source, stage: str, target: str, arch: str | None = None,
                kernel: str | None = None, comptime: dict[str, Any] | None = None,
                options: CompileOptions | None = None, resolve: Callable[..., Target] | None = None,
                cache: KernelCache | None = None, *, params: dict[str, Any] | None = None) -> str | bytes:
    """:func:`emit` through the cache (``kc compile``'s outputs): a warm call reads the output
    without importing the frontend, LLVM or a GPU runtime.

    ``target``: a target name or alias; ``arch``: as for :func:`resolve_target` (None: the GPU's own,
    else the target's default). ``resolve(target, arch)`` makes the Target on a miss (default
    :func:`resolve_target`; it may raise ValueError for an unknown arch). The key covers the
    compiler's own files, the source text, path and folder, the target, the arch, the host processor
    (cpu), the stage, the kernel, ``comptime`` and ``options``; the entry lists every file the program
    imported (stdlib included) with its sha256, and a hit re-hashes them. ``params=``: the deprecated
    older name of ``comptime``. Raises what :func:`emit` raises; a failed compile stores nothing."""
    comptime = dict(comptime_keyword(comptime, params, "emit_cached") or {})
    cache = cache if cache is not None else CACHE
    options = options or CompileOptions()
    name = canonical_target(target)
    key = make_key("emit", compiler_fingerprint(), source.sha, source.path, source.base_dir, name,
                   arch or default_arch(name), _host_id(name), stage, kernel,
                   {k: encode_value(v) for k, v in comptime.items()}, asdict(options))
    hit = cache.get_record(key, "emit")
    if hit is not None:
        head, payload = hit
        if _files_unchanged(head.get("imports")):
            progress.note(f"{stage} of {source.path} for {name} {arch or default_arch(name)}: from the cache")
            return payload.decode() if head.get("text") else payload
    tgt = (resolve or resolve_target)(name, arch)
    program = load(source, keep_going=True)
    out = emit(program, stage, tgt, kernel=kernel, comptime=comptime, options=options)
    imports = [[p, hashlib.sha256(t.encode()).hexdigest()] for p, t in program_imports(program)]
    text = isinstance(out, str)
    cache.put_record(key, "emit", {"imports": imports, "text": text}, out.encode() if text else out)
    return out


def _files_unchanged(files: Any) -> bool:
    """Whether each ``[path, sha256]`` of ``files`` names a file that still has that sha256."""
    if not isinstance(files, list):
        return False
    try:
        return all(hashlib.sha256(Path(p).read_bytes()).hexdigest() == sha for p, sha in files)
    except (OSError, TypeError, ValueError):
        return False


def compile_source_to(source: str, path: str = "<string>", stage: str = "asm",
                      target: str | Target = "nvptx", arch: str | None = None, **kwargs: Any) -> str | bytes:
    """:func:`emit` for source text (``path`` is what messages print; imports resolve beside it)."""
    base = str(Path(path).resolve().parent) if not path.startswith("<") else os.getcwd()
    return emit(Source(source, path, base), stage, target, arch, **kwargs)


def emit_file(path: str | os.PathLike, stage: str = "asm", target: str | Target = "nvptx",
              arch: str | None = None, **kwargs: Any) -> str | bytes:
    """:func:`emit` for the file at ``path``. Raises OSError when it cannot be read."""
    return emit(Source.from_file(path), stage, target, arch, **kwargs)


# --- the cached path the runtime uses ------------------------------------------------------------

_host_cpu: str | None = None


def _host_id(target: str) -> str:
    """What cache keys add for ``target``'s backend record: :func:`host_cpu_id` where its binaries are
    this host's machine code (``host_code``: cpu; a GPU binary does not depend on the host), and its
    ``cache_tag`` (a plug-in's version: :func:`compiler_fingerprint` covers only kcompiler's files)."""
    backend = find_backend(target)
    host = host_cpu_id() if backend.host_code else ""
    return f"{host}:{backend.cache_tag}" if backend.cache_tag else host


def host_cpu_id() -> str:
    """The host processor (machine, model and feature flags, hashed): code compiled for the
    'native' CPU must not be reused on another processor sharing the cache folder."""
    global _host_cpu
    if _host_cpu is None:
        import platform

        h = hashlib.sha256(platform.machine().encode())
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    if line.startswith(("model name", "flags", "Features", "CPU part")):
                        h.update(line.encode())
                    elif not line.strip():
                        break  # the first processor describes them all
        except OSError:
            h.update(platform.processor().encode())
        _host_cpu = h.hexdigest()[:16]
    return _host_cpu


class ProgramHandle:
    """A source bound to a target, arch and options, compiling kernel specialisations on demand
    through the cache. Constructing one parses and checks the source unless a manifest for it is
    cached (see the module docstring); it raises CompileError for a bad program."""

    def __init__(self, source: Source, target: str, arch: str | None = None,
                 options: CompileOptions | None = None, cache: KernelCache | None = None,
                 target_opts: dict[str, Any] | None = None):
        self.source = source
        self.target_name = canonical_target(target)
        self.arch = arch or default_arch(self.target_name)
        self.options = options or CompileOptions()
        self.target_opts = dict(target_opts or {})
        self.cache = cache if cache is not None else CACHE
        self._program: Any = None
        self._target: Target | None = None
        self._manifest_key = make_key("manifest", compiler_fingerprint(), source.sha, source.path,
                                      source.base_dir, self.target_name, self.arch, self.target_opts)
        m = self.cache.get_json(self._manifest_key)
        if m is not None:
            problem = manifest_problem(m)
            if problem is not None:
                self.cache.damaged(self._manifest_key, "json", problem)
                m = None
        if m is None or not self._imports_unchanged(m):

            with progress.step(f"parsing and checking {source.path}"):
                m = self._build_manifest()
        self.manifest: dict = m
        self._infer_memo: dict = dict(m.get("infer", {}))

    # the manifest
    def _imports_unchanged(self, m: dict) -> bool:
        """Whether every file the manifest's program imported still has the text it had (and the
        source key is the one these texts give)."""
        h = hashlib.sha256(self.source.text.encode())
        try:
            for path, sha in m["imports"]:
                data = Path(path).read_bytes()
                if hashlib.sha256(data).hexdigest() != sha:
                    return False
                h.update(b"\0" + path.encode() + b"\0" + data)
        except (OSError, KeyError, TypeError, ValueError):
            return False
        if h.hexdigest() != m["source_key"]:
            self.cache.damaged(self._manifest_key, "json", "source_key does not match the sources")
            return False
        return True

    def _build_manifest(self) -> dict:
        from .frontend import check  # lazy: lark, which a warm compile from the cache never loads

        program = self.program
        check(program, self.target)
        imports = program_imports(program)
        h = hashlib.sha256(self.source.text.encode())
        for path, text in imports:
            h.update(b"\0" + path.encode() + b"\0" + text.encode())
        kernels = {}
        for name in program.kernels:
            sig = program.signature(name)
            kernels[name] = {
                "comptime": [[p.name, p.kind, _encode_default(getattr(p, "default", None))]
                             for p in sig.comptime],
                "params": [str(p[0]) if isinstance(p, tuple) else str(getattr(p, "name", p))
                           for p in sig.params],
            }
        m = {"source_key": h.hexdigest(), "kernels": kernels, "infer": {},
             "imports": [[p, hashlib.sha256(t.encode()).hexdigest()] for p, t in imports]}
        self.cache.put_json(self._manifest_key, m)
        return m

    @property
    def program(self) -> Any:
        """The frontend's Program (parsed on first use)."""
        if self._program is None:
            self._program = load(self.source)
        return self._program

    @property
    def target(self) -> Target:
        if self._target is None:
            self._target = resolve_target(self.target_name, self.arch, **self.target_opts)
        return self._target

    @property
    def kernel_names(self) -> list[str]:
        return list(self.manifest["kernels"])

    def has_kernel(self, name: str) -> bool:
        """Whether the program defines kernel ``name``. A name a cached manifest lacks is looked up
        again in a manifest built from the source (once), so that a manifest written wrong cannot
        hide a kernel forever: a different one is reported as damaged and replaced."""
        if name in self.manifest["kernels"]:
            return True
        if self._program is None:  # the manifest came from the cache: check it against the source
            cached = self.manifest
            built = self._build_manifest()
            if set(built["kernels"]) != set(cached["kernels"]):
                self.cache.damaged(self._manifest_key, "json", "its kernels are not the source's")
                self.cache.put_json(self._manifest_key, built)
            self.manifest = built
            self._infer_memo = {}
        return name in self.manifest["kernels"]

    def comptime_names(self, kernel: str) -> list[str]:
        return [c[0] for c in self.manifest["kernels"][kernel]["comptime"]]

    def param_names(self, kernel: str) -> list[str]:
        return list(self.manifest["kernels"][kernel]["params"])

    # specialisation
    def infer_comptime(self, kernel: str, arg_types: list[Type | None], given: dict[str, Any]) -> dict:
        """The compile-time values of ``kernel`` for arguments of ``arg_types`` and the values
        ``given`` by keyword (inferred by the frontend's signature, memoised in the manifest).
        Raises CompileError / TypeError when they cannot be inferred."""
        comptime = self.manifest["kernels"][kernel]["comptime"]
        if not comptime:
            if given:
                raise TypeError(f"{kernel}: takes no compile-time parameters; got "
                                f"{', '.join(map(repr, sorted(given)))}")
            return {}
        unknown = sorted(set(given) - {c[0] for c in comptime})
        if unknown:
            raise TypeError(f"{kernel}: no compile-time parameter {', '.join(map(repr, unknown))}; it "
                            f"has: {', '.join(c[0] for c in comptime)}")
        try:
            memo_key = make_key(kernel, [str(t) if t is not None else None for t in arg_types],
                                {k: encode_value(v) for k, v in given.items()})
        except TypeError:  # a value no parameter takes: infer() says which and why
            memo_key = None
        hit = self._infer_memo.get(memo_key) if memo_key is not None else None
        if hit is not None:
            return {k: decode_value(v) for k, v in hit.items()}
        values = self.program.signature(kernel).infer(list(arg_types), dict(given))
        enc = {k: encode_value(v) for k, v in values.items()}
        if memo_key is None:
            return dict(values)
        self._infer_memo[memo_key] = enc
        m = dict(self.manifest)
        m["infer"] = dict(self._infer_memo)
        self.manifest = m
        self.cache.put_json(self._manifest_key, m)
        return dict(values)

    def artifact_key(self, kernel: str, values: dict[str, Any]) -> str:
        host = _host_id(self.target_name)
        return make_key("artifact", compiler_fingerprint(), self.manifest["source_key"], kernel,
                        {k: encode_value(v) for k, v in values.items()}, self.target_name, self.arch, host,
                        self.target_opts,
                        asdict(self.options))

    def artifact(self, kernel: str, values: dict[str, Any]) -> Artifact:
        """The compiled specialisation, from the cache or compiled now (and then cached)."""
        key = self.artifact_key(kernel, values)
        a = self.cache.get_artifact(key)
        if a is not None and (a.target != self.target_name or a.meta.get("kernel") != kernel):
            self.cache.damaged(key, "art", f"holds {a.meta.get('kernel')!r} for {a.target}, not "
                                           f"{kernel!r} for {self.target_name}")
            a = None
        if a is None:

            with progress.step(f"compiling {progress.spelled(kernel, values)} for {self.target_name} {self.arch}"):
                a = compile_kernel(self.program, kernel, values, self.target, self.options)
            self.cache.put_artifact(key, a)
        return a


def _is_value(v: Any) -> bool:
    """An encoded compile-time value (see :func:`encode_value`)."""
    if isinstance(v, dict):
        return set(v) == {"type"} and isinstance(v["type"], str)
    return isinstance(v, (bool, int, float, str))


def manifest_problem(m: Any) -> str | None:
    """What is wrong with the shape of a cached program manifest, or None when it has the shape
    :meth:`ProgramHandle._build_manifest` writes (a checksum catches damage; this catches a
    manifest written by a different or broken writer)."""
    if not isinstance(m, dict):
        return "manifest is not an object"
    if not isinstance(m.get("source_key"), str):
        return "no source_key"
    imports = m.get("imports")
    if not isinstance(imports, list) or not all(
            isinstance(i, list) and len(i) == 2 and all(isinstance(x, str) for x in i) for i in imports):
        return "imports is not a list of [path, sha256]"
    kernels = m.get("kernels")
    if not isinstance(kernels, dict):
        return "kernels is not an object"
    for name, k in kernels.items():
        if not isinstance(k, dict):
            return f"kernel {name!r} is not an object"
        ct, params = k.get("comptime"), k.get("params")
        if not isinstance(ct, list) or not all(
                isinstance(c, list) and len(c) == 3 and isinstance(c[0], str) for c in ct):
            return f"kernel {name!r}: comptime is not a list of [name, kind, default]"
        if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
            return f"kernel {name!r}: params is not a list of names"
    infer = m.get("infer")
    if not isinstance(infer, dict) or not all(
            isinstance(v, dict) and all(_is_value(x) for x in v.values()) for v in infer.values()):
        return "infer is not an object of compile-time values"
    for v in infer.values():
        for x in v.values():
            if isinstance(x, dict):
                try:
                    type_from_str(x["type"])
                except ValueError:
                    return f"infer holds {x['type']!r}, not a type"
    return None


def _encode_default(v: Any) -> Any:
    if v is None:
        return None
    try:
        return encode_value(v)
    except TypeError:
        return repr(v)


__all__ = ["Source", "STAGES", "compile_kernel", "artifact_of_ir", "emit", "emit_cached", "emit_file",
           "compile_source_to", "load", "lower_to_ir", "ProgramHandle", "parse_param_value",
           "resolve_target", "select_kernels", "encode_value", "decode_value", "host_cpu_id"]
