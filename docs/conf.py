"""Sphinx configuration of kcompiler's reference: the public Python API (kcompiler, kcompiler.ops,
kcompiler.runtime) from its docstrings (autodoc), and the Markdown docs of this folder (myst-parser)
read in place.

Build (README.md): ``python -m sphinx -W --keep-going -b html docs site/``; tests/repo/test_api_docs.py
runs it with warnings as errors. Nothing here fetches from the network (no intersphinx), and importing
the documented modules needs no GPU, torch, CuPy, cuda-python or hip-python: they are imported at
first use or guarded (tests/repo/test_api_docs.py imports every documented module with them blocked),
so no ``autodoc_mock_imports`` is needed, and none would hide a module that starts needing one.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # the checkout's kcompiler, installed or not

import kcompiler  # noqa: E402

project = "kcompiler"
author = "the kcompiler authors"
copyright = "the kcompiler authors"  # noqa: A001
release = version = kcompiler.__version__

extensions = ["sphinx.ext.autodoc", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
# STYLE.md is the contributors' notes on model codebases, not a page of the reference.
exclude_patterns = ["STYLE.md", "_build"]

# The docstrings are reStructuredText: ``code``, :class:`Name`, :func:`name`.
autodoc_default_options = {"members": True, "member-order": "bysource", "show-inheritance": True}
autodoc_typehints = "signature"
autodoc_class_signature = "mixed"

# The Markdown docs: headings down to ### get anchors, for links such as ``[...](LANGUAGE.md#limits)``
# (a link to another .md of this folder becomes a link to its page).
myst_heading_anchors = 3

html_theme = "alabaster"
html_title = f"kcompiler {release}"
html_static_path: list[str] = []


def _data_doc(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """A table re-exported by a package (``kcompiler.ops.MATMUL_TILES``, defined in
    kcompiler/ops/matmul.py) gets the ``#:`` comment of the module that defines it, not the
    docstring of its type (dict's), which autodoc shows otherwise."""
    if what != "data" or getattr(obj, "__doc__", None) != getattr(type(obj), "__doc__", None):
        return
    from sphinx.pycode import ModuleAnalyzer

    package, _, attr = name.rpartition(".")
    pkg = importlib.import_module(package)
    lines[:] = []
    for mod in sorted(m for m in sys.modules if m.startswith(package + ".")):
        if attr in getattr(sys.modules[mod], "__all__", ()) and getattr(pkg, attr, None) is obj:
            doc = ModuleAnalyzer.for_module(mod).find_attr_docs().get(("", attr))
            if doc:
                lines[:] = list(doc)
                return


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _data_doc)
