"""pipeline: three kernels on device arrays, with no torch or CuPy: the data is copied to the device
once (kc.to_device), stays there through affine -> relu -> block_sum, and comes back once
(copy_to_host), checked against numpy. Then, when torch is importable, the result goes to torch by
DLPack with no copy: the tensor's data pointer is the device array's."""
import numpy as np

from _driver import check_close, compile_example, main

import kcompiler as kc

BLOCK = 256


def run(target: str, n: int = 100_003) -> str:
    rng = np.random.default_rng()
    m = compile_example("pipeline", target)
    x_host = rng.standard_normal(n).astype(np.float32)
    a, b = np.float32(rng.uniform(0.5, 2)), np.float32(rng.uniform(-0.5, 0.5))
    blocks = (n + BLOCK - 1) // BLOCK

    x = kc.to_device(x_host, device=m.device)                 # one copy in
    y = kc.device_array(n, np.float32, device=m.device)
    sums = kc.device_array(blocks, np.float32, device=m.device)
    m.affine[blocks, BLOCK](x, y, a, b, n)                     # no copies between the kernels
    m.relu[blocks, BLOCK](y, n)
    m.block_sum[blocks, BLOCK](y, sums, n, BLOCK=BLOCK)
    got = sums.copy_to_host()                                  # one copy out

    want_y = np.maximum(a * x_host + b, np.float32(0))
    want = np.add.reduceat(want_y.astype(np.float64), np.arange(0, n, BLOCK))
    err = check_close(got, want, 1e-5, "pipeline block sums")
    check_close(np.asarray(y), want_y, 1e-6, "pipeline relu(affine(x))")
    line = f"pipeline ok on {target}: {blocks} block sums, error {err:.2e}"

    try:
        import torch
    except ImportError:
        return line + "; torch not installed: DLPack hand-off skipped"
    t = torch.from_dlpack(sums)                                # no copy
    assert t.data_ptr() == sums.ptr, "torch.from_dlpack copied the array"
    assert torch.equal(t.cpu(), torch.from_numpy(got)), "the tensor's values differ from the array's"
    return line + f"; torch.from_dlpack shares its memory ({t.device})"


if __name__ == "__main__":
    main(run)
