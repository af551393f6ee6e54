"""The slow sweeps' sampling (tests/conftest.py): by default a deterministic sample of each
parametrised slow test runs; ``-m slow`` (or KC_FULL_SWEEPS=1) runs all of it."""
from __future__ import annotations

import pytest

from .. import conftest


class _Item:
    def __init__(self, nodeid: str, sample: int | None = None, slow: bool = True, gpu: bool = False) -> None:
        self.nodeid = nodeid
        self._mark = pytest.mark.slow(sample=sample).mark if sample else pytest.mark.slow.mark
        self._slow, self._gpu = slow, gpu

    def get_closest_marker(self, name: str):
        if name == "gpu":
            return pytest.mark.gpu.mark if self._gpu else None
        return self._mark if name == "slow" and self._slow else None


class _Config:
    def __init__(self, markexpr: str = "") -> None:
        self.markexpr, self.deselected = markexpr, []
        self.hook = self

    def getoption(self, name: str, default=None):
        return self.markexpr if name == "markexpr" else default

    def pytest_deselected(self, items) -> None:
        self.deselected += items


def _items():
    sweep = [_Item(f"tests/test_x.py::test_sweep[{i}]") for i in range(20)]
    small = [_Item(f"tests/test_x.py::test_small[{i}]", sample=2) for i in range(5)]
    other = [_Item(f"tests/test_x.py::test_fast[{i}]", slow=False) for i in range(6)]
    single = [_Item("tests/test_x.py::test_one_slow")]
    gpu = [_Item(f"tests/test_x.py::test_sweep[cuda-{i}]", gpu=True) for i in range(7)]
    return sweep + small + other + single + gpu


def _kept(config, monkeypatch, full=None):
    if full is None:
        monkeypatch.delenv("KC_FULL_SWEEPS", raising=False)
    else:
        monkeypatch.setenv("KC_FULL_SWEEPS", full)
    items = _items()
    conftest._sample_slow(config, items)
    return [it.nodeid for it in items]


def test_default_runs_a_deterministic_sample(monkeypatch):
    config = _Config()
    kept = _kept(config, monkeypatch)
    sweep = [n for n in kept if "test_sweep[" in n and "cuda" not in n]
    assert len(sweep) == conftest.SLOW_SAMPLE
    assert len([n for n in kept if "test_small[" in n]) == 2
    assert len([n for n in kept if "test_fast[" in n]) == 6  # not slow: all of it
    assert "tests/test_x.py::test_one_slow" in kept          # samples itself (full_sweep fixture)
    assert len([n for n in kept if "[cuda-" in n]) == 7       # a GPU runs the whole sweep
    assert len(config.deselected) == 20 - conftest.SLOW_SAMPLE + 3
    assert _kept(_Config(), monkeypatch) == kept             # the same sample every run
    assert sweep != [f"tests/test_x.py::test_sweep[{i}]" for i in range(conftest.SLOW_SAMPLE)]  # spread out


def test_sample_does_not_depend_on_the_files_folder(monkeypatch):
    """A test file moved to another folder of tests/ keeps the same sample of its sweeps."""
    monkeypatch.delenv("KC_FULL_SWEEPS", raising=False)
    kept = _kept(_Config(), monkeypatch)
    moved = [_Item(it.nodeid.replace("tests/", "tests/stdlib/"), sample=it._mark.kwargs.get("sample"),
                   slow=it._slow, gpu=it._gpu) for it in _items()]
    conftest._sample_slow(_Config(), moved)
    assert [it.nodeid for it in moved] == [n.replace("tests/", "tests/stdlib/") for n in kept]


@pytest.mark.parametrize("markexpr, full", [("slow", None), ("slow or not slow", None), ("", "1")])
def test_dash_m_slow_runs_all(monkeypatch, markexpr, full):
    config = _Config(markexpr)
    assert len(_kept(config, monkeypatch, full)) == len(_items())
    assert config.deselected == []
