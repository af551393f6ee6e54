"""Former home of :mod:`kcompiler.ir.printf` (printf formats, the arguments each conversion reads),
kept only for frontend/lowering.py's function-level imports until its split (issue 21) imports
``kcompiler.ir.printf`` itself; new code imports :mod:`kcompiler.ir.printf`."""
from .ir.printf import *  # noqa: F401,F403
