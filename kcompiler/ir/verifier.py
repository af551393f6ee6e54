"""The IR verifier: checks a :class:`~kcompiler.ir.core.Module` against the op table
(:data:`~kcompiler.ir.core.OPS`), SSA dominance in structured form, and the typing rules of each op.

    verify(module)      # raises IRVerifyError on the first problem found

What is checked, in order, for every op:

- the op kind exists in OPS; operand count, required attributes, region count and result presence match
  its OpInfo; enumerated attributes hold one of their allowed values (:data:`ATTR_CHOICES`);
- every operand is defined before the op, in the same region or an enclosing one (a region's arguments
  only inside it; values of a ``while``'s cond region are not visible in its body); every value is
  defined once;
- the op's types (one checker per op kind in :data:`_TYPE_RULES`);
- terminators (``return``, ``break``, ``continue``, ``condition``) only as the last op of a region;
  ``break``/``continue`` only inside a loop body (for/while), ``condition`` only as the last op of a
  while's cond region, which must end with one; ``return`` matches the function's return type;
- ``call`` names a function of the module, with matching argument and result types;
- ops in :data:`KERNEL_ONLY` only in kernels.

The verifier reports IR built wrongly by kcompiler itself (frontend or passes), never user mistakes,
which the frontend reports as CompileError with spans; an op's span, when set, is still in the message
so the source construct that produced the bad IR can be found.
"""
from __future__ import annotations

from typing import Any, Callable

from .core import OPS, BINARY, CMP_PREDICATES, MATH_FUNCTIONS, SPECIAL_REGISTERS, ATOMIC_OPS, \
    MEMORY_ORDERS, SCOPES, SHUFFLE_MODES, BIT_FUNCTIONS, BIT_COUNTS, FCLASS_TESTS, Function, Module, Op, \
    Region, Value
from .types import ArrayType, BOOL, PointerType, ScalarType, StructType, Type, U32, U64, VOID, VectorType, VoidType, \
    AddressSpace, elem_of
from .types import F64, I32, I64, U8
from .intrinsics import IntrinsicTypeError, lookup as lookup_intrinsic
from .printf import FormatError, count_args, expected_args, fits_kind, parse_format


class IRVerifyError(Exception):
    """Malformed IR. The message names the function, the op (printed) and what is wrong."""


#: Attributes whose value must be one of a fixed set (checked wherever the attribute is present).
ATTR_CHOICES: dict[str, tuple[str, ...]] = {
    "pred": CMP_PREDICATES, "fn": MATH_FUNCTIONS, "reg": SPECIAL_REGISTERS, "order": MEMORY_ORDERS,
    "scope": SCOPES, "mode": SHUFFLE_MODES, "dim": ("x", "y", "z"),
}
#: ... except where one op's attribute of that name means something else.
ATTR_CHOICES_BY_OP: dict[tuple[str, str], tuple[str, ...]] = {
    ("atomic", "op"): ATOMIC_OPS, ("bits", "fn"): tuple(BIT_FUNCTIONS), ("fclass", "test"): FCLASS_TESTS}

#: Op kinds allowed only in kernels (a static shared array belongs to a kernel's block).
KERNEL_ONLY = frozenset({"shared"})

#: Binary ops allowed per element kind ('int' covers signed and unsigned).
BINARY_KINDS: dict[str, frozenset[str]] = {
    "int": frozenset(BINARY),
    "float": frozenset({"add", "sub", "mul", "div", "rem", "min", "max"}),
    "bool": frozenset({"and", "or", "xor"}),
    "minifloat": frozenset(),  # storage only: converted to a float to compute
}

#: Number of operands of each math function.
MATH_ARITY: dict[str, int] = {**{f: 1 for f in MATH_FUNCTIONS}, "fma": 3, "copysign": 2}

LOOPS = ("for", "while")
FUNCTION_KINDS = ("kernel", "device")


# --- printing one op for messages ------------------------------------------------------------------

def _name(v: Value) -> str:
    return f"%{v.hint + '.' if v.hint else ''}{v.id}"


def format_op(op: Op) -> str:
    """One line for ``op`` (nested regions elided): ``%r.12 = add %a.3, %b.4 : i32``."""
    lhs = f"{_name(op.result)} = " if op.result is not None else ""
    attrs = " {" + ", ".join(f"{k}={v!r}" for k, v in op.attrs.items()) + "}" if op.attrs else ""
    ops = ", ".join(_name(v) if isinstance(v, Value) else repr(v) for v in op.operands)
    regions = " {...}" * len(op.regions)
    ty = f" : {op.result.type}" if op.result is not None else ""
    return f"{lhs}{op.name}{attrs}{' ' if ops else ''}{ops}{ty}{regions}"


