"""saxpy: y = alpha * x + y over f16, bf16 and f32 with 16-byte vector accesses, checked against
numpy (f32 arithmetic, rounded to the storage type)."""
import ml_dtypes
import numpy as np

from _driver import check_close, compile_example, main

DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
TOL = {"f16": 2e-3, "bf16": 1.5e-2, "f32": 1e-6}


def run(target: str, n: int = 100_003) -> str:
    rng = np.random.default_rng()
    m = compile_example("saxpy", target)
    lines = []
    for name, dt in DTYPES.items():
        vec = 16 // np.dtype(dt).itemsize
        x = rng.standard_normal(n).astype(dt)
        y = rng.standard_normal(n).astype(dt)
        alpha = np.float32(rng.uniform(-2, 2))
        want = (alpha * x.astype(np.float32) + y.astype(np.float32)).astype(dt)
        threads = 128
        blocks = (n + threads * vec - 1) // (threads * vec)
        m.saxpy[blocks, threads](x, y, alpha, n, VEC=vec)
        err = check_close(y.astype(np.float32), want.astype(np.float32), TOL[name], f"saxpy {name}")
        lines.append(f"{name} (VEC={vec}) error {err:.2e}")
    return f"saxpy ok on {target}: " + ", ".join(lines)


if __name__ == "__main__":
    main(run)
