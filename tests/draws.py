"""Fresh random inputs that a failure can replay.

The tests check kernels against independent references on fresh random inputs, so every run draws new
ones; a draw that fails must then be reproducible. Every session has one seed (``KC_TEST_SEED`` or
pytest's ``--seed``, else a new one), which the run's header prints and, where a test failed, its
summary with the command that replays it. Each test's draws depend only on that seed and the test's
node id, not on which tests ran before it in its process or on which xdist worker ran it:

- :func:`fresh_rng` made at import time (a module's ``RNG = fresh_rng()``) starts from the seed, the
  module's name and its number in that module, and :func:`begin` (tests/conftest.py's autouse fixture,
  before each test) reseeds it from the seed, the test's node id and that module and number;
- :func:`fresh_rng` made during a test (a fixture's or the test's own) starts from the seed, the test's
  node id and its number in that test.

torch's global generator, where torch is loaded, is reseeded before each test too (``torch.randn`` in
the GPU tests). This is pytest-randomly's reseeding (which reseeds ``random`` and numpy's legacy global
state) applied to the ``numpy.random.Generator`` objects these tests keep; test order is not shuffled.
"""
from __future__ import annotations

import os
import secrets
import sys
import zlib

import numpy as np

#: The environment variable that gives (or, once a session has drawn one, holds) the session's seed.
ENV = "KC_TEST_SEED"

_seed: int | None = None
_test: str | None = None  # the node id of the test running, None outside one
_in_test = 0  # generators made during the current test
_kept: list[tuple[np.random.Generator, str, int]] = []  # import-time generators: (it, module, number)
_per_module: dict[str, int] = {}


def seed() -> int:
    """The session's seed: set by :func:`set_seed`, else ``KC_TEST_SEED``, else a new 32-bit one (then
    written to ``KC_TEST_SEED``, so that processes the tests start draw from it too)."""
    if _seed is None:
        given = os.environ.get(ENV)
        set_seed(given if given else secrets.randbits(32))
    return _seed


def set_seed(value: int | str) -> None:
    """Makes ``value`` the session's seed (tests/conftest.py: ``--seed``, or the xdist controller's);
    ValueError unless it is a non-negative integer (numpy's SeedSequence takes no other)."""
    global _seed
    try:
        seed = int(value)
    except ValueError:
        seed = -1
    if seed < 0:
        raise ValueError(f"the tests' seed ({ENV} or --seed) is a non-negative integer, not {value!r}")
    _seed = seed
    os.environ[ENV] = str(_seed)


def _crc(text: str) -> int:
    return zlib.crc32(text.encode())


def _bits(*key: int) -> np.random.PCG64:
    return np.random.PCG64(np.random.SeedSequence([seed(), *key]))


def fresh_rng() -> np.random.Generator:
    """A numpy Generator (PCG64) whose draws are new each session and replayable from its seed (the
    module docstring says from what it starts and when it is reseeded)."""
    global _in_test
    if _test is not None:
        _in_test += 1
        return np.random.Generator(_bits(_crc(_test), _in_test))
    module = sys._getframe(1).f_globals.get("__name__", "?")
    number = _per_module[module] = _per_module.get(module, 0) + 1
    rng = np.random.Generator(_bits(_crc(module), number))
    _kept.append((rng, module, number))
    return rng


def begin(nodeid: str) -> None:
    """Before the test ``nodeid``: reseeds every import-time :func:`fresh_rng` (and torch's global
    generator where torch is loaded) from the session's seed and ``nodeid``."""
    global _test, _in_test
    _test, _in_test = nodeid, 0
    for rng, module, number in _kept:
        rng.bit_generator.state = _bits(_crc(nodeid), _crc(module), number).state
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "manual_seed"):
        torch.manual_seed(_bits(_crc(nodeid)).random_raw() & (2 ** 63 - 1))


def end() -> None:
    """After a test: generators made from here on count as import-time ones."""
    global _test
    _test = None
