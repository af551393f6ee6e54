"""ops.math's elementwise kernel against variants of its shape and launch, on a CUDA GPU: which
kernel around std.math's functions runs them at the copy bound (f32, 2^28 elements, GElem/s by
triton.testing.do_bench, each variant's results checked bit for bit against the first's; torch's
op of the same function in the same run).

    python benchmarks/bench_elementwise.py [--only gelu,erfc,log1p,exp] [--passes 2]

Variants:

  loop 256       the kernel ops.math had before 2026-11-23: a grid-stride loop over 4-element
                 vectors, here on a grid of one vector a thread (n / 1024 blocks of 256)
  tilesK B       ops.math's kernel now (kcompiler.ops.MATH_KERNEL): block b
                 covers K tiles of 4 B elements one after another, one vector a thread each, no
                 loop; B threads a block, the grid covering n. ops.math runs K = 1, B = 256, and
                 K = 2, B = 512 for functions with MathFunction.vectors = 2 (gelu)

Earlier runs of this script also timed grid-stride grids (at most 65536 blocks; whole waves of
resident blocks, 1 and 8 waves), loading the next vector before computing this one, and two vectors
a thread loaded together: benchmarks/RESULTS.md has their figures.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import kcompiler as kc  # noqa: E402
from kcompiler.numerics.mathfns import FUNCTIONS  # noqa: E402
from kcompiler.ops import MATH_KERNEL  # noqa: E402

TORCH = {**{k: f"torch.{k}" for k in ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
                                       "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
                                       "erf", "erfc", "sigmoid")},
         "rcp": "torch.reciprocal", "silu": "torch.nn.functional.silu", "gelu": "torch.nn.functional.gelu",
         "softplus": "torch.nn.functional.softplus",
         "gelu_tanh": "lambda x: torch.nn.functional.gelu(x, approximate='tanh')"}


def launches(cur, tiles, n):
    """Every variant's launch: label -> run(x, y)."""
    def run(mod, g, b):
        return lambda x, y: mod.apply[g, b](x, y, n, T="f32")
    runs = {"loop 256": run(cur, n // 1024, 256)}
    for k, mod in tiles.items():
        for b in (256, 512):
            runs[f"tiles{k} {b}"] = run(mod, -(-n // (4 * b * k)), b)
    return runs


#: ops.math's kernel before 2026-11-23, for comparison: a grid-stride loop over 4-element vectors.
LOOP = """
import std.math
kernel apply[T: type](x0: ptr<T>, y: ptr<T>, n: i64) {
    let threads = i64(grid_dim.x) * i64(block_dim.x);
    let t = i64(block_id.x) * i64(block_dim.x) + i64(thread_id.x);
    let body = n / 4i64 * 4i64;
    var i = t * 4i64;
    while i < body {
        let v0 = load[vec<T, 4>](x0 + i);
        var r: vec<T, 4>;
        for k in comptime range(0, 4) {
            r[k] = FN(v0[k]);
        }
        store(y + i, r);
        i += threads * 4i64;
    }
    i = body + t;
    if i < n {
        y[i] = FN(x0[i]);
    }
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(k for k, f in FUNCTIONS.items() if f.arity == 1))
    ap.add_argument("--passes", type=int, default=2)
    args = ap.parse_args()
    n = 1 << 28
    x = torch.rand(n, device="cuda") * 4 - 2
    copy = do_bench(lambda: torch.neg(x, out=torch.empty_like(x)))
    print(f"torch.neg (copy-bound elementwise): {n / copy / 1e6:.1f} GElem/s")
    for name in args.only.split(","):
        fn = f"math.{name}"
        xi = x.abs() + 0.5 if name in ("log", "log2", "log10", "sqrt", "rsqrt") else (
            x * 0.45 if name in ("asin", "acos") else x)
        cur = kc.compile(LOOP.replace("FN", fn), target="cuda", path=f"<{name} loop>")
        tiles = {k: kc.compile(MATH_KERNEL, target="cuda", path=f"<{name} tiles{k}>",
                               comptime={"apply": {"FN": fn, "VV": k}}) for k in (1, 2)}
        runs = launches(cur, tiles, n)
        if name in TORCH:
            f = eval(TORCH[name])
            runs[TORCH[name]] = lambda x, y: f(x)
        ref = torch.empty_like(xi)
        runs["loop 256"](xi, ref)
        y = torch.empty_like(xi)
        speed = {label: [] for label in runs}
        for p in range(args.passes):
            for label, run in (runs.items() if p % 2 == 0 else reversed(runs.items())):
                speed[label].append(n / do_bench(lambda: run(xi, y)) / 1e6)
                if p == 0 and not label.startswith("torch"):
                    torch.cuda.synchronize()
                    diff = int((y.view(torch.int32) != ref.view(torch.int32)).sum())
                    assert diff == 0, (name, label, diff)
        print(f"{name}: " + ", ".join(f"{k} {' / '.join(f'{v:.1f}' for v in vs)}" for k, vs in speed.items()),
              flush=True)


if __name__ == "__main__":
    main()
