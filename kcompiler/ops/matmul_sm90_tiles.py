"""The tile and schedule choice of std.matmul's Hopper path (stdlib/matmul_sm90.kc), apart from its
launch (kcompiler.ops.matmul_sm90, which re-exports every name here): the configurations
(:data:`CONFIGS`), the ones :func:`choose` picks from and the rules it follows (:data:`CHOICES`,
:data:`ONE_WAVE`, :data:`CHOICE_MAX_M`, :data:`WAVE_ALTERNATIVES`), split-K where tiles are too few
(:func:`choose_split`), the tail split's schedule (:func:`tail_shares`), and the block's rows and
shared memory (:func:`tile_m`, :func:`shared_bytes`, :func:`small_m_rows`). Pure arithmetic on shapes:
no arrays, no compiling; ``choose(..., why=[])`` says why it took what it took.
"""
from __future__ import annotations

from ..runtime.device import Device

#: Tile configurations (the kernel's compile-time parameters besides T, OUT, BK), largest first:
#: BM = 64 * CONSUMERS rows by BN columns (:func:`tile_m`); STAGES fill about 192 KiB of shared memory.
#: The "pp" ones are ping-pong (PINGPONG: each of the 2 consumer warpgroups takes whole tiles of BM = 64
#: * WG_M rows, every other one of the block's, so that one's epilogue overlaps the other's
#: mainloop); "c2" ones run in clusters of 2 blocks along M (CLUSTER_M: the blocks of a cluster share
#: the B tile, each loading half of it by TMA multicast; sm_90 only, no split-K). Neither is chosen by
#: :func:`choose` until measured (benchmarks/bench_matmul.py --variants). "tma" ones store C through
#: shared memory and TMA (EPI_TMA: the columns of a consumer's C buffer, 64 rows of 16-bit OUT each;
#: the kernel matmul_sm90_tma), the consumers going back to the next tile's wgmmas while the copy
#: drains: a full 64 x 256 buffer a consumer (64 KiB in all, so 3 stages) or half of it (32 KiB,
#: 4 stages, two copies a tile); kcompiler.ops.matmul_sm90.prepare falls back to the register store
#: where the TMA store does not apply (matmul_sm90.tma_store_applies).
#: :func:`choose` picks among :data:`CHOICES` only.
CONFIGS = {"128x256": dict(BN=256, CONSUMERS=2, STAGES=4, GROUP_M=8),
           "128x128": dict(BN=128, CONSUMERS=2, STAGES=6, GROUP_M=8),
           "64x128": dict(BN=128, CONSUMERS=1, STAGES=8, GROUP_M=4),
           # 12 stages (196 KiB), not 8: H200, 2026-11-28, bench_matmul.py --variants default,64x64/12st --shapes
           # small: M 128 bf16 x 4096 x 4096 0.87 -> 0.98x cuBLAS, x 4096 x 14336 0.88 -> 0.94x; FP8 0.93 -> 1.00x,
           # 0.88 -> 0.92x (cuBLAS runs 64 x 64 tiles in 13 stages there)
           "64x64": dict(BN=64, CONSUMERS=1, STAGES=12, GROUP_M=4),
           # one consumer's 64 rows by 112 / 32 columns: N = 14336 is 128 tiles of 112 (64x128: 112, 20 of
           # 132 multiprocessors idle), N = 4096 128 tiles of 32 (64x64: 64, split along K in 2 shares)
           "64x112": dict(BN=112, CONSUMERS=1, STAGES=10, GROUP_M=4),
           "64x32": dict(BN=32, CONSUMERS=1, STAGES=16, GROUP_M=4),
           "pp64x256": dict(BN=256, CONSUMERS=2, STAGES=5, GROUP_M=16, PINGPONG=True),
           "pp128x128": dict(BN=128, CONSUMERS=2, STAGES=6, GROUP_M=8, PINGPONG=True, WG_M=2),
           "c2x128x256": dict(BN=256, CONSUMERS=2, STAGES=4, GROUP_M=8, CLUSTER_M=2),
           "c2pp128x128": dict(BN=128, CONSUMERS=2, STAGES=6, GROUP_M=8, PINGPONG=True, WG_M=2, CLUSTER_M=2),
           "tma128x256": dict(BN=256, CONSUMERS=2, STAGES=3, GROUP_M=8, EPI_TMA=256),
           "tma128x256h": dict(BN=256, CONSUMERS=2, STAGES=4, GROUP_M=8, EPI_TMA=128),
           # tma128x256h with its consumers meeting on named barriers (EPI_BAR), not mbarriers: level with
           # it on the H100 (benchmarks/bench_matmul.py --variants tma128x256hn; RESULTS.md 2026-11-27)
           "tma128x256hn": dict(BN=256, CONSUMERS=2, STAGES=4, GROUP_M=8, EPI_TMA=128, EPI_BAR=True),
           # tma128x256h in clusters of 2 blocks along M sharing the B tile by multicast: a tile reads
           # (128 + 128) K elements through L2 instead of (128 + 256) K (matmul_sm90_traffic); level with
           # tma128x256h on the H100 over two runs (RESULTS.md 2026-11-27, fifth session)
           "c2tma128x256h": dict(BN=256, CONSUMERS=2, STAGES=4, GROUP_M=8, EPI_TMA=128, CLUSTER_M=2),
           # 128-row tiles of 112 columns (7 stages, 210 KiB): N = 14336 is 128 of them, 0.97 of a wave of
           # 132 at M = 128 (128x128: 112 tiles); for small M, where A's rows are shared by every tile;
           # slower than the default's 64-row tiles there (RESULTS.md 2026-11-27, fifth session)
           "128x112": dict(BN=112, CONSUMERS=2, STAGES=7, GROUP_M=8),
           # the tail split (TAIL_SPLIT, std.matmul_sm90's "the tail split"; :func:`tail_shares`): the partial
           # last wave's tiles cut along K into up to 2 or 4 shares on blocks of their own, reduced through
           # the split-K workspace; whole tiles stored by TMA (t2tma, t4tma) or from registers (t2x128x256).
           # For 1024 x 14336 x 4096 (448 tiles = 3.39 waves of 132): 3.5 tiles' mainloop for the busiest
           # block instead of 4. Measured slower (H100, 2026-11-27, bench_matmul.py --variants ... --in-process,
           # one run): bf16 1024 x 14336 x 4096 629 / 645 TFLOP/s (tail2 / tail4) against the default's 679,
           # FP8 1030 / 1026 against 1242; elsewhere level (RESULTS.md). Opt-in; not among CHOICES.
           "t2tma128x256h": dict(BN=256, CONSUMERS=2, STAGES=4, GROUP_M=8, EPI_TMA=128, TAIL_SPLIT=2),
           "t4tma128x256h": dict(BN=256, CONSUMERS=2, STAGES=4, GROUP_M=8, EPI_TMA=128, TAIL_SPLIT=4),
           "t2x128x256": dict(BN=256, CONSUMERS=2, STAGES=4, GROUP_M=8, TAIL_SPLIT=2),
           # 128 x 224 tiles against wave quantisation: 1024 x 14336 x 4096 is 512 of them, 3.88 waves of 132
           # (448 of 128 x 256: 3.39), so the busiest block's 4 tiles are 224 columns wide, not 256; C stored
           # in parts of 128 and 96 columns, boxes of 32 (store_tile_tma). 4 stages, 208 KiB.
           "tma128x224h": dict(BN=224, CONSUMERS=2, STAGES=4, GROUP_M=8, EPI_TMA=128)}

