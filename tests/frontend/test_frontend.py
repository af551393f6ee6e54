"""The frontend: parsing, checking and lowering of every construct of the language to IR.

Programs are small and written inline; tests/programs/*.kc are the larger ones (vadd, saxpy, a block
reduction, a tiled SGEMM, a row softmax), each lowered, checked for well-formed IR, and compiled by
LLVM for NVPTX (no GPU needed)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kcompiler.diagnostics import CompileError
from kcompiler.frontend import check, dump_ast, load_program, lower, stdlib_dir
from kcompiler.ir import print_module
from kcompiler.ir.core import OPS
from kcompiler.ir.types import (BF16, BOOL, F16, F32, I32, I64, U16, U32, U64, AddressSpace, ArrayType,
                                PointerType, ScalarType, VectorType)

from ..frontend_util import AMD, NV, FakeTarget, assert_well_formed, ir, ops, text  # noqa: F401 (also imported from here)
from ..paths import EXAMPLES as EXAMPLES_DIR, PROGRAMS


# --- the programs in tests/programs ---------------------------------------------------------------

PROGRAM_KERNELS = {
    "vadd.kc": {"vadd": {}},
    "saxpy.kc": {"saxpy": {"T": F16, "VEC": 8}},
    "reduce.kc": {"block_sum": {}},
    "sgemm.kc": {"sgemm": {}},
    "softmax.kc": {"softmax": {}},
    "everything.kc": {"everything": {"T": BF16, "VEC": 8, "FLAG": True}},
}


@pytest.mark.parametrize("name", sorted(PROGRAM_KERNELS))
def test_programs_lower_and_compile_with_llvm(name):
    path = PROGRAMS / name
    program = load_program(path.read_text(), str(path))
    m = lower(program, NV, PROGRAM_KERNELS[name])
    assert_well_formed(m)
    from kcompiler.backends import get_target
    from kcompiler.backends.llvm import compile_ir

    compile_ir(m, get_target("nvptx", "sm_90"))


EXAMPLES = sorted(EXAMPLES_DIR.glob("*.kc"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_lower(path):
    """The examples/ programs (written elsewhere) go through this frontend for both warp sizes."""
    program = load_program(path.read_text(), str(path))
    for target in (NV, AMD):
        kernels = {}
        for name in program.kernels:
            sig = program.signature(name)
            kernels[name] = {c.name: F16 for c in sig.comptime if c.default is None and c.kind == "type"}
            kernels[name].update({c.name: 8 for c in sig.comptime if c.default is None and c.kind == "int"})
        assert_well_formed(lower(program, target, kernels))


def test_vadd_ir():
    t = text((PROGRAMS / "vadd.kc").read_text())
    assert "kernel @vadd(%0.a: ptr<f32>, %1.b: ptr<f32>, %2.out: ptr<f32>, %3.n: i32)" in t
    for line in ["= special block_id.x : i32", "= mul %4.block_id_x, %5.block_dim_x : i32",
                 "%8.i = add %6, %7.thread_id_x : i32", "%9 = cmp lt %8.i, %3.n : bool", "if %9 {",
                 "%10 = elemptr %2.out, %8.i : ptr<f32>", "%15 = add %12, %14 : f32", "store %10, %15"]:
        assert line in t, line
    assert "module @t {target=nvptx, arch=sm_90, warp_size=32}" in t


@pytest.mark.parametrize("T, vec", [(F16, 8), (BF16, 8), (F32, 4)])
def test_saxpy_specialises_per_type(T, vec):
    program = load_program((PROGRAMS / "saxpy.kc").read_text(), "saxpy.kc")
    m = lower(program, NV, {"saxpy": {"T": T, "VEC": vec}})
    assert_well_formed(m)
    f = m.kernels[0]
    assert f.name == f"saxpy__T_{T}__VEC_{vec}"
    assert f.attrs["source_name"] == "saxpy"
    assert f.attrs["params"] == {"T": str(T), "VEC": str(vec)}
    assert f.attrs["param_names"] == ["x", "y", "alpha", "n"]
    assert [p.type for p in f.params] == [PointerType(T), PointerType(T), F32, I64]
    loads = [o for o in ops(m, "load") if isinstance(o.result.type, VectorType)]
    assert len(loads) == 2 and all(o.result.type == VectorType(T, vec) for o in loads)
    assert all(o.attrs["align"] == 16 for o in loads)
    (st,) = [o for o in ops(m, "store") if isinstance(o.operands[1].type, VectorType)]
    assert st.attrs["align"] == 16 and st.operands[1].type == VectorType(T, vec)
    assert any(o.name == "ptrcast" for o in f.body.walk())
    # alpha * xv splats alpha
    assert any(o.name == "splat" and o.result.type == VectorType(F32, vec) for o in f.body.walk())


def test_sgemm_comptime_range_is_unrolled():
    m = ir((PROGRAMS / "sgemm.kc").read_text())
    assert len(ops(m, "shared")) == 2
    assert {o.result.type for o in ops(m, "shared")} == {PointerType(ArrayType(F32, 256), AddressSpace.SHARED)}
    assert len([o for o in ops(m, "math") if o.attrs["fn"] == "fma"]) == 16
    assert len(ops(m, "for")) == 1  # only the runtime loop over tiles
    assert len(ops(m, "barrier")) == 2
    assert m.kernels[0].attrs["shared_bytes"] == 2048


def test_reduce_uses_shuffles_per_warp_size():
    src = (PROGRAMS / "reduce.kc").read_text()
    n32 = len(ops(ir(src, NV), "shuffle"))
    n64 = len(ops(ir(src, AMD), "shuffle"))
    assert (n32, n64) == (5, 6)  # comptime if over warp_size inside a comptime range
    assert all(o.attrs["mode"] == "down" for o in ops(ir(src), "shuffle"))


def test_softmax_generic_fn_specialised_twice_and_stdlib_exp():
    m = ir((PROGRAMS / "softmax.kc").read_text())
    names = sorted(f.name for f in m.functions)
    assert {"block_reduce__MAX_false", "block_reduce__MAX_true", "softmax", "std_math__exp__T_f32"} <= set(names)
    assert all(n.startswith("std_math__") for n in names if not n.startswith(("block_reduce", "softmax")))
    br_true = m.get("block_reduce__MAX_true")
    assert any(o.name == "max" for o in br_true.body.walk())
    assert not any(o.name == "add" and o.result.type == F32 for o in br_true.body.walk())
    assert m.get("std_math__exp__T_f32").attrs["source_name"] == "std.math.exp"


# --- the constructs, one by one -------------------------------------------------------------------

def test_var_is_a_slot_and_let_is_a_value():
    t = text("""kernel k(p: ptr<i32>) {
        let a = p[0];
        var b = a;
        b += 1;
        p[1] = b;
    }""")
    assert "%4.b = alloca : ptr<i32, local>" in t
    assert "store %4.b, %3.a" in t
    assert re.search(r"%5 = load %4.b : i32\n\s+%6 = const 1 : i32\n\s+%7 = add %5, %6 : i32\n"
                     r"\s+store %4.b, %7", t)


def test_scalar_types_and_literals():
    m = ir("""kernel k(p: ptr<f64>, q: ptr<u8>, r: ptr<i64>, s: ptr<bf16>) {
        p[0] = 1e-3;
        p[1] = 2.5f64;
        q[0] = 0xFF;
        r[0] = 0b101 + 1_000 + 3i64;
        s[0] = 1.0;
    }""")
    consts = [(o.attrs["value"], o.result.type) for o in ops(m, "const")]
    assert (0.001, ScalarType("f64", "float", 64)) in consts
    assert (255, ScalarType("u8", "uint", 8)) in consts
    assert (1.0, BF16) in consts
    assert (1008, I64) in consts  # 0b101 + 1_000 + 3i64 is computed at compile time


def test_untyped_literals_adapt_and_floats_promote():
    m = ir("""kernel k(h: ptr<f16>, f: ptr<f32>, i: ptr<i64>, n: i32) {
        h[0] = h[0] * 2.0;      // stays f16
        f[0] = h[0] * f[1];     // f16 * f32 -> f32
        i[0] = i[0] + n;        // i32 widens to i64
        f[1] = f32(h[0]) + f32(n);
    }""")
    muls = [o.result.type for o in ops(m, "mul")]
    assert muls == [F16, F32]
    casts = [(o.operands[0].type, o.result.type) for o in ops(m, "cast")]
    assert (F16, F32) in casts and (I32, I64) in casts


def test_vectors_lanes_splat_and_conversion():
    m = ir("""kernel k(p: ptr<f32>, q: ptr<vec<f16, 4>>) {
        var v: vec<f32, 4> = load[vec<f32, 4>](p);
        v.y = 2.0;
        v[3] += 1.0;
        let w = v * 0.5 + v.x;
        q[0] = vec<f16, 4>(w);
        let b = vec<i32, 4>(1, 2, 3, 4);
        p[0] = w.w + w[2] + f32(b.z);
    }""")
    assert len(ops(m, "insert")) == 2
    assert any(o.result.type == VectorType(F32, 4) for o in ops(m, "splat"))
    assert any(o.result.type == VectorType(F16, 4) for o in ops(m, "cast"))
    assert len(ops(m, "vec_build")) == 1
    assert len(ops(m, "extract")) >= 4


def test_pointer_arithmetic_and_spaces():
    m = ir("""kernel k(p: ptr<f32>, c: ptr<f32, const>, n: i64) {
        let q = p + n;
        let r = q - 1;
        r[2] = c[0];
        let s = dynamic_shared[f32]();
        s[1] = 0.0;
    }""")
    eps = ops(m, "elemptr")
    assert len(eps) == 5
    assert any(o.name == "neg" for f in m.functions for o in f.body.walk()) or \
        any(o.attrs.get("value") == -1 for o in ops(m, "const"))
    assert ops(m, "dyn_shared")[0].result.type == PointerType(F32, AddressSpace.SHARED)


def test_register_and_shared_arrays():
    m = ir("""kernel k(p: ptr<f32>) {
        var acc: [f32; 4];
        shared tile: [f32; 8 * 8];
        for i in comptime range(4) { acc[i] = f32(i); }
        tile[thread_id.x] = acc[2];
    }
    kernel k2(p: ptr<f32>) { shared tile: [f32; 4]; tile[0] = 1.0; }""")
    (a,) = ops(m, "alloca")
    assert a.result.type == PointerType(ArrayType(F32, 4), AddressSpace.LOCAL)
    syms = [o.attrs["symbol"] for o in ops(m, "shared")]
    assert len(set(syms)) == 2 and all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s) for s in syms)


def test_control_flow():
    m = ir("""kernel k(p: ptr<i32>, n: i32) {
        if n > 0 { p[0] = 1; } else if n < 0 { p[0] = 2; } else { p[0] = 3; }
        for i in range(0, n, 2) {
            if i > 10 { break; }
            if i == 3 { continue; }
        }
        var j = 0;
        while j < n { j += 1; }
        for var i in range(4) { i += 1; p[i] = i; }
    }""")
    assert len(ops(m, "if")) == 4  # the else-if nests an if in the else region
    assert len(ops(m, "break")) == 1 and len(ops(m, "continue")) == 1
    assert len(ops(m, "while")) == 1 and len(ops(m, "condition")) == 1
    fors = ops(m, "for")
    assert [o.operands[2].owner.attrs["value"] for o in fors] == [2, 1]


def test_return_in_fn_and_kernel():
    m = ir("""fn f(x: f32) -> f32 { if x > 0.0 { return x; } return -x; }
    fn g(p: ptr<f32>) { p[0] = 1.0; return; }
    kernel k(p: ptr<f32>) { g(p); p[0] = f(p[0]); return; }""")
    rets = {f.name: [len(o.operands) for o in f.body.walk() if o.name == "return"] for f in m.functions}
    assert rets == {"k": [0], "f": [1, 1], "g": [0]}


def test_short_circuit_and_or():
    m = ir("""kernel k(p: ptr<f32>, n: i32) {
        if n > 0 && p[n] > 0.0 { p[0] = 1.0; }
        if n < 0 || p[0] < 0.0 { p[0] = 2.0; }
    }""")
    allocas = [o for o in ops(m, "alloca") if o.result.type.pointee == BOOL]
    assert len(allocas) == 2
    ifs = ops(m, "if")
    # the && evaluates p[n] only in the then-region of the first if; || in the else-region
    assert any(o.name == "load" for o in ifs[0].regions[0].walk())
    assert not ifs[0].regions[1].ops


def test_comptime_if_lowers_only_the_branch_taken():
    src = """kernel k[FLAG: bool = false](p: ptr<f32>) {
        comptime if FLAG { p[0] = 111.0; } else { p[0] = 222.0; }
        comptime if target.has("tma") { p[1] = 333.0; } else if target.name == "amdgcn" { p[1] = 444.0; }
        comptime if warp_size == 64 { p[2] = 555.0; }
    }"""
    values = lambda m: {o.attrs["value"] for o in ops(m, "const")}  # noqa: E731
    nv = values(ir(src, NV))
    assert {222.0, 333.0} <= nv and not {111.0, 444.0, 555.0} & nv
    amd = values(ir(src, AMD, {"k": {"FLAG": True}}))
    assert {111.0, 444.0, 555.0} <= amd and not {222.0, 333.0} & amd
    assert not ops(ir(src), "if")


def test_comptime_if_does_not_check_the_branch_not_taken():
    src = """kernel k(p: ptr<f32>) {
        comptime if target.name == "amdgcn" { p[0] = nonsense_only_on_amd(); }
    }"""
    with pytest.raises(CompileError):  # names are still resolved for every branch...
        load_program(src)
    src = """kernel k(p: ptr<f32>) {
        comptime if target.name == "amdgcn" { let x: f16 = p[0]; p[0] = f32(x); }
    }"""
    ir(src, NV)  # ...but types only on the branch taken
    with pytest.raises(CompileError, match="cannot initialise 'x'"):
        ir(src, AMD)


def test_comptime_if_on_types():
    src = """fn widen[T: type](x: T) -> f32 {
        comptime if T == f32 { return x; } else { return f32(x); }
    }
    kernel k(p: ptr<f32>, h: ptr<f16>) { p[0] = widen(p[1]) + widen(h[0]); }"""
    m = ir(src)
    assert not any(o.name == "cast" for o in m.get("widen__T_f32").body.walk())
    assert any(o.name == "cast" for o in m.get("widen__T_f16").body.walk())


def test_nested_arrays_and_lanes_through_pointers():
    m = ir("""kernel k(p: ptr<vec<f32, 4>>, pp: ptr<ptr<f32>>) {
        var a: [[f32; 4]; 2];
        a[1][2] = 1.0;
        p[0].y = a[1][2];
        p[1][3] += 2.0;
        pp[0][5] = 3.0;
    }""")
    eps = [o.result.type for o in ops(m, "elemptr")]
    assert PointerType(ArrayType(F32, 4), AddressSpace.LOCAL) in eps
    assert PointerType(F32, AddressSpace.LOCAL) in eps
    assert len(ops(m, "insert")) == 2 and len(ops(m, "extract")) == 1
    assert PointerType(F32) in [o.result.type for o in ops(m, "load")]


def test_comptime_for_sees_a_constant():
    m = ir("""kernel k(p: ptr<f32>) {
        var acc: [f32; 8];
        for i in comptime range(0, 8, 2) {
            comptime if i % 4 == 0 { acc[i] = 1.0; } else { acc[i + 1] = 2.0; }
        }
    }""")
    idx = [o.operands[1].owner.attrs["value"] for o in ops(m, "elemptr")]
    assert idx == [0, 3, 4, 7]
    assert not ops(m, "for")


def test_warp_size_and_target_facts():
    m = ir("""kernel k(p: ptr<i32>) { p[0] = warp_size; p[1] = target.warp_size / 2; }""", AMD)
    assert {o.attrs["value"] for o in ops(m, "const")} >= {64, 32}


def test_machine_builtins():
    m = ir("""kernel k(p: ptr<i32>, f: ptr<f32>, h: ptr<f16>, u: ptr<u64>) {
        p[0] = thread_id.x + thread_id.y + block_id.z + block_dim.x + grid_dim.y + lane_id + warp_id;
        barrier();
        fence(scope = "system");
        fence();
        let a = atomic_add(p, 1, order = "acq_rel", scope = "block");
        let b = atomic_cas(p + 1, 0, a);
        let c = atomic_max(f, 2.0);
        atomic_xor(p, 3);
        atomic_exch(f + 1, 0.5, order = "seq_cst");
        let s = shuffle(f[0], 0) + shuffle_xor(f[0], 1) + shuffle_down(f[0], 2) + shuffle_up(f[0], 3);
        h[0] = shuffle_down(h[0], 1);
        u[0] = ballot(s > c) | active_mask();
        p[2] = read_first_lane(b);
    }""")
    regs = {(o.attrs["reg"], o.attrs["dim"]) for o in ops(m, "special")}
    assert regs == {("thread_id", "x"), ("thread_id", "y"), ("block_id", "z"), ("block_dim", "x"),
                    ("grid_dim", "y"), ("lane_id", "x"), ("warp_id", "x")}
    assert [o.attrs["scope"] for o in ops(m, "fence")] == ["system", "device"]
    at = ops(m, "atomic")
    assert [(o.attrs["op"], o.attrs["order"], o.attrs["scope"]) for o in at] == [
        ("add", "acq_rel", "block"), ("max", "relaxed", "device"), ("xor", "relaxed", "device"),
        ("exch", "seq_cst", "device")]
    assert ops(m, "atomic_cas")[0].result.type == I32
    modes = [o.attrs["mode"] for o in ops(m, "shuffle")]
    assert modes == ["idx", "xor", "down", "up", "down"]
    assert all(o.operands[1].type == I32 for o in ops(m, "shuffle"))
    # the IR's shuffle takes the value as it is (the backend moves it as 32-bit words)
    assert [o.operands[0].type for o in ops(m, "shuffle")] == [F32] * 4 + [F16]
    assert not ops(m, "bitcast")
    assert ops(m, "ballot")[0].result.type == U64 and ops(m, "active_mask")
    assert ops(m, "read_first_lane")[0].result.type == I32


def test_math_builtins():
    m = ir("""kernel k(f: ptr<f32>, i: ptr<i32>, h: ptr<f16>) {
        let x = f[0];
        f[1] = sqrt(x) + fast_rsqrt(x) + fast_exp2(x) + fast_log2(x) + fast_sin(x) + fast_cos(x) + abs(x) + floor(x)
            + ceil(x) + trunc(x) + round(x) + fma(x, x, 1.0) + copysign(x, -1.0)
            + min(x, 2.0) + max(x, 1) + select(x > 0.0, x, 0.0);
        i[0] = abs(i[1]) + min(i[1], 3) + max(2, i[2]);
        h[0] = sqrt(h[1]);
        let v = sqrt(load[vec<f32, 2>](f));
        f[2] = v.x;
    }""")
    fns = [o.attrs["fn"] for o in ops(m, "math")]
    assert fns[:13] == ["sqrt", "fast_rsqrt", "fast_exp2", "fast_log2", "fast_sin", "fast_cos", "abs", "floor", "ceil", "trunc",
                        "round", "fma", "copysign"]
    assert [o.result.type for o in ops(m, "math") if o.attrs["fn"] == "abs"] == [F32, I32]
    assert [o.result.type for o in ops(m, "math") if o.attrs["fn"] == "sqrt"] == [F32, F16, VectorType(F32, 2)]
    assert len(ops(m, "min")) == 2 and len(ops(m, "max")) == 2 and len(ops(m, "select")) == 1


def test_warp_ops_on_narrow_and_vector_values():
    m = ir("""kernel k(b: ptr<i8>, v: ptr<vec<f16, 4>>, f: ptr<bool>) {
        b[0] = shuffle_xor(b[1], 1);
        v[0] = read_first_lane(v[1]);
        f[0] = shuffle(f[1], 0);
    }""")
    assert [o.operands[0].type for o in ops(m, "shuffle")] == [I32, U32]
    assert ops(m, "read_first_lane")[0].operands[0].type == VectorType(F16, 4)  # the backend splits it


def test_casts_and_bitcast():
    m = ir("""kernel k(f: ptr<f32>, u: ptr<u32>, h: ptr<f16>, b: ptr<bool>, p8: ptr<u8>) {
        u[0] = bitcast[u32](f[0]);
        h[0] = f16(f[0]);
        b[0] = bool(u[0]);
        p8[0] = u8(u[0]);
        let q = bitcast[ptr<u32>](f);
        q[1] = u32(i64(-1));
        let hb = bitcast[vec<u8, 2>](h[0]);
        p8[1] = hb.y;
    }""")
    assert len(ops(m, "bitcast")) == 2 and len(ops(m, "ptrcast")) == 1
    casts = {(o.operands[0].type, o.result.type) for o in ops(m, "cast")}
    assert (F32, F16) in casts and (U32, BOOL) in casts
    assert any(o.attrs["value"] == 0xFFFFFFFF and o.result.type == U32 for o in ops(m, "const"))


def test_shifts_and_bit_ops():
    m = ir("""kernel k(u: ptr<u64>, i: ptr<i32>) {
        u[0] = u[1] >> 3 | (u[2] << i[0]) & ~u[3] ^ 1;
        i[1] = i[0] % 7 / 2;
    }""")
    assert [o.result.type for o in ops(m, "shr")] == [U64]
    shl = ops(m, "shl")[0]
    assert shl.operands[1].type == U64  # the amount is converted to the shifted type
    assert ops(m, "rem")[0].result.type == I32


def test_generic_fn_inference_and_explicit_args():
    m = ir("""fn add[T: type](a: T, b: T) -> T { return a + b; }
    fn scale[N: i32 = 3](x: f32) -> f32 { return x * N; }
    fn lanes[T: type, N: i32](v: vec<T, N>) -> T { return v[N - 1]; }
    kernel k(f: ptr<f32>, i: ptr<i64>, h: ptr<f16>) {
        f[0] = add(f[0], 1.0);
        i[0] = add(i[1], 2);
        h[0] = add[f16](h[1], 3.0);
        f[1] = scale(f[0]) + scale[5](f[0]) + scale[N = 5](f[1]);
        f[2] = lanes(load[vec<f32, 4>](f));
    }""")
    assert sorted(f.name for f in m.functions) == ["add__T_f16", "add__T_f32", "add__T_i64", "k",
                                                   "lanes__T_f32__N_4", "scale__N_3", "scale__N_5"]
    assert [o.attrs["callee"] for o in ops(m, "call")].count("scale__N_5") == 2


def test_fn_call_converts_arguments_by_widening():
    m = ir("""fn f(x: f32, n: i64) -> f32 { return x; }
    kernel k(h: ptr<f16>, p: ptr<f32>) { p[0] = f(h[0], 3); }""")
    call = ops(m, "call")[0]
    assert [v.type for v in call.operands] == [F32, I64]


def test_imports(tmp_path):
    (tmp_path / "mylib.kc").write_text("fn twice(x: f32) -> f32 { return 2.0 * x; }\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.kc").write_text("import std.math\nfn e(x: f32) -> f32 { return math.exp(x); }\n")
    main = tmp_path / "main.kc"
    main.write_text("""import std.math as m
