"""The host side of the hostcall protocol (kcompiler.runtime.hostcall) against a pure-Python device
(tests/hostcall_device.py), run from many threads at once: layout, atomics, the listener, message
assembly and the printf service. docs/amd-hostcall.md has the protocol and its sources."""
from __future__ import annotations

import ctypes
import random
import struct
import threading

import numpy as np
import pytest

from kcompiler.runtime.cformat import format_c_bytes
from kcompiler.runtime.hostcall import (
    ALIGNMENT, AMD_SIGNAL_KIND_USER, BUFFER_DOORBELL, BUFFER_FREE_STACK, BUFFER_HEADERS,
    BUFFER_INDEX_MASK, BUFFER_PAYLOADS, BUFFER_READY_STACK, DESC_BEGIN, DESC_END, DESC_LEN_SHIFT,
    HEADER_BYTES, HEADERS_OFFSET, PAYLOAD_BYTES, SERVICE_PRINTF, SIGNAL_EVENT_MAILBOX, SIGNAL_KIND,
    SIGNAL_OFFSET, SIGNAL_VALUE, HostAtomics, HostcallBuffer, HostcallListener, MessageAssembler,
    MessageError, PrintfService, decode_printf)

from ..hostcall_device import SimulatedWave, WavePrintf

ECHO = 9  # a test service: result word 0 = a0 + a1 + lane-independent a2, word 1 = the lane's tag


def _echo(log: list | None = None):
    def serve(slot: np.ndarray) -> None:
        if log is not None:
            log.append(tuple(int(x) for x in slot[:4]))
        slot[0] = (int(slot[1]) + int(slot[2]) + int(slot[3])) & ((1 << 64) - 1)
        slot[1] = int(slot[4]) ^ 0xABCDEF
    return serve


def _u64(addr: int) -> int:
    return ctypes.c_uint64.from_address(addr).value


def _masks(width: int, rng: random.Random) -> int:
    """A random active mask of a ``width``-lane wave: full, one lane, the top lane, or random."""
    choice = rng.randrange(4)
    if choice == 0:
        return (1 << width) - 1
    if choice == 1:
        return 1 << rng.randrange(width)
    if choice == 2:
        return 1 << (width - 1)
    return rng.getrandbits(width) or 1


def _lanes(mask: int) -> list[int]:
    return [i for i in range(64) if mask >> i & 1]


class _OffsetAllocator:
    """Host memory whose "device" addresses are elsewhere (as with CUDA host-mapped memory): the
    device side must only ever use the device addresses stored in the buffer."""

    DEVICE_BASE = 0x7F00_0000_0000

    def __init__(self):
        self.released = False

    def __call__(self, size: int, alignment: int):
        self.mem = np.zeros(size + alignment, np.uint8)
        host = (self.mem.ctypes.data + alignment - 1) // alignment * alignment
        return host, self.DEVICE_BASE, self.release

    def release(self):
        self.released = True


@pytest.fixture(params=["host", "offset"])
def make_buffer(request):
    """A factory of buffers in plain host memory, or with device addresses that differ."""
    made = []

    def make(num_packets: int) -> HostcallBuffer:
        if request.param == "host":
            buf = HostcallBuffer.in_host_memory(num_packets)
        else:
            buf = HostcallBuffer.allocate(_OffsetAllocator(), num_packets)
        made.append(buf)
        return buf
    yield make
    for b in made:
        b.close()


# --- layout ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 64, 1000, 1024])
def test_layout_and_initial_state(n):
    alloc = _OffsetAllocator()
    buf = HostcallBuffer.allocate(alloc, n)
    h, d = buf.host_base, buf.device_base
    assert d == _OffsetAllocator.DEVICE_BASE and h % ALIGNMENT == 0
    mask = (1 << (n - 1).bit_length()) - 1  # next power of two, minus one (clr getIndexMask)
    assert buf.index_mask == mask
    # buffer_t: pointers are device addresses
    assert _u64(h + BUFFER_HEADERS) == d + HEADERS_OFFSET
    payloads = _u64(h + BUFFER_PAYLOADS) - d
    assert payloads % 64 == 0 and payloads >= HEADERS_OFFSET + HEADER_BYTES * n
    assert payloads + PAYLOAD_BYTES * n == HostcallBuffer.size_for(n) <= buf.size
    assert _u64(h + BUFFER_DOORBELL) == d + SIGNAL_OFFSET and (d + SIGNAL_OFFSET) % 64 == 0
    assert _u64(h + BUFFER_INDEX_MASK) == mask
    assert _u64(h + BUFFER_READY_STACK) == 0
    # the doorbell: a user signal at 1 with no mailbox
    sig = h + SIGNAL_OFFSET
    assert (_u64(sig + SIGNAL_KIND), _u64(sig + SIGNAL_VALUE), _u64(sig + SIGNAL_EVENT_MAILBOX)) == \
        (AMD_SIGNAL_KIND_USER, 1, 0)
    # the free stack: n-1 -> n-2 -> ... -> 1 -> 0 with tag 1 -> end (clr HostcallBuffer::initialize)
    chain, p = [], _u64(h + BUFFER_FREE_STACK)
    while p:
        chain.append(p)
        p = _u64(h + HEADERS_OFFSET + HEADER_BYTES * (p & mask))
    assert chain == list(range(n - 1, 0, -1)) + [mask + 1]
    assert buf.free_packets() == n and not buf.pending() and buf.doorbell() == 1
    buf.close()
    assert alloc.released


