"""printf="buffered" (HIP's buffered printf: records in a buffer, printed after the kernel; issue 20
item 5) and where printf output goes (item 3: C stdio flushed after printing launches,
kc.capture_printf).

On the CPU target every conformance case goes through the device code (stdlib/printf_buffer.kc)
and the host reader (runtime/printf_buffer.py) and is compared with libc's snprintf; a full buffer
reports exactly the lines it lost. On AMD only the code object is checked (no AMD GPU exists
here): ``hidden_printf_buffer`` at byte 72 of the v5 implicit arguments, the formats in
``amdhsa.printf`` as clang writes them, and, where clang-19 is installed, every compared field
equal to clang's ``-mprintf-kind=buffered`` code object. The NVIDIA tests are in
tests/runtime/test_printf_buffered_gpu.py."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kcompiler.backends.target import CompileOptions
from kcompiler.frontend.buffered_printf import format_hash
from kcompiler.pipeline import compile_source_to, resolve_target
from kcompiler.runtime.codeobject import read_code_object
from kcompiler.runtime.printf_buffer import (PrintfBuffer, format_table, lost_message,
                                             parse_amdhsa_printf, read_format_table, record_words)

from ..paths import ROOT as REPO
from .printf_util import (CASES, FIELD_CASES, _buffered_stdio_env, cases_arrays, check_cases, check_ids, run,
                          run_every, split_source)

BUFFERED = {"printf": "buffered"}


# --- the CPU target, against snprintf -------------------------------------------------------------------

@pytest.mark.slow(sample=1)  # one warp size by default (25 s each on CI's 2 cores); -m slow: both
@pytest.mark.parametrize("warp", [32, 64])
def test_cpu_buffered_printf_matches_snprintf(tmp_path, warp):
    """Every case of the conformance list (CASES) and the %s-field cases, printed through the printf
    buffer on the CPU target, equals libc's snprintf (wave32 and wave64)."""
    assert len(CASES) >= 200
    cases = CASES + FIELD_CASES
    src, kernels = split_source(cases=cases)
    out = run(tmp_path, src, kernels, cases_arrays(cases), "cpu", options=BUFFERED,
              arch="host-w64" if warp == 64 else None)
    check_cases(out, cases)


def test_cpu_overflow_is_reported_exactly():
    """A buffer too small for 5,000 lines: the lines that fit are printed, each once, and stderr
    says how many were lost — exactly the rest — and how big the buffer is. A record of ``id %d\\n``
    is 20 bytes (control word, hash, one argument), so 4 KiB holds (4096 - 16) // 20 = 204 of them."""
    out, err = run_every(5000, buffer="4K")
    printed, lost = check_ids(out, err, 5000, 4096)
    assert printed == (4096 - 16) // 20 and lost == 5000 - printed


def test_cpu_buffer_large_enough_loses_nothing():
    out, err = run_every(5000, buffer="1M")
    assert check_ids(out, err, 5000, 1 << 20) == (5000, 0)


def test_buffer_size_setting(monkeypatch):
    from kcompiler.runtime.printf_buffer import DEFAULT_BYTES, buffer_bytes_from_env
    monkeypatch.delenv("KC_PRINTF_BUFFER", raising=False)
    assert buffer_bytes_from_env() == DEFAULT_BYTES == 4 << 20  # clr's: 4096 x 1024
    for text, n in (("64M", 64 << 20), ("4096", 4096), ("2k", 2048), ("1GiB", 1 << 30)):
        monkeypatch.setenv("KC_PRINTF_BUFFER", text)
        assert buffer_bytes_from_env() == n
    for bad in ("lots", "4G", "8", "-1"):
        monkeypatch.setenv("KC_PRINTF_BUFFER", bad)
        with pytest.raises(ValueError, match="KC_PRINTF_BUFFER"):
            buffer_bytes_from_env()


# --- the records, read as clr reads them -------------------------------------------------------------

