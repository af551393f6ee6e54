"""The LLVM stage shared by every target: IR → LLVM IR (lower.py) → optimised LLVM module."""
from __future__ import annotations

import llvmlite.binding as llvm

from ...ir.core import Module
from ...limits import deep_recursion
from ..target import CompileOptions, Target
from .lower import LoweringContext, UnsupportedOnTarget, lower_module

_initialized = False


def initialize() -> None:
    """Initialise LLVM's targets once per process (cheap after the first call)."""
    global _initialized
    if not _initialized:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _initialized = True


def optimize(ref: "llvm.ModuleRef", target: Target, opt_level: int) -> None:
    """Run LLVM's default pipeline (O0-O3) on ``ref`` in place, tuned for ``target``."""
    tm = target.target_machine(opt_level)
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(ref, pb)


@deep_recursion()
def compile_ir(ir_module: Module, target: Target, options: CompileOptions | None = None) -> "llvm.ModuleRef":
    """Lower ``ir_module`` for ``target``, verify it with LLVM's verifier, optimise it, and give
    the target its last rewrite (:meth:`Target.rewrite_optimized`).

    Returns an ``llvmlite.binding.ModuleRef`` ready for :meth:`Target.emit`. Raises CompileError
    where the target cannot do an operation of the program.
    """
    options = options or CompileOptions()
    initialize()
    text = str(lower_module(ir_module, target, options))
    ref = llvm.parse_assembly(text)
    ref.verify()
    optimize(ref, target, options.opt_level)
    return target.rewrite_optimized(ref)


__all__ = ["LoweringContext", "UnsupportedOnTarget", "compile_ir", "initialize", "lower_module", "optimize"]
