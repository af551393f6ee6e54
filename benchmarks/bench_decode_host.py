"""Host time of one ops.paged_decode / ops.mla_decode call with the kernel launches stubbed: no GPU needed.

What it times is the Python side of a decode call (the checks, the split and tile choices, the
scale and scratch arrays, building the launch arguments) at bench_attention.py's decode shapes (B 32,
Hq 32, KV heads 32 / 8 / 4, D 128, 8192 keys in pages of 16 or 64; MLA: 16 heads, latent 512 + 64),
with ``Launch.__call__`` (kcompiler.runtime.module) replaced by a no-op, so neither the kernel nor
the driver runs: the launches' own host cost (benchmarks/bench_launch_host.py, bench_launch.py) comes
on top, two or three a call (the decode, merge_states after a split). The arrays are numpy ones on
the CPU target (the cache holds a few pages; the kernels would read the block table's entries) and,
where torch is installed, torch CPU tensors (torch's allocations instead of numpy's).

    PYTHONPATH=$PWD python benchmarks/bench_decode_host.py [--rounds 30] [--inner 200]

Prints µs per call (the best of ``rounds`` rounds of ``inner`` calls), with ``max_seq_len`` given and
without it.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from harness import print_host_times, stub_launches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)  # after PYTHONPATH: another checkout given there is measured

import ml_dtypes  # noqa: E402

from kcompiler import ops  # noqa: E402

B, H, D, S = 32, 32, 128, 8192


def cases(lib: str):
    """(name, call) pairs: paged decode MHA / GQA 4:1 / GQA 8:1 / FP8 at pages 16 and 64, MLA H16."""
    rng = np.random.default_rng(0)
    bf, f8 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn

    def arr(x):
        if lib == "numpy":
            return x
        import torch
        if x.dtype == bf:
            return torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16)
        if x.dtype == f8:
            return torch.from_numpy(x.view(np.uint8)).view(torch.float8_e4m3fn)
        return torch.from_numpy(x)
    out = []
    lens = arr(np.full(B, S, np.int32))
    for kind, HK, dt in (("MHA", 32, bf), ("GQA 4:1", 8, bf), ("GQA 8:1", 4, bf), ("FP8", 32, f8)):
        for page in (16, 64):
            kc = arr(rng.standard_normal((64, page, HK, D)).astype(np.float32).astype(dt))
            vc = arr(rng.standard_normal((64, page, HK, D)).astype(np.float32).astype(dt))
            table = arr(rng.integers(0, 64, (B, S // page)).astype(np.int32))
            q = arr(rng.standard_normal((B, H, D)).astype(np.float32).astype(bf))
            sc = dict(k_scale=arr(np.full(HK, 0.1, np.float32)), v_scale=arr(np.full(HK, 0.2, np.float32))) \
                if dt == f8 else {}
            for given in (True, False):
                extra = dict(max_seq_len=S) if given else {}
                out.append((f"{kind} page {page}{' max_seq_len' if given else ''}",
                            lambda q=q, kc=kc, vc=vc, table=table, sc=sc, extra=extra:
                            ops.paged_decode(q, kc, vc, table, lens, target="cpu", **sc, **extra)))
    ckv = arr(rng.standard_normal((64, 64, 512)).astype(np.float32).astype(bf))
    kpe = arr(rng.standard_normal((64, 64, 64)).astype(np.float32).astype(bf))
    table = arr(rng.integers(0, 64, (B, S // 64)).astype(np.int32))
    qn = arr(rng.standard_normal((B, 16, 512)).astype(np.float32).astype(bf))
    qp = arr(rng.standard_normal((B, 16, 64)).astype(np.float32).astype(bf))
    for given in (True, False):
        extra = dict(max_seq_len=S) if given else {}
        out.append((f"MLA H16 page 64{' max_seq_len' if given else ''}",
                    lambda extra=extra: ops.mla_decode(qn, qp, ckv, kpe, table, lens, scale=0.07, target="cpu",
                                                       **extra)))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--inner", type=int, default=200)
    args = p.parse_args()
    launches = stub_launches()
    libs = ["numpy"]
    try:
        import torch  # noqa: F401
        libs.append("torch")
    except ImportError:
        pass
    for lib in libs:
        print(f"{lib} arrays, CPU target, launches stubbed: µs a call (launches a call)")
        print_host_times(cases(lib), launches, args.rounds, args.inner, 28)


if __name__ == "__main__":
    main()
