"""The stages' import order (issue 21; docs/ARCHITECTURE.md "Imports follow the stages"): import-linter's
layered contract in pyproject.toml ([tool.importlinter]) holds, so a module never imports a later stage
(function-level imports included). Planting ``import kcompiler.runtime`` in kcompiler/ir/types.py makes
this test fail."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())  # the checkout

importlinter_cli = pytest.importorskip("importlinter.cli", reason="import-linter (the test extra) is not installed")


def test_imports_follow_the_stages():
    """lint-imports in a child process: import-linter configures logging as it runs (disabling the
    loggers that exist), which must not reach the rest of the test session."""
    code = ("import sys; from importlinter.cli import lint_imports, EXIT_STATUS_SUCCESS; "
            f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}, no_cache=True, "
            "no_logo=True) != EXIT_STATUS_SUCCESS)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, "an import against the stages' order:\n" + r.stdout + r.stderr


def test_the_contract_lists_every_stage():
    """A module missing from the layers would go unchecked: every subpackage and module of kcompiler
    is in a layer but the package's __init__ (the public API, above every stage)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        contract = tomllib.load(f)["tool"]["importlinter"]["contracts"][0]
    listed = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    pkg = ROOT / "kcompiler"
    present = {p.stem for p in pkg.glob("*.py")} | {p.name for p in pkg.iterdir() if (p / "__init__.py").exists()}
    assert present - {"__init__"} == listed