import mylib
import sub.deep
kernel k(p: ptr<f32>) { p[0] = mylib.twice(m.log(p[1])) + deep.e(p[2]) + m.sigmoid(p[3]); }
""")
    program = load_program(main.read_text(), str(main))
    mod = lower(program, NV)
    assert_well_formed(mod)
    names = sorted(f.name for f in mod.functions)
    assert {"k", "mylib__twice", "std_math__exp__T_f32", "std_math__log__T_f32", "std_math__sigmoid__T_f32",
            "sub_deep__e"} <= set(names)
    assert all(n.startswith(("std_math__", "std_libm_")) for n in names if n not in ("k", "mylib__twice", "sub_deep__e"))
    files = {Path(p).name for p in program.imported_files}
    assert {"mylib.kc", "deep.kc", "math.kc"} <= files  # and the libm_*.kc modules std.math imports
    assert all(f.startswith("libm_") for f in files - {"mylib.kc", "deep.kc", "math.kc"})


def test_stdlib_is_found():
    d = stdlib_dir()
    assert d is not None and (d / "math.kc").is_file()
    m = ir("""import std.math
    kernel k(p: ptr<f32>, h: ptr<f16>) {
        p[0] = math.exp(p[1]) + math.log(p[2]) + math.tanh(p[3]) + math.pow(p[4], 2.0)
             + math.clamp(p[5], 0.0, 1.0) + math.exp10(p[6]) + math.log10(p[7]);
        h[0] = math.exp(h[1]);
    }""")
    assert "std_math__exp__T_f16" in {f.name for f in m.functions}


def test_every_op_carries_its_source_line():
    m = ir("""kernel k(p: ptr<f32>, n: i32) {
    let i = thread_id.x;
    if i < n {
        p[i] = 2.0 * p[i];
    }
}""")
    lines = {o.attrs.get("reg"): o.span.line for o in ops(m, "special")}
    assert lines == {"thread_id": 2}
    assert ops(m, "mul")[0].span.line == 4 and ops(m, "mul")[0].span.col == 16
    assert ops(m, "store")[0].span.line == 4


# --- the API --------------------------------------------------------------------------------------

SAXPY = (PROGRAMS / "saxpy.kc").read_text()


def test_program_and_signature():
    p = load_program(SAXPY + "\nkernel other[N: i32 = 2 * 4, T: type = f32, B: bool = true]() {}\n",
                     "s.kc")
    assert list(p.kernels) == ["saxpy", "other"]
    sig = p.signature("saxpy")
    assert [(c.name, c.kind, c.default) for c in sig.comptime] == [("T", "type", None), ("VEC", "int", None)]
    assert [n for n, _ in sig.params] == ["x", "y", "alpha", "n"]
    other = p.signature("other")
    assert [(c.name, c.kind, c.default) for c in other.comptime] == [("N", "int", 8), ("T", "type", F32),
                                                                      ("B", "bool", True)]
    with pytest.raises(KeyError):
        p.signature("nope")


def test_infer():
    sig = load_program(SAXPY).signature("saxpy")
    assert sig.infer([PointerType(F16), PointerType(F16), None, None], {"VEC": 8}) == {"T": F16, "VEC": 8}
    assert sig.infer([None, PointerType(BF16), F32, I64], {"VEC": 4}) == {"T": BF16, "VEC": 4}
    assert sig.infer([None, None, None, None], {"T": F32, "VEC": 4}) == {"T": F32, "VEC": 4}
    assert sig.infer([None] * 4, {"T": "f16", "VEC": 2})["T"] == F16
    with pytest.raises(TypeError, match=r"saxpy.*cannot infer.*T.*'x'"):
        sig.infer([None, None, None, None], {"VEC": 4})
    with pytest.raises(TypeError, match=r"saxpy.*VEC"):
        sig.infer([PointerType(F16), None, None, None], {})
    with pytest.raises(TypeError, match=r"saxpy.*T is f16 from argument 'x' but f32 from argument 'y'"):
        sig.infer([PointerType(F16), PointerType(F32), None, None], {"VEC": 4})
    with pytest.raises(TypeError, match=r"saxpy.*T=f32 was given but argument 'x' has T = f16"):
        sig.infer([PointerType(F16), None, None, None], {"T": F32, "VEC": 4})
    with pytest.raises(TypeError, match=r"saxpy.*VEC is an integer"):
        sig.infer([PointerType(F16)] + [None] * 3, {"VEC": "eight"})
    with pytest.raises(TypeError, match=r"no compile-time parameter 'W'"):
        sig.infer([None] * 4, {"W": 1})
    with pytest.raises(TypeError, match=r"takes 4 arguments"):
        sig.infer([None], {})


def test_infer_vector_length():
    p = load_program("kernel k[T: type, N: i32](v: ptr<vec<T, N>>) {}")
    assert p.signature("k").infer([PointerType(VectorType(F16, 8))], {}) == {"T": F16, "N": 8}


def test_lower_none_takes_kernels_with_defaults_only():
    p = load_program(SAXPY + "\nkernel dflt[N: i32 = 4](p: ptr<f32>) { p[0] = f32(N); }\n")
    m = lower(p, NV)
    assert [f.name for f in m.functions] == ["dflt__N_4"]
    with pytest.raises(CompileError, match="needs a value for compile-time parameter 'T'"):
        lower(p, NV, {"saxpy": {"VEC": 4}})
    with pytest.raises(KeyError):
        lower(p, NV, {"nope": {}})


def test_non_generic_kernel_keeps_its_name():
    m = ir("kernel plain(p: ptr<f32>) { p[0] = 1.0; }")
    f = m.kernels[0]
    assert f.name == "plain" and f.attrs["params"] == {} and f.attrs["source_name"] == "plain"
    assert m.attrs == {"target": "nvptx", "arch": "sm_90", "warp_size": 32}


def test_check_lowers_uncalled_fns_too():
    p = load_program("fn unused(x: f32) -> f16 { return x; }\nkernel k() {}\n")
    with pytest.raises(CompileError, match="cannot return f32 from fn 'unused' returning f16"):
        check(p, NV)
    check(load_program((PROGRAMS / "softmax.kc").read_text()), NV)


def test_dump_ast():
    s = dump_ast(load_program((PROGRAMS / "vadd.kc").read_text()))
    assert "FnDecl(kind='kernel', name='vadd'" in s
    assert "Binary(op='+')" in s and "Index()" in s


def test_deep_but_legal_nesting_compiles():
    expr = "(" * 3000 + "x0" + ")" * 3000
    body = "".join(f"if x > {k}.0 {{ " for k in range(60)) + "p[0] = x;" + " }" * 60
    total = " + ".join(["x"] * 500)
    m = ir(f"kernel k(p: ptr<f32>) {{ let x0 = p[0]; let x = {expr}; {body} p[1] = {total}; }}")
    assert len(ops(m, "if")) == 60 and len(ops(m, "add")) == 499


def test_printf_lowers_to_the_printf_op_with_promoted_arguments():
    """printf: one `printf` op (no result, not pure) whose operands are the arguments after C's default
    promotions (casts inserted), with the checked format as its attribute; %s literals folded in."""
    m = ir('kernel k(p: ptr<f16>, b: bool, c: u8, n: i64, s: ptr<u8>) {\n'
           '    printf("%s: %f %d %u %ld %s %p\\n", "k", p[0], b, c, n, s, p);\n}\n')
    (op,) = ops(m, "printf")
    assert op.attrs == {"format": "k: %f %d %u %ld %s %p\n"}
    assert [str(v.type) for v in op.operands] == ["f64", "i32", "i32", "i64", "ptr<u8>", "ptr<f16>"]
    assert [v.owner.name for v in op.operands[:3]] == ["cast", "cast", "cast"]
    assert op.result is None and not OPS["printf"].pure
    t = print_module(m)
    assert 'printf "k: %f %d %u %ld %s %p\\n" %' in t


# --- the builtin registry and the lowering's modules --------------------------------------------------

def test_every_declared_builtin_has_exactly_one_registered_handler():
    """builtins.py declares each builtin; builtin_registry.REGISTRY holds the handler that lowers it
    (fn_lowering.py imports every handler module): the two name sets are the same."""
    from kcompiler.frontend import builtins as B
    from kcompiler.frontend import fn_lowering  # noqa: F401 (registers the handlers)
    from kcompiler.frontend.builtin_registry import REGISTRY

    assert set(REGISTRY.handlers) == set(B.FUNCTIONS)
    assert REGISTRY.handler("launch_bounds").__module__ == "kcompiler.frontend.builtins_kernel"
    assert REGISTRY.handler("atomic_cas").__module__ == "kcompiler.frontend.builtins_atomic"


def test_registering_an_undeclared_or_taken_builtin_name_is_refused():
    from kcompiler.frontend.builtin_registry import BuiltinRegistry

    reg = BuiltinRegistry()
    reg.register("barrier")(lambda fl, ref, call, kw: None)
    with pytest.raises(ValueError, match="'barrier' is registered twice"):
        reg.register("barrier")(lambda fl, ref, call, kw: None)
    with pytest.raises(ValueError, match="'no_such_builtin' is not declared"):
        reg.register("no_such_builtin")(lambda fl, ref, call, kw: None)


def test_the_lowering_helpers_do_not_import_lowering_py():
    """values.py, the builtin handlers, the backends' builtins' adapter and fn_params.py get the lowering object as
    an argument: importing them (in a fresh interpreter) loads neither lowering.py nor fn_lowering.py."""
    import subprocess
    import sys

    mods = ["values", "builtin_registry", "builtins_math", "builtins_convert", "builtins_memory",
            "builtins_atomic", "builtins_sync", "builtins_warp", "builtins_hostcall", "builtins_printf",
            "builtins_comptime", "builtins_kernel", "builtins_surface", "fn_params", "lower_stmts", "lower_exprs"]
    code = ("import sys\n" + "".join(f"import kcompiler.frontend.{m}\n" for m in mods) +
            "print(sorted(m for m in sys.modules if m in ('kcompiler.frontend.lowering', "
            "'kcompiler.frontend.fn_lowering')))")
    # kcompiler/frontend/__init__.py imports lowering for its API: load the submodules without it
    code = ("import importlib.util, sys, types, pathlib\n"
            "import kcompiler\n"
            "pkg = types.ModuleType('kcompiler.frontend')\n"
            "pkg.__path__ = [str(pathlib.Path(kcompiler.__file__).parent / 'frontend')]\n"
            "sys.modules['kcompiler.frontend'] = pkg\n" + code)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
