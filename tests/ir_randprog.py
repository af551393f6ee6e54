"""Random structured-IR programs for testing passes against tests/ir_interp.py.

``random_module(seed)`` builds, deterministically from ``seed``, a module with a few device functions
``f0..fk(a: i32, b: i32) -> i32`` and ``main(a: i32, b: i32, c: i32, out: ptr<i32>) -> i32``: integer
and float arithmetic of several widths, casts, selects, mutable slots, stores to ``out``, ``if``s
(some on constant conditions), ``for`` loops (constant bounds, some marked unroll, negative steps,
unsigned counters), ``while`` loops, ``break``/``continue``, early ``return``s inside ifs and loops,
and calls of the functions defined before.
"""
from __future__ import annotations

import random

from kcompiler.ir import Builder, Function, Module, Region, Value
from kcompiler.ir.types import (F16, F32, F64, I8, I16, I32, I64, PointerType, ScalarType, U8, U16,
                                U32, U64)

OUT_LEN = 8
INT_OPS = ("add", "sub", "mul", "and", "or", "xor", "min", "max")
CAST_TYPES = (I8, U8, I16, U16, U32, I64, U64, F32, F64, F16)
PREDS = ("eq", "ne", "lt", "le", "gt", "ge")


class _Gen:
    def __init__(self, rng: random.Random, module: Module, fn: Function, out: Value | None, callees: list[Function]):
        self.r = rng
        self.m = module
        self.fn = fn
        self.out = out
        self.callees = callees
        self.b = Builder(fn.body)
        self.scopes: list[list[Value]] = [[p for p in fn.params if p.type == I32]]
        self.slots: list[Value] = []
        self.budget = 0
        self.loop_depth = 0
        # Some functions take constants often, so folding (of values that reach the output) gets work.
        self.const_rate = rng.choice((0.15, 0.15, 0.5))

    def vals(self) -> list[Value]:
        return [v for s in self.scopes for v in s]

    def pick(self) -> Value:
        if self.r.random() < self.const_rate:
            return self.const()
        vals = self.vals()
        if self.r.random() < 0.5:  # recent values more often: longer chains of dependent ops
            return self.r.choice(vals[-4:])
        return self.r.choice(vals)

    def const(self, t: ScalarType = I32) -> Value:
        v = self.r.choice([0, 1, 2, 3, -1, 7, 100, -(1 << 31), (1 << 31) - 1, self.r.randint(-1000, 1000)])
        return self.b.const(v, t)

    def push(self, v: Value) -> None:
        self.scopes[-1].append(v)

    # --- statements ---
    def block(self, region: Region, n: int, extra: list[Value] = ()) -> None:
        with self.b.at(region):
            self.scopes.append(list(extra))
            for _ in range(n):
                if self.budget <= 0:
                    break
                self.stmt()
                if region.ops and region.ops[-1].name in ("return", "break", "continue"):
                    break
            self.scopes.pop()

    def stmt(self) -> None:
        self.budget -= 1
        r = self.r
        k = r.random()
        b = self.b
        if k < 0.22:
            self.push(b.binary(r.choice(INT_OPS), self.pick(), self.pick()))
        elif k < 0.28:
            amount = b.binary("and", self.pick(), b.const(31, I32)) if r.random() < 0.7 else \
                b.const(r.randint(0, 31), I32)
            self.push(b.binary(r.choice(("shl", "shr")), self.pick(), amount))
        elif k < 0.32:
            t = r.choice((I32, U32))
            x, y = b.cast(self.pick(), t), b.cast(b.binary("or", self.pick(), b.const(1, I32)), t)
            self.push(b.cast(b.binary(r.choice(("div", "rem")), x, y), I32))
        elif k < 0.38:
            c = b.cmp(r.choice(PREDS), self.pick(), self.pick())
            self.push(b.select(c, self.pick(), self.pick()))
        elif k < 0.45:
            t = r.choice(CAST_TYPES)
            x, y = b.cast(self.pick(), t), b.cast(self.pick(), t)
            ops = ("add", "sub", "mul", "min", "max") if t.is_float else INT_OPS
            z = b.binary(r.choice(ops), x, y)
            if t.is_float and r.random() < 0.5:
                z = b.unary("neg", z)
            self.push(b.cast(z, I32))
        elif k < 0.50:
            self.push(self.const())
        elif k < 0.56 and self.slots:
            b.store(r.choice(self.slots), self.pick())
        elif k < 0.62 and self.slots:
            self.push(b.load(r.choice(self.slots)))
        elif k < 0.67 and self.out is not None:
            b.store(b.elemptr(self.out, b.const(r.randrange(OUT_LEN), I32)), self.pick())
        elif k < 0.76:
            if r.random() < 0.25:
                c = b.cmp(r.choice(PREDS), self.const(), self.const())
            else:
                c = b.cmp(r.choice(PREDS), self.pick(), self.pick())
            then, else_ = b.if_(c)
            self.block(then, r.randint(1, 4))
            if r.random() < 0.6:
                self.block(else_, r.randint(1, 3))
        elif k < 0.84 and self.loop_depth < 2:
            self.for_loop()
        elif k < 0.88 and self.loop_depth < 2:
            self.while_loop()
        elif k < 0.93 and self.loop_depth > 0:
            then, _ = b.if_(b.cmp(r.choice(PREDS), self.pick(), self.pick()))
            with b.at(then):
                b.op(r.choice(("break", "continue")))
        elif k < 0.96:
            then, _ = b.if_(b.cmp(r.choice(PREDS), self.pick(), self.pick()))
            with b.at(then):
                b.ret(self.pick())
        elif self.callees:
            f = r.choice(self.callees)
            self.push(b.call(f.name, [self.pick(), self.pick()], I32))
        else:
            self.push(b.binary("add", self.pick(), self.pick()))

    def for_loop(self) -> None:
        r, b = self.r, self.b
        t = r.choice((I32, I32, U32, I64))
        if r.random() < 0.75:
            lo, hi = r.randint(-3, 4), r.randint(-3, 12)
            step = r.choice((1, 1, 2, 3, -1, -2))
            if not t.is_signed:
                lo, hi, step = abs(lo), abs(hi), abs(step)
            lo_v, hi_v, step_v = b.const(lo, t), b.const(hi, t), b.const(step, t)
        else:  # bounds known at run time only
            lo_v = b.const(0, t)
            hi_v = b.cast(b.binary("and", self.pick(), b.const(7, I32)), t)
            step_v = b.const(1, t)
        body, iv = b.for_(lo_v, hi_v, step_v, unroll=r.random() < 0.3)
        self.loop_depth += 1
        with b.at(body):
            ivc = b.cast(iv, I32)
        self.block(body, r.randint(1, 5), [ivc])
        self.loop_depth -= 1

    def while_loop(self) -> None:
        r, b = self.r, self.b
        counter = b.alloca(I32, "n")
        b.store(counter, b.const(0, I32))
        cond, body = b.while_()
        limit = r.randint(0, 6)
        with b.at(cond):
            b.condition(b.cmp("lt", b.load(counter), b.const(limit, I32)))
        with b.at(body):
            n = b.load(counter)
            b.store(counter, b.add(n, b.const(1, I32)))
        self.loop_depth += 1
        self.block(body, r.randint(1, 4), [n])
        self.loop_depth -= 1

    def function(self, size: int) -> None:
        b = self.b
        for _ in range(self.r.randint(0, 2)):
            s = b.alloca(I32, "v")
            b.store(s, self.pick())
            self.slots.append(s)
        self.budget = size
        self.scopes.append([])
        self.block_ops(self.fn.body, size)
        if not self.fn.body.ops or self.fn.body.ops[-1].name != "return":
            with b.at(self.fn.body):
                if self.out is not None:  # the last values computed are observed
                    for k, v in enumerate(self.vals()[-OUT_LEN // 2:]):
                        b.store(b.elemptr(self.out, b.const(OUT_LEN // 2 + k, I32)), v)
                acc = self.vals()[-1]
                for v in self.vals()[-4:-1]:
                    acc = b.binary("xor", acc, v)
                b.ret(acc)
        self.scopes.pop()

    def block_ops(self, region: Region, n: int) -> None:
        """Statements straight into ``region`` in the current scope (the function's top level)."""
        with self.b.at(region):
            for _ in range(n):
                if self.budget <= 0:
                    break
                self.stmt()
                if region.ops and region.ops[-1].name == "return":
                    break


def random_module(seed: int, n_funcs: int | None = None, size: int = 25) -> Module:
    """A random module (see the module docstring); the same ``seed`` gives the same program."""
    rng = random.Random(seed)
    m = Module(f"rand{seed}")
    n = rng.randint(0, 2) if n_funcs is None else n_funcs
    callees: list[Function] = []
    for k in range(n):
        f = Function(f"f{k}", [Value(I32, "a"), Value(I32, "b")], I32, "device")
        m.functions.append(f)
        _Gen(rng, m, f, None, list(callees)).function(size // 2)
        callees.append(f)
    main = Function("main", [Value(I32, "a"), Value(I32, "b"), Value(I32, "c"),
                             Value(PointerType(I32), "out")], I32, "device")
    m.functions.append(main)
    _Gen(rng, m, main, main.params[3], callees).function(size)
    return m
