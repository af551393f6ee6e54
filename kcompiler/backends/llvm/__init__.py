"""The LLVM stage shared by every target: IR → LLVM IR (lower.py) → optimised LLVM module."""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

import llvmlite.binding as llvm

from ...diagnostics import CompileError
from ...ir.core import Module
from ...gcscope import fewer_collections
from ...limits import deep_recursion, kernel_display
from ..target import CompileOptions, Target
from .codegen import note_memory_ops
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
@fewer_collections()
def compile_ir(ir_module: Module, target: Target, options: CompileOptions | None = None) -> "llvm.ModuleRef":
    """Lower ``ir_module`` for ``target``, verify it with LLVM's verifier, optimise it, and give
    the target its last rewrite (:meth:`Target.rewrite_optimized`).

    Returns an ``llvmlite.binding.ModuleRef`` ready for :meth:`Target.emit`. Raises CompileError
    where the target cannot do an operation of the program.
    """
    options = options or CompileOptions()
    initialize()
    llvm_ir = lower_module(ir_module, target, options)
    text = str(llvm_ir)
    with _stage(ir_module, target, "parsing the LLVM IR kcompiler made"):
        ref = llvm.parse_assembly(text)
    with _stage(ir_module, target, "LLVM's verifier"):
        ref.verify()
    with _stage(ir_module, target, f"LLVM's O{options.opt_level} optimisation"):
        optimize(ref, target, options.opt_level)
    with _stage(ir_module, target, "the target's rewrite of the optimised module"):
        ref = target.rewrite_optimized(ref)
    note_memory_ops(ref, llvm_ir, target.alloca_space)  # the code generator's options for huge blocks (codegen.py)
    return ref


class InternalCompilerError(RuntimeError):
    """LLVM rejected what kcompiler gave it: a kcompiler bug, not an error in the program. The message
    says so, names the kernels and the stage, and asks for a report. (LLVM errors that end the process
    are caught where the code generator runs in a child process, codegen.py; kcompiler checks the
    limits it can before, kcompiler/limits.py.)"""


#: RuntimeErrors of the emission stage that say what this machine lacks (no ptxas, no
#: ld.lld), not what kcompiler did wrong: the CLI reports them as they are.
_MISSING_TOOLS = ("CubinUnavailable", "LinkerUnavailable")

#: What each ``emit`` kind runs, as :func:`emission` names the stage.
_EMISSION = {"asm": "the target's code generator (assembly)",
             "obj": "the target's code generator and assembler/linker (binary: ptxas, ld.lld)"}


@contextmanager
def emission(ir_module: Module | None, target: Target, kind: str) -> Iterator[None]:
    """Around ``target.emit(ref, kind)``: a RuntimeError from LLVM's code generator or the target's
    assembler or linker (ptxas, ld.lld) comes back as an :class:`InternalCompilerError` naming the
    kernels of ``ir_module`` and the stage; the errors of a missing tool (:data:`_MISSING_TOOLS`) pass
    as they are. What user programs can cause there is checked before (kcompiler/limits.py)."""
    try:
        yield
    except RuntimeError as e:
        if type(e).__name__ in _MISSING_TOOLS:
            raise
        _user_caused(ir_module, target, str(e))
        with _stage(ir_module, target, _EMISSION.get(kind, f"emitting {kind}")):
            raise


#: ptxas's report of a block's static shared memory past its limit (with the padding it puts between
#: arrays, which kcompiler's check before it, summing the arrays' sizes, does not count).
_PTXAS_SHARED = re.compile(r"Entry function '([^']+)' uses too much shared data \((0x[0-9a-fA-F]+) bytes, "
                           r"(0x[0-9a-fA-F]+) max\)")


#: The AMDGPU backend's report of a kernel's private segment (scratch) past its limit: its local arrays
#: and the registers the register allocator spilled (AMDGPUAsmPrinter, a DiagnosticInfoStackSize that
#: ends the process: codegen.py runs it in a child), and of its LDS past the limit.
_AMDGPU_STACK = re.compile(r"stack frame size \((\d+)\) exceeds limit \((\d+)\) in function '([^']+)'")
_AMDGPU_LDS = re.compile(r"local memory \((\d+)\) exceeds limit \((\d+)\) in function '([^']+)'")


def _user_caused(ir_module: Module | None, target: Target, message: str) -> None:
    """Raise CompileError, located at the kernel, where an emission error ``message`` is the user's
    program past a limit kcompiler's own check could not see exactly (ptxas's static shared memory,
    padding included; AMDGPU's private segment with register spills, its LDS); otherwise return."""
    if ir_module is None:
        return
    for pattern, what in ((_PTXAS_SHARED, "ptxas"), (_AMDGPU_STACK, "private"), (_AMDGPU_LDS, "lds")):
        m = pattern.search(message)
        if m is not None:
            break
    else:
        return
    fn = next((f for f in ir_module.kernels if f.name == m.group(1 if what == "ptxas" else 3)), None)
    if fn is None:
        return
    if what == "ptxas":
        used, limit = int(m.group(2), 16), int(m.group(3), 16)
        raise CompileError(f"shared memory of {used:,} bytes in {kernel_display(fn)}, with the padding that "
                           f"aligns each array, exceeds the {limit:,}-byte static shared memory of a block on "
                           f"{target.arch}; more needs dynamic shared memory: dynamic_shared[T]() in the kernel "
                           "and shared= bytes at launch", fn.span)
    used, limit = int(m.group(1)), int(m.group(2))
    if what == "private":
        raise CompileError(f"private memory of {used:,} bytes a work-item in {kernel_display(fn)} (its local "
                           f"arrays and the registers the code generator spilled to memory) exceeds the "
                           f"{limit:,}-byte private segment of a work-item on {target.arch}; use smaller local "
                           "arrays or keep fewer values live at once", fn.span)
    raise CompileError(f"LDS (shared memory) of {used:,} bytes in {kernel_display(fn)}, as LLVM lays it out, "
                       f"exceeds the {limit:,}-byte LDS of a workgroup on {target.arch}", fn.span)


@contextmanager
def _stage(ir_module: Module | None, target: Target, stage: str) -> Iterator[None]:
    try:
        yield
    except RuntimeError as e:
        if isinstance(e, InternalCompilerError):
            raise
        kernels = (", ".join(kernel_display(f) for f in ir_module.kernels) if ir_module is not None
                   else "") or "no kernel"
        raise InternalCompilerError(
            f"internal compiler error: {stage} failed for {kernels} ({target.name} {target.arch}): {e}\n"
            "This is a kcompiler bug, not an error in your program; please report it with the .kc file "
            "and the command.") from e


__all__ = ["InternalCompilerError", "LoweringContext", "UnsupportedOnTarget", "compile_ir", "emission", "initialize",
           "lower_module", "optimize"]
