"""The CPU target's guarded copies (``check_bounds``, runtime/cpu.py): each array argument of a launch
is copied into fresh memory between unused guard zones, DEVICE_ALIGN-aligned as a GPU allocation is,
the kernel runs on the copies (its bounds table lists their ranges), and the copies are written back
after the launch."""
from __future__ import annotations

import ctypes
import dataclasses
from typing import Any, Sequence

import numpy as np

#: Bytes of unused memory on each side of an array copied under ``check_bounds``.
GUARD_BYTES = 4096
#: The alignment of arrays copied under ``check_bounds`` (bytes): cudaMalloc's guarantee.
DEVICE_ALIGN = 256


class GuardedCopy:
    """An array's copy between guard zones (``check_bounds``); calling it copies the data back into
    the array (if writeable)."""

    __slots__ = ("buf", "view", "host", "writeback", "address")

    def __init__(self, host: np.ndarray, writeback: bool):
        flat = host.reshape(-1).view(np.uint8)
        self.buf = np.zeros(flat.nbytes + 2 * GUARD_BYTES + DEVICE_ALIGN, dtype=np.uint8)
        # The copy starts DEVICE_ALIGN-aligned, as a GPU allocation does: misaligned accesses the
        # check reports are the kernel's, not numpy's allocator's.
        start = GUARD_BYTES + (-(self.buf.ctypes.data + GUARD_BYTES)) % DEVICE_ALIGN
        self.view = self.buf[start: start + flat.nbytes]
        self.view[:] = flat
        self.host, self.writeback = host, writeback
        self.address = self.buf.ctypes.data + start

    def __call__(self) -> None:
        if self.writeback and self.view.nbytes:
            self.host.reshape(-1).view(np.uint8)[:] = self.view


def on_guarded_copies(args: Sequence[Any], guarded: list[GuardedCopy]) -> list[Any]:
    """``args`` with each array argument moved onto a guarded copy (``check_bounds``), the copies
    appended to ``guarded``. Arguments whose memory overlaps (one array passed twice, overlapping
    views) share one copy of the span they cover, each at its own offset in it: a copy an argument,
    each written back in turn, would let a later one undo the writes made through an earlier one."""
    out = list(args)
    arrays = sorted((a.address, i) for i, a in enumerate(args) if getattr(a, "array", None) is not None)
    group: list[int] = []
    end = 0
    for address, i in arrays + [(None, None)]:
        if group and (address is None or address >= end):
            lo = args[group[0]].address
            if len(group) == 1:
                host = args[group[0]].array
            else:  # the span's bytes, as one array (the arguments' arrays are alive in args)
                host = np.ctypeslib.as_array((ctypes.c_uint8 * (end - lo)).from_address(lo))
            g = GuardedCopy(host, True)
            guarded.append(g)
            for j in group:
                a = args[j]
                out[j] = dataclasses.replace(a, address=g.address + (a.address - lo), array=None)
            group = []
        if address is not None:
            group.append(i)
            end = max(end, address + args[i].nbytes) if len(group) > 1 else address + args[i].nbytes
    return out


__all__ = ["DEVICE_ALIGN", "GUARD_BYTES", "GuardedCopy", "on_guarded_copies"]
