"""The C library's snprintf as a test oracle, run in a child process of its own.

Why a child process: once any printf modifier has been registered in a process (libquadmath does so
when it is loaded, and numpy's BLAS brings it in), glibc formats through another code path whose
results differ in corners (``%Lu``/``%qd`` read 32 bits, ``%0*f`` with a negative width pads with
zeros on the right). The child imports nothing but ctypes, so it answers with glibc's ordinary path.

Arguments travel as (kind, value) pairs: "u64" (a 64-bit word, as the HIP runtime passes every
integer, %c and '*' argument to vfprintf), "f64" (double), "f80" (long double), "str" (bytes or
None), "ptr" (int, 0 for NULL), "out" (a writable int64, for %n).
"""
from __future__ import annotations

import pickle
import struct
import subprocess
import sys
import threading


class Snprintf:
    """``Snprintf()(fmt, args) -> bytes``: the bytes snprintf writes (NULs from %c included)."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen([sys.executable, "-S", "-I", __file__], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE)
        self._lock = threading.Lock()

    def __call__(self, fmt: bytes, args: list[tuple[str, object]]) -> bytes:
        data = pickle.dumps((bytes(fmt), list(args)))
        with self._lock:
            assert self._proc.stdin and self._proc.stdout
            self._proc.stdin.write(struct.pack("<I", len(data)) + data)
            self._proc.stdin.flush()
            (n,) = struct.unpack("<I", self._proc.stdout.read(4))
            ok, out = pickle.loads(self._proc.stdout.read(n))
        if not ok:
            raise RuntimeError(f"snprintf failed on {fmt!r}: {out}")
        return out

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin
            self._proc.stdin.close()
            self._proc.wait(timeout=10)


def _serve() -> None:
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    kinds = {"u64": ctypes.c_uint64, "f64": ctypes.c_double, "f80": ctypes.c_longdouble}
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = inp.read(4)
        if len(head) < 4:
            return
        fmt, args = pickle.loads(inp.read(struct.unpack("<I", head)[0]))
        cargs = []
        for kind, value in args:
            if kind in kinds:
                cargs.append(kinds[kind](value))
            elif kind == "str":
                cargs.append(ctypes.c_char_p(value))
            elif kind == "ptr":
                cargs.append(ctypes.c_void_p(value or None))
            else:
                cargs.append(ctypes.byref(ctypes.c_int64()))
        n = libc.snprintf(None, ctypes.c_size_t(0), fmt, *cargs)
        if n < 0:
            reply = (False, n)
        else:
            buf = ctypes.create_string_buffer(n + 1)
            libc.snprintf(buf, ctypes.c_size_t(n + 1), fmt, *cargs)
            reply = (True, buf.raw[:n])
        data = pickle.dumps(reply)
        out.write(struct.pack("<I", len(data)) + data)
        out.flush()


if __name__ == "__main__":
    _serve()
