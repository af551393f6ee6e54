"""printf through the hostcall protocol: the device code AMD kernels run (stdlib/hostcall.kc, no
device-libs), served by kcompiler's listener on the CPU target and on NVIDIA in printf="hostcall"
mode, checked line by line against libc's snprintf; and the AMD code objects of printing kernels.

No AMD GPU exists here: on AMD only the code object is checked (hidden_hostcall_buffer at the v5
offset, nothing undefined, no device-libs symbol)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kcompiler.pipeline import compile_source_to

from ..paths import ROOT as REPO
from .printf_util import CASES, FIELD_CASES, cases_arrays, check_cases, run, split_source


def by_mode(out: str) -> dict[str, str]:
    """A run's output with ``modes``, split at its ``##<mode>`` lines."""
    parts = out.split("##")
    assert parts[0] == "", parts[0][:200]
    return {p.split("\n", 1)[0]: p.split("\n", 1)[1] for p in parts[1:]}


_CONVERSION = re.compile(r"%([-+ #0]*)(\*|\d+)?(\.(\*|\d*))?(hh|h|ll|l|z|j|t)?([diouxXcspfFeEgGaA%])")


def _features(case) -> set:
    """What a conformance case exercises: its argument types, and each conversion's letter, length
    modifier, flags, and `*` width or precision."""
    _, fmt, args = case
    out = {("type", t) for t, _ in args}
    for m in _CONVERSION.finditer(fmt):
        flags, width, _, prec, length, conv = m.groups()
        out |= {("conv", conv), ("length", length), ("star width", width == "*"), ("star prec", prec == "*")}
        out |= {("flag", f) for f in flags}
    return out


def feature_sample(cases) -> list:
    """A fixed few of ``cases`` that together exercise every feature (:func:`_features`) of all of
    them: the first case, in list order, that adds the most features not yet covered, until none is
    left."""
    want, picked = set().union(*map(_features, cases)), []
    while want:
        best = max(cases, key=lambda c: len(_features(c) & want))
        picked.append(best)
        want -= _features(best)
    return [c for c in cases if c in picked]


def test_feature_sample_covers_every_feature():
    sample = feature_sample(CASES)
    assert set().union(*map(_features, sample)) == set().union(*map(_features, CASES))
    assert {("type", t) for t in ("i8", "u16", "f16", "bf16", "f32", "str", "lit", "ptr")} <= set().union(
        *map(_features, sample))
    assert len(sample) < len(CASES) // 4


@pytest.mark.slow(sample=1)  # one warp size by default (80-120 s each on CI's 2 cores); -m slow: both
@pytest.mark.parametrize("warp", [32, 64])
def test_cpu_printf_matches_snprintf(tmp_path, warp, full_sweep):
    """Every case of the conformance list and of FIELD_CASES, printed through hostcall on the CPU
    target (wavefronts of 32 and of 64 lanes) and read by a listener that steps past %s as the
    newer clr does ("length") and as ROCm 6.x's clr does ("printed"), equals libc's snprintf. By
    default a fixed sample of the conformance list that exercises every argument type, conversion,
    length modifier, flag and `*` field of it (feature_sample: CI time) and all of FIELD_CASES;
    -m slow: all."""
    assert len(CASES) >= 100
    cases = (CASES if full_sweep else feature_sample(CASES)) + FIELD_CASES
    src, kernels = split_source(cases=cases)
    out = run(tmp_path, src, kernels, cases_arrays(cases), "cpu", arch="host-w64" if warp == 64 else None,
              modes=("length", "printed"))
    outs = by_mode(out)
    assert sorted(outs) == ["length", "printed"]
    for mode in outs:
        check_cases(outs[mode], cases)


@pytest.mark.slow
def test_cpu_string_fields_read_the_same_under_both_advances(tmp_path, full_sweep):
    """FIELD_CASES alone (a short run, and the one that fails when the device leaves a %s field to
    the host): the same text, snprintf's, under both ways of stepping past a string. By default
    test_cpu_printf_matches_snprintf's sample runs these cases (CI time); -m slow runs this too."""
    if not full_sweep:
        pytest.skip("FIELD_CASES run inside test_cpu_printf_matches_snprintf; -m slow runs them alone too")
    src, kernels = split_source(cases=FIELD_CASES)
    outs = by_mode(run(tmp_path, src, kernels, cases_arrays(FIELD_CASES), "cpu", modes=("printed", "length")))
    for mode in ("printed", "length"):
        check_cases(outs[mode], FIELD_CASES)


@pytest.mark.gpu
def test_gpu_hostcall_printf_matches_snprintf(tmp_path):
    """Every conformance and %s-field case through hostcall on an NVIDIA GPU, in kernels of 8 cases
    (one kernel of all of them is past the compiler's inlined-size limit, kcompiler/limits.py)."""
    cases = CASES + FIELD_CASES
    src, kernels = split_source(cases=cases)
    check_cases(run(tmp_path, src, kernels, cases_arrays(cases), "cuda", options={"printf": "hostcall"}),
                cases)


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


