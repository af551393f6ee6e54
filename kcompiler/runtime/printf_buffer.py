"""The host side of printf="buffered": the printf buffer, its records, and printing them after a
launch (CPU target; NVIDIA with the buffer in device memory). On AMD the HIP runtime does this
itself (ROCm/clr rocclr/device/rocm/rocprintf.cpp, ``PrintfDbg::output``, tag rocm-6.2.2);
docs/amd-hostcall.md §12 has the layout with its sources:

- the buffer: u32 ``offset`` at byte 0 (bytes of records written so far), u32 ``size`` at byte 4
  (the buffer's bytes minus 8: clr's ``PrintfDbg::init``), records from byte 8. The device
  reserves a record while ``8 + offset + bytes <= size`` (ockl ``__printf_alloc``), so the last 8
  bytes never hold one; kcompiler's device code (stdlib/printf_buffer.kc) counts the records that
  did not fit in the u32 at byte ``size`` (clr never reads it, so the count is lost on AMD).
- a record: u32 control word (bit 0: stderr, bit 1: constant format sent as its hash, bits 2-31: the
  record's bytes, this word included), then the u64 format hash (constant format) or the format's
  bytes with NUL padded to 8, then the arguments, 8 bytes each or a ``%s`` string's bytes and NUL
  padded to 8 (LLVM AMDGPUEmitPrintf.cpp ``callBufferedPrintfStart``/``ArgPush``).

Records are printed as clr prints them: the format and the arguments are put together into the
same words a hostcall printf message carries, and formatted by the same code
(:class:`kcompiler.runtime.hostcall.PrintfService`; clr: ``handlePrintfDelayed`` calls the hostcall
printf's ``format``). A full buffer is reported on stderr, not silently dropped:
``kcompiler: N lines lost: the printf buffer holds B bytes; raise KC_PRINTF_BUFFER``.
"""
from __future__ import annotations

import ctypes
import os
import re
import struct
import sys
from typing import Any, Callable

from ..ir.printf import format_table, read_format_table  # noqa: F401 - the runtime's readers use them

import numpy as np
from .hostcall import PrintfService

#: Bytes before the first record: u32 offset, u32 size.
HEADER = 8
#: The buffer's default size in bytes: the HIP runtime's (4096 per work-item of the largest
#: workgroup, 1024: clr rocdevice.cpp ``printfBufferSize_``, rocprintf.hpp ``WorkitemDebugSize``).
DEFAULT_BYTES = 4096 * 1024
#: Control word bits (ockl printf.cl ``__printf_control_dword``).
CONTROL_STDERR = 1
CONTROL_CONSTANT_FORMAT = 2


def buffer_bytes_from_env(default: int = DEFAULT_BYTES) -> int:
    """``KC_PRINTF_BUFFER``: the printf buffer's size in bytes (a number, optionally with K, M or G:
    powers of 1024), at least 64 and below 2^32 (the offset is a u32); ``default`` when unset.
    Raises ValueError for anything else."""
    text = os.environ.get("KC_PRINTF_BUFFER", "").strip()
    if not text:
        return default
    m = re.fullmatch(r"(\d+)\s*([kKmMgG]?)i?[bB]?", text)
    if not m:
        raise ValueError(f"KC_PRINTF_BUFFER={text!r}: expected a size in bytes such as 67108864 or 64M")
    n = int(m.group(1)) * 1024 ** " KMG".index((m.group(2) or " ").upper())
    if not 64 <= n < 2 ** 32:
        raise ValueError(f"KC_PRINTF_BUFFER={text!r}: the printf buffer must hold 64 bytes to 4 GiB - 1")
    return n


# --- the formats table of a module (kc_printf_formats) ---------------------------------------------

def parse_amdhsa_printf(entries: list[str]) -> dict[int, bytes]:
    """The formats of a code object's ``amdhsa.printf`` list as HIP reads them (``"0:0:<hash in
    hex>,<format>"``: clr devkernel.cpp ``InitPrintf``, devhcprintf.cpp
    ``populateFormatStringHashMap``); entries without a hash are left out."""
    out = {}
    for e in entries:
        parts = e.split(":", 2)
        if len(parts) == 3 and "," in parts[2]:
            h, fmt = parts[2].split(",", 1)
            try:
                out[int(h, 16)] = fmt.encode()
            except ValueError:
                continue
    return out


# --- records -----------------------------------------------------------------------------------------

def record_words(control: int, body: bytes, formats: dict[int, bytes]) -> list[int] | None:
    """A record as the words of a hostcall printf message (word 0: the stream bit; then the format
    with its NUL padded to 8; then the arguments' words), which is how clr prints it
    (``PrintfDbg::output`` builds that buffer for ``handlePrintfDelayed``). ``body``: the record's
    bytes after its control word. None for a constant-format record whose hash is not in
    ``formats``."""
    if control & CONTROL_CONSTANT_FORMAT:
        h = int.from_bytes(body[:8], "little")
        fmt = formats.get(h)
        if fmt is None:
            return None
        data = fmt + b"\0"
        data += b"\0" * (-len(data) % 8) + body[8:]
    else:
        data = body
    data += b"\0" * (-len(data) % 8)
    return [control & CONTROL_STDERR] + [int.from_bytes(data[i:i + 8], "little")
                                         for i in range(0, len(data), 8)]


