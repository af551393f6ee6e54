"""kcompiler.ops.sample against torch's sort-based top-k/top-p sampling and FlashInfer (where it
imports) on a CUDA GPU, in one run: batch x vocabulary, bf16 and f32 logits, top-k = 50 and top-p =
0.9 with temperature 0.8 (and a plain-temperature row: no top-k/top-p). Times in µs by
triton.testing.do_bench (median), ratios torch / kcompiler and FlashInfer / kcompiler.

    python benchmarks/bench_sampling.py [--batches 1,16,64,256] [--vocabs 32000,128256,256000]

torch's reference (what vLLM's fallback does): logits / T, torch.sort descending, softmax, cumsum,
top-k and top-p masks, torch.multinomial. FlashInfer: flashinfer.sampling.top_k_top_p_sampling_from_logits
(its sorting-free kernel), when the package imports.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from kcompiler.ops import sampling as S  # noqa: E402

try:
    import flashinfer.sampling as fis  # noqa: E402
except Exception:  # noqa: BLE001 - not installed: no column
    fis = None


def torch_sample(logits, temp, k, p):
    """Sort-based top-k + top-p sampling: the torch reference."""
    x = logits.float() / temp
    sx, idx = torch.sort(x, dim=-1, descending=True)
    if k > 0:
        sx[:, k:] = float("-inf")
    probs = sx.softmax(-1)
    if p < 1.0:
        cum = probs.cumsum(-1)
        mask = cum - probs > p
        probs = probs.masked_fill(mask, 0.0)
    choice = torch.multinomial(probs, 1)
    return idx.gather(-1, choice).squeeze(-1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--vocabs", default="32000,128256,256000")
    args = ap.parse_args()
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}; flashinfer: {'yes' if fis else 'not importable'}")
    print(f"{'dtype':>5} {'mode':>9} {'batch':>5} {'vocab':>7} {'kc µs':>9} {'torch µs':>9} {'x torch':>8}"
          f" {'fi µs':>8} {'fi/kc':>6}")
    for dtype in (torch.bfloat16, torch.float32):
        for mode in ("topk+topp", "temp"):
            k, p = (50, 0.9) if mode == "topk+topp" else (0, 1.0)
            for v in map(int, args.vocabs.split(",")):
                for b in map(int, args.batches.split(",")):
                    logits = (torch.randn(b, v, device=dev) * 3).to(dtype)
                    kc_us = 1e3 * do_bench(lambda: S.sample(logits, temperature=0.8, top_k=k, top_p=p, seed=1,
                                                            offset=2), return_mode="median")
                    t_us = 1e3 * do_bench(lambda: torch_sample(logits, 0.8, k, p), return_mode="median")
                    fi = ""
                    if fis is not None:
                        try:
                            f_us = 1e3 * do_bench(lambda: fis.top_k_top_p_sampling_from_logits(
                                logits / 0.8, k if k > 0 else v, p), return_mode="median")
                            fi = f"{f_us:8.1f} {f_us / kc_us:6.2f}"
                        except Exception as e:  # noqa: BLE001 - report, go on
                            fi = f"fi error: {type(e).__name__}"
                    print(f"{str(dtype)[6:]:>5} {mode:>9} {b:5d} {v:7d} {kc_us:9.1f} {t_us:9.1f} {t_us / kc_us:8.2f}"
                          f" {fi}", flush=True)


if __name__ == "__main__":
    main()