def test_reader_reads_clangs_record_layout():
    """A buffer holding records laid out as clang 19's -mprintf-kind=buffered code writes them (its
    IR for ``printf("t %d x %f %s\\n", tid, (double)x, s)``: u32 size << 2 | 2, the u64 MD5 low
    word, i64 zero-extended, double, the string memcpy'd at its length and padded to 8), then a
    non-constant-format record (control bit 1 clear: the format inline), prints what printf would."""
    fmt = "t %d x %f %s\n"
    s = b"abcdefghij\0"
    padded = s + b"\0" * (-len(s) % 8)
    body = struct.pack("<QQd", format_hash(fmt), 7, 2.5) + padded
    rec1 = struct.pack("<I", (4 + len(body)) << 2 | 2) + body
    inline = b"[%s|%ld]\0"
    inline += b"\0" * (-len(inline) % 8)
    body2 = inline + b"xy\0\0\0\0\0\0" + struct.pack("<q", -5)
    rec2 = struct.pack("<I", (4 + len(body2)) << 2) + body2
    pb = PrintfBuffer.in_host_memory(256)
    pb.write(8, rec1 + rec2)
    pb.write(0, struct.pack("<I", len(rec1 + rec2)))
    lines: list[str] = []
    from kcompiler.runtime.hostcall import PrintfService
    assert pb.drain({format_hash(fmt): fmt.encode()}, PrintfService(stdout=lines.append)) == (2, 0)
    assert lines == ["t 7 x 2.500000 abcdefghij\n", "[xy|-5]"]
    assert pb.take() == (b"", 0)  # drained and reset


def test_reader_reports_an_unknown_hash_and_a_corrupt_record():
    pb = PrintfBuffer.in_host_memory(128)
    bad = struct.pack("<IQ", 12 << 2 | 2, 12345)
    pb.write(8, bad + struct.pack("<I", 200 << 2))
    pb.write(0, struct.pack("<I", len(bad) + 4))
    errors: list[str] = []
    assert pb.drain({}, lambda words: 0, errors.append) == (0, 0)
    assert "format hash 0x3039" in errors[0] and "corrupt" in errors[1]


def test_record_words_are_a_hostcall_printf_message():
    """The words handed to the printf service: the stream bit, the format padded to 8, the arguments."""
    fmt = b"%d %s"
    words = record_words(3, struct.pack("<QQ", 99, 5) + b"ab\0\0\0\0\0\0", {99: fmt})
    assert words == [1, int.from_bytes(b"%d %s\0\0\0", "little"), 5, int.from_bytes(b"ab", "little")]
    assert record_words(2, struct.pack("<Q", 98), {99: fmt}) is None


def test_format_table_round_trip():
    formats = {format_hash("a %d\n"): "a %d\n", format_hash("é %s"): "é %s"}
    data = format_table(formats)
    assert read_format_table(lambda off, n: data[off:off + n]) == {h: f.encode() for h, f in formats.items()}
    with pytest.raises(ValueError):
        read_format_table(lambda off, n: b"\0" * n)


def test_format_hash_is_llvms():
    """The low 64 bits of the MD5, little-endian: clang 19.1.7 wrote c3111cb4c153918b for this
    format (its llvm.printf.fmts entry, seen when this was written)."""
    assert format_hash("t %d x %f %s\n") == 0xc3111cb4c153918b
    assert parse_amdhsa_printf(["0:0:c3111cb4c153918b,t %d: %s\n", "1:2:4:4:legacy"]) == \
        {0xc3111cb4c153918b: b"t %d: %s\n"}


# --- AMD code objects ----------------------------------------------------------------------------------

AMD_SRC = """
kernel loud(x: ptr<f32>, s: ptr<u8>) {
    printf("t %d x %f %s\\n", thread_id.x, x[thread_id.x], s);
    printf("[%-6s|%d]\\n", s, 3);
}
kernel quiet(x: ptr<f32>) {
    x[thread_id.x] = 1.0;
}
"""


@pytest.mark.parametrize("opt_level", [3, 0])
@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_buffered_code_object(arch, opt_level):
    """The printing kernel lists hidden_printf_buffer at byte 72 of its implicit arguments (where
    std.printf_buffer reads it, and ockl's __printf_alloc: u64 index 9) and no hostcall buffer (so
    the HIP runtime needs no PCIe atomics); the code object's amdhsa.printf has each format as clang
    writes it, the host format of a %s field being a plain %s."""
    t = resolve_target("amdgcn", arch, **BUFFERED)
    co = read_code_object(compile_source_to(AMD_SRC, "k.kc", "obj", t,
                                            options=CompileOptions(opt_level=opt_level)))
    loud = co.kernel("loud")
    hidden = {a.value_kind: a.offset for a in loud.hidden_args}
    assert hidden["hidden_printf_buffer"] - hidden["hidden_block_count_x"] == 72
    assert "hidden_hostcall_buffer" not in hidden
    assert sorted(co.metadata["amdhsa.printf"]) == sorted(
        f"0:0:{format_hash(f):x},{f}" for f in ("t %d x %f %s\n", "[%s|%d]\n"))
    assert not any(a.value_kind == "hidden_hostcall_buffer" for a in co.kernel("quiet").args)


