"""A pure-Python stand-in for the device side of the hostcall protocol, for testing the host side.

It does, step by step, what ROCm's device library does in ockl/src/hostcall_impl.cl
(``__ockl_hostcall_internal``) and kcompiler's stdlib/hostcall.kc mirror: the wave's lowest active
lane pops a packet off the free stack (CAS loop), fills the header and every active lane's slot,
pushes the packet on the ready stack (CAS loop, release), adds 1 to the doorbell, waits for the host
to clear the READY flag (acquire), reads each lane's two result words, and pushes the packet back on
the free stack with its tag advanced. A wave is one Python thread; its lanes are simulated in it.

Memory is reached only through the pointers stored in the buffer (device addresses), translated to
host addresses with the buffer's (device_base - host_base) offset, so a buffer whose device
addresses differ from its host addresses (CUDA host-mapped memory) is exercised too.

``WavePrintf`` builds the printf messages of ockl/src/services.cl on top: BEGIN with the control
word, then either kcompiler's packing (stdlib/hostcall.kc: the format's words and scalar arguments
seven per hostcall, strings in 56-byte chunks) or clang's (AMDGPUEmitPrintf.cpp: the format sent as
a string, then one hostcall per argument); lanes whose strings are longer make more hostcalls, with
the others inactive, as divergent device code would.
"""
from __future__ import annotations

import ctypes
import struct
import time
from typing import Sequence

from kcompiler.runtime.hostcall import (
    BUFFER_DOORBELL, BUFFER_FREE_STACK, BUFFER_HEADERS, BUFFER_INDEX_MASK, BUFFER_PAYLOADS,
    BUFFER_READY_STACK, CONTROL_READY, DESC_BEGIN, DESC_END, DESC_LEN_SHIFT, HEADER_ACTIVEMASK,
    HEADER_BYTES, HEADER_CONTROL, HEADER_NEXT, HEADER_SERVICE, PAYLOAD_BYTES, SERVICE_PRINTF,
    SIGNAL_EVENT_MAILBOX, SIGNAL_VALUE, HostAtomics, HostcallBuffer)

U64 = (1 << 64) - 1


def _poke64(addr: int, v: int) -> None:
    ctypes.c_uint64.from_address(addr).value = v & U64


def _poke32(addr: int, v: int) -> None:
    ctypes.c_uint32.from_address(addr).value = v & 0xFFFF_FFFF


def _peek64(addr: int) -> int:
    return ctypes.c_uint64.from_address(addr).value


class SimulatedWave:
    """One wave of ``width`` lanes (32 or 64) making hostcalls on ``buffer``."""

    def __init__(self, buffer: HostcallBuffer, width: int = 64):
        assert width in (32, 64)
        self.width = width
        self.a = HostAtomics.get()
        self.delta = buffer.host_base - buffer.device_base  # device address -> host address
        self.base = buffer.device_base + self.delta
        self.hostcalls = 0

    def _host(self, device_address: int) -> int:
        return device_address + self.delta

    def _field(self, offset: int) -> int:
        return _peek64(self.base + offset)

    def _header(self, packet: int) -> int:
        return self._host(self._field(BUFFER_HEADERS)) + HEADER_BYTES * (packet & self._field(BUFFER_INDEX_MASK))

    def _payload(self, packet: int) -> int:
        return self._host(self._field(BUFFER_PAYLOADS)) + PAYLOAD_BYTES * (packet & self._field(BUFFER_INDEX_MASK))

    def _pop(self, top: int) -> int:
        f = self.a.load64(top)
        while True:
            assert f, "the free stack is empty: fewer packets than waves"
            nxt = self.a.load64(self._header(f) + HEADER_NEXT)
            old = self.a.cas64(top, f, nxt)
            if old == f:
                return f
            f = old
            time.sleep(0)

    def _push(self, top: int, packet: int) -> None:
        f = self.a.load64(top)
        hdr = self._header(packet)
        while True:
            _poke64(hdr + HEADER_NEXT, f)
            old = self.a.cas64(top, f, packet)
            if old == f:
                return
            f = old
            time.sleep(0)

    def hostcall(self, service: int, lanes: dict[int, Sequence[int]]) -> dict[int, tuple[int, int]]:
        """One hostcall with the lanes in ``lanes`` active (lane -> its 8 words); returns each active
        lane's two result words."""
        assert lanes and all(0 <= lane < self.width for lane in lanes)
        active = 0
        for lane in lanes:
            active |= 1 << lane
        packet = self._pop(self.base + BUFFER_FREE_STACK)
        hdr = self._header(packet)
        _poke32(hdr + HEADER_SERVICE, service)
        _poke64(hdr + HEADER_ACTIVEMASK, active)
        _poke32(hdr + HEADER_CONTROL, CONTROL_READY)
        payload = self._payload(packet)
        for lane, words in lanes.items():
            assert len(words) == 8
            for k, w in enumerate(words):
                _poke64(payload + 64 * lane + 8 * k, w)
        self._push(self.base + BUFFER_READY_STACK, packet)
        signal = self._host(self._field(BUFFER_DOORBELL))
        self.a.add64(signal + SIGNAL_VALUE, 1)
        assert _peek64(signal + SIGNAL_EVENT_MAILBOX) == 0
        while self.a.load32(hdr + HEADER_CONTROL) & CONTROL_READY:
            time.sleep(0)
        results = {lane: (_peek64(payload + 64 * lane), _peek64(payload + 64 * lane + 8)) for lane in lanes}
        step = self._field(BUFFER_INDEX_MASK) + 1
        tagged = (packet + step) & U64
        self._push(self.base + BUFFER_FREE_STACK, tagged or step)
        self.hostcalls += 1
        return results


