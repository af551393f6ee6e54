"""tests/draws.py: a test's draws follow from the session's seed and its id alone."""
from __future__ import annotations

import numpy as np
import pytest

from . import draws

KEPT = draws.fresh_rng()  # an import-time generator, as the test modules keep theirs


def _first(nodeid: str) -> tuple[float, float]:
    """What the kept generator and a generator made during the test draw first, for the test nodeid."""
    draws.begin(nodeid)
    return KEPT.random(), draws.fresh_rng().random()


def test_a_tests_draws_depend_on_its_id_not_on_what_ran_before(request):
    try:
        a = _first("tests/x.py::test_a")
        KEPT.random(1000)  # what test_a drew further, and another test in between
        b = _first("tests/x.py::test_b")
        assert _first("tests/x.py::test_a") == a
        assert b != a and b[0] != a[0] and b[1] != a[1]
        assert a[0] != a[1]  # the kept generator and the test's own are not one stream
    finally:
        draws.begin(request.node.nodeid)


def test_the_seed_decides(request):
    old = draws.seed()
    try:
        a = _first("tests/x.py::test_a")
        draws.set_seed(old + 1)
        assert _first("tests/x.py::test_a") != a
        draws.set_seed(old)
        assert _first("tests/x.py::test_a") == a
    finally:
        draws.set_seed(old)
        draws.begin(request.node.nodeid)


def test_a_bad_seed_is_refused(request):
    old = draws.seed()
    try:
        for bad in (-1, "x1"):
            with pytest.raises(ValueError, match="non-negative integer"):
                draws.set_seed(bad)
        assert draws.seed() == old
    finally:
        draws.set_seed(old)
        draws.begin(request.node.nodeid)


def test_fresh_rng_is_a_numpy_generator():
    assert isinstance(KEPT, np.random.Generator)
    assert 0.0 <= KEPT.random() < 1.0


def test_the_tests_draw_through_fresh_rng():
    """No test draws from a generator it cannot replay: numpy's unseeded default_rng() or its legacy
    global functions (a seeded generator, default_rng(7), is replayable and allowed)."""
    import re
    from pathlib import Path

    unreplayable = re.compile(r"default_rng\(\)|np\.random\.(rand|randn|randint|random|normal|uniform|choice)\(")
    here = Path(__file__).parent
    found = [f"{p.relative_to(here.parent)}:{i}" for p in sorted(here.rglob("*.py")) if p.name != "test_draws.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if unreplayable.search(line)]
    assert not found, f"draw through tests/draws.py's fresh_rng() instead: {found}"
