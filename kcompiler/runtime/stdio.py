"""Where a kernel's printf output goes, and getting it into Python's ``sys.stdout``.

Three writers print a kernel's lines: CUDA's vprintf (the driver writes them to file descriptor 1
through the C library's ``stdout`` when the launch is synchronised), the HIP runtime (clr formats
them with ``vfprintf(stdout, ...)``: rocclr/device/devhcprintf.cpp), and kcompiler's own hostcall
listener and printf-buffer reader (CPU target, NVIDIA hostcall/buffered modes), which write to
Python's ``sys.stdout``. When fd 1 is not a terminal (pytest, a pipe, Jupyter) the C library
buffers its ``stdout``: lines appear only at exit, vanish on a crash or ``os._exit``, and never pass
through ``sys.stdout``. So the runtimes call :func:`flush_c_stdio` after synchronising a launch of a
printing kernel, and :func:`capture_printf` takes fd 1 and ``sys.stdout`` for a block of code and
hands back (or replays into ``sys.stdout``) what every writer printed.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import io
import sys
import threading
from typing import Any

_libc: Any = None
_libc_lock = threading.Lock()


def _c_library() -> Any:
    global _libc
    with _libc_lock:
        if _libc is None:
            name = ctypes.util.find_library("c")
            _libc = ctypes.CDLL(name) if name else ctypes.CDLL(None)
            _libc.fflush.argtypes = [ctypes.c_void_p]
            _libc.fflush.restype = ctypes.c_int
        return _libc


def flush_c_stdio() -> None:
    """``fflush(NULL)``: write out every C stdio stream's buffer (what the CUDA driver's vprintf and
    the HIP runtime's printf left in C's ``stdout``), then Python's ``sys.stdout`` and
    ``sys.stderr``. Never raises (a closed Python stream is skipped)."""
    try:
        _c_library().fflush(None)
    except OSError:  # no C library to load: nothing of C's to flush
        pass
    for s in (sys.stdout, sys.stderr):
        try:
            if s is not None:
                s.flush()
        except (ValueError, OSError):
            pass


class CapturedPrintf:
    """What :func:`capture_printf` caught: :attr:`text` (str, complete once the ``with`` block has
    exited) and :attr:`lines` (its lines without their newlines)."""

    def __init__(self) -> None:
        self.text = ""

    @property
    def lines(self) -> list[str]:
        """The captured text split into lines, without their newlines."""
        return self.text.splitlines()

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<CapturedPrintf: {len(self.lines)} lines>"


class capture_printf:
    """Catch everything printed to standard output inside the ``with`` block — kernels' printf on
    every target (CUDA's vprintf and the HIP runtime write to file descriptor 1 through C stdio;
    kcompiler's own printf service to ``sys.stdout``) and anything else — then replay it into
    ``sys.stdout`` (``echo=True``, the default: the lines reach Jupyter and pytest's ``capsys``) or
    only keep it (``echo=False``). The ``as`` value is a :class:`CapturedPrintf`::

        with kc.capture_printf(echo=False) as out:
            mod.hello[1, 4]()
            mod.device.synchronize()
        assert out.lines == ["hello from 0", ...]

    Fd 1 goes to a pipe (drained by a thread, so a kernel printing more than a pipe holds does not
    block) through ``wurlitzer`` (``pip install kcompiler[capture]``; imported on first use; an
    ImportError that says so otherwise). C stdio is flushed (:func:`flush_c_stdio`) on entry, so
    earlier output is not caught, and on exit, so nothing of the block's is left behind. Lines
    from fd 1 come before those written to ``sys.stdout`` in the block (a kernel prints through
    one of the two). Nesting works; one capture per process at a time (fd 1 is per process)."""

    def __init__(self, echo: bool = True):
        self.echo = echo
        self.result = CapturedPrintf()
        self._ctx: Any = None
        self._fd_out: Any = None
        self._saved: Any = None
        self._py = io.StringIO()

    def __enter__(self) -> CapturedPrintf:
        try:
            from wurlitzer import pipes
        except ImportError:
            raise ImportError("kc.capture_printf needs the wurlitzer package "
                              "(pip install wurlitzer, or kcompiler[capture])") from None
        flush_c_stdio()
        self._fd_out = io.StringIO()
        self._ctx = pipes(stdout=self._fd_out, stderr=None)
        self._ctx.__enter__()
        self._saved = sys.stdout
        sys.stdout = self._py
        return self.result

    def __exit__(self, *exc: Any) -> None:
        try:
            flush_c_stdio()
        finally:
            sys.stdout = self._saved
            self._ctx.__exit__(*exc)
        self.result.text = self._fd_out.getvalue() + self._py.getvalue()
        if self.echo and self.result.text:
            sys.stdout.write(self.result.text)
            sys.stdout.flush()


__all__ = ["flush_c_stdio", "capture_printf", "CapturedPrintf"]
