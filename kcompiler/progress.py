"""Progress of long work on stderr: the kernel being compiled, the autotuner's candidates being timed.

A first ``ops.matmul`` with an epilogue compiles its kernel and, on a GPU, times a few tile
candidates: seconds of silence without this. Lines start with ``kc:`` and go to stderr.

When they are shown (``KC_VERBOSE``, read at each step; ``kc -v`` shows all, as ``KC_VERBOSE=1``):

- ``KC_VERBOSE=1`` (or ``true``, ``yes``, ``on``): every step, at once, and its time when it ends.
- ``KC_VERBOSE=0`` (or ``false``, ``no``, ``off``): never.
- unset (or empty): where stderr is a terminal, a step that has lasted :data:`DELAY_S` (then the
  rest of it, and its time); in non-interactive runs (stderr not a terminal: CI, logs) nothing.

The same lines are logged to the ``kcompiler.progress`` logger (level INFO) whether shown or not,
so that an application can route them with :mod:`logging` instead.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from typing import Iterator

#: Seconds a step must last before it is shown when ``KC_VERBOSE`` is unset and stderr is a terminal.
DELAY_S = 1.0

#: True while ``kc -v`` runs: every step is shown, whatever KC_VERBOSE says.
forced: bool | None = None

log = logging.getLogger("kcompiler.progress")
_lock = threading.Lock()
_local = threading.local()


def mode() -> str:
    """'all' (KC_VERBOSE on), 'off' (KC_VERBOSE off, or unset with stderr not a terminal) or 'slow'
    (unset, stderr a terminal: steps longer than :data:`DELAY_S`). Raises nothing: an unknown value
    of KC_VERBOSE counts as on."""
    if forced:
        return "all"
    v = os.environ.get("KC_VERBOSE", "").strip().lower()
    if v in ("0", "false", "no", "off"):
        return "off"
    if v:
        return "all"
    try:
        return "slow" if sys.stderr.isatty() else "off"
    except (AttributeError, ValueError):  # replaced or closed stderr
        return "off"


def _write(line: str) -> None:
    with _lock:
        try:
            print(f"kc: {line}", file=sys.stderr, flush=True)
        except (AttributeError, ValueError, OSError):
            pass


class _Step:
    def __init__(self, what: str, shown: bool) -> None:
        self.what, self.shown, self.start = what, shown, time.perf_counter()
        self.pending: list[str] = []

    def show(self) -> None:
        """The step has become worth showing: its title, then what it noted so far."""
        with _lock:
            if self.shown:
                return
            self.shown = True
            pending, self.pending = self.pending, []
        _write(f"{self.what} ...")
        for line in pending:
            _write(f"  {line}")


@contextlib.contextmanager
def step(what: str) -> Iterator[None]:
    """Marks a piece of work that may take a while (``what``: e.g. 'compiling matmul[BM=128] for
    nvptx sm_90'): shown at once, or after :data:`DELAY_S`, or never (:func:`mode`), followed by its
    time when it ends. Steps nest (a candidate's compile inside a tuning); an exception propagates,
    the step then ending with 'failed'."""
    m = mode()
    log.info("%s", what)
    s = _Step(what, shown=False)
    parent = getattr(_local, "step", None)
    _local.step = s
    timer = None
    if m == "all":
        s.show()
    elif m == "slow":
        timer = threading.Timer(DELAY_S, s.show)
        timer.daemon = True
        timer.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        if timer is not None:
            timer.cancel()
            timer.join()  # a title being written now comes before the end line
        _local.step = parent
        took = time.perf_counter() - s.start
        log.info("%s: %s in %.2f s", what, "done" if ok else "failed", took)
        if s.shown:
            _write(f"{what}: {'done' if ok else 'failed'} in {took:.2f} s")


def spelled(kernel: str, values: dict) -> str:
    """``kernel[NAME=VALUE, ...]`` with its compile-time values as the language spells them (types
    by name, fns by their name), or just ``kernel`` when it has none."""
    if not values:
        return kernel
    return f"{kernel}[{', '.join(f'{k}={str(v).lower() if isinstance(v, bool) else v}' for k, v in values.items())}]"


def note(line: str) -> None:
    """A line about the current step (a candidate's time): shown with it, or kept until the step is
    shown (a step longer than :data:`DELAY_S` shows what it noted before), or dropped."""
    log.info("%s", line)
    s = getattr(_local, "step", None)
    if s is None:
        if mode() == "all":
            _write(line)
        return
    with _lock:
        if not s.shown:
            s.pending.append(line)
            return
    _write(f"  {line}")


__all__ = ["DELAY_S", "mode", "note", "spelled", "step"]
