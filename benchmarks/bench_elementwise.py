"""ops.math's elementwise kernel: variants of its loop structure, on a CUDA GPU, for functions whose
code is too long to hide the loads behind (std.math's gelu, erfc, log1p at 54, 51, 49 SASS an
element ran 1-4% below the copy bound while torch's copy-bound ops ran at it).

    python benchmarks/bench_elementwise.py [--only gelu,erfc,log1p,exp]

Variants (each the kernel's text; f32, 2^28 elements, GElem/s by triton.testing.do_bench, results
compared with the current kernel's bit for bit):

  current        ops.math's kernel, one 4-element vector a thread (n / 1024 blocks of 256)
  current-grid   the same kernel on ops.math's grid (at most 65536 blocks: a grid-stride loop)
  prefetch       grid-stride, the next vector loaded before this one is computed, 132 x 8 blocks
  x8             two 4-element vectors a thread, both loaded before either is computed
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import kcompiler as kc  # noqa: E402
from kcompiler.ops import math_kernel_source  # noqa: E402

PREFETCH = """
import std.math
kernel apply[T: type](x0: ptr<T>, y: ptr<T>, n: i64) {
    let threads = i64(grid_dim.x) * i64(block_dim.x);
    let t = i64(block_id.x) * i64(block_dim.x) + i64(thread_id.x);
    let body = n / 4i64 * 4i64;
    var i = t * 4i64;
    var v = load[vec<T, 4>](x0 + select(i < body, i, 0i64));
    while i < body {
        let j = i + threads * 4i64;
        let w = load[vec<T, 4>](x0 + select(j < body, j, 0i64));
        var r: vec<T, 4>;
        for k in comptime range(0, 4) {
            r[k] = FN(v[k]);
        }
        store(y + i, r);
        v = w;
        i = j;
    }
    i = body + t;
    if i < n {
        y[i] = FN(x0[i]);
    }
}
"""

X8 = """
import std.math
kernel apply[T: type](x0: ptr<T>, y: ptr<T>, n: i64) {
    let t = i64(block_id.x) * i64(block_dim.x) + i64(thread_id.x);
    let i = t * 8i64;
    if i + 8i64 <= n {
        let a = load[vec<T, 4>](x0 + i);
        let b = load[vec<T, 4>](x0 + i + 4i64);
        var r: vec<T, 4>;
        var s: vec<T, 4>;
        for k in comptime range(0, 4) {
            r[k] = FN(a[k]);
            s[k] = FN(b[k]);
        }
        store(y + i, r);
        store(y + i + 4i64, s);
    } else {
        var m = i;
        while m < n {
            y[m] = FN(x0[m]);
            m += 1i64;
        }
    }
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="gelu,erfc,log1p,tan,exp")
    args = ap.parse_args()
    n = 1 << 28
    x = torch.rand(n, device="cuda") * 4 - 2
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    copy = do_bench(lambda: torch.neg(x, out=torch.empty_like(x)))
    print(f"torch.neg (copy-bound elementwise): {n / copy / 1e6:.1f} GElem/s")
    for name in args.only.split(","):
        fn = f"math.{name}"
        cur = kc.compile(math_kernel_source(fn, 1), target="cuda", path=f"<{name}>")
        pre = kc.compile(PREFETCH.replace("FN", fn), target="cuda", path=f"<{name} prefetch>")
        x8 = kc.compile(X8.replace("FN", fn), target="cuda", path=f"<{name} x8>")
        runs = {
            "current": lambda y: cur.apply[n // 1024, 256](x, y, n, T="f32"),
            "current-grid": lambda y: cur.apply[min(n // 1024, 65536), 256](x, y, n, T="f32"),
            "prefetch": lambda y: pre.apply[sms * 8, 256](x, y, n, T="f32"),
            "prefetch-16": lambda y: pre.apply[sms * 16, 256](x, y, n, T="f32"),
            "x8": lambda y: x8.apply[n // 2048, 256](x, y, n, T="f32"),
        }
        ref = torch.empty_like(x)
        runs["current"](ref)
        out = []
        for label, run in runs.items():
            y = torch.empty_like(x)
            run(y)
            torch.cuda.synchronize()
            diff = int((y.view(torch.int32) != ref.view(torch.int32)).sum())
            t = do_bench(lambda: run(y))
            out.append(f"{label} {n / t / 1e6:.1f}" + (f" ({diff} differ)" if diff else ""))
        print(f"{name}: " + ", ".join(out), flush=True)


if __name__ == "__main__":
    main()
