"""Helpers of the printf tests (test_printf.py, test_printf_hostcall.py, test_printf_buffered.py,
test_printf_buffered_gpu.py): the conformance cases (CASES, from two printf test suites, and the
%s-field cases FIELD_CASES), the kernel that prints them and its arrays, the C library's snprintf as
the oracle and the check of a run's lines against it; launching a printing kernel in a fresh process
(run, split_source's smaller kernels; buffered printf's run_every and check_ids of a million ids) and
the environment of a child whose C stdio buffers a piped stdout."""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import subprocess
import sys

import numpy as np

from kcompiler.runtime.printf_buffer import lost_message

from ..paths import ROOT as REPO


# --- the conformance cases and the oracle (test_printf.py) ---------------------------------------------

# (suite, format, [(type, value), ...]). Types: i8 i16 i32 i64 u8 u16 u32 u64 (integers, passed in that
# kernel-language type), f16 f32 f64 (floats, likewise), str (a device string, ptr<u8>), lit (a string
# literal, folded into the format by the compiler), ptr (a pointer, %p).
M, E = "mpaland", "eyalroz"
CASES = [
    # mpaland: space flag, + flag, 0 flag, - flag, # flag
    (M, "% d", [("i32", 42)]), (M, "% d", [("i32", -42)]), (M, "% 5d", [("i32", 42)]),
    (M, "% 5d", [("i32", -42)]), (M, "% 15d", [("i32", 42)]), (M, "% 15d", [("i32", -42)]),
    (M, "% 15.3f", [("f64", -42.987)]), (M, "% 15.3f", [("f64", 42.987)]), (M, "% d", [("i32", 1024)]),
    (M, "% i", [("i32", -1024)]), (M, "%+d", [("i32", 42)]), (M, "%+d", [("i32", -42)]),
    (M, "%+5d", [("i32", 42)]), (M, "%+15d", [("i32", -42)]), (M, "%+i", [("i32", 1024)]),
    (M, "%+.0d", [("i32", 0)]), (M, "%0d", [("i32", 42)]), (M, "%0ld", [("i64", 42)]),
    (M, "%05d", [("i32", -42)]), (M, "%015d", [("i32", 42)]), (M, "%015.2f", [("f64", 42.1234)]),
    (M, "%015.3f", [("f64", 42.9876)]), (M, "%015.5f", [("f64", -42.9876)]), (M, "%-d", [("i32", -42)]),
    (M, "%-5d", [("i32", 42)]), (M, "%-15d", [("i32", -42)]), (M, "%-05d", [("i32", -42)]),
    (M, "%-015d", [("i32", 42)]), (M, "%0-5d", [("i32", 42)]), (M, "%0-15d", [("i32", -42)]),
    (M, "%#.0x", [("u32", 0)]), (M, "%#.8x", [("u32", 0x614E)]),
    # mpaland: specifier, width, width 20, width *20, width -20
    (M, "Hello testing", []), (M, "%s", [("str", b"Hello testing")]), (M, "%d", [("i32", -1024)]),
    (M, "%i", [("i32", 1024)]), (M, "%u", [("u32", 4294966272)]), (M, "%o", [("u32", 511)]),
    (M, "%o", [("u32", 4294966785)]), (M, "%x", [("u32", 305441741)]), (M, "%X", [("u32", 3989525555)]),
    (M, "%%", []), (M, "%1s", [("str", b"Hello testing")]), (M, "%1d", [("i32", -1024)]),
    (M, "%1u", [("u32", 4294966272)]), (M, "%1x", [("u32", 3989525555)]), (M, "%1c", [("i32", ord("x"))]),
    (M, "%20s", [("str", b"Hello")]), (M, "%20d", [("i32", -1024)]), (M, "%20u", [("u32", 4294966272)]),
    (M, "%20o", [("u32", 4294966785)]), (M, "%20X", [("u32", 305441741)]), (M, "%20c", [("i32", ord("x"))]),
    (M, "%*s", [("i32", 20), ("str", b"Hello")]), (M, "%*d", [("i32", 20), ("i32", 1024)]),
    (M, "%*u", [("i32", 20), ("u32", 4294966272)]), (M, "%*x", [("i32", 20), ("u32", 3989525555)]),
    (M, "%*c", [("i32", 20), ("i32", ord("x"))]), (M, "%-20s", [("lit", b"Hello")]),
    (M, "%-20d", [("i32", 1024)]), (M, "%-20.4f", [("f64", 1024.1234)]), (M, "%-20u", [("u32", 4294966272)]),
    (M, "%-20o", [("u32", 511)]), (M, "%-20x", [("u32", 3989525555)]), (M, "%-20c", [("i32", ord("x"))]),
    (M, "|%5d| |%-2d| |%5d|", [("i32", 9)] * 3), (M, "|%5d| |%-2d| |%5d|", [("i32", 10)] * 3),
    (M, "|%5d| |%-12d| |%5d|", [("i32", 9)] * 3),
    # mpaland: padding 20, .20, #020, #20, 20.5
    (M, "%020d", [("i32", -1024)]), (M, "%020u", [("u32", 4294966272)]), (M, "%020o", [("u32", 511)]),
    (M, "%020x", [("u32", 305441741)]), (M, "%020X", [("u32", 3989525555)]), (M, "%.20d", [("i32", -1024)]),
    (M, "%.20u", [("u32", 4294966272)]), (M, "%.20o", [("u32", 4294966785)]), (M, "%.20x", [("u32", 305441741)]),
    (M, "%#020o", [("u32", 511)]), (M, "%#020x", [("u32", 305441741)]), (M, "%#020X", [("u32", 3989525555)]),
    (M, "%#20o", [("u32", 4294966785)]), (M, "%#20x", [("u32", 3989525555)]), (M, "%#20X", [("u32", 305441741)]),
    (M, "%20.5d", [("i32", -1024)]), (M, "%20.5u", [("u32", 1024)]), (M, "%20.5o", [("u32", 511)]),
    (M, "%20.10x", [("u32", 3989525555)]), (M, "%20.5X", [("u32", 305441741)]),
    # mpaland: length
    (M, "%.0s", [("str", b"Hello testing")]), (M, "%20.0s", [("str", b"Hello testing")]),
    (M, "%.s", [("str", b"Hello testing")]), (M, "%20.s", [("lit", b"Hello testing")]),
    (M, "%20.0d", [("i32", 1024)]), (M, "%20.d", [("i32", 0)]), (M, "%20.i", [("i32", -1024)]),
    (M, "%20.u", [("u32", 0)]), (M, "%20.o", [("u32", 0)]), (M, "%50.x", [("u32", 305441741)]),
    (M, "%50.x%10.u", [("u32", 305441741), ("u32", 12345)]), (M, "%20.X", [("u32", 0)]),
    (M, "%02.0u", [("u32", 0)]), (M, "%02.0d", [("i32", 0)]),
    # mpaland: float
    (M, "%.4f", [("f64", 3.1415354)]), (M, "%.3f", [("f64", 30343.1415354)]), (M, "%.0f", [("f64", 34.1415354)]),
    (M, "%.2f", [("f64", 42.8952)]), (M, "%.9f", [("f64", 42.8952)]), (M, "%.10f", [("f64", 42.895223)]),
    (M, "%.12f", [("f64", 42.89522312345678)]), (M, "%6.2f", [("f64", 42.8952)]), (M, "%+6.2f", [("f64", 42.8952)]),
    (M, "%+5.1f", [("f64", 42.9252)]), (M, "%f", [("f64", 42.5)]), (M, "%.1f", [("f64", 42.5)]),
    (M, "%f", [("f64", 42167.0)]), (M, "%.9f", [("f64", -12345.987654321)]), (M, "%.1f", [("f64", 3.999)]),
    (M, "%.0f", [("f64", 3.5)]), (M, "%.0f", [("f64", 3.49)]), (M, "%.1f", [("f64", 3.49)]),
    (M, "a%-5.1f", [("f64", 0.5)]), (M, "a%-5.1fend", [("f64", 0.5)]), (M, "%.1f", [("f64", 1e20)]),
    # mpaland: types
    (M, "%i", [("i32", 0)]), (M, "%i", [("i16", 32767)]), (M, "%i", [("i16", -32767)]),
    (M, "%li", [("i64", -2147483647)]), (M, "%li", [("i64", 2147483647)]), (M, "%lli", [("i64", 30)]),
    (M, "%lli", [("i64", -9223372036854775807)]), (M, "%lli", [("i64", 9223372036854775807)]),
    (M, "%lu", [("u64", 100000)]), (M, "%lu", [("u64", 0xFFFFFFFF)]), (M, "%llu", [("u64", 281474976710656)]),
    (M, "%llu", [("u64", 18446744073709551615)]), (M, "%zu", [("u64", 2147483647)]),
    (M, "%zd", [("i64", 2147483647)]), (M, "%zi", [("i64", -2147483647)]), (M, "%o", [("u32", 60000)]),
    (M, "%lo", [("i64", 12345678)]), (M, "%lx", [("i64", 0x12345678)]), (M, "%llx", [("u64", 0x1234567891234567)]),
    (M, "%lx", [("u64", 0xABCDEFAB)]), (M, "%lX", [("u64", 0xABCDEFAB)]), (M, "%c", [("u8", ord("v"))]),
    (M, "%cv", [("i8", ord("w"))]), (M, "%s", [("lit", b"A Test")]), (M, "%hhu", [("u32", 0xFFFF)]),
    (M, "%hu", [("u32", 0x123456)]), (M, "%s%hhi %hu", [("str", b"Test"), ("i32", 10000), ("u32", 0xFFFFFFFF)]),
    (M, "%tx", [("i64", 10)]), (M, "%ji", [("i64", -2147483647)]),
    # mpaland: pointer, misc
    (M, "%p", [("ptr", 0x1234)]), (M, "%p", [("ptr", 0x12345678)]),
    (M, "%p-%p", [("ptr", 0x12345678), ("ptr", 0x7EDCBA98)]), (M, "%p", [("ptr", 0xFFFFFFFF)]),
    (M, "%u%u%ctest%d %s", [("u32", 5), ("u32", 3000), ("i32", ord("a")), ("i32", -20), ("str", b"bit")]),
    (M, "%.3s", [("str", b"foobar")]), (M, "% .0d", [("i32", 0)]), (M, "%10.5d", [("i32", 4)]),
    (M, "%*sx", [("i32", -3), ("lit", b"hi")]), (M, "%*sx", [("i32", -3), ("str", b"hi")]),
    # eyalroz: padding of negative numbers, floats
    (E, "% 1d", [("i32", -5)]), (E, "% 4d", [("i32", -5)]), (E, "%03d", [("i32", -5)]),
    (E, "% 3.1f", [("f64", -5.0)]), (E, "% 5.1f", [("f64", -5.0)]), (E, "% 6.1g", [("f64", -5.0)]),
    (E, "% 6.1e", [("f64", -5.0)]), (E, "% 10.1e", [("f64", -5.0)]), (E, "%05.1f", [("f64", -5.0)]),
    (E, "%03.0f", [("f64", -5.0)]), (E, "%010.1e", [("f64", -5.0)]), (E, "%07.0E", [("f64", -5.0)]),
    (E, "%03.0g", [("f64", -5.0)]), (E, "%8f", [("f64", math.nan)]), (E, "%8f", [("f64", math.inf)]),
    (E, "%-8f", [("f64", -math.inf)]), (E, "%8e", [("f64", math.nan)]), (E, "%-8e", [("f64", -math.inf)]),
    (E, "%.10f", [("f64", 2147483647.0)]), (E, "%.10f", [("f64", 4294967296.0)]),
    (E, "%.10g", [("f64", 2147483648.0)]), (E, "%.10g", [("f64", 4294967295.0)]),
    (E, "%.0e", [("f64", 1.380651569e-23)]), (E, "%.1e", [("f64", 1.380651569e-23)]),
    (E, "%.5e", [("f64", 1.380651569e-23)]), (E, "%.11e", [("f64", 1.380651569e-23)]),
    (E, "%.0f", [("f64", 1.3)]), (E, "%.0f", [("f64", 1.55)]), (E, "%.1f", [("f64", 1.64)]),
    (E, "%020.15f", [("f64", 42477.37109375)]), (E, "%.0f", [("f64", 4.5)]),
    (E, "%.12f", [("f32", 42.89522312345678)]), (E, "%.12lf", [("f32", 42.89522312345678)]),
    (E, "%.12F", [("f64", 42.89522312345678)]), (E, "%.4g", [("f64", 0.5)]), (E, "%.4g", [("f64", 1.0)]),
    (E, "%G", [("f64", 12345.678)]), (E, "%.7G", [("f64", 12345.678)]), (E, "%.5G", [("f64", 123456789.0)]),
    (E, "%.6G", [("f64", 12345.0)]), (E, "%+12.4g", [("f64", 123456789.0)]), (E, "%.2G", [("f64", 0.001234)]),
    (E, "%+10.4G", [("f64", 0.001234)]), (E, "%+012.4g", [("f64", 0.00001234)]),
    (E, "%.3g", [("f64", -1.2345e-308)]), (E, "%+.3E", [("f64", 1.23e308)]), (E, "%.3e", [("f64", 9.9996)]),
    (E, "%g", [("f64", 0.0)]), (E, "%g", [("f64", -0.0)]), (E, "%+g", [("f64", 0.0)]), (E, "%+g", [("f64", -0.0)]),
    (E, "%.1g", [("f64", -40661.5)]), (E, "%#.1g", [("f64", -40661.5)]),
    (E, "%#.3g", [("f64", 99.998580932617187500)]), (E, "%#.3g", [("f32", 99.998580932617187500)]),
    (E, "%#.3lg", [("f64", 99.998580932617187500)]), (E, "%.10e", [("f64", 1.2345678901e-308)]),
    (E, "%e", [("f64", 48955.125)]), (E, "%.4e", [("f64", 92523.5)]), (E, "%.9e", [("f32", -83809.234375)]),
    (E, "%.9E", [("f64", -83809.234375)]), (E, "%.9le", [("f64", -83809.234375)]),
    (E, "%hhu", [("u8", 0xFF)]), (E, "%hu", [("u16", 0x1234)]),
    (E, "%s%hhi %hu", [("str", b"Test"), ("i8", 100), ("u16", 0xFFFF)]),
    # kcompiler's own: %a, f16 and bf16 promotions, %s of a literal in the middle of text
    ("kcompiler", "%a|%A", [("f64", 1.0), ("f64", 0.1)]), ("kcompiler", "%.3a", [("f64", -3.75)]),
    ("kcompiler", "%g %g", [("f16", 0.333251953125), ("bf16", 1.5)]),
    ("kcompiler", "<%s|%5s|%-5s>", [("lit", b"a%d"), ("str", b"b"), ("lit", b"c")]),
]


