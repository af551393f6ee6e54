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
#: ``exp2 log2 sin cos rsqrt rcp tanh`` are the machine's fast approximations (NVIDIA's ``.approx``
#: instructions, AMD's v_exp/v_log/v_sin/v_cos/v_rsq/v_rcp; the CPU computes them with LLVM's
#: libm-accurate versions); std.math has the accurate functions. ``sqrt`` is correctly rounded.
#: ``rcp_normal`` and ``rsqrt_normal`` are rcp and rsqrt for arguments that are normal numbers with
#: normal results (or zeros, infinities, NaN): a subnormal argument or result gives an unspecified
#: value (NVIDIA's ``.ftz`` forms flush it to zero), which spares NVIDIA's subnormal handling around
#: the one MUFU instruction (see :data:`NORMAL_RANGE_MATH`).
MATH_FUNCTIONS = ("sqrt", "rsqrt", "rcp", "rcp_normal", "rsqrt_normal", "exp2", "log2", "sin", "cos", "tanh",
                  "abs", "floor", "ceil", "trunc", "round", "fma", "copysign")
#: The normal-range math functions, each with the function it restricts.
NORMAL_RANGE_MATH = {"rcp_normal": "rcp", "rsqrt_normal": "rsqrt"}
SPECIAL_REGISTERS = ("thread_id", "block_id", "block_dim", "grid_dim", "lane_id", "warp_id")
ATOMIC_OPS = ("add", "min", "max", "exch", "and", "or", "xor")
MEMORY_ORDERS = ("relaxed", "acquire", "release", "acq_rel", "seq_cst")
SCOPES = ("block", "device", "system")
SHUFFLE_MODES = ("idx", "xor", "down", "up")

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
    "alloca": OpInfo(0, doc="a per-thread slot; result ptr<T, local>"),
    "shared": OpInfo(0, ("symbol",), doc="a static shared-memory array; result ptr<[T; N], shared>"),
    "dyn_shared": OpInfo(0, doc="the block's dynamic shared memory; result ptr<T, shared>"),
    "elemptr": OpInfo(2, doc="elemptr(p, i): p + i elements; on ptr<[T;N]> the address of element i"),
    "ptrcast": OpInfo(1, doc="ptr<T, s> to ptr<U, s>"),
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
                         "(%s, %p); each conversion's arguments in order (kcompiler.printf.expected_args)"),
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
    # Asynchronous tensor-core and copy-engine operations of NVIDIA sm_90 / sm_90a (ASYNC_OPS; PTX and
    # layouts in backends/nvptx/wgmma.py and tma.py); lowered by Target.async_op.
    "wgmma": OpInfo(4, ("n", "a_type", "b_type", "trans_b"), pure=False,
                    doc="wgmma(a_desc: u64, b_desc: u64, acc: vec<f32, n / 2>, scale_d: bool) -> vec<f32, n / 2>: "
                        "D (64 x n) = A * B + (scale_d ? acc : 0) by one warpgroup; A and B in shared memory "
                        "through descriptors, of attr a_type / b_type (bf16, f16: k16; f8e4m3, f8e5m2: k32)"),
    "wgmma_fence": OpInfo(0, result="none", pure=False, doc="wgmma.fence: order accumulator accesses before wgmma"),
    "wgmma_commit": OpInfo(0, result="none", pure=False, doc="close the warpgroup's pending wgmmas into a group"),
    "wgmma_wait": OpInfo(0, ("n",), result="none", pure=False,
                         doc="wait until at most attr n of the warpgroup's wgmma groups are pending"),
    "wgmma_desc": OpInfo(1, ("swizzle", "lbo", "sbo"),
                         doc="wgmma_desc(p: ptr<T, shared>) -> u64: the matrix descriptor of the tile at p "
                             "(attrs: swizzle bytes 0/32/64/128, leading and stride byte offsets)"),
    "tma_load": OpInfo(None, result="none", pure=False,
                       doc="tma_load(dst: ptr<T, shared>, map: tensor_map, bar: ptr<u64, shared>, c0: i32, ...): "
                           "copy the map's box at coordinates (c0 innermost, ...) into dst, completing on bar"),
    "mbarrier_init": OpInfo(2, result="none", pure=False, doc="mbarrier_init(bar: ptr<u64, shared>, count: u32)"),
    "mbarrier_arrive": OpInfo(1, result="none", pure=False, doc="mbarrier_arrive(bar: ptr<u64, shared>)"),
    "mbarrier_arrive_expect_tx": OpInfo(2, result="none", pure=False,
                                        doc="mbarrier_arrive_expect_tx(bar: ptr<u64, shared>, bytes: u32)"),
    "mbarrier_try_wait": OpInfo(2, pure=False,
                                doc="mbarrier_try_wait(bar: ptr<u64, shared>, parity: u32) -> bool: whether the "
                                    "phase of that parity has completed"),
    "mbarrier_wait": OpInfo(2, result="none", pure=False,
                            doc="mbarrier_wait(bar: ptr<u64, shared>, parity: u32): until that phase completes"),
    "setmaxnreg": OpInfo(0, ("n", "increase"), result="none", pure=False,
                         doc="the warpgroup's register budget a thread becomes attr n (increase: bool)"),
    "fence_proxy_async": OpInfo(0, result="none", pure=False,
                                doc="order generic-proxy shared-memory accesses before async-proxy ones"),
    # Warp-level matrix operations and asynchronous copies (NVIDIA sm_80+; backends/nvptx/mma.py has
    # the PTX and the fragment layouts, backends/cpu/warp_matrix.py an emulation).
    "mma": OpInfo(3, ("shape",), pure=False,
                  doc="mma(a, b, c) -> d = a * b + c by one warp; attr shape in MMA_SHAPES; per lane: "
                      "m16n8k16 a vec<T, 8>, b vec<T, 4> (T f16 or bf16), m16n8k32 a vec<F8, 16>, b "
                      "vec<F8', 8> (f8e4m3 or f8e5m2); c and the result vec<f32, 4>"),
    "ldmatrix": OpInfo(1, ("num", "trans"), pure=False,
                       doc="ldmatrix(p: ptr<T, shared>) -> vec<T, N>: num (1, 2, 4) 8x8 matrices of 16-bit "
                           "elements loaded by one warp, each lane giving a row address; trans: bool"),
    "cp_async": OpInfo(3, ("bytes",), result="none", pure=False,
                       doc="cp_async(dst: ptr<T, shared>, src: ptr<T>, src_bytes: u32): copy attr bytes (4, "
                           "8, 16) asynchronously, src_bytes of them read from src, the rest zero-filled"),
    "cp_async_commit": OpInfo(0, result="none", pure=False,
                              doc="close this thread's group of cp_async copies"),
    "cp_async_wait": OpInfo(0, ("n",), result="none", pure=False,
                            doc="wait until at most attr n of this thread's cp_async groups are pending"),
    # AMD CDNA matrix fused multiply-add, one wavefront of 64 lanes (backends/amdgcn/mfma.py has the
    # instructions and the operand layouts, backends/cpu/mfma.py an emulation).
    "mfma": OpInfo(3, ("shape",), pure=False,
                   doc="mfma(a, b, c) -> d = a * b + c by one wavefront; attr shape in MFMA_SHAPES (MxNxK); "
                       "per lane: a and b vec<T, M * K / 64> (T f16 or bf16, one type; or FP8, "
                       "f8e4m3[fnuz] / f8e5m2[fnuz]), c and the result vec<f32, M * N / 64>"),
}