# --- type rules -------------------------------------------------------------------------------------

class _Fail(Exception):
    pass


def _req(cond: Any, msg: str) -> None:
    if not cond:
        raise _Fail(msg)


def _res(op: Op) -> Type:
    return op.result.type if op.result is not None else VOID


def _is_num(t: Type) -> bool:
    """Scalar or vector (of scalars)."""
    return isinstance(t, (ScalarType, VectorType))


def _is_int_scalar(t: Type) -> bool:
    return isinstance(t, ScalarType) and t.is_int


def _kind(t: Type) -> str:
    e = elem_of(t)
    return "int" if e.is_int else e.kind


def _lanes(t: Type) -> int | None:
    return t.count if isinstance(t, VectorType) else None


def _t_const(op: Op, fn: Function, m: Module) -> None:
    t = _res(op)
    _req(_is_num(t), f"a const must be a scalar or vector, not {t}")
    v = op.attrs["value"]
    e = elem_of(t)
    if e.is_bool:
        _req(isinstance(v, bool) or v in (0, 1), f"bool const with value {v!r}")
    elif e.is_int:
        _req(isinstance(v, int), f"integer const with non-integer value {v!r}")
        lo = -(1 << (e.bits - 1))
        hi = (1 << e.bits) - 1
        _req(lo <= v <= hi, f"const {v} does not fit in {e}")
    else:
        _req(isinstance(v, (int, float)), f"float const with value {v!r}")


def _t_binary(op: Op, fn: Function, m: Module) -> None:
    a, b = (v.type for v in op.operands)
    _req(a == b, f"operand types differ: {a} and {b}")
    _req(_is_num(a), f"'{op.name}' on {a}: needs scalars or vectors")
    _req(op.name in BINARY_KINDS[_kind(a)], f"'{op.name}' is not defined on {a}")
    _req(_res(op) == a, f"result type {_res(op)} differs from the operand type {a}")


def _t_neg(op: Op, fn: Function, m: Module) -> None:
    a = op.operands[0].type
    _req(_is_num(a) and _kind(a) in ("int", "float"), f"neg on {a}")
    _req(_res(op) == a, f"result type {_res(op)} differs from the operand type {a}")


def _t_not(op: Op, fn: Function, m: Module) -> None:
    a = op.operands[0].type
    _req(_is_num(a) and _kind(a) in ("int", "bool"), f"not on {a}")
    _req(_res(op) == a, f"result type {_res(op)} differs from the operand type {a}")


def _t_cmp(op: Op, fn: Function, m: Module) -> None:
    a, b = (v.type for v in op.operands)
    _req(a == b, f"operand types differ: {a} and {b}")
    _req(_is_num(a), f"cmp on {a}: needs scalars or vectors")
    _req(_kind(a) != "minifloat", f"cmp on {a}: small floats are compared as floats after a cast")
    want = VectorType(BOOL, a.count) if isinstance(a, VectorType) else BOOL
    _req(_res(op) == want, f"cmp of {a} gives {want}, not {_res(op)}")


def _t_select(op: Op, fn: Function, m: Module) -> None:
    c, a, b = (v.type for v in op.operands)
    _req(a == b, f"the two choices have different types: {a} and {b}")
    _req(c == BOOL or (isinstance(c, VectorType) and c.elem == BOOL and _lanes(a) == c.count),
         f"select condition of type {c} (needs bool, or vec<bool, N> with N-lane choices of type {a})")
    _req(_res(op) == a, f"result type {_res(op)} differs from the choices' type {a}")


def _t_cast(op: Op, fn: Function, m: Module) -> None:
    s, d = op.operands[0].type, _res(op)
    _req(_is_num(s) and _is_num(d), f"cast from {s} to {d}: only scalars and vectors convert")
    _req(_lanes(s) == _lanes(d), f"cast from {s} to {d} changes the number of lanes")
    if "minifloat" in (_kind(s), _kind(d)):
        _req({_kind(s), _kind(d)} <= {"float", "minifloat"}, f"cast from {s} to {d}: small floats convert "
             "to and from floats only")
    else:
        _req("saturate" not in op.attrs, f"cast from {s} to {d}: saturate is for casts into small floats")
    _req("exact_nan" not in op.attrs or _kind(s) == "minifloat",
         f"cast from {s} to {d}: exact_nan is for casts from small floats")


