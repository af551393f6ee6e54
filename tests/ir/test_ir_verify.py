"""The IR verifier: every rule rejects a broken module with a message naming the function, the op and
the problem, and accepts the corrected one."""
from __future__ import annotations

import pytest

from kcompiler.diagnostics import SourceFile, SourceSpan
from kcompiler.ir import Builder, Function, Module, Op, Region, Value
from kcompiler.ir.types import (ArrayType, AddressSpace, BOOL, F16, F32, I32, I64, PointerType, U8, U32,
                                U64, VOID, VectorType)
from kcompiler.ir.verifier import IRVerifyError, format_op, verify


def fn(name="f", params=(), ret=VOID, kind="device"):
    f = Function(name, [Value(t, h) for h, t in params], ret, kind)
    return f, Builder(f.body)


def module(*fns):
    return Module("m", list(fns))


def rejects(m, *words):
    with pytest.raises(IRVerifyError) as e:
        verify(m)
    msg = str(e.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"
    return msg


# Each case: a function building (ok: bool) -> Module; the broken one must fail with the words given.
CASES = {}


def case(*words):
    def deco(f):
        CASES[f.__name__] = (f, words)
        return f
    return deco


@case("unknown op 'frobnicate'")
def unknown_op(ok):
    f, b = fn()
    b.op("add" if ok else "frobnicate", [b.const(1, I32), b.const(2, I32)], I32)
    return module(f)


@case("takes 2 operands, not 1")
def operand_count(ok):
    f, b = fn()
    x = b.const(1, I32)
    b.op("add", [x, x] if ok else [x], I32)
    return module(f)


@case("needs attribute 'pred'")
def missing_attr(ok):
    f, b = fn()
    x = b.const(1, I32)
    b.op("cmp", [x, x], BOOL, **({"pred": "lt"} if ok else {}))
    return module(f)


@case("attribute pred='less'", "eq, ne")
def bad_attr_choice(ok):
    f, b = fn()
    x = b.const(1, I32)
    b.op("cmp", [x, x], BOOL, pred="lt" if ok else "less")
    return module(f)


@case("has 2 regions, not 1")
def region_count(ok):
    f, b = fn()
    c = b.const(True, BOOL)
    b.op("if", [c], regions=[Region(), Region()] if ok else [Region()])
    return module(f)


@case("must have a result")
def result_missing(ok):
    f, b = fn()
    x = b.const(1, I32)
    b.op("add", [x, x], I32 if ok else None)
    return module(f)


@case("'store' has no result")
def result_extra(ok):
    f, b = fn()
    p = b.alloca(I32)
    b.op("store", [p, b.const(1, I32)], None if ok else I32)
    return module(f)


@case("used before its definition")
def use_before_def(ok):
    f, b = fn()
    one = Op("const", [], I32, {"value": 1})
    add = Op("add", [one.result, one.result], I32)
    f.body.ops += [one, add] if ok else [add, one]
    return module(f)


@case("not defined in this region or an enclosing one")
def use_out_of_region(ok):
    f, b = fn(ret=I32)
    then, _ = b.if_(b.const(True, BOOL))
    with b.at(then):
        inner = b.const(5, I32)
    b.ret(b.const(1, I32) if ok else inner)
    return module(f)


@case("not defined in this region or an enclosing one")
def induction_variable_outside_loop(ok):
    f, b = fn(ret=I32)
    body, iv = b.for_(b.const(0, I32), b.const(4, I32), b.const(1, I32))
    b.ret(b.const(0, I32) if ok else iv)
    return module(f)


@case("not defined in this region or an enclosing one")
def while_cond_value_in_body(ok):
    f, b = fn()
    p = b.alloca(I32)
    cond, body = b.while_()
    with b.at(cond):
        x = b.load(p)
        b.condition(b.cmp("lt", x, b.const(3, I32)))
    with b.at(body):
        b.store(p, b.load(p) if ok else x)
    return module(f)


@case("is defined twice")
def defined_twice(ok):
    f, b = fn()
    x = b.const(1, I32)
    y = b.add(x, x)
    if not ok:
        f.body.ops.append(f.body.ops[-1])
    return module(f)


@case("operand types differ: i32 and i64")
def binary_types(ok):
    f, b = fn()
    b.op("add", [b.const(1, I32), b.const(2, I32 if ok else I64)], I32)
    return module(f)


@case("result type i64 differs")
def binary_result(ok):
    f, b = fn()
    x = b.const(1, I32)
    b.op("add", [x, x], I32 if ok else I64)
    return module(f)


@case("'shl' is not defined on f32")
def binary_kind(ok):
    f, b = fn()
    x = b.const(1, I32 if ok else F32)
    b.op("shl", [x, x], x.type)
    return module(f)


@case("cmp of i32 gives bool, not i32")
def cmp_result(ok):
    f, b = fn()
    x = b.const(1, I32)
    b.op("cmp", [x, x], BOOL if ok else I32, pred="eq")
    return module(f)


@case("cmp of vec<f32, 4> gives vec<bool, 4>")
def cmp_vector(ok):
    f, b = fn()
    x = b.const(1.0, VectorType(F32, 4))
    b.op("cmp", [x, x], VectorType(BOOL, 4) if ok else BOOL, pred="lt")
    return module(f)


@case("select condition of type i32")
def select_cond(ok):
    f, b = fn()
    x = b.const(1, I32)
    b.op("select", [b.const(True, BOOL) if ok else x, x, x], I32)
    return module(f)


@case("the two choices have different types")
def select_types(ok):
    f, b = fn()
    x = b.const(1, I32)
    b.op("select", [b.const(True, BOOL), x, x if ok else b.const(1, U32)], I32)
    return module(f)


@case("only scalars and vectors convert")
def cast_pointer(ok):
    f, b = fn(params=[("p", PointerType(F32))])
    b.op("cast", [b.const(1, I32) if ok else f.params[0]], I64)
    return module(f)


@case("changes the number of lanes")
def cast_lanes(ok):
    f, b = fn()
    b.op("cast", [b.const(1, VectorType(I32, 4))], VectorType(F32, 4 if ok else 2))
    return module(f)


@case("exact_nan is for casts from small floats")
def cast_exact_nan(ok):
    from kcompiler.ir.types import SCALARS
    f, b = fn()
    b.op("cast", [b.const(1.0, SCALARS["f8e4m3"] if ok else F32)], F16, exact_nan=False)
    return module(f)


@case("bitcast from i32 (32 bits) to f16 (16 bits)")
def bitcast_size(ok):
    f, b = fn()
    b.op("bitcast", [b.const(1, I32)], F32 if ok else F16)
    return module(f)


@case("store of f32 through ptr<i32>")
def store_type(ok):
    f, b = fn(params=[("p", PointerType(I32))])
    b.store(f.params[0], b.const(1, I32) if ok else b.const(1.0, F32))
    return module(f)


@case("load through ptr<i32> gives i32, not f32")
def load_type(ok):
    f, b = fn(params=[("p", PointerType(I32))])
    b.op("load", [f.params[0]], I32 if ok else F32)
    return module(f)


@case("is not a pointer")
def load_non_pointer(ok):
    f, b = fn(params=[("p", PointerType(I32))])
    b.op("load", [f.params[0] if ok else b.const(1, I64)], I32)
    return module(f)


@case("index of type f32 is not an integer")
def elemptr_index(ok):
    f, b = fn(params=[("p", PointerType(I32))])
    b.op("elemptr", [f.params[0], b.const(1, I32) if ok else b.const(1.0, F32)], PointerType(I32))
    return module(f)


@case("elemptr of ptr<[f32; 16], local> gives ptr<f32, local>")
def elemptr_array_result(ok):
    f, b = fn()
    p = b.alloca(ArrayType(F32, 16))
    b.op("elemptr", [p, b.const(3, I32)],
         PointerType(F32, AddressSpace.LOCAL) if ok else PointerType(F32))
    return module(f)


@case("for bounds of types i32, i64, i32")
def for_types(ok):
    f, b = fn()
    b.for_(b.const(0, I32), b.const(4, I32 if ok else I64), b.const(1, I32))
    return module(f)


@case("if condition of type i32 (needs bool)")
def if_cond(ok):
    f, b = fn()
    b.if_(b.const(1, BOOL if ok else I32))
    return module(f)


@case("cond region ends with", "not with condition(bool)")
def while_without_condition(ok):
    f, b = fn()
    cond, body = b.while_()
    with b.at(cond):
        c = b.const(False, BOOL)
        if ok:
            b.condition(c)
    return module(f)


@case("condition condition of type i32")
def while_condition_type(ok):
    f, b = fn()
    cond, body = b.while_()
    with b.at(cond):
        b.condition(b.const(0, BOOL if ok else I32))
    return module(f)


@case("condition outside the end of a while's cond region")
def condition_elsewhere(ok):
    f, b = fn()
    if not ok:
        b.condition(b.const(True, BOOL))
    return module(f)


@case("terminator 'return' is followed by")
def op_after_terminator(ok):
    f, b = fn()
    x = b.const(1, I32)
    if ok:
        b.add(x, x)
    b.ret()
    if not ok:
        b.add(x, x)
    return module(f)


@case("break outside a loop body")
def break_outside_loop(ok):
    f, b = fn()
    if ok:
        body, _ = b.for_(b.const(0, I32), b.const(4, I32), b.const(1, I32))
        then, _ = Builder(body).if_(Builder(body).const(True, BOOL))
    else:
        then, _ = b.if_(b.const(True, BOOL))
    Builder(then).op("break")
    return module(f)


@case("continue outside a loop body")
def continue_in_cond_region(ok):
    f, b = fn()
    cond, body = b.while_()
    cb = Builder(cond)
    if ok:
        Builder(body).op("continue")
    else:
        then, _ = cb.if_(cb.const(True, BOOL))
        Builder(then).op("continue")
    cb.condition(cb.const(False, BOOL))
    return module(f)


@case("return of f32 from @f, which returns i32")
def return_type(ok):
    f, b = fn(ret=I32)
    b.ret(b.const(1, I32) if ok else b.const(1.0, F32))
    return module(f)


@case("@f returns i32: return needs one value")
def return_missing_value(ok):
    f, b = fn(ret=I32)
    b.ret(b.const(1, I32) if ok else None)
    return module(f)


@case("return of a value from @f, which returns void")
def return_value_from_void(ok):
    f, b = fn()
    b.ret(None if ok else b.const(1, I32))
    return module(f)


@case("call of @g, which is not in the module")
def call_unknown(ok):
    f, b = fn()
    g, gb = fn("g")
    b.call("g", [], VOID)
    return module(f, g) if ok else module(f)


@case("argument 0 of @g is i64, the parameter is i32")
def call_arg_types(ok):
    f, b = fn()
    g, gb = fn("g", [("x", I32)], I32)
    gb.ret(g.params[0])
    b.call("g", [b.const(1, I32 if ok else I64)], I32)
    return module(f, g)


@case("@g returns i32, the call's result is f32")
def call_result_type(ok):
    f, b = fn()
    g, gb = fn("g", [], I32)
    gb.ret(gb.const(1, I32))
    b.op("call", [], I32 if ok else F32, callee="g")
    return module(f, g)


@case("@g takes 1 arguments, the call passes 0")
def call_arg_count(ok):
    f, b = fn()
    g, gb = fn("g", [("x", I32)])
    b.call("g", [b.const(1, I32)] if ok else [], VOID)
    return module(f, g)


@case("'shared' is allowed only in kernels")
def shared_in_device_function(ok):
    f, b = fn(kind="kernel" if ok else "device")
    b.shared("buf", ArrayType(F32, 64))
    return module(f)


@case("kernel returns i32")
def kernel_returns_value(ok):
    f, b = fn(kind="kernel", ret=VOID if ok else I32)
    if not ok:
        b.ret(b.const(0, I32))
    return module(f)


@case("two functions named @f")
def duplicate_function(ok):
    f, _ = fn()
    g, _ = fn("g" if ok else "f")
    return module(f, g)


@case("does not fit in u8")
def const_range(ok):
    f, b = fn()
    b.const(255 if ok else 256, U8)
    return module(f)


@case("integer const with non-integer value 1.5")
def const_kind(ok):
    f, b = fn()
    b.const(1 if ok else 1.5, I32)
    return module(f)


@case("atomic operand f32 through ptr<i32>")
def atomic_types(ok):
    f, b = fn(params=[("p", PointerType(I32))])
    b.op("atomic", [f.params[0], b.const(1, I32) if ok else b.const(1.0, F32)], I32, op="add",
         order="relaxed", scope="device")
    return module(f)


@case("ballot of i32 (needs bool)")
def ballot_type(ok):
    f, b = fn()
    b.ballot(b.const(True, BOOL) if ok else b.const(1, I32))
    return module(f)


@case("math fma takes 3 operands, not 2")
def math_arity(ok):
    f, b = fn()
    x = b.const(1.0, F32)
    b.math("fma", *([x, x, x] if ok else [x, x]))
    return module(f)


@case("for body needs one argument")
def for_region_args(ok):
    f, b = fn()
    body, iv = b.for_(b.const(0, I32), b.const(4, I32), b.const(1, I32))
    if not ok:
        body.args.clear()
    return module(f)


@case("warp_sync's lane mask is u32 (needs u64)")
def warp_sync_mask(ok):
    f, b = fn()
    b.op("warp_sync", [b.const(0xFFFF, U64 if ok else U32)], VOID)
    return module(f)


@case("warp_sync takes at most one operand")
def warp_sync_arity(ok):
    f, b = fn()
    m = b.const(3, U64)
    b.op("warp_sync", [] if ok else [m, m], VOID)
    return module(f)


@pytest.mark.parametrize("name", list(CASES))
def test_rule(name):
    build, words = CASES[name]
    verify(build(True))
    msg = rejects(build(False), *words)
    assert msg.startswith("in @")  # names the function


def test_message_names_function_op_and_span():
    src = SourceFile("k.kc", "let x = a + b;\n")
    span = SourceSpan(src, 1, 9, 1, 14)
    f, b = fn("vadd")
    with b.located(span):
        b.op("add", [b.const(1, I32), b.const(2, I64)], I32)
    msg = rejects(module(f), "in @vadd", "add ", "operand types differ", "(at k.kc:1:9)")
    assert "i32" in msg


def test_format_op():
    f, b = fn()
    x = b.const(1, I32)
    op = b.op("cmp", [x, x], BOOL, pred="lt")
    assert format_op(op).startswith(f"%{op.result.id} = cmp {{pred='lt'}} %{x.id}, %{x.id} : bool")


def test_valid_kernel_with_everything_passes():
    """A kernel touching most op kinds, nested regions and a call: verifies."""
    g, gb = fn("clampf", [("x", F32)], F32)
    gb.ret(gb.binary("max", g.params[0], gb.const(0.0, F32)))
    k, b = fn("k", [("a", PointerType(F32)), ("n", I32)], VOID, "kernel")
    a, n = k.params
    tid = b.special("thread_id")
    buf = b.shared("buf", ArrayType(F32, 128))
    sp = b.elemptr(buf, tid)
    then, else_ = b.if_(b.cmp("lt", tid, n))
    with b.at(then):
        v = b.load(b.elemptr(a, tid))
        b.store(sp, b.call("clampf", [v], F32))
    with b.at(else_):
        b.store(sp, b.const(0.0, F32))
    b.barrier()
    body, i = b.for_(b.const(0, I32), b.const(4, I32), b.const(1, I32), unroll=True)
    with b.at(body):
        w = b.load(b.elemptr(buf, i))
        vec = b.splat(w, 4)
        b.extract(vec, b.const(0, I32))
        c, wb = b.while_()
        with b.at(c):
            b.condition(b.cmp("ne", w, w))
        with b.at(wb):
            b.op("break")
    b.atomic("add", b.elemptr(a, b.const(0, I32)), b.const(1.0, F32))
    b.op("fence", scope="block")
    b.ballot(b.cmp("eq", tid, b.const(0, I32)))
    b.bitcast(b.const(1.0, F32), U32)
    b.cast(tid, U64)
    b.ret()
    verify(module(k, g))
