"""kcompiler.ops.attention_order: the launch shape of std.attention_sm90 (the Hopper prefill) from its
tiles: the grid its ORDER needs (stdlib/attention_sm90_order.kc), PERSIST's grid of a block a
multiprocessor and where it is taken, the tiles' host-only keys, and the small-grid rule (fewer query
rows a block where the default block would leave multiprocessors idle)."""
from __future__ import annotations

import functools
import heapq
from numbers import Integral, Real
from typing import Any

#: Keys of a Hopper tiles dict that the host reads and the kernel does not (not passed as compile-time
#: values): GROUP, ORDER 2's heads a group (default 8; the largest divisor of H up to it is taken);
#: SMALL_GRID, whether :func:`small_grid_consumers` may lower CONSUMERS for the shape (default False);
#: PERSIST_TILES, the most key tiles (ceil(seqlen_k / BN)) a query tile may read for PERSIST to be taken
#: (default: no limit; :func:`sm90_launch`); PERSIST_SLACK, how much longer than the plain grid's
#: PERSIST's schedule may be (a number >= 1; default :data:`PERSIST_SLACK`; :func:`persist_balance`).
HOST_KEYS = ("GROUP", "SMALL_GRID", "PERSIST_TILES", "PERSIST_SLACK")

#: Waves (blocks a multiprocessor) up to which SMALL_GRID also takes ORDER 1 where the tiles give no
#: ORDER: there every (head, batch entry)'s longest causal tile starts in the first wave, and K and V fit
#: in L2 whatever the order. On bigger grids ORDER 1 is slower: a wave then spans many heads' K and V
#: (B4 H32 S4096 D128 causal 1.08x SDPA flash against 1.39x in ORDER 0; H200, 2026-11-27,
#: bench_attention_variants.py; on the small grids 'small-grid order1' was the best of every
#: (D, causal) group: D64 causal 1.46x against 1.24x without ORDER 1).
SMALL_GRID_WAVES = 2

#: Waves up to which SMALL_GRID takes ORDER 1 for a causal grid (where the tiles give no ORDER and PERSIST
#: is not taken) whose longest query tile reads at least :data:`SMALL_GRID_CAUSAL_TILES` key tiles: with
#: few waves the grid's last blocks decide its time, and ORDER 1 leaves the short tiles for them. x ORDER
#: 0 (or PERSIST where it was taken), H200, 2026-11-29, bench_attention_ab.py, 5 rounds: causal D 128 B1
#: H16 S1536 / S3072 / S4096 1.129 / 1.124 / 1.154-1.162, B1 H32 S1536 1.048, B2 H8 S4096 1.155; D 64 B1
#: H16 S4096 1.208, B1 H8 S8192 1.200; D 256 B1 H16 S2048 1.098, B1 H32 S1024 1.042, but B2 H32 S512 (6
#: key tiles of 96) 0.952; past 4 waves it lost (D 256 B2 H16 S2048, 7.8 waves: 0.951). With the rule,
#: against ORDER 0 given (the earlier choice), same run: D 128 B1 H16 S4096 1.16 (1.19x cuDNN), D 64 B1 H16
#: S4096 1.20, D 256 B1 H16 S2048 1.10, D 256 B2 H32 S512 and the persistent shapes unchanged.
SMALL_GRID_CAUSAL_WAVES = 4

#: The fewest key tiles the longest causal query tile must read for :data:`SMALL_GRID_CAUSAL_WAVES`.
SMALL_GRID_CAUSAL_TILES = 8

#: The share of its waves' blocks (waves rounded up) that a grid must fill for
#: :func:`small_grid_consumers` to keep its consumers.
SMALL_GRID_FILL = 0.8

#: How much longer PERSIST's schedule may be than the plain grid's (each in key tiles on the busiest
#: multiprocessor: :func:`persist_balance`) for PERSIST to be taken. PERSIST's static rounds balance
#: causal tiles only over many rounds: at B1 H16 S4096 D128 causal (512 query tiles, 3.9 rounds of
#: 132 blocks) its busiest block reads 1.53x the mean and it ran 0.88x the plain grid, whose blocks go
#: to whichever multiprocessor is free; where its schedule is within 3 % of the grid's it gained 1.0-1.12x
#: (H200, 2026-11-29, benchmarks/bench_attention_ab.py, PERSIST_TILES 32 against 16: B1 H32 / B2 H32 /
#: B4 H32 / B16 H32 S4096 causal 1.087 / 1.051 / 1.031 / 1.010, B2 H16 / B4 H32 S3072 1.121 / 1.036).
PERSIST_SLACK = 1.05

