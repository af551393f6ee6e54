"""Descending and unsigned ranges on the CPU target, against Python's ``range``: an unsigned range
counts down with a negative step (literal or a signed run-time step), stopping before its variable
would wrap below zero; the same loops unrolled (compile-time bounds) and as ``comptime for``."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError

SRC = """
kernel dyn[T: type, S: type](out: ptr<i64>, lo: T, hi: T, step: S) {
    var k = 0;
    for i in range(lo, hi, step) { out[k] = i64(i); k += 1; }
    out[255] = i64(k);
}
kernel fixed(out: ptr<i64>) {
    var k = 0;
    for i in range(9u32, 0u32, -1) { out[k] = i64(i); k += 1; }
    for i in range(0u32, 0u32, -1) { out[k] = 1000; k += 1; }
    for i in range(10u64, 0u64, -3) { out[k] = i64(i); k += 1; }
    for i in comptime range(9u32, 0u32, -2) { out[k] = i64(i); k += 1; }
    out[255] = i64(k);
}
kernel neg3(out: ptr<i64>, lo: u32) {
    var k = 0;
    for i in range(lo, 0u32, -3) { out[k] = i64(i); k += 1; }
    out[255] = i64(k);
}
"""

CASES = [(9, 0, -1), (0, 0, -1), (10, 0, -3), (9, 0, -3), (1, 0, -3), (2, 0, -7), (3, 5, -1), (5, 2, 1),
         (0, 7, 3), (7, 3, -2), (100, 1, -33)]


def _run(launch, *args) -> list[int]:
    out = np.zeros(256, np.int64)
    launch[1, 1](out, *args)
    return [int(x) for x in out[:out[255]]]


@pytest.fixture(scope="module")
def mod():
    return kc.compile(SRC, target="cpu", path="ranges.kc")


def test_literal_descending_unsigned(mod):
    expect = list(range(9, 0, -1)) + [] + list(range(10, 0, -3)) + list(range(9, 0, -2))
    assert _run(mod.fixed) == expect


@pytest.mark.parametrize("lo", [0, 1, 2, 3, 4, 9, 10, 11])
def test_step_minus_3_from_a_runtime_start(mod, lo):
    assert _run(mod.neg3, np.uint32(lo)) == list(range(lo, 0, -3))


@pytest.mark.parametrize("bound,step", [(np.uint32, np.int32), (np.uint64, np.int64), (np.int32, np.int32),
                                        (np.uint32, np.uint32)])
def test_dynamic_steps(mod, bound, step):
    for lo, hi, st in CASES:
        if np.dtype(step).kind == "u" and st < 0:
            continue
        assert _run(mod.dyn, bound(lo), bound(hi), step(st)) == list(range(lo, hi, st)), (lo, hi, st)


def test_near_the_top_of_u64(mod):
    top = (1 << 64) - 1
    for lo, hi, st in [(top, top - 10, -4), (top, 0, -(1 << 62)), (5, 0, -(1 << 63))]:
        assert _run(mod.dyn, np.uint64(lo), np.uint64(hi), np.int64(st)) == \
            [x - (1 << 64) if x >= 1 << 63 else x for x in range(lo, hi, st)]


@pytest.mark.parametrize("body,msg", [
    ("for i in range(9u32, 0u32, 0) {}", "range step is 0"),
    ("for i in range(9u8, 0u8, -200) {}", "range step -200 does not fit in i8"),
    ("let s: i64 = -1; for i in range(9u32, 0u32, s) {}", r"the step \(i64\) is wider than the range bounds \(u32\)"),
])
def test_range_step_errors(body, msg):
    with pytest.raises(CompileError, match=msg) as ei:
        kc.compile("kernel k(o: ptr<i32>) { " + body + " }", target="cpu", path="r.kc")
    assert "r.kc:1:" in str(ei.value)
