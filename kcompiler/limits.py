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
- :class:`ResourceLimits`: what one kernel may use of the machine (static shared memory, local memory
  per thread, the parameter block), per arch, from each backend's arch table
  (``backends/<name>/archs.py``, with the sources of the numbers) through ``Target.resource_limits``:
  checked at the ``shared`` declaration (:func:`shared_memory_error`) and, after inlining, at the
  local array that passes the limit or at the kernel (:func:`check_resources`).
- The recursion of the compiler's own tree walks is bounded by those two; :func:`deep_recursion` raises
  Python's recursion limit to what that bound needs, for the whole pipeline (frontend, passes, verifier,
  LLVM lowering) rather than for one stage.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from .diagnostics import CompileError
from .ir.types import alignof, sizeof

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
#: of stores: 12 s, 32,768: 52 s, 65,536: 200 s; nvptx on a loaded 2-core machine; most of it in the GPU
#: load/store vectorizer, which backends/llvm/codegen.py now turns off for such a block: 4,096 stores
#: take 4 s of CPU to PTX or AMDGCN assembly, from 6.6 and 10.4); the largest function of the
#: repository's own kernels (attention's prefill_mma at BM=BN=128) has about 12,500.
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


@dataclass(frozen=True)
class ResourceLimits:
    """What one kernel of a target's arch may use, in bytes, where the target's own tools (LLVM,
    ptxas, the driver) would otherwise fail late, without a location, or end the process. The numbers
    live with each backend's arch table (``backends/<name>/archs.py``), which gives its Target's
    :meth:`~kcompiler.backends.target.Target.resource_limits`; this module checks them. None: no limit
    checked.

    Attributes:
        static_shared: static ``shared`` arrays of one block / workgroup.
        shared_what: how messages name that memory ("static shared memory of a block").
        shared_way_out: the message's advice past the limit.
        private: local (private) memory of one thread / work-item.
        private_reserve: bytes of ``private`` the code generator keeps for its own stack slots: local
            arrays may use ``private - private_reserve``.
        private_what: how messages name that memory ("private segment of a work-item").
        params: the kernel parameter block (the parameters laid out at their natural alignment).
    """

    static_shared: int | None = None
    shared_what: str = "shared memory of a block"
    shared_way_out: str = ""
    private: int | None = None
    private_reserve: int = 0
    private_what: str = "local memory of a thread"
    params: int | None = None


def _limits(target: Any) -> ResourceLimits:
    get = getattr(target, "resource_limits", None)
    return get() if get is not None else ResourceLimits()


def kernel_display(fn: Any) -> str:
    """The name of IR function ``fn`` as the user wrote it, with its compile-time values:
    ``sgemm[TILE=1023]`` (not its symbol, ``sgemm__TILE_1023``)."""
    name = fn.attrs.get("source_name", fn.name)
    values = fn.attrs.get("params") or {}
    return f"{name}[{', '.join(f'{k}={v}' for k, v in values.items())}]" if values else name


def shared_memory_error(target: Any, declared: int, kernel: str) -> str | None:
    """The error message when a kernel's static ``shared`` arrays (``declared`` bytes, their sizes
    summed without padding, so never more than LLVM or ptxas count) exceed what ``target`` allows one
    block / workgroup (:attr:`ResourceLimits.static_shared`), else None. ``kernel``: its name as
    :func:`kernel_display` spells it."""
    lim = _limits(target)
    if lim.static_shared is None or declared <= lim.static_shared:
        return None
    return (f"shared memory of {declared:,} bytes in {kernel} exceeds the {lim.static_shared:,}-byte "
            f"{lim.shared_what} on {target.arch}" + (f"; {lim.shared_way_out}" if lim.shared_way_out else ""))


def local_memory_error(target: Any, declared: int, kernel: str, arrays: int = 1) -> str | None:
    """The error message when ``arrays`` local arrays, ``declared`` bytes in all, in one thread of
    ``kernel`` exceed the local (private) memory ``target`` gives it, less what its code generator
    keeps for itself (:attr:`ResourceLimits.private`, :attr:`ResourceLimits.private_reserve`), else None."""
    lim = _limits(target)
    if lim.private is None or declared <= lim.private - lim.private_reserve:
        return None
    keeps = (f", less {lim.private_reserve} bytes the code generator keeps for its own stack slots"
             if lim.private_reserve else "")
    what = "local array of" if arrays == 1 else f"{arrays} local arrays of, together,"
    return (f"{what} {declared:,} bytes in {kernel} exceed{'s' if arrays == 1 else ''} the "
            f"{lim.private:,}-byte {lim.private_what} on {target.arch}"
            f"{keeps}; keep big arrays in global memory (a ptr parameter) or in shared memory")


def param_block_size(types: list[Any]) -> int:
    """Bytes of a kernel parameter block holding values of the IR ``types`` in order, each at its
    natural alignment (as PTX's .param space and AMD's kernarg segment lay them out)."""
    off = 0
    for t in types:
        a = alignof(t)
        off = (off + a - 1) // a * a + sizeof(t)
    return off


def check_resources(module: Any, target: Any) -> None:
    """Raise CompileError if a kernel of the IR ``module`` (its device functions inlined) passes one of
    ``target``'s :class:`ResourceLimits`: its parameter block (located at the kernel) or its local
    arrays, summed in program order (located at the declaration that passes the limit). Run after
    inlining, so that a device function's arrays count in each kernel they are inlined into."""
    lim = _limits(target)
    for fn in module.kernels:
        name = kernel_display(fn)
        if lim.params is not None:
            size = param_block_size([p.type for p in fn.params])
            if size > lim.params:
                raise CompileError(
                    f"the parameters of {name} take {size:,} bytes, more than the {lim.params:,} bytes a "
                    f"kernel's parameters may take on {target.name} {target.arch}; pass big data through "
                    "memory (a ptr parameter)", fn.span)
        if lim.private is None:
            continue
        declared = arrays = 0
        for op in fn.body.walk():
            if op.name != "alloca" or op.result is None:
                continue
            t = op.result.type.pointee
            if type(t).__name__ != "ArrayType":
                continue  # scalars and vectors live in registers
            declared += t.size
            arrays += 1
            if (too_much := local_memory_error(target, declared, name, arrays)) is not None:
                raise CompileError(too_much, op.span or fn.span)


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