def _case_arrays(cases):
    """The kernel's arrays: every integer argument (as its i64 bit pattern), every float, and the
    bytes of every device string, with the source of each argument's expression."""
    ints, floats, strs, exprs = [], [], bytearray(), []
    for _, fmt, args in cases:
        row = []
        for t, v in args:
            if t in ("i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "ptr"):
                ints.append(v & 0xFFFF_FFFF_FFFF_FFFF)
                k = len(ints) - 1
                row.append(f"bitcast[ptr<u8>](u64(ints[{k}]))" if t == "ptr" else
                           (f"ints[{k}]" if t == "i64" else f"{t}(ints[{k}])"))
            elif t in ("f16", "bf16", "f32", "f64"):
                floats.append(v)
                row.append(f"fl[{len(floats) - 1}]" if t == "f64" else f"{t}(fl[{len(floats) - 1}])")
            elif t == "str":
                row.append(f"s + {len(strs)}")
                strs += v + b"\0"
            else:  # a literal
                row.append('"' + v.decode().replace("\\", "\\\\").replace('"', '\\"') + '"')
        exprs.append(row)
    ints_a = np.array([x - (1 << 64) if x >= 1 << 63 else x for x in ints] or [0], dtype=np.int64)
    return ints_a, np.array(floats or [0.0], dtype=np.float64), np.frombuffer(bytes(strs) or b"\0", np.uint8).copy(), exprs


def gpu_source(cases) -> str:
    """One kernel printing every case on its own line: @@<k>|<the case's text>."""
    _, _, _, exprs = _case_arrays(cases)
    lines = ["kernel cases(ints: ptr<i64>, fl: ptr<f64>, s: ptr<u8>) {"]
    for k, ((_, fmt, _), row) in enumerate(zip(cases, exprs)):
        text = fmt.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'    printf("@@{k}|{text}\\n"{"".join(", " + e for e in row)});')
    lines.append("}")
    return "\n".join(lines) + "\n"