def _bits(t: Type) -> int:
    """Bits a value occupies (FP6 and FP4 a whole byte, the code in its low bits)."""
    if isinstance(t, VectorType):
        return _bits(t.elem) * t.count
    assert isinstance(t, ScalarType)
    return 8 if t.is_minifloat else t.bits


def _t_bitcast(op: Op, fn: Function, m: Module) -> None:
    s, d = op.operands[0].type, _res(op)
    if isinstance(s, PointerType) or isinstance(d, PointerType):
        ptr, num = (s, d) if isinstance(s, PointerType) else (d, s)
        _req(isinstance(ptr, PointerType) and ptr.space in (AddressSpace.GLOBAL, AddressSpace.CONST)
             and isinstance(num, ScalarType) and num.is_int and num.bits == 64,
             f"bitcast from {s} to {d}: a pointer converts only between global/const and a 64-bit integer")
        return
    _req(_is_num(s) and _is_num(d) and not elem_of(s).is_bool and not elem_of(d).is_bool,
         f"bitcast from {s} to {d}: only non-bool scalars and vectors (ptrcast converts pointers)")
    _req(_bits(s) == _bits(d), f"bitcast from {s} ({_bits(s)} bits) to {d} ({_bits(d)} bits)")


def _t_math(op: Op, fn: Function, m: Module) -> None:
    f = op.attrs["fn"]
    n = MATH_ARITY.get(f)
    _req(len(op.operands) == n, f"math {f} takes {n} operands, not {len(op.operands)}")
    t = op.operands[0].type
    _req(all(v.type == t for v in op.operands), "math operands of different types")
    _req(_is_num(t) and (elem_of(t).is_float or (f == "abs" and elem_of(t).is_int)),
         f"math {f} on {t}")
    _req(_res(op) == t, f"result type {_res(op)} differs from the operand type {t}")


def _t_bits(op: Op, fn: Function, m: Module) -> None:
    f = op.attrs["fn"]
    n = BIT_FUNCTIONS[f]
    _req(len(op.operands) == n, f"bits {f} takes {n} operands, not {len(op.operands)}")
    t = op.operands[0].type
    _req(all(v.type == t for v in op.operands), "bits operands of different types")
    _req(_is_num(t) and elem_of(t).is_int, f"bits {f} on {t} (needs integers)")
    if f == "byte_perm":
        _req(isinstance(t, ScalarType) and t.bits == 32, f"bits byte_perm on {t} (needs a 32-bit integer)")
    if f == "bswap":
        _req(elem_of(t).bits in (16, 32, 64), f"bits bswap on {t} (needs 16, 32 or 64 bits)")
    want = (VectorType(I32, t.count) if isinstance(t, VectorType) else I32) if f in BIT_COUNTS else t
    _req(_res(op) == want, f"bits {f} on {t} gives {want}, not {_res(op)}")


def _t_fclass(op: Op, fn: Function, m: Module) -> None:
    t = op.operands[0].type
    e = elem_of(t)
    _req(_is_num(t) and (e.is_float or e.is_minifloat), f"fclass {op.attrs['test']} on {t} (needs floats)")
    want = VectorType(BOOL, t.count) if isinstance(t, VectorType) else BOOL
    _req(_res(op) == want, f"fclass on {t} gives {want}, not {_res(op)}")


def _pointer(v: Value, what: str = "operand") -> PointerType:
    _req(isinstance(v.type, PointerType), f"{what} of type {v.type} is not a pointer")
    return v.type  # type: ignore[return-value]


def _result_pointer(op: Op, space: AddressSpace | None = None) -> PointerType:
    t = _res(op)
    _req(isinstance(t, PointerType), f"result of type {t} is not a pointer")
    assert isinstance(t, PointerType)
    _req(not isinstance(t.pointee, VoidType), f"pointer to void: {t}")
    if space is not None:
        _req(t.space == space, f"result {t} is not in the {space} address space")
    return t


def _t_alloca(op: Op, fn: Function, m: Module) -> None:
    _result_pointer(op, AddressSpace.LOCAL)


def _t_shared(op: Op, fn: Function, m: Module) -> None:
    _result_pointer(op, AddressSpace.SHARED)
    if op.name == "shared":
        _req(isinstance(op.attrs["symbol"], str) and op.attrs["symbol"], "shared needs a symbol name")


