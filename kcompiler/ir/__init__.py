"""kcompiler's IR: structured SSA with a printer and a verifier (see core.py for the op table)."""
from .core import OPS, Function, Module, Op, OpInfo, Region, Value
from .builder import Builder
from .printer import print_function, print_module
from . import types

__all__ = ["OPS", "Function", "Module", "Op", "OpInfo", "Region", "Value", "Builder", "print_function",
           "print_module", "types"]
