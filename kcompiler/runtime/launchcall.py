"""The cheapest call into the driver's launch entry point that Python can make without a C compiler.

A ctypes call costs a fixed part (building the libffi call, releasing and taking back the GIL) and a
part per argument (each is converted from its Python object). A prepared launcher always passes the
same four arguments to ``cuLaunchKernelEx(config*, function, params**, extra**)``: its parameter
buffer's address, the function handle, its pointer array's address and NULL. :func:`bound_call`
makes a function of no arguments that does exactly that call: a few instructions of machine code in
an executable page (x86-64, System V ABI) that load the four arguments into the argument registers
and jump to the entry point. ctypes then calls a zero-argument function, which skips the per-argument
conversions (on the 2-core Xeon here: ~0.9 µs → ~0.5 µs per call; benchmarks/bench_launch_host.py).

The trampoline is opt-in (``KC_LAUNCH_TRAMPOLINE=1``): on the H100 (2026-11-26, benchmarks/RESULTS.md)
a whole launch measured 8.3 µs with it and 6.1 µs without in the same call of bench_launch.py — the
driver's share dwarfs the 0.2–0.4 µs it saves, inside the run-to-run noise — and a page that is
writable and executable is what hardened systems refuse and security reviews flag.

Where it is off or cannot be done (another architecture or OS, a system that refuses writable-and-executable
memory), :func:`bound_call` returns an ordinary closure over the ctypes
function with the same result. The GIL is released during the call either way (a ``CFUNCTYPE``), so
a launch that blocks in the driver (a full launch queue) does not stop the hostcall listener thread.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import platform
import sys
import threading
from typing import Any, Callable

_LOCK = threading.Lock()
_PAGES: list[Any] = []  # the executable pages (kept for the process's life: launchers point into them)
_SLOT = 64  # bytes a trampoline takes in its page (42 used)
_free: list[int] = []  # addresses of unused slots
_disabled: str | None = None  # why trampolines are off, once found
_ZERO_ARGS = ctypes.CFUNCTYPE(ctypes.c_int)


def _enabled() -> bool:
    global _disabled
    if _disabled is None:
        if os.environ.get("KC_LAUNCH_TRAMPOLINE", "0") != "1":
            _disabled = "off (KC_LAUNCH_TRAMPOLINE=1 turns it on)"
        elif sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
            _disabled = f"no trampoline for {sys.platform}/{platform.machine()}"
        else:
            _disabled = ""
    return not _disabled


def _slot() -> int | None:
    global _disabled
    if not _free:
        try:
            page = mmap.mmap(-1, mmap.PAGESIZE,
                             prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        except (OSError, ValueError) as e:  # SELinux execmem, PaX, a W^X kernel...
            _disabled = f"no executable memory: {e}"
            return None
        _PAGES.append(page)
        base = ctypes.addressof(ctypes.c_char.from_buffer(page))
        _free.extend(base + i * _SLOT for i in range(mmap.PAGESIZE // _SLOT - 1, -1, -1))
    return _free.pop()


def _x86_64(target: int, a0: int, a1: int, a2: int, a3: int) -> bytes:
    q = lambda v: (v & (2**64 - 1)).to_bytes(8, "little")  # noqa: E731
    return (b"\x48\xbf" + q(a0)       # mov rdi, a0
            + b"\x48\xbe" + q(a1)     # mov rsi, a1
            + b"\x48\xba" + q(a2)     # mov rdx, a2
            + b"\x48\xb9" + q(a3)     # mov rcx, a3
            + b"\x48\xb8" + q(target)  # mov rax, target
            + b"\xff\xe0")            # jmp rax (a tail call: the target returns to our caller)


def bound_call(function: Any, a0: int, a1: int, a2: int, a3: int) -> Callable[[], int]:
    """A function of no arguments that calls ``function`` (a ctypes function of libcuda taking four
    pointer-sized arguments and returning a C int) with ``a0``..``a3`` (ints: addresses, handles, 0
    for NULL) and returns its result. The addresses must stay valid for as long as the returned
    function is used; its slot of machine code is never freed."""
    if _enabled():
        with _LOCK:
            at = _slot()
            if at is not None:
                code = _x86_64(ctypes.cast(function, ctypes.c_void_p).value, a0, a1, a2, a3)
                ctypes.memmove(at, code, len(code))
                return _ZERO_ARGS(at)
    p = [ctypes.c_void_p(v) if v else None for v in (a0, a1, a2, a3)]
    return lambda: function(*p)


def trampolines_enabled() -> str:
    """'' when :func:`bound_call` writes machine code, else why not (for reports and tests)."""
    _enabled()
    return _disabled or ""


__all__ = ["bound_call", "trampolines_enabled"]
