"""The CPU target's arch: an LLVM CPU name is checked before LLVM sees it. An unknown name printed
LLVM's "not a recognized processor" warning many times, and a CPU without 64-bit mode ended the
process ("LLVM ERROR: 64-bit code requested ..."), at kc compile, at specialize() or at launch.
Each bad case runs in a child process, so that a regression fails the test instead of ending the run."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kcompiler as kc

from ...cli_util import VADD, kc as kc_cli
from ...paths import ROOT

x86_64 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                            reason="the names tried are x86-64 CPUs")


def _no_llvm_noise(stderr: str) -> None:
    assert "LLVM ERROR" not in stderr and "not a recognized processor" not in stderr, stderr
    assert "Traceback" not in stderr, stderr


@x86_64
@pytest.mark.parametrize("arch, message", [
    ("znver9", "unknown CPU arch 'znver9' for x86_64-.*closest: znver5"),
    ("znver9-w64", "unknown CPU arch 'znver9' for"),
    ("i386", "CPU arch 'i386' has no 64-bit mode"),
    ("pentium4", "CPU arch 'pentium4' has no 64-bit mode"),
])
def test_cli_rejects_cpu_arch(tmp_path, arch, message):
    import re

    out = tmp_path / "v.o"
    r = kc_cli("compile", VADD, "--target", "cpu", "--arch", arch, "-o", out)
    assert r.returncode == 2, r.stderr
    _no_llvm_noise(r.stderr)
    assert re.search(r"kc compile: error: " + message, r.stderr), r.stderr
    assert not out.exists()


@x86_64
@pytest.mark.parametrize("arch", ["pentium9000", "i386"])
def test_python_api_rejects_cpu_arch(arch):
    """kc.compile raises ValueError (it used to accept the name and end the process at specialize())."""
    code = f"""
import numpy as np, kcompiler as kc
try:
    m = kc.compile(open({str(VADD)!r}).read(), target="cpu", arch={arch!r})
    a = np.ones(4, np.float32)
    m.vadd.specialize(a, a, a, 4)
    print("ACCEPTED")
except ValueError as e:
    print("ValueError:", e)
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    _no_llvm_noise(r.stderr)
    assert r.stdout.startswith(f"ValueError: {'unknown ' if arch != 'i386' else ''}CPU arch {arch!r}"), r.stdout


@x86_64
@pytest.mark.parametrize("arch", ["x86-64-v2", "x86-64-w64"])
def test_named_cpu_compiles_and_runs(arch, capfd):
    """A 64-bit CPU name LLVM knows is accepted (and only the host-independent features are used)."""
    m = kc.compile_file(VADD, target="cpu", arch=arch)
    n = 300
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    m.vadd[(n + 127) // 128, 128](a, b, out, n)
    np.testing.assert_array_equal(out, a + b)
    _no_llvm_noise(capfd.readouterr().err)


@x86_64
def test_cpu_names_lists_llvms_cpus(capfd):
    from kcompiler.backends.cpu import check_cpu_name, cpu_names

    names = cpu_names()
    assert {"x86-64", "x86-64-v4", "znver4", "skylake-avx512", "i386"} <= set(names)
    check_cpu_name("znver4")
    check_cpu_name("x86-64-v3")
    with pytest.raises(ValueError, match="unknown CPU arch 'Znver4'.*closest: znver4"):
        check_cpu_name("Znver4")
    _no_llvm_noise(capfd.readouterr().err)
