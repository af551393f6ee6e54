"""FP8 and MXFP8 on a CUDA GPU: each variant is checked against its reference, then timed against the
peer measured in the same run. Prints one line per measure.

    python benchmarks/bench_float8.py

- f32 -> f8e4m3 cast (kcompiler.ops.cast, cvt.rn.satfinite path on sm_89+; and the software path,
  target option float8="software") vs torch's ``x.to(torch.float8_e4m3fn)``: same bits required.
- bf16 -> MXFP8 (E4M3) quantisation (kcompiler.ops.mx_quantize) vs the device copy bandwidth of the
  same input (torch ``clone`` of the bf16 tensor); checked against kcompiler.numerics.mx.
Bandwidth counts bytes read + written once: cast 4 + 1 per element; quantise 2 + 1 + 1/32; copy 2 + 2.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

import kcompiler as kc  # noqa: E402
from kcompiler import ops  # noqa: E402
from kcompiler.frontend.program import stdlib_dir  # noqa: E402
from kcompiler.numerics import mx  # noqa: E402

N = 1 << 28  # elements


def gbps(nbytes: float, ms: float) -> float:
    return nbytes / ms / 1e6


def main() -> None:
    dev = torch.cuda.get_device_name()
    x = torch.randn(N, device="cuda", dtype=torch.float32) * 64
    want = x.to(torch.float8_e4m3fn)
    soft = kc.compile_file(stdlib_dir() / "cast.kc", target="cuda", target_options={"float8": "software"})
    variants = {"hardware": lambda: ops.cast(x, torch.float8_e4m3fn)}

    def software():
        out = torch.empty(N, dtype=torch.float8_e4m3fn, device="cuda")
        soft.cast[N // 2048, 256](x, out, N, S="f32", T="f8e4m3", VEC=8)
        return out
    variants["software"] = software
    t_torch = do_bench(lambda: x.to(torch.float8_e4m3fn))
    for name, fn in variants.items():
        got = fn()
        same = torch.equal(got.view(torch.uint8), want.view(torch.uint8))
        t = do_bench(fn)
        print(f"{dev}: f32->e4m3 cast {name}: {gbps(5 * N, t):.0f} GB/s, torch {gbps(5 * N, t_torch):.0f} GB/s, "
              f"ratio {t_torch / t:.2f}, bits equal torch: {same}")

    xb = torch.randn(N // 32, 32, device="cuda", dtype=torch.bfloat16).reshape(-1, 4096)
    codes, scales = ops.mx_quantize(xb, "f8e4m3")
    sample = slice(0, 64)
    rc, rs = mx.quantize(xb[sample].float().cpu().numpy(), "f8e4m3")
    ok = (codes[sample].cpu().view(torch.uint8).numpy() == rc.view(np.uint8)).all() and \
        (scales[sample].cpu().view(torch.uint8).numpy() == rs.view(np.uint8)).all()
    t_q = do_bench(lambda: ops.mx_quantize(xb, "f8e4m3"))
    t_copy = do_bench(lambda: xb.clone())
    mxmod = kc.compile_file(stdlib_dir() / "mx.kc", target="cuda")
    flat = xb.reshape(-1)
    cf, sf = torch.empty(N, dtype=torch.float8_e4m3fn, device="cuda"), torch.empty(N // 32, dtype=torch.uint8, device="cuda")
    for per in (8, 16, 32):
        t_k = do_bench(lambda: mxmod.mx_quantize[N // (256 * per), 256](
            flat, cf, sf.view(torch.float8_e8m0fnu), N, S="bf16", T="f8e4m3", EMAX=8, PER=per))
        print(f"{dev}: bf16->MXFP8 quantise kernel alone, {per} elements a thread: "
              f"{gbps(N * (2 + 1 + 1 / 32), t_k):.0f} GB/s")
    q_bw, c_bw = gbps(N * (2 + 1 + 1 / 32), t_q), gbps(4 * N, t_copy)
    print(f"{dev}: bf16->MXFP8 quantise: {q_bw:.0f} GB/s, copy {c_bw:.0f} GB/s, ratio {q_bw / c_bw:.2f} "
          f"(goal >= 0.85), matches the reference on 64 rows: {ok}")


if __name__ == "__main__":
    main()
