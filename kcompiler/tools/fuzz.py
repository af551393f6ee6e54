"""A mutational fuzzer of kcompiler: kernel sources of the repository mutated as a user's typos and
experiments would mutate them, each checked and compiled in worker subprocesses so that Python
exceptions, hangs and process deaths (LLVM aborts) are all observed.

    python -m kcompiler.tools.fuzz -n 2000 --seed 1 --jobs 2 [--minimize --save tests/programs/fuzz]

Every input is checked (``kc check``) and compiled to assembly for nvptx sm_90; every
``--subset``-th one also for amdgcn gfx942, gfx1100 and the CPU. An input's outcome is the worst of
its targets': ``ok`` (compiled), ``error`` (a located CompileError: file:line:col), ``unlocated``
(a CompileError without a place), ``exception`` (any other Python exception), ``hang`` (one target
took over ``--timeout`` seconds) or ``death`` (the worker process died: an LLVM abort, a segfault).
The summary table gives each outcome's count, then the exceptions by type and place, the hangs and
the deaths by their first error line; ``--minimize`` reduces each distinct failure (a line, then a
token delta-debugger) and ``--save DIR`` writes the reduced inputs there.

The corpus (:func:`corpus`): ``examples/``, ``stdlib/``, ``tests/programs/`` (``.kc`` files) and the
kernel-source string literals of ``tests/**/*.py`` of a checkout (``--root``, default the one this
module lives in). Mutations (:func:`mutate`): delete, duplicate or swap tokens and lines; numbers to
0, -1, 1023, huge; types between i32, f16, bf16, vectors and others; identifiers to others of the
file, to long or reserved-looking names; wrapping lines in deep nesting; lines from other files.
"""
from __future__ import annotations

import argparse
import ast as pyast
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable
from ..backends.llvm import compile_ir, emission
from ..diagnostics import CompileError
from ..frontend import check
from ..pipeline import Source, load, lower_to_ir, resolve_target

#: The first target of every input, and the ones every ``subset``-th input adds.
MAIN_TARGET = ("nvptx", "sm_90")
SUBSET_TARGETS = (("amdgcn", "gfx942"), ("amdgcn", "gfx1100"), ("cpu", None))

OUTCOMES = ("ok", "error", "unlocated", "exception", "hang", "death")
_BAD = ("unlocated", "exception", "hang", "death")

# --- the corpus --------------------------------------------------------------------------------------


def default_root() -> Path:
    """The checkout this module lives in (its examples/, stdlib/ and tests/)."""
    return Path(__file__).resolve().parents[2]


def _py_strings(path: Path) -> Iterable[str]:
    try:
        tree = pyast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, OSError):
        return
    for node in pyast.walk(tree):
        if isinstance(node, pyast.Constant) and isinstance(node.value, str):
            s = node.value
            if ("kernel " in s or "fn " in s) and "{" in s and "\n" in s:
                yield s


def corpus(root: Path | None = None) -> list[tuple[str, str]]:
    """(name, text) of every seed: the .kc files of examples/, stdlib/, tests/programs/ and the
    kernel sources written as string literals in tests/**/*.py, in a fixed order."""
    root = root or default_root()
    out: list[tuple[str, str]] = []
    for d in ("examples", "stdlib", "tests/programs"):
        for p in sorted((root / d).rglob("*.kc")):
            out.append((str(p.relative_to(root)), p.read_text(encoding="utf-8")))
    for p in sorted((root / "tests").rglob("*.py")):
        for k, s in enumerate(_py_strings(p)):
            out.append((f"{p.relative_to(root)}#{k}", s))
    return out


# --- mutations ---------------------------------------------------------------------------------------

_TOKEN = re.compile(r'//[^\n]*|\s+|[A-Za-z_][A-Za-z0-9_]*|0x[0-9a-fA-F]+|\d+\.\d*(?:[eE][+-]?\d+)?|\d+'
                    r'|"(?:[^"\\\n]|\\.)*"|<<=|>>=|==|!=|<=|>=|&&|\|\||<<|>>|[-+*/%&|^]=|->|.', re.S)
