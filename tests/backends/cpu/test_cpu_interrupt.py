"""Ctrl-C stops an endless CPU-target kernel (runtime/interrupt.py): the kernel runs in a child
process, which signals that it has started (a printf from inside the kernel), gets SIGINT, and must
end with KeyboardInterrupt within seconds. Every wait has a timeout, so a regression fails instead
of hanging the suite."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ...paths import ROOT


_CHILD = """
import sys
import numpy as np
sys.path.insert(0, {root!r})
import kcompiler as kc
mod = kc.compile({src!r}, target="cpu", path="endless.kc")
flag = np.zeros(2, np.int32)
import signal, socket
r, w = socket.socketpair()  # a wakeup fd of the program's own, as asyncio sets one
r.setblocking(False)
w.setblocking(False)
signal.set_wakeup_fd(w.fileno())
try:
    mod.endless[{grid}, {block}](flag)
except KeyboardInterrupt:
    restored = signal.set_wakeup_fd(-1) == w.fileno()
    forwarded = signal.SIGINT in r.recv(64)
    print(f"KeyboardInterrupt restored={{restored}} forwarded={{forwarded}}", flush=True)
    sys.exit(3)
print("returned", flush=True)
"""

#: The whole first warp prints (a warp whose other lanes spun on would never release its printf).
STARTED = 'if block_id.x == 0 && thread_id.x < 32 { printf("started\\n"); }'
#: Threads that wait for a flag nobody sets, backing off with nanosleep (a yield to the scheduler).
SPIN = f"kernel endless(flag: ptr<i32>) {{ {STARTED} while flag[0] == 0 {{ nanosleep(1000); }} }}"
#: Threads that wait at a barrier in a loop that never ends.
BARRIER = f"kernel endless(flag: ptr<i32>) {{ {STARTED} while flag[0] == 0 {{ barrier(); }} }}"
#: Short blocks, but 2^31 - 1 of them: hours of work, stopped between blocks.
BLOCKS = f"kernel endless(flag: ptr<i32>) {{ {STARTED} if flag[0] != 0 {{ flag[1] = 1; }} }}"
#: A thread that loops without any point where the scheduler regains control.
BUSY = f"kernel endless(flag: ptr<i32>) {{ {STARTED} while flag[0] == 0 {{ }} }}"


class Child:
    """The child process, its stdout lines in a queue (read by a thread, so waits can time out)."""

    def __init__(self, src: str, grid: int, block: int, threads: int):
        script = _CHILD.format(root=str(ROOT), src=src, grid=grid, block=block)
        env = {**os.environ, "KC_CPU_THREADS": str(threads)}
        # The child gets SIGINT's default disposition, as in a terminal: a test runner started in the
        # background or as a pytest-xdist worker may ignore SIGINT, and the child would inherit that.
        self.p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env,
                                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.p.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            assert line is not None, f"child ended before {text!r}: {self.p.wait()} {self.p.stderr.read()}"
            if line == text:
                return

    def finish(self, timeout: float) -> tuple[int, str]:
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            pytest.fail(f"the kernel did not stop within {timeout} s of SIGINT")
        return rc, self.p.stderr.read()

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


@pytest.mark.parametrize("src, grid, block, threads", [
    (SPIN, 1, 64, 1),
    (BARRIER, 4, 128, 1),
    (BLOCKS, 2**31 - 1, 1024, 2),  # several workers: blocks of 1024 threads spread over 2 of them
], ids=["nanosleep", "barrier", "blocks"])
def test_ctrl_c_stops_an_endless_kernel(src, grid, block, threads):
    child = Child(src, grid, block, threads)
    try:
        child.expect("started", timeout=120)  # compiling comes first
        time.sleep(0.2)
        t0 = time.monotonic()
        child.p.send_signal(signal.SIGINT)
        # ... and the program's own wakeup fd got the signal and is back in place after the launch
        child.expect("KeyboardInterrupt restored=True forwarded=True", timeout=10)
        rc, err = child.finish(timeout=10)
        assert rc == 3, err
        assert time.monotonic() - t0 < 10
    finally:
        child.kill()


def test_second_ctrl_c_ends_a_kernel_that_cannot_be_stopped():
    """A thread that never yields cannot be stopped: after the grace period a message says so, and
    the next Ctrl-C ends the process with status 130."""
    child = Child(BUSY, 1, 32, 1)
    try:
        child.expect("started", timeout=120)
        # The lanes still wait for printf's reply (stoppable) for a moment after the line appears;
        # a wait that is too short can only fail the test below, not pass it wrongly.
        time.sleep(1.5)
        child.p.send_signal(signal.SIGINT)
        time.sleep(3)  # GRACE_SECONDS is 1
        assert child.p.poll() is None
        child.p.send_signal(signal.SIGINT)
        rc, err = child.finish(timeout=10)
        assert rc == 130, err
        assert "kernel 'endless' did not stop at Ctrl-C" in err and "Ctrl-C twice" in err, err
    finally:
        child.kill()