def _t_const_data(op: Op, fn: Function, m: Module) -> None:
    t = _result_pointer(op, AddressSpace.CONSTANT)
    _req(isinstance(t.pointee, ArrayType) and isinstance(t.pointee.elem, ScalarType),
         f"const_data gives a pointer to an array of scalars, not {t}")
    _req(isinstance(op.attrs["symbol"], str) and op.attrs["symbol"], "const_data needs a symbol name")
    _req(isinstance(op.attrs["values"], list) and len(op.attrs["values"]) == t.pointee.count,
         f"const_data of {t.pointee} needs {t.pointee.count} values")


def _t_elemptr(op: Op, fn: Function, m: Module) -> None:
    p = _pointer(op.operands[0], "base")
    i = op.operands[1].type
    _req(_is_int_scalar(i), f"index of type {i} is not an integer")
    elem = p.pointee.elem if isinstance(p.pointee, ArrayType) else p.pointee
    want = PointerType(elem, p.space)
    _req(_res(op) == want, f"elemptr of {p} gives {want}, not {_res(op)}")


def _t_ptrcast(op: Op, fn: Function, m: Module) -> None:
    p = _pointer(op.operands[0])
    r = _result_pointer(op)
    _req(r.space == p.space, f"ptrcast changes the address space: {p} to {r}")


def _loadable(t: Type) -> bool:
    return isinstance(t, (ScalarType, VectorType, PointerType, ArrayType, StructType))


def _t_load(op: Op, fn: Function, m: Module) -> None:
    p = _pointer(op.operands[0])
    _req(_loadable(p.pointee), f"load through {p}")
    _req(_res(op) == p.pointee, f"load through {p} gives {p.pointee}, not {_res(op)}")
    _align(op)


def _t_store(op: Op, fn: Function, m: Module) -> None:
    p = _pointer(op.operands[0])
    v = op.operands[1].type
    _req(v == p.pointee, f"store of {v} through {p} (needs {p.pointee})")
    _align(op)


def _align(op: Op) -> None:
    a = op.attrs.get("align")
    if a is not None:
        _req(isinstance(a, int) and a > 0 and a & (a - 1) == 0, f"align={a!r} is not a power of two")


def _field(st: Type, op: Op) -> Type:
    _req(isinstance(st, StructType), f"{op.name} of {st} (needs a struct)")
    i = op.attrs["index"]
    _req(isinstance(i, int) and 0 <= i < len(st.fields), f"field index {i!r} out of range for {st}")
    return st.fields[i][1]


def _t_fieldptr(op: Op, fn: Function, m: Module) -> None:
    p = _pointer(op.operands[0])
    want = PointerType(_field(p.pointee, op), p.space)
    _req(_res(op) == want, f"fieldptr of {p} gives {want}, not {_res(op)}")


def _t_struct_get(op: Op, fn: Function, m: Module) -> None:
    ft = _field(op.operands[0].type, op)
    _req(_res(op) == ft, f"struct_get gives {ft}, not {_res(op)}")


def _t_struct_build(op: Op, fn: Function, m: Module) -> None:
    st = _res(op)
    _req(isinstance(st, StructType), f"struct_build of {st}")
    _req([v.type for v in op.operands] == [t for _, t in st.fields],  # type: ignore[union-attr]
         f"struct_build of {st} from {[str(v.type) for v in op.operands]}")


def _t_vec_build(op: Op, fn: Function, m: Module) -> None:
    _req(op.operands, "vec_build of no elements")
    t = op.operands[0].type
    _req(isinstance(t, ScalarType), f"vec_build of {t} (needs scalars)")
    _req(all(v.type == t for v in op.operands), "vec_build elements of different types")
    want = VectorType(t, len(op.operands))  # type: ignore[arg-type]
    _req(_res(op) == want, f"vec_build gives {want}, not {_res(op)}")


def _t_splat(op: Op, fn: Function, m: Module) -> None:
    t = op.operands[0].type
    r = _res(op)
    _req(isinstance(t, ScalarType), f"splat of {t} (needs a scalar)")
    _req(isinstance(r, VectorType) and r.elem == t, f"splat of {t} gives {r}")


def _t_extract(op: Op, fn: Function, m: Module) -> None:
    v, i = (x.type for x in op.operands)
    _req(isinstance(v, VectorType), f"extract from {v} (needs a vector)")
    _req(_is_int_scalar(i), f"lane index of type {i} is not an integer")
    _req(_res(op) == v.elem, f"extract from {v} gives {v.elem}, not {_res(op)}")  # type: ignore[union-attr]


