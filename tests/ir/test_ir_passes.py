"""IR passes: unrolling, folding of ifs, DCE, inlining (checked with tests/ir_interp.py); and that every
pass keeps the meaning of random programs (tests/ir_randprog.py). Folding exactness: test_ir_fold.py."""
from __future__ import annotations

import numpy as np
import pytest

from kcompiler.ir import Builder, Function, Module, Value, print_module
from kcompiler.ir.passes import (eliminate_dead_code, fold_constants, inline_calls, run_default,
                                 unroll_loops)
from kcompiler.ir.passes import unroll as unroll_mod
from kcompiler.ir.types import ArrayType, BOOL, F32, I32, I64, PointerType, U8, VOID
from kcompiler.ir.verifier import verify

from ..ir_interp import StepLimit, UB, Interpreter
from ..ir_randprog import OUT_LEN, random_module

PASSES = {
    "fold": fold_constants,
    "unroll": lambda m: unroll_loops(m, fold=False),
    "unroll+fold": unroll_loops,
    "dce": eliminate_dead_code,
    "inline": inline_calls,
    "default": run_default,
}

INPUTS = [(0, 0, 0), (3, -5, 7), (-2147483648, -1, 2), (100, 100, -100), (7, 2, 31), (-9, 4, 1)]


def _run(m: Module, args):
    out = np.full(OUT_LEN, 12345, np.int32)
    try:
        r = Interpreter(m, max_steps=20_000).run("main", *args, out)
    except (UB, StepLimit) as e:
        return type(e).__name__, None
    return r, out


@pytest.mark.parametrize("name", list(PASSES))
def test_passes_keep_semantics_of_random_programs(name):
    checked = 0
    for seed in range(120):
        before = random_module(seed)
        verify(before)
        after = PASSES[name](random_module(seed))
        try:
            verify(after)
        except Exception as e:
            raise AssertionError(f"seed {seed}: {e}\n{print_module(after)}") from None
        for args in INPUTS:
            r0, out0 = _run(before, args)
            if out0 is None:
                continue  # undefined behaviour or too long: anything goes
            r1, out1 = _run(after, args)
            assert out1 is not None and r0 == r1 and (out0 == out1).all(), (
                f"pass {name}, seed {seed}, args {args}: {r0} {out0} != {r1} {out1}\n"
                f"{print_module(random_module(seed))}\n--- after ---\n{print_module(after)}")
            checked += 1
    assert checked > 400


# --- helpers -----------------------------------------------------------------------------------------



def count(m: Module, name: str) -> int:
    return sum(1 for f in m.functions for op in f.body.walk() if op.name == name)


def device(name, params, ret):
    f = Function(name, [Value(t, h) for h, t in params], ret, "device")
    return f, Builder(f.body)


def same_results(build, fn_name, arg_sets, passes):
    """Run ``build()``'s ``fn_name`` before and after ``passes`` on each argument tuple (numpy arrays
    are copied per run); the results and the arrays must match."""
    for args in arg_sets:
        runs = []
        for apply in (False, True):
            m = build()
            if apply:
                for p in passes:
                    p(m)
                verify(m)
            a = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
            r = Interpreter(m).run(fn_name, *a)
            runs.append((r, [x for x in a if isinstance(x, np.ndarray)]))
        (r0, a0), (r1, a1) = runs
        assert r0 == r1, (args, r0, r1)
        for x, y in zip(a0, a1):
            np.testing.assert_array_equal(x, y)


# --- unrolling ----------------------------------------------------------------------------------------

def tile_kernel(trip=4, unroll=True, step=1, lo=0, t=I32):
    """acc[i & 63] = i * i + 1000 for i in lo..trip by step, in a register array; out[k] = acc[k]."""
    f, b = device("main", [("out", PointerType(I32))], VOID)
    acc = b.alloca(ArrayType(I32, 64), "acc")
    body, i = b.for_(b.const(lo, t), b.const(trip, t), b.const(step, t), unroll=unroll)
    with b.at(body):
        ii = b.cast(i, I32)
        sq = b.mul(ii, ii)
        b.store(b.elemptr(acc, b.binary("and", ii, b.const(63, I32))), b.add(sq, b.const(1000, I32)))
    body2, j = b.for_(b.const(0, I32), b.const(64, I32), b.const(1, I32))
    with b.at(body2):
        b.store(b.elemptr(f.params[0], j), b.load(b.elemptr(acc, j)))
    b.ret()
    return Module("m", [f])