_TYPES = ("i32", "f16", "bf16", "f32", "f64", "u8", "i64", "u32", "bool", "f8e4m3", "f4e2m1",
          "vec<f32, 4>", "vec<bf16, 4>", "vec<i32, 3>", "vec<f16, 8>", "vec<u8, 2>")
_NUMBERS = ("0", "-1", "1", "1023", "1024", "65536", "2147483648", "9223372036854775807",
            "99999999999999999999999", "0.0", "1e39", "-0.5", "3")
_NAMES = ("free", "llvm", "main", "x", "kernel", "tmp", "i", "a" * 1100, "b" * 1030)


def tokens(src: str) -> list[str]:
    """``src`` split into tokens (whitespace and comments are tokens too: joining gives it back)."""
    return _TOKEN.findall(src)


def _is_word(t: str) -> bool:
    return bool(t) and not t.isspace() and not t.startswith("//")


def _words(toks: list[str]) -> list[int]:
    return [i for i, t in enumerate(toks) if _is_word(t)]


def _m_tok_delete(src: str, rng: random.Random, other: str) -> str:
    toks = tokens(src)
    w = _words(toks)
    if w:
        del toks[rng.choice(w)]
    return "".join(toks)


def _m_tok_duplicate(src: str, rng: random.Random, other: str) -> str:
    toks = tokens(src)
    w = _words(toks)
    if w:
        i = rng.choice(w)
        toks.insert(i, toks[i] + " ")
    return "".join(toks)


def _m_tok_swap(src: str, rng: random.Random, other: str) -> str:
    toks = tokens(src)
    w = _words(toks)
    if len(w) > 1:
        k = rng.randrange(len(w) - 1)
        i, j = w[k], w[k + 1]
        toks[i], toks[j] = toks[j], toks[i]
    return "".join(toks)


def _m_line_delete(src: str, rng: random.Random, other: str) -> str:
    lines = src.split("\n")
    if len(lines) > 1:
        del lines[rng.randrange(len(lines))]
    return "\n".join(lines)


def _m_line_duplicate(src: str, rng: random.Random, other: str) -> str:
    lines = src.split("\n")
    i = rng.randrange(len(lines))
    lines.insert(i, lines[i])
    return "\n".join(lines)


def _m_line_swap(src: str, rng: random.Random, other: str) -> str:
    lines = src.split("\n")
    if len(lines) > 1:
        i = rng.randrange(len(lines) - 1)
        j = min(len(lines) - 1, i + rng.choice((1, 1, 2, 5)))
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _replace_where(src: str, rng: random.Random, pred: Callable[[str], bool], new: Callable[[str], str]) -> str:
    toks = tokens(src)
    idx = [i for i, t in enumerate(toks) if pred(t)]
    if idx:
        i = rng.choice(idx)
        toks[i] = new(toks[i])
    return "".join(toks)


def _m_number(src: str, rng: random.Random, other: str) -> str:
    return _replace_where(src, rng, lambda t: t[0].isdigit(), lambda t: rng.choice(_NUMBERS))


def _m_type(src: str, rng: random.Random, other: str) -> str:
    flat = {t for t in _TYPES if "<" not in t}
    return _replace_where(src, rng, lambda t: t in flat, lambda t: rng.choice(_TYPES))


def _m_ident(src: str, rng: random.Random, other: str) -> str:
    toks = tokens(src)
    names = sorted({t for t in toks if t[0].isalpha() or t[0] == "_"})
    if not names:
        return src
    pool = names + list(_NAMES)
    return _replace_where(src, rng, lambda t: t[0].isalpha() or t[0] == "_", lambda t: rng.choice(pool))


