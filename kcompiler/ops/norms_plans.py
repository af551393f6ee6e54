"""Launch configurations of std.norms's kernels (stdlib/norms.kc) for kcompiler.ops.norms: the variants
each kernel can run in, the tables that pick one by shape, and the plans (grid, block, compile-time
parameters) they give, cached by shape so that a call's host work does not grow with the choice.

Why variants (an H100 has 132 SMs; a block of the norm kernel holds its row in registers, about 4
16-byte vectors a thread, 1 row a block in the "base" variant):

- Few rows (tokens): "base" launches one block a row, so 16 rows use 16 SMs, each streaming its row and
  the weight (which it re-reads per row) through one SM's path to L2. "split" spreads a row over a
  cluster of 2-8 blocks (sm_90's thread-block clusters; RMSNorm only), each on 1/SPLIT of the columns,
  the partial sums exchanged through global memory across the cluster barrier: rows x SPLIT blocks
  fill the machine. "wide" takes more threads a row (about 1 vector each: more, smaller loads in
  flight a block, one wave of loads).
- Occupancy (ptxas 13.0, sm_90a, bf16 RMSNorm at hidden 8192): "base" (256 threads, NV 4) takes 86
  registers a thread, so an SM holds 2 blocks (16 of 64 warps, 32 KB of loads in flight); "wide"
  (1024 threads, NV 1) 32, 2 blocks (all 64 warps, the same 32 KB); "rows2" (512 threads, NV 2, 2
  rows) 71, 1 block but 64 KB in flight; "split" (256 threads, NV 2) 52. A launch bound (the kernel's
  MAXT) keeps a 1024-thread block within 64 registers (without it NV 4 at 1024 threads, rows of
  32768 bf16, could not launch).
- Many rows: "rows2" / "rows4" give a block 2 / 4 rows with the weight (and bias) read once a block
  and held in registers for all of them (in "base" every row re-reads the weight from L2: a third of
  RMSNorm's L2 reads when the data fits the 50 MB L2), their block reductions sharing one barrier.
- silu_and_mul / gelu_and_mul ("act"): "base" is one 16-byte vector a thread, 256 threads; with few
  tokens the grid (rows x d / 2048 blocks at bf16) leaves SMs idle: smaller blocks ("b128", "b64")
  make more of them, and NV vectors a thread ("nv2", "nv4", all loads issued first) fewer, fatter
  threads for many tokens. "fill" picks the fattest of those whose grid still gives each SM 4 blocks.
- rotary: "base" is one block a token looping over the token's (heads x items) (at 80 heads of 128:
  640 items, 512 threads: two trips, the second a quarter full), so T tokens use T SMs. "b128" /
  "b64" split a token's items over blocks of 128 / 64 threads (grid y), one item a thread; "ni2" two
  items a thread (all four loads of both issued before the stores); "fill" the largest block whose
  grid gives each SM 2 blocks.

The tables (:data:`NORM_TILES`, :data:`ACT_TILES`, :data:`ROTARY_TILES`) map (most rows, most hidden
elements) to a variant, the first entry that holds the call winning; their defaults are the fastest
variants of ``bench_norms.py --variants`` on the H100 on 2026-11-27 (benchmarks/RESULTS.md): up to 128
rows "wide" (norms), "b64" (gated activations), "b128" (rotary), which put more blocks on the SMs;
above that "rows2" ("rows4" past 1024 rows of more than 4096), "nv2" and "base". After changing a table
or a variant call :func:`clear_plans`. ``benchmarks/bench_norms.py --variants`` times the variants.
"""
from __future__ import annotations

import math as _math

#: Most vectors a thread of the norm kernel holds in registers (NV x ROWS): rows up to 16 * 1024 * VEC
#: elements (the base variant's limit).
NORM_MAX_VECTORS = 16

#: Rows counted as unbounded in the tables' keys.
ANY = 1 << 62

#: The norm kernel's variants: VPT about this many vectors a thread a row (the block a multiple of 64
#: threads, at most 1024), ROWS rows a block (sharing the weight's registers), SPLIT blocks a row in a
#: cluster ("auto": the most, a power of 2 up to 8, that keep rows x SPLIT within 2 blocks an SM and
#: 64 vectors a block; 1 for LayerNorm or without clusters).
NORM_VARIANTS = {"base": dict(VPT=4, ROWS=1, SPLIT=1), "wide": dict(VPT=1, ROWS=1, SPLIT=1),
                 "rows2": dict(VPT=2, ROWS=2, SPLIT=1), "rows4": dict(VPT=1, ROWS=4, SPLIT=1),
                 "split": dict(VPT=2, ROWS=1, SPLIT="auto")}

