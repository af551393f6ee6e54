"""vadd: out = a + b on 2^20 + 3 floats, checked against numpy."""
import numpy as np

from _driver import check_close, compile_example, main


def run(target: str, n: int = (1 << 20) + 3) -> str:
    rng = np.random.default_rng()
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)  # poisoned: every element must be written
    m = compile_example("vadd", target)
    block = 256
    m.vadd[(n + block - 1) // block, block](a, b, out, n)
    err = check_close(out, a + b, 1e-6, "vadd")
    return f"vadd ok on {target}: n={n}, relative error {err:.2e}"


if __name__ == "__main__":
    main(run)
