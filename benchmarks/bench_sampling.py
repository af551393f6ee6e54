"""kcompiler.ops.sample against torch's sort-based top-k/top-p sampling and FlashInfer (where it
imports) on a CUDA GPU, in one run: batch x vocabulary, bf16 and f32 logits, top-k = 50 and top-p =
0.9 with temperature 0.8 (and a plain-temperature row: no top-k/top-p). Times in µs by
triton.testing.do_bench (median), ratios torch / kcompiler and FlashInfer / kcompiler.

    python benchmarks/bench_sampling.py [--batches 1,16,256] [--vocabs 32000,128256,256000]
                                        [--unroll scalar,1,2,4] [--dtypes bf16,f32] [--split 4096,16384]

Each kcompiler column is one choice of std.sampling's loads (ops.sampling.SAMPLING_LOADS swapped for
the call): 'scalar' = VEC = U = 1 (the kernels' first version, a 4- or 2-byte load an element),
'uN' = the dtype's VEC (16-byte runs) with N runs loaded a loop iteration; '*' marks the default;
'sC' = std.sampling's sample_split (each row over ceil(vocab / C) blocks, ops.sampling.SAMPLING_SPLIT
swapped for the call) with the default loads.
About two minutes on an H100 with the defaults.

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


def variants(spec, dtype_name):
    """The (label, (VEC, U)) loads to time for a dtype: 'scalar' is the kernels' first version (VEC = U
    = 1), 'vN' VEC-element runs with U = N; the host's default is marked with '*'."""
    default = S.SAMPLING_LOADS[dtype_name]
    out = []
    for u in spec.split(","):
        vu = (1, 1) if u == "scalar" else (default[0], int(u))
        out.append((("scalar" if u == "scalar" else f"u{u}") + ("*" if vu == default else ""), vu))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16,256")
    ap.add_argument("--vocabs", default="32000,128256,256000")
    ap.add_argument("--unroll", default="scalar,1,2,4",
                    help="loads to time: 'scalar' (VEC = U = 1, the old path) and U values with the dtype's VEC")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--split", default="4096,16384",
                    help="chunk lengths to time sample_split at (the default loads, every batch); '' for none")
    args = ap.parse_args()
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}; flashinfer: {'yes' if fis else 'not importable'}; "
          f"SAMPLING_LOADS (VEC, U) default {S.SAMPLING_LOADS}")
    tdt = {"bf16": torch.bfloat16, "f32": torch.float32}
    saved = dict(S.SAMPLING_LOADS)
    saved_split = dict(S.SAMPLING_SPLIT)
    splits = [int(c) for c in args.split.split(",") if c]
    for name in args.dtypes.split(","):
        vs = variants(args.unroll, name)
        print(f"\n{name}: µs a call (median, do_bench); x = torch / best kc variant; * = the host's default")
        print(f"{'mode':>9} {'batch':>5} {'vocab':>7} " + " ".join(f"{lab:>8}" for lab, _ in vs)
              + "".join(f" {'s' + str(c):>8}" for c in splits)
              + f" {'torch':>8} {'x best':>7} {'x dflt':>7} {'fi':>8}")
        for mode in ("topk+topp", "temp"):
            k, p = (50, 0.9) if mode == "topk+topp" else (0, 1.0)
            for v in map(int, args.vocabs.split(",")):
                for b in map(int, args.batches.split(",")):
                    logits = (torch.randn(b, v, device=dev) * 3).to(tdt[name])
                    times = []
                    for _, vu in vs:
                        S.SAMPLING_LOADS[name] = vu
                        times.append(1e3 * do_bench(lambda: S.sample(logits, temperature=0.8, top_k=k, top_p=p, seed=1,
                                                                     offset=2), warmup=10, rep=50, return_mode="median"))
                    S.SAMPLING_LOADS.update(saved)
                    for c in splits:       # the split kernel where the vocabulary holds 2 chunks, else '-'
                        S.SAMPLING_SPLIT.update(max_rows=1 << 30, chunk=c)
                        times.append(1e3 * do_bench(lambda: S.sample(logits, temperature=0.8, top_k=k, top_p=p, seed=1,
                                                                     offset=2), warmup=10, rep=50, return_mode="median")
                                     if S.split_chunks(b, v) > 1 else float("inf"))
                        S.SAMPLING_SPLIT.update(saved_split)
                    t_us = 1e3 * do_bench(lambda: torch_sample(logits, 0.8, k, p), warmup=10, rep=50, return_mode="median")
                    dflt = [t for (lab, _), t in zip(vs, times) if lab.endswith("*")]
                    fi = ""
                    if fis is not None:
                        try:
                            f_us = 1e3 * do_bench(lambda: fis.top_k_top_p_sampling_from_logits(
                                logits / 0.8, k if k > 0 else v, p), warmup=10, rep=50, return_mode="median")
                            fi = f"{f_us:8.1f}"
                        except Exception as e:  # noqa: BLE001 - report, go on
                            fi = f"fi error: {type(e).__name__}"
                    print(f"{mode:>9} {b:5d} {v:7d} " + " ".join(f"{t:8.1f}" if t < float("inf") else f"{'-':>8}"
                                                                  for t in times)
                          + f" {t_us:8.1f} {t_us / min(times):7.2f} "
                          + (f"{t_us / dflt[0]:7.2f}" if dflt else f"{'-':>7}") + f" {fi}", flush=True)


if __name__ == "__main__":
    main()
