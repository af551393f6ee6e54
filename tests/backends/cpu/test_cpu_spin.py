"""Spin-waits on the CPU target (issue 22): a thread of a block spinning on an atomic that another
thread of the same block sets must make progress, as on sm_70+ GPUs (independent thread
scheduling), although the block's threads are coroutines on one host thread; a block whose runnable
threads all spin on values that never change is reported as a deadlock instead of hanging.

Each launch runs in a child process with a timeout: before the fix these kernels hang forever."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SRC = """\
kernel handshake(out: ptr<i32>, flag: ptr<i32>) {
    if thread_id.x == 0u32 {
        while atomic_load(flag, order = "acquire", scope = "block") == 0 {}
        out[0] = out[1] + 1;
    } else if thread_id.x == block_dim.x - 1u32 {
        out[1] = 41;
        atomic_store(flag, 1, order = "release", scope = "block");
    }
}

kernel shared_handshake(out: ptr<i32>) {
    let flag = dynamic_shared[i32]();  // flag, data
    if thread_id.x == 0u32 { flag[0] = 0; }
    barrier();
    if thread_id.x == 0u32 {
        while atomic_load(flag, order = "acquire", scope = "block") == 0 {}
        out[block_id.x] = flag[1];
    } else if thread_id.x == block_dim.x - 1u32 {
        flag[1] = i32(block_id.x) * 10 + 7;
        atomic_store(flag, 1, order = "release", scope = "block");
    }
}

kernel spin_lock(counter: ptr<i32>, lock: ptr<i32>) {
    while atomic_cas(lock, 0, 1, order = "acquire", scope = "device") != 0 {}
    counter[0] = counter[0] + 1;
    atomic_store(lock, 0, order = "release", scope = "device");
}

kernel exch_lock(counter: ptr<i32>, lock: ptr<i32>) {
    while atomic_exch(lock, 1, order = "acquire", scope = "device") == 1 {}
    counter[0] = counter[0] + 1;
    atomic_store(lock, 0, order = "release", scope = "device");
}

kernel stuck(flag: ptr<i32>) {
    while atomic_load(flag, order = "acquire") == 0 {}
}

kernel stuck_at_barrier(flag: ptr<i32>) {
    if thread_id.x == 0u32 {
        while atomic_load(flag, order = "acquire") == 0 {}
    }
    barrier();
    atomic_store(flag, 1, order = "release");
}
"""


def _child(tmp_path, body: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``body`` (Python, with ``mod`` the CPU module of SRC, ``np`` and ``kc``) in a child."""
    (tmp_path / "spin.kc").write_text(SRC)
    script = "import numpy as np, kcompiler as kc\nmod = kc.compile_file('spin.kc', target='cpu')\n" + \
        textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, env={**os.environ, **(env or {}),
                                             "PYTHONPATH": os.pathsep.join(sys.path)})


@pytest.mark.parametrize("block", [2, 32, 256])
def test_flag_handshake_within_a_block(tmp_path, block):
    """Thread 0 waits for the block's last thread, which the scheduler resumes after it."""
    r = _child(tmp_path, f"""
        out = np.zeros(2, np.int32); flag = np.zeros(1, np.int32)
        mod.handshake[1, {block}](out, flag)
        print(out.tolist())
        out = np.zeros(3, np.int32)
        mod.shared_handshake[3, {block}](out, shared=8)
        print(out.tolist())
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[42, 41]", "[7, 17, 27]"]


@pytest.mark.parametrize("kernel", ["spin_lock", "exch_lock"])
def test_spin_lock_counts_every_thread(tmp_path, kernel):
    """A mutex by atomic_cas (or atomic_exch) around a plain read-modify-write: every thread of
    every block gets in once."""
    r = _child(tmp_path, f"""
        c = np.zeros(1, np.int32); lock = np.zeros(1, np.int32)
        mod.{kernel}[4, 128](c, lock)
        print(int(c[0]), int(lock[0]))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["512", "0"]


def test_deadlock_is_reported(tmp_path):
    """Every thread waits on a flag nobody sets: after KC_CPU_DEADLOCK_SECONDS the launch stops with
    an error naming the block, the threads and the line they spin at."""
    r = _child(tmp_path, """
        try:
            mod.stuck[1, 64](np.zeros(1, np.int32))
        except kc.LaunchError as e:
            print(e)
    """, timeout=120, env={"KC_CPU_DEADLOCK_SECONDS": "1"})
    assert r.returncode == 0, r.stderr
    msg = r.stdout.strip()
    assert msg.startswith("kernel 'stuck': deadlock in block (0,0,0): no progress for 1 s: 64 threads "
                          "spin on an atomic whose value does not change (thread (0,0,0) at spin.kc:37:11, "
                          "..., thread (63,0,0) at spin.kc:37:11)"), msg


def test_deadlock_with_threads_at_a_barrier(tmp_path):
    """Thread 0 spins for a flag the others set only after a barrier it never reaches (a GPU
    hangs too)."""
    r = _child(tmp_path, """
        try:
            mod.stuck_at_barrier[1, 32](np.zeros(1, np.int32))
        except kc.LaunchError as e:
            print(e)
    """, timeout=120, env={"KC_CPU_DEADLOCK_SECONDS": "1"})
    assert r.returncode == 0, r.stderr
    assert "deadlock in block (0,0,0)" in r.stdout and "1 thread spin" in r.stdout, r.stdout
    assert "31 other threads wait at a barrier or warp operation" in r.stdout, r.stdout


def test_deadlock_seconds_is_validated(monkeypatch):
    from kcompiler.runtime.cpu import DEADLOCK_SECONDS, deadlock_seconds_from_env
    monkeypatch.delenv("KC_CPU_DEADLOCK_SECONDS", raising=False)
    assert deadlock_seconds_from_env() == DEADLOCK_SECONDS
    monkeypatch.setenv("KC_CPU_DEADLOCK_SECONDS", "0")
    assert deadlock_seconds_from_env() == 0
    for bad in ("soon", "-1", "1.5"):
        monkeypatch.setenv("KC_CPU_DEADLOCK_SECONDS", bad)
        with pytest.raises(ValueError, match="KC_CPU_DEADLOCK_SECONDS"):
            deadlock_seconds_from_env()


def test_only_while_loops_get_spin_points():
    """A for loop is counted and ends by itself: its atomic reads stay plain (no suspension point,
    no cost); the same read in a while loop is a spin point."""
    from kcompiler.pipeline import compile_source_to
    counted = compile_source_to("""
kernel counted(out: ptr<i32>, src: ptr<i32>, n: i32) {
    var s = 0;
    for i in range(0, n) { s = s + atomic_load(src + i); }
    out[0] = s;
}""", "k.kc", "llvm", "cpu")
    waits = compile_source_to("""
kernel waits(out: ptr<i32>, src: ptr<i32>) {
    var s = 0;
    while atomic_load(src) == 0 { s = s + 1; }
    out[0] = s;
}""", "k.kc", "llvm", "cpu")
    assert "spin.cont" not in counted and "spin.cont" in waits