#: silu_and_mul / gelu_and_mul: BLOCK threads (at most; fewer for short rows), NV vectors a thread.
#: "fill": the first of FILL_ORDER's whose grid has 4 blocks an SM (else the last).
ACT_VARIANTS = {"base": dict(BLOCK=256, NV=1), "nv2": dict(BLOCK=256, NV=2), "nv4": dict(BLOCK=128, NV=4),
                "b128": dict(BLOCK=128, NV=1), "b64": dict(BLOCK=64, NV=1), "fill": "auto"}
ACT_FILL_ORDER = ("nv2", "base", "b128", "b64")

#: rotary: BLOCK threads at most (fewer for a token of fewer items), NI items a thread, SPLIT whether
#: a token's items are split over blocks (grid y) rather than looped over by one block. "fill": the
#: first of ROTARY_FILL_ORDER's whose grid has 2 blocks an SM (else the last).
ROTARY_VARIANTS = {"base": dict(BLOCK=512, NI=1, SPLIT=False), "b128": dict(BLOCK=128, NI=1, SPLIT=True),
                   "b64": dict(BLOCK=64, NI=1, SPLIT=True), "ni2": dict(BLOCK=128, NI=2, SPLIT=True),
                   "fill": "auto"}
ROTARY_FILL_ORDER = ("ni2", "b128", "b64")

#: The variant by shape: {(most rows, most hidden elements): variant}, the first entry that holds
#: (rows, n) chosen (n: a norm's row, act's d, rotary's items a token x VEC).
NORM_TILES = {(128, ANY): "wide", (1024, ANY): "rows2", (ANY, 4096): "rows2", (ANY, ANY): "rows4"}
ACT_TILES = {(128, ANY): "b64", (ANY, ANY): "nv2"}
ROTARY_TILES = {(128, ANY): "b128", (ANY, ANY): "base"}

_PLANS: dict = {}
_PLANS_MAX = 4096


def clear_plans() -> None:
    """Forget the cached plans (after a change to a table or a variant)."""
    _PLANS.clear()


def _pick(table: dict, rows: int, n: int) -> str:
    for (most_rows, most_n), name in table.items():
        if rows <= most_rows and n <= most_n:
            return name
    return "base"


def _cached(key: tuple, make) -> tuple:
    got = _PLANS.get(key)
    if got is None:
        got = make()
        if len(_PLANS) < _PLANS_MAX:
            _PLANS[key] = got
    return got


