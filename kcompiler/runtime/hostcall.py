"""The host side of the hostcall protocol: the buffer, its listener thread, and the printf service.

docs/amd-hostcall.md describes the protocol and names the source of every fact; the short version:
a wave's lowest active lane pops a packet off the buffer's free stack, every active lane writes eight
u64 into its slot of the packet's payload, the lane pushes the packet onto the ready stack and adds
1 to the doorbell signal; the host takes the whole ready stack, serves each packet's active lanes,
and clears the packet's READY flag; the lanes read two result words back and the lane returns the
packet to the free stack. On AMD GPUs the HIP runtime is this host side. Here it is served for the
same device code (stdlib/hostcall.kc) on the CPU target and on NVIDIA GPUs in printf="hostcall"
mode::

    buf = HostcallBuffer.in_host_memory()                 # CPU target: device address == host address
    with HostcallListener([buf], stdout=lines.append):    # a thread serves the buffer until the end
        kernel(...)                                       # device code gets buf.device_address
    # or, without a thread: listener.drain() serves whatever is pending, then returns

For an NVIDIA GPU the buffer lives in host-mapped pinned memory, and the device sees it at another
address: ``HostcallBuffer.allocate(allocator=...)`` with an allocator returning (host address,
device address, release) — e.g. ``cuMemHostAlloc(size, DEVICEMAP | PORTABLE)`` and
``cuMemHostGetDevicePointer``. Every pointer stored in the buffer is a *device* address; the host
reads and writes through the host address.

Atomicity. The host thread is the only host-side writer; the device writers are GPU threads, or
other host threads running the CPU target's code. The host does exactly what ROCm's listener does
(clr rocclr/device/devhostcall.cpp, ``HostcallBuffer::processPackets``): one atomic exchange of the
ready-stack top with 0 (acquire), plain reads of the packets it thereby owns, plain writes of the
result words, and one release store that clears the READY flag. Python has no atomics on raw
memory, so these few operations are LLVM IR (``load atomic``, ``store atomic``, ``atomicrmw``,
``cmpxchg`` on i64/i32) JIT-compiled once with llvmlite's MCJIT and called through ctypes
(:class:`HostAtomics`); the ctypes call is opaque to the interpreter, and the hardware orders the
plain numpy accesses after the acquire and before the release, as in C++.

The protocol needs the device's read-modify-writes and the host's to be atomic with respect to each
other on the buffer's memory. True on the CPU target. On an NVIDIA H100 with an x86 host
(``CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED`` = 0) and the buffer in pinned host-mapped
memory, several warps making hostcalls at once lost and repeated packets (one warp worked);
docs/amd-hostcall.md §10.1 has what was measured, including on managed memory.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
import traceback
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .cformat import CArg, format_c_bytes, format_spec, parse_format
from ..ir import assertion

# --- layout ------------------------------------------------------------------------------------------
# buffer_t (ROCm device-libs ockl/src/hostcall_impl.cl, buffer_t; clr rocclr/device/devhostcall.hpp,
# class HostcallBuffer): byte offsets of its u64 fields.
BUFFER_HEADERS = 0        #: device address of the header array
BUFFER_PAYLOADS = 8       #: device address of the payload array
BUFFER_DOORBELL = 16      #: hsa_signal_t: the device address of an amd_signal_t
BUFFER_FREE_STACK = 24    #: tagged pointer: top of the free stack (0 = empty)
BUFFER_READY_STACK = 32   #: tagged pointer: top of the ready stack (0 = empty)
BUFFER_INDEX_MASK = 40    #: u64 mask of a tagged pointer's index bits (not the pre-2019 u32 index_size)

# header_t / PacketHeader (same sources): 24 bytes.
HEADER_NEXT = 0           #: u64 tagged pointer to the next packet of the stack holding this one
HEADER_ACTIVEMASK = 8     #: u64 EXEC mask of the wave: bit i set = slot i holds data
HEADER_SERVICE = 16       #: u32 service id
HEADER_CONTROL = 20       #: u32; bit 0 is READY (set by the device, cleared by the host)
HEADER_BYTES = 24
CONTROL_READY = 1

# payload_t / Payload (same sources): 64 lanes x 8 u64.
LANES = 64
SLOT_WORDS = 8
PAYLOAD_BYTES = LANES * SLOT_WORDS * 8

# amd_signal_t (ockl/inc/amd_hsa_signal.h): 64 bytes, 64-aligned. The device's
# __ockl_hsa_signal_add (ockl/src/hsaqs.cl) adds to `value`, and only if `event_mailbox_ptr` is
# nonzero stores `event_id` there and raises an interrupt; the signals made here have no mailbox.
SIGNAL_KIND = 0
SIGNAL_VALUE = 8
SIGNAL_EVENT_MAILBOX = 16
SIGNAL_EVENT_ID = 24
SIGNAL_BYTES = 64
AMD_SIGNAL_KIND_USER = 1
SIGNAL_INIT = 1           #: the doorbell's first value (devhostcall.hpp, enum SignalValue)

# Service ids (clr rocclr/device/devhcmessages.hpp, enum ServiceID; ockl/src/services.cl).
SERVICE_FUNCTION_CALL = 1
SERVICE_PRINTF = 2
SERVICE_DEVMEM = 3
SERVICE_SANITIZER = 4

# Message descriptor, word 0 of each hostcall of a message (ockl/src/services.cl and clr
# rocclr/device/devhcmessages.cpp, DESCRIPTOR_OFFSET_* / DESCRIPTOR_WIDTH_*).
DESC_BEGIN = 1 << 0       #: this hostcall starts a message (the host answers with its id)
DESC_END = 1 << 1         #: this hostcall completes it
DESC_LEN_SHIFT = 5        #: bits 5-7: how many of words 1-7 carry data
DESC_LEN_MASK = 7
DESC_ID_SHIFT = 8         #: bits 8-63: the message id

# kcompiler's placement inside one allocation (not prescribed by any source: the device only
# follows the pointers): buffer_t in the first 64 bytes, the doorbell signal at 64, the headers at
# 128, the payloads at the next 64-byte boundary.
ALIGNMENT = 64
SIGNAL_OFFSET = 64
HEADERS_OFFSET = 128
DEFAULT_PACKETS = 1024

_U64 = (1 << 64) - 1


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


# --- atomics on raw addresses ------------------------------------------------------------------------

_ATOMICS_IR = """
define i64 @kc_hc_load64(i64 %a) {
  %p = inttoptr i64 %a to ptr
  %v = load atomic i64, ptr %p acquire, align 8
  ret i64 %v
}
define i32 @kc_hc_load32(i64 %a) {
  %p = inttoptr i64 %a to ptr
  %v = load atomic i32, ptr %p acquire, align 4
  ret i32 %v
}
define void @kc_hc_store64(i64 %a, i64 %v) {
  %p = inttoptr i64 %a to ptr
  store atomic i64 %v, ptr %p release, align 8
  ret void
}
define void @kc_hc_store32(i64 %a, i32 %v) {
  %p = inttoptr i64 %a to ptr
  store atomic i32 %v, ptr %p release, align 4
  ret void
}
define i64 @kc_hc_xchg64(i64 %a, i64 %v) {
  %p = inttoptr i64 %a to ptr
  %o = atomicrmw xchg ptr %p, i64 %v acq_rel, align 8
  ret i64 %o
}
define i64 @kc_hc_add64(i64 %a, i64 %v) {
  %p = inttoptr i64 %a to ptr
  %o = atomicrmw add ptr %p, i64 %v acq_rel, align 8
  ret i64 %o
}
define i64 @kc_hc_cas64(i64 %a, i64 %expected, i64 %desired) {
  %p = inttoptr i64 %a to ptr
  %r = cmpxchg ptr %p, i64 %expected, i64 %desired acq_rel acquire, align 8
  %o = extractvalue { i64, i1 } %r, 0
  ret i64 %o
}
"""


class HostAtomics:
    """Atomic operations on 64-bit (and 32-bit) words at raw host addresses, as the C++11 memory
    model defines them: compiled once per process from a few lines of LLVM IR with llvmlite's MCJIT
    and called through ctypes (which releases the GIL for the call). All take the address as an int.

    ``load64``/``load32``: acquire. ``store64``/``store32``: release. ``xchg64``, ``add64``: acq_rel,
    return the old value. ``cas64(addr, expected, desired)``: acq_rel on success, acquire on failure,
    returns the value found (equal to ``expected`` iff it swapped)."""

    _lock = threading.Lock()
    _instance: "HostAtomics | None" = None

    def __init__(self) -> None:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_default_triple()
        tm = target.create_target_machine(opt=2)
        mod = llvm.parse_assembly(_ATOMICS_IR)
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
        self._engine = llvm.create_mcjit_compiler(mod, tm)
        self._engine.finalize_object()
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32

        def fn(name: str, restype: Any, *argtypes: Any) -> Any:
            return ctypes.CFUNCTYPE(restype, *argtypes)(self._engine.get_function_address(name))

        self.load64 = fn("kc_hc_load64", u64, u64)
        self.load32 = fn("kc_hc_load32", u32, u64)
        self.store64 = fn("kc_hc_store64", None, u64, u64)
        self.store32 = fn("kc_hc_store32", None, u64, u32)
        self.xchg64 = fn("kc_hc_xchg64", u64, u64, u64)
        self.add64 = fn("kc_hc_add64", u64, u64, u64)
        self.cas64 = fn("kc_hc_cas64", u64, u64, u64, u64)

    @classmethod
    def get(cls) -> "HostAtomics":
        """The process-wide instance (compiled on first use, ~10 ms)."""
        with cls._lock:
            if cls._instance is None:
                cls._instance = HostAtomics()
            return cls._instance


# --- the buffer --------------------------------------------------------------------------------------

#: allocate(size, alignment) -> (host address, device address, release or None)
Allocator = Callable[[int, int], "tuple[int, int, Callable[[], Any] | None]"]


def packets_for(default: int) -> int:
    """The packet count for a new buffer: ``KC_HOSTCALL_PACKETS`` if set (at least 2; fewer packets
    than calling warps make warps wait for packets, a way to test that path), else ``default``."""
    env = os.environ.get("KC_HOSTCALL_PACKETS", "").strip()
    if not env:
        return default
    if not env.isdigit() or int(env) < 2:
        raise ValueError(f"KC_HOSTCALL_PACKETS must be an integer of at least 2, not {env!r}")
    return int(env)


class HostcallBuffer:
    """A hostcall buffer of ``num_packets`` packets laid out in memory the caller provides.

    ``host_base``: where this process reads and writes the memory; ``device_base``: the address of
    the same memory in the device's address space (equal on the CPU target; for CUDA host-mapped
    memory, ``cuMemHostGetDevicePointer``'s). Both must be :data:`ALIGNMENT`-aligned and ``size`` at
    least :meth:`size_for` (``num_packets``). ``owner`` is kept alive with the buffer; ``release``
    is called by :meth:`close`.

    Layout (byte offsets from the base; docs/amd-hostcall.md §2):

    - 0: ``buffer_t`` — headers 0, payloads 8, doorbell 16, free_stack 24, ready_stack 32,
      index_mask 40 (ockl hostcall_impl.cl ``buffer_t``; clr devhostcall.hpp ``HostcallBuffer``).
    - 64: the doorbell, an ``amd_signal_t`` (ockl amd_hsa_signal.h): kind 0 (= 1, user signal),
      value 8 (starts at 1, clr's ``SIGNAL_INIT``), event_mailbox_ptr 16 (= 0: the device only
      adds), event_id 24.
    - 128: N packet headers of 24 bytes — next 0, activemask 8, service 16 (u32), control 20 (u32,
      bit 0 READY).
    - then, 64-aligned: N payloads of 4096 bytes — 64 lanes x 8 u64, lane i's slot at 64*i.

    The free stack holds every packet, initialised as clr's ``HostcallBuffer::initialize`` does
    (top N-1, ..., 1, then packet 0 with tag 1 so that its pointer is not 0); the ready stack is
    empty; ``index_mask`` is next_power_of_two(N) - 1 (clr ``getIndexMask``)."""

    def __init__(self, host_base: int, device_base: int, size: int, num_packets: int = DEFAULT_PACKETS,
                 *, owner: Any = None, release: Callable[[], Any] | None = None):
        if num_packets < 2:
            raise ValueError(f"a hostcall buffer needs at least 2 packets, got {num_packets}")
        need = self.size_for(num_packets)
        if size < need:
            raise ValueError(f"a hostcall buffer of {num_packets} packets needs {need} bytes, got {size}")
        if host_base % ALIGNMENT or device_base % ALIGNMENT:
            raise ValueError(f"hostcall buffer addresses must be {ALIGNMENT}-byte aligned: host "
                             f"{host_base:#x}, device {device_base:#x}")
        self.host_base, self.device_base, self.size = host_base, device_base, size
        self.num_packets = num_packets
        self.index_mask = (1 << (num_packets - 1).bit_length()) - 1
        self.payloads_offset = _align(HEADERS_OFFSET + HEADER_BYTES * num_packets, ALIGNMENT)
        self._owner, self._release = owner, release
        self._atomics = HostAtomics.get()
        raw = (ctypes.c_uint64 * (need // 8)).from_address(host_base)
        self._words = np.ctypeslib.as_array(raw)
        self._words.flags.writeable = True
        self._hdr_words = self._words[HEADERS_OFFSET // 8: (HEADERS_OFFSET + HEADER_BYTES * num_packets) // 8] \
            .reshape(num_packets, HEADER_BYTES // 8)
        self._payloads = self._words[self.payloads_offset // 8:].reshape(num_packets, LANES, SLOT_WORDS)
        self._initialize()

    @staticmethod
    def size_for(num_packets: int = DEFAULT_PACKETS) -> int:
        """Bytes a buffer of ``num_packets`` packets occupies."""
        return _align(HEADERS_OFFSET + HEADER_BYTES * num_packets, ALIGNMENT) + PAYLOAD_BYTES * num_packets

    @classmethod
    def in_host_memory(cls, num_packets: int = DEFAULT_PACKETS) -> "HostcallBuffer":
        """A buffer in memory this process owns (a numpy array), the device address being the host
        address: for the CPU target, whose device code runs in this process."""
        size = cls.size_for(num_packets)
        mem = np.zeros(size + ALIGNMENT, dtype=np.uint8)
        base = _align(mem.ctypes.data, ALIGNMENT)
        return cls(base, base, size, num_packets, owner=mem)

    @classmethod
    def allocate(cls, allocator: Allocator, num_packets: int = DEFAULT_PACKETS) -> "HostcallBuffer":
        """A buffer in memory from ``allocator(size, alignment) -> (host address, device address,
        release or None)``; :meth:`close` calls ``release``. For CUDA: pinned host memory from
        ``cuMemHostAlloc(size, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE)`` (page
        aligned), its device address from ``cuMemHostGetDevicePointer``, release ``cuMemFreeHost``."""
        size = cls.size_for(num_packets)
        host, device, release = allocator(size, ALIGNMENT)
        try:
            return cls(int(host), int(device), size, num_packets, release=release)
        except Exception:
            if release is not None:
                release()
            raise

    def close(self) -> None:
        """Release the memory (through the allocator's ``release``); the buffer is unusable after."""
        release, self._release = self._release, None
        self._payloads = self._hdr_words = self._words = None  # type: ignore[assignment]
        if release is not None:
            release()

    # -- addresses ------------------------------------------------------------------------------------
    @property
    def device_address(self) -> int:
        """What the device code gets as the buffer (the hidden argument / ``kc_hostcall_buffer``)."""
        return self.device_base

    @property
    def doorbell_device_address(self) -> int:
        """The device address of the buffer's doorbell signal (what a kernel rings after filling a packet)."""
        return self.device_base + SIGNAL_OFFSET

    def host_address(self, offset: int) -> int:
        """The host address of byte ``offset`` of the buffer."""
        return self.host_base + offset

    def header_offset(self, packet: int) -> int:
        """Byte offset of the header of ``packet`` (a tagged pointer or an index)."""
        return HEADERS_OFFSET + HEADER_BYTES * (packet & self.index_mask)

    def payload_offset(self, packet: int) -> int:
        """Byte offset of the payload of ``packet`` (a tagged pointer or an index): its 64 lanes' slots."""
        return self.payloads_offset + PAYLOAD_BYTES * (packet & self.index_mask)

    # -- state ----------------------------------------------------------------------------------------
    def _initialize(self) -> None:
        w = self._words
        w[: self.payloads_offset // 8] = 0
        dev = self.device_base
        w[BUFFER_HEADERS // 8] = dev + HEADERS_OFFSET
        w[BUFFER_PAYLOADS // 8] = dev + self.payloads_offset
        w[BUFFER_DOORBELL // 8] = dev + SIGNAL_OFFSET
        w[BUFFER_INDEX_MASK // 8] = self.index_mask
        s = SIGNAL_OFFSET // 8
        w[s + SIGNAL_KIND // 8] = AMD_SIGNAL_KIND_USER
        w[s + SIGNAL_VALUE // 8] = SIGNAL_INIT
        # The free stack, as clr's HostcallBuffer::initialize: N-1 -> ... -> 1 -> 0 (tag 1) -> end.
        nxt = self.index_mask + 1
        self._hdr_words[0, 0] = 0
        for i in range(1, self.num_packets):
            self._hdr_words[i, 0] = nxt
            nxt = i
        w[BUFFER_FREE_STACK // 8] = nxt
        w[BUFFER_READY_STACK // 8] = 0
        # Publish the initialised memory before the buffer's address is handed to any device thread.
        self._atomics.store64(self.host_base + BUFFER_READY_STACK, 0)

    def doorbell(self) -> int:
        """The doorbell signal's value (it starts at 1; each push of a ready packet adds 1)."""
        return self._atomics.load64(self.host_base + SIGNAL_OFFSET + SIGNAL_VALUE)

    def pending(self) -> bool:
        """Whether packets wait on the ready stack."""
        return self._atomics.load64(self.host_base + BUFFER_READY_STACK) != 0

    def free_packets(self) -> int:
        """How many packets the free stack holds (walks it: meaningful only while no device code
        runs). A buffer at rest has all :attr:`num_packets`."""
        n, p = 0, int(self._words[BUFFER_FREE_STACK // 8])
        while p and n <= self.num_packets:
            n += 1
            p = int(self._hdr_words[p & self.index_mask, 0])
        return n

    def take_ready(self) -> int:
        """Atomically take the whole ready stack (exchange its top with 0, acquire): the tagged
        pointer of its first packet, 0 if none. The packets reached through ``next`` from it are the
        caller's until their READY flags are cleared."""
        if not self._atomics.load64(self.host_base + BUFFER_READY_STACK):
            return 0  # no read-modify-write on a word the device contends for when there is nothing
        return self._atomics.xchg64(self.host_base + BUFFER_READY_STACK, 0)

    def header(self, packet: int) -> tuple[int, int, int, int]:
        """(next, activemask, service, control) of ``packet`` (plain reads)."""
        h = self._hdr_words[packet & self.index_mask]
        return int(h[0]), int(h[1]), int(h[2]) & 0xFFFF_FFFF, int(h[2]) >> 32

    def slot(self, packet: int, lane: int) -> np.ndarray:
        """The 8 u64 of ``lane``'s slot in ``packet``'s payload, as a writable view."""
        return self._payloads[packet & self.index_mask, lane]

    def release_packet(self, packet: int) -> None:
        """Clear ``packet``'s READY flag with a release store: its results become visible and the
        packet goes back to the device (which returns it to the free stack)."""
        addr = self.host_base + self.header_offset(packet) + HEADER_CONTROL
        control = int(self._hdr_words[packet & self.index_mask, 2]) >> 32
        self._atomics.store32(addr, control & ~CONTROL_READY & 0xFFFF_FFFF)


# --- messages ----------------------------------------------------------------------------------------

#: A slot handler: given a lane's 8 words (a writable view), writes its results into words 0 and 1.
SlotHandler = Callable[[np.ndarray], None]
#: A message handler: given a finished message's words, returns the first result word.
MessageHandler = Callable[[list], int]


class MessageError(RuntimeError):
    """A hostcall that continues a message the host does not know (clr: "No message found")."""


class MessageAssembler:
    """Assembles multi-hostcall messages per lane as clr's ``MessageHandler::handlePayload``
    (rocclr/device/devhcmessages.cpp) does: word 0 of a slot is the descriptor (BEGIN bit 0, END
    bit 1, LEN bits 5-7, id bits 8-63), words 1..LEN are data. BEGIN takes an id (the most recently
    freed one, else a new one) and returns the descriptor with BEGIN cleared and the id set in word
    0; END runs the service's message handler on the whole message, writes its result into word 0
    and frees the id."""

    def __init__(self, handlers: dict[int, MessageHandler]):
        self.handlers = dict(handlers)
        self._messages: list[list[int] | None] = []
        self._free: list[int] = []

    def handle(self, service: int, slot: np.ndarray) -> None:
        """Take one lane's hostcall of ``service``: ``slot`` (uint64 words: the descriptor, then data) is
        updated in place with the reply (the message id, or the handler's result when it ends the message).
        Raises MessageError for a continuation of a message the host does not know, or for a message
        of a service with no handler."""
        desc = int(slot[0])
        if desc & DESC_BEGIN:
            if self._free:
                mid = self._free.pop()
                self._messages[mid] = []
            else:
                mid = len(self._messages)
                self._messages.append([])
            desc = (desc & ~DESC_BEGIN & ((1 << DESC_ID_SHIFT) - 1)) | (mid << DESC_ID_SHIFT)
            slot[0] = desc & _U64
        else:
            mid = desc >> DESC_ID_SHIFT
        words = self._messages[mid] if mid < len(self._messages) else None
        if words is None:
            raise MessageError(f"hostcall message {mid} (descriptor {desc:#x}) was never begun or has ended")
        n = (desc >> DESC_LEN_SHIFT) & DESC_LEN_MASK
        words.extend(int(x) for x in slot[1:1 + n])
        if not desc & DESC_END:
            return
        self._messages[mid] = None
        self._free.append(mid)
        handler = self.handlers.get(service)
        if handler is None:
            raise MessageError(f"service {service} has no message handler")
        slot[0] = handler(words) & _U64

    @property
    def open_messages(self) -> int:
        """Messages begun and not yet ended."""
        return sum(m is not None for m in self._messages)


# --- printf ------------------------------------------------------------------------------------------

#: Where finished printf output goes: called with each printf's whole output, as text.
Sink = Callable[[str], None]


def _stream_sink(name: str) -> Sink:
    def write(text: str) -> None:
        stream = getattr(sys, name)  # looked up per call, so redirection (and pytest's capture) works
        stream.write(text)
        stream.flush()
    return write


#: How the printf service steps past a ``%s`` argument's words (see :func:`decode_printf`).
#: "printed": ⌈(characters the conversion printed + 1) / 8⌉ words, as the HIP runtime of ROCm 6.x
#: does (ROCm/clr rocclr/device/devhcprintf.cpp, ``consumeCstring``, tag rocm-6.2.2 and commit
#: 2192e20ed); "length": ⌈(strlen + 1) / 8⌉, the string's own words, as the newer copy does
#: (ROCm/rocm-systems projects/clr/rocclr/device/devhcprintf.cpp, commit caa9843b3).
STRING_ADVANCES = ("length", "printed")


def string_advance_from_env() -> str:
    """``KC_HOSTCALL_STRING_ADVANCE`` ("length", the default, or "printed"): which runtime's ``%s``
    stepping kcompiler's printf service imitates. Raises ValueError for another value."""
    mode = os.environ.get("KC_HOSTCALL_STRING_ADVANCE", "").strip() or "length"
    if mode not in STRING_ADVANCES:
        raise ValueError(f"KC_HOSTCALL_STRING_ADVANCE must be one of {', '.join(STRING_ADVANCES)}, "
                         f"not {mode!r}")
    return mode


def decode_printf(words: Sequence[int], string_advance: str = "length") -> tuple[int, bytes, list[CArg]]:
    """A printf message's (control word, format, arguments), read as clr's ``handlePrintf`` and
    ``format`` do (rocclr/device/devhcprintf.cpp): word 0 the control word (bit 0: stderr), then the
    format's bytes with its NUL padded to 8, then per conversion its ``*`` words and its value —
    one word, or for ``%s`` the string's bytes and NUL padded to 8. After a ``%s`` the next argument
    is read ⌈(strlen + 1) / 8⌉ words on (``string_advance="length"``, the newer clr) or ⌈(characters
    the conversion printed + 1) / 8⌉ words on (``"printed"``, ROCm 6.x's clr: a width or precision
    on the host then misplaces every later argument; kcompiler's device code formats such fields
    itself and sends a plain ``%s``, so it reads the same under both). Arguments stop where the
    words run out (where clr, stepping past the end, would read beyond the message)."""
    if string_advance not in STRING_ADVANCES:
        raise ValueError(f"string_advance must be one of {STRING_ADVANCES}, not {string_advance!r}")
    if not words:
        return 0, b"", []
    control = int(words[0])
    data = b"".join((int(w) & _U64).to_bytes(8, "little") for w in words[1:])
    fmt = data.split(b"\0", 1)[0]
    at = (len(fmt) + 1 + 7) // 8
    n = len(words) - 1
    args: list[CArg] = []

    def word(k: int) -> int:
        return int(words[1 + k]) & _U64

    for item in parse_format(fmt):
        if isinstance(item, bytes) or not item.takes_argument:
            continue
        if at + item.stars >= n:
            break
        stars = [word(at + k) for k in range(item.stars)]
        args.extend(stars)
        at += item.stars
        if item.conversion == b"s":
            s = data[8 * at:].split(b"\0", 1)[0]
            args.append(s)
            shown = len(s) if string_advance == "length" else len(format_spec(item, [*stars, s]))
            at += (shown + 1 + 7) // 8
        else:
            args.append(word(at))
            at += 1
    return control, fmt, args


class PrintfService:
    """The printf message handler: decodes a finished message (:func:`decode_printf`), formats it
    with :func:`kcompiler.runtime.cformat.format_c_bytes` and writes the text to ``stdout`` (control
    bit 0 clear) or ``stderr`` (set); returns the byte count (the device printf's result), or -1 for
    a control word with other bits set (clr ``handlePrintf``). Each printf's output reaches its sink
    in one call. Sinks default to ``sys.stdout`` / ``sys.stderr`` (flushed after each write).
    ``string_advance`` ("length" or "printed", see :func:`decode_printf`) defaults to
    ``KC_HOSTCALL_STRING_ADVANCE`` (:func:`string_advance_from_env`), else "length"."""

    #: How many failed asserts' lines :meth:`assertion_text` can still find.
    MAX_ASSERTIONS = 256

    def __init__(self, stdout: Sink | None = None, stderr: Sink | None = None,
                 string_advance: str | None = None):
        self.stdout = stdout or _stream_sink("stdout")
        self.stderr = stderr or _stream_sink("stderr")
        self.string_advance = string_advance or string_advance_from_env()
        #: (location, block, thread) -> (serial, the line of a failed device assert: ir/assertion.py)
        self.assertions: dict[tuple, tuple[int, str]] = {}
        #: How many failed asserts' lines this service has printed.
        self.assertion_serial = 0
        if self.string_advance not in STRING_ADVANCES:
            raise ValueError(f"string_advance must be one of {STRING_ADVANCES}, not {string_advance!r}")

    def __call__(self, words: list) -> int:
        control, fmt, args = decode_printf(words, self.string_advance)
        if control & ~1:
            return -1
        out = format_c_bytes(fmt, args)
        text = out.decode("utf-8", "replace")
        who = assertion.parse(text)
        if who is not None:  # a failed device assert's line: kept for the launch's exception
            self.assertion_serial += 1
            self.assertions[who] = (self.assertion_serial, text.rstrip("\n"))
            while len(self.assertions) > self.MAX_ASSERTIONS:
                self.assertions.pop(next(iter(self.assertions)))
        (self.stderr if control & 1 else self.stdout)(text)
        return len(out)

    def assertion_text(self, location: str, block: tuple, thread: tuple, since: int = 0) -> str | None:
        """The line a failed device assert at ``location`` printed in ``block`` and ``thread`` (xyz
        tuples), if this service printed it after the :attr:`assertion_serial` ``since`` (a launch
        reads it before it starts: an earlier launch's line at the same place is not its own); the
        last :data:`MAX_ASSERTIONS` are kept."""
        serial, text = self.assertions.get((location, tuple(block), tuple(thread)), (0, None))
        return text if serial > since else None


# --- the listener ------------------------------------------------------------------------------------

class HostcallListener:
    """Serves hostcall buffers: a thread (:meth:`start` / :meth:`stop`, or ``with``) or explicit
    :meth:`drain` calls, never both at once (a lock).

    Each pass does, per buffer, what clr's ``HostcallBuffer::processPackets`` does
    (rocclr/device/devhostcall.cpp): take the whole ready stack (atomic exchange with 0, acquire);
    walk it through ``next`` (read before the packet is released); call the service's handler for
    each active lane, lowest first; clear the READY flag with a release store. The device, not the
    host, returns packets to the free stack. The thread polls (the ready stack, cheaply, with a
    backoff from ``min_sleep`` to ``max_sleep`` seconds) where clr blocks on the doorbell signal.

    Services: printf (2) through the message assembler (``string_advance``: see
    :class:`PrintfService`), plus ``services`` (id -> slot handler). An
    unknown service, a handler that raises, or a message error is recorded in :attr:`errors` (and
    reported on stderr once); the packet is released all the same, so no wave waits forever."""

    def __init__(self, buffers: Iterable[HostcallBuffer] = (), *, stdout: Sink | None = None,
                 stderr: Sink | None = None, services: dict[int, SlotHandler] | None = None,
                 min_sleep: float = 20e-6, max_sleep: float = 1e-3, string_advance: str | None = None):
        self.printf = PrintfService(stdout, stderr, string_advance)
        self.messages = MessageAssembler({SERVICE_PRINTF: self.printf})
        self.services: dict[int, SlotHandler] = {
            SERVICE_PRINTF: lambda slot: self.messages.handle(SERVICE_PRINTF, slot)}
        self.services.update(services or {})
        self.buffers: list[HostcallBuffer] = list(buffers)
        self.errors: list[str] = []
        self.packets_served = 0
        self.min_sleep, self.max_sleep = min_sleep, max_sleep
        self._serve_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- buffers --------------------------------------------------------------------------------------
    def add_buffer(self, buffer: HostcallBuffer) -> None:
        """Serve ``buffer`` too (once: adding it again does nothing)."""
        with self._serve_lock:
            if buffer not in self.buffers:
                self.buffers.append(buffer)

    def remove_buffer(self, buffer: HostcallBuffer) -> None:
        """Stop serving ``buffer`` (after serving what it has pending)."""
        with self._serve_lock:
            if buffer in self.buffers:
                self._serve(buffer)
                self.buffers.remove(buffer)

    # -- serving --------------------------------------------------------------------------------------
    def drain(self) -> int:
        """Serve everything pending on every buffer, until a pass finds nothing; returns how many
        packets were served."""
        total = 0
        with self._serve_lock:
            while True:
                n = sum(self._serve(b) for b in self.buffers)
                if not n:
                    return total
                total += n

    def _serve(self, buffer: HostcallBuffer) -> int:
        packet, served = buffer.take_ready(), 0
        while packet:
            nxt, activemask, service, _ = buffer.header(packet)
            handler = self.services.get(service)
            lanes = activemask
            while lanes:
                lane = (lanes & -lanes).bit_length() - 1
                lanes &= lanes - 1
                if handler is None:
                    self._error(f"hostcall: no handler for service {service}")
                    break
                try:
                    handler(buffer.slot(packet, lane))
                except Exception as e:  # noqa: BLE001 - the device must not wait forever
                    self._error(f"hostcall: service {service}, lane {lane}: {e!r}",
                                traceback.format_exc())
            buffer.release_packet(packet)
            served += 1
            packet = nxt
        self.packets_served += served
        return served

    def _error(self, message: str, detail: str = "") -> None:
        if not self.errors:
            sys.stderr.write(f"kcompiler: {message}\n{detail}")
        self.errors.append(message)

    # -- the thread -----------------------------------------------------------------------------------
    def start(self) -> "HostcallListener":
        """Start the listener thread (a daemon); returns self. Starting a running listener does
        nothing."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="kc-hostcall-listener", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop the thread, then serve whatever is still pending. Device code that makes hostcalls
        after this waits until the next :meth:`drain` or :meth:`start`."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join(timeout)
            if thread.is_alive():
                raise RuntimeError("the hostcall listener thread did not stop")
        self.drain()

    @property
    def running(self) -> bool:
        """Whether the listener's thread has been started and not stopped."""
        return self._thread is not None

    def __enter__(self) -> "HostcallListener":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _run(self) -> None:
        sleep = self.min_sleep
        while not self._stop.is_set():
            if self.drain():
                sleep = self.min_sleep
                continue
            self._stop.wait(sleep)
            sleep = min(sleep * 2, self.max_sleep)
