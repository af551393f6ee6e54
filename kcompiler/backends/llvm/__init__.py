"""The LLVM stage shared by every target: IR → LLVM IR (lower.py) → optimised LLVM module."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

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
    with _stage(ir_module, target, "parsing the LLVM IR kcompiler made"):
        ref = llvm.parse_assembly(text)
    with _stage(ir_module, target, "LLVM's verifier"):
        ref.verify()
    with _stage(ir_module, target, f"LLVM's O{options.opt_level} optimisation"):
        optimize(ref, target, options.opt_level)
    with _stage(ir_module, target, "the target's rewrite of the optimised module"):
        return target.rewrite_optimized(ref)


class InternalCompilerError(RuntimeError):
    """LLVM rejected what kcompiler gave it: a kcompiler bug, not an error in the program. The message
    says so, names the kernels and the stage, and asks for a report. (LLVM errors that end the process
    cannot be caught here: kcompiler checks those limits first, kcompiler/limits.py.)"""


@contextmanager
def _stage(ir_module: Module, target: Target, stage: str) -> Iterator[None]:
    try:
        yield
    except RuntimeError as e:
        if isinstance(e, InternalCompilerError):
            raise
        kernels = ", ".join(f.attrs.get("source_name", f.name) for f in ir_module.kernels) or "no kernel"
        raise InternalCompilerError(
            f"internal compiler error: {stage} failed for {kernels} ({target.name} {target.arch}): {e}\n"
            "This is a kcompiler bug, not an error in your program; please report it with the .kc file "
            "and the command.") from e


__all__ = ["InternalCompilerError", "LoweringContext", "UnsupportedOnTarget", "compile_ir", "initialize", "lower_module", "optimize"]
