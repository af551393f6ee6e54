"""Why sin/cos/tan (f32) run below the copy bound: the speed of variants of stdlib/libm_trig.kc in
ops.math's 4-element kernel, against torch, in one run on a CUDA GPU.

    python benchmarks/bench_trig_variants.py [--only sin,cos,tan] [--check]

Each variant is the library's text with a few lines replaced, compiled as the kernel's own functions
(libm_trig.kc with libm_pio2.kc's argument reduction, its only import, inlined: _library), on the 2^28-element f32 array of bench_math.py's speed table
(uniform in [-2, 2): every element takes the Cody-Waite path). Variants:

  current        stdlib/libm_trig.kc as it is
  z=r*r          sin/cos kernel: z = r^2 instead of (r + rl)^2 (2 SASS an element fewer; CPU target:
                 sin 1.19, cos 1.21 ulp instead of 0.87, 0.88)
  no-branch      no Payne-Hanek branch: Cody-Waite for every x (wrong beyond 2^17; a measurement of
                 what the per-element branch, BSSY/BSYNC and the slow path's code cost)

tan: why its branch cost ~3% on the H100 (364.6 against 376.4 without it) and sin's nothing. Each
element's Payne-Hanek test is a BSSY/BSYNC region that ptxas does not schedule across, so ops.math's
4 elements run one after another and a warp's time between its load and its store is the sum of 4
dependent chains (the fewer loads in flight an SM keeps, the further below the copy bound). In the
previous tan each element's kernel waited behind the reduction's block, then for T (Horner, 6 steps),
c, t, and only then for MUFU.RCP (about 18 cycles) and eps. Single-warp in-order latency of the hot
path's SASS from the load to the store (sm_90a, 4 cycles a dependent step, MUFU 18, a taken branch
6; a model, not a measurement), registers, CPU max error (every 13th f32 in [0, 4], every 5th in
[4, 2^18), every 31st pattern):

  tan-previous            the previous tan_kernelf and tanf                    415 cycles, 32 regs, 1.2596
  tan-previous-no-branch  its Cody-Waite only (wrong beyond 2^17)              165, 31 (H100: 376.4)
  tan-estrin              T(z) in Estrin's form (depth 4 from z, not 6)        381, 40, 1.338
  tan-rcp-early           MUFU.RCP of ta = (r + rl) + r z A(z) (A degree 2, tan to 2^-14.1),
                          4 steps after z, in parallel with T (Estrin)         338, 40, 1.338
  tan-rcp-early-horner    the same with T by Horner                            340, 40, 1.2596
  tan-late-branch         Cody-Waite and the kernel for every x, then the branch (only x and
                          y live across it): reduction and kernel in one block 375, 32, bit for bit
                          the previous results
  tan-late-branch+rcp-early          both (Estrin)                             304, 40, 1.338
  tan-late-branch+rcp-early-horner   both (Horner): the library's tan now      312, 32, 1.2596
                                     (= current; sin for reference: 284, 32)
  ...@lb8                 the kernel with launch_bounds(256, 8): at most 32 registers (64 warps an
                          SM; 40 allow 48): tan-estrin 383, tan-rcp-early 350,
                          tan-rcp-early-horner 342, tan-late-branch+rcp-early 331 (no spills)

The prediction: speed follows that latency while registers stay at 32 (sin's 284 reached the copy
bound, the previous tan's 415 did not); the 40-register forms may lose to occupancy. "no-branch"
applies to the library as it is: for tan it removes reduce_pio2f's branch, not tanf's own.

--check compares every variant's results with the current one on the benchmark's array (the
no-branch variant is exact there too: |x| < 2). Prints GElem/s (triton.testing.do_bench).
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kcompiler as kc  # noqa: E402
from kcompiler.ops import MATH_KERNEL  # noqa: E402

LIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "stdlib", "libm_trig.kc")
PIO2 = os.path.join(os.path.dirname(LIB), "libm_pio2.kc")


def _library() -> str:
    """stdlib/libm_trig.kc as one file: libm_pio2.kc's functions first, then libm_trig.kc without its
    import of them and with their calls unqualified (so a variant may replace a function of either)."""
    with open(PIO2) as fh:
        pio2 = fh.read()
    with open(LIB) as fh:
        trig = fh.read().replace("import std.libm_pio2 as pio2\n", "")
    return pio2 + "\n" + re.sub(r"\bpio2\.(?=\w+\()", "", trig)


def _no_branch(text: str) -> str:
    """reduce_pio2f with its Cody-Waite block only (the Payne-Hanek and NaN tests removed)."""
    a = text.index("fn reduce_pio2f(")
    head = text[a:text.index("{\n", a) + 2]
    b = text.index("\n}\n", a)
    body = text[a:b]
    inner = body[body.index("    if abs(x) < 131072.0 {\n") + len("    if abs(x) < 131072.0 {\n"):]
    inner = inner[:inner.index("\n    }\n")]
    inner = re.sub(r"^    ", "", inner, flags=re.M)
    return text[:a] + head + inner + text[b:]


def _replace_fn(text: str, name: str, new: str) -> str:
    """text with the function `fn name(` (up to its closing line "}") replaced by new."""
    a = text.index(f"fn {name}(")
    b = text.index("\n}\n", a) + 3
    return text[:a] + new.strip() + "\n" + text[b:]


# tan's kernel T(z) (tan r = r + r z T(z) + its low part), by Horner's rule as in the library or
# in Estrin's form (depth 4 from z to p instead of 6, 2 instructions more)
T_HORNER = """    var p = 4.464279860e-03;
    p = fma(p, z, -8.659720334e-05);
    p = fma(p, z, 1.097293757e-02);
    p = fma(p, z, 2.123001032e-02);
    p = fma(p, z, 5.406986922e-02);
    p = fma(p, z, 1.333257705e-01);
    p = fma(p, z, 3.333335221e-01);