def split_records(data: bytes) -> tuple[list[tuple[int, bytes]], str]:
    """The records (control word, the bytes after it) in the bytes ``data`` of a buffer's used
    part, in order, and "" — or, where a control word's size does not fit, the records before it
    and what is wrong."""
    out, at = [], 0
    while at + 4 <= len(data):
        control = struct.unpack_from("<I", data, at)[0]
        size = control >> 2
        if size < 4 or at + size > len(data):
            return out, f"a record of {size} bytes at byte {HEADER + at} of the printf buffer " \
                        f"({HEADER + len(data)} bytes used)"
        out.append((control, data[at + 4:at + size]))
        at += size
    return out, ""


def lost_message(lost: int, capacity: int) -> str:
    """What a launch whose printf buffer filled up reports (on stderr)."""
    return (f"kcompiler: {lost} line{'s' * (lost != 1)} lost: the printf buffer holds {capacity} bytes; "
            f"raise KC_PRINTF_BUFFER\n")


class PrintfBuffer:
    """A printf buffer of ``size`` bytes that the device sees at ``device_address``; the host reads
    and writes it through ``read(offset, nbytes) -> bytes`` and ``write(offset, data)`` (host memory:
    :meth:`in_host_memory`; a GPU's: copies). :meth:`reset` before the first launch; :meth:`drain`
    after the launches whose records it should print.

    ``printed`` and ``lost`` count the records printed and lost since the buffer was made."""

    def __init__(self, device_address: int, size: int, read: Callable[[int, int], bytes],
                 write: Callable[[int, bytes], None], keepalive: Any = None):
        if not 64 <= size < 2 ** 32:
            raise ValueError(f"a printf buffer holds 64 bytes to 4 GiB - 1, not {size}")
        self.device_address, self.size = device_address, size
        self.read, self.write, self._keepalive = read, write, keepalive
        self.printed = self.lost = 0
        self.reset()

    @classmethod
    def in_host_memory(cls, size: int) -> "PrintfBuffer":
        """A buffer in host memory (the CPU target: device address == host address)."""
        mem = np.zeros(size, np.uint8)
        base = mem.ctypes.data
        return cls(base, size, lambda off, n: ctypes.string_at(base + off, n),
                   lambda off, data: ctypes.memmove(base + off, data, len(data)), keepalive=mem)

    @property
    def capacity_field(self) -> int:
        """The u32 at byte 4: the buffer's bytes minus 8, as the HIP runtime writes it."""
        return self.size - HEADER

    def reset(self) -> None:
        """Empty the buffer: offset 0, size, lost count 0."""
        self.write(0, struct.pack("<II", 0, self.capacity_field))
        self.write(self.capacity_field, b"\0" * 8)

    def take(self) -> tuple[bytes, int]:
        """The used part's bytes and the lost-record count, and empty the buffer (no kernel may be
        writing it)."""
        offset = struct.unpack("<I", self.read(0, 4))[0]
        lost = struct.unpack("<I", self.read(self.capacity_field, 4))[0]
        used = min(offset, self.capacity_field - HEADER)
        data = self.read(HEADER, used) if used else b""
        if offset or lost:
            self.reset()
        return data, lost

    def drain(self, formats: dict[int, bytes], service: Callable[[list], int] | None = None,
              stderr: Callable[[str], None] | None = None) -> tuple[int, int]:
        """Print every record (through ``service``, default a :class:`~kcompiler.runtime.hostcall.
        PrintfService`: sys.stdout / sys.stderr) and report lost ones on ``stderr`` (default
        sys.stderr); empty the buffer. Returns (records printed, records lost)."""

        data, lost = self.take()
        if not data and not lost:
            return 0, 0
        service = service or PrintfService()
        err = stderr or _stderr
        records, problem = split_records(data)
        printed = 0
        for control, body in records:
            words = record_words(control, body, formats)
            if words is None:
                err(f"kcompiler: a printf record names a format hash "
                    f"{int.from_bytes(body[:8], 'little'):#x} this module does not have\n")
                continue
            service(words)
            printed += 1
        if problem:
            err(f"kcompiler: the printf buffer is corrupt: {problem}; the rest is not printed\n")
        if lost:
            err(lost_message(lost, self.size))
        self.printed += printed
        self.lost += lost
        return printed, lost


def _stderr(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


__all__ = ["PrintfBuffer", "DEFAULT_BYTES", "HEADER", "buffer_bytes_from_env", "format_table",
           "read_format_table", "parse_amdhsa_printf", "record_words", "split_records", "lost_message"]