_C_TYPES = {"i32": ctypes.c_int, "u32": ctypes.c_uint, "i64": ctypes.c_longlong, "u64": ctypes.c_ulonglong}


def _wrap(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def _round(t: str, v: float) -> float:
    if t == "f32":
        return float(np.float32(v))
    if t == "f16":
        return float(np.float16(v))
    if t == "bf16":
        import ml_dtypes
        return float(np.array(v, dtype=ml_dtypes.bfloat16).astype(np.float64))
    return v


def snprintf(fmt: str, args: list) -> str:
    """The C library's text for ``fmt`` with the case's arguments, each passed as C passes the kernel
    value after the default promotions (the oracle)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    cargs = []
    for t, v in args:
        if t in ("i8", "i16", "u8", "u16"):
            cargs.append(ctypes.c_int(_wrap(v, int(t[1:]), t[0] == "i")))
        elif t in _C_TYPES:
            cargs.append(_C_TYPES[t](_wrap(v, int(t[1:]), t[0] == "i")))
        elif t in ("f16", "bf16", "f32", "f64"):
            cargs.append(ctypes.c_double(_round(t, v)))
        elif t in ("str", "lit"):
            cargs.append(ctypes.c_char_p(v))
        else:
            cargs.append(ctypes.c_void_p(v))
    buf = ctypes.create_string_buffer(4096)
    n = libc.snprintf(buf, len(buf), fmt.encode(), *cargs)
    assert 0 <= n < len(buf)
    return buf.raw[:n].decode("utf-8", "surrogateescape")


# --- a printing kernel in a fresh process (test_printf_hostcall.py) ------------------------------------

_RUN_CHILD = """
import sys
import numpy as np
sys.path.insert(0, {repo!r})
import kcompiler as kc
arrays = np.load({arrays!r})
mod = kc.compile(open({src!r}).read(), target={target!r}, arch={arch!r}, path="k.kc",
                 target_options={options!r})
for mode in {modes!r}:
    if mode:  # the CPU target's listener reads %s as the named runtime does (see run())
        import kcompiler.runtime.cpu as cpu
        cpu.hostcall_buffer()
        cpu._hostcall[1].printf.string_advance = mode
        print("##" + mode, flush=True)
    for kernel in {kernels!r}:
        getattr(mod, kernel)[{grid}, {block}](*[arrays[k] if arrays[k].ndim else arrays[k][()]
                                                for k in {names!r}])
    sys.stdout.flush()
"""


def run(tmp_path, src: str, kernel: str | list[str], arrays: dict, target: str, grid=1, block=1,
        arch=None, options=None, modes=(None,)) -> str:
    """Launch ``kernel`` (or each of a list) in a fresh process; its stdout (every printf line,
    written by the hostcall listener before the printing wave is released). ``modes`` (CPU target):
    launch once per listed ``string_advance`` of the listener ("length", "printed"), each run's
    output after a line ``##<mode>``; None: once, as the listener is."""
    (tmp_path / "k.kc").write_text(src)
    np.savez(tmp_path / "arrays.npz", **arrays)
    script = _RUN_CHILD.format(repo=str(REPO), src=str(tmp_path / "k.kc"), arrays=str(tmp_path / "arrays.npz"),
                           target=target, arch=arch, options=options,
                           kernels=[kernel] if isinstance(kernel, str) else kernel, grid=grid,
                           block=block, names=list(arrays), modes=list(modes))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=900,
                       env={**os.environ, "KC_CACHE": "0"})
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-4000:]
    return r.stdout.decode("utf-8", "surrogateescape")


