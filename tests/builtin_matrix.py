"""The builtin x type x target matrix (issue 19): one small kernel per (builtin, type), all of a
target's kernels in one source, one per line, so that a diagnostic's line names its case.

Every builtin of ``kcompiler.frontend.builtins.FUNCTIONS`` (and of the backends, ``wgmma``, ``mfma``...:
``kcompiler.ir.builtin_surface``) that takes values is here with every
scalar type and every vector of them (lengths :data:`VEC_LENS`), plus the arithmetic operators and
the vendor matrix builtins with the types they are documented for (and a wrong one). Builtins that
take no typed value (barrier, fence, ...) are listed in :data:`UNTYPED` so that a new builtin fails
``test_builtin_matrix`` until it is placed here.

Run as a script, it compiles the cases in forked children (bisecting a group that dies) and prints
the cases that kill the process: ``python -m tests.builtin_matrix [target:arch ...]``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass

from kcompiler.frontend.builtins import FUNCTIONS
from kcompiler.frontend.builtins import ACCURATE_MATH
from kcompiler.ir.core import ATOMIC_OPS, MATH_FUNCTIONS
from kcompiler.ir.types import SCALARS

#: (target, arch) of the matrix: every arch the issue names (cpu: the host's).
TARGETS = [("nvptx", "sm_80"), ("nvptx", "sm_90a"), ("amdgcn", "gfx90a"), ("amdgcn", "gfx942"),
           ("amdgcn", "gfx950"), ("amdgcn", "gfx1100"), ("amdgcn", "gfx1201"), ("cpu", None)]

VEC_LENS = (2, 3, 4, 8)
#: Kernels compiled in one module by :func:`run_matrix`.
CHUNK = 256
SCALAR_NAMES = tuple(SCALARS)
TYPES = SCALAR_NAMES + tuple(f"vec<{t}, {n}>" for t in SCALAR_NAMES for n in VEC_LENS)

#: What vectors are converted to (scalars: to every scalar type) and bitcast to (where sizes match).
_VEC_CONVERT = ("f32", "f16", "bf16", "f64", "i32", "u8", "i64", "f8e4m3", "f8e5m2fnuz", "e8m0", "f6e2m3", "f4e2m1")
_BITCAST = SCALAR_NAMES + tuple(f"vec<{e}, {n}>" for e in ("u8", "u16", "f16", "bf16", "u32", "f32", "f8e4m3")
                                for n in (2, 3, 4, 8))
UNARY_MATH = tuple(f for f in MATH_FUNCTIONS if f not in ("fma", "copysign")) + tuple(ACCURATE_MATH)
BINARY_FNS = ("copysign", "min", "max")
SHUFFLES = ("shuffle", "shuffle_xor", "shuffle_down", "shuffle_up")
BIT_COUNTS = ("popcount", "clz", "ctz", "ffs")
CLASSIFY = ("isnan", "isinf", "isfinite", "signbit")
BINARY_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "rem": "%", "and": "&", "or": "|",
              "xor": "^", "shl": "<<", "shr": ">>", "eq": "==", "lt": "<", "land": "&&"}
UNARY_OPS = {"neg": "-", "not": "~", "lnot": "!"}

#: Builtins that take no typed value, or only fixed types the rest of the suite covers.
UNTYPED = frozenset({
    "barrier", "fence", "active_mask", "warp_sync", "nanosleep", "hostcall_buffer", "hostcall_interrupt",
    "cp_async_commit", "cp_async_wait", "wgmma_fence", "wgmma_commit", "wgmma_wait", "wgmma_desc",
    "tma_load", "bulk_load", "tma_store", "tma_store_commit", "tma_store_wait", "mbarrier_init", "mbarrier_arrive", "mbarrier_arrive_expect_tx", "mbarrier_try_wait",
    "mbarrier_wait", "fence_proxy_async", "setmaxnreg_inc", "setmaxnreg_dec", "launch_bounds",
    "compile_error", "printf", "assert",
    # thread-block clusters (tests/backends/nvptx/test_cluster_builtins.py)
    "cluster_dims", "cluster_ctarank", "cluster_arrive", "cluster_wait", "mbarrier_arrive_cluster",
    "tma_load_multicast",
    # named barriers (tests/backends/nvptx/test_named_barrier.py)
    "barrier_sync", "barrier_arrive",
    # programmatic dependent launch and the L2 prefetch (tests/backends/nvptx/test_grid_dependency.py)
    "grid_dependency_wait", "launch_dependents", "prefetch_l2",
    # a scheduling hint (tests/backends/test_sched_barrier.py)
    "sched_barrier"})


@dataclass(frozen=True)
class Case:
    """One kernel: ``builtin`` (a FUNCTIONS name or ``op_<name>``) on ``type`` (its source spelling);
    ``src`` is the kernel's declaration, on one line."""

    builtin: str
    type: str
    src: str