def test_unroll_makes_n_copies_and_keeps_semantics():
    m = unroll_loops(tile_kernel(5), fold=False)
    verify(m)
    text = print_module(m)
    assert count(m, "for") == 1  # the 64-trip copy-out loop is not marked: it stays
    assert text.count(" = mul ") == 5 and text.count("const 1000 : i32") == 5
    assert all(f"const {k} : i32" in text for k in range(5))  # the induction variable's values
    m = unroll_loops(tile_kernel(5))
    text = print_module(m)
    # the induction variable became a constant in each copy, and folding made the products constants
    assert all(f"const {k * k + 1000} : i32" in text for k in range(5))
    same_results(lambda: tile_kernel(5), "main", [(np.zeros(64, np.int32),)], [unroll_loops])


@pytest.mark.parametrize("lo,trip,step,t", [(0, 4, 1, I32), (10, 0, -3, I32), (3, 3, 1, I32), (250, 255, 2, U8),
                                            (5, -20, -7, I64), (0, 64, 1, I32)])
def test_unroll_trip_counts(lo, trip, step, t):
    build = lambda: tile_kernel(trip if trip < 64 else 64, step=step, lo=lo, t=t)  # noqa: E731
    m = unroll_loops(build())
    verify(m)
    assert count(m, "for") == 1
    same_results(build, "main", [(np.zeros(64, np.int32),)], [unroll_loops])


def test_unroll_thresholds():
    # marked: up to MAX_TRIP_FORCED; unmarked: up to MAX_TRIP_AUTO with a small body
    assert unroll_mod.MAX_TRIP_FORCED == 64 and unroll_mod.MAX_TRIP_AUTO == 8
    assert count(unroll_loops(tile_kernel(8, unroll=False)), "for") == 1
    assert count(unroll_loops(tile_kernel(9, unroll=False)), "for") == 2
    # a wrapping u8 loop that would run past the limit (250, 4, 14, ... never reaching 255) stays
    assert count(unroll_loops(tile_kernel(255, step=10, lo=250, t=U8)), "for") == 2


def loop_with_break(own: bool):
    """s = sum of i for i in 0..4 until i == n: with the break in the loop itself (``own``) or in a
    loop nested in it (which leaves only that inner loop)."""
    f, b = device("main", [("n", I32)], I32)
    s = b.alloca(I32)
    b.store(s, b.const(0, I32))
    body, i = b.for_(b.const(0, I32), b.const(4, I32), b.const(1, I32), unroll=True)
    with b.at(body):
        where = body
        if not own:
            where, _ = b.for_(b.const(0, I32), f.params[0], b.const(1, I32))
        with b.at(where):
            then, _ = b.if_(b.cmp("eq", i, f.params[0]))
            with b.at(then):
                b.op("break")
            b.store(s, b.add(b.load(s), i))
    b.ret(b.load(s))
    return Module("m", [f])


@pytest.mark.parametrize("own", [True, False])
def test_unroll_and_break(own):
    m = unroll_loops(loop_with_break(own))
    verify(m)
    assert count(m, "for") == (1 if own else 4)  # own break: stays; else 4 copies of the inner loop
    same_results(lambda: loop_with_break(own), "main", [(k,) for k in range(-1, 6)], [unroll_loops])


def test_nested_unroll_with_bounds_from_the_outer_variable():
    """for i in 0..4 { for j in i..4 { acc[i*4+j] = i - j } }: inner bounds become constants."""
    def build():
        f, b = device("main", [("out", PointerType(I32))], VOID)
        bi, i = b.for_(b.const(0, I32), b.const(4, I32), b.const(1, I32), unroll=True)
        with b.at(bi):
            bj, j = b.for_(b.add(i, b.const(0, I32)), b.const(4, I32), b.const(1, I32), unroll=True)
            with b.at(bj):
                k = b.add(b.mul(i, b.const(4, I32)), j)
                b.store(b.elemptr(f.params[0], k), b.sub(i, j))
        b.ret()
        return Module("m", [f])
    m = run_default(build())
    verify(m)
    assert count(m, "for") == 0 and count(m, "store") == 10
    assert count(m, "mul") == 0 and count(m, "sub") == 0  # all folded
    same_results(build, "main", [(np.full(16, 7, np.int32),)], [run_default])


def test_unroll_body_with_return():
    def build():
        f, b = device("main", [("n", I32)], I32)
        body, i = b.for_(b.const(0, I32), b.const(4, I32), b.const(1, I32), unroll=True)
        with b.at(body):
            then, _ = b.if_(b.cmp("eq", i, f.params[0]))
            with b.at(then):
                b.ret(b.mul(i, b.const(10, I32)))
        b.ret(b.const(-1, I32))
        return Module("m", [f])
    m = unroll_loops(build())
    assert count(m, "for") == 0 and count(m, "return") == 5
    same_results(build, "main", [(k,) for k in range(-1, 6)], [unroll_loops])


