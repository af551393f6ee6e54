"""torch_op: kernels of one's own (examples/vadd.kc, examples/saxpy.kc) as torch operators with
kc.torch_op, called eagerly and inside torch.compile(fullgraph=True), checked against torch."""
import torch

from _driver import compile_example, main

import kcompiler as kc


def make_ops(target: str):
    """vadd (a new output) and saxpy (y written in place) as torch operators for ``target``."""
    vadd_mod, saxpy_mod = compile_example("vadd", target), compile_example("saxpy", target)
    suffix = target.replace("-", "_")  # one operator name a target: a process may run both
    vadd = kc.torch_op(
        vadd_mod.vadd, name=f"kc_examples::vadd_{suffix}",
        outputs=lambda a, b: [(a.shape, a.dtype)],               # out: like a (also the fake impl)
        grid=lambda a, b: ((a.numel() + 255) // 256,), block=256,
        args=lambda a, b, out: (a, b, out, a.numel()))           # the kernel's arguments in order
    saxpy = kc.torch_op(
        saxpy_mod.saxpy, name=f"kc_examples::saxpy_{suffix}",
        outputs=lambda x, y, alpha=1.0: [],                      # alpha: a float input (its default's type)
        grid=lambda x, y, alpha: ((x.numel() + 1023) // 1024,), block=256,
        args=lambda x, y, alpha: (x, y, alpha, x.numel()),
        params=lambda x, y, alpha: {"T": {torch.float32: "f32", torch.bfloat16: "bf16"}[x.dtype], "VEC": 4},
        mutates=("y",))
    return vadd, saxpy


def run(target: str, n: int = 100_003) -> str:
    device = "cpu" if target == "cpu" or not torch.cuda.is_available() else "cuda"
    if target == "auto":
        target = "cuda" if device == "cuda" else "cpu"
    vadd, saxpy = make_ops(target)
    a, b = torch.randn(n, device=device), torch.randn(n, device=device)
    torch.testing.assert_close(vadd(a, b), a + b)
    y = b.clone()
    saxpy(a, y, 2.0)
    torch.testing.assert_close(y, 2.0 * a + b)

    def f(a, b, y):  # both operators in one graph: no graph break
        saxpy(a, y, 0.5)
        return vadd(a, y)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    y1, y2 = b.clone(), b.clone()
    torch.testing.assert_close(compiled(a, b, y1), f(a, b, y2))
    torch.testing.assert_close(y1, y2)
    return f"torch_op ok on {target}: n={n}, eager and torch.compile(fullgraph=True) equal to torch"


if __name__ == "__main__":
    main(run)
