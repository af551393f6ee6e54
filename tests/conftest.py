"""Shared fixtures: the targets present here, the ``gpu`` and ``amdgpu`` markers, and a private
kernel cache.

- ``target``: parametrises a test over "cpu" and "cuda" (marked ``gpu``), so one execution test runs
  on every target; ``pytest -m gpu`` selects the CUDA variants.
- ``@pytest.mark.gpu``: the test needs a CUDA GPU; without one it is skipped with the reason.
- ``@pytest.mark.amdgpu``: the test needs an AMD GPU through HIP (hip-python and ROCm); without one
  it is skipped with the reason.
- Every test session compiles into its own temporary cache folder (``KC_CACHE_DIR``), so results never
  depend on what an earlier run left in ``~/.cache/kcompiler``.
- ``@pytest.mark.slow``: an exhaustive sweep. By default (``python -m pytest -q``, what CI runs) only a
  deterministic sample of each slow sweep runs: ``slow(sample=N)`` keeps N of a parametrised test's
  cases (default :data:`SLOW_SAMPLE`), the same N every run (the smallest hashes of their ids, the file's folders left out), the
  rest reported as deselected (cases marked ``gpu`` all run: a GPU runs a sweep in moments, and
  ``pytest -m gpu`` must cover it whole); a test that sweeps inside takes the ``full_sweep`` fixture (False) and
  runs its own sample. ``pytest -m slow`` runs every case of every slow sweep (and nothing else);
  ``KC_FULL_SWEEPS=1`` runs every case with the rest of the suite.
- Fresh random inputs every session, replayable: ``fresh_rng()`` (tests/draws.py) is reseeded before
  each test from the session's seed and the test's id; the header prints the seed (``--seed N`` or
  ``KC_TEST_SEED=N`` gives it), and a run with failures ends with the command that replays them.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile

import pytest

from . import draws

_session_cache = tempfile.mkdtemp(prefix="kc-test-cache-")
os.environ["KC_CACHE_DIR"] = _session_cache


def cuda_present() -> bool:
    """Whether the CUDA driver (through cuda-python) finds at least one GPU."""
    try:
        from kcompiler.runtime.cuda import is_available
    except Exception:  # noqa: BLE001 - no cuda-python: no GPU
        return False
    return is_available()


HAS_CUDA = cuda_present()


def hip_missing() -> str | None:
    """Why no AMD GPU can be used through HIP here, or None when one can."""
    try:
        from kcompiler.runtime import hip
    except Exception as e:  # noqa: BLE001
        return f"kcompiler.runtime.hip cannot be imported: {e}"
    return hip.unavailable_reason()


HIP_MISSING = hip_missing()
# "cuda" is always listed, marked gpu: without a GPU its variants are skipped with the reason.
TARGETS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=TARGETS)
def target(request) -> str:
    """A target present here: 'cpu', and 'cuda' when a GPU is."""
    return request.param


#: Cases of a parametrised slow sweep that run by default (``slow(sample=N)`` says otherwise).
SLOW_SAMPLE = 4


def _full_sweeps(config) -> bool:
    """Whether the slow sweeps run whole: ``-m`` names them, or ``KC_FULL_SWEEPS=1``."""
    return "slow" in (config.getoption("markexpr", "") or "") or os.environ.get("KC_FULL_SWEEPS") == "1"


@pytest.fixture
def full_sweep(request) -> bool:
    """For a slow test that sweeps inside: True when the sweep should run whole (``-m slow``),
    False when a sample of it should."""
    return _full_sweeps(request.config)


def _sample_key(nodeid: str) -> str:
    """What a case's place in the sample is drawn from: its node id without the test file's folders
    (``test_math.py::test_f[cpu-exp]``), so that moving a file between tests/'s folders keeps its
    sample."""
    file, sep, rest = nodeid.partition("::")
    return file.rsplit("/", 1)[-1] + sep + rest


def _sample_slow(config, items) -> None:
    """Deselects all but a deterministic sample of each parametrised slow test's cases (those not
    marked gpu). Cases of one test marked with different ``sample`` sizes are sampled apart, each
    set by its own size."""
    if _full_sweeps(config):
        return
    groups: dict[tuple[str, int], list] = {}
    for item in items:
        mark = item.get_closest_marker("slow")
        if mark is not None and "[" in item.nodeid and item.get_closest_marker("gpu") is None:
            n = mark.kwargs.get("sample", SLOW_SAMPLE)
            groups.setdefault((item.nodeid.split("[", 1)[0], n), []).append(item)
    drop = set()
    for (_, n), cases in groups.items():
        ranked = sorted(cases, key=lambda it: hashlib.sha256(_sample_key(it.nodeid).encode()).hexdigest())
        drop.update(id(it) for it in ranked[n:])
    if drop:
        config.hook.pytest_deselected(items=[it for it in items if id(it) in drop])
        items[:] = [it for it in items if id(it) not in drop]


def pytest_collection_modifyitems(config, items):
    _sample_slow(config, items)
    skip_cuda = pytest.mark.skip(reason="needs a CUDA GPU: the CUDA driver found none here")
    skip_amd = pytest.mark.skip(reason=f"needs an AMD GPU: {HIP_MISSING}")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_cuda)
        if "amdgpu" in item.keywords and HIP_MISSING:
            item.add_marker(skip_amd)


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=None,
                     help="the seed of the tests' random inputs (tests/draws.py; default: KC_TEST_SEED, else a new one)")


def pytest_configure(config):
    given = getattr(config, "workerinput", {}).get("kc_test_seed", config.getoption("seed"))
    try:
        if given is not None:
            draws.set_seed(given)
        draws.seed()
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist: each worker draws from the controller's seed."""
    node.workerinput["kc_test_seed"] = draws.seed()


def pytest_report_header(config):
    return f"random inputs: seed {draws.seed()} (tests/draws.py; replay with --seed {draws.seed()})"


@pytest.fixture(autouse=True)
def _replayable_draws(request):
    """Reseeds the tests' generators for this test (tests/draws.py)."""
    draws.begin(request.node.nodeid)
    yield
    draws.end()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    failed = [r.nodeid for r in terminalreporter.stats.get("failed", [])]
    if failed:
        ids = " ".join(f"'{n}'" for n in failed[:8])
        terminalreporter.write_line(f"random inputs: seed {draws.seed()}; replay: python -m pytest --seed {draws.seed()} {ids}")


def pytest_unconfigure(config):
    shutil.rmtree(_session_cache, ignore_errors=True)