def _m_nest(src: str, rng: random.Random, other: str) -> str:
    lines = src.split("\n")
    i = rng.randrange(len(lines))
    j = min(len(lines), i + rng.choice((1, 2, 3)))
    depth = rng.choice((1, 3, 30, 200, 400))
    head, tail = rng.choice((("if true { ", "}"), ("{ ", "}"), ("while false { ", "}"),
                             ("for _z in range(0, 2) { ", "}"), ("(", ")")))
    lines[i:j] = [head * depth + "\n".join(lines[i:j]) + tail * depth]
    return "\n".join(lines)


def _m_splice(src: str, rng: random.Random, other: str) -> str:
    olines = other.split("\n")
    k = rng.randrange(len(olines))
    piece = olines[k:k + rng.choice((1, 1, 3, 8))]
    lines = src.split("\n")
    i = rng.randrange(len(lines) + 1)
    lines[i:i] = piece
    return "\n".join(lines)


#: The mutations by name: f(src, rng, another corpus text) -> src.
MUTATIONS: dict[str, Callable[[str, random.Random, str], str]] = {
    "tok_delete": _m_tok_delete, "tok_duplicate": _m_tok_duplicate, "tok_swap": _m_tok_swap,
    "line_delete": _m_line_delete, "line_duplicate": _m_line_duplicate, "line_swap": _m_line_swap,
    "number": _m_number, "type": _m_type, "ident": _m_ident, "nest": _m_nest, "splice": _m_splice}


def mutate(src: str, rng: random.Random, other: str = "", n: int | None = None) -> str:
    """``src`` with ``n`` (default 1 to 3, drawn from ``rng``) mutations of :data:`MUTATIONS`."""
    names = list(MUTATIONS)
    for _ in range(n if n is not None else rng.choice((1, 1, 2, 3))):
        src = MUTATIONS[rng.choice(names)](src, rng, other or src)
    return src


# --- the worker: one subprocess compiling inputs, one step a line ---------------------------------------

_MARK = "@@kcfuzz "


def compile_step(src: str, target: str, arch: str | None) -> str:
    """Check ``src`` for ``target``/``arch`` and compile every kernel whose compile-time parameters
    all have defaults to assembly. Returns 'ok' or 'error' (a located CompileError) or 'unlocated'
    (one without a place: 'unlocated: message'); any other exception propagates."""

    try:
        program = load(Source(src, "<fuzz>"), keep_going=True)
        tgt = resolve_target(target, arch)
        check(program, tgt)
        kernels = {n: {} for n in program.kernels
                   if all(c.default is not None for c in program.signature(n).comptime)}
        if kernels:
            module = lower_to_ir(program, tgt, kernels)
            ref = compile_ir(module, tgt)
            with emission(module, tgt, "asm"):  # as kc compile: LLVM's limits found late are located
                tgt.emit(ref, "asm")
        return "ok"
    except CompileError as e:
        if all(d.span is not None for d in e.diagnostics if d.severity == "error"):
            return "error"
        return "unlocated: " + str(e).splitlines()[0][:200]


def _where(tb: Any) -> str:
    """file:function of the innermost traceback frame inside kcompiler (else the innermost)."""
    import traceback

    frames = traceback.extract_tb(tb)
    mine = [f for f in frames if "kcompiler" in f.filename.replace("\\", "/")] or frames
    f = mine[-1] if mine else None
    if f is None:
        return "?"
    p = f.filename.replace("\\", "/")
    p = p[p.rindex("kcompiler/") + len("kcompiler/"):] if "kcompiler/" in p else os.path.basename(p)
    return f"{p}:{f.name}"