"""
T_ESTRIN = """    let z2 = z * z;
    let z4 = z2 * z2;
    let p01 = fma(1.333257705e-01, z, 3.333335221e-01);
    let p23 = fma(2.123001032e-02, z, 5.406986922e-02);
    let p45 = fma(-8.659720334e-05, z, 1.097293757e-02);
    let p46 = fma(4.464279860e-03, z2, p45);
    let p03 = fma(p23, z2, p01);
    let p = fma(p46, z4, p03);
"""
# the rcp started early, of a shorter approximation ta = r + r z A(z) (A: degree 2, tan to 2^-14.1
# relative on |r| <= 0.792, fitted for this; r + rl, not r: where s is tiny rl reaches 2^-3.8 of it,
# and rcp(r) gave 9.7 ulp at x = 48039.664): the MUFU issues 4 dependent steps after the reduction
# instead of 9, in parallel with T; eps = q0 (r + c) - 1 is then up to 2^-14 (the neglected
# q0 eps^2 below 2^-28 relative)
RCP_EARLY = """    let rz = r * z;
    var a = fma(9.327375888824463e-02, z, 1.1725649982690811e-01);
    a = fma(a, z, 3.35085928440094e-01);
    let q0 = fast_rcp_normal(fma(rz, a, r + rl));
