"""The target-intrinsic registry (kcompiler/ir/intrinsics.py): one generic IR op, each vendor's
instructions registered in its own backend folder, looked up by name."""
from __future__ import annotations

import pytest

from kcompiler.backends.amdgcn.target import AmdgcnTarget
from kcompiler.backends.cpu.target import CpuTarget
from kcompiler.backends.llvm import compile_ir
from kcompiler.backends.nvptx.target import NvptxTarget
from kcompiler.diagnostics import CompileError, SourceFile, SourceSpan
from kcompiler.ir import Builder, Function, Module, Value, print_module
from kcompiler.ir.core import OPS
from kcompiler.ir.intrinsics import get, lookup
from kcompiler.ir.types import BF16, F32, VOID, PointerType, VectorType
from kcompiler.ir.verifier import IRVerifyError, verify


def _mfma_module(span=None) -> Module:
    a = Value(VectorType(BF16, 4), "a")
    c = Value(VectorType(F32, 16), "c")
    out = Value(PointerType(VectorType(F32, 16)), "out")
    fn = Function("k", [a, c, out], VOID, "kernel")
    b = Builder(fn.body, span)
    b.store(out, b.intrinsic("amdgcn.mfma", [a, a, c], VectorType(F32, 16), shape="32x32x8"))
    b.ret()
    return Module("m", [fn])


def test_core_ir_names_no_vendor_instruction():
    for name in ("wgmma", "mfma", "mma", "ldmatrix", "cp_async", "tma_load", "mbarrier_init", "setmaxnreg"):
        assert name not in OPS
    assert "intrinsic" in OPS


def test_registry_finds_each_backends_table_by_name():
    assert get("nvptx.wgmma.mma_async").builtin == "wgmma" and get("nvptx.wgmma.mma_async").backend == "nvptx"
    assert get("amdgcn.mfma").tables["forms"][("16-bit", 4, 16)] == ("32x32x8", "mfma")
    assert lookup("nvptx.no_such_instruction") is None and lookup("toy.anything") is None


def test_the_frontend_takes_what_a_feature_is_from_the_backends_record():
    """The "not available on this target" message says what the feature is and which chips have it
    from the intrinsic's record (``needs``, the backend's data), not from a table in the frontend: a
    record registered here, naming its own chips, is what the message says."""
    from kcompiler.frontend.builtin_registry import require_feature
    from kcompiler.ir.intrinsics import Intrinsic, register_intrinsics

    register_intrinsics(Intrinsic(name="toyvendor.op", builtin="toy_op", feature="toy_op", lower="x:y",
                                  needs={"toy_op": "the toy op (Toy Inc. chips t1 and t2)"}))

    class FL:
        target = NvptxTarget("sm_90a")

        def fail(self, msg, span, hint=None):
            raise CompileError(f"{msg} | {hint}")

    with pytest.raises(CompileError, match=r"toy_op is not available on this target \(nvptx sm_90a\): it is the "
                                           r"toy op \(Toy Inc. chips t1 and t2\) \| .*target.has\(\"toy_op\"\)"):
        require_feature(FL(), "toyvendor.op", None)
    require_feature(FL(), "nvptx.wgmma.mma_async", None)  # sm_90a has wgmma: no error
    assert get("nvptx.mma.sync").describe("mma_fp8") == "FP8 mma.sync (NVIDIA sm_89 or later)"
    assert get("amdgcn.mfma").describe() == "MFMA (AMD CDNA: gfx90a, gfx942, gfx950)"


def test_printer_shows_the_intrinsic_by_name():
    text = print_module(_mfma_module())
    assert "= intrinsic amdgcn.mfma {shape=32x32x8} %0.a, %0.a, %1.c : vec<f32, 16>" in text, text


def test_verifier_rejects_an_unknown_intrinsic():
    fn = Function("k", [], VOID, "kernel")
    Builder(fn.body).intrinsic("nvptx.frobnicate")
    with pytest.raises(IRVerifyError, match="unknown intrinsic 'nvptx.frobnicate'"):
        verify(Module("m", [fn]))


@pytest.mark.parametrize("make,where", [(lambda: NvptxTarget("sm_90a"), "nvptx sm_90a"),
                                        (lambda: CpuTarget(), "cpu ")])
def test_another_vendors_intrinsic_is_a_located_error_naming_it_and_the_target(make, where):
    span = SourceSpan(SourceFile("k.kc", "\n\n    mfma(a, a, c)\n"), 3, 5, 3, 9)
    m = _mfma_module(span)
    verify(m)
    with pytest.raises(CompileError) as ei:
        compile_ir(m, make())
    msg = str(ei.value)
    assert f"mfma is not available on this target ({where}" in msg and "amdgcn.mfma" in msg, msg
    assert "k.kc:3:5" in msg, msg


def test_own_vendor_and_emulation_lower_it():
    compile_ir(_mfma_module(), AmdgcnTarget("gfx942"))
    compile_ir(_mfma_module(), CpuTarget(emulate_mfma="gfx90a"))
