"""printf through the hostcall protocol: the device code AMD kernels run (stdlib/hostcall.kc, no
device-libs), served by kcompiler's listener on the CPU target and on NVIDIA in printf="hostcall"
mode, checked line by line against libc's snprintf; and the AMD code objects of printing kernels.

No AMD GPU exists here: on AMD only the code object is checked (hidden_hostcall_buffer at the v5
offset, nothing undefined, no device-libs symbol)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kcompiler.pipeline import compile_source_to

from .test_printf import CASES, _case_arrays, gpu_source, snprintf

REPO = Path(__file__).resolve().parent.parent

_CHILD = """
import sys
import numpy as np
sys.path.insert(0, {repo!r})
import kcompiler as kc
arrays = np.load({arrays!r})
mod = kc.compile(open({src!r}).read(), target={target!r}, arch={arch!r}, path="k.kc",
                 target_options={options!r})
for kernel in {kernels!r}:
    getattr(mod, kernel)[{grid}, {block}](*[arrays[k] if arrays[k].ndim else arrays[k][()]
                                            for k in {names!r}])
sys.stdout.flush()
"""


def run(tmp_path, src: str, kernel: str | list[str], arrays: dict, target: str, grid=1, block=1,
        arch=None, options=None) -> str:
    """Launch ``kernel`` (or each of a list) in a fresh process; its stdout (every printf line,
    written by the hostcall listener before the printing wave is released)."""
    (tmp_path / "k.kc").write_text(src)
    np.savez(tmp_path / "arrays.npz", **arrays)
    script = _CHILD.format(repo=str(REPO), src=str(tmp_path / "k.kc"), arrays=str(tmp_path / "arrays.npz"),
                           target=target, arch=arch, options=options,
                           kernels=[kernel] if isinstance(kernel, str) else kernel, grid=grid,
                           block=block, names=list(arrays))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=900,
                       env={**os.environ, "KC_CACHE": "0"})
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-4000:]
    return r.stdout.decode("utf-8", "surrogateescape")


def check_cases(out: str, only: list[int] | None = None) -> None:
    """Each case of CASES (or of ``only``, their indices) printed exactly once, as snprintf does."""
    want = list(range(len(CASES))) if only is None else sorted(only)
    got = {}
    for line in out.split("\n"):
        if line.startswith("@@"):
            k, _, text = line[2:].partition("|")
            assert int(k) not in got, f"case {k} printed twice"
            got[int(k)] = text
    assert sorted(got) == want, out[-2000:]
    bad = [f"{CASES[k][0]} {CASES[k][1]!r} {CASES[k][2]}: got {got[k]!r}, snprintf {snprintf(*CASES[k][1:])!r}"
           for k in want if got[k] != snprintf(*CASES[k][1:])]
    assert not bad, f"{len(bad)} of {len(want)} differ:\n" + "\n".join(bad)


def cases_arrays():
    ints, fl, s, _ = _case_arrays(CASES)
    return {"ints": ints, "fl": fl, "s": s}


def split_source(per_kernel: int = 24) -> tuple[str, list[str]]:
    """The cases kernel cut into kernels of ``per_kernel`` printfs (cases_0, cases_1, ...), same
    arrays and same line numbering: one huge kernel takes the CPU target's coroutine passes
    superlinear time."""
    lines = gpu_source(CASES).splitlines()
    header, body = lines[0], lines[1:-1]
    out, names = [], []
    for k in range(0, len(body), per_kernel):
        name = f"cases_{k // per_kernel}"
        names.append(name)
        out += [header.replace("kernel cases(", f"kernel {name}("), *body[k:k + per_kernel], "}"]
    return "\n".join(out) + "\n", names


@pytest.mark.slow
@pytest.mark.parametrize("warp", [32, 64])
def test_cpu_printf_matches_snprintf(tmp_path, warp, full_sweep):
    """Every case of the conformance list, printed through hostcall on the CPU target (wavefronts of
    32 and of 64 lanes), equals libc's snprintf. A sample by default: every third kernel of 24 cases
    (all of them with -m slow; the CPU target's compile of each kernel is the cost)."""
    assert len(CASES) >= 100
    per = 24
    src, kernels = split_source(per)
    picked = kernels if full_sweep else kernels[::3]
    only = None if full_sweep else [k for j in range(0, len(kernels), 3) for k in range(j * per, min((j + 1) * per, len(CASES)))]
    check_cases(run(tmp_path, src, picked, cases_arrays(), "cpu", arch="host-w64" if warp == 64 else None), only)


@pytest.mark.gpu
def test_gpu_hostcall_printf_matches_snprintf(tmp_path):
    check_cases(run(tmp_path, gpu_source(CASES), "cases", cases_arrays(), "cuda",
                    options={"printf": "hostcall"}))


EVERY_THREAD = """
kernel every(n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        printf("line %d of block %d lane %d\\n", i, block_id.x, lane_id);
    }
}
"""


def check_every_line(out: str, n: int, warp: int, block: int) -> None:
    """Every thread's line arrives exactly once, nothing else arrives, and each names its block and
    lane correctly."""
    lines = out.splitlines()
    assert len(lines) == n, (len(lines), lines[:3])
    seen = np.zeros(n, np.int8)
    for line in lines:
        words = line.split()
        assert words[0] == "line" and len(words) == 7, line
        i, b, lane = int(words[1]), int(words[4]), int(words[6])
        assert b == i // block and lane == (i % block) % warp, line
        seen[i] += 1
    assert (seen == 1).all()


@pytest.mark.slow
@pytest.mark.parametrize("warp", [32, 64])
def test_cpu_every_thread_prints_once(tmp_path, monkeypatch, warp, full_sweep):
    """2^18 threads less 37 (a partial last block), wave32 and wave64: every line exactly once. That is
    4 (wave64) to 8 (wave32) times as many calling warps as the buffer has packets (DEFAULT_PACKETS),
    so packets are reused many times over; the GPU test below takes 2^20. By default a sample of the
    same ratio: 2^15 threads and a buffer of 128 packets (KC_HOSTCALL_PACKETS); -m slow: all of it."""
    from kcompiler.runtime.hostcall import DEFAULT_PACKETS
    packets, n = (DEFAULT_PACKETS, 1 << 18) if full_sweep else (128, 1 << 15)
    monkeypatch.setenv("KC_HOSTCALL_PACKETS", str(packets))
    assert n // warp >= 4 * packets
    n -= 37
    out = run(tmp_path, EVERY_THREAD, "every", {"n": np.int32(n)}, "cpu", grid=(n + 255) // 256,
              block=256, arch="host-w64" if warp == 64 else None)
    check_every_line(out, n, warp, 256)


@pytest.mark.gpu
def test_gpu_hostcall_every_thread_prints_once(tmp_path):
    n = (1 << 20) - 37
    out = run(tmp_path, EVERY_THREAD, "every", {"n": np.int32(n)}, "cuda", grid=(n + 255) // 256,
              block=256, options={"printf": "hostcall"})
    check_every_line(out, n, 32, 256)


# --- AMD code objects ----------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_printing_code_object(arch):
    """A printing kernel's code object lists hidden_hostcall_buffer at byte 80 of its implicit
    arguments (the v5 layout), has no undefined symbols and no device-libs symbol; a kernel that
    does not print does not ask for the buffer."""
    from kcompiler.runtime.codeobject import read_code_object

    src = EVERY_THREAD + """
kernel quiet(x: ptr<f32>) {
    x[thread_id.x] = 1.0;
}
"""
    co = read_code_object(compile_source_to(src, "k.kc", "obj", "amdgcn", arch))
    every, quiet = co.kernel("every"), co.kernel("quiet")
    hidden = {a.value_kind: a.offset for a in every.args if a.value_kind.startswith("hidden_")}
    implicit_base = min(hidden.values())
    assert hidden["hidden_hostcall_buffer"] - implicit_base == 80
    assert hidden["hidden_block_count_x"] == implicit_base
    assert "hidden_hostcall_buffer" not in {a.value_kind for a in quiet.args}
    for name, sym in co.symbols.items():
        assert "ockl" not in name and "ocml" not in name, name
        assert sym.section != 0 or not name, f"undefined symbol {name}"
    assert every.wavefront_size == (64 if arch == "gfx942" else 32)


@pytest.mark.parametrize("packets", [2, 3])
def test_cpu_warps_wait_for_packets(tmp_path, monkeypatch, packets):
    """A buffer with fewer packets than the warps printing at once (KC_HOSTCALL_PACKETS): the free
    stack runs empty, and a warp waits for a packet to come back instead of taking a packet another
    warp holds. Every line still arrives exactly once."""
    monkeypatch.setenv("KC_HOSTCALL_PACKETS", str(packets))
    monkeypatch.setenv("KC_CPU_THREADS", "2")
    n = 20000 - 3
    out = run(tmp_path, EVERY_THREAD, "every", {"n": np.int32(n)}, "cpu", grid=(n + 255) // 256, block=256)
    check_every_line(out, n, 32, 256)