# --- folding of ifs ------------------------------------------------------------------------------------

def test_fold_if_on_constant_splices_the_taken_region():
    def build(cond):
        f, b = device("main", [("x", I32)], I32)
        then, else_ = b.if_(b.const(cond, BOOL))
        with b.at(then):
            b.ret(b.add(f.params[0], b.const(1, I32)))
        with b.at(else_):
            y = b.mul(f.params[0], b.const(2, I32))
        b.ret(f.params[0])  # unreachable when cond is true: dropped with the splice
        return Module("m", [f])
    for cond in (True, False):
        m = fold_constants(build(cond))
        verify(m)
        assert count(m, "if") == 0
        assert count(m, "return") == 1
        same_results(lambda: build(cond), "main", [(5,), (-3,)], [fold_constants])


def test_fold_if_keeps_a_while_cond_region_valid():
    """`if true { return }` inside a while's cond region cannot be spliced: the region must still end
    with its condition."""
    f, b = device("main", [("x", I32)], I32)
    cond, body = b.while_()
    with b.at(cond):
        then, _ = b.if_(b.const(True, BOOL))
        with b.at(then):
            b.ret(f.params[0])
        b.condition(b.const(True, BOOL))
    b.ret(b.const(0, I32))
    m = fold_constants(Module("m", [f]))
    verify(m)
    assert count(m, "if") == 1
    assert Interpreter(m).run("main", 9) == 9


# --- dead code --------------------------------------------------------------------------------------

def test_dce():
    f, b = device("main", [("p", PointerType(I32)), ("x", I32)], I32)
    p, x = f.params
    dead1 = b.add(x, b.const(1, I32))
    b.mul(dead1, dead1)  # a dead chain
    slot = b.alloca(ArrayType(I32, 4), "only_stored")
    b.store(b.elemptr(slot, b.const(2, I32)), x)
    live = b.alloca(I32, "live")
    b.store(live, x)
    b.if_(b.cmp("lt", x, b.const(0, I32)))  # empty if
    then, else_ = b.if_(b.cmp("gt", x, b.const(0, I32)))
    with b.at(then):
        b.ret(b.load(live))
    with b.at(else_):
        b.ret(b.const(2, I32))
    b.store(p, x)  # unreachable: both branches return
    b.ret(b.load(live))
    m = eliminate_dead_code(Module("m", [f]))
    verify(m)
    names = [op.name for op in f.body.ops]
    assert names == ["alloca", "store", "const", "cmp", "if"], print_module(m)
    assert Interpreter(m).run("main", np.zeros(1, np.int32), 5) == 5
    assert "live" in print_module(m) and "only_stored" not in print_module(m)


def test_dce_keeps_side_effects():
    f, b = device("main", [("p", PointerType(I32))], VOID)
    b.atomic("add", f.params[0], b.const(1, I32))
    b.load(f.params[0])
    b.barrier()
    b.ret()
    m = eliminate_dead_code(Module("m", [f]))
    assert [op.name for op in f.body.ops] == ["const", "atomic", "load", "barrier", "return"]


# --- inlining ---------------------------------------------------------------------------------------

def find_first(name="find"):
    """find(p, n, key) -> i32: the index of key in p[0..n) by nested loops with early returns, else -1;
    ``twice`` calls it twice (an early return of its own between), ``main`` calls ``twice`` in a loop
    and kernel ``k`` calls ``find`` directly."""
    f, b = device(name, [("p", PointerType(I32)), ("n", I32), ("key", I32)], I32)
    p, n, key = f.params
    then, _ = b.if_(b.cmp("le", n, b.const(0, I32)))
    with b.at(then):
        b.ret(b.const(-2, I32))
    cond, body = b.while_()  # while true, with the for inside
    with b.at(cond):
        b.condition(b.const(True, BOOL))
    with b.at(body):
        fb, i = b.for_(b.const(0, I32), n, b.const(1, I32))
        with b.at(fb):
            t2, e2 = b.if_(b.cmp("eq", b.load(b.elemptr(p, i)), key))
            with b.at(t2):
                b.ret(i)  # a return two loops deep
            with b.at(e2):
                t3, _ = b.if_(b.cmp("gt", i, b.const(100, I32)))
                with b.at(t3):
                    b.op("continue")
        b.op("break")
    b.ret(b.const(-1, I32))
    return f