#: The ops lowered by ``Target.async_op`` (NVIDIA sm_90 / sm_90a).
ASYNC_OPS = frozenset({"wgmma", "wgmma_fence", "wgmma_commit", "wgmma_wait", "wgmma_desc", "tma_load",
                       "mbarrier_init", "mbarrier_arrive", "mbarrier_arrive_expect_tx", "mbarrier_try_wait",
                       "mbarrier_wait", "setmaxnreg", "fence_proxy_async"})

#: Shapes of the ``mma`` op (PTX ``mma.sync.aligned.<shape>.row.col.f32.<a>.<b>.f32``).
MMA_SHAPES = ("m16n8k16", "m16n8k32")

#: The forms of the ``mfma`` op (AMD's ``v_mfma_f32_<shape>_<type>``): (operands '16-bit' (bf16/f16) or
#: 'fp8', elements of A and of B a lane holds, f32 of C a lane holds) -> (shape M x N x K, the target
#: feature it needs: ``mfma`` gfx90a+, ``mfma_fp8`` gfx942+, ``mfma_gfx950`` gfx950's new forms).
MFMA_FORMS: dict[tuple[str, int, int], tuple[str, str]] = {
    ("16-bit", 4, 16): ("32x32x8", "mfma"), ("16-bit", 4, 4): ("16x16x16", "mfma"),
    ("16-bit", 8, 16): ("32x32x16", "mfma_gfx950"), ("16-bit", 8, 4): ("16x16x32", "mfma_gfx950"),
    ("fp8", 8, 16): ("32x32x16", "mfma_fp8"), ("fp8", 8, 4): ("16x16x32", "mfma_fp8"),
    ("fp8", 32, 16): ("32x32x64", "mfma_gfx950"), ("fp8", 32, 4): ("16x16x128", "mfma_gfx950"),
}
#: Shapes (M x N x K) of the ``mfma`` op.
MFMA_SHAPES = tuple(dict.fromkeys(shape for shape, _ in MFMA_FORMS.values()))


def mfma_feature(shape: str, a_type: str) -> str:
    """The target feature the ``mfma`` of ``shape`` on elements named ``a_type`` needs (MFMA_FORMS)."""
    M, _, K = (int(x) for x in shape.split("x"))
    kind = "16-bit" if a_type in ("bf16", "f16") else "fp8"
    return next(f for (k, n, _), (s, f) in MFMA_FORMS.items() if k == kind and s == shape and n == M * K // 64)


# --- cloning and rewriting (used by the passes) ----------------------------------------------------

def clone_op(op: Op, value_map: dict[int, Value]) -> Op:
    """A deep copy of ``op``: its operands are looked up in ``value_map`` (Value.id → Value; values not
    in it, defined outside what is cloned, are kept), its result and the arguments of its nested regions
    are new Values, and the map is extended with old id → new value for each of them."""
    new = Op(op.name, [value_map.get(v.id, v) for v in op.operands], None, dict(op.attrs), None, op.span)
    if op.result is not None:
        r = Value(op.result.type, op.result.hint, new)
        new.result = r
        value_map[op.result.id] = r
    new.regions = [clone_region(r, value_map) for r in op.regions]
    return new


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