#: CUDA's largest grid y and z (x goes to 2^31 - 1).
_GRID_YZ_MAX = 65535


def heads_group(heads: int, group: int) -> int:
    """ORDER 2's heads a group: the largest divisor of ``heads`` that is at most ``group`` (at least 1),
    so that every group is whole (the kernel reads G off the grid: grid_dim.x)."""
    g = max(1, min(int(group), heads))
    while heads % g:
        g -= 1
    return g


def small_grid_consumers(consumers: int, seqlen_q: int, heads: int, batch: int, sms: int) -> int:
    """The small-grid rule (on where a tiles dict gives SMALL_GRID, as the defaults do): the most
    consumer warpgroups, up to ``consumers``, whose grid (ceil(seqlen_q / (64 c)) query tiles a (head,
    batch entry)) fills its waves (rounded up) to :data:`SMALL_GRID_FILL` of their blocks at least,
    else 1. Where the default block of 128 or 192 query rows leaves many multiprocessors without a
    block (B1 H16 S512 at BM 128: 64 blocks for 132), or a second wave mostly idle (B4 H16 S512 D64 at
    BM 192: 192 blocks, 1.45 waves, the second 45 % full), smaller blocks fill them; from 4 waves up
    any grid fills 80 %. A single wave filled to 80 % keeps its consumers: B1 H32 S512 D128 (128
    blocks of 128 rows) ran in 18.1 us against 22.6 us with one consumer (256 blocks, two waves; H100,
    2026-11-27, bench_attention_variants.py; benchmarks/RESULTS.md). ``sms``: the device's
    multiprocessor count (``_common.device_of(...).multiprocessor_count``; 132 on an H100 and on the
    CPU target)."""
    for c in range(consumers, 1, -1):
        blocks = -(-seqlen_q // (64 * c)) * heads * batch
        if blocks >= SMALL_GRID_FILL * -(-blocks // sms) * sms:
            return c
    return 1


def _grid_fill(seqlen_q: int, heads: int, batch: int, sms: int, consumers: int) -> str:
    """The small-grid rule's reading of ``consumers`` warpgroups a block, as :func:`explain` prints it."""
    blocks = -(-seqlen_q // (64 * consumers)) * heads * batch
    waves = -(-blocks // sms)
    return f"{blocks} blocks of {64 * consumers} query rows fill {blocks / (waves * sms):.0%} of {waves} wave(s)"


def sm90_tiles(defaults: dict[str, Any], tiles: dict[str, Any] | None, varlen: bool = False) -> dict[str, Any]:
    """The tiles of a call: ``defaults`` (an ATTENTION_SM90_TILES or ATTENTION_FP8_TILES entry) updated
    by the caller's ``tiles``. The small-grid rule and the persistent form are the defaults': tiles a
    caller gives (not empty) are taken as given (SMALL_GRID and PERSIST off) unless they say
    SMALL_GRID=True or PERSIST=True, so that a form asked for (PINGPONG's two consumers, OVERLAP, say)
    is the form launched; the defaults' LAZY_MAX (the sequential form's) is dropped where they ask for
    OVERLAP or CHAIN without naming it, and the defaults' OVERLAP and FA3_ORDER where they ask for
    LAZY_MAX without naming them. PERSIST takes no variable lengths (``varlen``): the defaults' is dropped there.
    Raises ValueError for ORDER 2 or a PERSIST the caller asks for with variable lengths, which the
    kernel refuses too (a compile error, for callers of the kernel itself), and for a host key that is
    not a positive int (GROUP, PERSIST_TILES), a number at least 1 (PERSIST_SLACK) or a bool (SMALL_GRID);
    the kernel's own keys are checked where it compiles."""
    t = dict(defaults) if not tiles else {**defaults, "SMALL_GRID": False, **tiles}
    for key in HOST_KEYS:
        x = t.get(key)
        number = isinstance(x, Real) and not isinstance(x, bool)
        if key == "SMALL_GRID":
            ok, what = isinstance(x, bool), "a bool"
        elif key == "PERSIST_SLACK":
            ok, what = number and x >= 1, "a number at least 1"
        else:
            ok, what = number and isinstance(x, Integral) and x > 0, "a positive int"
        if key in t and not ok:
            raise ValueError(f"attention: the tiles' {key} is {what}, not {x!r}")
    if tiles and "PERSIST" not in tiles or varlen and not (tiles or {}).get("PERSIST"):
        t.pop("PERSIST", None)
    if tiles and (tiles.get("OVERLAP") or tiles.get("CHAIN")) and "LAZY_MAX" not in tiles:
        t.pop("LAZY_MAX", None)  # the defaults' LAZY_MAX is the sequential form's
    if tiles and tiles.get("LAZY_MAX") and "OVERLAP" not in tiles and t.get("OVERLAP"):
        t["OVERLAP"] = False  # and the defaults' overlapped form (D 256's FA3_ORDER) does not take it
        if "FA3_ORDER" not in tiles:
            t.pop("FA3_ORDER", None)
    if varlen and t.get("PERSIST"):
        raise ValueError("attention: PERSIST (a block a multiprocessor looping over the query tiles) takes no "
                         "variable lengths")
    if varlen and t.get("ORDER", 0) == 2:
        raise ValueError("attention: ORDER 2 (tiles longest first within groups of heads) takes no variable "
                         "lengths: its blocks count their query tiles from the longest sequence, which the "
                         "kernel is not told with cu_seqlens (ORDER 0 or 1)")
    return t


def unit_key_tiles(nt: int, bm: int, bn: int, seqlen_q: int, seqlen_k: int, causal: bool) -> list[int]:
    """The key tiles each of a (head, batch entry)'s ``nt`` query tiles of ``bm`` rows reads, tile 0
    first: ceil(key_end / ``bn``), key_end std.attention_common's for the tile's last row (causal:
    bottom-right aligned, so a tile may read none), as std.attention_sm90_order's fn unit computes it."""
    ends = [min(seqlen_k, max(m * bm + bm + seqlen_k - seqlen_q, 0)) if causal else seqlen_k for m in range(nt)]
    return [-(-e // bn) for e in ends]


def persist_balance(sizes: list[int], units: int, blocks: int, causal: bool, order: int = 0) -> float:
    """PERSIST's schedule against the plain grid's, in the key tiles of the busiest block: ``sizes`` a
    (head, batch entry)'s query tiles' key tiles (:func:`unit_key_tiles`), ``units`` = len(sizes) H B
    query tiles, ``blocks`` persistent blocks (:func:`persist_loads`). The plain grid (ORDER 0, or 1:
    the query tiles slowest; ORDER 2 counted as 0): the hardware gives each next block of the grid's
    order to the first free multiprocessor, modelled as list scheduling on ``blocks`` of them. Returns
    the ratio: 1.0 where every unit reads the same, > 1 where PERSIST's busiest block reads more. The
    start and end of a unit that PERSIST saves are not counted: :data:`PERSIST_SLACK` allows for them.
    Kept by its arguments: a plan is made at every call that keeps none (FP8 with descale arrays), and
    the model walks every unit."""
    return _balance(tuple(sizes), units, blocks, causal, order)


@functools.lru_cache(maxsize=256)
def _balance(sizes: tuple[int, ...], units: int, blocks: int, causal: bool, order: int) -> float:
    if len(set(sizes)) <= 1 or units <= blocks:
        return 1.0
    seq = _unit_sizes(sizes, units, causal)
    if order == 1:  # grid (H, B, NT): every (head, batch entry)'s tile in turn, the longest first if causal
        seq = [seq[u // (units // len(sizes))] for u in range(units)]
    free = [0] * blocks
    for s in seq:
        heapq.heapreplace(free, free[0] + s)
    return max(persist_loads(sizes, units, blocks, causal)) / max(max(free), 1)


def persist_loads(sizes: list[int] | tuple[int, ...], units: int, blocks: int, causal: bool) -> list[int]:
    """The key tiles each of PERSIST's ``blocks`` blocks reads over its rounds (:func:`persist_balance`'s
    arguments): block p takes unit r P + p in round r, or r P + P - 1 - p in a causal launch's odd
    rounds, the units tile fastest, causal ones longest first (std.attention_sm90_order's fn unit_of
    and unit_bhm)."""
    load = [0] * blocks
    for u, size in enumerate(_unit_sizes(sizes, units, causal)):
        r, p = divmod(u, blocks)
        load[blocks - 1 - p if causal and r % 2 else p] += size
    return load


def _unit_sizes(sizes: list[int] | tuple[int, ...], units: int, causal: bool) -> list[int]:
    """The key tiles of units 0 .. ``units`` - 1 in ORDER 0's order: the query tile fastest (causal:
    the longest first), then the head, then the batch entry."""
    nt = len(sizes)
    return [sizes[nt - 1 - u % nt] if causal else sizes[u % nt] for u in range(units)]


def sm90_launch(tiles: dict[str, Any], seqlen_q: int, heads: int, batch: int, sms: int = 132,
                seqlen_k: int | None = None, causal: bool = False,
                why: list[str] | None = None) -> tuple[tuple[int, int, int], int, dict[str, Any]]:
    """(grid, threads a block, compile-time values) of std.attention_sm90 for ``tiles`` (a full tiles dict:
    ATTENTION_SM90_TILES' entry updated by the caller's) on ``batch`` entries of ``heads`` query heads
    and ``seqlen_q`` queries (the longest, with variable lengths). The compile-time values are the
    tiles without :data:`HOST_KEYS`, CONSUMERS set where SMALL_GRID lowered it, and ORDER 1 where
    SMALL_GRID is on, the tiles give no ORDER and the grid is at most :data:`SMALL_GRID_WAVES` blocks a
    multiprocessor (``causal`` with long tiles: :data:`SMALL_GRID_CAUSAL_WAVES`). The grid by ORDER
    (stdlib/attention_sm90_order.kc): 0 (NT, H, B), 1 (H, B, NT), 2 (G, H / G NT, B), NT =
    ceil(seqlen_q / (64 CONSUMERS)); with PERSIST (sms x BLOCKS_PER_SM, 1, 1), ORDER dropped, where the
    NT H B query tiles outnumber those blocks, a query tile reads at most PERSIST_TILES key tiles
    (ceil(``seqlen_k`` / BN), ``seqlen_k`` default ``seqlen_q``) and PERSIST's rounds are balanced
    (:func:`persist_balance` at most :data:`PERSIST_SLACK`; ``causal`` as the kernel's CAUSAL), else
    PERSIST is dropped. ``why``: a list that gets a line for each of these decisions (:func:`explain`).
    Raises ValueError for an ORDER other than 0, 1, 2 or a grid past CUDA's limits (65535 on y and z)."""
    kw = {k: v for k, v in tiles.items() if k not in HOST_KEYS}
    c = kw.get("CONSUMERS", 2)
    if tiles.get("SMALL_GRID"):
        c = small_grid_consumers(c, seqlen_q, heads, batch, sms)
        if why is not None:
            asked, fill = kw.get("CONSUMERS", 2), functools.partial(_grid_fill, seqlen_q, heads, batch, sms)
            why.append(f"SMALL_GRID: {asked} consumer(s): {fill(asked)}" + (", kept" if c == asked else
                       f", under {SMALL_GRID_FILL:.0%}: {c} consumer(s), {fill(c)}"))
        kw["CONSUMERS"] = c
    nt = -(-seqlen_q // (64 * c))
    sk = seqlen_q if seqlen_k is None else seqlen_k
    long_causal = causal and -(-sk // kw["BN"]) >= SMALL_GRID_CAUSAL_TILES
    waves = SMALL_GRID_CAUSAL_WAVES if long_causal else SMALL_GRID_WAVES
    if tiles.get("SMALL_GRID") and "ORDER" not in tiles and nt * heads * batch <= waves * sms:
        kw["ORDER"] = 1
        if why is not None:
            why.append(f"ORDER 1 (the query tiles slowest, causal ones longest first): {nt * heads * batch} "
                       f"blocks, at most {waves} waves of {sms}")
    order = kw.get("ORDER", 0)
    if kw.get("PERSIST"):
        blocks = sms * kw.get("BLOCKS_PER_SM", 1)
        key_tiles = -(-sk // kw["BN"])
        units = nt * heads * batch
        slack = tiles.get("PERSIST_SLACK", PERSIST_SLACK)
        limit = tiles.get("PERSIST_TILES", key_tiles)
        balance = persist_balance(unit_key_tiles(nt, 64 * c, kw["BN"], seqlen_q, sk, causal), units, blocks,
                                  causal, order) if units > blocks and key_tiles <= limit else None
        taken = balance is not None and balance <= slack
        if why is not None:
            why.append(f"PERSIST: {blocks} blocks loop over {units} query tiles of {key_tiles} key tiles at most "
                       f"(PERSIST_TILES {limit}); its busiest block {balance:.3f}x the plain grid's (slack {slack})"
                       if taken else "PERSIST dropped: " + (
                           f"{units} query tiles for {blocks} blocks" if units <= blocks else
                           f"{key_tiles} key tiles a query tile > PERSIST_TILES {limit}" if balance is None else
                           f"its busiest block {balance:.3f}x the plain grid's > slack {slack}"))
        if taken:
            kw.pop("ORDER", None)  # PERSIST's units have their own order (stdlib/attention_sm90_order.kc)
            return (blocks, 1, 1), 128 * (c + 1), kw
    kw.pop("PERSIST", None)  # or a query tile a block at most: the plain grid is the same schedule
    if order == 0:
        grid = (nt, heads, batch)
    elif order == 1:
        grid = (heads, batch, nt)
    elif order == 2:
        g = heads_group(heads, tiles.get("GROUP", 8))
        grid = (g, heads // g * nt, batch)
    else:
        raise ValueError(f"attention: the Hopper tiles' ORDER is 0, 1 or 2, not {order!r}")
    if max(grid[1:]) > _GRID_YZ_MAX:
        raise ValueError(f"attention: grid {grid} (ORDER {order}) is past CUDA's 65535 blocks on y and z; "
                         "take another ORDER")
    return grid, 128 * (c + 1), kw


def explain(batch: int, heads: int, seqlen_q: int, head_dim: int, causal: bool = False, seqlen_k: int | None = None,
            tiles: dict[str, Any] | None = None, fp8: bool = False, sms: int = 132, kv_heads: int | None = None) -> str:
    """The Hopper prefill's launch for a shape as ``ops.attention`` makes it, as text: the defaults'
    entry (ATTENTION_SM90_TILES by (D, causal), or with ``fp8`` attention_fp8.fp8_tiles: ATTENTION_FP8_TILES by
    causal, ATTENTION_FP8_SHORT's where the keys are few) updated
    by the caller's ``tiles`` (:func:`sm90_tiles`), a line for each rule of :func:`sm90_launch` that
    applied, then the compile-time values, grid, threads and dynamic shared memory in bytes. ``sms``:
    the device's multiprocessors (132 on an H100 or H200); ``kv_heads``: fewer than ``heads`` for grouped-query
    attention (FP8's defaults differ). E.g. ``print(explain(1, 16, 1024, 256,
    causal=True))``. ValueError for a head dimension the Hopper path does not take (64, 128, 256; FP8:
    128), and as :func:`sm90_tiles` and :func:`sm90_launch`."""
    from .attention import ATTENTION_SM90_TILES, attention_sm90_shared_bytes
    from .attention_fp8 import fp8_tiles
    dims = (128,) if fp8 else sorted({d for d, _ in ATTENTION_SM90_TILES})
    if head_dim not in dims:
        raise ValueError(f"attention: the Hopper path{' (FP8)' if fp8 else ''} takes D "
                         f"{' or '.join(map(str, dims))}, not {head_dim}")
    sk = seqlen_q if seqlen_k is None else seqlen_k
    grouped = kv_heads is not None and kv_heads < heads
    defaults = fp8_tiles(causal, sk, tiles, grouped) if fp8 else ATTENTION_SM90_TILES[(head_dim, bool(causal))]
    t = sm90_tiles(defaults, tiles)
    why: list[str] = []
    grid, threads, kw = sm90_launch(t, seqlen_q, heads, batch, sms, seqlen_k, causal, why=why)
    shared = attention_sm90_shared_bytes(kw, head_dim, 1 if fp8 else 2)
    if kw.get("VT_SMEM"):
        why.append(f"V^T made in the kernel (VT_SMEM {kw['VT_SMEM']}: std.attention_sm90_vt), not by a pass "
                   "before it" + ("" if tiles else f": {sk} keys{' (grouped)' if grouped else ''}, ATTENTION_FP8_SHORT"))
    head = (f"B{batch} H{heads} Sq {seqlen_q} Sk {sk} D {head_dim} {'causal' if causal else 'full'}"
            f"{' FP8' if fp8 else ''} on {sms} multiprocessors: grid {grid}, {threads} threads, {shared} bytes of "
            f"shared memory")
    values = "  compile-time values: " + ", ".join(f"{k} {v}" for k, v in kw.items())
    return "\n".join([head, *("  " + line for line in why), values])


__all__ = ["HOST_KEYS", "PERSIST_SLACK", "SMALL_GRID_CAUSAL_TILES", "SMALL_GRID_CAUSAL_WAVES", "SMALL_GRID_FILL",
           "SMALL_GRID_WAVES", "explain", "heads_group", "persist_balance", "persist_loads", "sm90_launch", "sm90_tiles",
           "small_grid_consumers", "unit_key_tiles"]
