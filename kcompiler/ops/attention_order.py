"""kcompiler.ops.attention_order: the launch shape of std.attention_sm90 (the Hopper prefill) from its
tiles: the grid its ORDER needs (stdlib/attention_sm90_order.kc), PERSIST's grid of a block a
multiprocessor and where it is taken, the tiles' host-only keys, and the small-grid rule (fewer query
rows a block where the default block would leave multiprocessors idle)."""
from __future__ import annotations

from numbers import Integral
from typing import Any

#: Keys of a Hopper tiles dict that the host reads and the kernel does not (not passed as compile-time
#: values): GROUP, ORDER 2's heads a group (default 8; the largest divisor of H up to it is taken);
#: SMALL_GRID, whether :func:`small_grid_consumers` may lower CONSUMERS for the shape (default False);
#: PERSIST_TILES, the most key tiles (ceil(seqlen_k / BN)) a query tile may read for PERSIST to be taken
#: (default: no limit; :func:`sm90_launch`).
HOST_KEYS = ("GROUP", "SMALL_GRID", "PERSIST_TILES")

#: Waves (blocks a multiprocessor) up to which SMALL_GRID also takes ORDER 1 where the tiles give no
#: ORDER: there every (head, batch entry)'s longest causal tile starts in the first wave, and K and V fit
#: in L2 whatever the order. On bigger grids ORDER 1 is slower: a wave then spans many heads' K and V
#: (B4 H32 S4096 D128 causal 1.08x SDPA flash against 1.39x in ORDER 0; H200, 2026-11-27,
#: bench_attention_variants.py; on the small grids 'small-grid order1' was the best of every
#: (D, causal) group: D64 causal 1.46x against 1.24x without ORDER 1).
SMALL_GRID_WAVES = 2

#: The share of its waves' blocks (waves rounded up) that a grid must fill for
#: :func:`small_grid_consumers` to keep its consumers.
SMALL_GRID_FILL = 0.8

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


def sm90_tiles(defaults: dict[str, Any], tiles: dict[str, Any] | None, varlen: bool = False) -> dict[str, Any]:
    """The tiles of a call: ``defaults`` (an ATTENTION_SM90_TILES or ATTENTION_FP8_TILES entry) updated
    by the caller's ``tiles``. The small-grid rule and the persistent form are the defaults': tiles a
    caller gives (not empty) are taken as given (SMALL_GRID and PERSIST off) unless they say
    SMALL_GRID=True or PERSIST=True, so that a form asked for (PINGPONG's two consumers, OVERLAP, say)
    is the form launched; the defaults' LAZY_MAX (the sequential form's) is dropped where they ask for
    OVERLAP or CHAIN without naming it. PERSIST takes no variable lengths (``varlen``): the defaults' is dropped there.
    Raises ValueError for ORDER 2 or a PERSIST the caller asks for with variable lengths, which the
    kernel refuses too (a compile error, for callers of the kernel itself), and for a host key that is
    not a positive int (GROUP, PERSIST_TILES) or a bool (SMALL_GRID); the kernel's own keys are checked
    where it compiles."""
    t = dict(defaults) if not tiles else {**defaults, "SMALL_GRID": False, **tiles}
    for key in HOST_KEYS:
        x = t.get(key)
        positive = isinstance(x, Integral) and not isinstance(x, bool) and x > 0
        ok = isinstance(x, bool) if key == "SMALL_GRID" else positive
        if key in t and not ok:
            raise ValueError(f"attention: the tiles' {key} is {'a bool' if key == 'SMALL_GRID' else 'a positive int'}, "
                             f"not {x!r}")
    if tiles and "PERSIST" not in tiles or varlen and not (tiles or {}).get("PERSIST"):
        t.pop("PERSIST", None)
    if tiles and (tiles.get("OVERLAP") or tiles.get("CHAIN")) and "LAZY_MAX" not in tiles:
        t.pop("LAZY_MAX", None)  # the defaults' LAZY_MAX is the sequential form's
    if varlen and t.get("PERSIST"):
        raise ValueError("attention: PERSIST (a block a multiprocessor looping over the query tiles) takes no "
                         "variable lengths")
    if varlen and t.get("ORDER", 0) == 2:
        raise ValueError("attention: ORDER 2 (tiles longest first within groups of heads) takes no variable "
                         "lengths: its blocks count their query tiles from the longest sequence, which the "
                         "kernel is not told with cu_seqlens (ORDER 0 or 1)")
    return t


def sm90_launch(tiles: dict[str, Any], seqlen_q: int, heads: int, batch: int, sms: int = 132,
                seqlen_k: int | None = None) -> tuple[tuple[int, int, int], int, dict[str, Any]]:
    """(grid, threads a block, compile-time values) of std.attention_sm90 for ``tiles`` (a full tiles dict:
    ATTENTION_SM90_TILES' entry updated by the caller's) on ``batch`` entries of ``heads`` query heads
    and ``seqlen_q`` queries (the longest, with variable lengths). The compile-time values are the
    tiles without :data:`HOST_KEYS`, CONSUMERS set where SMALL_GRID lowered it, and ORDER 1 where
    SMALL_GRID is on, the tiles give no ORDER and the grid is at most :data:`SMALL_GRID_WAVES` blocks a
    multiprocessor. The grid by ORDER
    (stdlib/attention_sm90_order.kc): 0 (NT, H, B), 1 (H, B, NT), 2 (G, H / G NT, B), NT =
    ceil(seqlen_q / (64 CONSUMERS)); with PERSIST (sms x BLOCKS_PER_SM, 1, 1), ORDER dropped, where the
    NT H B query tiles outnumber those blocks and a query tile reads at most PERSIST_TILES key tiles
    (ceil(``seqlen_k`` / BN), ``seqlen_k`` default ``seqlen_q``), else PERSIST is dropped. Raises
    ValueError for an ORDER other than 0, 1, 2 or a grid past CUDA's limits (65535 on y and z)."""
    kw = {k: v for k, v in tiles.items() if k not in HOST_KEYS}
    c = kw.get("CONSUMERS", 2)
    if tiles.get("SMALL_GRID"):
        c = small_grid_consumers(c, seqlen_q, heads, batch, sms)
        kw["CONSUMERS"] = c
    nt = -(-seqlen_q // (64 * c))
    if tiles.get("SMALL_GRID") and "ORDER" not in tiles and nt * heads * batch <= SMALL_GRID_WAVES * sms:
        kw["ORDER"] = 1
    order = kw.get("ORDER", 0)
    if kw.get("PERSIST"):
        blocks = sms * kw.get("BLOCKS_PER_SM", 1)
        key_tiles = -(-(seqlen_q if seqlen_k is None else seqlen_k) // kw["BN"])
        if nt * heads * batch > blocks and key_tiles <= tiles.get("PERSIST_TILES", key_tiles):
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


__all__ = ["HOST_KEYS", "SMALL_GRID_FILL", "SMALL_GRID_WAVES", "heads_group", "sm90_launch", "sm90_tiles", "small_grid_consumers"]
