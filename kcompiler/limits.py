"""The limits kcompiler puts on a program's size and shape, in one place (docs/LANGUAGE.md, "Limits").

Each limit is checked where it can be located in the source, and the check comes before any stage
that would otherwise fail on it without a location (Python's recursion limit, a compile time that grows
without bound, LLVM's own late checks, which end the process):

- :data:`MAX_DEPTH`: how deep expressions and statements may nest, checked by the parser (each
  ``else if`` counts as one level more than the arm before it: it nests in that arm's ``else``).
- :data:`MAX_REGION_DEPTH`: how deep ``if`` / ``for`` / ``while`` may nest in a function after device
  functions are inlined into their callers (inlining adds the callee's nesting to the caller's), checked
  by :func:`check_region_depth` on the IR.
- :data:`MAX_LOOP_DEPTH`: how deep loops may nest in a function after inlining, checked there too.
- :data:`MAX_FUNCTION_OPS`: how many IR ops the frontend may build for one function, checked by
  :func:`unrolled_size_error` after each iteration of a ``comptime`` for loop. (Separately, the
  frontend unrolls at most 65,536 ``comptime`` iterations per compile, and the IR unroll pass keeps a
  function under its own bound: kcompiler/ir/passes/unroll.py.)
- :data:`MAX_INLINED_OPS`: how many IR ops a function may hold after inlining, checked there.
- The recursion of the compiler's own tree walks is bounded by those two; :func:`deep_recursion` raises
  Python's recursion limit to what that bound needs, for the whole pipeline (frontend, passes, verifier,
  LLVM lowering) rather than for one stage.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Iterator

from .diagnostics import CompileError

#: Deepest nesting of expressions and statements accepted by the parser (a sum of 1000 terms is 1000
#: deep; ``while c { while c { .. } }`` is 2 levels per loop: the loop and its block).
MAX_DEPTH = 1000

#: Deepest nesting of ``if`` / ``for`` / ``while`` regions in one function of the IR, after inlining.
MAX_REGION_DEPTH = 1000

#: Deepest nest of loops (``for``, ``while``; not ``comptime`` for loops, which are unrolled) in one
#: function of the IR, after inlining. LLVM's loop passes take time that grows about as the cube of
#: the depth: 64 nested loops compile in about 3 s, 128 in about 20 s (nvptx, O3; 2-core machine).
MAX_LOOP_DEPTH = 64

#: Most IR ops the frontend may build for one function (kernel or device function instance): checked as
#: each ``comptime`` for loop unrolls, since a big unrolled body is what reaches it. LLVM's code
#: generation takes time that grows faster than linearly with a function's size (a block of 16,384 ops
#: of stores: 12 s, 32,768: 52 s, 65,536: 200 s; nvptx on a loaded 2-core machine); the largest function
#: of the repository's own kernels (attention's prefill_mma at BM=BN=128) has about 12,500.
MAX_FUNCTION_OPS = 20_000

#: Most IR ops one function may hold once device functions are inlined into it (checked right after
#: inlining, before the passes and LLVM that grow faster than the size): a comptime loop of 1,000 calls
#: of math.exp and math.sin inlines to 1.75 million ops, which took over 300 s and 3 GB.
MAX_INLINED_OPS = 100_000

#: Python frames the deepest walk of any stage takes per level of nesting, with room to spare: the
#: deepest measured is the frontend lowering of nested statements (about 6 frames a level).
_FRAMES_PER_LEVEL = 12

#: The recursion limit :func:`deep_recursion` sets: every stage's walk of a program at the limits above,
#: plus the frames of the caller and of the pipeline itself.
RECURSION_LIMIT = _FRAMES_PER_LEVEL * max(MAX_DEPTH, MAX_REGION_DEPTH) + 2000


@contextmanager
def deep_recursion() -> Iterator[None]:
    """Run the body with Python's recursion limit at least :data:`RECURSION_LIMIT` (restored after).

    Python 3.11+ runs a Python-to-Python call without a C frame, so the limit can be this high without
    risking the C stack; the limits above keep every walk well inside it. Nested uses are cheap."""
    old = sys.getrecursionlimit()
    if old < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)
    try:
        yield
    finally:
        if old < RECURSION_LIMIT:
            sys.setrecursionlimit(old)


def unrolled_size_error(ops: int, iteration: int) -> str | None:
    """The error message when the function being lowered holds more than :data:`MAX_FUNCTION_OPS` IR
    ops (``ops``) after unrolling iteration ``iteration`` of a ``comptime`` for loop, else None (the
    frontend reports it at the loop's range)."""
    if ops <= MAX_FUNCTION_OPS:
        return None
    return (f"function too large: unrolling this comptime for loop (at iteration {iteration}) makes the "
            f"function more than {MAX_FUNCTION_OPS:,} IR ops, the limit (compile time grows faster than "
            "the function's size)")


#: Static shared memory (LDS) one AMDGCN workgroup may allocate, by arch: LLVM's AMDGPU backend stops
#: the process ("local memory (N) exceeds limit (M)") past it. 64 KiB on gfx9 (gfx90a, gfx942), gfx11
#: and gfx12; 160 KiB on gfx950. Source: LLVM's AMDGPU subtarget features
#: (FeatureAddressableLocalMemorySize65536 / ...163840) and its tests lds-limit-diagnostics*.ll
#: ("gfx950 supports upto 160 KB configurable LDS memory"; gfx942: limit 65536).
AMDGCN_LDS_BYTES = {"gfx90a": 65536, "gfx942": 65536, "gfx950": 163840, "gfx1100": 65536, "gfx1201": 65536}


def shared_memory_error(target: Any, declared: int, kernel: str) -> str | None:
    """The error message when a kernel's static ``shared`` arrays (``declared`` bytes, their sizes
    summed without padding, so never more than LLVM counts) exceed what ``target`` allows one block /
    workgroup, else None. Only AMDGCN is checked here: there LLVM ends the process."""
    if getattr(target, "name", None) != "amdgcn":
        return None
    limit = AMDGCN_LDS_BYTES.get(getattr(target, "arch", ""), 65536)
    if declared <= limit:
        return None
    return (f"shared memory of {declared:,} bytes in {kernel} exceeds the {limit:,}-byte LDS (shared memory) "
            f"of a workgroup on {target.arch}")


def check_inlined_size(module: Any) -> None:
    """Raise CompileError, located at the kernel or function, if inlining the device functions of the
    IR ``module`` would make a function of more than :data:`MAX_INLINED_OPS` ops. Run before inlining:
    the size is predicted (a function's ops plus, for each call, the callee's predicted size; a call
    back into a function being counted, recursion, which is not inlined, counts one op), so that a
    program past the limit is rejected before the copies are made."""
    by_name = {f.name: f for f in module.functions}
    sizes: dict[str, int] = {}

    def size(name: str, active: set[str]) -> int:
        if name in sizes:
            return sizes[name]
        active.add(name)
        n = 0
        for op in by_name[name].body.walk():
            callee = op.attrs.get("callee") if op.name == "call" else None
            n += size(callee, active) if callee in by_name and callee not in active else 1
            if n > MAX_INLINED_OPS:
                break
        active.discard(name)
        sizes[name] = n
        return n

    for fn in module.functions:
        if size(fn.name, set()) > MAX_INLINED_OPS:
            raise CompileError(
                f"function too large: {fn.attrs.get('source_name', fn.name)} would be more than "
                f"{MAX_INLINED_OPS:,} IR ops once the device functions it calls are inlined, the limit "
                "(compile time grows faster than the size); call them in a runtime loop "
                "(for i in range(...)) rather than a comptime one", fn.span)


def check_region_depth(module: Any, inlined: bool = False) -> None:
    """Raise CompileError, located at the op that goes too deep, if a function of the IR ``module`` (an
    :class:`~kcompiler.ir.core.Module`) nests regions more than :data:`MAX_REGION_DEPTH` deep or loops
    (``for``, ``while``) more than :data:`MAX_LOOP_DEPTH` deep, or, with ``inlined`` (the module's device
    functions are inlined), holds more than :data:`MAX_INLINED_OPS` ops.

    Iterative (an explicit stack), so that it can run before any recursive walk of the module."""
    for fn in module.functions:
        where = fn.attrs.get("source_name", fn.name)
        stack = [(fn.body, 0, 0)]
        size = 0
        while stack:
            region, depth, loops = stack.pop()
            size += len(region.ops)
            if inlined and size > MAX_INLINED_OPS:
                raise CompileError(
                    f"function too large: {where} is more than {MAX_INLINED_OPS:,} IR ops once the device "
                    "functions it calls are inlined, the limit (compile time grows faster than the size); "
                    "call them in a runtime loop (for i in range(...)) rather than a comptime one", fn.span)
            for op in region.ops:
                if not op.regions:
                    continue
                loop = op.name in ("for", "while")
                if depth + 1 > MAX_REGION_DEPTH:
                    raise CompileError(
                        f"nesting too deep: this '{op.name}' is nested more than {MAX_REGION_DEPTH} levels "
                        f"deep in {where} (limit {MAX_REGION_DEPTH}; inlined device functions add their "
                        "nesting to their caller's)", op.span or fn.span)
                if loop and loops + 1 > MAX_LOOP_DEPTH:
                    raise CompileError(
                        f"loops nested too deep: this '{op.name}' is loop {loops + 1} of a nest in {where} "
                        f"(limit {MAX_LOOP_DEPTH}: LLVM's loop optimisations take time that grows steeply with "
                        "the depth; inlined device functions add their loops to their caller's)",
                        op.span or fn.span)
                stack.extend((r, depth + 1, loops + loop) for r in op.regions)
