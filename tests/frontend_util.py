"""Helpers for tests that lower kernel-language sources to IR without a backend: a fake target
(``NV``: nvptx sm_90, ``AMD``: amdgcn gfx942 wave64), ``ir``/``text`` (lower a source, check it is
well formed, print it), ``ops`` (a module's ops of one name) and ``assert_well_formed``."""
from __future__ import annotations

from kcompiler.frontend import load_program, lower
from kcompiler.ir import Module, Region, print_module
from kcompiler.ir.core import BINARY, OPS
from kcompiler.ir.types import BOOL, PointerType


class FakeTarget:
    """What lower() needs of a target: name, arch, warp_size, has(), math_unsupported() (here: every
    math builtin on every float type)."""

    def __init__(self, name="nvptx", arch="sm_90", warp_size=32, features=("sm_80", "sm_90", "tma")):
        self.name, self.arch, self.warp_size = name, arch, warp_size
        self.features = frozenset(features)

    def has(self, feature: str) -> bool:
        return feature in self.features

    def math_unsupported(self, fn: str, elem: str) -> None:
        return None


NV = FakeTarget()
AMD = FakeTarget("amdgcn", "gfx942", 64, ("mfma",))


def ir(src: str, target=NV, kernels=None) -> Module:
    m = lower(load_program(src, "t.kc"), target, kernels)
    assert_well_formed(m)
    return m


def text(src: str, target=NV, kernels=None) -> str:
    return print_module(ir(src, target, kernels))


def ops(m: Module, name: str) -> list:
    return [o for f in m.functions for o in f.body.walk() if o.name == name]


def assert_well_formed(m: Module) -> None:
    """A small verifier: operand counts and types per the OPS table, values defined before use,
    nothing after a terminator, a span on every op."""
    for f in m.functions:
        visible = {p.id for p in f.params}
        _check_region(f.body, visible, f.name)


def _check_region(r: Region, visible: set, fn: str) -> None:
    visible = set(visible) | {a.id for a in r.args}
    for k, op in enumerate(r.ops):
        info = OPS[op.name]
        where = f"{fn}: {op.name}"
        assert op.span is not None, f"{where} has no span"
        if info.operands is not None:
            assert len(op.operands) == info.operands, where
        for a in info.attrs:
            assert a in op.attrs, f"{where} lacks attr {a}"
        for v in op.operands:
            assert v.id in visible, f"{where} uses a value not defined before it"
        if info.terminator:
            assert k == len(r.ops) - 1, f"{where} is followed by ops"
        t = [v.type for v in op.operands]
        if op.name in BINARY:
            assert t[0] == t[1] == op.result.type, f"{where}: {t} -> {op.result.type}"
        if op.name == "cmp":
            assert t[0] == t[1], where
            assert op.result.type in (BOOL,) or op.result.type.elem == BOOL
        if op.name == "for":
            assert t[0] == t[1] == t[2] and t[0].is_int, where
        if op.name == "store":
            assert isinstance(t[0], PointerType) and t[0].pointee == t[1], f"{where}: {t}"
        if op.name == "load":
            assert op.result.type == t[0].pointee, where
        if op.name == "elemptr":
            assert isinstance(t[0], PointerType) and t[1].is_int, where
        if op.name == "select":
            assert t[1] == t[2] == op.result.type, where
        if op.name == "math":
            assert all(x == op.result.type for x in t), where
        if op.name in ("atomic", "atomic_cas"):
            assert all(x == t[0].pointee for x in t[1:]), where
        if op.name == "if":
            assert t[0] == BOOL, where
        if op.name == "while":
            cond = op.regions[0]
            assert cond.ops and cond.ops[-1].name == "condition", where
        for reg in op.regions:
            _check_region(reg, visible, fn)
        if op.result is not None:
            visible.add(op.result.id)