def _t_insert(op: Op, fn: Function, m: Module) -> None:
    v, x, i = (y.type for y in op.operands)
    _req(isinstance(v, VectorType), f"insert into {v} (needs a vector)")
    _req(x == v.elem, f"insert of {x} into {v}")  # type: ignore[union-attr]
    _req(_is_int_scalar(i), f"lane index of type {i} is not an integer")
    _req(_res(op) == v, f"insert gives {v}, not {_res(op)}")


def _t_special(op: Op, fn: Function, m: Module) -> None:
    _req(_is_int_scalar(_res(op)), f"special register of type {_res(op)}")


def _t_atomic(op: Op, fn: Function, m: Module) -> None:
    p = _pointer(op.operands[0])
    for v in op.operands[1:]:
        _req(v.type == p.pointee, f"atomic operand {v.type} through {p}")
    packed = (op.name == "atomic" and op.attrs.get("op") == "add" and isinstance(p.pointee, VectorType)
              and p.pointee.count == 2 and p.pointee.elem.name in ("f16", "bf16"))
    _req(packed or (isinstance(p.pointee, ScalarType) and not p.pointee.is_bool), f"atomic on {p.pointee}")
    _req(_res(op) == p.pointee, f"atomic through {p} gives {p.pointee}, not {_res(op)}")


def _t_shuffle(op: Op, fn: Function, m: Module) -> None:
    v, lane = (x.type for x in op.operands)
    _req(_is_num(v) or isinstance(v, StructType), f"shuffle of {v}")
    _req(_is_int_scalar(lane), f"shuffle lane of type {lane} is not an integer")
    _req(_res(op) == v, f"shuffle of {v} gives {_res(op)}")


def _t_ballot(op: Op, fn: Function, m: Module) -> None:
    if op.operands:
        _req(op.operands[0].type == BOOL, f"ballot of {op.operands[0].type} (needs bool)")
    _req(_res(op) == U64, f"{op.name} gives u64, not {_res(op)}")


def _t_atomic_load(op: Op, fn: Function, m: Module) -> None:
    p = _pointer(op.operands[0])
    _req(isinstance(p.pointee, ScalarType) and not p.pointee.is_bool, f"atomic load of {p.pointee}")
    _req(_res(op) == p.pointee, f"atomic load through {p} gives {p.pointee}, not {_res(op)}")
    _req(op.attrs["order"] in ("relaxed", "acquire", "seq_cst"), f"atomic load with order {op.attrs['order']}")


def _t_atomic_store(op: Op, fn: Function, m: Module) -> None:
    p = _pointer(op.operands[0])
    _req(isinstance(p.pointee, ScalarType) and not p.pointee.is_bool, f"atomic store of {p.pointee}")
    _req(op.operands[1].type == p.pointee, f"atomic store of {op.operands[1].type} through {p}")
    _req(op.attrs["order"] in ("relaxed", "release", "seq_cst"), f"atomic store with order {op.attrs['order']}")


def _t_u32_operand(op: Op, fn: Function, m: Module) -> None:
    _req(op.operands[0].type == U32, f"{op.name} of {op.operands[0].type} (needs u32)")


def _t_warp_sync(op: Op, fn: Function, m: Module) -> None:
    _req(len(op.operands) <= 1, f"warp_sync takes at most one operand (the lane mask), not {len(op.operands)}")
    if op.operands:
        _req(op.operands[0].type == U64, f"warp_sync's lane mask is {op.operands[0].type} (needs u64)")


def _t_u64_result(op: Op, fn: Function, m: Module) -> None:
    _req(_res(op) == U64, f"{op.name} gives u64, not {_res(op)}")


def _t_printf_buffer(op: Op, fn: Function, m: Module) -> None:
    _req(isinstance(op.attrs["format"], str), f"printf_buffer format {op.attrs['format']!r} is not a str")
    _t_u64_result(op, fn, m)


def _t_same_as_operand(op: Op, fn: Function, m: Module) -> None:
    _req(_res(op) == op.operands[0].type, f"result {_res(op)} differs from the operand {op.operands[0].type}")


