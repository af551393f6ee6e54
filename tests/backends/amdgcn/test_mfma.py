"""AMD's MFMA (the ``mfma`` builtin) and std.matmul's MFMA path (stdlib/matmul_amd.kc), verified
without an AMD GPU:

- the operand layouts that backends/amdgcn/mfma.py documents, against entries of AMD's Matrix
  Instruction Calculator (transcribed: ``matrix_calculator.py -a cdna3 -i <instr> -A|-B|-D -I -J -K
  --get-register``);
- the CPU target's emulation (``emulate_mfma``) of every form, one wavefront's fragments laid out by
  those layouts in Python, against numpy in float64 on fresh random inputs; two wavefronts a block;
- the AMDGCN backend: gfx942 and gfx950 assembly shows the ``v_mfma`` instruction of each form
  (FileCheck), the matmul kernel's too, and its code object links;
- located errors: a form the target lacks, FP8 of the flavour the chip does not read, fragment types
  that form no instruction;
- the matmul kernel on the CPU target with MFMA emulated, on odd shapes, against numpy in float64,
  and its LDS swizzle: a bijection, free of bank conflicts for the lanes one LDS cycle serves.

Tolerance (as tests/ops/test_matmul.py): the products of bf16, f16 and FP8 values are exact in f32, the
K of them are summed in f32 (order unspecified: K * 2^-24 * (|A| @ |B|)), and the result is rounded
once into the output type.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to

from ...filecheck_util import filecheck
from ...draws import fresh_rng

RNG = fresh_rng()
DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32, "f8e4m3": ml_dtypes.float8_e4m3fn,
          "f8e5m2": ml_dtypes.float8_e5m2, "f8e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
          "f8e5m2fnuz": ml_dtypes.float8_e5m2fnuz}


# --- the layouts (backends/amdgcn/mfma.py) -------------------------------------------------------------

def shape_of(shape: str) -> tuple[int, int, int]:
    M, N, K = (int(x) for x in shape.split("x"))
    return M, N, K


def a_place(shape: str, i: int, k: int) -> tuple[int, int]:
    """(lane, element) of A[i][k]; B[k][j] is a_place(shape, j, k) (the same function)."""
    M, _, K = shape_of(shape)
    E = M * K // 64
    return i % M + M * (k // E), k % E


def d_place(shape: str, i: int, j: int) -> tuple[int, int]:
    """(lane, register) of C[i][j] and D[i][j]."""
    _, N, _ = shape_of(shape)
    G, q = 64 // N, i // 4
    return j + N * (q % G), 4 * (q // G) + i % 4


def test_layouts_match_amds_matrix_instruction_calculator():
    # (instruction's shape, matrix, row, column) -> (register, lane, bit offset in the register), as
    # AMD's calculator prints them for CDNA3 (e.g. "D[13][5] = v5{37}", "A[3][13] = v1{19}.[15:8]").
    entries = {
        ("32x32x8", "D", 13, 5): (5, 37, 0), ("32x32x8", "A", 7, 6): (1, 39, 0),
        ("16x16x16", "D", 13, 5): (1, 53, 0), ("16x16x32", "A", 3, 13): (1, 19, 8),
        ("16x16x32", "B", 29, 9): (1, 57, 8), ("32x32x16", "D", 30, 17): (14, 49, 0),
    }
    for (shape, m, r, c), (reg, lane, bit) in entries.items():
        if m == "D":
            assert d_place(shape, r, c) == (lane, reg)
            continue
        M, _, K = shape_of(shape)
        width = 16 if M * K // 64 == 4 else 8  # 4 elements of 16 bits a lane, or 8 of FP8
        i, k = (r, c) if m == "A" else (c, r)
        got_lane, e = a_place(shape, i, k)
        assert (got_lane, e * width // 32, e * width % 32) == (lane, reg, bit)


# --- one instruction, emulated on the CPU target ---------------------------------------------------

FRAGMENTS = """
// Thread t's fragments are rows t of a (E elements), b (E) and c (R f32); row t of d receives its D.
kernel frag[T: type, U: type, E: i32, R: i32](a: ptr<T>, b: ptr<U>, c: ptr<f32>, d: ptr<f32>) {
    let t = thread_id.x;
    var fa: vec<T, E>;
    var fb: vec<U, E>;
    var acc: vec<f32, R>;
    for e in comptime range(0, E) {
        fa[e] = a[t * E + e];
        fb[e] = b[t * E + e];
    }
    for r in comptime range(0, R) {
        acc[r] = c[t * R + r];
    }
    let out = mfma(fa, fb, acc);
    for r in comptime range(0, R) {
        d[t * R + r] = out[r];
    }
}
"""

#: (chip emulated, A's type, B's type, shape): every form, each FP8 flavour, mixed FP8 formats.
FORMS = [
    ("gfx90a", "bf16", "bf16", "32x32x8"),
    ("gfx942", "f16", "f16", "16x16x16"),
    ("gfx950", "bf16", "bf16", "16x16x32"),
    ("gfx950", "f16", "f16", "32x32x16"),
    ("gfx942", "f8e4m3fnuz", "f8e5m2fnuz", "32x32x16"),
    ("gfx942", "f8e5m2fnuz", "f8e5m2fnuz", "16x16x32"),
    ("gfx950", "f8e4m3", "f8e4m3", "16x16x32"),
    ("gfx950", "f8e5m2", "f8e4m3", "32x32x64"),
    ("gfx950", "f8e4m3", "f8e5m2", "16x16x128"),
]


@pytest.mark.parametrize("chip,ta,tb,shape", FORMS, ids=lambda x: str(x))
def test_each_form_emulated_against_numpy(chip, ta, tb, shape):
    M, N, K = shape_of(shape)
    E, R, waves = M * K // 64, M * N // 64, 2
    A = RNG.standard_normal((waves, M, K)).astype(DTYPES[ta])
    B = RNG.standard_normal((waves, K, N)).astype(DTYPES[tb])
    C = RNG.standard_normal((waves, M, N)).astype(np.float32)
    fa = np.zeros((waves * 64, E), DTYPES[ta])
    fb = np.zeros((waves * 64, E), DTYPES[tb])
    fc = np.zeros((waves * 64, R), np.float32)
    for w in range(waves):
        for i in range(M):
            for k in range(K):
                lane, e = a_place(shape, i, k)
                fa[64 * w + lane, e] = A[w, i, k]
        for j in range(N):
            for k in range(K):
                lane, e = a_place(shape, j, k)
                fb[64 * w + lane, e] = B[w, k, j]
        for i in range(M):
            for j in range(N):
                lane, r = d_place(shape, i, j)
                fc[64 * w + lane, r] = C[w, i, j]
    fd = np.full_like(fc, np.nan)
    mod = kc.compile(FRAGMENTS, target="cpu", target_options={"emulate_mfma": chip})
    mod.frag[1, 64 * waves](fa, fb, fc, fd, T=ta, U=tb, E=E, R=R)
    for w in range(waves):
        a64, b64 = A[w].astype(np.float64), B[w].astype(np.float64)
        ref = a64 @ b64 + C[w]
        D = np.array([[fd[64 * w + d_place(shape, i, j)[0], d_place(shape, i, j)[1]] for j in range(N)]
                      for i in range(M)])
        tol = K * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64) + np.abs(C[w])) + 1e-30
        assert (np.abs(D - ref) <= tol).all(), f"wavefront {w}: largest error {np.abs(D - ref).max()}"


def test_target_options():
    from kcompiler.backends.cpu.target import CpuTarget

    t = CpuTarget(emulate_mfma="gfx942")
    assert t.warp_size == 64 and t.has("mfma_fp8_fnuz") and not t.has("mfma_gfx950")
    assert CpuTarget(emulate_mfma=True).has("mfma_gfx950") and not CpuTarget().has("mfma")
    with pytest.raises(ValueError, match="wavefronts of 64"):
        CpuTarget(warp_size=32, emulate_mfma=True)
    with pytest.raises(ValueError, match="exclude each other"):
        CpuTarget(emulate_mma=True, emulate_mfma=True)
    with pytest.raises(ValueError, match="emulates gfx90a, gfx942, gfx950"):
        CpuTarget(emulate_mfma="gfx1100")


# --- AMDGCN: the instructions ----------------------------------------------------------------------

@pytest.mark.parametrize("arch,ta,tb,shape,instr", [
    ("gfx942", "bf16", "bf16", "32x32x8", "v_mfma_f32_32x32x8_bf16 {{[av]}}[{{[0-9]+}}:{{[0-9]+}}], v[{{.*}}], v[{{.*}}]"),
    ("gfx942", "f16", "f16", "16x16x16", "v_mfma_f32_16x16x16_f16"),
    ("gfx942", "f8e4m3fnuz", "f8e5m2fnuz", "16x16x32", "v_mfma_f32_16x16x32_fp8_bf8"),
    ("gfx942", "f8e5m2fnuz", "f8e4m3fnuz", "32x32x16", "v_mfma_f32_32x32x16_bf8_fp8"),
    ("gfx950", "bf16", "bf16", "16x16x32", "v_mfma_f32_16x16x32_bf16"),
    ("gfx950", "f16", "f16", "32x32x16", "v_mfma_f32_32x32x16_f16"),
    ("gfx950", "f8e4m3", "f8e4m3", "32x32x16", "v_mfma_f32_32x32x16_fp8_fp8"),
    # the unscaled f8f6f4 form; cbsz / blgp give A's / B's format (1: E5M2), printed where not 0
    ("gfx950", "f8e4m3", "f8e5m2", "16x16x128", "v_mfma_f32_16x16x128_f8f6f4 {{.*}} blgp:1"),
    ("gfx950", "f8e5m2", "f8e4m3", "32x32x64", "v_mfma_f32_32x32x64_f8f6f4 {{.*}} cbsz:1{{$}}"),
])
def test_assembly_shows_the_instruction(arch, ta, tb, shape, instr):
    M, N, K = shape_of(shape)
    text = compile_source_to(FRAGMENTS, "t.kc", "asm", "amdgcn", arch,
                             comptime=dict(T=ta, U=tb, E=M * K // 64, R=M * N // 64))
    filecheck(text, f"""
        CHECK-LABEL: frag__{{{{.*}}}}:
        CHECK: {instr}
    """)


def _error(src: str, arch: str, target: str = "amdgcn", **params) -> str:
    with pytest.raises(CompileError) as e:
        compile_source_to(src, "t.kc", "asm", target, arch, comptime=params)
    return str(e.value)


def test_unavailable_forms_are_located_errors():
    # FP8 on gfx90a, gfx950's forms on gfx942, any MFMA on NVIDIA and on the CPU target unemulated
    msg = _error(FRAGMENTS, "gfx90a", T="f8e4m3fnuz", U="f8e4m3fnuz", E=8, R=4)
    assert "t.kc:15:15: error: mfma 16x16x32" in msg and "FP8 MFMA (AMD gfx942 and gfx950)" in msg
    assert 'target.has("mfma_fp8")' in msg and "^" in msg
    assert "gfx950 (CDNA4)" in _error(FRAGMENTS, "gfx942", T="bf16", U="bf16", E=8, R=16)
    assert "not available on this target (nvptx" in _error(FRAGMENTS, "sm_90a", "nvptx", T="f16", U="f16", E=4, R=4)
    assert "not available on this target (cpu" in _error(FRAGMENTS, None, "cpu", T="f16", U="f16", E=4, R=4)


def test_fp8_of_the_other_flavour_is_a_located_error():
    msg = _error(FRAGMENTS, "gfx942", T="f8e4m3", U="f8e4m3fnuz", E=8, R=4)
    assert "t.kc:15:20: error: MFMA on amdgcn gfx942 reads FP8 as f8e4m3fnuz and f8e5m2fnuz, not f8e4m3" in msg
    msg = _error(FRAGMENTS, "gfx950", T="f8e4m3", U="f8e5m2fnuz", E=8, R=16)
    assert "t.kc:15:24: error: MFMA on amdgcn gfx950 reads FP8 as f8e4m3 and f8e5m2, not f8e5m2fnuz" in msg


def test_fragment_types_that_form_no_instruction():
    assert "accumulator must be vec<f32, 16>" in _error(FRAGMENTS, "gfx942", T="bf16", U="bf16", E=4, R=8)
    assert "one 16-bit type" in _error(FRAGMENTS, "gfx942", T="bf16", U="f16", E=4, R=4)
    assert "no MFMA instruction takes vec<f16, 16>" in _error(FRAGMENTS, "gfx950", T="f16", U="f16", E=16,
                                                                 R=4)
    assert "vector of bf16, f16 or FP8, found vec<f32, 4>" in _error(FRAGMENTS, "gfx942", T="f32", U="f32", E=4,
                                                                    R=4)


# --- std.matmul's MFMA path (stdlib/matmul_amd.kc) -------------------------------------------------------

def check_product(c: np.ndarray, ref: np.ndarray, a64: np.ndarray, b64: np.ndarray) -> None:
    K = a64.shape[1]
    tol = K * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64)) + float(ml_dtypes.finfo(c.dtype).eps) / 2 * np.abs(ref)
    err = np.abs(c.astype(np.float64) - ref)
    assert np.isfinite(c).all(), "non-finite results"
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert (err <= tol + 1e-30).all(), \
        f"C{list(worst)} = {c[worst]}, want {ref[worst]} (error {err[worst]:.3g} > {tol[worst]:.3g})"


@pytest.fixture(scope="module")
def matmul_module():
    from kcompiler.frontend.program import stdlib_dir

    cache: dict[str, object] = {}

    def get(chip: str):
        # every global access checked as a GPU would fault on it: in bounds, and aligned
        if chip not in cache:
            cache[chip] = kc.compile_file(stdlib_dir() / "matmul.kc", target="cpu",
                                          target_options={"emulate_mfma": chip}, check_bounds=True)
        return cache[chip]
    return get


#: (chip, T, OUT, tiles, B_KMAJOR): each MFMA form the path picks, both B layouts, several wavefronts.
MATMUL_CONFIGS = [
    ("gfx942", "bf16", "f32", dict(BM=64, BN=64, BK=32, WM=32, WN=32), False),        # 32x32x8
    ("gfx90a", "f16", "f16", dict(BM=32, BN=64, BK=16, WM=16, WN=32), True),          # 16x16x16
    ("gfx950", "bf16", "bf16", dict(BM=64, BN=32, BK=32, WM=32, WN=16), False),       # 16x16x32
    ("gfx942", "f8e4m3fnuz", "f32", dict(BM=64, BN=64, BK=32, WM=32, WN=32), True),   # 32x32x16 FP8
    ("gfx950", "f8e4m3", "f16", dict(BM=64, BN=64, BK=64, WM=32, WN=32), False),      # 32x32x64 f8f6f4
    ("gfx950", "f8e5m2", "f32", dict(BM=32, BN=32, BK=128, WM=16, WN=16), True),      # 16x16x128 f8f6f4
]


@pytest.mark.slow(sample=6)
@pytest.mark.parametrize("shape", [(1, 1, 1), (17, 33, 65), (70, 40, 136)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("cfg", range(len(MATMUL_CONFIGS)))
def test_matmul_mfma_path(matmul_module, cfg, shape):
    chip, T, OUT, tiles, b_kmajor = MATMUL_CONFIGS[cfg]
    M, N, K = shape
    a = RNG.standard_normal((M, K)).astype(DTYPES[T])
    b = RNG.standard_normal((K, N)).astype(DTYPES[T])
    bb = np.ascontiguousarray(b.T) if b_kmajor else b
    c = np.full((M, N), np.nan, DTYPES[OUT])
    threads = tiles["BM"] // tiles["WM"] * (tiles["BN"] // tiles["WN"]) * 64
    grid = (-(-N // tiles["BN"]), -(-M // tiles["BM"]))
    from kcompiler import ops
    shared = ops.matmul_shared_bytes(dict(tiles, STAGES=2), a.itemsize, b_kmajor, mfma=True)
    matmul_module(chip).matmul[grid, threads](
        a, bb, c, M, N, K, K, K if b_kmajor else N, N, T=T, OUT=OUT, B_KMAJOR=b_kmajor,
        ALIGNED=K % 8 == 0 and N % 8 == 0, shared=shared, **tiles)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    check_product(c, a64 @ b64, a64, b64)


def test_matmul_mfma_path_applies_the_epilogue(matmul_module):
    M, N, K = 45, 70, 64
    tiles = dict(BM=64, BN=64, BK=32, WM=32, WN=32)
    a = RNG.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = RNG.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    bias = RNG.standard_normal(N).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    from kcompiler import ops
    matmul_module("gfx942").matmul_epilogue[(2, 1), 256](
        a, b, c, M, N, K, K, N, N, bias, np.zeros(1, np.float32), np.float32(1.0), T="bf16", OUT="f32", X="f32", Y="f32",
        EPI="epilogue.bias_relu", shared=ops.matmul_shared_bytes(dict(tiles, STAGES=2), 2, False, mfma=True),
        **tiles)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64 + bias
    tol = K * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64)) + 2.0 ** -24 * np.abs(ref)
    assert (np.abs(c - np.maximum(ref, 0)) <= tol).all()


LDS_OFFSETS = """
import std.matmul_amd as amd
kernel offsets[BK: i32, E: i32, S: i32](out: ptr<i32>, n: i32) {
    let t = block_id.x * block_dim.x + thread_id.x;
    if t < n {
        out[t] = amd.lds_offset[BK, E, S](t / BK, t % BK);
    }
}
"""


@pytest.mark.parametrize("BK,E,S", [(16, 4, 2), (32, 4, 2), (64, 4, 2), (32, 8, 2), (64, 8, 2), (32, 8, 1),
                                    (64, 8, 1), (64, 32, 1), (128, 32, 1)])
def test_lds_swizzle_is_a_bijection_free_of_bank_conflicts(BK, E, S):
    """matmul_amd's lds_offset, computed by the kernel: every (row, column) of a 128-row tile gets its own
    element, units of E elements stay whole, and the 128 / (E * S) lanes one LDS cycle serves (consecutive
    rows, one unit) fall in as many different groups of E * S bytes of the 32 banks of 4 bytes."""
    rows = 128
    out = np.full(rows * BK, -1, np.int32)
    kc.compile(LDS_OFFSETS, target="cpu").offsets[rows * BK // 64, 64](out, rows * BK, BK=BK, E=E, S=S)
    off = out.reshape(rows, BK)
    assert sorted(off.ravel()) == list(range(rows * BK))
    assert (off // E == off[:, ::E].repeat(E, axis=1) // E).all() and (off % E == np.arange(BK) % E).all()
    fb = E * S
    lanes = 128 // fb
    for u in range(BK // E):
        groups = (off[:, u * E] * S // fb) % lanes
        for r0 in range(0, rows, lanes):
            assert len(set(groups[r0:r0 + lanes])) == lanes, (u, r0, groups[r0:r0 + lanes])


# --- std.matmul on AMD: the assembly and the code object ------------------------------------------------

MATMUL_PARAMS = dict(BM=64, BN=64, BK=32, WM=32, WN=32, OUT="f32", ALIGNED=True)


@pytest.mark.parametrize("arch,T,b_kmajor,instr", [
    ("gfx942", "bf16", False, "v_mfma_f32_32x32x8_bf16"),
    ("gfx942", "f8e4m3fnuz", True, "v_mfma_f32_32x32x16_fp8_fp8"),
    ("gfx950", "bf16", True, "v_mfma_f32_32x32x16_bf16"),
    ("gfx950", "f8e5m2", False, "v_mfma_f32_32x32x16_bf8_bf8"),
])
def test_matmul_assembly_is_mfma_from_lds(arch, T, b_kmajor, instr):
    from kcompiler.frontend.program import stdlib_dir

    text = compile_source_to((stdlib_dir() / "matmul.kc").read_text(), str(stdlib_dir() / "matmul.kc"), "asm",
                             "amdgcn", arch, comptime=dict(MATMUL_PARAMS, T=T, B_KMAJOR=b_kmajor))
    # the operands come from LDS (ds_read), the tile of the next k-step is written there between
    # barriers, nothing spills to scratch
    filecheck(text, f"""
        CHECK-LABEL: matmul__{{{{.*}}}}:
        CHECK: ds_write
        CHECK: s_barrier
        CHECK: ds_read
        CHECK: {instr}
        CHECK: s_barrier
        CHECK: .private_segment_fixed_size: 0
    """)
    # BK / K of the instruction MFMAs a k-tile (32x32 tiles, a lane's E elements: K = 2 E), in each
    # copy of the loop body LLVM keeps
    per_tile = 32 // (2 * (8 if T != "bf16" or arch == "gfx950" else 4))
    assert text.count(instr) > 0 and text.count(instr) % per_tile == 0


def test_matmul_code_object_links():
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.runtime.codeobject import read_code_object

    path = stdlib_dir() / "matmul.kc"
    obj = compile_source_to(path.read_text(), str(path), "obj", "amdgcn", "gfx942",
                            comptime=dict(MATMUL_PARAMS, T="bf16", B_KMAJOR=True))
    co = read_code_object(obj)
    assert co.arch == "gfx942" and co.code_object_version == 5
    (k,) = [k for k in co.kernels if k.name.startswith("matmul__")]
    assert [a.name for a in k.explicit_args][:3] == ["a", "b", "c"]


def test_matmul_big_tiles_keep_their_accumulators_in_registers():
    """kernel matmul declares its block size on MFMA targets (launch_bounds): LLVM then gives a wave64
    kernel of 256 threads more than 128 VGPRs, and the 64 x 64 accumulators of a wavefront (4 x 16
    registers a lane, 32x32 tiles) with the fragments and the prefetched tile fit without scratch."""
    from kcompiler.frontend.program import stdlib_dir

    path = stdlib_dir() / "matmul.kc"
    text = compile_source_to(path.read_text(), str(path), "asm", "amdgcn", "gfx942",
                             comptime=dict(MATMUL_PARAMS, BM=128, BN=128, WM=64, WN=64, T="bf16", B_KMAJOR=False))
    import re
    # matmul, matmul_epilogue, matmul_block_epilogue
    assert re.findall(r"\.max_flat_workgroup_size:\s+(\d+)", text) == ["256"] * 3
    assert re.findall(r"\.private_segment_fixed_size:\s+(\d+)", text) == ["0"] * 3 and "scratch_" not in text


def test_ir_verifier_checks_the_mfma_op():
    from kcompiler.ir import Builder, Function, Module, Value
    from kcompiler.ir.types import BF16, F16, F32, VOID, VectorType
    from kcompiler.ir.verifier import IRVerifyError, verify

    def build(a_t, b_t, c_t, shape):
        params = [Value(VectorType(*a_t), "a"), Value(VectorType(*b_t), "b"), Value(VectorType(*c_t), "c")]
        f = Function("f", params, VOID, "device")
        Builder(f.body).intrinsic("amdgcn.mfma", params, VectorType(*c_t), shape=shape)
        return Module("m", [f])

    verify(build((BF16, 4), (BF16, 4), (F32, 16), "32x32x8"))
    for bad, words in [(build((BF16, 4), (BF16, 4), (F32, 4), "32x32x8"), r"need vec<f32, 16>"),
                       (build((BF16, 8), (BF16, 8), (F32, 4), "16x16x16"), r"needs vec<T, 4>"),
                       (build((BF16, 4), (F16, 4), (F32, 4), "16x16x16"), "one type"),
                       (build((BF16, 4), (BF16, 4), (F32, 4), "m16n8k16"), "shape")]:
        with pytest.raises(IRVerifyError, match=words):
            verify(bad)