#: The configurations :func:`choose` uses. Every one of :data:`CONFIGS` but the tail split's has run correctly on
#: an H100 (tests/ops/test_matmul_sm90.py, test_every_config, K-major and N-major B, 2026-11-23; the tail split's
#: GPU tests: tests/ops/test_matmul_sm90_tail.py); 64x64 was the fastest there for M = 16 and 128 with N = K =
#: 4096 (bf16 and FP8; benchmarks/bench_matmul.py --configs, benchmarks/RESULTS.md), 128x128 never the fastest.
#: The large tile is tma128x256h (the 128x256 tile, 4 stages, C stored through half-width shared-memory buffers
#: and TMA): 684-725 TFLOP/s bf16 and 1253 FP8 on the LLM shapes against 595-633 and 1026 for 128x256's register
#: store, 0.89-1.02x cuBLAS (H100, 2026-11-27, bench_matmul.py --variants); where its TMA store does not apply
#: (an f32 C, split-K, a fused or block epilogue), kcompiler.ops.matmul_sm90.prepare stores from registers, which
#: is 128x256. 128x112 where 128 x 256 tiles are too few and 128 x 112 tiles fill one wave (:data:`ONE_WAVE`):
#: 128 x 14336 x 4096 (128 tiles) 0.98x cuBLAS bf16 and 0.94x FP8 against 64x128's 0.93x and 0.92x (H200,
#: 2026-11-28, bench_matmul.py --variants default,128x112 --shapes small, one run; cuBLAS runs 128 x 112 tiles
#: there too, ncu). 64x32 where 64 x 64 tiles are too few and 64 x 32 fill one wave: M <= 64 by N = 4096 (128
#: tiles instead of 64 in 2 shares of K): H200, 2026-11-29, bench_matmul.py --variants --shapes small, two runs:
#: bf16 16 x 4096 x 4096 1.08x cuBLAS against 0.98-1.01x, x 4096 x 14336 1.00-1.01 against 0.99; FP8 16 x 4096 x
#: 14336 1.03 against 1.00-1.01, x 4096 x 4096 0.93-1.02 against 0.98-0.99.
CHOICES = ("tma128x256h", "128x112", "64x128", "64x64", "64x32")