#: Hidden arguments no kcompiler kernel reads: a code object that lists one makes the HIP runtime
#: set up what it names (a heap, a device queue...) for every launch.
NEVER_HIDDEN = {"hidden_heap_v1", "hidden_multigrid_sync_arg", "hidden_default_queue",
                "hidden_completion_action", "hidden_queue_ptr"}
#: kernel_code_properties bits (AMDGPUUsage, "Kernel Descriptor"; SIDefines KERNEL_CODE_PROPERTY_*).
DISPATCH_PTR, QUEUE_PTR, DISPATCH_ID = 1 << 1, 1 << 2, 1 << 4

INPUTS_SOURCE = EVERY_THREAD + """
kernel quiet(x: ptr<f32>) {
    x[thread_id.x] = 1.0;
}

kernel dims(x: ptr<f32>) {
    x[block_id.x * block_dim.x + thread_id.x] = f32(grid_dim.x);
}

fn report(v: f32) {
    printf("v=%f\\n", v);
}

kernel sometimes(x: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        x[i] = 2.0;
    } else {
        report(x[0]);
    }
}
"""


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_code_objects_ask_only_for_the_inputs_they_use(arch):
    """At -O 0 (where LLVM's AMDGPUAttributor does not run) as at -O 2: only the kernels that print
    list hidden_hostcall_buffer, none lists the heap, multigrid, device-queue, completion-action or
    queue-pointer arguments, none asks for the queue pointer or dispatch id SGPRs, and each lists the
    same hidden arguments at both levels (a kernel reading no implicit argument lists none)."""
    from kcompiler.backends.target import CompileOptions
    from kcompiler.runtime.codeobject import read_code_object

    cos = {opt: read_code_object(compile_source_to(INPUTS_SOURCE, "k.kc", "obj", "amdgcn", arch,
                                                   options=CompileOptions(opt_level=opt)))
           for opt in (0, 2)}
    printing = {"every", "sometimes"}
    for opt, co in cos.items():
        for k in co.kernels:
            kinds = {a.value_kind for a in k.hidden_args}
            assert ("hidden_hostcall_buffer" in kinds) == (k.name in printing), (opt, k.name)
            assert not kinds & NEVER_HIDDEN, (opt, k.name, kinds & NEVER_HIDDEN)
            assert not k.descriptor.kernel_code_properties & (QUEUE_PTR | DISPATCH_ID), (opt, k.name)
    for k in cos[0].kernels:
        o2 = cos[2].kernel(k.name)
        assert [(a.value_kind, a.offset) for a in k.hidden_args] == \
            [(a.value_kind, a.offset) for a in o2.hidden_args], k.name
        assert k.kernarg_segment_size == o2.kernarg_segment_size, k.name
    quiet = cos[0].kernel("quiet")
    assert quiet.kernarg_segment_size == 8 and not quiet.hidden_args
    assert quiet.descriptor.kernel_code_properties == cos[2].kernel("quiet").descriptor.kernel_code_properties
    assert quiet.descriptor.enable_workgroup_id == (True, False, False)


_GUARD_CHILD = """
import ctypes, sys
import numpy as np
sys.path.insert(0, {repo!r})
import kcompiler as kc
import kcompiler.runtime.cpu as cpu
from kcompiler.runtime.hostcall import BUFFER_INDEX_MASK, BUFFER_FREE_STACK
mod = kc.compile(open({src!r}).read(), target="cpu", path="k.kc")
buf = cpu.hostcall_buffer()
mask = ctypes.c_uint64.from_address(buf.host_address(BUFFER_INDEX_MASK))
free = ctypes.c_uint64.from_address(buf.host_address(BUFFER_FREE_STACK)).value
saved = mask.value
mask.value = 0x7F00_1234_5640          # what the phase protocol has there: a 64-aligned signal address
mod.every[4, 64](np.int32(256))
sys.stdout.flush()
print("free stack untouched:", ctypes.c_uint64.from_address(buf.host_address(BUFFER_FREE_STACK)).value == free)
mask.value = saved
mod.every[1, 2](np.int32(2))
sys.stdout.flush()
"""


def test_cpu_printf_touches_no_buffer_of_the_other_protocol(tmp_path):
    """A buffer whose byte 40 is even is not the stack protocol's (index_mask is 2^k - 1) but, e.g.,
    the phase/occupancy protocol's doorbell: the device code leaves it alone (no packet popped, no
    line, no hang), and prints again once the word is a mask."""
    (tmp_path / "k.kc").write_text(EVERY_THREAD)
    script = _GUARD_CHILD.format(repo=str(REPO), src=str(tmp_path / "k.kc"))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=600,
                       env={**os.environ, "KC_CACHE": "0"})
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    assert r.stdout.decode().splitlines() == ["free stack untouched: True", "line 0 of block 0 lane 0",
                                              "line 1 of block 0 lane 1"]
