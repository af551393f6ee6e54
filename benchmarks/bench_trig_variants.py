"""Why sin/cos/tan (f32) run below the copy bound: the speed of variants of stdlib/libm_trig.kc in
ops.math's 4-element kernel, against torch, in one run on a CUDA GPU.

    python benchmarks/bench_trig_variants.py [--only sin,cos,tan] [--check]

Each variant is the library's text with a few lines replaced, compiled as the kernel's own functions
(the library has no imports of its own), on the 2^28-element f32 array of bench_math.py's speed table
(uniform in [-2, 2): every element takes the Cody-Waite path). Variants:

  current        stdlib/libm_trig.kc as it is
  z=r*r          sin/cos kernel: z = r^2 instead of (r + rl)^2 (2 SASS an element fewer; CPU target:
                 sin 1.19, cos 1.21 ulp instead of 0.87, 0.88)
  no-branch      no Payne-Hanek branch: Cody-Waite for every x (wrong beyond 2^17; a measurement of
                 what the per-element branch, BSSY/BSYNC and the slow path's code cost)

--check compares every variant's results with the current one on the benchmark's array (the
no-branch variant is exact there too: |x| < 2). Prints GElem/s (triton.testing.do_bench).
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kcompiler as kc  # noqa: E402
from kcompiler.ops import math_kernel_source  # noqa: E402

LIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "stdlib", "libm_trig.kc")


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


VARIANTS = {
    "current": lambda t: t,
    "z=r*r": lambda t: t.replace("let z = fma(r, r, r * (rl + rl));", "let z = r * r;"),
    "no-branch": _no_branch,
}
FNS = {"sin": "sinf", "cos": "cosf", "tan": "tanf"}


def source(variant: str, fn: str) -> str:
    with open(LIB) as fh:
        text = VARIANTS[variant](fh.read())
    kernel = math_kernel_source(FNS[fn], 1).replace("import std.math\n", "")
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
                mod = kc.compile(source(v, fn), target="cpu", path=f"<trig {v} {fn}>")
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
            mod = kc.compile(source(v, fn), target="cuda", path=f"<trig {v} {fn}>")
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
