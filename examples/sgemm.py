"""sgemm: a tiled shared-memory f32 matrix product on odd sizes, checked against numpy in float64."""
import numpy as np

from _driver import check_close, compile_example, main


def run(target: str, m: int = 301, n: int = 257, k: int = 199, tile: int = 16) -> str:
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.full((m, n), np.nan, np.float32)
    mod = compile_example("sgemm", target)
    grid = ((n + tile - 1) // tile, (m + tile - 1) // tile)
    mod.sgemm[grid, (tile, tile)](a, b, c, m, n, k, TILE=tile)
    err = check_close(c, a.astype(np.float64) @ b.astype(np.float64), 1e-5, "sgemm")
    return f"sgemm ok on {target}: {m}x{n}x{k}, relative error {err:.2e}"


if __name__ == "__main__":
    main(run)
