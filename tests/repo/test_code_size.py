"""Issue 21's size rules for kcompiler/: no Python file over ~800 lines and no function over ~100
(:data:`FILE_LIMIT`, :data:`FUNCTION_LIMIT`; a function counted from its ``def`` to its last line,
docstring included, with ast); and no kernel-library file (stdlib/*.kc) over :data:`FILE_LIMIT` lines
either (its functions have no limit). ``python -m tests.repo.test_code_size`` prints the five largest
of each, as the issue's closing note gives them."""
from __future__ import annotations

import ast
from pathlib import Path

from ..paths import ROOT

FILE_LIMIT = 800
FUNCTION_LIMIT = 110


def sizes(root: Path = ROOT / "kcompiler") -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(lines, path) of every .py file and (lines, 'path:line name') of every function and method
    under ``root``, each list largest first."""
    files, fns = [], []
    for p in sorted(root.rglob("*.py")):
        text = p.read_text(encoding="utf-8")
        rel = p.relative_to(root.parent).as_posix()
        files.append((len(text.splitlines()), rel))
        for node in ast.walk(ast.parse(text, rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                fns.append((node.end_lineno - node.lineno + 1, f"{rel}:{node.lineno} {node.name}"))
    return sorted(files, reverse=True), sorted(fns, reverse=True)


def kc_sizes(root: Path = ROOT / "stdlib") -> list[tuple[int, str]]:
    """(lines, path) of every .kc file directly in ``root`` (the kernel library), largest first."""
    return sorted(((len(p.read_text(encoding="utf-8").splitlines()), p.relative_to(root.parent).as_posix())
                   for p in root.glob("*.kc")), reverse=True)


def test_no_file_or_function_is_too_long():
    files, fns = sizes()
    assert files and fns
    big_files = [f"{path} ({n} lines)" for n, path in files if n > FILE_LIMIT]
    big_fns = [f"{where} ({n} lines)" for n, where in fns if n > FUNCTION_LIMIT]
    assert not big_files, f"split these files (over {FILE_LIMIT} lines): {big_files}"
    assert not big_fns, f"split these functions into named steps (over {FUNCTION_LIMIT} lines): {big_fns}"


def test_no_kernel_library_file_is_too_long():
    kcs = kc_sizes()
    assert kcs
    big = [f"{path} ({n} lines)" for n, path in kcs if n > FILE_LIMIT]
    assert not big, f"split these kernel-library files into modules (over {FILE_LIMIT} lines): {big}"


def test_sizes_counts_what_it_says(tmp_path: Path):
    pkg = tmp_path / "kcompiler"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f():\n    return 1\n\n\nclass C:\n    def m(self):\n        x = 1\n"
                              "        return x\n")
    files, fns = sizes(pkg)
    assert files == [(8, "kcompiler/a.py")]
    assert fns == [(3, "kcompiler/a.py:6 m"), (2, "kcompiler/a.py:1 f")]
    lib = tmp_path / "stdlib"
    lib.mkdir()
    (lib / "a.kc").write_text("fn f() -> i32 {\n    return 1;\n}\n")
    (lib / "b.kc").write_text("// one\n" * (FILE_LIMIT + 1))
    (lib / "c.py").write_text("x = 1\n")
    assert kc_sizes(lib) == [(FILE_LIMIT + 1, "stdlib/b.kc"), (3, "stdlib/a.kc")]


if __name__ == "__main__":
    files, fns = sizes()
    print("largest files:", *(f"  {n:5d}  {p}" for n, p in files[:5]), sep="\n")
    print("largest functions:", *(f"  {n:5d}  {w}" for n, w in fns[:5]), sep="\n")
    print("largest kernel-library files:", *(f"  {n:5d}  {p}" for n, p in kc_sizes()[:5]), sep="\n")
