"""kcompiler works installed, not only from its checkout: the wheel and the sdist are built, each is
installed into a fresh virtual environment and compiles (and runs, on the CPU target) a kernel that
imports std.math from the installed package data, from a folder that is not the checkout. And every
module a test imports is declared in pyproject.toml, so that the README's
``pip install -e '.[test]' && python -m pytest -q`` works on a fresh machine.

The venvs see the running interpreter's site-packages (a ``.pth`` file: the dependencies are not
downloaded again, so this runs offline) but not its kcompiler, which each checks. The builds use the
running interpreter's setuptools (``--no-build-isolation``: the ``test`` extra has it); where that is
older than pyproject.toml asks, pip builds in isolation, which needs the package index.
"""
from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import venv
from pathlib import Path

import pytest
from ..paths import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# A kernel that imports std.math: compiling it reads stdlib/math.kc and the libm_*.kc modules from
# the installed package's data.
PROGRAM = """\
import std.math

kernel expm(x: ptr<f32>, y: ptr<f32>, n: i32) {
    let i = i32(block_id.x * block_dim.x + thread_id.x);
    if i < n { y[i] = math.exp(x[i]) + math.sin(x[i]); }
}
"""

# Run by the installed interpreter: where kcompiler comes from, then the kernel on the CPU target.
RUN = """\
import numpy as np, kcompiler as kc
print(kc.__file__)
x = np.linspace(-3, 3, 100, dtype=np.float32)
y = np.zeros_like(x)
kc.compile_file("prog.kc", target="cpu").expm[1, 128](x, y, 100)
assert np.allclose(y, np.exp(x) + np.sin(x), rtol=1e-6, atol=1e-6), y
"""


def _copy_source(dest: Path) -> Path:
    """The checkout's files without its build outputs (setuptools writes egg-info and build/ into
    the tree it builds, which must not be the checkout)."""
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "build", "dist", "*.egg-info", ".pytest_cache", ".hypothesis", ".whl",
        "*.ptx", "*.cubin", "kc-out"))
    return dest


def _isolation_flags(tool: str) -> list[str]:
    """Build without isolation, offline, where this interpreter has what pyproject.toml's
    build-system asks for; otherwise let the builder fetch it from the package index."""
    try:
        major = int(importlib.metadata.version("setuptools").split(".")[0])
        importlib.metadata.version("wheel")
    except importlib.metadata.PackageNotFoundError:
        return []
    if major < 68:
        return []
    return ["--no-build-isolation", "--no-index"] if tool == "pip" else ["--no-isolation"]


def _run(cmd: list, cwd: Path, env: dict | None = None) -> str:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def _fresh_venv(path: Path) -> tuple[Path, dict]:
    """A venv without pip that sees this interpreter's site-packages after its own; returns its
    bin folder and an environment to run it in (no PYTHONPATH, an empty kernel cache)."""
    venv.EnvBuilder(with_pip=False).create(path)
    purelib = Path(_run([path / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                        path).strip())
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (purelib / "_kc_test_deps.pth").write_text("\n".join(sorted(ours)) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["KC_CACHE_DIR"] = str(path / "kc-cache")
    env["PATH"] = f"{path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return path / "bin", env


def _install_and_compile(dist: Path, tmp: Path) -> None:
    """Installs ``dist`` (a wheel) into a fresh venv and, from a folder outside the checkout, compiles
    PROGRAM with the installed ``kc`` and runs it with the installed package."""
    bindir, env = _fresh_venv(tmp / "venv")
    # --ignore-installed: the kcompiler this interpreter has (editable, say) is visible through the
    # .pth file, and pip must neither count it as installed nor remove it.
    _run([sys.executable, "-m", "pip", "--python", bindir / "python", "install", "-q", "--no-deps",
          "--no-index", "--ignore-installed", dist], tmp, env)
    work = tmp / "elsewhere"
    work.mkdir()
    (work / "prog.kc").write_text(PROGRAM)
    _run([bindir / "kc", "compile", "prog.kc", "--target", "nvptx", "--arch", "sm_90", "-o", "prog.ptx"],
         work, env)
    assert ".entry expm" in (work / "prog.ptx").read_text()
    where = _run([bindir / "python", "-c", RUN], work, env).splitlines()[0]
    assert Path(where).resolve().is_relative_to((tmp / "venv").resolve()), \
        f"kcompiler came from {where}, not from the installed {dist.name}"


def test_wheel_installs_and_compiles_std_math(tmp_path):
    src = _copy_source(tmp_path / "src")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *_isolation_flags("pip"),
          "-w", tmp_path / "dist", src], tmp_path)
    wheel, = (tmp_path / "dist").glob("kcompiler-*.whl")
    _install_and_compile(wheel, tmp_path)


