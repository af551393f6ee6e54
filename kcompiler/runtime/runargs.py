"""Kernel arguments written on the command line, for ``kc run``.

::

    x=@input.npy         an array read from a .npy file
    y=zeros:f32[1024]    a new array: zeros, ones, arange (0, 1, 2...) or rand (uniform in [0, 1) for
                         floats, [0, 100) for integers), of a dtype and a length (or shape: [4,256])
    n=1024  alpha=0.5    a scalar (an int, or a float when it has a '.', 'e', 'inf' or 'nan')
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

#: dtype names as the kernel language spells them.
DTYPES = {"bool": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
          "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "f16": np.float16,
          "f32": np.float32, "f64": np.float64}

_NEW = re.compile(r"^(zeros|ones|arange|rand):(\w+)\[([0-9, ]+)\]$")


class ArgError(ValueError):
    """A ``NAME=VALUE`` argument that cannot be understood; the message says which and why."""


def _dtype(name: str) -> Any:
    if name == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    try:
        return DTYPES[name]
    except KeyError:
        raise ArgError(f"unknown dtype {name!r}; expected one of: {', '.join([*DTYPES, 'bf16'])}") from None


def parse_value(name: str, text: str) -> Any:
    """The value of one ``NAME=VALUE`` argument. Raises ArgError."""
    if text.startswith("@"):
        try:
            return np.load(text[1:], allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ArgError(f"{name}: cannot read {text[1:]}: {e}") from None
    m = _NEW.match(text)
    if m:
        kind, dt, dims = m.group(1), _dtype(m.group(2)), m.group(3)
        shape = tuple(int(d) for d in dims.split(",") if d.strip())
        n = math.prod(shape)
        try:
            return _new_array(kind, dt, shape, n)
        except (MemoryError, ValueError, OverflowError):  # numpy: "array is too big" is a ValueError
            nbytes = n * np.dtype(dt).itemsize
            raise ArgError(f"{name}={text}: cannot allocate {n:,} elements of {m.group(2)} "
                           f"({nbytes:,} bytes): not enough memory") from None
    if ":" in text or "[" in text:
        raise ArgError(f"{name}={text}: expected zeros|ones|arange|rand:DTYPE[N], @file.npy or a number")
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise ArgError(f"{name}={text}: not a number, an array (zeros:f32[N]) or a file (@x.npy)") from None


def _new_array(kind: str, dt: Any, shape: tuple[int, ...], n: int) -> np.ndarray:
    if kind == "zeros":
        return np.zeros(shape, dt)
    if kind == "ones":
        return np.ones(shape, dt)
    if kind == "arange":
        return np.arange(n).astype(dt).reshape(shape)
    rng = np.random.default_rng()
    return (rng.random(n) if np.dtype(dt).kind == "f" else rng.integers(0, 100, n)).astype(dt).reshape(shape)


def parse_run_args(params: Sequence[str], texts: Sequence[str]) -> list[Any]:
    """Values for the kernel parameters ``params`` (in order) from ``NAME=VALUE`` texts. Raises
    ArgError for a missing, repeated, unknown or unreadable argument."""
    given: dict[str, Any] = {}
    for t in texts:
        name, eq, value = t.partition("=")
        if not eq or not name:
            raise ArgError(f"{t!r}: write NAME=VALUE (parameters: {', '.join(params)})")
        if name not in params:
            raise ArgError(f"the kernel has no parameter {name!r} (parameters: {', '.join(params)})")
        if name in given:
            raise ArgError(f"{name} is given twice")
        given[name] = parse_value(name, value)
    missing = [p for p in params if p not in given]
    if missing:
        raise ArgError(f"missing argument{'s' * (len(missing) > 1)}: {', '.join(missing)} "
                       f"(parameters: {', '.join(params)})")
    return [given[p] for p in params]


def check_output_folder(folder: str) -> None:
    """Raise ArgError unless :func:`save_arrays` could write into ``folder`` (made if missing): its
    nearest existing ancestor is a folder this process may write in. Checked before a launch, so
    that a run's results are not lost to a bad ``--out``."""
    path = Path(folder)
    while not path.exists() and path.parent != path:  # exists() is False under a regular file too
        path = path.parent
    if path.exists() and not path.is_dir():
        raise ArgError(f"--out {folder}: {path} is a file, not a folder")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ArgError(f"--out {folder}: cannot write in {path}")


def save_arrays(folder: str, params: Sequence[str], values: Sequence[Any]) -> Iterator[str]:
    """Write each array argument to ``folder/NAME.npy``; yields a line per file written."""
    os.makedirs(folder, exist_ok=True)
    for name, v in zip(params, values):
        if isinstance(v, np.ndarray):
            path = os.path.join(folder, name + ".npy")
            np.save(path, v)
            yield f"wrote {path} ({v.dtype}{list(v.shape)})"
