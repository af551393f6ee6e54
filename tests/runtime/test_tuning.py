"""kc.autotune (kcompiler/runtime/tuning.py) on the CPU target: the mechanics with an injected timer
(the choice is the minimum, ties going to the first configuration; a new key tunes again; the disk
record serves a fresh instance and a fresh process; a damaged record is a miss; KC_TUNE=0; failing
configurations skipped, all failing an error; restore= keeps in-place arguments intact), the real
:func:`bench` (median of the timed repeats, warm-up excluded) with a fake clock, and the launch shapes
as functions of the arguments. A GPU test checks the choice is the fastest of the measured on CUDA."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.runtime import tuning
from kcompiler.runtime.autotune import TuningFailed
from kcompiler.runtime.cache import KernelCache

from ..paths import ROOT

#: x[i] += 1 over n elements, one per thread, BLOCK threads a block (a BLOCK over 256 does not compile).
SRC = """
kernel addone[BLOCK: i32 = 64](x: ptr<f32>, n: i32) {
    comptime if BLOCK > 256 { compile_error("BLOCK too big"); }
    let i = block_id.x * BLOCK + thread_id.x;
    if i < n { x[i] = x[i] + 1.0; }
}

kernel twice[BLOCK: i32 = 64](x: ptr<f32>, out: ptr<f32>, n: i32) {
    let i = block_id.x * BLOCK + thread_id.x;
    if i < n { out[i] = 2.0 * x[i]; }
}
"""

@pytest.fixture(scope="module")
def mod():
    return kc.compile(SRC, target="cpu")


def _grid(m):
    return (m["n"] + m["BLOCK"] - 1) // m["BLOCK"]


def _block(m):
    return m["BLOCK"]


def fake_timer(times, calls):
    """A timer giving each configuration the time ``times[BLOCK]`` (after one run), recording it."""
    def timer(run, config):
        calls.append(config["BLOCK"])
        run()
        return times[config["BLOCK"]]
    return timer


def _tuned(mod, times, calls, tmp_path, configs=(64, 128, 32), kernel="addone", **kw):
    kw.setdefault("restore", ["x"] if kernel == "addone" else [])
    return kc.autotune(mod[kernel], configs=[{"BLOCK": b} for b in configs], key=["n"], grid=_grid, block=_block,
                       timer=fake_timer(times, calls), cache=KernelCache(tmp_path, disk=True), **kw)


def _records(d):
    return sorted(p for p in d.rglob("*.json"))


def test_choice_is_the_minimum_and_launches_with_it(mod, tmp_path):
    calls = []
    t = _tuned(mod, {64: 3.0, 128: 1.0, 32: 2.0}, calls, tmp_path, kernel="twice")
    n = 1000
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    t(x, out, n)
    assert t.best_config == {"BLOCK": 128} and calls == [64, 128, 32]
    assert t.timings == [({"BLOCK": 64}, 3.0), ({"BLOCK": 128}, 1.0), ({"BLOCK": 32}, 2.0)]
    assert np.array_equal(out, 2 * x)
    out[:] = 0
    t(x, out, n)  # the same key: launched at once
    assert calls == [64, 128, 32] and np.array_equal(out, 2 * x)
    assert len(_records(tmp_path)) == 1


def test_ties_go_to_the_first_configuration(mod, tmp_path):
    x = np.zeros(100, np.float32)
    t = _tuned(mod, {64: 1.0, 128: 1.0, 32: 2.0}, [], tmp_path / "a", kernel="twice")
    t(x, x.copy(), 100)
    assert t.best_config == {"BLOCK": 64}
    t = _tuned(mod, {64: 1.0, 128: 1.0, 32: 2.0}, [], tmp_path / "b", configs=(128, 64, 32), kernel="twice")
    t(x, x.copy(), 100)
    assert t.best_config == {"BLOCK": 128}


def test_a_new_key_tunes_again(mod, tmp_path):
    calls = []
    times = {64: 3.0, 128: 1.0, 32: 2.0}
    t = _tuned(mod, times, calls, tmp_path, kernel="twice")
    x = np.ones(300, np.float32)
    t(x, np.empty_like(x), 300)
    times.update({64: 0.5})
    t(x, np.empty_like(x), 200)  # n is the key: tuned again
    assert calls == [64, 128, 32] * 2 and t.best_config == {"BLOCK": 64}
    t(x, np.empty_like(x), 300)  # back to the first key: remembered
    assert len(calls) == 6 and t.best_config == {"BLOCK": 128}
    t(np.ones(400, np.float32), np.empty(400, np.float32), 300)  # other shapes, the same n: the key is n
    assert len(calls) == 6
    assert len(_records(tmp_path)) == 2


def test_disk_record_serves_a_fresh_instance_and_a_damaged_one_is_a_miss(mod, tmp_path, caplog):
    x = np.ones(100, np.float32)
    _tuned(mod, {64: 3.0, 128: 1.0, 32: 2.0}, [], tmp_path, kernel="twice")(x, np.empty_like(x), 100)
    calls = []
    t = _tuned(mod, {64: 1.0, 128: 9.0, 32: 9.0}, calls, tmp_path, kernel="twice")  # a new KernelCache: disk only
    t(x, np.empty_like(x), 100)
    assert calls == [] and t.best_config == {"BLOCK": 128}
    assert t.timings[1] == ({"BLOCK": 128}, 1.0)  # the recorded times
    (rec,) = _records(tmp_path)
    rec.write_bytes(rec.read_bytes()[:-20] + b"garbage")
    t = _tuned(mod, {64: 1.0, 128: 9.0, 32: 9.0}, calls, tmp_path, kernel="twice")
    with caplog.at_level(logging.WARNING):
        t(x, np.empty_like(x), 100)
    assert calls == [64, 128, 32] and t.best_config == {"BLOCK": 64}
    assert "damaged cache entry" in caplog.text


_FRESH = """
import numpy as np, kcompiler as kc, sys
def grid(m): return (m["n"] + m["BLOCK"] - 1) // m["BLOCK"]
def block(m): return m["BLOCK"]
def timer(run, config): raise AssertionError("timed again")
mod = kc.compile(sys.argv[1], target="cpu")
t = kc.autotune(mod.twice, configs=[{"BLOCK": 64}, {"BLOCK": 128}, {"BLOCK": 32}], key=["n"], grid=grid, block=block,
                timer=timer)
