"""kcompiler's IR: structured SSA.

A :class:`Module` holds :class:`Function` s (kernels and device functions). A function's body is a
:class:`Region`: a list of :class:`Op` s run in order. Control flow is structured: ``if``, ``for`` and
``while`` ops own nested regions; there are no basic blocks or branches. Values are SSA (each is defined
once, by an op's result, a function parameter or a region argument such as a ``for`` loop's induction
variable). Mutable variables are explicit slots (``alloca``) read with ``load`` and written with
``store``; LLVM's mem2reg/SROA promote them to registers.

Every op kind, its operands, attributes, regions and result are listed in :data:`OPS` below; that
table is the reference the verifier checks against and the lowering implements.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..diagnostics import SourceSpan
from .types import Type, VOID

_ids = itertools.count()


class Value:
    """An SSA value of type ``type``. ``hint`` is a readable name for printing (may repeat)."""

    __slots__ = ("type", "hint", "id", "owner")

    def __init__(self, type: Type, hint: str = "", owner: "Op | None" = None):
        self.type = type
        self.hint = hint
        self.id = next(_ids)
        self.owner = owner  # the op defining it; None for parameters and region arguments

    def __repr__(self) -> str:
        return f"%{self.hint or 'v'}.{self.id}: {self.type}"


class Region:
    """An ordered list of ops with optional arguments (a ``for`` body's induction variable)."""

    __slots__ = ("ops", "args")

    def __init__(self, ops: list["Op"] | None = None, args: list[Value] | None = None):
        self.ops: list[Op] = ops if ops is not None else []
        self.args: list[Value] = args if args is not None else []

    def walk(self) -> Iterator["Op"]:
        """Every op in this region and, recursively, in regions nested inside it (pre-order).

        Iterative (an explicit stack of op iterators), so that the cost is linear in the number of ops
        however deep the regions nest: a recursive generator pays the depth on every op it yields."""
        stack: list[Iterator[Op]] = [iter(self.ops)]
        while stack:
            op = next(stack[-1], None)
            if op is None:
                stack.pop()
                continue
            yield op
            for r in reversed(op.regions):
                stack.append(iter(r.ops))

    def __len__(self) -> int:
        return len(self.ops)


class Op:
    """One operation: ``name`` from :data:`OPS`, operand values, attributes, nested regions and at
    most one result value (``None`` for ops that produce nothing)."""

    __slots__ = ("name", "operands", "attrs", "regions", "result", "span")

    def __init__(self, name: str, operands: list[Value] | None = None, result_type: Type | None = None,
                 attrs: dict[str, Any] | None = None, regions: list[Region] | None = None,
                 span: SourceSpan | None = None, hint: str = ""):
        self.name = name
        self.operands: list[Value] = list(operands or [])
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.regions: list[Region] = list(regions or [])
        self.span = span
        self.result: Value | None = (
            Value(result_type, hint, self) if result_type is not None and result_type != VOID else None
        )

    def __repr__(self) -> str:
        return f"Op({self.name})"


@dataclass
class Function:
    """A kernel (``kind='kernel'``, an entry point) or a device function (``kind='device'``)."""

    name: str
    params: list[Value]
    ret: Type
    kind: str
    body: Region = field(default_factory=Region)
    span: SourceSpan | None = None
    #: Free-form facts for later stages, e.g. ``{"shared_bytes": 4096}``.
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def is_kernel(self) -> bool:
        return self.kind == "kernel"


@dataclass
class Module:
    """One compilation unit: every specialised kernel and device function reachable from them.

    ``attrs`` holds module facts such as ``target``, ``arch`` and ``warp_size``.
    """

    name: str
    functions: list[Function] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def kernels(self) -> list[Function]:
        return [f for f in self.functions if f.is_kernel]


@dataclass(frozen=True)
class OpInfo:
    """What the verifier knows of an op kind.

    ``operands``: number of operands (None: variadic). ``attrs``: required attribute names.
    ``regions``: number of regions. ``result``: 'none', 'some' (always a result) or 'maybe'.
    ``terminator``: the op ends its region (nothing may follow it).
    """

    operands: int | None
    attrs: tuple[str, ...] = ()
    regions: int = 0
    result: str = "some"
    terminator: bool = False
    pure: bool = True  # no side effects: removable when unused, foldable when constant
    doc: str = ""


BINARY = ("add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor", "shl", "shr")
CMP_PREDICATES = ("eq", "ne", "lt", "le", "gt", "ge")
#: ``fast_exp2 fast_log2 fast_sin fast_cos fast_rsqrt fast_rcp fast_tanh`` are the machine's fast
#: approximations (NVIDIA's ``.approx`` instructions, AMD's v_exp/v_log/v_sin/v_cos/v_rsq/v_rcp; the
#: CPU target models their documented error: backends/cpu/approx.py); the language's accurate
#: ``exp2``, ``sin``, ... are calls of std.math, not ops. ``sqrt`` is correctly rounded.
#: ``fast_rcp_normal`` and ``fast_rsqrt_normal`` are fast_rcp and fast_rsqrt for arguments that are
#: normal numbers with normal results (or zeros, infinities, NaN): a subnormal argument or result
#: gives an unspecified value (NVIDIA's ``.ftz`` forms flush it to zero), which spares NVIDIA's
#: subnormal handling around the one MUFU instruction (see :data:`NORMAL_RANGE_MATH`).
MATH_FUNCTIONS = ("sqrt", "fast_rsqrt", "fast_rcp", "fast_rcp_normal", "fast_rsqrt_normal", "fast_exp2",
                  "fast_log2", "fast_sin", "fast_cos", "fast_tanh",
                  "abs", "floor", "ceil", "trunc", "round", "fma", "copysign")
#: The approximate math functions of MATH_FUNCTIONS (the hardware's instructions on GPUs).
APPROX_MATH = ("fast_exp2", "fast_log2", "fast_sin", "fast_cos", "fast_tanh", "fast_rsqrt", "fast_rcp",
               "fast_rcp_normal", "fast_rsqrt_normal")
#: The normal-range math functions, each with the function it restricts.
NORMAL_RANGE_MATH = {"fast_rcp_normal": "fast_rcp", "fast_rsqrt_normal": "fast_rsqrt"}
SPECIAL_REGISTERS = ("thread_id", "block_id", "block_dim", "grid_dim", "lane_id", "warp_id")
ATOMIC_OPS = ("add", "min", "max", "exch", "and", "or", "xor")
MEMORY_ORDERS = ("relaxed", "acquire", "release", "acq_rel", "seq_cst")
SCOPES = ("block", "device", "system")
SHUFFLE_MODES = ("idx", "xor", "down", "up")
#: Integer bit operations (op ``bits``), by their operand count. ``popcount clz ctz ffs`` give i32
#: (CUDA's ``__popc``/``__clz``/``__ffs``: ``ffs`` is 1 + the index of the lowest set bit, 0 for 0;
#: ``clz``/``ctz`` of 0 is the width); ``brev bswap`` reverse the bits / bytes; ``mulhi`` is the high
#: half of the double-width product (signedness from the type); ``funnel_shl(hi, lo, n)`` is the high
#: half of ``hi:lo << (n mod width)`` and ``funnel_shr(hi, lo, n)`` the low half of ``hi:lo >> (n mod
#: width)`` (LLVM's fshl/fshr); ``byte_perm(x, y, s)`` on 32-bit words is CUDA's ``__byte_perm``:
#: byte k of the result is byte ``(s >> 4k) & 7`` of the 8 bytes ``y:x`` (x the low four).
BIT_FUNCTIONS = {"popcount": 1, "clz": 1, "ctz": 1, "ffs": 1, "brev": 1, "bswap": 1, "mulhi": 2,
                 "funnel_shl": 3, "funnel_shr": 3, "byte_perm": 3}
#: The bit operations whose result is i32 (a count or an index), whatever the operand's width.
BIT_COUNTS = ("popcount", "clz", "ctz", "ffs")
#: Float classification (op ``fclass``): the test, on the bit pattern of any float type (the 8-, 6-
#: and 4-bit formats by kcompiler.numerics.formats' encodings); result bool (vec<bool, N>).
FCLASS_TESTS = ("isnan", "isinf", "isfinite", "signbit")

#: Every op kind of the IR. Types follow C rules made explicit: binary ops take two operands of the
#: same type (scalar or vector) and give that type; signedness comes from the type (``div`` on ``u32``
#: is unsigned); ``shr`` is arithmetic on signed types and logical on unsigned ones.
OPS: dict[str, OpInfo] = {
    "const": OpInfo(0, ("value",), doc="a constant scalar or splatted vector; attr value: int|float|bool"),
    **{b: OpInfo(2, doc=f"elementwise {b}") for b in BINARY},
    "neg": OpInfo(1, doc="arithmetic negation"),
    "not": OpInfo(1, doc="bitwise not (logical not on bool)"),
    "cmp": OpInfo(2, ("pred",), doc="compare; attr pred in CMP_PREDICATES; result bool (or vec<bool>)"),
    "select": OpInfo(3, doc="select(cond, a, b)"),
    "cast": OpInfo(1, doc="value conversion between scalar (or same-length vector) types, C rules"),
    "bitcast": OpInfo(1, doc="reinterpret the bits as a type of the same size; between a global/const "
                             "pointer and u64/i64: the address"),
    "math": OpInfo(None, ("fn",), doc="attr fn in MATH_FUNCTIONS; float operands of one type"),
    "bits": OpInfo(None, ("fn",), doc="attr fn in BIT_FUNCTIONS; integer operands of one type (scalar or "
                                      "vector); result that type, or i32 (vec<i32, N>) for BIT_COUNTS"),
    "fclass": OpInfo(1, ("test",), doc="attr test in FCLASS_TESTS on a float (vector); result bool "
                                       "(vec<bool, N>)"),
    "alloca": OpInfo(0, doc="a per-thread slot; result ptr<T, local>"),
    "shared": OpInfo(0, ("symbol",), doc="a static shared-memory array; result ptr<[T; N], shared>"),
    "const_data": OpInfo(0, ("symbol", "values"), doc="a module constant table (one per symbol) holding the "
                         "scalars of attr values; result ptr<[T; N], constant>"),
    "dyn_shared": OpInfo(0, doc="the block's dynamic shared memory; result ptr<T, shared>"),
    "elemptr": OpInfo(2, doc="elemptr(p, i): p + i elements; on ptr<[T;N]> the address of element i"),
    "ptrcast": OpInfo(1, doc="ptr<T, s> to ptr<U, s>"),
    "fieldptr": OpInfo(1, ("index",), doc="fieldptr(p): on ptr<S> (S a struct), the address of field attr index"),
    "struct_build": OpInfo(None, doc="a struct value from one operand per field, in order"),
    "struct_get": OpInfo(1, ("index",), doc="struct_get(s): field attr index of a struct value"),
    "load": OpInfo(1, pure=False, doc="load(p) -> pointee of p; attr align (bytes, optional)"),
    "store": OpInfo(2, result="none", pure=False, doc="store(p, v); attr align (optional)"),
    "vec_build": OpInfo(None, doc="vector from N scalars"),
    "splat": OpInfo(1, doc="vector with every lane the scalar operand"),
    "extract": OpInfo(2, doc="extract(v, i): lane i"),
    "insert": OpInfo(3, doc="insert(v, x, i): v with lane i set to x"),
    "special": OpInfo(0, ("reg",), doc="a special register; attr reg in SPECIAL_REGISTERS, dim 'x'|'y'|'z'"),
    "barrier": OpInfo(0, result="none", pure=False, doc="block-wide barrier, also orders shared memory"),
    "fence": OpInfo(0, ("scope",), result="none", pure=False, doc="memory fence at a scope"),
    "atomic": OpInfo(2, ("op", "order", "scope"), pure=False, doc="atomic read-modify-write; result old"),
    "atomic_cas": OpInfo(3, ("order", "scope"), pure=False, doc="atomic_cas(p, cmp, new); result old"),
    "atomic_load": OpInfo(1, ("order", "scope"), pure=False, doc="atomic load(p) at an order and scope"),
    "atomic_store": OpInfo(2, ("order", "scope"), result="none", pure=False,
                           doc="atomic store(p, v) at an order and scope"),
    "shuffle": OpInfo(2, ("mode",), pure=False, doc="warp shuffle(v, lane|mask|delta); attr mode"),
    "ballot": OpInfo(1, pure=False, doc="bit per active lane whose predicate is true; result u64"),
    "active_mask": OpInfo(0, pure=False, doc="bit per active lane; result u64"),
    "read_first_lane": OpInfo(1, pure=False, doc="the value of the lowest active lane"),
    "warp_sync": OpInfo(None, result="none", pure=False,
                        doc="warp_sync([mask: u64]): the lanes of mask (default: the active ones) "
                            "reconverge here, memory ordered among them"),
    "nanosleep": OpInfo(1, result="none", pure=False, doc="nanosleep(ns: u32): a hint to back off a spin loop"),
    "sched_barrier": OpInfo(0, result="none", pure=False,
                            doc="sched_barrier(): the machine scheduler moves no instruction across this point"),
    "prefetch_l2": OpInfo(2, result="none", pure=False,
                          doc="prefetch_l2(p: global ptr, bytes: i32): a hint to bring those bytes into L2"),
    "grid_dependency_wait": OpInfo(0, result="none", pure=False,
                                   doc="wait for the stream's previous launch to end, its writes visible "
                                       "(a kernel holding it launches with programmatic stream serialisation)"),
    "launch_dependents": OpInfo(0, result="none", pure=False,
                                doc="let the stream's next launch start once every block got here or ended"),
    "trap": OpInfo(0, ("reason",), result="none", pure=False,
                   doc="stop this thread and fail the launch (GPUs: the trap instruction; the cpu target "
                       "records the error); attr reason: 'assert' (a failed device assertion, whose "
                       "message was printed before); optional attrs message (the condition's text) and "
                       "function (the name of the function it is in), for CUDA's __assertfail; the code "
                       "after it is not reached"),
    "hostcall_buffer": OpInfo(0, pure=False, doc="the address (u64) of the launch's hostcall buffer, 0 if none"),
    "printf_buffer": OpInfo(0, ("format",), pure=False,
                            doc="the address (u64) of the launch's printf buffer (printf=\"buffered\"), 0 if "
                                "none; attr format: the format of the record about to be written, "
                                "which the backend registers under its hash"),
    "hostcall_interrupt": OpInfo(1, result="none", pure=False,
                                 doc="hostcall_interrupt(event_id: u32): wake the host's listener (AMD "
                                     "s_sendmsg; nothing where the host polls)"),
    "printf": OpInfo(None, ("format",), result="none", pure=False,
                     doc="printf(args...) with attr format (str: a checked C format, string literals "
                         "folded in); operands of the promoted types i32, u32, i64, u64, f64, or pointers "
                         "(%s, %p); each conversion's arguments in order (kcompiler.ir.printf.expected_args)"),
    "string": OpInfo(0, ("value",), doc="a NUL-terminated string constant (attr value: str, stored as "
                                        "UTF-8); result ptr<u8, const>"),
    "call": OpInfo(None, ("callee",), result="maybe", pure=False, doc="call a device function"),
    "return": OpInfo(None, result="none", terminator=True, pure=False, doc="return [value]"),
    "break": OpInfo(0, result="none", terminator=True, pure=False, doc="leave the innermost loop"),
    "continue": OpInfo(0, result="none", terminator=True, pure=False, doc="next iteration"),
    "if": OpInfo(1, regions=2, result="none", pure=False, doc="if(cond) {then} {else}"),
    "for": OpInfo(3, regions=1, result="none", pure=False,
                  doc="for(lo, hi, step) {body(iv)}: iv = lo; while iv < hi (step > 0) or iv > hi "
                      "(step < 0); iv += step. attr unroll=True asks for full unrolling"),
    "while": OpInfo(0, regions=2, result="none", pure=False, doc="while {cond ... condition(c)} {body}"),
    "condition": OpInfo(1, result="none", terminator=True, pure=False, doc="ends a while's cond region"),
    "intrinsic": OpInfo(None, ("intrinsic",), result="maybe", pure=False,
                        doc="a target instruction: attr intrinsic names an entry of the intrinsic registry "
                            "(ir/intrinsics.py; \"<backend>.<instruction>\", e.g. nvptx.mma.sync), whose type "
                            "rule checks the operands, the other attributes and the result"),
}


# --- cloning and rewriting (used by the passes) ----------------------------------------------------

def clone_op(op: Op, value_map: dict[int, Value]) -> Op:
    """A deep copy of ``op``: its operands are looked up in ``value_map`` (Value.id → Value; values not
    in it, defined outside what is cloned, are kept), its result and the arguments of its nested regions
    are new Values, and the map is extended with old id → new value for each of them."""
    # Op's slots filled directly, not through Op.__init__ (whose copies of the lists and the dict
    # would be made twice): inlining clones every op of a callee's body at each call.
    new = _new_op(Op)
    new.name = op.name
    new.operands = [value_map.get(v.id, v) for v in op.operands]
    new.attrs = dict(op.attrs)
    new.span = op.span
    res = op.result
    if res is not None:
        r = Value(res.type, res.hint, new)
        new.result = r
        value_map[res.id] = r
    else:
        new.result = None
    new.regions = [clone_region(r, value_map) for r in op.regions] if op.regions else []
    return new


_new_op = object.__new__


def clone_region(region: Region, value_map: dict[int, Value]) -> Region:
    """A deep copy of ``region`` (new region arguments, new results for every op); see :func:`clone_op`.
    ``value_map`` may pre-map the region's own arguments to other values: those are then substituted and
    the copy's ``args`` keeps the mapped ones."""
    args = []
    for a in region.args:
        if a.id not in value_map:
            value_map[a.id] = Value(a.type, a.hint)
        args.append(value_map[a.id])
    return Region([clone_op(op, value_map) for op in region.ops], args)


def replace_uses(region: Region, value_map: dict[int, Value]) -> None:
    """Rewrite, in place, every operand of every op in ``region`` (recursively) found in ``value_map``
    (Value.id → replacement Value)."""
    if not value_map:
        return
    for op in region.walk():
        if any(v.id in value_map for v in op.operands):
            op.operands = [value_map.get(v.id, v) for v in op.operands]


def use_counts(region: Region) -> dict[int, int]:
    """How many operand slots in ``region`` (recursively) use each Value, by Value.id."""
    counts: dict[int, int] = {}
    for op in region.walk():
        for v in op.operands:
            counts[v.id] = counts.get(v.id, 0) + 1
    return counts
