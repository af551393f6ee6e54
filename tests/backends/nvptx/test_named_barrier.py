"""Named barriers (backends/nvptx/builtins_barrier.py, named_barrier.py; the CPU target's emulation in
backends/cpu/named_barrier.py): ``barrier_sync(id, nthreads)`` / ``barrier_arrive(id, nthreads)`` as
PTX ``barrier.sync.aligned`` / ``barrier.arrive.aligned`` (FileCheck), assembled by ptxas for sm_90a
and sm_80; a producer / consumer handoff between two warps run on the CPU target; the located errors
(an id outside 1 to 15, id 0, a thread count that is not a compile-time multiple of 32, AMD)."""
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

from ...filecheck_util import filecheck
from ...located_util import assert_body_error
from ...ptxas_util import needs_ptxas, ptxas

# Warp 1 produces ROUNDS values into a shared slot, warp 0 consumes them: full (id 1) and empty (id
# 2) barriers of 64 threads, the producer arriving on full and waiting on empty, the consumer the
# other way round (the empty barrier's first phase is given by the consumer's arrival up front).
# ids: the full barrier's id comes at run time (ids[0]), the empty one's is a constant.
HANDOFF = """
kernel handoff(out: ptr<i32>, ids: ptr<u32>, rounds: i32) {
    let slot = dynamic_shared[i32]();
    let full = ids[0];
    let lane = i32(thread_id.x % 32u32);
    if thread_id.x / 32u32 == 1u32 {
        for r in range(0, rounds) {
            barrier_sync(2, 64);
            slot[lane] = 1000 * i32(block_id.x) + 100 * r + lane;
            barrier_arrive(full, 64);
        }
    } else {
        barrier_arrive(2, 64);
        for r in range(0, rounds) {
            barrier_sync(full, 64);
            out[(i32(block_id.x) * rounds + r) * 32 + lane] = slot[lane];
            if r + 1 < rounds {
                barrier_arrive(2, 64);
            }
        }
    }
}

kernel stuck(out: ptr<i32>) {
    barrier_sync(3, 96);
    out[thread_id.x] = 1;
}
"""


def test_ptx():
    """A constant id as an immediate, a run-time one in a register; the count as an immediate."""
    ptx = compile_source_to(HANDOFF, "k.kc", "asm", "nvptx", "sm_90a")
    filecheck(ptx, """
        CHECK-LABEL: .entry handoff
        CHECK-DAG: barrier.sync.aligned 2, 64;
        CHECK-DAG: barrier.arrive.aligned {{%r[0-9]+}}, 64;
        CHECK-DAG: barrier.arrive.aligned 2, 64;
        CHECK-DAG: barrier.sync.aligned {{%r[0-9]+}}, 64;
        CHECK-LABEL: .entry stuck
        CHECK: barrier.sync.aligned 3, 96;
    """)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_assembles(arch):
    ptxas(compile_source_to(HANDOFF, "k.kc", "asm", "nvptx", arch), arch=arch)


@pytest.mark.parametrize("ids", [1, 7])
def test_cpu_handoff(ids):
    """Warp 0 (run first by the CPU target's scheduler) reads only what warp 1 wrote for the round,
    over 5 rounds and 3 blocks (the barriers start each block at zero)."""
    mod = kc.compile(HANDOFF, target="cpu", path="k.kc")
    rounds, blocks = 5, 3
    out = np.full(blocks * rounds * 32, -1, np.int32)
    mod.handoff[blocks, 64](out, np.array([ids], np.uint32), rounds, shared=128)
    want = (1000 * np.arange(blocks)[:, None, None] + 100 * np.arange(rounds)[None, :, None]
            + np.arange(32)[None, None, :]).reshape(-1)
    np.testing.assert_array_equal(out, want)


def _child(tmp_path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "k.kc").write_text(HANDOFF)
    script = "import numpy as np, kcompiler as kc\nmod = kc.compile_file('k.kc', target='cpu')\n" + \
        textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "KC_CPU_DEADLOCK_SECONDS": "1",
                                             "PYTHONPATH": os.pathsep.join(sys.path)})


def test_cpu_incomplete_barrier_is_a_deadlock(tmp_path):
    """64 threads wait for 96: the launch stops with the deadlock error (a GPU hangs); a run-time id
    of 0 stops it too, with an error that says why and where."""
    r = _child(tmp_path, """
        for call in (lambda: mod.stuck[1, 64](np.zeros(64, np.int32)),
                     lambda: mod.handoff[1, 64](np.zeros(64, np.int32), np.zeros(1, np.uint32), 1, shared=128)):
            try:
                call()
                print("ran")
            except kc.LaunchError as e:
                print(type(e).__name__, str(e).splitlines()[0])
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "deadlock in block (0,0,0)" in lines[0], r.stdout
    assert lines[1] == ("LaunchError kernel 'handoff': named barrier id outside 1 to 15 at k.kc:15:13, thread (0,0,0) "
                        "block (0,0,0) (a GPU faults on this)"), r.stdout  # barrier_sync(full, 64), full = 0


ERRORS = [
    # (statement in a kernel body, target, arch, message part, caret text)
    ("barrier_sync(0, 64);", "nvptx", "sm_90a", "barrier_sync's barrier id must be 1 to 15, found 0", "0"),
    ("barrier_arrive(16, 64);", "nvptx", "sm_90a", "barrier_arrive's barrier id must be 1 to 15, found 16", "16"),
    ("barrier_sync(1.5, 64);", "nvptx", "sm_90a", "barrier id must be 1 to 15, found float literal", "1.5"),
    ("barrier_sync(p[0], 64);", "nvptx", "sm_90a", "barrier id must be an integer of at most 32 bits, found f32",
     "p[0]"),
    ("barrier_sync(1, 48);", "nvptx", "sm_90a", "thread count must be a multiple of 32 (the warp size) from 32 "
     "to 1024, not 48", "48"),
    ("barrier_arrive(1, 2048);", "nvptx", "sm_90a", "not 2048", "2048"),
    ("barrier_sync(1, i32(p[0]));", "nvptx", "sm_90a", "barrier_sync's thread count must be a compile-time "
     "constant", "i32(p[0])"),
    ("barrier_sync(1);", "nvptx", "sm_90a", "barrier_sync", "barrier_sync"),
    ("barrier_sync(1, 64);", "amdgcn", "gfx942", "barrier_sync is not available on this target (amdgcn gfx942)",
     "barrier_sync"),
]


@pytest.mark.parametrize("body, target, arch, message, caret", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_located_errors(body, target, arch, message, caret):
    assert_body_error(body, arch, message, caret, target, params="p: ptr<f32>")


def test_cpu_wave64_has_no_named_barriers():
    """Counted in warps of 32: the CPU target with wavefronts of 64 refuses them, located."""
    with pytest.raises(CompileError) as ei:
        kc.compile("kernel k(p: ptr<f32>) {\n    barrier_sync(1, 64);\n}\n", target="cpu",
                   target_options={"warp_size": 64}, path="k.kc").k.specialize()
    assert "barrier_sync is not available on this target (cpu" in str(ei.value) and "k.kc:2:" in str(ei.value)