def test_buffer_arguments_are_checked():
    mem = np.zeros(HostcallBuffer.size_for(4) + 128, np.uint8)
    base = (mem.ctypes.data + 63) // 64 * 64
    with pytest.raises(ValueError, match="at least 2 packets"):
        HostcallBuffer(base, base, 1 << 20, 1)
    with pytest.raises(ValueError, match="needs"):
        HostcallBuffer(base, base, 100, 4)
    with pytest.raises(ValueError, match="aligned"):
        HostcallBuffer(base + 8, base + 8, HostcallBuffer.size_for(4), 4)


# --- atomics -----------------------------------------------------------------------------------------

def test_host_atomics():
    a = HostAtomics.get()
    cell = (ctypes.c_uint64 * 2)()
    p = ctypes.addressof(cell)
    a.store64(p, 5)
    assert a.load64(p) == 5
    assert a.cas64(p, 4, 9) == 5 and cell[0] == 5      # no swap: returns what it found
    assert a.cas64(p, 5, 9) == 5 and cell[0] == 9      # swap
    assert a.xchg64(p, 2 ** 64 - 1) == 9 and cell[0] == 2 ** 64 - 1
    assert a.add64(p, 2) == 2 ** 64 - 1 and cell[0] == 1
    a.store32(p + 8, 0xDEADBEEF)
    assert a.load32(p + 8) == 0xDEADBEEF and cell[1] == 0xDEADBEEF

    def bump():
        for _ in range(2000):
            while True:  # a CAS loop, as the device's pushes are
                old = a.load64(p)
                if a.cas64(p, old, old + 1) == old:
                    break
            a.add64(p + 8, 1)

    cell[0] = cell[1] = 0
    threads = [threading.Thread(target=bump) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (cell[0], cell[1]) == (16000, 16000)


# --- one wave, no thread -----------------------------------------------------------------------------

@pytest.mark.parametrize("width", [32, 64])
def test_hostcall_served_by_drain(make_buffer, width):
    buf = make_buffer(4)
    listener = HostcallListener([buf], services={ECHO: _echo()})
    wave = SimulatedWave(buf, width)
    mask = (1 << width) - 1 if width == 32 else 0x8000_0000_0000_0001
    lanes = {lane: [0, lane, 100, 1000, lane * 7, 0, 0, 0] for lane in _lanes(mask)}
    results: dict = {}
    t = threading.Thread(target=lambda: results.update(wave.hostcall(ECHO, lanes)))
    t.start()
    served = 0
    while t.is_alive():
        served += listener.drain()
        t.join(0.0005)
    assert served == 1
    assert results == {lane: (lane + 1100, (lane * 7) ^ 0xABCDEF) for lane in lanes}
    assert buf.free_packets() == 4 and not buf.pending() and buf.doorbell() == 2


# --- many waves, many threads, the listener thread -------------------------------------------------

@pytest.mark.parametrize("waves, packets", [(24, 24), (16, 64)])
def test_every_hostcall_served_exactly_once(make_buffer, waves, packets):
    """Waves of 32 and 64 lanes with full, single-lane and random masks make hostcalls from as many
    threads; every (wave, call, lane) reaches the service exactly once and every lane gets its own
    results. With as many packets as waves, packets are recycled under contention (tags advance)."""
    buf = make_buffer(packets)
    log: list = []
    listener = HostcallListener([buf], services={ECHO: _echo(log)})
    calls_per_wave = 25
    failures: list = []

    def run(w: int) -> None:
        rng = random.Random(w)
        wave = SimulatedWave(buf, 32 if w % 2 else 64)
        try:
            for c in range(calls_per_wave):
                mask = _masks(wave.width, rng)
                lanes = {lane: [0, w, c, lane, rng.getrandbits(64), 0, 0, 0] for lane in _lanes(mask)}
                got = wave.hostcall(ECHO, lanes)
                want = {lane: ((w + c + lane) & (2 ** 64 - 1), words[4] ^ 0xABCDEF)
                        for lane, words in lanes.items()}
                if got != want:
                    failures.append((w, c, got, want))
        except Exception as e:  # noqa: BLE001
            failures.append((w, repr(e)))

    with listener:
        threads = [threading.Thread(target=run, args=(w,)) for w in range(waves)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "a wave is still waiting for the host"
    assert not failures
    assert not listener.errors
    seen = [(w, c, lane) for _, w, c, lane in log]
    assert len(seen) == len(set(seen))  # nothing served twice
    expected = set()
    for w in range(waves):
        rng = random.Random(w)
        width = 32 if w % 2 else 64
        for c in range(calls_per_wave):
            mask = _masks(width, rng)
            for lane in _lanes(mask):
                rng.getrandbits(64)
                expected.add((w, c, lane))
    assert set(seen) == expected  # and nothing lost
    assert listener.packets_served == waves * calls_per_wave
    assert buf.free_packets() == packets and not buf.pending()
    assert buf.doorbell() == 1 + waves * calls_per_wave


def test_two_buffers_one_listener(make_buffer):
    bufs = [make_buffer(8), make_buffer(8)]
    log: list = []
    listener = HostcallListener(services={ECHO: _echo(log)})
    for b in bufs:
        listener.add_buffer(b)

    def run(w: int) -> None:
        wave = SimulatedWave(bufs[w % 2], 64)
        for c in range(20):
            assert wave.hostcall(ECHO, {0: [0, w, c, 0, 0, 0, 0, 0]})[0][0] == w + c

    with listener:
        threads = [threading.Thread(target=run, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert len(log) == 160 and not listener.errors
    assert all(b.free_packets() == 8 for b in bufs)


# --- printf ------------------------------------------------------------------------------------------

LONG_FMT = (b"a long format string that needs several hostcalls just for itself: "
            b"%d, %5.2f, [%-12s], %#x, %c, %s, %e, %llu, %+i, %%, %p, %g, %s\n")


def _long_args(lane: int, rng: random.Random) -> list:
    return [lane - 32, rng.random() * 1000, b"s%d" % lane, lane * 4099, 65 + lane % 26,
            bytes(rng.choice(b"xyz") for _ in range(rng.randrange(0, 200))),
            -rng.random() * 1e-5, 2 ** 64 - lane, lane, 0x1000 + lane, 1.0 / (lane + 1),
            None if lane % 3 == 0 else b"last"]


def _expected(fmt: bytes, args: list) -> str:
    # A null %s pointer travels as an empty string (ockl services.cl, __ockl_fprintf_append_string_n).
    return format_c_bytes(fmt, [b"" if a is None else a for a in args]).decode()


@pytest.mark.parametrize("style", ["kcompiler", "clang"])
@pytest.mark.parametrize("width", [32, 64])
def test_printf_multi_packet_messages(make_buffer, style, width):
    """Long formats, 13 arguments, strings of up to 200 bytes (several 56-byte chunks, a different
    number per lane, so lanes drop out of the wave's hostcalls), NULL strings; each lane's message
    is assembled separately and printed once, and each lane gets its byte count back."""
    buf = make_buffer(8)
    out: list[str] = []
    listener = HostcallListener([buf], stdout=out.append)
    rng = random.Random(width)
    wave = SimulatedWave(buf, width)
    expected: list[str] = []
    with listener:
        for mask in [(1 << width) - 1, 0b1011, 1 << (width - 1), rng.getrandbits(width) | 1]:
            lane_args = {lane: _long_args(lane, rng) for lane in _lanes(mask)}
            counts = WavePrintf(wave, style)(LONG_FMT, lane_args)
            want = {lane: _expected(LONG_FMT, a) for lane, a in lane_args.items()}
            assert counts == {lane: len(w.encode()) for lane, w in want.items()}
            expected += want.values()
    assert sorted(out) == sorted(expected)
    assert not listener.errors and listener.messages.open_messages == 0
    assert wave.hostcalls > 4 * 10  # really several hostcalls per message


def test_printf_from_many_threads(make_buffer):
    buf = make_buffer(16)
    out: list[str] = []
    errs: list[str] = []
    listener = HostcallListener([buf], stdout=out.append, stderr=errs.append)
    fmt = b"wave %d call %d lane %d: %s|%08.3f|%-5c|\n"

    def run(w: int) -> None:
        rng = random.Random(100 + w)
        wave = SimulatedWave(buf, 64 if w % 3 else 32)
        printf = WavePrintf(wave, "kcompiler" if w % 2 else "clang")
        for c in range(6):
            mask = _masks(wave.width, rng)
            lane_args = {lane: [w, c, lane, b"#" * rng.randrange(0, 120), rng.uniform(-1e3, 1e3), 97 + lane % 26]
                         for lane in _lanes(mask)}
            printf(fmt, lane_args, control=c % 2)  # odd calls go to stderr

    with listener:
        threads = [threading.Thread(target=run, args=(w,)) for w in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not listener.errors and listener.messages.open_messages == 0
    lines = out + errs
    assert len(lines) == len(set(lines))
    keys = {tuple(int(x) for x in line.split(":")[0].split()[1::2]) for line in lines}
    assert len(keys) == len(lines)
    assert all(int(line.split()[3]) % 2 == 0 for line in out)
    assert all(int(line.split()[3]) % 2 == 1 for line in errs)
    assert buf.free_packets() == 16


def test_printf_goes_to_sys_stdout_by_default(capsys):
    buf = HostcallBuffer.in_host_memory(4)
    with HostcallListener([buf]):
        WavePrintf(SimulatedWave(buf, 32))(b"hello %s %d\n", {0: [b"world", 42], 31: [b"again", -1]})
    assert sorted(capsys.readouterr().out.splitlines()) == ["hello again -1", "hello world 42"]


# --- messages and the printf decoder, without a device ---------------------------------------------

def _slot(*words: int) -> np.ndarray:
    s = np.zeros(8, np.uint64)
    s[: len(words)] = words
    return s


def _fmt_words(fmt: bytes) -> list[int]:
    data = fmt + b"\0" + b"\0" * (-(len(fmt) + 1) % 8)
    return [int.from_bytes(data[i:i + 8], "little") for i in range(0, len(data), 8)]


def test_message_ids_are_reused_as_clr_does():
    got: list = []
    m = MessageAssembler({SERVICE_PRINTF: lambda words: got.append(words) or len(words)})
    a, b = _slot(DESC_BEGIN | (1 << DESC_LEN_SHIFT), 11), _slot(DESC_BEGIN | (1 << DESC_LEN_SHIFT), 22)
    m.handle(SERVICE_PRINTF, a)
    m.handle(SERVICE_PRINTF, b)
    ida, idb = int(a[0]) >> 8, int(b[0]) >> 8
    assert (ida, idb) == (0, 1) and not int(a[0]) & DESC_BEGIN
    end = _slot(int(b[0]) & ~(7 << DESC_LEN_SHIFT) | (2 << DESC_LEN_SHIFT) | DESC_END, 33, 44)
    m.handle(SERVICE_PRINTF, end)
    assert got == [[22, 33, 44]] and int(end[0]) == 3
    c = _slot(DESC_BEGIN | DESC_END)  # begin and end in one hostcall, no data
    m.handle(SERVICE_PRINTF, c)
    assert got[-1] == [] and int(c[0]) == 0
    d = _slot(DESC_BEGIN)
    m.handle(SERVICE_PRINTF, d)
    assert int(d[0]) >> 8 == 1  # the most recently freed id
    assert m.open_messages == 2
    with pytest.raises(MessageError):
        m.handle(SERVICE_PRINTF, _slot((7 << 8) | DESC_END))


def test_decode_printf():
    words = [0] + _fmt_words(b"%s=%*d %s|%%|%f") + _fmt_words(b"x" * 9) + [5, 42] + _fmt_words(b"") \
        + [struct.unpack("<Q", struct.pack("<d", 0.5))[0]]
    control, fmt, args = decode_printf(words)
    assert (control, fmt, args) == (0, b"%s=%*d %s|%%|%f", [b"x" * 9, 5, 42, b"", words[-1]])
    # Words running out: the arguments stop there, and so does the output.
    assert decode_printf([1] + _fmt_words(b"a%db%dc") + [7]) == (1, b"a%db%dc", [7])
    out: list = []
    service = PrintfService(stdout=out.append, stderr=lambda t: out.append(("err", t)))
    assert service([1] + _fmt_words(b"a%db%dc") + [7]) == 3 and out == [("err", "a7b")]
    assert service([4] + _fmt_words(b"never")) == -1 and len(out) == 1  # unknown control bits
    assert service([0] + _fmt_words(b"%c%c") + [0xC3, 0xA9]) == 2 and out[-1] == "é"


def test_decode_printf_string_advance_of_rocm6_clr():
    """``string_advance="printed"`` reads as ROCm 6.x's clr does (rocclr/device/devhcprintf.cpp,
    consumeCstring, tag rocm-6.2.2: ⌈(characters printed + 1) / 8⌉ words past a %s): a width or
    precision on a %s sent to the host misplaces the next argument, the two examples of issue 20.
    A plain %s (all kcompiler's device code sends for a device string) reads the same either way."""
    def message(fmt: bytes, s: bytes, value: int) -> list[int]:
        return [0] + _fmt_words(fmt) + _fmt_words(s) + [value]

    def text(words: list[int], mode: str) -> bytes:
        _, fmt, args = decode_printf(words, mode)
        return format_c_bytes(fmt, args)

    wide = message(b"[%-8s|%d]\n", b"ab", 77)  # "ab" is one word; 8 characters printed: 2 words
    assert text(wide, "length") == b"[ab      |77]\n"
    assert text(wide, "printed") == b"[ab      |"  # the 77 is skipped and the words run out
    cut = message(b"[%.2s|%d]\n", b"abcdefghijklmnopq", 1)  # 3 words; 2 characters printed: 1 word
    assert text(cut, "length") == b"[ab|1]\n"
    garbage = int.from_bytes(b"ijklmnop", "little") & 0xFFFF_FFFF
    assert text(cut, "printed") == b"[ab|%d]\n" % (garbage - (1 << 32) if garbage >> 31 else garbage)
    star = [0] + _fmt_words(b"%*s|%d") + [10] + _fmt_words(b"abc") + [5]
    assert text(star, "length") == b"       abc|5" and text(star, "printed") == b"       abc|"
    for words in (message(b"<%s|%d>", b"abcdefghijklmnopq", -3), message(b"%s%s", b"", 0)):
        assert decode_printf(words, "printed") == decode_printf(words, "length")
    with pytest.raises(ValueError):
        decode_printf(wide, "strlen")


def test_string_advance_switch(monkeypatch):
    monkeypatch.delenv("KC_HOSTCALL_STRING_ADVANCE", raising=False)
    assert PrintfService().string_advance == "length"
    monkeypatch.setenv("KC_HOSTCALL_STRING_ADVANCE", "printed")
    assert PrintfService().string_advance == "printed"
    assert HostcallListener(string_advance="length").printf.string_advance == "length"
    out: list = []
    service = PrintfService(stdout=out.append)
    assert service([0] + _fmt_words(b"[%-8s|%d]") + _fmt_words(b"a") + [7]) == 10 and out == ["[a       |"]
    monkeypatch.setenv("KC_HOSTCALL_STRING_ADVANCE", "chars")
    with pytest.raises(ValueError, match="KC_HOSTCALL_STRING_ADVANCE"):
        PrintfService()


# --- errors and shutdown -----------------------------------------------------------------------------

def test_unknown_service_and_bad_message_do_not_hang_the_device(make_buffer, capsys):
    buf = make_buffer(4)
    listener = HostcallListener([buf])
    wave = SimulatedWave(buf, 64)
    with listener:
        assert wave.hostcall(77, {3: [1, 2, 3, 4, 5, 6, 7, 8]}) == {3: (1, 2)}  # released untouched
        wave.hostcall(SERVICE_PRINTF, {0: [(5 << 8) | DESC_END, 0, 0, 0, 0, 0, 0, 0]})
    assert any("service 77" in e for e in listener.errors)
    assert any("never begun" in e for e in listener.errors)
    assert "kcompiler: hostcall" in capsys.readouterr().err
    assert buf.free_packets() == 4


def test_stop_serves_what_is_pending_and_restart_works(make_buffer):
    buf = make_buffer(4)
    log: list = []
    listener = HostcallListener([buf], services={ECHO: _echo(log)})
    listener.start()
    listener.start()  # already running: nothing happens
    assert listener.running
    listener.stop()
    assert not listener.running
    wave = SimulatedWave(buf, 32)
    results: dict = {}
    t = threading.Thread(target=lambda: results.update(wave.hostcall(ECHO, {2: [0, 1, 2, 3, 4, 0, 0, 0]})))
    t.start()
    while not buf.pending():
        t.join(0.001)
    listener.stop()  # not running: serves the pending packet
    t.join(10)
    assert results == {2: (6, 4 ^ 0xABCDEF)}
    with listener:
        assert wave.hostcall(ECHO, {0: [0, 5, 5, 5, 0, 0, 0, 0]}) == {0: (15, 0xABCDEF)}
    listener.remove_buffer(buf)
    assert listener.buffers == [] and len(log) == 2