def worker_main() -> None:
    """Read JSON lines {"src", "targets"} on stdin; for each target print one result line
    (:data:`_MARK` + JSON {"target", "outcome", "detail"}), then {"done": true}."""
    out = sys.stdout
    sys.stdout = sys.stderr  # a program's prints must not mix with the protocol
    for line in sys.stdin:
        job = json.loads(line)
        for target, arch in job["targets"]:
            out.write(_MARK + json.dumps({"target": f"{target}:{arch or ''}", "start": True}) + "\n")
            out.flush()
            if os.environ.get("KC_FUZZ_SELFTEST") == "1":
                _selftest(job["src"])
            try:
                if job["src"] == "//@fuzz-selftest raise" and os.environ.get("KC_FUZZ_SELFTEST") == "1":
                    1 / 0
                r = compile_step(job["src"], target, arch)
                outcome, detail = (r, "") if r in ("ok", "error") else ("unlocated", r[len("unlocated: "):])
            except BaseException as e:  # noqa: BLE001 - what the fuzzer is looking for
                outcome = "exception"
                detail = f"{type(e).__name__}@{_where(e.__traceback__)}: {str(e)[:200]}"
            out.write(_MARK + json.dumps({"target": f"{target}:{arch or ''}", "outcome": outcome,
                                          "detail": detail}) + "\n")
            out.flush()
        out.write(_MARK + json.dumps({"done": True}) + "\n")
        out.flush()


def _selftest(src: str) -> None:
    """The worker's own test (KC_FUZZ_SELFTEST=1): a source that asks for a death or a hang gets it."""
    if src == "//@fuzz-selftest abort":
        os.abort()
    if src == "//@fuzz-selftest hang":
        time.sleep(3600)
    if src == "//@fuzz-selftest hang-child":  # a hang in a forked child, as codegen's child can hang
        pid = os.fork() if hasattr(os, "fork") else 0
        if pid == 0:
            time.sleep(3600)
            os._exit(0)
        print(f"selftest child {pid}", file=sys.stderr, flush=True)
        time.sleep(3600)


@dataclass
class Result:
    """One input's outcome (the worst of its targets'), the target that gave it and a detail: the
    exception 'Type@file:function: message', the death's first error line, the hang's target."""

    outcome: str
    target: str = ""
    detail: str = ""
    seconds: float = 0.0

    @property
    def signature(self) -> str:
        """What makes two failures the same: outcome and type/place (exceptions), error line (deaths)."""
        if self.outcome == "exception":
            return "exception " + self.detail.split(":", 2)[0] + ":" + self.detail.split(":", 2)[1]
        if self.outcome == "death":
            return "death " + re.sub(r"\d+", "N", self.detail)[:120]
        if self.outcome in ("hang", "unlocated"):
            return f"{self.outcome} {self.target}"
        return self.outcome


