"""The checks of the named-barrier builtins (NVIDIA; named_barrier.py states the PTX with its PTX ISA
section), written against :class:`~kcompiler.ir.builtin_surface.BuiltinCall`:

- ``barrier_sync(id, nthreads)``: the calling threads arrive on named barrier ``id`` and wait until
  ``nthreads`` threads (their own and those of ``barrier_arrive``) have arrived; then it resets.
- ``barrier_arrive(id, nthreads)``: arrive on barrier ``id`` (whose phase counts ``nthreads``) and go on.

``id``: 1 to 15, a compile-time integer or a run-time integer of at most 32 bits (a run-time id is the
caller's to keep in range: on the GPU another is undefined, the CPU target stops the launch); 0 is
``barrier()``'s and refused. ``nthreads``: a compile-time multiple of 32 (the warp size) from 32 to
1024. Every thread of a warp makes the same call (PTX's ``.aligned``), as FlashAttention-3's warp
scheduler barrier and CUTLASS's ``NamedBarrier`` do. Available on every NVIDIA arch and on the CPU
target with warps of 32 (emulated: backends/cpu/named_barrier.py); AMD has no such barrier (the
target's feature check refuses the call, located).

Surface::
    barrier_sync(1, 256)          // warpgroup 0 waits for its turn: its 128 threads + 128 arrivals
    barrier_arrive(2, 256)        // ... then lets warpgroup 1 go (its barrier is id 2)
"""
from __future__ import annotations

from ...ir.builtin_surface import BuiltinCall
from ...ir.core import Value
from ...ir.types import U32
from .builtins_hopper import int_operand

#: The builtins checked here and the target intrinsic each emits.
INTRINSIC_OF = {"barrier_sync": "nvptx.barrier.sync", "barrier_arrive": "nvptx.barrier.arrive"}

#: The named barriers a program may use: 1 .. 15 (0 is barrier()'s, bar.sync 0).
MAX_ID = 15


def check(call: BuiltinCall) -> Value | None:
    """Check and lower ``barrier_sync(id, nthreads)`` / ``barrier_arrive(id, nthreads)`` (module
    docstring); located errors for a target without named barriers, an id outside 1 to 15 or not an
    integer, and a thread count that is not a compile-time multiple of 32 from 32 to 1024."""
    name = call.builtin.name
    call.require_feature(INTRINSIC_OF[name], subject=name)
    c = call.constant(0)
    if c is not None and (c.kind != "int" or not 1 <= int(c.value) <= MAX_ID):
        hint = "barrier 0 is barrier()'s (bar.sync 0)" if c.kind == "int" and int(c.value) == 0 else None
        found = int(c.value) if c.kind == "int" else c.text
        call.fail(f"{name}'s barrier id must be 1 to {MAX_ID}, found {found}", 0, hint=hint)
    bid = int_operand(call, 0, U32, f"{name}'s barrier id")
    n = call.comptime_int(1, f"{name}'s thread count")
    if not (32 <= n <= 1024 and n % 32 == 0):
        call.fail(f"{name}'s thread count must be a multiple of 32 (the warp size) from 32 to 1024, not {n}", 1)
    call.emit(INTRINSIC_OF[name], [bid], nthreads=n)
    return None


__all__ = ["INTRINSIC_OF", "MAX_ID", "check"]