def check_cases(out: str, cases=None) -> None:
    cases = CASES if cases is None else cases
    got = {}
    for line in out.split("\n"):
        if line.startswith("@@"):
            k, _, text = line[2:].partition("|")
            assert int(k) not in got, f"case {k} printed twice"
            got[int(k)] = text
    assert sorted(got) == list(range(len(cases))), out[-2000:]
    bad = [f"{suite} {fmt!r} {args}: got {got[k]!r}, snprintf {snprintf(fmt, args)!r}"
           for k, (suite, fmt, args) in enumerate(cases) if got[k] != snprintf(fmt, args)]
    assert not bad, f"{len(bad)} of {len(cases)} differ:\n" + "\n".join(bad)


def cases_arrays(cases=None):
    ints, fl, s, _ = _case_arrays(CASES if cases is None else cases)
    return {"ints": ints, "fl": fl, "s": s}


def split_source(per_kernel: int = 8, cases=None) -> tuple[str, list[str]]:
    """The cases kernel cut into kernels of ``per_kernel`` printfs (cases_0, cases_1, ...), same
    arrays and same line numbering: one huge kernel takes the CPU target's coroutine passes
    superlinear time (the CPU conformance and buffered tests: 61 s in kernels of 24, 54 in kernels of 8,
    as in kernels of 4; the 14 %s-field cases are 5.7 MB of LLVM IR in one kernel)."""
    lines = gpu_source(CASES if cases is None else cases).splitlines()
    header, body = lines[0], lines[1:-1]
    out, names = [], []
    for k in range(0, len(body), per_kernel):
        name = f"cases_{k // per_kernel}"
        names.append(name)
        out += [header.replace("kernel cases(", f"kernel {name}("), *body[k:k + per_kernel], "}"]
    return "\n".join(out) + "\n", names