#: Configurations of :data:`CHOICES` that :func:`choose` takes only up to so many rows M: 64x32 where one
#: row of tiles reads A once (M 128 by 2048 by 4096 / 8192: 0.91 / 0.85x cuBLAS bf16, H200, 2026-11-29).
CHOICE_MAX_M = {"64x32": 64}

#: What :func:`choose` takes where no configuration of :data:`CHOICES` fills 80 % of the multiprocessors.
SMALLEST = "64x64"

#: Configurations of :data:`CHOICES` that :func:`choose` takes only where their tiles fit one wave (no
#: more tiles than multiprocessors): past that the busiest block multiplies two 128 x 112 tiles where
#: 64x128's multiplies two of 64 x 128 (512 x 4096: 148 tiles against 256); two 64 x 32 (16 x 8192 x
#: 8192: 0.93-0.94x cuBLAS against 64x64's 0.96-0.98x, H200).
ONE_WAVE = ("128x112", "64x32")

#: Tiles of as many rows that :func:`choose` takes instead of a configuration of :data:`CHOICES` where
#: they cost :data:`WAVE_MARGIN` less in its wave model: tma128x224h for tma128x256h (1024 x 14336 x 4096:
#: H100, 2026-11-27, benchmarks/RESULTS.md); 64x112 for 64x128 (M <= 64 by 14336: 128 tiles, not 112 on
#: 132 multiprocessors; H200, 2026-11-29, two runs: bf16 16 x 14336 x 4096 0.99-1.00x cuBLAS against
#: 0.96-0.98x, FP8 0.96-0.97x against 0.93-0.95x).
WAVE_ALTERNATIVES = {"tma128x256h": ("tma128x224h",), "64x128": ("64x112",)}

#: How much less (a fraction) a tile of :data:`WAVE_ALTERNATIVES` must cost in :func:`choose`'s wave model.
WAVE_MARGIN = 0.05

#: Element types of A and B, and the BK of each (one 128-byte swizzled row).
BK = {"bf16": 64, "f16": 64, "f8e4m3": 128, "f8e5m2": 128}


def tile_m(cfg: dict) -> int:
    """The rows BM of a tile (and of the A box) of configuration ``cfg``: 64 * CONSUMERS (both
    consumer warpgroups on one tile), or 64 * WG_M with PINGPONG (each consumer on tiles of its own)."""
    return 64 * (cfg.get("WG_M", 1) if cfg.get("PINGPONG") else cfg["CONSUMERS"])


def shared_bytes(cfg: dict, t: str) -> int:
    """Dynamic shared memory of std.matmul_sm90 (the formula stated in the .kc file): the stages'
    A and B tiles (each BK elements of 128 bytes a row; A's AROWS rows where given, else BM), two
    mbarriers a stage and, ping-pong, the consumers' two order mbarriers; with the TMA store epilogue
    (EPI_TMA), each consumer's C buffer (64 rows of EPI_TMA 16-bit columns) and store mbarrier."""
    epi = cfg.get("EPI_TMA", 0)
    rows = cfg.get("AROWS") or tile_m(cfg)
    return (cfg["STAGES"] * (rows + cfg["BN"]) * 128 + 16 * cfg["STAGES"] + 16 * bool(cfg.get("PINGPONG"))
            + (cfg["CONSUMERS"] * (128 * epi + 8) if epi else 0))


