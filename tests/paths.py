"""Paths of the checkout that tests use, computed once here so that a test file's folder depth never
matters: ``ROOT`` (the checkout), ``EXAMPLES`` (examples/), ``PROGRAMS`` (tests/programs/)."""
from __future__ import annotations

from pathlib import Path

#: The checkout: the folder holding pyproject.toml, kcompiler/, examples/, stdlib/ and tests/.
ROOT = Path(__file__).resolve().parent.parent
#: The example programs and their drivers.
EXAMPLES = ROOT / "examples"
#: The test programs (.kc) shared by several tests, and the fuzzer's reduced inputs (fuzz/).
PROGRAMS = ROOT / "tests" / "programs"