#: %s fields on device strings followed by other conversions (issue 20): widths (%Ns), left
#: justification (%-Ns), precisions (%.Ns), `*` widths and precisions (negative ones too), fields
#: wider than one 56-byte chunk of the message, strings cut before their end, empty strings, and a
#: string literal with a `*` width (sent from constant memory). On ROCm 6.x's clr a field formatted
#: by the host misplaces the next argument (tests/runtime/test_hostcall_host.py has the host-side reading).
S17 = b"abcdefghijklmnopq"
S64 = bytes(range(0x40, 0x80)).replace(b"%", b"#")
FIELD_CASES = [
    ("field", "[%-8s|%d]", [("str", b"ab"), ("i32", 77)]),
    ("field", "[%.2s|%d]", [("str", S17), ("i32", 1)]),
    ("field", "[%8s|%d|%s]", [("str", b"ab"), ("i32", 5), ("str", b"xyz")]),
    ("field", "[%.0s|%x|%.3s%.3s]", [("str", S17), ("u32", 0xBEEF), ("str", b"ab"), ("str", S17)]),
    ("field", "[%*.*s|%d]", [("i32", 10), ("i32", 3), ("str", b"abcdef"), ("i32", -9)]),
    ("field", "[%*.*s|%d]", [("i32", -10), ("i32", -1), ("str", b"abcdef"), ("i32", 4)]),
    ("field", "[%-*s|%c|%ld]", [("i32", 6), ("str", b"ab"), ("i32", ord("z")), ("i64", -(2 ** 40))]),
    ("field", "[%.*s|%f]", [("i32", 60), ("str", S64), ("f64", 2.5)]),
    ("field", "[%70s|%lu]", [("str", b"x"), ("u64", 2 ** 64 - 5)]),
    ("field", "[%-60.58s|%u|%s]", [("str", S64), ("u32", 7), ("str", S17)]),
    ("field", "[%5s|%-5s|%.1s|%d]", [("str", b""), ("str", b"abcdefg"), ("str", b""), ("i32", 8)]),
    ("field", "[%-3.9s|%e|%p]", [("str", S17), ("f64", -1.25e-7), ("ptr", 0x1234)]),
    ("field", "[%*s|%*s|%d]", [("i32", 9), ("lit", b"lit"), ("i32", -4), ("str", b"dv"), ("i32", 6)]),
    ("field", "[%.*s|%o]", [("i32", 0), ("str", S17), ("u32", 8)]),
]


