"""Pieces the benchmark scripts share (run from benchmarks/ or with it on sys.path).

- :func:`best_host_seconds`: the best of several rounds of back-to-back calls of a host function;
  :func:`stub_launches` and :func:`print_host_times`: the host-time benchmarks (launches stubbed).
- :func:`compile_in_parallel`: a variant table's kernels compiled up front in worker processes,
  so that the timed rows find them in the kernel cache.
- :func:`device_copy_gbs`: the copy-bandwidth anchor of the memory-bound tables (RESULTS.md's
  convention: a 4 GiB device-to-device copy of random bytes, bytes read + written a second).
"""
from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any, Callable, Iterable


def best_host_seconds(call: Callable[[], Any], rounds: int, inner: int) -> float:
    """Seconds a call of ``call``: the least mean over ``rounds`` rounds of ``inner`` back-to-back
    calls (the least: interference from the rest of the machine only ever adds time)."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(inner):
            call()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def stub_launches() -> list[int]:
    """Replaces ``Launch.__call__`` (kcompiler.runtime.module) by a counter, so that neither a kernel
    nor the driver runs; returns the one-element list it counts launches in."""
    from kcompiler.runtime import module as rt_module
    launches = [0]

    def stub(self, *a, **k):
        launches[0] += 1
    rt_module.Launch.__call__ = stub
    return launches


def print_host_times(cases: Iterable[tuple[str, Callable[[], Any]]], launches: list[int], rounds: int, inner: int,
                     width: int) -> None:
    """For each (name, call): one warm-up call, one counted call (the launches it makes, from
    :func:`stub_launches`' list), then µs a call by :func:`best_host_seconds`, printed as a row."""
    for name, call in cases:
        call()
        launches[0] = 0
        call()
        n = launches[0]
        best = best_host_seconds(call, rounds, inner)
        print(f"  {name:{width}s} {best * 1e6:7.1f} µs ({n})", flush=True)


def compile_in_parallel(warm: Callable[[Any], Any], jobs: Iterable[Any], workers: int, what: str) -> None:
    """``warm(job)`` for each job in ``workers`` spawned processes (each compiles into the shared
    kernel cache), printing how long it took; a failure is printed and left to the rows, which then
    compile what is missing as they come."""
    jobs = list(jobs)
    t0 = time.time()
    try:
        with mp.get_context("spawn").Pool(workers) as pool:
            for _ in pool.imap_unordered(warm, jobs):
                pass
        print(f"compiled {len(jobs)} {what} in {time.time() - t0:.0f} s ({workers} processes)", flush=True)
    except Exception as e:  # noqa: BLE001 - the rows compile what is missing
        print(f"parallel compile failed ({type(e).__name__}: {str(e)[:200]}); compiling as the rows come")


def best_device_ms(fn: Callable[[], Any], reps: int = 10, warm: int = 3) -> float:
    """Milliseconds a call of ``fn`` on torch's current CUDA device: ``warm`` calls, then the best of 3
    rounds of ``reps`` back-to-back calls timed with CUDA events (launch costs included, L2 as the calls
    leave it)."""
    import torch  # deferred: the host-only benchmarks run without torch

    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) / reps)
    return best


def device_copy_gbs(nbytes: int = 4 << 30, reps: int = 20) -> float:
    """GB/s of a device-to-device copy of ``nbytes`` random bytes on torch's current CUDA device, bytes
    read plus written, the median of ``reps`` copies timed with CUDA events (benchmarks/RESULTS.md's
    anchor: ~3.03 TB/s on the H100 80GB HBM3). Fresh buffers, freed before it returns."""
    import torch  # deferred: the host-only benchmarks run without torch

    x = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    y = torch.empty_like(x)
    y.copy_(x)
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        y.copy_(x)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    del x, y
    torch.cuda.empty_cache()
    return 2 * nbytes / sorted(times)[len(times) // 2] / 1e6
