"""The kernel-language frontend: source → AST (parser.py, grammar.lark) → checked Program (checker.py,
program.py) → IR module per target and specialisation (lowering.py; one function by fn_lowering.py,
a visitor of statements and expressions with the type rules of semantic.py; builtins through
builtin_registry.py).

    program = load_program(text, "saxpy.kc")          # CompileError on bad input, every error at once
    sig = program.signature("saxpy")                   # compile-time params, inference from arg types
    values = sig.infer([PointerType(F16), PointerType(F16), F32, None], {"VEC": 8})
    module = lower(program, target, {"saxpy": values})  # ir.Module: saxpy__T_f16__VEC_8 and its fns
"""
from __future__ import annotations

from . import ast
from .lowering import check, lower
from .program import ComptimeParam, KernelSignature, Program, SourceModule, load_program, stdlib_dir


def dump_ast(program: Program) -> str:
    """The AST of the program's main file, indented (``kc compile --emit ast``)."""
    return ast.dump(program.main.ast)


__all__ = ["load_program", "lower", "check", "dump_ast", "Program", "KernelSignature", "ComptimeParam",
           "SourceModule", "stdlib_dir", "ast"]
