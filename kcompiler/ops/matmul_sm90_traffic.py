"""The arithmetic of a std.matmul_sm90 launch (kcompiler.ops.matmul_sm90_tiles' configurations): tiles,
work units, waves over the multiprocessors, bytes read through L2 (per block and in all), bytes from DRAM,
and the lower bound on time those give on an H100; and :func:`choose_by_traffic`, a tile and split-K
choice that minimises that bound (a variant of :func:`kcompiler.ops.matmul_sm90_tiles.choose` /
``choose_split``, not the default: benchmarks/bench_matmul.py --variants traffic).

The model, for an M x K by K x N product of ``e``-byte elements with tiles of BM x BN, SPLIT_K shares
of the K loop and clusters of CLUSTER_M blocks along M sharing the B tile (TMA multicast):

- units = ceil(M / BM) * ceil(N / BN) * SPLIT_K; blocks = min(units, SMs) (clusters: whole ones); a
  block runs ceil(units / blocks) units (the waves);
- a unit reads (BM' + BN / CLUSTER_M) * K' * e bytes through L2, BM' = min(BM, M) (TMA fetches no
  row past M: it zero-fills them) and K' = ceil(K / SPLIT_K); split-K adds the f32 partials:
  BM' * BN * 4 written by each share and read back by the last (SPLIT_K of them);
- DRAM: A once, B once per group of GROUP_M * CLUSTER_M rows of tiles (the raster: the blocks running
  together cover such a group's rows, column by column; a later group finds B's columns evicted), C
  once;
- the tail split (TAIL_SPLIT, :func:`kcompiler.ops.matmul_sm90_tiles.tail_shares`): the whole tiles in full
  rounds, then one share (K / shares) of a tail tile a block, with its f32 partial written and the
  tile's partials read back (charged to every block); waves is then fractional (3.5 for 448 tiles of
  128 x 256 over 132 blocks in 2 shares);
- the bound is the largest of: a block's L2 bytes at :data:`L2_PER_BLOCK` (its units one after the
  other), all L2 bytes at :data:`L2_TOTAL`, the DRAM bytes at :data:`DRAM`, a block's wgmma work (BM x
  BN x K' a unit, padded rows included) at :data:`PEAK` / SMs.

The rates are fitted to the H100 measurements of benchmarks/RESULTS.md (2026-11-23 ``--configs``: a
block alone reads 55-63 GB/s from L2 with tiles of 128 rows at M = 128; the large products move 7.8-8.3
TB/s through L2 at 700-730 TFLOP/s with 128 x 256 tiles; 3.0 TB/s is the device-to-device copy). It is
a bound to rank choices by, not a prediction: pipeline fill, the epilogue and launch latency are not in
it.
"""
from __future__ import annotations

from typing import Any

from .matmul_sm90_tiles import BK, CONFIGS, choose, choose_split, small_m_rows, tail_shares, tile_m

#: Bytes a second one block reads through L2 (H100; module docstring).
L2_PER_BLOCK = 60e9
#: Bytes a second all blocks read through L2 together (H100).
L2_TOTAL = 8.0e12
#: Bytes a second from DRAM (H100 80GB HBM3, a copy's rate).
DRAM = 3.0e12
#: Dense wgmma FLOP/s sustained over the whole device (H100, the best measured products), by element
#: size in bytes: 2 (bf16, f16), 1 (FP8).
PEAK = {2: 800e12, 1: 1450e12}


