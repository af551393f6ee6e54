"""The CPU target's contract="nvptx": multiply-adds fused as NVIDIA's code generation fuses them.

The rewrite itself (backends/cpu/contract.py) is checked rule by rule against llvmlite's own NVPTX
back end on the same LLVM IR (PTX text, no GPU needed); a kernel with an error-free transformation
on a product that is also summed shows that the option changes results, against float64 models of
the fused and unfused computations; and std.math's softplus before 1ba73ce (``let sh = T * rc``)
breaks its bound under the option as it did on the H100, and the fixed code does not."""
from __future__ import annotations

import re
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.backends.cpu import CpuTarget
from kcompiler.backends.cpu.contract import _split_top, fuse_like_nvptx
from kcompiler.numerics.mathfns import FUNCTIONS, check

from ...draws import fresh_rng

RNG = fresh_rng()
ARGS = "float %a, float %b, float %c, float %d, ptr %o"

def _stores(*values: str) -> str:
    """The float ``values`` stored to %o[0], %o[1], ... and ``ret void``: the end of a CASES body."""
    lines = [f"  store float {values[0]}, ptr %o"]
    for i, v in enumerate(values[1:], 1):
        lines += [f"  %o{i} = getelementptr float, ptr %o, i32 {i}", f"  store float {v}, ptr %o{i}"]
    return "\n".join(lines + ["  ret void"])


#: LLVM IR bodies of @k(ARGS): each stores its results to %o.
CASES = {
    # the product also stored and negated into an fma: fused into both sums all the same
    "multi_use": """
  %p = fmul contract float %a, %b
  %s = fadd contract float %p, %c
  %t = fadd contract float %d, %p
  %n = fneg float %p
  %r = call float @llvm.fma.f32(float %n, float %b, float %a)
""" + _stores("%s", "%t", "%r"),
    "sub_both_sides": """
  %p = fmul contract float %a, %b
  %s = fsub contract float %p, %c
  %t = fsub contract float %d, %p
""" + _stores("%s", "%t", "%p"),
    "negated_product": """
  %p = fmul contract float %a, %b
  %n = fneg float %p
  %s = fsub contract float %n, %c
  %t = fadd contract float %n, %d
""" + _stores("%s", "%t", "%p"),
    # two products: the first is fused on a tie, the one with fewer uses otherwise
    "two_products": """
  %p = fmul contract float %a, %b
  %q = fmul contract float %c, %d
  %s = fadd contract float %p, %q
  %u = fmul contract float %a, %c
  %v = fmul contract float %b, %d
  %t = fadd contract float %u, %v
  %w = fsub contract float %u, %v
""" + _stores("%s", "%t", "%w", "%u"),
    "not_contractable": """
  %p = fmul contract float %a, %b
  %s = fadd float %p, %c
  %q = fmul float %c, %d
  %t = fadd contract float %q, %a
""" + _stores("%s", "%t", "%p", "%q"),
    # NVPTX does not fuse a product into an add after a loop; the rewrite fuses within a block only
    "other_block": """
entry:
  %p = fmul contract float %a, %b
  br label %l
l:
  %i = phi i32 [0, %entry], [%i1, %l]
  %acc = phi float [%c, %entry], [%m, %l]
  %m = fmul contract float %acc, %p
  %i1 = add i32 %i, 1
  %cmp = fcmp olt float %m, %d
  br i1 %cmp, label %l, label %e
e:
  %s = fadd contract float %p, %d
  store float %s, ptr %o
  %o1 = getelementptr float, ptr %o, i32 1
  store float %m, ptr %o1
  ret void""",
    "double_and_vector": """
  %x = fpext float %a to double
  %y = fpext float %b to double
  %p = fmul contract double %x, %y
  %s = fadd contract double %p, 1.0
  store double %s, ptr %o
  %o1 = getelementptr double, ptr %o, i32 1
  store double %p, ptr %o1
  %va = insertelement <2 x float> <float 1.0, float 2.0>, float %a, i32 0
  %vp = fmul contract <2 x float> %va, <float 3.0, float 5.0>
  %vs = fadd contract <2 x float> <float 0.5, float 0.25>, %vp
  %o2 = getelementptr double, ptr %o, i32 2
  store <2 x float> %vs, ptr %o2
  %o3 = getelementptr double, ptr %o, i32 3
  store <2 x float> %vp, ptr %o3
  ret void""",
}