def _t_call(op: Op, fn: Function, m: Module) -> None:
    name = op.attrs["callee"]
    callee = next((f for f in m.functions if f.name == name), None)
    _req(callee is not None, f"call of @{name}, which is not in the module")
    assert callee is not None
    _req(not callee.is_kernel, f"call of kernel @{name} (only device functions are called)")
    _req(len(op.operands) == len(callee.params),
         f"@{name} takes {len(callee.params)} arguments, the call passes {len(op.operands)}")
    for k, (a, p) in enumerate(zip(op.operands, callee.params)):
        _req(a.type == p.type, f"argument {k} of @{name} is {a.type}, the parameter is {p.type}")
    _req(_res(op) == callee.ret, f"@{name} returns {callee.ret}, the call's result is {_res(op)}")


def _t_return(op: Op, fn: Function, m: Module) -> None:
    if isinstance(fn.ret, VoidType):
        _req(not op.operands, f"return of a value from @{fn.name}, which returns void")
    else:
        _req(len(op.operands) == 1, f"@{fn.name} returns {fn.ret}: return needs one value")
        _req(op.operands[0].type == fn.ret, f"return of {op.operands[0].type} from @{fn.name}, "
                                            f"which returns {fn.ret}")


def _t_bool_operand(op: Op, fn: Function, m: Module) -> None:
    _req(op.operands[0].type == BOOL, f"{op.name} condition of type {op.operands[0].type} (needs bool)")


def _t_for(op: Op, fn: Function, m: Module) -> None:
    lo, hi, step = (v.type for v in op.operands)
    # an unsigned range may count down: its step is then the signed integer of the same width
    down = _is_int_scalar(lo) and not lo.is_signed and _is_int_scalar(step) and step.is_signed \
        and step.bits == lo.bits
    _req(_is_int_scalar(lo) and lo == hi and (step == lo or down),
         f"for bounds of types {lo}, {hi}, {step} (need one integer type; an unsigned range's step may "
         "be the signed integer of its width)")
    args = op.regions[0].args
    _req(len(args) == 1 and args[0].type == lo,
         f"for body needs one argument (the induction variable) of type {lo}")


def _t_printf(op: Op, fn: Function, m: Module) -> None:
    fmt = op.attrs["format"]
    _req(isinstance(fmt, str), f"printf format {fmt!r} is not a string")
    try:
        convs = [p for p in parse_format(fmt) if not isinstance(p, str)]
    except FormatError as e:
        raise _Fail(f"printf format {fmt!r}: {e}") from None
    kinds = [k for c in convs for k in expected_args(c)]
    _req(len(kinds) == len(op.operands),
         f"printf format {fmt!r} reads {count_args(convs)} arguments, the op has {len(op.operands)}")
    for k, (kind, v) in enumerate(zip(kinds, op.operands)):
        _req(isinstance(v.type, PointerType) or v.type in _PRINTF_SCALARS,
             f"printf argument {k} of type {v.type} (needs i32, u32, i64, u64, f64 or a pointer: the "
             "promoted types)")
        _req(fits_kind(kind, v.type), f"printf argument {k} of type {v.type} for a {kind} conversion")


def _t_string(op: Op, fn: Function, m: Module) -> None:
    _req(isinstance(op.attrs["value"], str), f"string constant {op.attrs['value']!r} is not a str")
    want = PointerType(U8, AddressSpace.CONST)
    _req(_res(op) == want, f"a string constant is a {want}, not {_res(op)}")


def _t_intrinsic(op: Op, fn: Function, m: Module) -> None:
    """The generic target-intrinsic op: its registry entry's arity, attributes, result and type rule."""
    name = op.attrs["intrinsic"]
    intr = lookup_intrinsic(name) if isinstance(name, str) else None
    _req(intr is not None, f"unknown intrinsic {name!r} (no backend registers it)")
    assert intr is not None
    _req(intr.operands is None or len(op.operands) == intr.operands,
         f"{name} takes {intr.operands} operands, not {len(op.operands)}")
    for a in intr.attrs:
        _req(a in op.attrs, f"{name} needs attribute '{a}'")
    _req((op.result is not None) == intr.result, f"{name} {'gives a result' if intr.result else 'has no result'}")
    if intr.type_rule is not None:
        try:
            intr.type_rule(op)
        except IntrinsicTypeError as e:
            raise _Fail(str(e)) from None


_PRINTF_SCALARS = (I32, U32, I64, U64, F64)

#: The reasons a ``trap`` op gives (its attr ``reason``).
TRAP_REASONS = ("assert",)


def _t_trap(op: Op, fn: Function, m: Module) -> None:
    if op.attrs.get("reason") not in TRAP_REASONS:
        raise _Fail(f"trap: reason must be one of {', '.join(TRAP_REASONS)}, not {op.attrs.get('reason')!r}")

