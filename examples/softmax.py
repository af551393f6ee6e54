"""softmax: row softmax, one block per row, checked against numpy in float64."""
import numpy as np

from _driver import check_close, compile_example, main


def run(target: str, rows: int = 37, cols: int = 1001, block: int = 128) -> str:
    rng = np.random.default_rng()
    x = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    y = np.full_like(x, np.nan)
    mod = compile_example("softmax", target)
    mod.softmax[rows, block](x, y, rows, cols)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    want = e / e.sum(axis=1, keepdims=True)
    err = check_close(y, want, 1e-5, "softmax")
    return f"softmax ok on {target}: {rows}x{cols}, relative error {err:.2e}"


if __name__ == "__main__":
    main(run)
