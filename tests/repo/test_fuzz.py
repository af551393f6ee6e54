"""The mutational fuzzer (kcompiler/tools/fuzz.py): a short deterministic run in CI, a long one under
``-m slow``, its minimiser and worker, and the reduced inputs it found (tests/programs/fuzz/)."""
from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcompiler.tools import fuzz
from ..paths import ROOT

CORPUS = fuzz.corpus(ROOT)


@pytest.fixture(scope="module")
def worker():
    w = fuzz.Worker(timeout=60)
    yield w
    w.stop()


def test_corpus_has_every_kind_of_seed():
    names = [n for n, _ in CORPUS]
    for prefix in ("examples/", "stdlib/", "tests/programs/"):
        assert any(n.startswith(prefix) for n in names), prefix
    for folder in ("tests/frontend/", "tests/backends/nvptx/", "tests/runtime/"):  # the test files' strings
        assert any(n.startswith(folder + "test_") and "#" in n for n in names), folder
    assert len(CORPUS) > 100


def test_mutations_are_deterministic_and_change_the_source():
    src = dict(CORPUS)["examples/saxpy.kc"]
    a = [fuzz.mutate(src, random.Random(k), n=2) for k in range(20)]
    b = [fuzz.mutate(src, random.Random(k), n=2) for k in range(20)]
    assert a == b
    assert sum(m != src for m in a) >= 15
    for name, m in fuzz.MUTATIONS.items():  # each mutation does something on a real program
        assert any(m(src, random.Random(k), src) != src for k in range(10)), name
    assert "".join(fuzz.tokens(src)) == src


def test_minimize_finds_the_smallest_failing_input():
    src = "\n".join(f"let v{i} = {i};" for i in range(40)) + "\nboom(v7);\n" + "tail;\n" * 10
    small = fuzz.minimize(src, lambda s: "boom(" in s and ")" in s.split("boom(", 1)[1])
    assert small.replace(" ", "").replace("\n", "") == "boom()"


def test_worker_observes_deaths_hangs_and_exceptions(monkeypatch):
    monkeypatch.setenv("KC_FUZZ_SELFTEST", "1")
    w = fuzz.Worker(timeout=3)
    try:
        r = w.run("//@fuzz-selftest abort", [("nvptx", "sm_90")])
        assert r.outcome == "death" and r.target == "nvptx:sm_90" and "rc -6" in r.detail, r
        r = w.run("//@fuzz-selftest hang", [("nvptx", "sm_90")])
        assert r.outcome == "hang", r
        r = w.run("//@fuzz-selftest raise", [("nvptx", "sm_90")])
        assert r.outcome == "exception" and r.detail.startswith("ZeroDivisionError@tools/fuzz.py:"), r
        assert w.run(dict(CORPUS)["examples/vadd.kc"], [("nvptx", "sm_90"), ("cpu", None)]).outcome == "ok"
        assert w.run("kernel k( {", [("nvptx", "sm_90")]).outcome == "error"
    finally:
        w.stop()


@pytest.mark.skipif(not hasattr(fuzz.os, "fork") or fuzz.os.name != "posix", reason="needs fork and process groups")
def test_worker_hang_kills_the_forked_child_too(monkeypatch):
    """A hang in a child the worker forked (as the code generator forks one) is killed with the worker."""
    monkeypatch.setenv("KC_FUZZ_SELFTEST", "1")
    w = fuzz.Worker(timeout=3)
    try:
        r = w.run("//@fuzz-selftest hang-child", [("nvptx", "sm_90")])
        assert r.outcome == "hang", r
        pids = [int(m.group(1)) for ln in w.stderr_tail if (m := re.match(r"selftest child (\d+)", ln))]
        assert len(pids) == 1, w.stderr_tail
    finally:
        w.stop()
    deadline = time.monotonic() + 5
    while _alive(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pids[0]), f"the worker's forked child {pids[0]} outlived it"


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:
        try:
            fuzz.os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state != "Z"


@settings(derandomize=True, max_examples=250, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seed=st.sampled_from(range(len(CORPUS))), other=st.sampled_from(range(len(CORPUS))),
       rng=st.randoms(use_true_random=False), subset=st.integers(0, 7))
def test_fuzz_short(worker, seed, other, rng, subset):
    """A few hundred mutated inputs: each a located error or a success, never an exception, a hang
    or a dead process (every 8th also for amdgcn gfx942/gfx1100 and the CPU)."""
    src = fuzz.mutate(CORPUS[seed][1], rng, CORPUS[other][1])
    r = worker.run(src, fuzz.targets_for(subset, 8))
    assert r.outcome in ("ok", "error"), f"{r}\n--- input (from {CORPUS[seed][0]}):\n{src}"


@pytest.mark.slow
def test_fuzz_long(full_sweep):
    """python -m kcompiler.tools.fuzz -n 3000 as a test: no failure of any kind. Only with -m slow
    (test_fuzz_short is its sample in the default run)."""
    if not full_sweep:
        pytest.skip("the long fuzz runs with -m slow; test_fuzz_short is its default sample")
    s = fuzz.run(3000, seed=7, jobs=2, timeout=60)
    assert not s.first, s.table()


REGRESSIONS = sorted((ROOT / "tests/programs/fuzz").glob("*.kc"))
PENDING = sorted((ROOT / "tests/programs/fuzz/pending").glob("*.kc"))


def _targets(text: str) -> list[tuple[str, str | None]]:
    m = re.search(r"^// targets: (.*)$", text, re.M)
    specs = m.group(1).split() if m else ["nvptx:sm_90"]
    return [(t, a or None) for t, _, a in (s.partition(":") for s in specs)]


@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.stem)
def test_fuzz_regressions(worker, path):
    """Inputs the fuzzer reduced: each now a located error or a success on its targets; a file's
    ``// timeout: N`` line (seconds a target) replaces the worker's 60 for a hang that took about that
    long (a hang's bound, many times what the fixed compile takes, not a speed goal)."""
    text = path.read_text()
    m = re.search(r"^// timeout: (\d+)$", text, re.M)
    w = fuzz.Worker(timeout=float(m.group(1))) if m else worker
    try:
        r = w.run(text, _targets(text))
    finally:
        if w is not worker:
            w.stop()
    assert r.outcome in ("ok", "error"), r


@pytest.mark.parametrize("path", PENDING, ids=lambda p: p.stem)
@pytest.mark.xfail(strict=True, reason="a crash family another branch fixes: move the file up one folder "
                                       "once this passes")
def test_fuzz_pending(worker, path):
    text = path.read_text()
    r = worker.run(text, _targets(text))
    assert r.outcome in ("ok", "error"), r
