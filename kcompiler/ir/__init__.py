"""kcompiler's IR: structured SSA with a printer and a verifier (see core.py for the op table).

The names below are imported at first use (module ``__getattr__``), so that ``kcompiler.ir.types``,
which the cache and the runtime need, can be imported without the rest of the IR."""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"OPS": ".core", "Function": ".core", "Module": ".core", "Op": ".core", "OpInfo": ".core",
         "Region": ".core", "Value": ".core", "Builder": ".builder", "print_function": ".printer",
         "print_module": ".printer", "types": ".types", "Intrinsic": ".intrinsics",
         "intrinsics": ".intrinsics"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'kcompiler.ir' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name], __name__)
    value = module if name in ("types", "intrinsics") else getattr(module, name)
    globals()[name] = value
    return value


__all__ = ["OPS", "Function", "Module", "Op", "OpInfo", "Region", "Value", "Builder", "print_function",
           "print_module", "types", "Intrinsic", "intrinsics"]