_TYPE_RULES: dict[str, Callable[[Op, Function, Module], None]] = {
    "printf": _t_printf, "string": _t_string,
    "const": _t_const, **{b: _t_binary for b in BINARY}, "neg": _t_neg, "not": _t_not, "cmp": _t_cmp,
    "select": _t_select, "cast": _t_cast, "bitcast": _t_bitcast, "math": _t_math, "bits": _t_bits,
    "fclass": _t_fclass, "alloca": _t_alloca, "shared": _t_shared, "dyn_shared": _t_shared,
    "const_data": _t_const_data, "elemptr": _t_elemptr, "ptrcast": _t_ptrcast,
    "load": _t_load, "store": _t_store, "fieldptr": _t_fieldptr, "struct_get": _t_struct_get,
    "struct_build": _t_struct_build, "vec_build": _t_vec_build, "splat": _t_splat,
    "extract": _t_extract, "insert": _t_insert, "special": _t_special, "atomic": _t_atomic,
    "atomic_cas": _t_atomic, "shuffle": _t_shuffle, "ballot": _t_ballot, "active_mask": _t_ballot,
    "read_first_lane": _t_same_as_operand, "call": _t_call, "return": _t_return,
    "atomic_load": _t_atomic_load, "atomic_store": _t_atomic_store, "nanosleep": _t_u32_operand,
    "trap": _t_trap,
    "hostcall_interrupt": _t_u32_operand, "hostcall_buffer": _t_u64_result,
    "printf_buffer": _t_printf_buffer, "warp_sync": _t_warp_sync,
    "if": _t_bool_operand, "condition": _t_bool_operand, "for": _t_for,
    "intrinsic": _t_intrinsic,
}

#: Number of arguments each op kind's regions take (absent: none).
REGION_ARGS: dict[str, tuple[int, ...]] = {"for": (1,)}


# --- the walk ----------------------------------------------------------------------------------------

