"""``kc run`` at the edges: bounds checking on by default for the cpu target, printf options every
target takes, arguments too large to allocate and output folders checked before the launch. Each
case runs ``python -m kcompiler.cli`` in a subprocess, so exit codes and deaths are real."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ..paths import ROOT

VADD = ROOT / "examples" / "vadd.kc"
PRINTS = """
kernel show(x: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n { printf("x[%d] = %.1f\\n", i, x[i]); }
}
"""


def kc(*args, cwd=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "kcompiler.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)


def vadd(*extra, n=16, cwd=None):
    return kc("run", VADD, "--kernel", "vadd", "--grid", "1", "--block", "16", "--target", "cpu",
              "a=ones:f32[10]", "b=ones:f32[10]", "out=zeros:f32[10]", f"n={n}", *extra, cwd=cwd)


def test_overrun_is_reported_not_a_segfault(tmp_path):
    """The first-hour command: 16 threads over arrays of 10. It died with SIGSEGV/SIGABRT; bounds
    checking is now the cpu target's default in kc run, so it names the array, the index, the
    kernel and the line, exits 1 and saves nothing."""
    r = vadd(cwd=tmp_path)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "kernel 'vadd': out-of-bounds load from 'a'[10] (size 10) at " in r.stderr, r.stderr
    assert f"{VADD}:5:18" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "kc-out").exists()


def test_check_bounds_can_be_turned_off(tmp_path):
    r = vadd("--no-check-bounds", n=10, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = vadd("--check-bounds", n=10, cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_help_says_bounds_checking_is_the_cpu_default():
    r = kc("run", "--help")
    text = " ".join(r.stdout.split())
    assert "--no-check-bounds" in text and "On by default for the cpu target" in text
    assert "debugging command" in text


@pytest.mark.parametrize("extra", [[], ["--printf", "hostcall"], ["--check-bounds"], ["--no-check-bounds"]])
def test_run_prints_through_hostcall_on_the_cpu(tmp_path, extra):
    """--printf hostcall on the cpu target (which always prints that way) was an internal error;
    under bounds checking every printf was an out-of-bounds atomic."""
    (tmp_path / "show.kc").write_text(PRINTS)
    r = kc("run", tmp_path / "show.kc", "-k", "show", "-g", "1", "-b", "8", "--target", "cpu",
           "x=arange:f32[5]", "n=5", "--out", "-", *extra)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == [f"x[{i}] = {i}.0" for i in range(5)]


def test_printf_vprintf_on_the_cpu_is_a_usage_error(tmp_path):
    (tmp_path / "show.kc").write_text(PRINTS)
    r = kc("run", tmp_path / "show.kc", "-k", "show", "-g", "1", "-b", "8", "--target", "cpu",
           "--printf", "vprintf", "x=arange:f32[5]", "n=5", "--out", "-")
    assert r.returncode == 2 and "printf option may be 'hostcall' or 'buffered', not 'vprintf'" in r.stderr, \
        r.stderr
    assert "internal compiler error" not in r.stderr


@pytest.mark.parametrize("arg", ["a=zeros:f32[99999999999999]", "a=rand:f32[99999999999999]",
                                 "a=ones:f32[99999999,99999999]"])
def test_array_too_large_to_allocate(tmp_path, arg):
    r = kc("run", VADD, "-k", "vadd", "-g", "1", "-b", "16", "--target", "cpu", arg, "b=ones:f32[10]",
           "out=zeros:f32[10]", "n=10", cwd=tmp_path)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert f"{arg}: cannot allocate" in r.stderr and "bytes): not enough memory" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr


def test_out_under_a_file_is_refused_before_the_launch(tmp_path):
    """--out under a regular file raised NotADirectoryError after the kernel had run; now the
    kernel does not run (it would print)."""
    (tmp_path / "show.kc").write_text(PRINTS)
    (tmp_path / "afile").write_text("")
    r = kc("run", tmp_path / "show.kc", "-k", "show", "-g", "1", "-b", "8", "--target", "cpu",
           "x=arange:f32[5]", "n=5", "--out", tmp_path / "afile" / "sub")
    assert r.returncode == 2 and "is a file, not a folder" in r.stderr, r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr


def test_out_folder_is_made(tmp_path):
    r = vadd("--out", tmp_path / "new" / "deeper", n=10)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "new" / "deeper").iterdir()) == ["a.npy", "b.npy", "out.npy"]


@pytest.mark.gpu
def test_run_on_nvidia_checks_nothing_and_says_so(tmp_path):
    """Bounds checking of every access is the cpu target's: on an NVIDIA GPU kc run runs unchecked by
    default, and an explicit --check-bounds says that only array indices are checked there."""
    r = kc("run", VADD, "--kernel", "vadd", "--grid", "1", "--block", "16", "--target", "cuda",
           "a=ones:f32[16]", "b=ones:f32[16]", "out=zeros:f32[16]", "n=16", "--check-bounds",
           "--out", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert ("--check-bounds checks every access on the cpu target only; nvptx checks the indices of local "
            "and shared arrays") in r.stderr
    assert (np.load(tmp_path / "out" / "out.npy") == 2).all()
