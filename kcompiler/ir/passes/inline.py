"""Inlining of device functions into their callers.

Every ``call`` of a device function that is not recursive (directly or through others) is replaced
by a copy of the callee's body, callees first, so a kernel ends up with no calls at all unless there
is recursion. The CPU target needs this: its kernels become coroutines, and a barrier or warp operation
must sit in the kernel itself (kcompiler/backends/cpu/target.py). Device functions that were called
and no longer are (from a kernel or from a function kept) are removed from the module.

A callee whose body is straight-line up to one final ``return`` is spliced in directly. Any other
(early returns inside ``if``s or loops) is wrapped in a loop that runs once::

    %slot = alloca T                 // the result, when the callee returns one
    %returned = alloca bool          // only when a return sits inside one of the callee's loops
    store %returned, false
    while { condition true } do {
      ...body...                     // `return v` → store %slot, v; [store %returned, true]; break
      break
    }
    %r = load %slot

A ``return`` inside a loop of the callee breaks out of that loop only, so after every callee loop that
contains a return, ``if load(%returned) { break }`` carries the exit outward, loop by loop, to the
wrapper. A callee with a ``return`` inside a while's cond region (where no ``break`` may stand) is not
inlined.
"""
from __future__ import annotations

from ..core import Function, Module, Op, Region, Value, clone_op, replace_uses
from ..types import BOOL, AddressSpace, PointerType, VoidType
from .util import make_const


class _CannotInline(Exception):
    pass


def _callees(fn: Function) -> list[str]:
    return [op.attrs["callee"] for op in fn.body.walk() if op.name == "call"]


def _recursive(module: Module) -> set[str]:
    """Names of the functions that can reach themselves through calls."""
    graph = {f.name: set(_callees(f)) for f in module.functions}
    out = set()
    for name in graph:
        seen: set[str] = set()
        work = list(graph[name])
        while work:
            n = work.pop()
            if n == name:
                out.add(name)
                break
            if n in seen or n not in graph:
                continue
            seen.add(n)
            work.extend(graph[n])
    return out


def _postorder(module: Module) -> list[Function]:
    """Functions with every callee before its callers (cycles broken anywhere)."""
    by_name = {f.name: f for f in module.functions}
    order: list[Function] = []
    state: dict[str, int] = {}

    def visit(f: Function) -> None:
        state[f.name] = 1
        for c in _callees(f):
            if c in by_name and c not in state:
                visit(by_name[c])
        state[f.name] = 2
        order.append(f)

    for f in module.functions:
        if f.name not in state:
            visit(f)
    return order


def _returns(region: Region) -> list[Op]:
    return [op for op in region.walk() if op.name == "return"]


def _has_return(region: Region) -> bool:
    return any(op.name == "return" for op in region.walk())


def _return_in_loop(region: Region, in_loop: bool = False) -> bool:
    for op in region.ops:
        if op.name == "return" and in_loop:
            return True
        loop = in_loop or op.name in ("for", "while")
        if any(_return_in_loop(r, loop) for r in op.regions):
            return True
    return False


class _Rewriter:
    """Turns the returns of a copied callee body into stores and breaks (module docstring)."""

    def __init__(self, slot: Value | None, flag: Value | None, span):
        self.slot, self.flag, self.span = slot, flag, span

    def region(self, r: Region, in_loop: bool) -> None:
        out: list[Op] = []
        for op in r.ops:
            if op.name == "return":
                if op.operands and self.slot is not None:
                    out.append(Op("store", [self.slot, op.operands[0]], span=op.span))
                if in_loop:
                    assert self.flag is not None
                    t = make_const(True, BOOL, span=op.span)
                    out += [t, Op("store", [self.flag, t.result], span=op.span)]  # type: ignore[list-item]
                out.append(Op("break", span=op.span))
                continue
            out.append(op)
            if op.name == "if":
                for sub in op.regions:
                    self.region(sub, in_loop)
            elif op.name in ("for", "while"):
                if op.name == "while" and _has_return(op.regions[0]):
                    raise _CannotInline("return in a while's cond region")
                body = op.regions[-1]
                has = _has_return(body)
                self.region(body, True)
                if has:
                    assert self.flag is not None
                    f = Op("load", [self.flag], BOOL, span=self.span, hint="returned")
                    then = Region([Op("break", span=self.span)])
                    out += [f, Op("if", [f.result], regions=[then, Region()], span=self.span)]  # type: ignore[list-item]
        r.ops[:] = out