def build_inline_module():
    find = find_first()
    g, gb = device("twice", [("p", PointerType(I32)), ("n", I32), ("key", I32)], I32)
    r1 = gb.call("find", list(g.params), I32)
    then, _ = gb.if_(gb.cmp("lt", r1, gb.const(0, I32)))
    with gb.at(then):
        gb.ret(gb.const(-100, I32))
    gb.ret(gb.add(r1, gb.call("find", [g.params[0], g.params[1], gb.const(7, I32)], I32)))
    main, b = device("main", [("p", PointerType(I32)), ("n", I32), ("key", I32)], I32)
    acc = b.alloca(I32)
    b.store(acc, b.const(0, I32))
    body, i = b.for_(b.const(0, I32), b.const(3, I32), b.const(1, I32))
    with b.at(body):
        r = b.call("twice", [main.params[0], main.params[1], b.add(main.params[2], i)], I32)
        b.store(acc, b.add(b.mul(b.load(acc), b.const(1000, I32)), r))
    b.ret(b.load(acc))
    k = Function("k", [Value(PointerType(I32), "p")], VOID, "kernel")
    kb = Builder(k.body)
    kb.store(k.params[0], kb.call("find", [k.params[0], kb.const(4, I32), kb.const(5, I32)], I32))
    kb.ret()
    return Module("m", [find, g, main, k])


def test_inline_early_returns_in_nested_loops():
    m = inline_calls(build_inline_module())
    verify(m)
    assert count(m, "call") == 0
    assert [f.name for f in m.functions] == ["main", "k"]  # find and twice were called, no longer are
    arrs = [np.array([5, 7, 3, 9, 7, 2], np.int32), np.array([1, 2, 3], np.int32), np.arange(8, dtype=np.int32)]
    cases = [(a, n, key) for a in arrs for n in (0, 2, len(a)) for key in (0, 2, 3, 5, 6)]
    same_results(build_inline_module, "main", cases, [inline_calls])
    same_results(build_inline_module, "k", [(a,) for a in arrs if len(a) >= 4], [inline_calls])
    same_results(build_inline_module, "main", cases[::3], [run_default])


def test_inline_simple_function_is_spliced_without_a_loop():
    g, gb = device("sq", [("x", F32)], F32)
    gb.ret(gb.mul(g.params[0], g.params[0]))
    f, b = device("main", [("x", F32)], F32)
    b.ret(b.add(b.call("sq", [f.params[0]], F32), b.const(1.0, F32)))
    m = inline_calls(Module("m", [g, f]))
    verify(m)
    assert [op.name for op in f.body.ops] == ["mul", "const", "add", "return"]
    assert Interpreter(m).run("main", np.float32(3)) == 10


def test_inline_leaves_recursion():
    g, gb = device("fact", [("n", I32)], I32)
    n = g.params[0]
    then, _ = gb.if_(gb.cmp("le", n, gb.const(1, I32)))
    with gb.at(then):
        gb.ret(gb.const(1, I32))
    gb.ret(gb.mul(n, gb.call("fact", [gb.sub(n, gb.const(1, I32))], I32)))
    f, b = device("main", [("n", I32)], I32)
    b.ret(b.call("fact", [f.params[0]], I32))
    m = inline_calls(Module("m", [g, f]))
    verify(m)
    assert count(m, "call") == 2 and len(m.functions) == 2
    assert Interpreter(m).run("main", 5) == 120


def test_inline_void_function_with_early_return_and_barrier():
    """A void device function with a barrier and an early return inside a loop (the CPU target needs
    barriers in the kernel itself)."""
    def build():
        g, gb = device("fill", [("p", PointerType(I32)), ("n", I32)], VOID)
        body, i = gb.for_(gb.const(0, I32), gb.const(10, I32), gb.const(1, I32))
        with gb.at(body):
            then, _ = gb.if_(gb.cmp("ge", i, g.params[1]))
            with gb.at(then):
                gb.ret()
            gb.store(gb.elemptr(g.params[0], i), gb.mul(i, i))
        gb.barrier()
        gb.ret()
        k = Function("main", [Value(PointerType(I32), "p"), Value(I32, "n")], VOID, "kernel")
        kb = Builder(k.body)
        kb.call("fill", list(k.params), VOID)
        kb.store(kb.elemptr(k.params[0], kb.const(11, I32)), kb.const(-1, I32))
        kb.ret()
        return Module("m", [g, k])
    m = inline_calls(build())
    verify(m)
    assert count(m, "call") == 0 and len(m.functions) == 1
    same_results(build, "main", [(np.zeros(12, np.int32), n) for n in (0, 3, 10, 20)], [inline_calls])
