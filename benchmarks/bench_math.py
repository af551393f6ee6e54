"""std.math on a CUDA GPU: the accuracy of every function and variant over every f32 input, then
throughput against torch and Triton in the same run. Writes the table of docs/math.md.

    python benchmarks/bench_math.py [--out docs/math.md] [--only exp,log] [--no-speed]

Accuracy. For each f32 function of kcompiler.numerics.mathfns (accurate, and fast where there is a
fast version): all 2^32 inputs, generated in the kernel from the thread index in chunks of 2^28, the
f32 results compared on the GPU with torch's float64 version of the function's reference formula
(CUDA's double-precision functions, within 2 ulp of double: ~2^-28 ulp of f32). Reported: the max
ulp error over inputs whose result is finite in f32, the share of results equal to the correctly
rounded one (NaNs count as equal where the reference is NaN), and the worst input. Two-argument
functions (pow, atan2): 2^30 pairs, half random bit patterns, half uniform over the function's domain.
f16 and bf16: all 2^16 inputs, error in ulp of the 16-bit result. f64 functions: 2^14 inputs against
mpmath at 80 bits.

Speed: 2^28-element f32 arrays, GElem/s, kcompiler accurate and fast, torch (x.exp() ... into a
preallocated output), Triton (tl / libdevice), measured with triton.testing.do_bench.
"""
import argparse
import datetime
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import kcompiler as kc  # noqa: E402
from kcompiler.numerics.mathfns import FAST, FUNCTIONS  # noqa: E402

CHUNK = 1 << 28


class TorchNS:
    """torch under numpy's names, as the references in mathfns are written."""

    def __getattr__(self, name):
        return getattr(torch, {"power": "pow", "arcsin": "asin"}.get(name, name))


TNS = TorchNS()

SWEEP = """
import std.math
kernel sweep(y: ptr<f32>, base: u32, n: i64) {
    let i = i64(block_id.x) * i64(block_dim.x) + i64(thread_id.x);
    if i < n {
        y[i] = math.FN(bitcast[f32](base + u32(i)));
    }
}
"""


def launch(fn: str, n: int) -> tuple[int, int]:
    """ops.math's (grid, block) for std.math's ``fn`` over ``n`` elements."""
    from kcompiler.ops import math_launch, math_vectors
    return math_launch(n, math_vectors(fn))


def module(fn: str):
    """The sweep kernel and kcompiler.ops.math's kernel (``apply``, or ``apply2`` for the two-argument
    functions, which have no sweep; launched with :func:`launch`) for std.math's ``fn``."""
    if fn not in module.cache:
        from kcompiler.ops import MATH_KERNEL, math_kernel, math_vectors
        binary = fn.endswith(("pow", "atan2"))
        src = MATH_KERNEL
        if not binary:
            src += SWEEP.replace("import std.math", "").replace("FN", fn)
        # ops.math's kernel for this fn: its FN and VV bound by default, 'apply' taking 1 or 2 inputs
        kernel = math_kernel(2 if binary else 1)
        module.cache[fn] = kc.compile(src, target="cuda", path=f"<bench_math {fn}>",
                                      comptime={kernel: {"FN": f"math.{fn}", "VV": math_vectors(fn)}})
    return module.cache[fn]


module.cache = {}


