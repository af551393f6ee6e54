"""The API reference (docs/conf.py, docs/index.rst, docs/api/) builds with Sphinx, warnings as errors,
as the README says; it documents every public name of ``kcompiler``, ``kcompiler.ops`` and each
module of ``kcompiler.runtime``, and the guides (docs/LANGUAGE.md, math.md, ARCHITECTURE.md,
amd-hostcall.md) are pages of it. Every public function, class, method and property of those
modules has a docstring, and importing them for the reference needs no GPU, torch, CuPy,
cuda-python or hip-python.

The build runs offline (no intersphinx) in a subprocess, into a temporary folder: about 10 s of CPU.
"""
from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

# docs/conf.py's Markdown reader and the builder: declared in the test extra (CI has them); a machine
# without them (the GPU machine, which reaches no registry) skips the file instead of failing to collect
pytest.importorskip("myst_parser")
pytest.importorskip("sphinx")

import kcompiler
import kcompiler.ops
from ..paths import ROOT

#: The runtime's modules, each a section of docs/api/runtime.rst.
RUNTIME_MODULES = sorted(p.stem for p in (ROOT / "kcompiler" / "runtime").glob("*.py") if not p.stem.startswith("_"))
#: Documented on the kcompiler page (the names users write: ``kc.Module``), left out of the runtime page.
ON_TOP_PAGE = {"module": {"Module", "Kernel", "Launch", "CompileError"},
               "device": {"Device", "Artifact", "LaunchError", "DeviceAssertionError", "LaunchConfigError"},
               "stdio": {"capture_printf"}, "graph": {"graph", "Graph"},
               "device_array": {"DeviceArray", "device_array", "to_device", "from_dlpack"},
               "tuning": {"autotune"}}
#: The ops families, each a section of docs/api/ops.rst.
OPS_FAMILIES = sorted(p.stem for p in (ROOT / "kcompiler" / "ops").glob("*.py") if not p.stem.startswith("_"))
GUIDES = ["LANGUAGE", "math", "ARCHITECTURE", "amd-hostcall"]


def _inventory(path: Path) -> dict[str, str]:
    """The objects.inv of a build: each object's name and ``domain:role`` (Sphinx's inventory v2:
    four header lines, then zlib-compressed lines "name domain:role priority uri display")."""
    data = path.read_bytes()
    for _ in range(4):
        data = data[data.index(b"\n") + 1:]
    out = {}
    for line in zlib.decompress(data).decode().splitlines():
        name, role = line.split(" ", 2)[:2]
        out[name] = role
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-j", "1", "-q", "-b", "html",
                        str(ROOT / "docs"), str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"the API reference does not build cleanly:\n{r.stdout[-4000:]}\n{r.stderr[-6000:]}"
    return out


def test_reference_builds_with_warnings_as_errors(built: Path):
    for page in ["index", *GUIDES, "api/kcompiler", "api/ops", "api/runtime"]:
        assert (built / f"{page}.html").is_file(), page


def test_guides_are_pages(built: Path):
    inv = _inventory(built / "objects.inv")
    missing = [g for g in GUIDES if inv.get(g) != "std:doc"]
    assert not missing, f"guides not in the reference: {missing}"
    # a table of docs/math.md rendered as a table, not as text with bars
    assert "<table" in (built / "math.html").read_text()


def test_every_public_name_is_documented(built: Path):
    """A name added to an ``__all__`` (or a new runtime module) without a place in docs/api/*.rst, or
    without a docstring (autodoc's ``:members:`` skips those), fails here."""
    inv = _inventory(built / "objects.inv")
    missing = [f"kcompiler.{n}" for n in kcompiler.__all__ if f"kcompiler.{n}" not in inv]
    for n in kcompiler.ops.__all__:
        if f"kcompiler.ops.{n}" not in inv:
            missing.append(f"kcompiler.ops.{n}")
    ops_page = (ROOT / "docs" / "api" / "ops.rst").read_text()
    missing += [f"kcompiler.ops.{f} (module)" for f in OPS_FAMILIES if f".. automodule:: kcompiler.ops.{f}\n" not in ops_page]
    for m in RUNTIME_MODULES:
        mod = importlib.import_module(f"kcompiler.runtime.{m}")
        if inv.get(f"kcompiler.runtime.{m}") != "py:module":
            missing.append(f"kcompiler.runtime.{m} (module)")
        for n in getattr(mod, "__all__", ()):
            obj = getattr(mod, n)
            if n in ON_TOP_PAGE.get(m, ()):
                continue
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and f"kcompiler.runtime.{m}.{n}" not in inv:
                missing.append(f"kcompiler.runtime.{m}.{n}")
    assert not missing, (f"public names missing from the API reference (give each a docstring and a place in "
                         f"docs/api/kcompiler.rst, ops.rst or runtime.rst): {missing}")


def _public_objects():
    """(qualified name, object) of each public function, class, method and property of the
    documented modules."""
    modules = [kcompiler, kcompiler.ops, *(importlib.import_module(f"kcompiler.ops.{f}") for f in OPS_FAMILIES),
               *(importlib.import_module(f"kcompiler.runtime.{m}") for m in RUNTIME_MODULES)]
    seen: set[int] = set()
    for mod in modules:
        names = getattr(mod, "__all__", None) or [n for n, o in vars(mod).items() if not n.startswith("_")
                                                  and getattr(o, "__module__", None) == mod.__name__]
        for n in names:
            obj = getattr(mod, n)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)) or id(obj) in seen:
                continue
            seen.add(id(obj))
            yield f"{mod.__name__}.{n}", obj
            if inspect.isclass(obj):
                for k, v in vars(obj).items():
                    f = v.fget if isinstance(v, property) else getattr(v, "__func__", v)
                    if not k.startswith("_") and (inspect.isfunction(f) or isinstance(v, property)):
                        yield f"{mod.__name__}.{n}.{k}", f


def test_public_api_has_docstrings():
    missing = [name for name, obj in _public_objects() if not (obj.__doc__ or "").strip()
               or (inspect.isclass(obj) and obj.__doc__.startswith(f"{obj.__name__}("))]  # a dataclass's generated one
    assert not missing, f"public API without a docstring: {missing}"


#: Run in a fresh interpreter: torch, CuPy, cuda-python and hip-python cannot be imported, as on a
#: machine without them; every documented module must import all the same.
_BLOCKED_IMPORT = """
import importlib, importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "cupy", "cuda", "hip"):
            raise ImportError(f"{name} is blocked")
        return None
sys.meta_path.insert(0, Block())
for m in sys.argv[1:]:
    importlib.import_module(m)
import kcompiler
for n in kcompiler.__all__:
    getattr(kcompiler, n)
print("ok")
"""


def test_documented_modules_import_without_gpu_stacks():
    mods = ["kcompiler", "kcompiler.ops", *(f"kcompiler.ops.{f}" for f in OPS_FAMILIES),
            *(f"kcompiler.runtime.{m}" for m in RUNTIME_MODULES)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _BLOCKED_IMPORT, *mods], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