def _module(body: str, triple: str) -> str:
    return (f'target triple = "{triple}"\ndeclare float @llvm.fma.f32(float, float, float)\n'
            f"define void @k({ARGS}) {{\n{body}\n}}\n")


def _nvptx_fmas(body: str) -> int:
    """fma instructions in the PTX that llvmlite's NVPTX back end makes of ``body``, less the calls
    of llvm.fma already there."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    ref = llvm.parse_assembly(_module(body, "nvptx64-nvidia-cuda"))
    tm = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(cpu="sm_90", opt=3)
    ptx = tm.emit_assembly(ref)
    return len(re.findall(r"\bfma\.rn\.f(32|64)\b", ptx)) - body.count("@llvm.fma")


#: The fmas each case has after the rewrite, as "a b c" (-x: negated), in program order.
FUSED = {
    "multi_use": ["a b c", "a b d", "n b a"],
    "sub_both_sides": ["a b -c", "-a b d"],
    "negated_product": ["-a b -c", "-a b d"],
    "two_products": ["a b q", "b d u", "-b d u"],   # p, q one use each: p; u has more uses than v: v
    "not_contractable": [],
    "other_block": [],
    "double_and_vector": ["x y 1.0", "va <float 3.0, float 5.0> <float 0.5, float 0.25>"],
}


def _fmas(text: str) -> list[str]:
    body = text.split("define", 1)[1]
    negs = dict(re.findall(r"(%kc\.nvfma\.\d+) = fneg (?:contract )?(?:<[^>]*>|\S+) (\S+)", body))
    out = []
    for call in re.findall(r"call (?:contract )?(?:<[^>]*>|\S+) @llvm\.fma\.\w+\((.*)\)", body):
        ops = [re.sub(r"^(<[^>]*>|\S+) ", "", o) for o in _split_top(call)]
        out.append(" ".join("-" + negs[o][1:] if o in negs else o.lstrip("%") for o in ops))
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_rewrite_fuses_what_nvptx_fuses(case):
    """The rewrite of each case is valid LLVM IR with the fmas of FUSED, and as many as NVPTX's
    PTX of the case has."""
    text, fused = fuse_like_nvptx(_module(CASES[case], llvm.get_process_triple()))
    llvm.parse_assembly(text).verify()
    assert _fmas(text) == FUSED[case], text
    assert fused == _nvptx_fmas(CASES[case]) == len(FUSED[case]) - CASES[case].count("@llvm.fma")


SRC = """
kernel residual(x: ptr<f32>, y: ptr<f32>, c: ptr<f32>, out: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        let p = x[i] * y[i];
        let e = fma(x[i], y[i], -p);   // the product's rounding error, exactly: if p stays rounded
        out[i] = (p + c[i]) + e;       // p + c is summed with it
    }
}
"""


def test_option_changes_an_error_free_transformation():
    """p = x * y rounded, e = fma(x, y, -p) its exact error, then (p + c) + e. The host's LLVM keeps
    p + c apart (p has other uses); NVPTX fuses it into fma(x, y, c), and e is counted twice.
    x, y, c in [1, 2): every float64 sum below is exact, so each model rounds once per step."""
    n = 1 << 16
    x, y, c = (RNG.uniform(1.0, 2.0, n).astype(np.float32) for _ in range(3))
    xy = x.astype(np.float64) * y.astype(np.float64)                  # exact
    p = xy.astype(np.float32)
    e = xy - p                                                        # exact
    unfused = (((p.astype(np.float64) + c).astype(np.float32)) + e).astype(np.float32)
    fused = (((xy + c).astype(np.float32)) + e).astype(np.float32)
    results = {}
    for mode in ("host", "nvptx"):
        m = kc.compile(SRC, target="cpu", target_options={"contract": mode}, path="residual.kc")
        out = np.empty_like(x)
        m.residual[(n + 255) // 256, 256](x, y, c, out, n)
        results[mode] = out
    assert np.array_equal(results["host"], unfused)
    assert np.array_equal(results["nvptx"], fused)
    assert (fused != unfused).mean() > 0.05  # the option matters on this kernel
    ptx = kc.pipeline.compile_source_to(SRC, "residual.kc", "asm", target="nvptx", arch="sm_90")
    assert len(re.findall(r"\bfma\.rn\.f32\b", ptx)) == 2  # NVPTX: the explicit fma and p + c


SOFTPLUS_KERNEL = """
import {module} as sp
kernel softplus(x: ptr<f32>, y: ptr<f32>, n: i32) {{
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {{ y[i] = sp.softplusf(x[i]); }}
}}
"""
FIXED_LINE = "    let sh = fma(T, rc, 0.0);"
OLD_LINE = "    let sh = T * rc;"


@pytest.mark.parametrize("code", ["old", "fixed"])
def test_softplus_before_1ba73ce_breaks_its_bound_under_the_option(tmp_path: Path, code: str):
    """softplus with ls_log1p2's ``let sh = T * rc;`` (before 1ba73ce), compiled with
    contract="nvptx", exceeds its 1.5-ulp bound near the H100's worst points (x = 0.0006, 0.0298,
    0.3466), as the H100 measured (1.64 ulp); with the fix, ``fma(T, rc, 0.0)``, it does not.
    Every f32 within 2^15 steps of each point."""
    stdlib = Path(kc.__file__).resolve().parent.parent / "stdlib" / "libm_special.kc"
    text = stdlib.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(FIXED_LINE))
    (tmp_path / "special.kc").write_text(text.replace(line, OLD_LINE) if code == "old" else text)
    src = tmp_path / "k.kc"
    src.write_text(SOFTPLUS_KERNEL.format(module="special"))
    steps = np.arange(-(1 << 15), 1 << 15, dtype=np.int32)
    x = np.concatenate([(np.float32(c).view(np.int32) + steps).view(np.float32)
                        for c in (0.0006, 0.0298, 0.3466)])
    f = FUNCTIONS["softplus"]
    errs = {}
    for mode in ("host", "nvptx"):
        m = kc.compile_file(src, target="cpu", target_options={"contract": mode})
        y = np.empty_like(x)
        m.softplus[(x.size + 255) // 256, 256](x, y, x.size)
        errs[mode] = check(f, (x,), y, f.bound)[0]
    assert errs["host"] <= f.bound, errs          # the CPU's own contraction hid the bug
    if code == "old":
        assert errs["nvptx"] > f.bound, errs
    else:
        assert errs["nvptx"] <= f.bound, errs


def test_contract_option_is_checked_and_described():
    assert CpuTarget(contract="nvptx").describe()["contract"] == "nvptx"
    assert "contract" not in CpuTarget().describe()
    with pytest.raises(ValueError, match="contract must be"):
        CpuTarget(contract="fast")


@pytest.mark.parametrize("name", ["expm1", "pow", "atan2", "tanh", "gelu_tanh", "softplus"])
def test_std_math_has_as_many_fmas_as_its_ptx(name):
    """std.math's function in a one-element kernel: the CPU target's LLVM IR under contract="nvptx"
    has as many fmas as NVPTX's PTX (sm_90), so the rewrite fuses what NVIDIA's code generation
    fuses in real code, not only in the cases above. These have the most fusions of multi-use
    products (the CPU's own contraction leaves 6 to 10 of them apart); all 29 functions of mathfns
    matched when this was written."""
    f = FUNCTIONS[name]
    params = ", ".join(f"x{k}: ptr<f32>" for k in range(f.arity))
    args = ", ".join(f"x{k}[0]" for k in range(f.arity))
    src = f"import std.math\nkernel k({params}, y: ptr<f32>) {{ y[0] = math.{name}({args}); }}\n"
    ptx = kc.pipeline.compile_source_to(src, "one.kc", "asm", target="nvptx", arch="sm_90")
    ll = kc.pipeline.compile_source_to(src, "one.kc", "llvm", target=CpuTarget(contract="nvptx"))
    kernel = ll.split("define void @kc.k(")[1].split("\n}\n")[0]  # the CPU target's symbol: kc.k
    assert len(re.findall(r"@llvm\.fma\.f32\(", kernel)) == len(re.findall(r"\bfma\.rn(?:\.ftz)?\.f32\b", ptx))
