"""NVIDIA tests of printf="buffered" and of where vprintf's output goes (issue 20 items 3 and 5);
``pytest -m gpu tests/runtime/test_printf_buffered_gpu.py`` on a machine with a CUDA GPU (skipped elsewhere).

- buffered mode prints every conformance case as snprintf does;
- 1,048,576 threads each print their id: with a buffer that holds them all, every id exactly once;
  with the default 4 MiB buffer, the ids printed are distinct and printed + the loss reported on
  stderr is exactly 1,048,576;
- vprintf's lines reach a pipe before ``os._exit`` once the launch is synchronised, and
  kc.capture_printf returns them.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ..paths import ROOT as REPO
from .printf_util import (CASES, FIELD_CASES, _buffered_stdio_env, cases_arrays, check_cases, check_ids,
                          gpu_source, run, run_every)

N = 1 << 20


@pytest.mark.gpu
def test_gpu_buffered_printf_matches_snprintf(tmp_path):
    cases = CASES + FIELD_CASES
    check_cases(run(tmp_path, gpu_source(cases), "cases", cases_arrays(cases), "cuda",
                    options={"printf": "buffered"}), cases)


@pytest.mark.gpu
def test_gpu_buffered_million_threads_every_line_once():
    """A record of ``id %d\\n`` is 20 bytes: 1,048,576 of them need 20 MiB; a 32 MiB buffer holds
    them all, so every id arrives exactly once and nothing is reported lost."""
    out, err = run_every(N, "nvptx", buffer="32M")
    assert check_ids(out, err, N, 32 << 20) == (N, 0)


@pytest.mark.gpu
def test_gpu_buffered_million_threads_loss_reported_exactly():
    """With the default 4 MiB buffer (4,194,288 bytes of records: 209,714 of 20 bytes) the rest are
    lost: the printed ids are distinct and printed + reported lost = 1,048,576 exactly."""
    out, err = run_every(N, "nvptx")
    printed, lost = check_ids(out, err, N, 4 << 20)
    assert printed == (4 * 2 ** 20 - 16) // 20 and lost == N - printed


_VPRINTF_EXIT = """
import os, sys
sys.path.insert(0, {repo!r})
import kcompiler as kc
mod = kc.compile('kernel k() {{ printf("gpu %d\\\\n", thread_id.x); }}', target="nvptx")
mod.k[1, 4]()
mod.device.synchronize()
os._exit(0)
"""


@pytest.mark.gpu
def test_gpu_vprintf_lines_survive_os_exit_into_a_pipe():
    """CUDA's vprintf writes through C stdio; stdout is a pipe here, so without the flush after
    synchronising the lines stayed in the C library's buffer and os._exit threw them away."""
    r = subprocess.run([sys.executable, "-c", _VPRINTF_EXIT.format(repo=str(REPO))], capture_output=True,
                       timeout=600, env=_buffered_stdio_env())
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert sorted(r.stdout.decode().splitlines()) == [f"gpu {i}" for i in range(4)]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["vprintf", "hostcall", "buffered"])
def test_gpu_capture_printf_returns_the_lines(mode, capsys):
    import kcompiler as kc

    pytest.importorskip("wurlitzer")
    mod = kc.compile('kernel k() { printf("gpu %d\\n", thread_id.x); }', target="nvptx",
                     target_options={"printf": mode})
    with kc.capture_printf(echo=False) as out:
        mod.k[1, 4]()
        mod.device.synchronize()
    assert sorted(out.lines) == [f"gpu {i}" for i in range(4)]
    assert capsys.readouterr().out == ""