x = np.arange(100, dtype=np.float32); out = np.zeros_like(x)
t(x, out, 100)
assert np.array_equal(out, 2 * x)
print(t.best_config)
"""


def test_disk_record_serves_a_fresh_process(mod, tmp_path, monkeypatch):
    monkeypatch.setenv("KC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KC_CACHE", raising=False)
    monkeypatch.delenv("KC_TUNE", raising=False)
    x = np.ones(100, np.float32)
    t = kc.autotune(mod.twice, configs=[{"BLOCK": 64}, {"BLOCK": 128}, {"BLOCK": 32}], key=["n"], grid=_grid,
                    block=_block, timer=fake_timer({64: 3.0, 128: 1.0, 32: 2.0}, []))
    t(x, np.empty_like(x), 100)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _FRESH, SRC], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "{'BLOCK': 128}"


def test_kc_tune_0_takes_the_record_else_the_first(mod, tmp_path, monkeypatch):
    x = np.ones(100, np.float32)
    monkeypatch.setenv("KC_TUNE", "0")
    calls = []
    t = _tuned(mod, {64: 3.0, 128: 1.0, 32: 2.0}, calls, tmp_path, kernel="twice")
    out = np.zeros_like(x)
    t(x, out, 100)
    assert calls == [] and t.best_config == {"BLOCK": 64} and t.timings == [] and np.array_equal(out, 2 * x)
    assert _records(tmp_path) == []  # the fallback is not recorded
    monkeypatch.setenv("KC_TUNE", "1")
    t(x, out, 100)  # tuning allowed again: it tunes
    assert calls == [64, 128, 32] and t.best_config == {"BLOCK": 128}
    monkeypatch.setenv("KC_TUNE", "off")
    t2 = _tuned(mod, {64: 3.0, 128: 1.0, 32: 2.0}, calls, tmp_path, kernel="twice")
    t2(x, out, 100)  # a record exists: used, not timed
    assert len(calls) == 3 and t2.best_config == {"BLOCK": 128}


def test_failing_configurations_are_skipped_with_a_note(mod, tmp_path, caplog):
    calls = []
    configs = [{"BLOCK": 512}, {"BLOCK": 64, "shared": 1 << 30}, {"BLOCK": 128}, {"BLOCK": 32}]
    t = kc.autotune(mod.addone, configs=configs, key=["n"], grid=_grid, block=_block, restore=["x"],
                    timer=fake_timer({128: 2.0, 32: 1.0}, calls), cache=KernelCache(tmp_path, disk=True))
    x = np.zeros(500, np.float32)
    with caplog.at_level(logging.WARNING, logger="kcompiler.autotune"):
        t(x, 500)
    assert calls == [128, 32] and t.best_config == {"BLOCK": 32}
    assert [s for _, s in t.timings] == [None, None, 2.0, 1.0]
    assert set(t.rejected) == {0, 1}
    assert "BLOCK too big" in t.rejected[0] and t.rejected[0].startswith("CompileError")
    assert "shared memory" in t.rejected[1] and t.rejected[1].startswith("LaunchConfigError")
    assert "configuration 0" in caplog.text and "configuration 1" in caplog.text
    assert np.array_equal(x, np.ones(500, np.float32))


def test_all_failing_is_an_error_naming_each(mod, tmp_path):
    t = kc.autotune(mod.addone, configs=[{"BLOCK": 512}, {"BLOCK": 64, "block": 2048}], key=["n"], grid=_grid,
                    block=_block, timer=fake_timer({}, []), cache=KernelCache(tmp_path, disk=True))
    x = np.zeros(10, np.float32)
    with pytest.raises(TuningFailed, match=r"(?s)every configuration failed.*configuration 0 \{BLOCK=512\}: "
                                           r"CompileError.*BLOCK too big.*configuration 1 .*LaunchConfigError.*2048"):
        t(x, 10)
    assert _records(tmp_path) == []
    assert np.array_equal(x, np.zeros(10, np.float32))


@pytest.mark.parametrize("restore", [["x"], []])
def test_restore_keeps_in_place_arguments(mod, tmp_path, restore):
    def timer(run, config):
        for _ in range(5):
            run()
        return float(config["BLOCK"])
    t = kc.autotune(mod.addone, configs=[{"BLOCK": 64}, {"BLOCK": 32}], key=["n"], grid=_grid, block=_block,
                    restore=restore, timer=timer, cache=KernelCache(tmp_path, disk=True))
    x = np.arange(300, dtype=np.float32)
    t(x, 300)
    runs = 1 + 2 * 6  # the launch the call makes, and each configuration's first run and five timed
    assert t.best_config == {"BLOCK": 32}
    expect = np.arange(300, dtype=np.float32) + (1 if restore else runs)
    assert np.array_equal(x, expect)


def test_bench_is_the_median_of_the_timed_repeats(monkeypatch):
    clock = [0.0]
    durations = iter([100.0, 100.0, 5.0, 1.0, 3.0, 2.0, 4.0])  # two warm-up runs, then five timed
    setups = []
    monkeypatch.setattr(tuning.time, "perf_counter", lambda: clock[0])

    def fn():
        clock[0] += next(durations)

    dev = kc.runtime.cpu.CpuDevice.get(0)
    assert tuning.bench(fn, dev, setup=lambda: setups.append(1), warmup=2, repeats=5) == 3.0
    assert len(setups) == 7
    with pytest.raises(ValueError, match="repeats"):
        tuning.bench(fn, dev, repeats=0)


def test_launch_shapes_per_configuration_and_meta(mod, tmp_path):
    seen = []

    def grid(m):
        seen.append((m["n"], m["BLOCK"], m["block"], type(m["x"]).__name__))
        return (m["n"] + m["BLOCK"] - 1) // m["BLOCK"]
    configs = [{"BLOCK": 16, "block": 16}, {"BLOCK": 64, "block": (64, 1, 1)}, {"BLOCK": 32, "grid": 4, "block": 32}]
    t = kc.autotune(mod.twice, configs=configs, key=["n"], grid=grid, timer=lambda run, c: run() or c["BLOCK"],
                    cache=KernelCache(tmp_path, disk=True))
    x = np.arange(128, dtype=np.float32)
    out = np.zeros_like(x)
    t(x, out, 128)
    assert t.best_config == configs[0] and np.array_equal(out, 2 * x)
    assert (128, 64, (64, 1, 1), "ndarray") in seen and all(s[1] != 32 for s in seen)
    # the per-configuration grid of 4 blocks of 32 covers all 128
    t3 = kc.autotune(mod.twice, configs=[configs[2]], timer=lambda run, c: run() or 1.0,
                     cache=KernelCache(tmp_path, disk=True))
    out[:] = 0
    t3(x, out, 128)
    assert np.array_equal(out, 2 * x)


def test_bad_arguments_are_clear_errors(mod):
    k = mod.addone
    with pytest.raises(TypeError, match="expected a kernel"):
        kc.autotune(mod, configs=[{}], grid=1, block=1)
    with pytest.raises(ValueError, match="configs is empty"):
        kc.autotune(k, configs=[], grid=1, block=1)
    with pytest.raises(TypeError, match=r"'BLOK', which is not a compile-time parameter of addone \(BLOCK\)"):
        kc.autotune(k, configs=[{"BLOK": 1}], grid=1, block=1)
    with pytest.raises(TypeError, match="configuration 1 has no grid"):
        kc.autotune(k, configs=[{"grid": 1}, {}], block=1)
    with pytest.raises(ValueError, match=r"key names 'm', not a parameter of addone; its parameters are x, n"):
        kc.autotune(k, configs=[{}], key=["m"], grid=1, block=1)
    with pytest.raises(TypeError, match="restore must be a list"):
        kc.autotune(k, configs=[{}], restore="x", grid=1, block=1)
    t = kc.autotune(k, configs=[{"BLOCK": 32}], grid=1, block=32, timer=lambda run, c: 1.0)
    with pytest.raises(TypeError, match="'BLOCK' is set by the autotuned configurations"):
        t(np.zeros(4, np.float32), 4, BLOCK=64)
    with pytest.raises(TypeError, match="restore names 'n', which is"):
        kc.autotune(k, configs=[{"BLOCK": 32}], grid=1, block=32, restore=["n"],
                    timer=lambda run, c: 1.0, cache=KernelCache(disk=False))(np.zeros(4, np.float32), 4)


def test_progress_shows_each_configuration(mod, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KC_VERBOSE", "1")
    t = _tuned(mod, {64: 3.0, 128: 1.0, 32: 2.0}, [], tmp_path, kernel="twice")
    x = np.ones(100, np.float32)
    t(x, np.empty_like(x), 100)
    err = capsys.readouterr().err
    assert "kc: autotuning twice (n=100): timing 3 candidates ..." in err
    assert "candidate 2/3 config=1 BLOCK=128: 1 s" in err and "chose config=1 BLOCK=128" in err
    assert "autotuning twice (n=100): timing 3 candidates: done in" in err


class _FakeDriver:
    """The cuda-python calls of CUDA event timing, recording them; each elapsed time is 2.5 ms."""

    def __init__(self):
        self.calls = []

    def CUstream(self, h):
        return ("stream", h)

    def cuEventCreate(self, flags):
        self.calls.append("create")
        return 0, f"ev{self.calls.count('create')}"

    def cuEventRecord(self, ev, stream):
        self.calls.append(("record", ev, stream))
        return (0,)

    def cuEventSynchronize(self, ev):
        self.calls.append(("sync", ev))
        return (0,)

    def cuEventElapsedTime(self, a, b):
        self.calls.append(("elapsed", a, b))
        return 0, 2.5

    def cuEventDestroy(self, ev):
        self.calls.append(("destroy", ev))
        return (0,)


class _FakeCudaDevice:
    target = "nvptx"

    def make_current(self):
        pass

    def synchronize(self):
        pass


def test_bench_times_with_cuda_events_on_the_launch_stream(monkeypatch):
    from kcompiler.runtime import cuda

    drv = _FakeDriver()
    monkeypatch.setattr(cuda, "_drv", drv)
    runs = []
    assert tuning.bench(lambda: runs.append(len(drv.calls)), _FakeCudaDevice(), stream=7, warmup=1, repeats=3) == 2.5e-3
    assert len(runs) == 4 and runs[0] == 0  # the warm-up before any event
    timed = [c for c in drv.calls if c != "create"]
    assert timed[:4] == [("record", "ev1", ("stream", 7)), ("record", "ev2", ("stream", 7)), ("sync", "ev2"),
                         ("elapsed", "ev1", "ev2")]
    assert timed[-2:] == [("destroy", "ev1"), ("destroy", "ev2")]


@pytest.mark.gpu
def test_gpu_choice_is_the_fastest_measured(tmp_path):
    """On CUDA, with CUDA events: blocks of 4 threads (32 blocks, 128 threads resident on a
    multiprocessor) are several times slower than blocks of 256 on 16 M elements; the choice is the
    minimum of the measured medians, and a block of 2048 threads is refused by the driver and skipped."""
    mod = kc.compile(SRC, target="cuda")
    n = 1 << 24
    h = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x = kc.to_device(h, device=mod.device)
    out = kc.device_array(n, np.float32, device=mod.device)
    configs = [{"BLOCK": 4}, {"BLOCK": 256}, {"BLOCK": 1024}, {"BLOCK": 2048}]
    t = kc.autotune(mod.twice, configs=configs, key=["n"], grid=_grid, block=_block,
                    cache=KernelCache(tmp_path, disk=True), repeats=20)
    t(x, out, n)
    times = {c["BLOCK"]: s for c, s in t.timings}
    assert times[2048] is None and t.rejected[3].startswith("LaunchConfigError")  # 2048 threads
    measured = {b: s for b, s in times.items() if s is not None}
    assert set(measured) == {4, 256, 1024} and all(0 < s < 1 for s in measured.values()), measured
    assert t.best_config["BLOCK"] == min(measured, key=measured.get)
    assert measured[4] > 2 * min(measured.values()), measured
    assert np.array_equal(out.copy_to_host(), 2 * h)
