"""kcompiler.ops.sample against torch's sort-based top-k/top-p sampling and FlashInfer (where it
imports) on a CUDA GPU, in one run: batch x vocabulary, bf16 and f32 logits, top-k = 50 and top-p =
0.9 with temperature 0.8 (and a plain-temperature row: no top-k/top-p). Times in µs by
triton.testing.do_bench (median), ratios torch / kcompiler and FlashInfer / kcompiler.

    python benchmarks/bench_sampling.py [--batches 1,16,256] [--vocabs 32000,128256,256000]
                                        [--unroll 2] [--dtypes bf16,f32] [--split 4096,16384]

Columns (each one configuration of ops.sampling's tables, swapped for the call):
'uN' / 'scalar' = one block a row with the dtype's VEC and N runs loaded a loop iteration (scalar: VEC
= U = 1), candidate lists and PRUNE on; 'old' = the kernels before candidate lists and PRUNE (one
block a row, the default loads: the host's default until 2026-11-27); 'prune' = PRUNE without lists;
'sC' = std.sampling's sample_split (each row over ceil(vocab / C) blocks) with lists and PRUNE; 'dflt'
= the host's choice (SAMPLING_SPLIT's rule: the split kernel at batch <= 16 and vocab >= 64K for
temperature-only calls).
'x best', 'x old', 'x dflt': torch's time over the best column, 'old' and 'dflt'.
About three minutes on an H100 with the defaults.

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


UNSPLIT = {"max_rows": 0}
FORCE_SPLIT = {"max_rows": 1 << 30, "min_vocab": 0}


def variants(spec, dtype_name, splits):
    """The columns for a dtype: (label, config) with config the ops.sampling tables swapped for the call
    (LOADS: (VEC, U); SPLIT: SAMPLING_SPLIT entries; LISTS: SAMPLING_LISTS; PRUNE: SAMPLING_PRUNE).
    'scalar' / 'uN': the loads, unsplit, lists and PRUNE on; 'old': the kernels before lists and PRUNE
    (the default loads, unsplit: the 2026-11-27 default); 'prune': PRUNE without lists; 'sC': the split
    kernel at chunk C (lists and PRUNE on); 'dflt': the host's own choice (SAMPLING_SPLIT's rule)."""
    default = S.SAMPLING_LOADS[dtype_name]
    out = []
    for u in filter(None, spec.split(",")):
        vu = (1, 1) if u == "scalar" else (default[0], int(u))
        out.append(("scalar" if u == "scalar" else f"u{u}", dict(LOADS=vu, SPLIT=UNSPLIT)))
    out.append(("old", dict(SPLIT=UNSPLIT, LISTS=0, PRUNE=False)))
    out.append(("prune", dict(SPLIT=UNSPLIT, LISTS=0)))
    out += [(f"s{c}", dict(SPLIT=dict(FORCE_SPLIT, chunk=c))) for c in splits]
    out.append(("dflt", {}))
    return out


def timed(name, cfg, logits, k, p):
    """µs a call of ops.sample with ``cfg``'s tables swapped in (restored after); inf where a forced
    split does not apply (fewer than 2 chunks)."""
    saved = (dict(S.SAMPLING_LOADS), dict(S.SAMPLING_SPLIT), S.SAMPLING_LISTS, S.SAMPLING_PRUNE)
    try:
        if "LOADS" in cfg:
            S.SAMPLING_LOADS[name] = cfg["LOADS"]
        S.SAMPLING_SPLIT.update(cfg.get("SPLIT", {}))
        S.SAMPLING_LISTS = cfg.get("LISTS", S.SAMPLING_LISTS)
        S.SAMPLING_PRUNE = cfg.get("PRUNE", S.SAMPLING_PRUNE)
        b, v = logits.shape
        if cfg.get("SPLIT", {}).get("max_rows", 0) > b and S.split_chunks(b, v) == 1:
            return float("inf")
        return 1e3 * do_bench(lambda: S.sample(logits, temperature=0.8, top_k=k, top_p=p, seed=1, offset=2),
                              warmup=10, rep=50, return_mode="median")
    finally:
        S.SAMPLING_LOADS.clear()
        S.SAMPLING_LOADS.update(saved[0])
        S.SAMPLING_SPLIT.clear()
        S.SAMPLING_SPLIT.update(saved[1])
        S.SAMPLING_LISTS, S.SAMPLING_PRUNE = saved[2], saved[3]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,16,256")
    ap.add_argument("--vocabs", default="32000,128256,256000")
    ap.add_argument("--unroll", default="2",
                    help="loads to time (unsplit, lists and PRUNE on): 'scalar' (VEC = U = 1) and U values with the "
                         "dtype's VEC, e.g. scalar,1,2,4; '' for none")
    ap.add_argument("--dtypes", default="bf16,f32")
    ap.add_argument("--split", default="4096,16384",
                    help="chunk lengths to time sample_split at (the default loads, every batch); '' for none")
    args = ap.parse_args()
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}; flashinfer: {'yes' if fis else 'not importable'}; "
          f"SAMPLING_LOADS (VEC, U) {S.SAMPLING_LOADS}; SAMPLING_SPLIT {S.SAMPLING_SPLIT}; "
          f"SAMPLING_LISTS {S.SAMPLING_LISTS}; SAMPLING_PRUNE {S.SAMPLING_PRUNE}")
    tdt = {"bf16": torch.bfloat16, "f32": torch.float32}
    splits = [int(c) for c in args.split.split(",") if c]
    for name in args.dtypes.split(","):
        vs = variants(args.unroll, name, splits)
        print(f"\n{name}: µs a call (median, do_bench); x = torch / the kc column; 'dflt' = the host's choice")
        print(f"{'mode':>9} {'batch':>5} {'vocab':>7} " + " ".join(f"{lab:>8}" for lab, _ in vs)
              + f" {'torch':>8} {'x best':>7} {'x old':>7} {'x dflt':>7} {'fi':>8}")
        for mode in ("topk+topp", "temp"):
            k, p = (50, 0.9) if mode == "topk+topp" else (0, 1.0)
            for v in map(int, args.vocabs.split(",")):
                for b in map(int, args.batches.split(",")):
                    logits = (torch.randn(b, v, device=dev) * 3).to(tdt[name])
                    times = [timed(name, cfg, logits, k, p) for _, cfg in vs]
                    t_us = 1e3 * do_bench(lambda: torch_sample(logits, 0.8, k, p), warmup=10, rep=50, return_mode="median")
                    col = {lab: t for (lab, _), t in zip(vs, times)}
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
                          + f" {t_us:8.1f} {t_us / min(times):7.2f} {t_us / col['old']:7.2f} {t_us / col['dflt']:7.2f}"
                          + f" {fi}", flush=True)


if __name__ == "__main__":
    main()