def test_hostcall_mode_has_no_printf_metadata():
    co = read_code_object(compile_source_to(AMD_SRC, "k.kc", "obj", "amdgcn", "gfx942"))
    assert "amdhsa.printf" not in co.metadata
    assert "hidden_printf_buffer" not in {a.value_kind for a in co.kernel("loud").hidden_args}


def test_bad_printf_option_is_refused():
    with pytest.raises(ValueError, match="'hostcall' or 'buffered'"):
        resolve_target("cpu", None, printf="vprintf")
    with pytest.raises(ValueError, match="'buffered'"):
        resolve_target("nvptx", "sm_90", printf="fifo")


HIP_BUFFERED = r"""
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
typedef unsigned long ulong;
typedef __attribute__((address_space(4))) const ulong cword;
extern "C" __device__ int printf(const char*, ...);
// A stand-in for ockl's __printf_alloc (ROCm-Device-Libs opencl/src/misc/printf.cl): it reads the
// buffer where ockl does (u64 index 9 of the implicit arguments, code object v5).
extern "C" __device__ __attribute__((address_space(1))) char* __printf_alloc(unsigned n) {
  char* p = (char*)((cword*)__builtin_amdgcn_implicitarg_ptr())[9];
  return (__attribute__((address_space(1))) char*)(p + n);
}
extern "C" {
__global__ void loud(float* x, const char* s) {
  unsigned t = __builtin_amdgcn_workitem_id_x();
  printf("t %d x %f %s\n", (int)t, (double)x[t], s);
}
__global__ void quiet(float* x) { x[__builtin_amdgcn_workitem_id_x()] = 1.0f; }
}
"""

