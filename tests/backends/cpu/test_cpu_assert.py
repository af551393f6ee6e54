"""Device ``assert(cond, "format", args...)`` (issue 22): on the CPU target a failed assert prints
one line (location, kernel, block, thread, condition, formatted message), stops the launch and
raises DeviceAssertionError with the same text; ``release`` compiles asserts out; bad asserts are
located errors. The PTX assembles and the AMDGCN code traps; the H100 test runs in a subprocess,
since a failed assert leaves the CUDA context unusable."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to
from kcompiler.runtime.device import DeviceAssertionError, LaunchError
from tests.ptxas_util import needs_ptxas, ptxas

SRC = """\
fn check_index(i: i32, n: i32) {
    assert(i <= n, "helper: i = %d", i);
}

kernel scale(x: ptr<f32>, n: i32, bad: i32) {
    let i = i32(block_id.x * block_dim.x + thread_id.x);
    assert(i != bad, "i = %d, x[i] = %f, n = %u", i, x[i], u32(n));
    check_index(i, n);
    x[i] = x[i] * 2.0;
}

kernel bare(x: ptr<f32>) {
    assert(x[thread_id.x] > 0.0);
}
"""


def _mod(**options):
    return kc.compile(SRC, target="cpu", path="scale.kc", **options)


def test_passing_asserts_change_nothing(capsys):
    x = np.arange(16, dtype=np.float32)
    _mod().scale[2, 8](x, 16, -1)
    np.testing.assert_array_equal(x, np.arange(16, dtype=np.float32) * 2)
    assert capsys.readouterr().out == ""


def test_failed_assert_prints_and_raises_the_same_line(capsys):
    """Thread 3 of block 1 fails: the line names the kernel, file:line:col, the block and thread,
    the condition as written and the formatted message; the exception has the same text."""
    x = np.arange(16, dtype=np.float32) + 0.5
    with pytest.raises(DeviceAssertionError) as e:
        _mod().scale[2, 8](x, 16, 11)
    line = ("scale.kc:7:5: kernel 'scale': block (1,0,0), thread (3,0,0): assertion `i != bad` failed: "
            "i = 11, x[i] = 11.500000, n = 16")
    assert str(e.value) == line
    assert line in capsys.readouterr().out.splitlines()
    assert isinstance(e.value, LaunchError)


def test_assert_in_a_device_function_names_fn_and_kernel(capsys):
    x = np.ones(8, np.float32)
    with pytest.raises(DeviceAssertionError) as e:
        _mod().scale[1, 8](x, 5, -1)  # threads 6 and 7 fail check_index
    text = str(e.value)
    assert text.startswith("kernel 'scale': scale.kc:2:5: fn 'check_index': block (0,0,0), thread (")
    assert "assertion `i <= n` failed: helper: i = " in text
    out = capsys.readouterr().out
    assert "thread (6,0,0): assertion `i <= n` failed: helper: i = 6" in out


def test_assert_without_message(capsys):
    x = np.ones(4, np.float32)
    x[2] = -1
    with pytest.raises(DeviceAssertionError, match=r"^scale\.kc:13:5: kernel 'bare': block \(0,0,0\), "
                                                   r"thread \(2,0,0\): assertion `x\[thread_id\.x\] > 0\.0` "
                                                   r"failed$"):
        _mod().bare[1, 4](x)


def test_failed_assert_under_buffered_printf(capsys):
    """printf="buffered" prints after the launch: the exception names the place and the thread, and
    the line is printed all the same."""
    mod = kc.compile(SRC, target="cpu", path="scale.kc", target_options={"printf": "buffered"})
    with pytest.raises(DeviceAssertionError, match=r"^kernel 'scale': device assertion failed at scale\.kc:7:5, "
                                                   r"thread \(3,0,0\) block \(1,0,0\); see the printed message$"):
        mod.scale[2, 8](np.ones(16, np.float32), 16, 11)
    assert ("scale.kc:7:5: kernel 'scale': block (1,0,0), thread (3,0,0): assertion `i != bad` failed: i = 11, "
            "x[i] = 1.000000, n = 16") in capsys.readouterr().out.splitlines()


def test_release_compiles_asserts_out(capsys):
    """``release`` (C's NDEBUG): the failing launch runs to its end, and the IR holds no trap and no
    print."""
    x = np.ones(8, np.float32)
    _mod(release=True).scale[1, 8](x, 8, 3)
    np.testing.assert_array_equal(x, np.full(8, 2, np.float32))
    assert capsys.readouterr().out == ""
    for release in (False, True):
        ir = compile_source_to(SRC, "scale.kc", "ir", "cpu", kernel="scale",
                               options=kc.CompileOptions(release=release))
        assert ("trap" in ir) is not release
        assert ("hostcall" in ir) is not release


def test_release_option_is_validated():
    with pytest.raises(ValueError, match="release must be True or False"):
        kc.CompileOptions(release=1)


@pytest.mark.parametrize("release", [False, True])
@pytest.mark.parametrize("body, message, col", [
    ("assert(i, \"x\");", "assert's condition must be bool, found i32", 12),
    ("assert(1.5);", "assert's condition must be bool, found float literal", 12),
    ("let m = \"x\"; assert(i > 0, m);", "assert's message must be a string literal", 32),
    ("assert(i > 0, \"i = %d\");", "format expects 1 argument, got 0", 5),
    ("assert(i > 0, \"i = %d\", 1.5);", "'%d' expects an integer, found float literal", 29),
])
def test_bad_asserts_are_located_errors(body, message, col, release):
    """Also under ``release``, where the assert compiles to nothing."""
    src = f"kernel k(i: i32) {{\n    {body}\n}}\n"
    with pytest.raises(CompileError) as e:
        kc.compile(src, target="cpu", path="bad.kc", release=release).k.specialize()
    d = e.value.diagnostics[0]
    assert message in d.message, d.message
    assert (d.span.line, d.span.col) == (2, col)


@needs_ptxas
def test_ptx_prints_and_traps():
    ptx = compile_source_to(SRC, "scale.kc", "asm", "nvptx", "sm_90a", kernel="scale")
    assert "vprintf" in ptx and "call.uni __assertfail" in ptx and "trap;" in ptx
    ptxas(ptx)
    release = compile_source_to(SRC, "scale.kc", "asm", "nvptx", "sm_90a", kernel="scale",
                                options=kc.CompileOptions(release=True))
    assert "trap" not in release and "vprintf" not in release and "__assertfail" not in release


def test_amdgcn_traps():
    for arch in ("gfx942", "gfx1100"):
        asm = compile_source_to(SRC, "scale.kc", "asm", "amdgcn", arch, kernel="scale")
        assert "s_trap" in asm


GPU_SCRIPT = """
import numpy as np, kcompiler as kc
src = open({path!r}).read()
mod = kc.compile(src, target="nvptx", path="scale.kc")
x = np.arange(16, dtype=np.float32) + 0.5
mod.scale[2, 8](x, 16, -1)
assert (x == (np.arange(16, dtype=np.float32) + 0.5) * 2).all()
x = np.arange(16, dtype=np.float32) + 0.5
try:
    mod.scale[2, 8](x, 16, 11)
    print("NO ERROR")
except kc.DeviceAssertionError as e:
    print("EXC:", e, flush=True)
"""


@pytest.mark.gpu
def test_assert_on_the_gpu(tmp_path):
    """On the H100, in a child process (the context is unusable after a failed assert): the kernel
    prints the line through vprintf (stdout), then CUDA's __assertfail prints its own (stderr), and the launch raises
    DeviceAssertionError (CUDA_ERROR_ASSERT)."""
    src = tmp_path / "scale.kc"
    src.write_text(SRC)
    r = subprocess.run([sys.executable, "-c", GPU_SCRIPT.format(path=str(src))], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    out = r.stdout
    assert ("scale.kc:7:5: kernel 'scale': block (1,0,0), thread (3,0,0): assertion `i != bad` failed: "
            "i = 11, x[i] = 11.500000, n = 16") in out, (out, r.stderr)
    # CUDA's own __assertfail line goes to the process's stderr (seen on the H100, driver 580)
    assert "scale.kc:7: scale: block: [1,0,0], thread: [3,0,0] Assertion `i != bad` failed." in r.stderr, \
        (out, r.stderr)
    assert "EXC:" in out and "CUDA_ERROR_ASSERT" in out and "device assertion failed" in out, (out, r.stderr)
