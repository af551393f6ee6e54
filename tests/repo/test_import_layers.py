"""The stages' import order (issue 21; docs/ARCHITECTURE.md "Imports follow the stages"): import-linter's
layered contract in pyproject.toml ([tool.importlinter]) holds, so a module never imports a later stage
(function-level imports included). Planting ``import kcompiler.runtime`` in kcompiler/ir/types.py makes
this test fail."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())  # the checkout

importlinter_cli = pytest.importorskip("importlinter.cli", reason="import-linter (the test extra) is not installed")


def test_imports_follow_the_stages(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the contract names the package, found from the checkout
    monkeypatch.syspath_prepend(str(ROOT))
    rc = importlinter_cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True,
                                       no_logo=True)
    out = capsys.readouterr().out
    assert rc == importlinter_cli.EXIT_STATUS_SUCCESS, "an import against the stages' order:\n" + out


def test_the_contract_lists_every_stage():
    """A module missing from the layers would go unchecked: every subpackage and module of kcompiler
    is in a layer but the package's __init__ (the public API, above every stage) and the printf shim
    (kept for frontend/lowering.py until its split)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        contract = tomllib.load(f)["tool"]["importlinter"]["contracts"][0]
    listed = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    pkg = ROOT / "kcompiler"
    present = {p.stem for p in pkg.glob("*.py")} | {p.name for p in pkg.iterdir() if (p / "__init__.py").exists()}
    assert present - {"__init__", "printf"} == listed
