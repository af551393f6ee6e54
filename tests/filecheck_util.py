"""Run LLVM-style FileCheck patterns (the `filecheck` package, a Python port of LLVM's FileCheck)."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap


def filecheck(text: str, checks: str) -> None:
    """Assert that ``text`` matches the ``CHECK:`` lines in ``checks`` (indentation is ignored)."""
    with tempfile.NamedTemporaryFile("w", suffix=".check", delete=False) as f:
        f.write(textwrap.dedent(checks).strip() + "\n")
    r = subprocess.run([sys.executable, "-m", "filecheck", f.name], input=text, capture_output=True, text=True)
    assert r.returncode == 0, f"FileCheck failed:\n{r.stdout}{r.stderr}\n--- input ---\n{text}"