def _words(data: bytes) -> list[int]:
    data += b"\0" * (-len(data) % 8)
    return [int.from_bytes(data[i:i + 8], "little") for i in range(0, len(data), 8)]


class WavePrintf:
    """printf from a :class:`SimulatedWave`: every lane in ``lane_args`` calls printf(fmt, *args)
    at once (same format, per-lane arguments: ints as 64-bit words, floats as doubles, bytes or
    None for %s). ``style``: "kcompiler" or "clang" (see the module docstring)."""

    def __init__(self, wave: SimulatedWave, style: str = "kcompiler"):
        assert style in ("kcompiler", "clang")
        self.wave, self.style = wave, style

    def _append(self, desc: dict[int, int], calls: dict[int, list[tuple[list[int], bool]]]) -> None:
        """Run each lane's hostcalls (lists of (data words, last)); lanes with fewer calls are
        inactive for the rest, as a divergent loop's lanes are."""
        k = 0
        while True:
            lanes = {}
            for lane, seq in calls.items():
                if k < len(seq):
                    data, last = seq[k]
                    d = (desc[lane] & ~(7 << DESC_LEN_SHIFT)) | (len(data) << DESC_LEN_SHIFT)
                    if last:
                        d |= DESC_END
                    lanes[lane] = [d] + data + [0] * (7 - len(data))
            if not lanes:
                return
            for lane, (r0, _) in self.wave.hostcall(SERVICE_PRINTF, lanes).items():
                desc[lane] = r0
            k += 1

    @staticmethod
    def _string_calls(s: bytes | None, last: bool) -> list[tuple[list[int], bool]]:
        if s is None:
            return [([0], last)]
        data = s + b"\0"
        chunks = [data[i:i + 56] for i in range(0, len(data), 56)]
        return [(_words(c), last and i == len(chunks) - 1) for i, c in enumerate(chunks)]

    def __call__(self, fmt: bytes, lane_args: dict[int, list], control: int = 0) -> dict[int, int]:
        """Returns each lane's printf result (the host's byte count, as a signed int)."""
        lanes = sorted(lane_args)
        begun = self.wave.hostcall(SERVICE_PRINTF, {
            lane: [DESC_BEGIN | (1 << DESC_LEN_SHIFT), control, 0, 0, 0, 0, 0, 0]
            for lane in lanes})
        desc = {lane: r0 for lane, (r0, _) in begun.items()}
        # Each lane's message after the control word: ("w", word) and ("s", string) items.
        items = {lane: [("w", w) for w in _words(fmt + b"\0")] if self.style == "kcompiler"
                 else [("s", fmt)] for lane in lanes}
        for lane in lanes:
            for v in lane_args[lane]:
                if isinstance(v, (bytes, type(None))):
                    items[lane].append(("s", v))
                elif isinstance(v, float):
                    items[lane].append(("w", _double_bits(v)))
                else:
                    items[lane].append(("w", v & U64))
        n = len(items[lanes[0]])
        k = 0
        result = {}
        while k < n:
            kind = items[lanes[0]][k][0]
            if kind == "s":
                calls = {lane: self._string_calls(items[lane][k][1], k == n - 1) for lane in lanes}
                k += 1
            else:
                run = 1 if self.style == "clang" else 7
                j = k
                while j < n and j - k < run and items[lanes[0]][j][0] == "w":
                    j += 1
                calls = {lane: [([w for _, w in items[lane][k:j]], j == n)] for lane in lanes}
                k = j
            self._append(desc, calls)
        for lane in lanes:
            r = desc[lane]
            result[lane] = r - (1 << 64) if r >> 63 else r
        return result


def _double_bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]