class Stats:
    def __init__(self):
        self.max, self.n, self.same, self.worst = 0.0, 0, 0, ""

    def add(self, xs, y, ref, out_dtype=torch.float32):
        """xs: input tensors (f32 or 16-bit), y: results (out_dtype), ref: float64 reference."""
        fmax = torch.finfo(out_dtype).max
        if out_dtype == torch.float32:
            mant, tiny = 23, -126
        else:
            mant, tiny = (10, -14) if out_dtype == torch.float16 else (7, -126)
        want = ref.to(out_dtype)
        yd = y.double()
        nan_ref, nan_y = torch.isnan(ref), torch.isnan(yd)
        finite = torch.isfinite(ref) & (ref.abs() <= fmax)
        e = torch.floor(torch.log2(ref.abs().clamp_min(2.0 ** tiny)))
        err = torch.where(finite, (yd - ref).abs() / torch.exp2(e - mant), torch.zeros_like(ref))
        over = torch.isinf(want) & ~nan_ref
        err = torch.where(over & (y != want), torch.full_like(err, float("inf")), err)
        err = torch.where(nan_ref != nan_y, torch.full_like(err, float("inf")), err)
        err = torch.nan_to_num(err, nan=float("inf"))
        m, k = torch.max(err, 0)
        self.same += int(((y == want) | (nan_ref & nan_y)).sum())
        self.n += y.numel()
        if float(m) > self.max or not self.worst:
            self.max = max(self.max, float(m))
            k = int(k)
            self.worst = ", ".join(f"{float(x[k]):.9g}" for x in xs) + f" -> {float(y[k]):.9g} (ref {float(ref[k]):.12g})"