def _round64(v: int) -> int:
    return -(-v // 64) * 64


def norm_launch(n: int, vec: int, warp: int = 64, vpt: int = 4) -> tuple[int, int]:
    """(threads a block, vectors a thread NV) of the norm kernel for rows of ``n`` elements in vectors
    of ``vec``: about ``vpt`` vectors a thread (4 16-byte loads in flight each by default), threads a
    multiple of 64 (whole wavefronts on every target) up to 1024, NV a power of two. Raises ValueError
    past :data:`NORM_MAX_VECTORS` vectors a thread."""
    nvec = -(-n // vec)
    block = min(1024, max(warp, -(-(-(-nvec // vpt)) // warp) * warp))
    nv = 1 << max(0, _math.ceil(_math.log2(-(-nvec // block))))
    if nv > NORM_MAX_VECTORS:
        raise ValueError(f"rows of {n} elements are longer than the norm kernel holds "
                         f"({NORM_MAX_VECTORS * 1024 * vec} in vectors of {vec})")
    return block, nv


def norm_plan(rows: int, n: int, vec: int, layer: bool, cluster: bool, sms: int,
              variant: str | None = None) -> tuple[int, int, int, int, int]:
    """(grid, block, NV, ROWS, SPLIT) of the norm kernel for ``rows`` rows of ``n`` elements in vectors
    of ``vec``: the variant :data:`NORM_TILES` picks (or ``variant``), on a device of ``sms``
    multiprocessors with (``cluster``) or without thread-block clusters; LayerNorm (``layer``) never
    splits. A variant that cannot hold the row falls back to fewer rows a block, then to "base".
    Raises ValueError for rows longer than the kernel holds."""
    name = variant or _pick(NORM_TILES, rows, n)
    return _cached(("norm", name, rows, n, vec, layer, cluster, sms),
                   lambda: _norm_plan(NORM_VARIANTS[name], rows, n, vec, layer, cluster, sms))


def _norm_plan(cfg: dict, rows: int, n: int, vec: int, layer: bool, cluster: bool, sms: int) -> tuple:
    nvec = -(-n // vec)
    split = 1
    if cfg["SPLIT"] == "auto" and cluster and not layer:
        split = 8
        while split > 1 and (rows * split > 2 * sms or nvec < 64 * split):
            split //= 2
    elif isinstance(cfg["SPLIT"], int):
        split = cfg["SPLIT"]
    per = cfg["ROWS"] if split == 1 else 1
    try:
        block, nv = norm_launch(-(-nvec // split) * vec, vec, vpt=cfg["VPT"])
    except ValueError:
        block, nv = norm_launch(n, vec)
        split, per = 1, 1
    while per > 1 and nv * per > NORM_MAX_VECTORS:
        per //= 2
    return -(-rows // per) * split, block, nv, per, split


def act_plan(rows: int, d: int, vec: int, sms: int, variant: str | None = None) -> tuple[int, int, int]:
    """(blocks along the row (grid y), block, NV) of the gated-activation kernel for ``rows`` rows of
    ``d`` outputs in vectors of ``vec``: the variant :data:`ACT_TILES` picks (or ``variant``)."""
    name = variant or _pick(ACT_TILES, rows, d)
    return _cached(("act", name, rows, d, vec, sms), lambda: _act_plan(name, rows, d, vec, sms))


def _act_plan(name: str, rows: int, d: int, vec: int, sms: int) -> tuple:
    dvec = -(-d // vec)
    if ACT_VARIANTS[name] == "auto":
        for cand in ACT_FILL_ORDER:
            gy, block, nv = _act_plan(cand, rows, d, vec, sms)
            if rows * gy >= 4 * sms:
                break
        return gy, block, nv
    cfg = ACT_VARIANTS[name]
    block = cfg["BLOCK"] if dvec >= cfg["BLOCK"] else max(64, _round64(dvec))
    nv = cfg["NV"]
    while nv > 1 and (nv // 2) * block >= dvec:  # no thread left with only vectors past the row
        nv //= 2
    return -(-dvec // (block * nv)), block, nv


def rotary_plan(tokens: int, items: int, vec: int, sms: int, variant: str | None = None) -> tuple[int, int, int]:
    """(blocks a token (grid y), block, NI) of the rotary kernel for ``tokens`` tokens of ``items`` work
    items each (heads x items a head; an item VEC elements of both halves, or VEC elements): the
    variant :data:`ROTARY_TILES` picks by (tokens, items x ``vec``), or ``variant``."""
    name = variant or _pick(ROTARY_TILES, tokens, items * vec)
    return _cached(("rotary", name, tokens, items, sms), lambda: _rotary_plan(name, tokens, items, sms))


def _rotary_plan(name: str, tokens: int, items: int, sms: int) -> tuple:
    if ROTARY_VARIANTS[name] == "auto":
        for cand in ROTARY_FILL_ORDER:
            gy, block, ni = _rotary_plan(cand, tokens, items, sms)
            if tokens * gy >= 2 * sms:
                break
        return gy, block, ni
    cfg = ROTARY_VARIANTS[name]
    block = min(cfg["BLOCK"], max(64, _round64(items)))
    ni = cfg["NI"]
    while ni > 1 and (ni // 2) * block >= items:
        ni //= 2
    return (-(-items // (block * ni)) if cfg["SPLIT"] else 1), block, ni


__all__ = ["ACT_FILL_ORDER", "ACT_TILES", "ACT_VARIANTS", "ANY", "NORM_MAX_VECTORS", "NORM_TILES", "NORM_VARIANTS",
           "ROTARY_FILL_ORDER", "ROTARY_TILES", "ROTARY_VARIANTS", "act_plan", "clear_plans", "norm_launch",
           "norm_plan", "rotary_plan"]
