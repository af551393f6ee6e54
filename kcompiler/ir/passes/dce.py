"""Dead-code elimination on the structured IR, to a fixed point:

- pure ops (``OpInfo.pure``) whose result is not used;
- ops after a terminator, and after an ``if`` both of whose regions end with one (unreachable);
- ``if`` ops with two empty regions;
- ``alloca`` slots that are only stored to (through the slot itself or through ``elemptr``/``ptrcast``
  of it): the slot, the address computations and the stores go.
"""
from __future__ import annotations

from ..core import OPS, Function, Module, Op, Region, Value

#: Ops through which an address derived from a slot is still only that slot (operand 0).
ADDRESS_OPS = ("elemptr", "ptrcast")


def _always_leaves(ops: list[Op]) -> bool:
    """Whether running ``ops`` never reaches the end (ends with a terminator, or with an ``if`` whose two
    regions both do)."""
    if not ops:
        return False
    last = ops[-1]
    if OPS[last.name].terminator:
        return True
    return last.name == "if" and all(_always_leaves(r.ops) for r in last.regions)


def _truncate(r: Region) -> bool:
    """Drop unreachable ops of ``r`` and nested regions; True when something went."""
    changed = False
    for k, op in enumerate(r.ops):
        for sub in op.regions:
            changed |= _truncate(sub)
        if k + 1 < len(r.ops) and _always_leaves([op]):
            rest = r.ops[k + 1:]
            if not any(o.name == "condition" for o in rest):  # a while's cond region keeps its end
                del r.ops[k + 1:]
                return True
    return changed


def _sweep(r: Region, uses: dict[int, int]) -> bool:
    """Remove unused pure ops and empty ifs, last op first, so a chain of dead ops goes in one sweep."""
    changed = False
    keep: list[Op] = []
    for op in reversed(r.ops):
        for sub in op.regions:
            changed |= _sweep(sub, uses)
        dead = (OPS[op.name].pure and op.result is not None and uses.get(op.result.id, 0) == 0) or (
            op.name == "if" and not op.regions[0].ops and not op.regions[1].ops)
        if dead:
            for v in op.operands:
                uses[v.id] -= 1
            changed = True
        else:
            keep.append(op)
    keep.reverse()
    r.ops[:] = keep
    return changed


def _dead_slots(fn: Function) -> set[int]:
    """ids of the ops to remove for slots only stored to.

    Only the users of a slot and of the addresses derived from it are collected: the walk is in
    program order, so an address (a slot, or an ``elemptr``/``ptrcast`` of one) is seen before its
    users."""
    users: dict[int, list[tuple[Op, int]]] = {}
    allocas: list[Op] = []
    for op in fn.body.walk():
        for k, v in enumerate(op.operands):
            u = users.get(v.id)
            if u is not None:
                u.append((op, k))
        if op.name == "alloca":
            allocas.append(op)
        elif not (op.name in ADDRESS_OPS and op.operands and op.operands[0].id in users):
            continue
        if op.result is not None:
            users[op.result.id] = []
    remove: set[int] = set()
    for a in allocas:
        assert a.result is not None
        doomed = [a]
        work: list[Value] = [a.result]
        ok = True
        while work and ok:
            v = work.pop()
            for user, k in users.get(v.id, []):
                if user.name in ADDRESS_OPS and k == 0 and user.result is not None:
                    doomed.append(user)
                    work.append(user.result)
                elif user.name == "store" and k == 0:
                    doomed.append(user)
                else:
                    ok = False
                    break
        if ok:
            remove.update(id(o) for o in doomed)
    return remove


def _remove(r: Region, ids: set[int]) -> None:
    r.ops[:] = [o for o in r.ops if id(o) not in ids]
    for op in r.ops:
        for sub in op.regions:
            _remove(sub, ids)


def eliminate_dead_code(module: Module) -> Module:
    """Remove dead code from every function of ``module`` in place (module docstring); returns it."""
    for fn in module.functions:
        while True:
            changed = _truncate(fn.body)
            uses: dict[int, int] = {}
            for op in fn.body.walk():
                for v in op.operands:
                    uses[v.id] = uses.get(v.id, 0) + 1
            changed |= _sweep(fn.body, uses)
            slots = _dead_slots(fn)
            if slots:
                _remove(fn.body, slots)
                changed = True
            if not changed:
                break
    return module

