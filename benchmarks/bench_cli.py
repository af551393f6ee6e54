"""The CLI's start-up cost, hyperfine-style: each command run N times in a fresh process, wall time
of the whole process (min / median / mean ± sd), and ``python -X importtime``'s top offenders.

    python benchmarks/bench_cli.py [--runs 20] [--repo PATH] [--target nvptx --arch sm_90]

Commands timed (``--repo``: the checkout whose ``kcompiler`` is imported, default this one):

- ``python -c pass``: the interpreter alone, the floor;
- ``python -c "import kcompiler"``;
- ``python -m kcompiler.cli compile examples/vadd.kc ... -o OUT.ptx`` cold: each run in a new cache
  folder that holds only the parser's tables (lark's, copied from a warm folder), so the kernel is
  compiled but the one-off grammar build is not timed;
- the same warm: one folder, primed by a first run (not timed).

Bytecode is cached (in a temporary ``PYTHONPYCACHEPREFIX``) as for an installed package, even where
``PYTHONDONTWRITEBYTECODE`` is set (``--no-pyc`` keeps the environment's setting: every module is then
compiled from source in every run, which costs more than all of kcompiler's imports).

Results of a run on a given machine are recorded by hand in benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


_PYCACHE: Path | None = None  # where the children keep their bytecode (None: as the environment says)


def _env(repo: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KC_")}
    env.update(PYTHONPATH=str(repo), KC_CACHE_DIR=str(cache))
    if _PYCACHE is not None:  # as an installed package runs: compiled once, then from .pyc files
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(_PYCACHE)
    return env


def _time(cmd: list[str], env: dict[str, str], runs: int, before=None) -> list[float]:
    """Wall seconds of ``runs`` runs of ``cmd`` (``before()`` is called, untimed, before each)."""
    out = []
    for _ in range(runs):
        if before is not None:
            before()
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=env["KC_CACHE_DIR"])
        out.append(time.perf_counter() - t0)
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr.decode()}")
    return out


def _row(name: str, ts: list[float]) -> str:
    ms = [t * 1e3 for t in ts]
    sd = statistics.stdev(ms) if len(ms) > 1 else 0.0
    return (f"| {name} | {min(ms):.0f} | {statistics.median(ms):.0f} | {statistics.mean(ms):.0f} ± "
            f"{sd:.0f} | {len(ms)} |")


def _importtime(cmd: list[str], env: dict[str, str], runs: int = 5, top: int = 10) -> list[tuple[str, int, int]]:
    """The modules of ``cmd``'s import tree with the largest cumulative time: (name, self µs,
    cumulative µs), each the minimum over ``runs`` runs (the least disturbed by other work)."""
    best: dict[str, tuple[int, int]] = {}
    for _ in range(runs):
        r = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], env=env, capture_output=True, text=True,
                           cwd=env["KC_CACHE_DIR"])
        for line in r.stderr.splitlines():
            m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
            if m:
                name = m.group(4)
                self_us, cum = int(m.group(1)), int(m.group(2))
                old = best.get(name)
                best[name] = (min(old[0], self_us), min(old[1], cum)) if old else (self_us, cum)
    rows = sorted(((n, s, c) for n, (s, c) in best.items()), key=lambda x: -x[2])
    return rows[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--repo", type=Path, default=ROOT, help="checkout to import kcompiler from")
    ap.add_argument("--target", default="nvptx")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--no-pyc", action="store_true", help="keep the environment's bytecode setting "
                    "(default: bytecode cached in a temporary folder, as an installed package has it, "
                    "even where PYTHONDONTWRITEBYTECODE is set)")
    args = ap.parse_args()
    repo = args.repo.resolve()
    py = sys.executable
    tmp = Path(tempfile.mkdtemp(prefix="kc-bench-cli-"))
    global _PYCACHE
    _PYCACHE = None if args.no_pyc else tmp / "pycache"
    try:
        warm, out = tmp / "warm", tmp / "vadd.out"
        compile_cmd = [py, "-m", "kcompiler.cli", "compile", str(repo / "examples" / "vadd.kc"), "--target",
                       args.target, "--arch", args.arch, "--emit", "asm", "-o", str(out)]
        warm.mkdir()
        # Each child runs in its cache folder: ``python -m`` puts the current folder first on sys.path,
        # so it must not hold another kcompiler.
        _time(compile_cmd, _env(repo, warm), 1)  # primes the warm folder (and lark's tables)
        tables = [p for p in warm.iterdir() if p.is_file()]
        (tmp / "cold").mkdir()

        def fresh_cold() -> None:
            shutil.rmtree(tmp / "cold", ignore_errors=True)
            (tmp / "cold").mkdir()
            for p in tables:
                shutil.copy(p, tmp / "cold" / p.name)

        env_w, env_c = _env(repo, warm), _env(repo, tmp / "cold")
        rows = [
            ("`python -c pass`", _time([py, "-c", "pass"], env_w, args.runs)),
            ("`python -c \"import kcompiler\"`", _time([py, "-c", "import kcompiler"], env_w, args.runs)),
            ("`kc compile` cold (kernel not cached)", _time(compile_cmd, env_c, args.runs, fresh_cold)),
            ("`kc compile` warm (cached)", _time(compile_cmd, env_w, args.runs)),
        ]
        print(f"# {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"kcompiler from {repo}, load average {os.getloadavg()[0]:.2f}, bytecode "
              f"{'as the environment says' if _PYCACHE is None else 'cached'}")
        print(f"# kc compile examples/vadd.kc --target {args.target} --arch {args.arch} --emit asm -o OUT\n")
        print("| command | min ms | median ms | mean ± sd ms | runs |")
        print("|---|---|---|---|---|")
        for name, ts in rows:
            print(_row(name, ts))
        for what, cmd, env in [("import kcompiler", [py, "-c", "import kcompiler"], env_w),
                               ("warm kc compile", compile_cmd, env_w)]:
            print(f"\n`python -X importtime` of {what}: top offenders (cumulative µs, min of 5 runs)\n")
            print("| module | self µs | cumulative µs |")
            print("|---|---|---|")
            for name, s, c in _importtime(cmd, env):
                print(f"| {name} | {s} | {c} |")
        heavy = ("torch", "cuda", "hip", "lark", "llvmlite", "numpy")
        probe = ("import sys, runpy; sys.argv = {argv!r}\ntry:\n    runpy.run_module('kcompiler.cli', "
                 "run_name='__main__')\nexcept SystemExit:\n    pass\nprint(sorted({{m.split('.')[0] for m in "
                 "sys.modules}} & {heavy!r}), file=sys.stderr)").format(argv=["kc", *compile_cmd[4:]],
                                                                       heavy=set(heavy))
        r = subprocess.run([py, "-c", probe], env=env_w, capture_output=True, text=True, cwd=warm)
        print(f"\nheavy packages a warm kc compile imports: {r.stderr.strip().splitlines()[-1]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