# --- buffered printf (test_printf_buffered.py) ---------------------------------------------------------

EVERY = """
kernel every(n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        printf("id %d\\n", i);
    }
}
"""

_EVERY_CHILD = """
import sys
sys.path.insert(0, {repo!r})
import numpy as np
import kcompiler as kc
mod = kc.compile({src!r}, target={target!r}, target_options={{"printf": "buffered"}})
n = {n}
mod.every[(n + 255) // 256, 256](np.int32(n))
mod.device.synchronize()
"""


def run_every(n: int, target: str = "cpu", buffer: str | None = None) -> tuple[str, str]:
    """``every`` with ``n`` threads in a fresh process (KC_PRINTF_BUFFER=``buffer``): its stdout and
    stderr."""
    env = {**os.environ, "KC_CACHE": "0"}
    env.pop("KC_PRINTF_BUFFER", None)
    if buffer is not None:
        env["KC_PRINTF_BUFFER"] = buffer
    r = subprocess.run([sys.executable, "-c", _EVERY_CHILD.format(repo=str(REPO), src=EVERY, target=target, n=n)],
                       capture_output=True, timeout=900, env=env)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    return r.stdout.decode(), r.stderr.decode()


def check_ids(out: str, err: str, n: int, capacity: int) -> tuple[int, int]:
    """Each printed line is ``id I`` with a distinct I < n, and printed + the loss reported on
    stderr = n; a loss is reported once, with the buffer's size. Returns (printed, lost)."""
    ids = [int(line.split()[1]) for line in out.splitlines()]
    assert all(line.startswith("id ") for line in out.splitlines())
    assert len(set(ids)) == len(ids) and all(0 <= i < n for i in ids)
    lost = n - len(ids)
    if lost:
        assert err == lost_message(lost, capacity), err
    else:
        assert err == "", err
    return len(ids), lost


def _buffered_stdio_env() -> dict:
    """The environment of a child whose C stdio buffers a piped stdout, as it does by default:
    without PYTHONUNBUFFERED, which also makes CPython turn C stdio's buffering off."""
    env = {**os.environ, "KC_CACHE": "0"}
    env.pop("PYTHONUNBUFFERED", None)
    return env