def traffic(M: int, N: int, K: int, e: int, cfg: dict, split_k: int = 1, sms: int = 132) -> dict[str, Any]:
    """The model's arithmetic (module docstring) for configuration ``cfg`` (a dict of
    kcompiler.ops.matmul_sm90_tiles.CONFIGS: BN, CONSUMERS, GROUP_M, and PINGPONG/WG_M, CLUSTER_M where set)
    and ``split_k`` shares on ``sms`` multiprocessors, elements of ``e`` bytes (2: bf16 / f16, 1: FP8),
    C of 16-bit elements. Returns a dict: tiles, units, blocks, waves (units a block runs), l2_block
    (bytes one block reads through L2), l2_total, dram (bytes), and the bounds in µs: t_l2_block,
    t_l2_total, t_dram, t_mma and t (their largest). Raises ValueError for sizes under 1."""
    if min(M, N, K, e, split_k, sms) < 1:
        raise ValueError(f"traffic: sizes must be positive, not M={M} N={N} K={K} e={e} split_k={split_k} sms={sms}")
    bm, bn = tile_m(cfg), cfg["BN"]
    cm = cfg.get("CLUSTER_M", 1)
    tiles_m, tiles_n = -(-M // bm), -(-N // bn)
    tiles = tiles_m * tiles_n
    units = tiles * split_k
    if cm > 1:  # whole clusters, each on cm tiles of a column
        units = -(-tiles_m // cm) * cm * tiles_n
        blocks = max(cm, min(units, sms // cm * cm))
    else:
        blocks = min(units, sms)
    waves = -(-units // blocks)
    rows = min(bm, M)
    ks = -(-K // split_k)
    partial = rows * bn * 4 if split_k > 1 else 0
    unit_l2 = (rows + bn / cm) * ks * e + partial
    # the last share of a tile also reads the other shares' partials: charge it to every block's last unit
    l2_block = waves * unit_l2 + (split_k - 1) * partial
    l2_total = units * unit_l2 + tiles * (split_k - 1) * partial
    kwork = waves * ks  # the k-elements a block's units multiply
    tail, shares = tail_shares(tiles, blocks, cfg.get("TAIL_SPLIT", 0)) if split_k == 1 and cm == 1 else (0, 1)
    if shares > 1:  # the tail split: whole tiles in full rounds, then one share of a tail tile a block
        full = (tiles - tail) // blocks
        share_l2 = (rows + bn) * -(-K // shares) * e + rows * bn * 4  # its operands and its partial written
        units, waves = tiles + tail * (shares - 1), full + 1 / shares
        l2_block = full * (rows + bn) * K * e + share_l2 + shares * rows * bn * 4  # + the partials read back
        l2_total = (tiles - tail) * (rows + bn) * K * e + tail * shares * (share_l2 + rows * bn * 4)
        kwork = full * K + -(-K // shares)
    group_rows = max(1, cfg.get("GROUP_M", 8)) * cm
    dram = M * K * e + N * K * e * -(-tiles_m // group_rows) + M * N * 2
    mma = 2 * bm * bn * kwork
    t = dict(t_l2_block=l2_block / L2_PER_BLOCK * 1e6, t_l2_total=l2_total / L2_TOTAL * 1e6,
             t_dram=dram / DRAM * 1e6, t_mma=mma / (PEAK[2 if e >= 2 else 1] / sms) * 1e6)
    return dict(tiles=tiles, units=units, blocks=blocks, waves=waves, l2_block=l2_block, l2_total=l2_total,
                dram=dram, **t, t=max(t.values()))


def describe(row: dict[str, Any]) -> str:
    """One line of :func:`traffic`'s dict: units, blocks, waves, MB through L2 (a block's, all), MB
    from DRAM, the bounds in µs."""
    return (f"{row['units']} units / {row['blocks']} blocks = {row['waves']} waves; L2 {row['l2_block'] / 1e6:.2f} MB "
            f"a block, {row['l2_total'] / 1e6:.0f} MB in all; DRAM {row['dram'] / 1e6:.0f} MB; bound "
            f"{row['t']:.1f} µs (L2 block {row['t_l2_block']:.1f}, L2 {row['t_l2_total']:.1f}, DRAM "
            f"{row['t_dram']:.1f}, wgmma {row['t_mma']:.1f})")


#: The configurations and split-K factors :func:`choose_by_traffic` weighs (names of
#: kcompiler.ops.matmul_sm90_tiles.CONFIGS).
TRAFFIC_CHOICES = ("tma128x256h", "128x128", "128x112", "64x128", "64x64")
TRAFFIC_SPLITS = (1, 2, 3, 4)


def choose_by_traffic(M: int, N: int, K: int, e: int, sms: int = 132, bk: int | None = None,
                      margin: float = 0.02) -> tuple[dict, int]:
    """The (configuration, split-K factor) of :data:`TRAFFIC_CHOICES` x :data:`TRAFFIC_SPLITS` with the
    least :func:`traffic` bound for an M x K by K x N product of ``e``-byte elements on ``sms``
    multiprocessors; a share keeps 8 k-steps of ``bk`` at least (default: a 128-byte row, 128 / e).
    kcompiler.ops.matmul_sm90's default (choose, choose_split) is kept unless the best bound is lower
    than its own by more than ``margin`` (a fraction); among the others ties go to fewer shares, then
    to the earlier configuration. Returns a copy of the configuration."""
    bk = bk or 128 // e
    best = None
    for name in TRAFFIC_CHOICES:
        for s in TRAFFIC_SPLITS:
            if s > 1 and -(-K // bk) < 8 * s:
                continue
            t = traffic(M, N, K, e, CONFIGS[name], s, sms)["t"]
            if best is None or t < best[0] * 0.999:
                best = (t, CONFIGS[name], s)
    cfg = choose(M, N, K, sms)
    split = choose_split(M, N, K, cfg, bk, sms)
    if traffic(M, N, K, e, cfg, split, sms)["t"] * (1 - margin) <= best[0]:
        return cfg, split
    return dict(best[1]), best[2]


def plan(M: int, N: int, K: int, dtype: str = "bf16", sms: int = 132, b_kmajor: bool = True) -> dict[str, Any]:
    """What kcompiler.ops.matmul_sm90.prepare's defaults do with an M x K by K x N product of ``dtype``
    ('bf16', 'f16', 'f8e4m3', 'f8e5m2'; B as an (N, K) weight, or (K, N) with ``b_kmajor`` False) on
    ``sms`` multiprocessors, for the plain product (no block epilogue or gated fusion, which choose BN
    a multiple of 32): ``name`` (of CONFIGS), ``config`` (with small_m_rows' AROWS and STAGES where they
    apply), ``split_k``, ``traffic`` (:func:`traffic`'s dict for them) and ``why`` (the lines of choose
    and choose_split: each configuration weighed, the rule that settled it). ValueError for another
    dtype or a size below 1."""
    if dtype not in BK:
        raise ValueError(f"matmul_sm90 plan: dtype {dtype!r} is none of {', '.join(BK)}")
    if min(M, N, K, sms) < 1:
        raise ValueError(f"matmul_sm90 plan: M, N, K and sms must be at least 1, not {M}, {N}, {K}, {sms}")
    why: list[str] = []
    cfg = choose(M, N, K, sms, b_kmajor, why=why)
    name = next(n for n, c in CONFIGS.items() if c == cfg)
    rows = small_m_rows(M, cfg)
    if rows:
        why.append(f"M <= 56 on one consumer's 64-row tiles: a stage holds {rows['AROWS']} rows of A, "
                   f"{rows['STAGES']} stages (small_m_rows)")
    cfg.update(rows)
    split = 1 if cfg.get("TAIL_SPLIT") else choose_split(M, N, K, cfg, BK[dtype], sms, why=why)
    return dict(name=name, config=cfg, split_k=split, why=why,
                traffic=traffic(M, N, K, 1 if dtype.startswith("f8") else 2, cfg, split, sms))


def explain(M: int, N: int, K: int, dtype: str = "bf16", sms: int = 132, b_kmajor: bool = True) -> str:
    """:func:`plan` as text: the configuration, its tile and stages, the split-K factor, the lines of
    the rules that chose them, and the traffic model's bound (:func:`describe`; rates fitted to the
    H100, a bound to rank choices by, not a prediction). E.g.
    ``print(explain(16, 4096, 4096))`` for a decode-sized product of bf16 on an H100's 132 SMs.
    ValueError as :func:`plan`."""
    p = plan(M, N, K, dtype, sms, b_kmajor)
    c = p["config"]
    extra = "".join(f", {k} {c[k]}" for k in ("AROWS", "CLUSTER_M", "EPI_TMA", "TAIL_SPLIT") if c.get(k))
    head = (f"{M} x {N} x {K} {dtype} on {sms} multiprocessors: {p['name']} (tiles of {tile_m(c)} x {c['BN']}, "
            f"{c['CONSUMERS']} consumer warpgroup{'s' if c['CONSUMERS'] > 1 else ''}, {c['STAGES']} stages{extra}), "
            f"split-K {p['split_k']}")
    model = "  traffic model (the H100's rates): " + describe(p["traffic"])
    return "\n".join([head, *("  " + line for line in p["why"]), model])


__all__ = ["DRAM", "L2_PER_BLOCK", "L2_TOTAL", "PEAK", "TRAFFIC_CHOICES", "TRAFFIC_SPLITS", "choose_by_traffic",
           "describe", "explain", "plan", "traffic"]
