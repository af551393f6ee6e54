"""Python's cyclic garbage collector during a compile.

A compile allocates millions of small objects (AST nodes, IR ops and values, llvmlite's instructions)
that mostly stay alive until it ends. With CPython's default thresholds (``gc.get_threshold()``:
700, 10, 10) the collector kept rescanning them: a young collection every 700 allocations, and full
collections of the whole heap every 70,000 allocations or so once a quarter of it is new (25 full
collections, 4.2 s, of a 26 s pytest run of ``tests/ops/test_moe_gemm_decode.py::test_decode_variants``
on the 2-core box, three CPU-target compiles of MXFP4 MoE kernels). :func:`fewer_collections` raises
the thresholds to at least :data:`COMPILE_GC_THRESHOLDS` for the length of a compile (the same run:
2 full collections, 1.9 s of collecting in all against 4.7) and puts the application's back afterwards;
the garbage a compile leaves (its IR's reference cycles) is collected as usual after it. It wraps each
stage that allocates: ``frontend.load_program``, ``frontend.check``, ``pipeline.lower_to_ir`` (lowering,
passes, verifier) and ``backends.llvm.compile_ir`` (llvmlite's IR, LLVM).
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

#: The least thresholds while a compile runs: allocations between young collections (CPython's
#: default 700), young collections between middle ones (10), middle collections between full ones (10).
#: (10,000, 10, 10) took 2.5 s of collecting in the run above; a young threshold of 50,000 or 100,000,
#: or no collection at all, gave no more and held more memory.
COMPILE_GC_THRESHOLDS = (10_000, 10, 100)

_lock = threading.Lock()
_depth = 0  # compiles running (nested or in other threads)
_saved: tuple[int, ...] | None = None  # the thresholds to put back, None where left alone
_set: tuple[int, ...] = ()  # the thresholds set


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the body (a ``with`` block, or the function it decorates) with each of the collector's
    thresholds at least that of :data:`COMPILE_GC_THRESHOLDS`. Nested and concurrent uses share one
    change, undone when the last one ends; a collector that is off (threshold 0) is left alone, and
    thresholds the application changed meanwhile are not overwritten."""
    global _depth, _saved, _set
    with _lock:
        if _depth == 0:
            now = gc.get_threshold()
            raised = tuple(max(a, b) for a, b in zip(now, COMPILE_GC_THRESHOLDS))
            _saved = now if now[0] > 0 and raised != now else None
            if _saved is not None:
                gc.set_threshold(*raised)
                _set = raised
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved is not None:
                if gc.get_threshold() == _set:
                    gc.set_threshold(*_saved)
                _saved = None