#: The dynamic shared memory (bytes) :func:`small_m_rows` fills with stages where a stage holds only
#: AROWS rows of A: 200 KiB, as much as the large tiles take (cuBLAS's small-M kernels on the H200 run 16
#: stages of 64 x 16 tiles, 160 KiB: ncu, benchmarks/profile_cublas.py, 2026-11-28).
SMALL_M_SHARED = 200 * 1024


def small_m_rows(M: int, cfg: dict) -> dict:
    """std.matmul_sm90's AROWS and STAGES for an M-row product on configuration ``cfg`` (the kernel's
    header, "AROWS"): where M <= 56 on a tile of one consumer's 64 rows (cooperative, no clusters, no TMA
    store), a stage holds only M rows of A rounded up to 8, and the stages fill :data:`SMALL_M_SHARED`
    (at least cfg's own): ``{"AROWS": rows, "STAGES": stages}``; else ``{}``. bf16, M <= 8, on 64x64: 22
    stages of 9 KiB (176 KiB of B in flight a block) against 8 of 16 KiB (64 KiB). H200 (2026-11-28,
    benchmarks/bench_matmul.py --variants default,64x64/a0 --shapes small, one run): M = 16, 64x64, bf16
    × 4096 × 4096 / × 14336 × 4096 / × 4096 × 14336 / × 8192 × 8192 0.88 / 0.71 / 0.93 / 0.75x cuBLAS ->
    0.97 / 0.95 / 0.98 / 0.95x; FP8 0.88 / 0.80 / 0.90 / 0.84x -> 0.98 / 0.91 / 0.97 / 0.95x."""
    if M > 56 or tile_m(cfg) != 64 or cfg["CONSUMERS"] != 1 or cfg.get("PINGPONG") or cfg.get("CLUSTER_M", 1) > 1 \
            or cfg.get("EPI_TMA"):
        return {}
    rows = max(8, -(-M // 8) * 8)
    return {"AROWS": rows, "STAGES": max(cfg["STAGES"], SMALL_M_SHARED // ((rows + cfg["BN"]) * 128 + 16))}


def choose(M: int, N: int, K: int, sms: int = Device.multiprocessor_count, b_kmajor: bool = True,
           bn_multiple: int = 8, why: list[str] | None = None) -> dict:
    """The configuration :func:`kcompiler.ops.matmul_sm90.run` uses for an M x K by K x N product on ``sms``
    multiprocessors: the first of :data:`CHOICES` that gives most multiprocessors a tile (at least 80% of
    them, where tiles run out; those of :data:`ONE_WAVE` no more than one each), or one of its
    :data:`WAVE_ALTERNATIVES` where that costs :data:`WAVE_MARGIN` less by waves: ceil(tiles / sms) x BN, the
    columns the busiest block multiplies (wave quantisation: 1024 x 14336 has 448 tiles of 128 x 256, 3.39
    waves, the busiest block 4 x 256 columns, and 512 of 128 x 224, 4 x 224); none fitting, :data:`SMALLEST`
    (small products are bound by reading B: what counts there is how many blocks stream it at once); one
    consumer warpgroup (64 rows) where M <= 64; BN a multiple of ``bn_multiple`` (32 for a block epilogue or a
    gated one: the kernel's rules), and of 64 for an N-major B (``b_kmajor`` False). (Where M <= 56,
    :func:`kcompiler.ops.matmul_sm90.prepare` then gives one consumer's tiles fewer rows of A a stage and more
    stages: :func:`small_m_rows`.) ``why``: a list that receives a line for each configuration weighed and the
    rule that settled it (matmul_sm90_traffic.explain)."""
    def tiles(cfg: dict) -> int:
        return -(-M // tile_m(cfg)) * -(-N // cfg["BN"])

    def cost(cfg: dict) -> int:
        return -(-tiles(cfg) // sms) * cfg["BN"]

    # the lines are formatted only where asked for (prepare runs choose for each launch it prepares)
    say = why is not None
    step = max(bn_multiple, 8 if b_kmajor else 64)
    for name in CHOICES:
        cfg = CONFIGS[name]
        if M <= 64 and tile_m(cfg) > 64:
            if say:
                why.append(f"{name}: not for M <= 64 (a second consumer would multiply rows of zeros)")
        elif M > CHOICE_MAX_M.get(name, M):
            if say:
                why.append(f"{name}: not for M > {CHOICE_MAX_M[name]} (CHOICE_MAX_M)")
        elif cfg["BN"] % step:
            if say:
                why.append(f"{name}: BN {cfg['BN']} is not a multiple of {step}")
        elif name in ONE_WAVE and tiles(cfg) > sms:
            if say:
                why.append(f"{name}: {tiles(cfg)} tiles, more than one wave of {sms}")
        elif tiles(cfg) >= 0.8 * sms:
            if say:
                why.append(f"{name}: {tiles(cfg)} tiles give at least 80 % of the {sms} multiprocessors one")
            for alt in WAVE_ALTERNATIVES.get(name, ()):
                other = CONFIGS[alt]
                if other["BN"] % step == 0 and cost(other) < (1 - WAVE_MARGIN) * cost(cfg):
                    if say:
                        why.append(f"{alt} instead: its busiest block multiplies {cost(other)} columns, not "
                                   f"{cost(cfg)} ({tiles(other)} tiles against {tiles(cfg)}: wave quantisation)")
                    cfg = other
            return dict(cfg)
        elif say:
            why.append(f"{name}: {tiles(cfg)} tiles, under 80 % of the {sms} multiprocessors")
    if say:
        why.append(f"none fills 80 %: {SMALLEST} (small products are bound by reading B)")
    return dict(CONFIGS[SMALLEST])


def choose_split(M: int, N: int, K: int, cfg: dict, bk: int, sms: int = Device.multiprocessor_count,
                 why: list[str] | None = None) -> int:
    """The split-K factor :func:`kcompiler.ops.matmul_sm90.run` uses by default: where the configuration's tiles fill
    at most half of the ``sms`` multiprocessors (small M), each tile's K loop is cut into as many shares as
    fill them, at most 4, each of at least 32 k-steps of ``bk``; else 1. Measured on the H100 (bench_matmul
    --configs): shares of 32 k-steps or more pay for the fix-up (M = 16, bf16: N = K = 4096 24 TFLOP/s with
    64x64 tiles in 2 shares against 22 unsplit; K = 14336 34 against 29), shorter ones do not (FP8 at K =
    4096, 32 k-steps of 128: 33 in 2 shares against 38), nor does M = 128 (128 tiles). ``why``: a list that
    receives a line saying which rule applied."""
    tiles = -(-M // tile_m(cfg)) * -(-N // cfg["BN"])
    if 2 * tiles > sms:
        if why is not None:
            why.append(f"split-K 1: {tiles} tiles fill more than half of the {sms} multiprocessors")
        return 1
    split = max(1, min(4, sms // tiles, -(-K // bk) // 32))
    if why is not None:
        why.append(f"split-K {split}: {tiles} tiles fill at most half of the {sms} multiprocessors; at most 4 "
                   f"shares, as many as fill them, each of 32 k-steps of {bk} or more ({-(-K // bk)} k-steps)")
    return split


def tail_shares(tiles: int, grid: int, tail_split: int) -> tuple[int, int]:
    """The tail split's schedule (std.matmul_sm90's TAIL_SPLIT; the kernel's fn schedule computes the
    same on the device): ``(tail, shares)`` for ``tiles`` tiles over a persistent grid of ``grid`` blocks
    with TAIL_SPLIT = ``tail_split``: the partial last wave, ``tail = tiles % grid`` tiles (where tiles >
    grid), each cut along K into ``shares = min(tail_split, grid // tail)`` shares, so that every share
    runs in the last round on a block of its own; ``(0, 1)`` where nothing is split (no partial wave,
    or one of more than half the grid). 1024 x 14336 x 4096 with 128 x 256 tiles on 132 SMs: 448 tiles,
    (52, 2): 396 whole tiles in 3 rounds, then 104 half tiles."""
    tail = tiles % grid if tiles > grid else 0
    shares = min(tail_split, grid // tail) if tail else 1
    return (tail, shares) if shares > 1 else (0, 1)


__all__ = ["BK", "CHOICES", "CHOICE_MAX_M", "CONFIGS", "ONE_WAVE", "SMALLEST", "SMALL_M_SHARED", "WAVE_ALTERNATIVES",
           "WAVE_MARGIN", "choose", "choose_split", "shared_bytes", "small_m_rows", "tail_shares", "tile_m"]