KC_BUFFERED = """
kernel loud(x: ptr<f32>, s: ptr<u8>) {
    printf("t %d x %f %s\\n", thread_id.x, x[thread_id.x], s);
}
kernel quiet(x: ptr<f32>) {
    x[thread_id.x] = 1.0;
}
"""


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_buffered_metadata_equals_clangs(arch, tmp_path):
    """clang (-mprintf-kind=buffered -O2, code object v5) and kcompiler (printf="buffered") give the
    same metadata in every field tests/backends/amdgcn/test_amd_clang_compare.py compares, for a printing and a
    non-printing kernel, and the same amdhsa.printf."""
    from ..amd_clang import fields, find_clang

    clang = find_clang()
    if clang is None:
        pytest.skip("no clang with the AMDGPU backend and lld (apt-get install clang-19 lld-19)")
    src, out = tmp_path / "k.hip", tmp_path / "k.co"
    src.write_text(HIP_BUFFERED)
    r = subprocess.run([clang, "-x", "hip", "--cuda-device-only", "--no-gpu-bundle-output",
                        f"--offload-arch={arch}", "-nogpulib", "-nogpuinc", "-O2", "-mcode-object-version=5",
                        "-mprintf-kind=buffered", "-c", "-o", str(out), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    theirs = read_code_object(out.read_bytes())
    ours = read_code_object(compile_source_to(KC_BUFFERED, "k.kc", "obj",
                                              resolve_target("amdgcn", arch, **BUFFERED)))
    assert theirs.metadata["amdhsa.printf"] == ours.metadata["amdhsa.printf"]
    for name in ("loud", "quiet"):
        a, b = fields(theirs.kernel(name)), fields(ours.kernel(name))
        assert {f: (a[f], b[f]) for f in a if a[f] != b[f]} == {}, name
    assert ("hidden_printf_buffer", 88) in fields(ours.kernel("loud"))["hidden_args"]


# --- where the output goes (item 3) -----------------------------------------------------------------

_EXIT_CHILD = """
import ctypes, ctypes.util, os, sys
sys.path.insert(0, {repo!r})
import numpy as np
import kcompiler as kc
libc = ctypes.CDLL(ctypes.util.find_library("c"))
# What the CUDA driver's vprintf and the HIP runtime do: print through C stdio's stdout.
libc.printf(b"from C stdio\\n")
mod = kc.compile('kernel k() {{ printf("kernel %d\\\\n", thread_id.x); }}', target="cpu",
                 target_options={{"printf": {mode!r}}})
mod.k[1, 3]()
os._exit(0)
"""


@pytest.mark.parametrize("mode", ["hostcall", "buffered"])
def test_output_survives_os_exit_into_a_pipe(mode):
    """A process whose stdout is a pipe launches a printing kernel and leaves with os._exit: what C
    stdio held (as vprintf and the HIP runtime leave it) and the kernel's lines are all there —
    the launch of a printing kernel flushes C stdio (before that, "from C stdio" was lost)."""
    r = subprocess.run([sys.executable, "-c", _EXIT_CHILD.format(repo=str(REPO), mode=mode)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600,
                       env=_buffered_stdio_env())
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    lines = r.stdout.decode().splitlines()
    assert sorted(lines) == ["from C stdio", "kernel 0", "kernel 1", "kernel 2"], lines
    assert lines[0] == "from C stdio"


PRINTS = """
kernel hello(x: ptr<f32>) {
    printf("hello %d %.1f\\n", thread_id.x, x[thread_id.x]);
}
"""


@pytest.mark.parametrize("mode", ["hostcall", "buffered"])
def test_capture_printf_returns_the_lines(mode, capsys):
    """kc.capture_printf(echo=False) hands back the kernel's lines, and C-level output of the block
    too; nothing reaches sys.stdout. With echo (the default) the lines are replayed into sys.stdout,
    where pytest's capsys sees them."""
    import ctypes
    import ctypes.util

    import kcompiler as kc

    pytest.importorskip("wurlitzer")
    mod = kc.compile(PRINTS, target="cpu", target_options={"printf": mode})
    x = np.arange(4, dtype=np.float32)
    with kc.capture_printf(echo=False) as out:
        mod.hello[1, 4](x)
        ctypes.CDLL(ctypes.util.find_library("c")).printf(b"C side\n")
    assert sorted(out.lines) == ["C side"] + [f"hello {i} {i}.0" for i in range(4)]
    assert out.lines[0] == "C side"  # fd 1's lines first
    assert capsys.readouterr().out == ""
    with kc.capture_printf() as out2:
        mod.hello[1, 2](x)
    assert sorted(out2.lines) == ["hello 0 0.0", "hello 1 1.0"]
    assert capsys.readouterr().out == out2.text


def test_kernel_lines_reach_capfd(capfd):
    """Under pytest's capfd (fd-level capture) a printing kernel's lines arrive, in buffered mode."""
    import kcompiler as kc

    mod = kc.compile(PRINTS, target="cpu", target_options=BUFFERED)
    mod.hello[1, 2](np.arange(2, dtype=np.float32))
    assert capfd.readouterr().out.splitlines() == ["hello 0 0.0", "hello 1 1.0"]


def test_kc_run_printf_buffered(tmp_path):
    """``kc run --printf buffered``: the kernel's lines on stdout; a too-small KC_PRINTF_BUFFER says
    how many were lost on stderr and still exits 0."""
    f = tmp_path / "h.kc"
    f.write_text(PRINTS)
    cmd = [sys.executable, "-m", "kcompiler.cli", "run", str(f), "-k", "hello", "-g", "1", "-b", "3",
           "--target", "cpu", "--printf", "buffered", "-o", "-", "x=arange:f32[3]"]
    env = {**os.environ, "KC_CACHE": "0", "PYTHONPATH": str(REPO)}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["hello 0 0.0", "hello 1 1.0", "hello 2 2.0"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env={**env, "KC_PRINTF_BUFFER": "64"})
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 1  # 28-byte records: one fits in 64 - 16 bytes
    assert lost_message(2, 64) in r.stderr


def test_readme_capture_printf_example():
    """README's capture_printf example, run as written (on the CPU target here)."""
    readme = (REPO / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in readme.split("```python\n")[1:]]
    block = next(b for b in blocks if "capture_printf" in b)
    pytest.importorskip("wurlitzer")
    exec(compile(textwrap.dedent(block), "README.md", "exec"), {})
