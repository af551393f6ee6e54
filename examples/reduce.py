"""block_sum: per-block sums with shared memory, barriers and warp shuffles, checked against numpy
(float64 sums of the same slices)."""
import numpy as np

from _driver import check_close, compile_example, main


def run(target: str, n: int = 300_007, block: int = 256, items: int = 4) -> str:
    rng = np.random.default_rng()
    x = rng.standard_normal(n, dtype=np.float32)
    per_block = block * items
    blocks = (n + per_block - 1) // per_block
    out = np.full(blocks, np.nan, np.float32)
    m = compile_example("reduce", target)
    m.block_sum[blocks, block](x, out, n, ITEMS=items)
    pad = np.zeros(blocks * per_block, np.float64)
    pad[:n] = x
    want = pad.reshape(blocks, per_block).sum(axis=1)
    err = check_close(out, want, 1e-5, "block_sum")
    return f"block_sum ok on {target}: n={n}, {blocks} blocks of {block}, relative error {err:.2e}"


if __name__ == "__main__":
    main(run)