def sweep_f32(name: str, fast: bool) -> Stats:
    f = FUNCTIONS[name]
    fn = ("fast_" if fast else "") + name
    st = Stats()
    y = torch.empty(CHUNK, dtype=torch.float32, device="cuda")
    if f.arity == 1:
        mod = module(fn)
        for c in range((1 << 32) // CHUNK):
            base = c * CHUNK
            mod.sweep[CHUNK // 256, 256](y, np.uint32(base), CHUNK)
            bits = (torch.arange(CHUNK, device="cuda", dtype=torch.int64) + base)
            x = (bits - (bits >= 2 ** 31).long() * 2 ** 32).to(torch.int32).view(torch.float32)
            ref = f.ref(TNS, x.double())
            st.add([x], y, ref)
            del x, ref, bits
    else:
        mod = module(fn)
        g = torch.Generator(device="cuda").manual_seed(1)
        for c in range(4):
            if c % 2 == 0:
                a, b = (torch.randint(0, 2 ** 32, (CHUNK,), device="cuda", generator=g, dtype=torch.int64)
                        for _ in range(2))
                a, b = ((v - (v >= 2 ** 31).long() * 2 ** 32).to(torch.int32).view(torch.float32) for v in (a, b))
            else:
                lo, hi = f.domain
                a = torch.rand(CHUNK, device="cuda", generator=g) * (hi - lo) + lo
                b = torch.randn(CHUNK, device="cuda", generator=g) * 20
                if name == "atan2":
                    b = torch.rand(CHUNK, device="cuda", generator=g) * (hi - lo) + lo
            mod.apply2[launch(name, CHUNK)](a, b, y, CHUNK, T="f32")
            st.add([a, b], y, f.ref(TNS, a.double(), b.double()))
    return st


#: The reduced-precision variants and the function each approximates.
RP = {"exp_rp": "exp", "tanh_rp": "tanh", "sigmoid_rp": "sigmoid", "silu_rp": "silu", "gelu_rp": "gelu_tanh"}


def sweep_16(name: str, dtype, fast: bool = False, kernel_fn: str | None = None) -> Stats:
    """All 2^16 inputs of ``dtype`` through std.math's ``kernel_fn`` (default ``name`` or
    ``fast_<name>``), against ``name``'s reference rounded to ``dtype``."""
    f = FUNCTIONS[name]
    st = Stats()
    x = torch.arange(1 << 16, device="cuda", dtype=torch.int32).to(torch.int16).view(dtype)
    y = torch.empty_like(x)
    fn = kernel_fn or (("fast_" if fast else "") + name)
    mod = module(fn)
    if f.arity == 1:
        mod.apply[launch(fn, x.numel())](x, y, x.numel(), T="f16" if dtype == torch.float16 else "bf16")
        st.add([x], y, f.ref(TNS, x.double()), dtype)
    return st


def f64_check(name: str, n: int = 1 << 14):
    import mpmath
    mpmath.mp.prec = 80
    f = FUNCTIONS[name]
    rng = np.random.default_rng(7)
    lo, hi = f.domain
    x = np.concatenate([rng.uniform(lo, hi, n // 2),
                        rng.integers(0, 2 ** 63, n // 2, dtype=np.uint64).view(np.float64)])
    x = x[np.isfinite(x)]
    mpf = {"exp": mpmath.exp, "log": mpmath.log, "sqrt": mpmath.sqrt, "sin": mpmath.sin, "cos": mpmath.cos,
           "tanh": mpmath.tanh, "cbrt": lambda v: mpmath.sign(v) * mpmath.cbrt(abs(v))}[name]
    if name in ("log", "sqrt"):
        x = np.abs(x)
    xt = torch.tensor(x, device="cuda")
    y = torch.empty_like(xt)
    module(name).apply[launch(name, xt.numel())](xt, y, xt.numel(), T="f64")
    y = y.cpu().numpy()
    worst, same = 0.0, 0
    for xi, yi in zip(x, y):
        r = mpf(mpmath.mpf(float(xi)))
        if not mpmath.isfinite(r) or abs(r) > 1.7976931348623157e308:
            ok = np.isinf(yi)
            worst = worst if ok else float("inf")
            continue
        e = max(int(mpmath.floor(mpmath.log(abs(r), 2))) if r != 0 else -1022, -1022)
        err = float(abs(mpmath.mpf(float(yi)) - r) / mpmath.mpf(2) ** (e - 52))
        worst = max(worst, err)
        same += float(yi) == float(r)
    return worst, same / len(x)


def bench_speed(names):
    from triton.testing import do_bench
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    n = 1 << 28
    tl_fns = {"exp": "tl.exp(x)", "exp2": "tl.exp2(x)", "log": "tl.log(x)", "log2": "tl.log2(x)",
              "sin": "tl.sin(x)", "cos": "tl.cos(x)", "sqrt": "tl.sqrt_rn(x)", "rsqrt": "tl.rsqrt(x)",
              "tanh": "libdevice.tanh(x)", "erf": "tl.erf(x)", "expm1": "libdevice.expm1(x)",
              "log1p": "libdevice.log1p(x)", "tan": "libdevice.tan(x)", "atan": "libdevice.atan(x)",
              "asin": "libdevice.asin(x)", "sinh": "libdevice.sinh(x)", "cosh": "libdevice.cosh(x)",
              "erfc": "libdevice.erfc(x)", "log10": "libdevice.log10(x)", "exp10": "libdevice.exp10(x)",
              "sigmoid": "tl.sigmoid(x)"}
    torch_fns = {"exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1, "log": torch.log, "log2": torch.log2,
                 "log10": torch.log10, "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
                 "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "asin": torch.asin, "acos": torch.acos,
                 "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh, "erf": torch.erf,
                 "erfc": torch.erfc, "sigmoid": torch.sigmoid, "rcp": torch.reciprocal}
    torch_fns = {k: (lambda f: lambda x, y: f(x, out=y))(f) for k, f in torch_fns.items()}
    F = torch.nn.functional  # torch's activations take no out=: a cached allocation each call
    torch_fns.update(silu=lambda x, y: F.silu(x), gelu=lambda x, y: F.gelu(x),
                     softplus=lambda x, y: F.softplus(x),
                     gelu_tanh=lambda x, y: F.gelu(x, approximate="tanh"))
    x = torch.rand(n, device="cuda") * 4 - 2
    y = torch.empty_like(x)
    rows = []
    for name in names:
        if FUNCTIONS[name].arity != 1:
            continue
        xi = x.abs() + 0.5 if name in ("log", "log2", "log10", "sqrt", "rsqrt") else (
            x * 0.45 if name in ("asin", "acos") else x)
        r = {}
        for fast in (False, True):
            if fast and name not in FAST:
                continue
            fn = ("fast_" if fast else "") + name
            mod, grid = module(fn), launch(fn, n)
            t = do_bench(lambda: mod.apply[grid](xi, y, n, T="f32"))
            r["fast" if fast else "kc"] = n / t / 1e6
        if name in torch_fns:
            tf = torch_fns[name]
            t = do_bench(lambda: tf(xi, y))
            r["torch"] = n / t / 1e6
        if name in tl_fns:
            src = (f"@triton.jit\ndef k(X, Y, N, BLOCK: tl.constexpr):\n"
                   f"    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
                   f"    x = tl.load(X + o, mask=o < N)\n    tl.store(Y + o, {tl_fns[name]}, mask=o < N)\n")
            path = f"/tmp/tk_{name}.py"
            with open(path, "w") as fh:
                fh.write("import triton\nimport triton.language as tl\n"
                         "from triton.language.extra import libdevice\n" + src)
            import importlib.util
            spec = importlib.util.spec_from_file_location(f"tk_{name}", path)
            m = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(m)
            t = do_bench(lambda: m.k[(n // 1024,)](xi, y, n, BLOCK=1024))
            r["triton"] = n / t / 1e6
        rows.append((name, r))
        print(f"speed {name}: " + ", ".join(f"{k} {v:.1f} GElem/s" for k, v in r.items()), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default="")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--no-accuracy", action="store_true")
    args = ap.parse_args()
    names = [n for n in FUNCTIONS if not args.only or n in args.only.split(",")]
    dev = torch.cuda.get_device_name()
    lines = []
    t0 = time.time()
    if not args.no_accuracy:
        for name in names:
            f = FUNCTIONS[name]
            for fast in (False, True):
                if fast and name not in FAST:
                    continue
                st = sweep_f32(name, fast)
                label = ("fast_" if fast else "") + name
                bound = "" if fast else f.bound
                lines.append(f"| `{label}` | f32 | {st.max:.3g} | {100 * st.same / st.n:.4f}% | {bound} | "
                             f"{'' if f.cuda is None else f.cuda} | {st.n} | {st.worst} |")
                print(lines[-1], flush=True)
                if f.arity == 1:
                    for dt, dn in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
                        s16 = sweep_16(name, dt, fast)
                        lines.append(f"| `{label}` | {dn} | {s16.max:.3g} | {100 * s16.same / s16.n:.3f}% | | | "
                                     f"{s16.n} | {s16.worst} |")
                        print(lines[-1], flush=True)
            if f.f64 and f.arity == 1:   # the two-argument f64 functions: tests/stdlib/test_libm_misc.py
                w, s = f64_check(name)
                lines.append(f"| `{name}` | f64 | {w:.3g} | {100 * s:.2f}% | | | 16384 (mpmath) | |")
                print(lines[-1], flush=True)
        for rp, ref in RP.items():
            if ref not in names:
                continue
            for dt, dn in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
                s16 = sweep_16(ref, dt, kernel_fn=rp)
                lines.append(f"| `{rp}` | {dn} | {s16.max:.3g} | {100 * s16.same / s16.n:.3f}% | 1 (99.9%) | | "
                             f"{s16.n} | {s16.worst} |")
                print(lines[-1], flush=True)
    print(f"accuracy done in {time.time() - t0:.0f} s", flush=True)
    speed = [] if args.no_speed else bench_speed(names)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(f"<!-- generated by benchmarks/bench_math.py on {dev}, {datetime.date.today()} -->\n")
            fh.write("| function | type | max ulp | correctly rounded | documented bound | CUDA bound | inputs | worst input |\n")
            fh.write("|---|---|---|---|---|---|---|---|\n")
            fh.write("\n".join(lines) + "\n\n")
            if speed:
                fh.write("| function | kcompiler | kcompiler fast | torch | Triton |\n|---|---|---|---|---|\n")
                for name, r in speed:
                    fh.write(f"| `{name}` | " + " | ".join(f"{r[k]:.1f}" if k in r else "" for k in
                                                         ("kc", "fast", "torch", "triton")) + " |\n")


if __name__ == "__main__":
    main()