def inline_call(caller: Function, region: Region, index: int, callee: Function,
                replacements: dict[int, Value]) -> list[Op]:
    """The ops replacing the call at ``region.ops[index]`` of ``caller`` by ``callee``'s body. The
    value that replaces the call's result is recorded in ``replacements`` (call result id → value):
    the caller rewrites all uses at once afterwards (one walk per function, not one per call).
    Raises _CannotInline."""
    call = region.ops[index]
    span = call.span
    vmap: dict[int, Value] = {p.id: a for p, a in zip(callee.params, call.operands)}
    body_ops = callee.body.ops
    rets = _returns(callee.body)
    returns_value = not isinstance(callee.ret, VoidType)
    simple = not rets or (len(rets) == 1 and body_ops and body_ops[-1] is rets[0])
    if simple and (rets or not returns_value):
        out = [clone_op(o, vmap) for o in body_ops]
        if rets:
            ret = out.pop()
            if call.result is not None and ret.operands:
                replacements[call.result.id] = ret.operands[0]
        return out
    for w in callee.body.walk():
        if w.name == "while" and _has_return(w.regions[0]):
            raise _CannotInline("return in a while's cond region")
    out = []
    slot = flag = None
    if returns_value:
        s = Op("alloca", [], PointerType(callee.ret, AddressSpace.LOCAL), span=span, hint=f"{callee.name}_ret")
        out.append(s)
        slot = s.result
    if _return_in_loop(callee.body):
        fl = Op("alloca", [], PointerType(BOOL, AddressSpace.LOCAL), span=span, hint="returned")
        false = make_const(False, BOOL, span=span)
        out += [fl, false, Op("store", [fl.result, false.result], span=span)]  # type: ignore[list-item]
        flag = fl.result
    body = Region([clone_op(o, vmap) for o in body_ops])
    _Rewriter(slot, flag, span).region(body, False)
    if not body.ops or body.ops[-1].name != "break":
        body.ops.append(Op("break", span=span))
    true = make_const(True, BOOL, span=span)
    cond = Region([true, Op("condition", [true.result], span=span)])  # type: ignore[list-item]
    out.append(Op("while", regions=[cond, body], span=span))
    if slot is not None:
        r = Op("load", [slot], callee.ret, span=span, hint=call.result.hint if call.result else "")
        out.append(r)
        if call.result is not None:
            replacements[call.result.id] = r.result  # type: ignore[assignment]
    return out


def _inline_in(caller: Function, region: Region, inlinable: dict[str, Function],
               replacements: dict[int, Value]) -> None:
    i = 0
    while i < len(region.ops):
        op = region.ops[i]
        callee = inlinable.get(op.attrs.get("callee", "")) if op.name == "call" else None
        if callee is not None and callee is not caller:
            try:
                new = inline_call(caller, region, i, callee, replacements)
            except _CannotInline:
                pass
            else:
                region.ops[i:i + 1] = new
                i += len(new)
                continue
        for sub in op.regions:
            _inline_in(caller, sub, inlinable, replacements)
        i += 1


def _resolved(replacements: dict[int, Value]) -> dict[int, Value]:
    """``replacements`` with chains followed: a call's result may be replaced by an argument that was
    itself the result of a call inlined before it."""
    out = {}
    for k, v in replacements.items():
        seen = 0
        while v.id in replacements and seen <= len(replacements):
            v = replacements[v.id]
            seen += 1
        out[k] = v
    return out


def inline_calls(module: Module) -> Module:
    """Inline every call of a non-recursive device function (module docstring), in place; removes the
    device functions that were called and no longer are. Returns the module."""
    recursive = _recursive(module)
    called_before = {c for f in module.functions for c in _callees(f)}
    inlinable = {f.name: f for f in module.functions if not f.is_kernel and f.name not in recursive}
    for fn in _postorder(module):
        replacements: dict[int, Value] = {}
        _inline_in(fn, fn.body, inlinable, replacements)
        replace_uses(fn.body, _resolved(replacements))
    # Keep what the kernels, and the functions nobody called to begin with, still reach.
    by_name = {f.name: f for f in module.functions}
    keep: set[str] = set()
    work = [f.name for f in module.functions if f.is_kernel or f.name not in called_before]
    while work:
        n = work.pop()
        if n in keep or n not in by_name:
            continue
        keep.add(n)
        work.extend(_callees(by_name[n]))
    module.functions = [f for f in module.functions if f.name in keep]
    return module