class Worker:
    """A worker subprocess (``python -m kcompiler.tools.fuzz --worker``), restarted after a death, a
    hang, or ``recycle`` inputs. :meth:`run` compiles one input with a per-target ``timeout``.

    The worker leads a process group of its own (POSIX), and :meth:`stop` kills the group: a hang is
    usually in the code generator's forked child (kcompiler.backends.llvm.codegen), which killing the
    worker alone would leave running."""

    def __init__(self, timeout: float = 20.0, recycle: int = 200):
        self.timeout, self.recycle = timeout, recycle
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()
        self.used = 0
        self.stderr_tail: list[str] = []

    def _start(self) -> None:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen([sys.executable, "-m", "kcompiler.tools.fuzz", "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env, bufsize=1, start_new_session=os.name == "posix")
        self.lines = queue.Queue()
        self.stderr_tail = []
        self.used = 0
        proc, q, tail = self.proc, self.lines, self.stderr_tail

        def read_out() -> None:
            for ln in proc.stdout:
                if ln.startswith(_MARK):
                    q.put(json.loads(ln[len(_MARK):]))
            q.put(None)

        def read_err() -> None:
            for ln in proc.stderr:
                tail.append(ln.rstrip("\n"))
                del tail[:-40]

        threading.Thread(target=read_out, daemon=True).start()
        threading.Thread(target=read_err, daemon=True).start()

    def _kill_group(self) -> None:
        """SIGKILL to the worker's process group (POSIX; a no-op once no process of it is left)."""
        if self.proc is not None and os.name == "posix":
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def stop(self) -> None:
        """End the worker subprocess (if running) and every process of its group."""
        if self.proc is not None:
            try:
                self._kill_group()
                self.proc.kill()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self.proc = None

    def run(self, src: str, targets: list[tuple[str, str | None]]) -> Result:
        """Compile ``src`` for ``targets`` in the worker; the worst outcome of them."""
        if self.proc is None or self.used >= self.recycle:
            self.stop()
            self._start()
        self.used += 1
        assert self.proc is not None and self.proc.stdin is not None
        t0 = time.monotonic()
        self.proc.stdin.write(json.dumps({"src": src, "targets": [list(t) for t in targets]}) + "\n")
        self.proc.stdin.flush()
        worst = Result("ok")
        current = ""
        while True:
            try:
                msg = self.lines.get(timeout=self.timeout)
            except queue.Empty:
                self.stop()
                return Result("hang", current, f"over {self.timeout:g} s", time.monotonic() - t0)
            if msg is None:  # the process died
                rc = self.proc.wait()
                self._kill_group()  # what it forked dies with it
                time.sleep(0.05)
                errs = [ln for ln in self.stderr_tail if re.search(r"ERROR|error|Error|fault|Abort", ln)]
                self.proc = None
                return Result("death", current, f"rc {rc}: " + (errs[0] if errs else
                                                               (self.stderr_tail[-1] if self.stderr_tail else "")),
                              time.monotonic() - t0)
            if msg.get("done"):
                worst.seconds = time.monotonic() - t0
                return worst
            if msg.get("start"):
                current = msg["target"]
                continue
            if OUTCOMES.index(msg["outcome"]) > OUTCOMES.index(worst.outcome):
                worst = Result(msg["outcome"], msg["target"], msg["detail"])


# --- minimising ----------------------------------------------------------------------------------------


def minimize(src: str, still_fails: Callable[[str], bool], budget: int = 300) -> str:
    """A smaller ``src`` for which ``still_fails`` holds: delta debugging (ddmin) over lines, then over
    tokens, within ``budget`` calls of ``still_fails``."""
    calls = [0]

    def test(s: str) -> bool:
        if calls[0] >= budget:
            return False
        calls[0] += 1
        return still_fails(s)

    def ddmin(parts: list[str], join: str) -> list[str]:
        n = 2
        while len(parts) >= 2 and calls[0] < budget:
            chunk = max(1, len(parts) // n)
            reduced = False
            for i in range(0, len(parts), chunk):
                rest = parts[:i] + parts[i + chunk:]
                if rest and test(join.join(rest)):
                    parts, n, reduced = rest, max(n - 1, 2), True
                    break
            if not reduced:
                if chunk == 1:
                    break
                n = min(len(parts), n * 2)
        return parts

    src = "\n".join(ddmin(src.split("\n"), "\n"))
    toks = tokens(src)
    return "".join(ddmin(toks, ""))


# --- the run ---------------------------------------------------------------------------------------------


@dataclass
class Summary:
    """What a run found: results by input number, and one (input, result) per failure signature."""

    results: list[Result] = field(default_factory=list)
    first: dict[str, tuple[str, Result]] = field(default_factory=dict)
    seconds: float = 0.0

    def table(self) -> str:
        """The summary as Markdown: outcome -> count, then the failures by signature."""
        n = Counter(r.outcome for r in self.results)
        rows = ["| outcome | count |", "|---|---|"] + [f"| {o} | {n.get(o, 0):,} |" for o in OUTCOMES]
        by: dict[str, int] = defaultdict(int)
        for r in self.results:
            if r.outcome in _BAD:
                by[r.signature] += 1
        if by:
            rows += ["", "| failure (signature) | count | example detail |", "|---|---|---|"]
            for sig, c in sorted(by.items(), key=lambda kv: -kv[1]):
                rows.append(f"| {sig} | {c} | {self.first[sig][1].detail[:100]} |")
        rows.append("")
        rows.append(f"{len(self.results):,} inputs in {self.seconds:.0f} s")
        return "\n".join(rows)


def inputs(seed: int, count: int, root: Path | None = None) -> Iterable[tuple[int, str]]:
    """``count`` mutated sources, deterministic for ``seed``: (number, text)."""
    seeds = corpus(root)
    for i in range(count):
        rng = random.Random(f"{seed}:{i}")
        _, text = rng.choice(seeds)
        _, other = rng.choice(seeds)
        yield i, mutate(text, rng, other)


def targets_for(i: int, subset: int) -> list[tuple[str, str | None]]:
    """Input ``i``'s targets: nvptx sm_90, and every ``subset``-th input the subset targets too."""
    return [MAIN_TARGET, *(SUBSET_TARGETS if subset and i % subset == 0 else ())]


def run(count: int, seed: int = 0, jobs: int = 2, timeout: float = 20.0, subset: int = 4,
        root: Path | None = None, progress: bool = False) -> Summary:
    """Fuzz ``count`` inputs in ``jobs`` worker subprocesses; the :class:`Summary`."""
    s = Summary()
    t0 = time.monotonic()
    work: queue.Queue = queue.Queue(maxsize=jobs * 4)
    results: dict[int, tuple[str, Result]] = {}
    lock = threading.Lock()

    def loop() -> None:
        w = Worker(timeout)
        try:
            while True:
                item = work.get()
                if item is None:
                    return
                i, src = item
                r = w.run(src, targets_for(i, subset))
                with lock:
                    results[i] = (src, r)
                    if progress and len(results) % 100 == 0:
                        bad = sum(x[1].outcome in _BAD for x in results.values())
                        print(f"[fuzz] {len(results)} inputs, {bad} failures, "
                              f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        finally:
            w.stop()

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(jobs)]
    for t in threads:
        t.start()
    for item in inputs(seed, count, root):
        work.put(item)
    for _ in threads:
        work.put(None)
    for t in threads:
        t.join()
    for i in sorted(results):
        src, r = results[i]
        s.results.append(r)
        if r.outcome in _BAD:
            s.first.setdefault(r.signature, (src, r))
    s.seconds = time.monotonic() - t0
    return s


def minimize_failure(src: str, result: Result, timeout: float = 20.0, budget: int = 300) -> str:
    """``src`` reduced while it gives the same failure signature on the same target."""
    t, _, a = result.target.partition(":")
    target = [(t, a or None)]
    w = Worker(timeout)
    try:
        return minimize(src, lambda s: w.run(s, target).signature == result.signature, budget)
    finally:
        w.stop()


def _slug(sig: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", sig.lower()).strip("_")[:60]


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring). Exit status 0 when no input failed, else 1."""
    p = argparse.ArgumentParser(prog="python -m kcompiler.tools.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--count", type=int, default=1000, help="inputs to try (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", "-j", type=int, default=2, help="worker subprocesses (default 2)")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds a target may take (default 20)")
    p.add_argument("--subset", type=int, default=4,
                   help="every N-th input also compiles for amdgcn gfx942/gfx1100 and cpu (0: never)")
    p.add_argument("--root", type=Path, default=None, help="the checkout whose sources seed the corpus")
    p.add_argument("--minimize", action="store_true", help="reduce each distinct failure")
    p.add_argument("--save", type=Path, default=None, help="write the (reduced) failures as .kc files here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        worker_main()
        return 0
    s = run(a.count, a.seed, a.jobs, a.timeout, a.subset, a.root, progress=True)
    print(s.table())
    for sig, (src, r) in s.first.items():
        small = minimize_failure(src, r, a.timeout) if a.minimize else src
        print(f"\n--- {sig} ({r.target}): {r.detail[:300]}\n{small}")
        if a.save:
            a.save.mkdir(parents=True, exist_ok=True)
            t, _, arch = r.target.partition(":")
            header = f"// fuzz: {sig}\n// targets: {t}:{arch}\n"
            (a.save / f"{_slug(sig)}.kc").write_text(header + small + "\n", encoding="utf-8")
    return 1 if s.first else 0


if __name__ == "__main__":
    sys.exit(main())