def test_sdist_has_the_package_data_and_installs(tmp_path):
    pytest.importorskip("build", reason="building the sdist needs the build package (the test extra)")
    src = _copy_source(tmp_path / "src")
    _run([sys.executable, "-m", "build", "--sdist", *_isolation_flags("build"), "--outdir", tmp_path / "dist",
          src], tmp_path)
    sdist, = (tmp_path / "dist").glob("kcompiler-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        tar.extractall(tmp_path / "unpacked", filter="data")
    for kc in sorted(p.name for p in (ROOT / "stdlib").glob("*.kc")):
        assert f"stdlib/{kc}" in names, f"the sdist lacks stdlib/{kc}"
    assert "kcompiler/frontend/grammar.lark" in names
    unpacked, = (tmp_path / "unpacked").iterdir()
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *_isolation_flags("pip"),
          "-w", tmp_path / "wheel", unpacked], tmp_path)
    wheel, = (tmp_path / "wheel").glob("kcompiler-*.whl")
    _install_and_compile(wheel, tmp_path)


# --- every import a test makes is declared -----------------------------------------------------------

#: Import names whose distribution is named otherwise, where the distribution is not installed here
#: to ask importlib.metadata.
_DIST_OF = {"cuda": "cuda-python", "hip": "hip-python", "yaml": "pyyaml", "cupy": "cupy"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    meta = PYPROJECT["project"]
    reqs = list(meta.get("dependencies", [])) + [r for v in meta.get("optional-dependencies", {}).values() for r in v]
    return {_norm(re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0]) for r in reqs}


def _optional(node: ast.AST) -> bool:
    """An import the test guards: inside ``try: ... except ImportError``."""
    return isinstance(node, ast.Try) and any(
        h.type is None or "ImportError" in ast.unparse(h.type) or "ModuleNotFoundError" in ast.unparse(h.type)
        for h in node.handlers)


def _test_imports() -> dict[str, list[str]]:
    """Top-level names of the third-party modules imported by tests/ (outside try/except ImportError;
    pytest.importorskip is optional by construction), each with where."""
    found: dict[str, list[str]] = {}
    for f in sorted((ROOT / "tests").rglob("*.py")):
        def visit(node: ast.AST, guarded: bool) -> None:
            for ch in ast.iter_child_nodes(node):
                if isinstance(ch, ast.Import):
                    names = [a.name for a in ch.names]
                elif isinstance(ch, ast.ImportFrom) and ch.level == 0 and ch.module:
                    names = [ch.module]
                else:
                    visit(ch, guarded or _optional(ch))
                    continue
                for n in names:
                    top = n.split(".")[0]
                    if not guarded and top not in sys.stdlib_module_names and top not in ("kcompiler", "tests"):
                        found.setdefault(top, []).append(f"{f.relative_to(ROOT)}:{ch.lineno}")
        visit(ast.parse(f.read_text()), False)
    return found


def test_every_test_import_is_declared():
    """A module tests import that no extra declares fails at collection on a fresh machine (mpmath
    did: tests/stdlib/test_libm_trig.py)."""
    declared = _declared()
    installed = importlib.metadata.packages_distributions()
    missing = {}
    for top, where in _test_imports().items():
        dists = {_norm(d) for d in installed.get(top, [])} | {_norm(_DIST_OF.get(top, top))}
        if not dists & declared:
            missing[top] = where[:3]
    assert not missing, f"tests import what pyproject.toml declares in no extra: {missing}"