class _Verifier:
    def __init__(self, module: Module):
        self.m = module
        self.fn: Function | None = None
        self.defined: set[int] = set()
        self.visible: set[int] = set()
        self.open_regions: list[Region] = []  # the regions being checked, outermost first (messages)

    def fail(self, op: Op | None, msg: str) -> None:
        where = f"in @{self.fn.name}" if self.fn is not None else f"in module @{self.m.name}"
        text = f"{where}: {format_op(op)}: {msg}" if op is not None else f"{where}: {msg}"
        span = op.span if op is not None and op.span is not None else (
            self.fn.span if self.fn is not None and op is None else None)
        if span is not None:
            text += f" (at {span})"
        raise IRVerifyError(text)

    def module(self) -> None:
        names: set[str] = set()
        for fn in self.m.functions:
            self.fn = fn
            if fn.name in names:
                self.fail(None, f"two functions named @{fn.name}")
            names.add(fn.name)
        for fn in self.m.functions:
            self.function(fn)

    def function(self, fn: Function) -> None:
        self.fn = fn
        if fn.kind not in FUNCTION_KINDS:
            self.fail(None, f"function kind {fn.kind!r} (not one of {FUNCTION_KINDS})")
        if fn.is_kernel and not isinstance(fn.ret, VoidType):
            self.fail(None, f"kernel returns {fn.ret} (kernels return void)")
        self.defined = set()
        self.visible = set()  # the ids in ``scopes``, all levels together (one lookup per use)
        self.open_regions = []
        scope: set[int] = set()
        for p in fn.params:
            self.define(None, p, scope)
        self.region(fn.body, [scope], loop_body=False, cond_region=False)

    def _function_defs(self) -> set[int]:
        """Every value the current function defines (its parameters, op results, region arguments):
        computed only for the message of an operand that is not visible."""
        assert self.fn is not None
        defs = {a.id for a in self.fn.params}
        for op in self.fn.body.walk():
            if op.result is not None:
                defs.add(op.result.id)
            defs.update(a.id for r in op.regions for a in r.args)
        return defs

    def define(self, op: Op | None, v: Value, scope: set[int]) -> None:
        if v.id in self.defined:
            self.fail(op, f"value {_name(v)} is defined twice")
        self.defined.add(v.id)
        self.visible.add(v.id)
        scope.add(v.id)

    def region(self, r: Region, scopes: list[set[int]], loop_body: bool, cond_region: bool) -> None:
        """``loop_body``: break/continue here leave/continue a loop (the innermost enclosing loop region
        is a body); ``cond_region``: ``r`` is a while's cond region itself."""
        scope: set[int] = set()
        for a in r.args:
            self.define(None, a, scope)
        scopes = scopes + [scope]
        self.open_regions.append(r)
        try:
            self._region_ops(r, scopes, loop_body, cond_region, scope)
        finally:
            self.open_regions.pop()
            self.visible -= scope

    def _region_ops(self, r: Region, scopes: list[set[int]], loop_body: bool, cond_region: bool,
                    scope: set[int]) -> None:
        n = len(r.ops)
        for k, op in enumerate(r.ops):
            self.op(op, scopes, loop_body)
            info = OPS[op.name]
            if info.terminator and k != n - 1:
                self.fail(op, f"terminator '{op.name}' is followed by {format_op(r.ops[k + 1])}")
            if op.name == "condition" and not (cond_region and k == n - 1):
                self.fail(op, "condition outside the end of a while's cond region")
            if op.name in ("break", "continue") and not loop_body:
                self.fail(op, f"{op.name} outside a loop body")
            if op.result is not None:
                self.define(op, op.result, scope)
        if cond_region and (not r.ops or r.ops[-1].name != "condition"):
            last = format_op(r.ops[-1]) if r.ops else "nothing"
            self.fail(None, f"a while's cond region ends with {last}, not with condition(bool)")

    def op(self, op: Op, scopes: list[set[int]], loop_body: bool) -> None:
        info = OPS.get(op.name)
        if info is None:
            self.fail(op, f"unknown op '{op.name}'")
        assert info is not None and self.fn is not None
        if info.operands is not None and len(op.operands) != info.operands:
            self.fail(op, f"'{op.name}' takes {info.operands} operands, not {len(op.operands)}")
        for k, v in enumerate(op.operands):
            if not isinstance(v, Value):
                self.fail(op, f"operand {k} is {v!r}, not a Value")
            if v.id not in self.visible:
                if any(o.result is not None and o.result.id == v.id for r in self.open_regions for o in r.ops):
                    why = "used before its definition"
                elif v.id in self._function_defs():
                    why = "not defined in this region or an enclosing one"
                else:
                    why = f"not defined in @{self.fn.name}"
                self.fail(op, f"operand {_name(v)} is {why}")
        for a in info.attrs:
            if a not in op.attrs:
                self.fail(op, f"'{op.name}' needs attribute '{a}'")
        for a, val in op.attrs.items():
            choices = ATTR_CHOICES_BY_OP.get((op.name, a), ATTR_CHOICES.get(a))
            if choices is not None and val not in choices:
                self.fail(op, f"attribute {a}={val!r} is not one of {', '.join(choices)}")
        if len(op.regions) != info.regions:
            self.fail(op, f"'{op.name}' has {info.regions} regions, not {len(op.regions)}")
        if info.result == "some" and op.result is None:
            self.fail(op, f"'{op.name}' must have a result")
        if info.result == "none" and op.result is not None:
            self.fail(op, f"'{op.name}' has no result")
        if op.result is not None and op.result.owner is not op:
            self.fail(op, "the result's owner is another op")
        if op.name in KERNEL_ONLY and not self.fn.is_kernel:
            self.fail(op, f"'{op.name}' is allowed only in kernels, @{self.fn.name} is a device function")
        rule = _TYPE_RULES.get(op.name)
        if rule is not None:
            try:
                rule(op, self.fn, self.m)
            except _Fail as e:
                self.fail(op, str(e))
        want_args = REGION_ARGS.get(op.name, (0,) * info.regions)
        for r, n in zip(op.regions, want_args):
            if n == 0 and r.args:
                self.fail(op, f"'{op.name}' regions take no arguments")
        if op.name == "for":
            self.region(op.regions[0], scopes, loop_body=True, cond_region=False)
        elif op.name == "while":
            self.region(op.regions[0], scopes, loop_body=False, cond_region=True)
            self.region(op.regions[1], scopes, loop_body=True, cond_region=False)
        else:
            for r in op.regions:
                self.region(r, scopes, loop_body, cond_region=False)


def verify(module: Module) -> None:
    """Check ``module`` (see the module docstring for the rules). Returns None; raises
    :class:`IRVerifyError` naming the function, the op and what is wrong (with the op's span if set)."""
    _Verifier(module).module()


def verify_function(fn: Function, module: Module | None = None) -> None:
    """Check one function (calls are resolved in ``module``, default: a module holding only ``fn``)."""
    v = _Verifier(module or Module("verify", [fn]))
    v.function(fn)