"""


def _tan_kernel(poly: str, rcp_early: bool) -> str:
    """tan_kernelf with T by ``poly`` (T_HORNER, T_ESTRIN) and the reciprocal of t = r + c taken
    after T (the previous code) or started early (RCP_EARLY), then corrected by one residual step."""
    rz = "rz" if rcp_early else "r * z"
    return ("\nfn tan_kernelf(r: f32, rl: f32, odd: bool) -> f32 {\n    let z = r * r;\n"
            + (RCP_EARLY if rcp_early else "") + poly
            + f"    let c = fma({rz}, p, fma(rl, z, rl));\n    let t = r + c;\n"
            + ("" if rcp_early else "    let q0 = fast_rcp_normal(t);\n")
            + "    let eps = fma(q0, c, fma(q0, r, -1.0));\n"
            "    return select(odd, fma(q0, eps, -q0), t);\n}\n")


# the tan kernel and tanf before this change (Horner T, rcp of t = r + c, reduce_pio2f's branch
# before the kernel): the base of the tan-* variants
TAN_PREVIOUS = _tan_kernel(T_HORNER, rcp_early=False)
TANF_PREVIOUS = """
fn tanf(x: f32) -> f32 {
    let v = reduce_pio2f(x, 0);
    let q = bitcast[u32](v.z);
    return tan_kernelf(v.x, v.y, (q & 1u32) != 0u32);
}
"""


def _previous(text: str) -> str:
    """the library with the previous tan kernel and tanf (reduce_pio2f_cw stays: unused)."""
    return _replace_fn(_replace_fn(text, "tanf", TANF_PREVIOUS), "tan_kernelf", TAN_PREVIOUS)


TAN_ESTRIN = _tan_kernel(T_ESTRIN, rcp_early=False)
TAN_RCP_EARLY = _tan_kernel(T_ESTRIN, rcp_early=True)
# with T by Horner's rule as in the library (its chain, z -> c in 8 steps, is no longer the longer
# one: the rcp's is): 3 instructions more than the library's, not 5
TAN_RCP_EARLY_HORNER = _tan_kernel(T_HORNER, rcp_early=True)


# tanf with the Payne-Hanek branch after the hot path's result: Cody-Waite and the kernel for every
# x (an unconditional path, no BSSY/BSYNC inside it), then for |x| >= 2^17 (or inf/NaN) the result
# recomputed from reduce_pio2f's slow path; across the branch only x and the result are live.
TANF_LATE_BRANCH = """
fn tanf(x: f32) -> f32 {
    let j = fma(x, 0.6366197466850281, 12582912.0);
    let k = j - 12582912.0;
    let r1 = fma(-k, 1.570796251296997, x);
    let th = fma(k, 7.549789415861596e-08, 0.0);
    let s = r1 - th;
    let d = s - r1;
    let rl = fma(-k, 5.390302953474238e-15, fma(-k, 7.549789415861596e-08, -d));
    var y = tan_kernelf(s, rl, (bitcast[u32](j) & 1u32) != 0u32);
    if !(abs(x) < 131072.0) {
        let v = reduce_pio2f(x, 0);
        y = tan_kernelf(v.x, v.y, (bitcast[u32](v.z) & 1u32) != 0u32);
    }
    return y;
}
"""

def _tan(tanf: str | None, kernel: str | None):
    """a variant of the previous tan code: its tanf and/or tan_kernelf replaced."""
    def f(text: str) -> str:
        text = _previous(text)
        if tanf:
            text = _replace_fn(text, "tanf", tanf)
        if kernel:
            text = _replace_fn(text, "tan_kernelf", kernel)
        return text
    return f


VARIANTS = {
    "current": lambda t: t,
    "z=r*r": lambda t: t.replace("let z = fma(r, r, r * (rl + rl));", "let z = r * r;"),
    "no-branch": _no_branch,
    "tan-previous": _tan(None, None),
    "tan-previous-no-branch": lambda t: _no_branch(_previous(t)),
    "tan-estrin": _tan(None, TAN_ESTRIN),
    "tan-rcp-early": _tan(None, TAN_RCP_EARLY),
    "tan-rcp-early-horner": _tan(None, TAN_RCP_EARLY_HORNER),
    "tan-late-branch": _tan(TANF_LATE_BRANCH, None),
    "tan-late-branch+rcp-early": _tan(TANF_LATE_BRANCH, TAN_RCP_EARLY),
    "tan-late-branch+rcp-early-horner": _tan(TANF_LATE_BRANCH, TAN_RCP_EARLY_HORNER),  # = current
    # the kernel with launch_bounds(256, 8): at most 32 registers (ptxas gives the tan-estrin,
    # tan-rcp-early* and tan-late-branch+rcp-early kernels 40, 48 resident warps an SM instead of 64)
    "tan-estrin@lb8": _tan(None, TAN_ESTRIN),
    "tan-rcp-early@lb8": _tan(None, TAN_RCP_EARLY),
    "tan-rcp-early-horner@lb8": _tan(None, TAN_RCP_EARLY_HORNER),
    "tan-late-branch+rcp-early@lb8": _tan(TANF_LATE_BRANCH, TAN_RCP_EARLY),
}
FNS = {"sin": "sinf", "cos": "cosf", "tan": "tanf"}


def params(fn: str) -> dict:
    """ops.math's kernel ``apply`` bound to the variant's ``fn`` (sinf, ...), one vector a thread."""
    return {"apply": {"FN": FNS[fn], "VV": 1}}


def source(variant: str, fn: str) -> str:
    text = VARIANTS[variant](_library())
    kernel = MATH_KERNEL.replace("import std.math\n", "")  # FN given at compile: params(fn)
    if variant.endswith("@lb8"):
        kernel = kernel.replace("n: i64) {\n", "n: i64) {\n    launch_bounds(256, 8);\n", 1)
    return text + "\n" + kernel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="sin,cos,tan")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--target", default="cuda", help="cpu: compile and --check only (no timing)")
    args = ap.parse_args()
    names = args.only.split(",")
    if args.target == "cpu":
        import numpy as np
        x = np.random.default_rng(1).uniform(-2, 2, 1 << 20).astype(np.float32)
        for fn in names:
            ys = {}
            for v in VARIANTS:
                mod = kc.compile(source(v, fn), target="cpu", path=f"<trig {v} {fn}>", comptime=params(fn))
                y = np.empty_like(x)
                mod.apply[(x.size + 1023) // 1024, 256](x, y, x.size, T="f32")
                ys[v] = y
            print(fn, {v: int((ys[v] != ys["current"]).sum()) for v in ys}, "differences from current")
        return
    import torch
    from triton.testing import do_bench
    n = 1 << 28
    x = torch.rand(n, device="cuda") * 4 - 2
    y = torch.empty_like(x)
    for fn in names:
        tf = getattr(torch, fn)
        t = do_bench(lambda: tf(x, out=y))
        row = {"torch": n / t / 1e6}
        ref = None
        for v in VARIANTS:
            mod = kc.compile(source(v, fn), target="cuda", path=f"<trig {v} {fn}>", comptime=params(fn))
            t = do_bench(lambda: mod.apply[n // 1024, 256](x, y, n, T="f32"))
            row[v] = n / t / 1e6
            if args.check:
                mod.apply[n // 1024, 256](x, y, n, T="f32")
                if ref is None:
                    ref = y.clone()
                else:
                    row[v + " (differing results)"] = int((y != ref).sum())
        print(f"{fn}: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                    for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