def _elem(t: str) -> str:
    return t[4:t.index(",")] if t.startswith("vec<") else t


def _lanes(t: str) -> int:
    return int(t[t.index(",") + 1:-1]) if t.startswith("vec<") else 1


def _like(t: str, e: str) -> str:
    """``e`` with the shape of ``t`` (scalar or vector of the same length)."""
    return f"vec<{e}, {_lanes(t)}>" if t.startswith("vec<") else e


def _size(t: str) -> int:
    return max(1, SCALARS[_elem(t)].bits // 8) * _lanes(t)


def cases() -> list[Case]:
    """Every case of the matrix, in a fixed order."""
    out: list[Case] = []

    def add(builtin: str, t: str, body: str, params: str = "") -> None:
        out.append(Case(builtin, t, f"(p: ptr<{t}>{params}) {{ {body} }}"))

    for t in TYPES:
        for f in UNARY_MATH:
            add(f, t, f"p[0] = {f}(p[1]);")
        for f in BINARY_FNS:
            add(f, t, f"p[0] = {f}(p[1], p[2]);")
        add("fma", t, "p[0] = fma(p[1], p[2], p[3]);")
        for f in BIT_COUNTS:
            add(f, t, f"o[0] = {f}(p[1]);", f", o: ptr<{_like(t, 'i32')}>")
        for f in CLASSIFY:
            add(f, t, f"o[0] = {f}(p[1]);", f", o: ptr<{_like(t, 'bool')}>")
        for f in ("brev", "bswap"):
            add(f, t, f"p[0] = {f}(p[1]);")
        add("mulhi", t, "p[0] = mulhi(p[1], p[2]);")
        for f in ("funnel_shl", "funnel_shr"):
            add(f, t, f"p[0] = {f}(p[1], p[2], 5);")
        add("byte_perm", t, "o[0] = byte_perm(p[1], p[2], 0x3210u32);", ", o: ptr<u32>")
        add("select", t, "p[0] = select(c[0], p[1], p[2]);", f", c: ptr<{_like(t, 'bool')}>")
        for op in ATOMIC_OPS:
            add(f"atomic_{op}", t, f"p[0] = atomic_{op}(p + 1, p[2]);")
            add(f"atomic_{op}", t, f"shared s: [{t}; 64]; s[thread_id.x] = p[1]; barrier(); "
                                   f"p[0] = atomic_{op}(s + 1, p[2]);")
        add("atomic_cas", t, "p[0] = atomic_cas(p + 1, p[2], p[3]);")
        add("atomic_cas", t, f"shared s: [{t}; 64]; s[thread_id.x] = p[1]; barrier(); "
                             f"p[0] = atomic_cas(s + 1, p[2], p[3]);")
        add("atomic_load", t, "p[0] = atomic_load(p + 1, order = \"acquire\");")
        add("atomic_store", t, "atomic_store(p + 1, p[2], order = \"release\");")
        for f in SHUFFLES:
            add(f, t, f"p[0] = {f}(p[1], 1);")
        add("read_first_lane", t, "p[0] = read_first_lane(p[1]);")
        add("ballot", t, "o[0] = ballot(p[1]);", ", o: ptr<u64>")
        add("load", t, f"o[0] = load[{t}](q + 1);", f", q: ptr<{_elem(t)}>, o: ptr<{t}>")
        add("store", t, "store(q + 1, p[0]);", f", q: ptr<{_elem(t)}>")
        add("dynamic_shared", t, f"let s = dynamic_shared[{t}](); p[0] = s[thread_id.x];")
        for u in SCALAR_NAMES if _lanes(t) == 1 else _VEC_CONVERT:
            ut = _like(t, u)
            add("convert", t, f"o[0] = convert[{ut}](p[1]);", f", o: ptr<{ut}>")
            if SCALARS[u].is_minifloat:
                add("convert", t, f"o[0] = convert[{ut}](p[1], saturate = true);", f", o: ptr<{ut}>")
        for u in _BITCAST:
            if u != t and _size(u) == _size(t) and (u.startswith("vec<") or t.startswith("vec<")
                                                    or SCALARS[u].bits == SCALARS[t].bits):
                add("bitcast", t, f"o[0] = bitcast[{u}](p[1]);", f", o: ptr<{u}>")
        for name, sym in BINARY_OPS.items():
            add(f"op_{name}", t, f"let r = p[1] {sym} p[2]; o[0] = r;", f", o: ptr<{_like(t, 'bool')}>"
                if name in ("eq", "lt") else f", o: ptr<{t}>")
        for name, sym in UNARY_OPS.items():
            add(f"op_{name}", t, f"p[0] = {sym}p[1];")
    out += _vendor_cases()
    return out


def _vendor_cases() -> list[Case]:
    """mma_sync / ldmatrix / cp_async (NVIDIA), mfma (AMD CDNA), wgmma (Hopper): their documented
    operand types and a few that are not."""
    out: list[Case] = []
    f32 = "vec<f32, 4>"
    for a, b in [("f16", "f16"), ("bf16", "bf16"), ("f8e4m3", "f8e4m3"), ("f8e5m2", "f8e4m3"), ("f32", "f32"),
                 ("i8", "i8"), ("f16", "bf16")]:
        k = 16 if SCALARS[a].bits == 8 else 8
        for ka, kb in ((k, k // 2), (4, 4)):
            ta, tb = f"vec<{a}, {ka}>", f"vec<{b}, {kb}>"
            out.append(Case("mma_sync", f"{ta} x {tb}", f"(p: ptr<{ta}>, q: ptr<{tb}>, o: ptr<{f32}>) "
                                                       f"{{ o[0] = mma_sync(p[0], q[0], o[1]); }}"))
    for e in ("f16", "bf16", "i16", "f8e4m3", "u8", "f32"):
        for n in (2, 4, 8, 16):
            t = f"vec<{e}, {n}>"
            out.append(Case("ldmatrix", t, f"(o: ptr<{t}>) {{ shared s: [{e}; 1024]; "
                                          f"o[0] = ldmatrix[{t}](s + lane_id * 16); }}"))
    for e, n in (("f32", 16), ("f16", 8), ("u8", 4), ("f64", 16), ("f32", 12)):
        out.append(Case("cp_async", f"{e} x {n} bytes", f"(p: ptr<{e}>) {{ shared s: [{e}; 256]; "
                                                       f"cp_async(s + lane_id * 4, p + lane_id * 4, {n}); "
                                                       f"cp_async_commit(); cp_async_wait[0](); }}"))
    for e in ("f16", "bf16", "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3", "f8e5m2", "f32", "i8"):
        for k in (4, 8, 32):
            for c in (16, 4):
                ta, tc = f"vec<{e}, {k}>", f"vec<f32, {c}>"
                out.append(Case("mfma", f"{ta} -> {tc}", f"(p: ptr<{ta}>, o: ptr<{tc}>) "
                                                         f"{{ o[0] = mfma(p[0], p[1], o[1]); }}"))
    for e in ("bf16", "f16", "f8e4m3", "f8e5m2", "f32"):
        for n in (32, 3):
            out.append(Case("wgmma", f"{e} acc vec<f32, {n}>",
                            f"(o: ptr<vec<f32, {n}>>) {{ launch_bounds(128); shared s: [{e}; 8192]; "
                            f"var acc = o[0]; wgmma_fence(); acc = wgmma[{e}](wgmma_desc(s), "
                            f"wgmma_desc(s + 4096), acc); wgmma_commit(); wgmma_wait[0](); o[0] = acc; }}"))
    return out


#: Builtins whose cases (documented operand types, a few wrong ones) all run in the default sample.
VENDOR = frozenset({"mma_sync", "ldmatrix", "cp_async", "mfma", "wgmma"})


def _keep(key: str, n: int) -> int:
    """A fixed choice of 0..n-1 for ``key`` (the same every run, spread evenly over keys)."""
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % n


def sample(cs: list[Case] | None = None) -> list[int]:
    """The indices of the cases CI compiles by default: every builtin on every scalar type; on
    vectors, one length of :data:`VEC_LENS` per (builtin, form, element type), a different one for
    each element type; a sixth of the conversion and bitcast pairs on scalars and of them
    (of the one length) on vectors; every vendor matrix case. ``pytest -m slow`` compiles all."""
    cs = cases() if cs is None else cs
    out = []
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(cs):
        pair = c.builtin in ("convert", "bitcast")
        if c.builtin in VENDOR:
            keep = True
        elif not c.type.startswith("vec<"):  # the first pair of each type, then a sixth
            keep = not pair or _keep(c.src, 6) == 0 or (c.builtin, c.type) not in seen
            seen.add((c.builtin, c.type))
        else:
            form = re.sub(r"vec<(\w+), \d+>", r"vec<\1, N>", c.src)
            keep = VEC_LENS.index(_lanes(c.type)) == _keep(form, len(VEC_LENS)) and (not pair or _keep(form, 6) == 0)
        if keep:
            out.append(i)
    return out


def covered_builtins() -> set[str]:
    """The builtin names (the language's and the backends') the matrix exercises."""
    return {c.builtin for c in cases() if not c.builtin.startswith("op_")}


def source(cs: list[Case]) -> str:
    """The kernels of ``cs``, kernel ``k<i>`` on line ``i + 1``."""
    return "".join(f"kernel k{i}{c.src}\n" for i, c in enumerate(cs))


# --- compiling the matrix ---------------------------------------------------------------------------

@dataclass
class Outcome:
    """What the matrix gave one target: ``rejected`` {case index: (stage, message)} with stage
    'check' (the type checker's located errors) or 'backend' (a CompileError from the LLVM stage);
    ``failed`` {case index: 'Type: message'} for anything else (an ICE); ``asm`` the compiled modules'
    assembly (PTX, AMDGCN or host; one module per chunk of :data:`CHUNK` cases), ``compiled`` their
    indices."""

    rejected: dict[int, tuple[str, str]]
    failed: dict[int, str]
    compiled: list[int]
    asm: list[str]


def _kernel_of(diag, idxs: list[int]) -> int | None:
    s = diag.span
    if s is None or s.file.path != "<matrix>" or not 1 <= s.line <= len(idxs):
        return None
    return idxs[s.line - 1]


def load_matrix(idxs: list[int] | None = None):
    """The frontend's Program of the cases ``idxs`` (default all), kernel k<n> the n-th of them."""
    from kcompiler.pipeline import Source, load

    cs = cases()
    idxs = list(range(len(cs))) if idxs is None else list(idxs)
    return load(Source(source([cs[i] for i in idxs]), "<matrix>"), keep_going=True)


def run_matrix(target: str, arch: str | None, idxs: list[int] | None = None, on_accepted=None,
               program=None) -> Outcome:
    """Check the cases ``idxs`` (default all) as one source for ``target``/``arch``, then compile the
    accepted ones to assembly in one module; a module that fails is bisected to the cases that fail
    (a CompileError from the backend: 'backend' rejections; anything else: ``failed``).
    ``on_accepted(list)`` is called with the accepted indices before compiling (the subprocess
    sweep prints them). ``program``: :func:`load_matrix`'s of the same ``idxs``, to load it once for
    every target. An LLVM abort kills the process: that is what the test wants to see."""
    from kcompiler import CompileError
    from kcompiler.backends.llvm import compile_ir
    from kcompiler.frontend import check
    from kcompiler.pipeline import lower_to_ir, resolve_target

    cs = cases()
    idxs = list(range(len(cs))) if idxs is None else list(idxs)
    tgt = resolve_target(target, arch)
    prog = program if program is not None else load_matrix(idxs)
    rejected: dict[int, tuple[str, str]] = {}
    failed: dict[int, str] = {}
    try:
        check(prog, tgt, max_errors=4 * len(idxs) + 10)
    except CompileError as e:
        for d in e.diagnostics:
            k = _kernel_of(d, idxs)
            if k is None:
                raise
            rejected.setdefault(k, ("check", d.message))
    accepted = [i for i in idxs if i not in rejected]
    if on_accepted:
        on_accepted(accepted)
    pos = {i: n for n, i in enumerate(idxs)}

    def build(group: list[int]) -> str:
        module = lower_to_ir(prog, tgt, {f"k{pos[i]}": {} for i in group})
        return str(tgt.emit(compile_ir(module, tgt), "asm"))

    asm: list[str] = []
    compiled: list[int] = []

    def go(group: list[int]) -> None:
        if not group:
            return
        try:
            asm.append(build(group))
            compiled.extend(group)
            return
        except CompileError as e:
            k = _kernel_of(e.diagnostics[0], idxs)
            if k is not None and k in group:
                rejected[k] = ("backend", e.diagnostics[0].message)
                return go([i for i in group if i != k])
            err = f"CompileError: {e}"
        except Exception as e:  # noqa: BLE001 - an internal error: find its cases
            err = f"{type(e).__name__}: {str(e)[:400]}"
        if len(group) == 1:
            failed[group[0]] = err
            return
        h = len(group) // 2
        go(group[:h])
        go(group[h:])

    for n in range(0, len(accepted), CHUNK):  # a backend rejection recompiles its chunk only
        go(accepted[n:n + CHUNK])
    return Outcome(rejected, failed, sorted(compiled), asm)


# --- the forked sweep: finds the cases that kill the process -----------------------------------------

def _in_child(fn) -> tuple[int, str]:
    """Run ``fn() -> str`` in a forked child; (exit status, what it returned or its stderr tail)."""
    import tempfile

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the child: report through the file, never return into the caller
            os.dup2(err.fileno(), 2)
            try:
                out.write(fn().encode())
                out.flush()
                os._exit(0)
            except BaseException as e:  # noqa: BLE001
                out.write(f"{type(e).__name__}: {e}"[:500].encode())
                out.flush()
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        out.seek(0), err.seek(0)
        text = out.read().decode(errors="replace")
        if os.WIFSIGNALED(status) or not text:
            tail = [ln for ln in err.read().decode(errors="replace").splitlines()
                    if "ERROR" in ln or "error" in ln][:1]
            return -(os.WTERMSIG(status) if os.WIFSIGNALED(status) else 1), (tail[0] if tail else "")[:300]
        return os.WEXITSTATUS(status), text


def sweep(target: str, arch: str | None, program=None) -> tuple[dict, dict, dict]:
    """(rejected, failed, deaths) of every case on target/arch: checked here, compiled in forked
    children, a group that dies bisected down to its cases ({index: 'signal: stderr line'})."""
    from kcompiler import CompileError
    from kcompiler.backends.llvm import compile_ir
    from kcompiler.frontend import check
    from kcompiler.pipeline import lower_to_ir, resolve_target

    cs = cases()
    prog = program if program is not None else load_matrix()
    tgt = resolve_target(target, arch)
    rejected: dict = {}
    try:
        check(prog, tgt, max_errors=4 * len(cs))
    except CompileError as e:
        for d in e.diagnostics:
            k = _kernel_of(d, list(range(len(cs))))
            rejected.setdefault(k, ("check", d.message))
    failed: dict = {}
    deaths: dict = {}

    def compile_group(group: list[int]) -> str:
        try:
            module = lower_to_ir(prog, tgt, {f"k{i}": {} for i in group})
            tgt.emit(compile_ir(module, tgt), "asm")
            return "ok"
        except CompileError as e:
            k = _kernel_of(e.diagnostics[0], list(range(len(cs))))
            return f"backend {k} " + json.dumps(e.diagnostics[0].message)

    def go(group: list[int]) -> None:
        if not group:
            return
        rc, text = _in_child(lambda: compile_group(group))
        if rc == 0 and text == "ok":
            return
        if rc == 0 and text.startswith("backend "):
            _, k, msg = text.split(" ", 2)
            if k != "None" and int(k) in group:
                rejected[int(k)] = ("backend", json.loads(msg))
                return go([i for i in group if i != int(k)])
        if len(group) == 1:
            (deaths if rc < 0 else failed)[group[0]] = f"{rc}: {text}"
            return
        h = len(group) // 2
        go(group[:h])
        go(group[h:])

    accepted = [i for i in range(len(cs)) if i not in rejected]
    for n in range(0, len(accepted), 400):
        go(accepted[n:n + 400])
    return rejected, failed, deaths


if __name__ == "__main__":
    want = sys.argv[1:] or [f"{t}:{a or ''}" for t, a in TARGETS]
    cs = cases()
    print(len(cs), "cases", flush=True)
    prog = load_matrix()
    for spec in want:
        t, _, a = spec.partition(":")
        rej, failed, deaths = sweep(t, a or None, prog)
        print(f"== {spec}: {len(cs) - len(rej) - len(failed) - len(deaths)} compiled, {len(rej)} rejected "
              f"({sum(v[0] == 'backend' for v in rej.values())} by the backend), {len(failed)} ICE, "
              f"{len(deaths)} deaths", flush=True)
        for kind, d in (("ICE", failed), ("DEATH", deaths)):
            for i, r in d.items():
                print(f"  {kind} {cs[i].builtin} {cs[i].type}: {r}   | kernel k{cs[i].src}", flush=True)
        for i, (stage, m) in rej.items():
            if stage == "backend":
                print(f"  BACKEND {cs[i].builtin} {cs[i].type}: {m}", flush=True)
