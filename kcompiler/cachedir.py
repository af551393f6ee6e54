"""Where kcompiler keeps what it builds once: compiled kernels (runtime/cache.py), the parser's LALR
tables (frontend/parser.py) and autotuning results. A base module, so that every stage may ask."""
from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """``$KC_CACHE_DIR``, else ``$XDG_CACHE_HOME/kcompiler``, else ``~/.cache/kcompiler`` (read at each
    call, so tests and users may change the variables at any time)."""
    env = os.environ.get("KC_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "kcompiler"
