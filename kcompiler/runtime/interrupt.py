"""Ctrl-C during a CPU-target launch.

A CPU launch runs the native block scheduler (``backends/cpu/scheduler.py``) through ctypes. While
it runs, the main thread executes no Python code, so Python's SIGINT handler, which raises
KeyboardInterrupt, would wait for the launch to return: an endless kernel ignored Ctrl-C.

During a launch on the main thread, :func:`interruptible` has CPython's C-level signal handler also
write the signal's number to a pipe (``signal.set_wakeup_fd``, the mechanism asyncio uses); a
daemon thread reading the pipe calls the launch's ``stop``, which sets the launch's stop flag. The
scheduler checks that flag between blocks and after every resumption of a thread (each barrier,
warp operation or ``nanosleep`` a thread reaches), so the launch returns, and the caller raises
KeyboardInterrupt. A wakeup fd set before the launch (asyncio's) gets every byte forwarded and is
restored afterwards.

A thread that loops without reaching any of those points never returns to the scheduler and cannot
be stopped. If the launch has not returned :data:`GRACE_SECONDS` after Ctrl-C, a message says so, and
a further Ctrl-C ends the process at once (exit status 130), as nothing else can.

Only launches on the main thread with Python's default SIGINT handler are watched: a program that
installed its own handler, or ignores SIGINT, keeps its behaviour.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Callable

import _signal

#: Seconds a launch has to return after Ctrl-C before the message about a second Ctrl-C.
GRACE_SECONDS = 1.0


class interruptible:  # noqa: N801 - used as a context manager, like contextlib's
    """``with interruptible(stop, what):`` Ctrl-C within the block calls ``stop()`` (from another
    thread) when the block runs on the main thread with Python's default SIGINT handler; ``what``
    names the launch in messages ("kernel 'k'"). Python's own KeyboardInterrupt still follows, once
    the main thread runs Python code again. Costs a few microseconds a launch."""

    __slots__ = ("stop", "what", "forward", "previous", "finished", "stuck", "outer", "watching")

    def __init__(self, stop: Callable[[], None], what: str):
        self.stop, self.what = stop, what
        self.finished = False
        self.stuck = False  #: Ctrl-C came and the launch did not return within GRACE_SECONDS
        self.watching = False

    def __enter__(self) -> "interruptible":
        global _active
        # _signal.getsignal: signal.getsignal's enum conversion costs more than the rest together.
        if threading.current_thread() is not _MAIN or _signal.getsignal(signal.SIGINT) is not _DEFAULT:
            return self
        fd = _pipe()
        self.previous = signal.set_wakeup_fd(fd, warn_on_full_buffer=False)
        self.forward = self.previous if self.previous != fd else -1
        with _lock:
            self.outer, _active = _active, self
        self.watching = True
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        if not self.watching:
            return
        with _lock:
            _active = self.outer
        self.finished = True
        signal.set_wakeup_fd(self.previous)


_MAIN = threading.main_thread()
_DEFAULT = signal.default_int_handler
_lock = threading.Lock()
_active: interruptible | None = None
_write_fd = -1


def _pipe() -> int:
    """The write end of the process's wakeup pipe (made, with its reader thread, on first use)."""
    global _write_fd
    with _lock:
        if _write_fd < 0:
            r, w = os.pipe()
            os.set_blocking(w, False)  # set_wakeup_fd requires it: a signal handler must not block
            threading.Thread(target=_read, args=(r,), name="kc-interrupt", daemon=True).start()
            _write_fd = w
        return _write_fd


def _read(fd: int) -> None:
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:  # pragma: no cover - the pipe is never closed
            return
        with _lock:
            w = _active
        if w is None:
            continue
        if w.forward >= 0:
            try:
                os.write(w.forward, data)
            except OSError:
                pass
        if signal.SIGINT not in data:
            continue
        if w.stuck:
            sys.stderr.write("\nkc: ending the process (Ctrl-C twice)\n")
            sys.stderr.flush()
            os._exit(130)
        w.stop()
        deadline = time.monotonic() + GRACE_SECONDS
        while not w.finished and time.monotonic() < deadline:
            time.sleep(0.01)
        if not w.finished:
            w.stuck = True
            sys.stderr.write(f"\nkc: {w.what} did not stop at Ctrl-C: a thread is running without "
                             f"reaching a barrier, warp operation or nanosleep, where the CPU target "
                             f"can stop it; press Ctrl-C again to end the process\n")
            sys.stderr.flush()


__all__ = ["interruptible", "GRACE_SECONDS"]
