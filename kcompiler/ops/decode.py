"""Decode attention over a paged KV cache by std.decode (split-KV, FlashDecoding), and merge_states
(std.merge_states), which combines the splits' partial states."""
from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from ..runtime import arrays
from ..runtime.device import Device
from . import _common
from ._common import (ArrayKind, const_f32, contiguous, data_ptr, device_of, empty_like, flat, host_ints,
                      index_array, query_type, scalar_of, stream_of, target_for)


#: The SIMT decode's (WARPS, U, STAGES) by kind of cache: one query head a KV head (or two) in 16-bit
#: types, more (grouped-query attention, several query tokens), and FP8. FP8: 8 warps of U 4 (the same
#: shared memory as 4 warps of U 8, twice the warps an SM): H200 2026-11-28 (bench_attention.py --only
#: decode --kinds fp8, B32 H32 8192 keys, pages of 16) 85 % of copy in back-to-back calls (87-93 % by
#: do_bench) against 79 % (81-84 %) for 4 warps of U 8, which ncu showed at 12.5 % occupancy and 25 % of
#: warp cycles stalled on the ring's wait; on the H100 (2026-11-23) every tiling of that sweep read 91-94 %.
DECODE_SIMT = {"mha": dict(WARPS=4, U=4, STAGES=3), "gqa": dict(WARPS=4, U=2, STAGES=3),
               "fp8": dict(WARPS=8, U=4, STAGES=3)}
#: The tensor-core decode's variants by name (``tc_tiles`` may name one): RING (std.decode's
#: paged_decode_ring: WARPS warps with private cp.async rings of BN keys a step, STAGES deep; else
#: paged_decode_tc: one warp a block, prefill_mma's tiles, :data:`DECODE_TC_SINGLE`), EAGER (a warp
#: refills the slot it read last before waiting for the next: STAGES steps of copies in flight while
#: it waits, not STAGES - 1), MIN_WAVES (the split choice, :func:`split_count`: 1, split until the
#: blocks fill the resident slots at least once; 0.9, a single wave filling 90 % of them stays unsplit
#: and needs no merge_states pass) and GATHER (pages smaller than BN: all BN / PAGE pages of a step
#: read a step ahead, instead of a block-table read before each 16-byte copy, in series with it:
#: 16 of them a lane a step at BN 32, D 128, pages of 16; no change where PAGE >= BN). Shared memory
#: at D 128 bf16, blocks an H100 SM holds: "ring" 140 KB, 1; "bn16" 72 KB, 3 (12 warps an SM);
#: "bn16_s3" 106 KB, 2; "w8" 136 KB, 1 of 8 warps; "w8_s3" 208 KB, 1; "s3" 208 KB, 1 (two steps in
#: flight a warp without EAGER); "w2_bn64" 140 KB, 1 of 2 warps (4 pages of 16 a step). BASES (with
#: GATHER or pages of at least BN): the copies' addresses from one 64-bit offset a page, an add a piece.
#: benchmarks/bench_decode_variants.py times them.
DECODE_TC_VARIANTS = {
    "ring": dict(RING=True, WARPS=4, BN=32, STAGES=2),
    "ring_1wave": dict(RING=True, WARPS=4, BN=32, STAGES=2, MIN_WAVES=0.9),
    "eager": dict(RING=True, WARPS=4, BN=32, STAGES=2, EAGER=True),
    "eager_1wave": dict(RING=True, WARPS=4, BN=32, STAGES=2, EAGER=True, MIN_WAVES=0.9),
    "s3": dict(RING=True, WARPS=4, BN=32, STAGES=3),
    "bn16": dict(RING=True, WARPS=4, BN=16, STAGES=2, EAGER=True),
    "bn16_1wave": dict(RING=True, WARPS=4, BN=16, STAGES=2, EAGER=True, MIN_WAVES=0.9),
    "bn16_s3": dict(RING=True, WARPS=4, BN=16, STAGES=3, EAGER=True),
    "w8": dict(RING=True, WARPS=8, BN=16, STAGES=2, EAGER=True),
    # GQA 8:1 on pages of 16 (issue 23): one unsplit wave, more bytes in flight an SM or no table
    # read on the copies' path (bytes in flight an SM at the wait, D 128 bf16, 1 block an SM)
    "ring_gather": dict(RING=True, WARPS=4, BN=32, STAGES=2, MIN_WAVES=0.9, GATHER=True),  # 4 x 16 KB
    "eager_gather": dict(RING=True, WARPS=4, BN=32, STAGES=2, EAGER=True, MIN_WAVES=0.9, GATHER=True),  # 4 x 32
    "s3_gather": dict(RING=True, WARPS=4, BN=32, STAGES=3, MIN_WAVES=0.9, GATHER=True),  # 4 x 32 KB
    "w8_1wave": dict(RING=True, WARPS=8, BN=16, STAGES=2, EAGER=True, MIN_WAVES=0.9),  # 8 x 16 KB
    "w8_s3_1wave": dict(RING=True, WARPS=8, BN=16, STAGES=3, EAGER=True, MIN_WAVES=0.9),  # 8 x 24 KB
    "w2_bn64": dict(RING=True, WARPS=2, BN=64, STAGES=2, EAGER=True, MIN_WAVES=0.9, GATHER=True),  # 2 x 64 KB
    # BASES (issue 23, the copies' address path): a lane's 64-bit offset computed once a page a step, one add
    # a piece, no bound check on full steps. sm_90a SASS a step of BN 32, D 128, pages of 16 (ring_gather):
    # the copies' part of the loop from about 480 instructions (15 a 16-byte cp.async: j % PAGE, a 64-bit
    # product, a predicate each) to about 100, so a warp (alone on its scheduler) has a step's 16 KB in
    # flight within ~100 cycles of its wait instead of ~500-1000
    "ring_gather_bases": dict(RING=True, WARPS=4, BN=32, STAGES=2, MIN_WAVES=0.9, GATHER=True, BASES=True),
    "eager_gather_bases": dict(RING=True, WARPS=4, BN=32, STAGES=2, EAGER=True, MIN_WAVES=0.9, GATHER=True,
                               BASES=True),
    "w8_bases_1wave": dict(RING=True, WARPS=8, BN=16, STAGES=2, EAGER=True, MIN_WAVES=0.9, BASES=True),  # 2 a scheduler
    "ring_bases": dict(RING=True, WARPS=4, BN=32, STAGES=2, BASES=True),  # pages >= 32 (GQA 4:1's default + BASES)
    # GQA 8:1 on pages of 16 with BASES: 3 stages (4 x 32 KB in flight at the wait: 208 KB, 1 block an SM),
    # 2 warps of BN 64 (2 x 64 KB). H200 2026-11-28, % of copy per call on pages of 16: 92.8 and 87.0
    # against the default's 92.7-93.1 (benchmarks/RESULTS.md)
    "s3_gather_bases": dict(RING=True, WARPS=4, BN=32, STAGES=3, MIN_WAVES=0.9, GATHER=True, BASES=True),
    "w2_bn64_bases": dict(RING=True, WARPS=2, BN=64, STAGES=2, EAGER=True, MIN_WAVES=0.9, GATHER=True, BASES=True),
}
#: The tensor-core decode's default variant (:data:`DECODE_TC_VARIANTS`) by G, the query heads a KV
#: head: the entry of the least key at or above G (the last one past them). The measured choice
#: (benchmarks/RESULTS.md) is this one line.
DECODE_TC_DEFAULT = {4: "ring_gather_bases", 8: "ring_gather_bases", 16: "ring"}
# 4 and 8: H200 2026-11-28 (bench_decode_variants.py --kinds gqa4,gqa8, B32 H32 8192 keys D 128, % of copy
# per call / graph): ring_gather_bases GQA 4:1 96.5 / 97.1 on pages of 16 and 97.3 / 98.3 on pages of 64
# against ring's 84.6 / 85.7 and 97.2 / 97.5; GQA 8:1 93.7 / 94.9 and 94.2 / 96.2 against ring_gather's
# 91.0 / 92.5 and 93.4 / 95.6 (the default again at the end: 91.2 / 92.6, 94.1 / 95.6). On the H100
# (2026-11-27) GQA 8:1 read ring_gather_bases 91.4 / 92.6 against ring_gather's 92.2 / 93.4 (within that
# run's spread) and GQA 4:1 ring_gather 93.8 against ring's 92.5 on pages of 16.
#: paged_decode_tc's tiles where RING is false.
DECODE_TC_SINGLE = dict(BN=64, STAGES=2)


def decode_tc_tiles(G: int, tc_tiles: dict[str, Any] | str | None = None) -> dict[str, Any]:
    """The tensor-core decode's tiles for ``G`` query heads a KV head: ``tc_tiles`` (a name of
    :data:`DECODE_TC_VARIANTS`, or keys over the default) over the variant :data:`DECODE_TC_DEFAULT`
    gives G. ValueError for an unknown name."""
    if isinstance(tc_tiles, str):
        if tc_tiles not in DECODE_TC_VARIANTS:
            raise ValueError(f"paged_decode: tc_tiles {tc_tiles!r} is none of {sorted(DECODE_TC_VARIANTS)}")
        return dict(DECODE_TC_VARIANTS[tc_tiles])
    keys = sorted(DECODE_TC_DEFAULT)
    name = DECODE_TC_DEFAULT[next((k for k in keys if k >= G), keys[-1])]
    return {**DECODE_TC_VARIANTS[name], **(tc_tiles or {})}


def decode_splits(units: int, max_len: int, device: Device, threads: int, shared: int, regs: int,
                  min_chunk: int = 256, max_splits: int = 64) -> int:
    """The number of chunks (split-KV) :func:`paged_decode` and :func:`mla_decode` cut each sequence
    into: ``units`` blocks a split (B x KV heads, or head groups), on ``device``'s multiprocessors
    (``multiprocessor_count``), each holding as many blocks of ``threads`` threads, ``shared`` bytes
    and about ``regs`` registers a thread as its shared memory (``shared_memory_per_multiprocessor``,
    1 KB of it reserved a block), threads (``threads_per_multiprocessor``) and 64 K registers allow
    (the slots). The fewest splits whose blocks fill the slots in waves used to 90 % or more (so no
    last wave runs a few blocks alone; deeper cuts cost a merge_states pass), chunks of at least
    ``min_chunk`` keys; else the best-used count up to that bound."""
    return split_count(units, max_len, decode_slots(device, threads, shared, regs), min_chunk, max_splits)


def decode_slots(device: Device, threads: int, shared: int, regs: int) -> int:
    """The blocks of ``threads`` threads, ``shared`` bytes and ``regs`` registers a thread that
    ``device`` holds at once (:func:`decode_splits`' slots)."""
    per_sm = max(1, min(device.shared_memory_per_multiprocessor // (shared + 1024),
                        device.threads_per_multiprocessor // threads, 65536 // (threads * max(regs, 32)), 32))
    return device.multiprocessor_count * per_sm


@functools.lru_cache(maxsize=4096)
def split_count(units: int, max_len: int, slots: int, min_chunk: int = 256, max_splits: int = 64,
                min_waves: float = 1.0) -> int:
    """:func:`decode_splits` for ``slots`` resident blocks (:func:`decode_slots`); memoised, since a
    decode step asks it again at each call. ``min_waves``: the least number of waves (blocks over
    slots) a split count is taken for (below 1: one partly filled wave, used to 90 % or more, is
    enough, e.g. 128 blocks on 132 slots stay unsplit)."""
    most = max(1, min(max_splits, -(-int(max_len) // min_chunk)))
    best, best_use = 1, 0.0
    for s in range(1, most + 1):
        waves = units * s / slots
        use = waves / -(-units * s // slots)
        if waves >= min_waves and use >= 0.9:
            return s
        if use > best_use + 0.02:
            best, best_use = s, use
    return best


def decode_lanes(D: int, itemsize: int, DR: int = 0, rows: int = 1) -> int:
    """Lanes a cache row of the SIMT decode (its L), a power of two up to 32 dividing D (and DR) with
    a multiple of 4 bytes a lane (cp.async's sizes): one 16-byte piece a lane where that fits, more
    lanes where the block's ``rows`` query rows (heads times tokens) would otherwise hold more than 64
    values of q and of the output a lane (registers: FP8 with GQA 8:1 spilled at 16 elements a lane)."""
    def fits(L: int) -> bool:
        return L <= 32 and D % L == 0 and (not DR or DR % L == 0) and (D // L * itemsize) % 4 == 0 \
            and (not DR or (DR // L * itemsize) % 4 == 0)
    for L in (32, 16, 8, 4, 2, 1):
        if L <= max(D * itemsize // 16, 1) and fits(L):
            while rows * (D // L) > 64 and fits(2 * L):
                L *= 2
            return L
    raise ValueError(f"decode: no lane count fits a row of {D} (+ {DR}) elements of {itemsize} bytes")


def decode_shared_bytes(D: int, itemsize: int, G: int, QL: int, warps: int, unroll: int, stages: int, lanes: int,
                        DR: int = 0) -> int:
    """Dynamic shared memory of the SIMT decode (stdlib/decode.kc): the larger of the warps' rings
    of cache rows and the merge of the groups' states."""
    ring = warps * stages * (32 // lanes) * unroll * (D + DR if DR else 2 * D) * itemsize
    merge = warps * (32 // lanes) * QL * G * (D + 2) * 4
    return max(ring, merge)


def paged_lengths(block_table: Any, seq_lens: Any, max_seq_len: int | None, like: Any, page: int,
                  fn: str) -> tuple[Any, Any, int, int]:
    """(block table flat, seq_lens, max_pages, max_len) of a paged decode over B = len(like) sequences:
    the block table (B, max_pages) and seq_lens (B,) as int32 arrays of ``like``'s kind; ``max_len``,
    the longest sequence the split choice plans for (:func:`max_len_of`). ValueError / TypeError for
    arrays that do not fit."""
    B = int(like.shape[0])
    if not arrays.is_array(block_table):
        raise TypeError(f"{fn}: block_table must be a (B, max_pages) int32 array, not {arrays.describe(block_table)}")
    if len(block_table.shape) != 2 or block_table.shape[0] != B:
        raise ValueError(f"{fn}: block_table must be (B, max_pages) = ({B}, ...), not {tuple(block_table.shape)}")
    max_pages = int(block_table.shape[1])
    bt = index_array(block_table.reshape(-1), like, "block_table", fn)
    sl = index_array(seq_lens, like, "seq_lens", fn, B)
    return bt, sl, max_pages, max_len_of(sl, max_seq_len, max_pages * page, fn)


def max_len_of(seq_lens: Any, max_seq_len: int | None, capacity: int, fn: str) -> int:
    """The longest sequence a paged decode plans its splits for: ``max_seq_len`` when given (not
    checked); else, for lengths in host memory (numpy, torch CPU tensors: reading them costs no
    synchronisation), the longest of ``seq_lens``, which must lie in 0 .. ``capacity`` (the block
    table's max_pages x page_size; ValueError otherwise); for lengths on a GPU, ``capacity``: seq_lens
    is not read on the host, so that the call does not wait for the device and can be captured in a
    CUDA graph (the kernels take each length into 0 .. ``capacity``, so a wrong one reads no page
    outside its row of the block table)."""
    if max_seq_len is not None:
        return int(max_seq_len)
    if arrays.is_device_array(seq_lens):
        return capacity
    lens = host_ints(seq_lens)
    if (lens < 0).any() or (lens > capacity).any():
        raise ValueError(f"{fn}: seq_lens must lie in 0 .. max_pages * page_size = {capacity}")
    return int(lens.max()) if lens.size else 0


def _f32_vector(x: Any, n: int, like: Any, name: str, fn: str) -> Any:
    """``x`` (a number or n numbers) as a contiguous f32 array of length n of q's kind. A number for a
    torch tensor is filled in on its device once (:func:`kcompiler.ops._common.const_f32`: no copy
    from the host, which would wait for the device's queue before the launch)."""
    if isinstance(x, (int, float, np.floating, np.integer)):
        return const_f32(float(x), n, like)
    if arrays.is_torch_tensor(like):
        import torch  # deferred: torch is optional
        t = torch.as_tensor(x, dtype=torch.float32, device=like.device).reshape(-1)
        t = t.expand(n).contiguous() if t.numel() == 1 else t.contiguous()
    else:
        t = np.ascontiguousarray(np.broadcast_to(np.asarray(host_ints(x) if arrays.is_torch_tensor(x) else x,
                                                            np.float32).reshape(-1), (n,)))
    if tuple(t.shape) != (n,):
        raise ValueError(f"{fn}: {name} must be one number or {n} (one per KV head), not {tuple(t.shape)}")
    return t


#: Prepared calls of :func:`paged_decode` and kcompiler.ops.mla.mla_decode by :func:`plan_key` (the
#: kinds, shapes, dtypes and devices of the arrays and the call's options), the least recently made
#: dropped past 256. A plan holds no array: the split count (by the call's max_len, memoised in
#: :func:`split_count`), the kernels' compile-time values, the launch configurations. Its call checks
#: what the key does not say (contiguity, 16-byte alignment on a GPU), allocates the outputs and
#: the split's scratch and launches; it answers None to send the call through the checks again.
PLANS: "OrderedDict[tuple, Callable[..., Any]]" = OrderedDict()
_PLANS_MAX = 256


def plan_key(fn: str, xs: tuple, options: tuple) -> tuple | None:
    """The key of a prepared call of op ``fn`` on arrays ``xs`` (type, shape, dtype, device each) with
    hashable ``options``; None where something is not an array or not hashable."""
    try:
        key = (fn, tuple([(type(x), x.shape, x.dtype, getattr(x, "device", None)) for x in xs]), options)
        hash(key)
    except (AttributeError, TypeError):
        return None
    return key


def _scale_key(x: Any) -> Any:
    """What :func:`plan_key` keeps of an FP8 scale: the number, or the array's type, shape, dtype and
    device."""
    if x is None or isinstance(x, (int, float, np.floating, np.integer)):
        return x if x is None else float(x)
    try:
        return type(x), tuple(x.shape), x.dtype, getattr(x, "device", None)
    except AttributeError:
        return "unplanned", id(x)


def _scale_direct(x: Any, n: int, kind: ArrayKind) -> bool:
    """Whether a prepared call can pass FP8 scale ``x`` as it is (an f32 array of ``n`` elements of
    the call's kind) or as a kept constant (a number)."""
    if isinstance(x, (int, float, np.floating, np.integer)):
        return True
    return kind.holds(x) and tuple(x.shape) == (n,) and arrays.array_scalar_type(x) is not None \
        and arrays.array_scalar_type(x).name == "f32"


def remember(key: tuple | None, plan: Callable[..., Any]) -> None:
    """Keep ``plan`` under ``key`` in :data:`PLANS` (nothing for a None key)."""
    if key is None:
        return
    PLANS[key] = plan
    if len(PLANS) > _PLANS_MAX:
        PLANS.popitem(last=False)


class _PagedLaunch:
    """The launches of one :func:`paged_decode` shape (its plan, :data:`PLANS`): the decode kernel over
    (splits, Hkv, B) blocks (``mod``'s paged_decode, std.decode) and, after a split, merge_states
    (``merge_mod``'s, std.merge_states). ``run`` launches on checked arguments;
    calling it checks what the plan's key does not say, then runs (None: not for this plan)."""

    __slots__ = ("kernel", "merge", "kind", "dims", "dt_out", "dt_f32", "max_pages", "capacity", "sc", "kw_one",
                 "kw_split", "kw_merge", "threads", "slots", "fixed", "fp8", "waves")

    def __init__(self, mod: Any, merge_mod: Any, like: Any, dims: tuple, dtype: str, max_pages: int, page: int,
                 sc: Any, kw: dict, threads: int, slots: int, fixed: int | None, fp8: bool, waves: float = 1.0):
        self.kernel, self.merge, self.kind = mod.paged_decode, merge_mod.merge_states, ArrayKind(like)
        self.dims, self.max_pages, self.capacity, self.sc = dims, max_pages, max_pages * page, sc
        self.dt_out, self.dt_f32 = self.kind.dtype(dtype), self.kind.dtype("f32")
        self.kw_one = dict(kw, OUT=dtype, SPLIT=False)
        self.kw_split = dict(kw, OUT="f32", SPLIT=True)
        self.kw_merge = dict(T="f32", OUT=dtype, WARPS=4)
        self.threads, self.slots, self.fixed, self.fp8, self.waves = threads, slots, fixed, fp8, waves

    def run(self, args: tuple, out: Any, lse: Any, max_len: int) -> None:
        """Launch on ``args`` (q, the caches, the block table, seq_lens, the scales: checked arrays),
        writing ``out`` and ``lse``; the split count for sequences of up to ``max_len`` keys."""
        B, QL, H, HK, D = self.dims
        # a given count at most the keys (more chunks would be empty, their scratch allocated for nothing)
        n = min(self.fixed, max(max_len, 1)) if self.fixed else split_count(B * HK, max_len, self.slots,
                                                                             min_waves=self.waves)
        stream = self.kind.stream()
        if n == 1:
            self.kernel[(1, HK, B), self.threads](*args, out, lse, HK, self.max_pages, 1, self.sc, stream=stream,
                                                  **self.kw_one)
            return
        part = self.kind.empty((B, n, QL * H, D), self.dt_f32)
        part_lse = self.kind.empty((B, n, QL * H), self.dt_f32)
        self.kernel[(n, HK, B), self.threads](*args, part, part_lse, HK, self.max_pages, n, self.sc, stream=stream,
                                              **self.kw_split)
        self.merge[-(-B * QL * H // 4), 128](part, part_lse, out, lse, B, n, QL * H, D, stream=stream,
                                             **self.kw_merge)

    def __call__(self, q: Any, k: Any, v: Any, bt: Any, sl: Any, k_scale: Any, v_scale: Any,
                 max_seq_len: int | None) -> tuple | None:
        kind = self.kind
        ok = kind.contiguous
        if not (ok(q) and ok(k) and ok(v) and ok(bt) and ok(sl)):
            return None
        if kind.cuda and (q.data_ptr() | k.data_ptr() | v.data_ptr()) % 16:
            return None
        max_len = max_seq_len if max_seq_len is not None else \
            self.capacity if kind.cuda else max_len_of(sl, None, self.capacity, "paged_decode")
        out = kind.empty(q.shape, self.dt_out)
        lse = kind.empty(q.shape[:-1], self.dt_f32)
        if self.fp8:
            HK = self.dims[3]
            ks = const_f32(float(k_scale), HK, q) if isinstance(k_scale, (int, float, np.number)) else k_scale
            vs = const_f32(float(v_scale), HK, q) if isinstance(v_scale, (int, float, np.number)) else v_scale
            if not (ok(ks) and ok(vs)):
                return None
        else:
            ks = vs = lse
        self.run((q, k, v, bt, sl, ks, vs), out, lse, max_len)
        return out, lse


def paged_decode(q: Any, k_cache: Any, v_cache: Any, block_table: Any, seq_lens: Any, *,
                 scale: float | None = None, k_scale: Any = None, v_scale: Any = None,
                 num_splits: int | None = None, max_seq_len: int | None = None, return_lse: bool = False,
                 warps: int | None = None, unroll: int | None = None, stages: int | None = None,
                 tensor_cores: bool | None = None, tc_tiles: dict[str, Any] | str | None = None,
                 target: str = "auto") -> Any:
    """Decode attention of one query token a sequence over a paged KV cache (stdlib/decode.kc):
    ``softmax(scale * q k^T) v`` over the first ``seq_lens[b]`` tokens of sequence b.

    - q: (B, Hq, D) of f16, bf16 or f32; the result has q's shape and dtype; with ``return_lse`` also
      the log-sum-exp (B, Hq), f32, natural log. Or q: (B, QL, Hq, D), the last QL tokens of each
      sequence (their keys already in the cache, counted in seq_lens), token t seeing the keys before
      seq_lens[b] - (QL - 1 - t) (speculative decoding's verification); result (B, QL, Hq, D), LSE (B,
      QL, Hq); the SIMT path.
    - k_cache, v_cache: (pages, page_size, Hkv, D) (vLLM's and FlashAttention's paged layout), of q's
      dtype, or FP8 E4M3 (``float8_e4m3fn``) with per-KV-head scales ``k_scale`` and ``v_scale`` (a
      number or Hkv numbers: K = k_scale * k). Hq a multiple of Hkv (grouped-query attention). D a
      multiple of 16.
    - block_table: (B, max_pages) int32, the pages of each sequence in order; seq_lens: (B,) int32.
    - ``num_splits``: the keys of each sequence are cut into this many chunks, a block each, and the
      partial results combined by :func:`merge_states` (split-KV, FlashDecoding; at most one chunk a key of
      the longest sequence: a larger count is cut to that). Default
      (:func:`decode_splits`): the fewest that fill the multiprocessors of the device that runs the
      kernel (its ``multiprocessor_count``; the CPU target answers with an H100's, see
      kcompiler.runtime.device.Device) with whole waves of resident blocks, chunks of at least 256
      keys.
    - ``max_seq_len``: the longest of seq_lens, if known (a bound will do: the splits are planned
      for it). Without it, seq_lens in host memory is read and checked against the block table; on
      a GPU it is not read (that would wait for the device and cannot be captured in a CUDA graph):
      the splits are planned for the block table's capacity, max_pages x page_size
      (:func:`max_len_of`). Either way a call makes no copy between host and device.
    - ``warps``, ``unroll``, ``stages``: the SIMT kernel's WARPS, U (keys a group of lanes takes a
      step) and STAGES (steps of cache rows a warp has in shared memory, STAGES - 1 of them loading by
      cp.async while it computes one). Defaults: :data:`DECODE_SIMT` (the fastest measured,
      benchmarks/RESULTS.md).
    - ``tensor_cores``: the mma.sync path (the G = Hq / Hkv query heads of a KV head as the rows of an
      m16 tile, G <= 16; one query token; a cache of q's dtype, f16 or bf16; NVIDIA sm_80+), for
      grouped-query attention, where the SIMT path spends 4 shuffles a key and query head. Default:
      where G >= 4 and the target has it (benchmarks/RESULTS.md), the SIMT path otherwise.
      ``tc_tiles``: its kernel, tiles and split choice, a name of :data:`DECODE_TC_VARIANTS` or keys
      over the default for G (:data:`DECODE_TC_DEFAULT`, :func:`decode_tc_tiles`): RING, warps
      streaming their own keys through cp.async rings (WARPS, BN, STAGES, EAGER, MIN_WAVES, GATHER); RING
      False, one warp a block on prefill_mma's tiles (:data:`DECODE_TC_SINGLE`).

    numpy in, numpy out; torch in, torch out. Raises TypeError for other dtypes and ValueError for
    shapes that do not match.

    The host's work is prepared once (:data:`PLANS`): a later call with arrays of the same kinds,
    shapes, dtypes and devices and the same options allocates the result (and the split's f32
    scratch) through the array library — torch's caching allocator, which is stream-ordered and
    safe in CUDA graph capture, so no workspace is shared between streams or graphs — and launches,
    without the checks and choices."""
    key = plan_key("paged_decode", (q, k_cache, v_cache, block_table, seq_lens),
                   (scale, _scale_key(k_scale), _scale_key(v_scale), num_splits, warps, unroll, stages, tensor_cores,
                    tc_tiles if tc_tiles is None or isinstance(tc_tiles, str) else tuple(sorted(tc_tiles.items())),
                    target))
    plan = PLANS.get(key) if key is not None else None
    if plan is not None:
        got = plan(q, k_cache, v_cache, block_table, seq_lens, k_scale, v_scale, max_seq_len)
        if got is not None:
            return got if return_lse else got[0]
    fn = "paged_decode"
    src, kt, fp8, (B, QL, H, D, page, HK) = _decode_shapes(q, k_cache, v_cache, k_scale, v_scale, fn)
    qshape = tuple(q.shape)
    bt, sl, max_pages, max_len = paged_lengths(block_table, seq_lens, max_seq_len, q, page, fn)
    inputs = (q, k_cache, v_cache)
    q, k_cache, v_cache = contiguous(q), contiguous(k_cache), contiguous(v_cache)
    G = H // HK
    out = empty_like(q, qshape, src.name)
    lse = empty_like(q, qshape[:-1], "f32")
    # a 16-bit cache has no scales: the kernel never reads k_scale and v_scale then (any f32 array does)
    ks = _f32_vector(k_scale, HK, q, "k_scale", fn) if fp8 else lse
    vs = _f32_vector(v_scale, HK, q, "v_scale", fn) if fp8 else lse
    if B == 0 or H == 0:
        return (out, lse) if return_lse else out
    tgt = target_for(q, target)
    mod = _common.ftz_module("decode", tgt)
    sc = np.float32(D ** -0.5 if scale is None else scale)
    args = (flat(q, 16), flat(k_cache, 16), flat(v_cache, 16), bt, sl, flat(ks, 1), flat(vs, 1))
    aligned = all(data_ptr(x) % 16 == 0 for x in args[:3] + (out,))
    can_tc = (mod.target_has("mma") and not fp8 and src.name in ("f16", "bf16") and G <= 16 and QL == 1
              and aligned)
    if tensor_cores and not can_tc:
        raise ValueError(f"{fn}: the tensor-core path needs NVIDIA sm_80+, f16/bf16 q and cache, one query token, "
                         f"at most 16 query heads a KV head and 16-byte aligned arrays")
    tc = can_tc and (G >= 4 if tensor_cores is None else bool(tensor_cores))
    waves = 1.0
    if tc:
        tiles, threads, regs, shared = _tc_tiles(tc_tiles, G, D, src.size, fn)
        waves = tiles.pop("MIN_WAVES", 1.0)
    else:
        cfg = DECODE_SIMT["fp8" if fp8 else "gqa" if G * QL > 2 else "mha"]
        tiles, threads, regs, shared = _simt_tiles(warps or cfg["WARPS"], unroll or cfg["U"], stages or cfg["STAGES"],
                                                   D, kt.size, G, QL, fn)
    slots = decode_slots(device_of(mod, q), threads, shared, regs)
    fixed = None if num_splits is None else int(num_splits)
    if fixed is not None and fixed < 1:
        raise ValueError(f"{fn}: num_splits must be at least 1, not {fixed}")
    kw = dict(T=src.name, KT=kt.name, D=D, G=G, PAGE=page, TC=tc, QL=QL, shared=shared, **tiles)
    launch = _PagedLaunch(mod, _common.ftz_module("merge_states", tgt), q, (B, QL, H, HK, D), src.name, max_pages,
                          page, sc, kw, threads, slots, fixed, fp8, waves)
    if key is not None and aligned and all(launch.kind.holds(x) and arrays.is_contiguous(x)
                                           for x in inputs + (block_table, seq_lens)) \
            and (not fp8 or all(_scale_direct(x, HK, launch.kind) for x in (k_scale, v_scale))):
        remember(key, launch)
    launch.run(args, out, lse, max_len)
    return (out, lse) if return_lse else out


def _decode_shapes(q: Any, k_cache: Any, v_cache: Any, k_scale: Any, v_scale: Any,
                   fn: str) -> tuple[Any, Any, bool, tuple[int, int, int, int, int, int]]:
    """:func:`paged_decode`'s checks of q and the caches: (q's scalar type, the caches', whether they
    are FP8, (B, QL, Hq, D, page_size, Hkv)). Raises TypeError and ValueError as it documents."""
    src = query_type(q, fn)
    kt = arrays.array_scalar_type(k_cache) if arrays.is_array(k_cache) else None
    if kt is None or kt.name not in (src.name, "f8e4m3") or arrays.array_scalar_type(v_cache) != kt:
        raise TypeError(f"{fn}: k_cache and v_cache must both be of q's dtype ({src}) or f8e4m3, not "
                        f"{arrays.describe(k_cache)} and {arrays.describe(v_cache)}")
    fp8 = kt.name == "f8e4m3"
    if fp8 and (k_scale is None or v_scale is None):
        raise ValueError(f"{fn}: an FP8 cache needs k_scale and v_scale")
    if len(q.shape) not in (3, 4) or len(k_cache.shape) != 4 or tuple(v_cache.shape) != tuple(k_cache.shape):
        raise ValueError(f"{fn}: q must be (B, Hq, D) or (B, QL, Hq, D) and both caches (pages, page_size, Hkv, D),"
                         f" not {tuple(q.shape)}, {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    qshape = tuple(q.shape)
    (B, QL, H, D), (_, page, HK, Dk) = (qshape if len(qshape) == 4 else (qshape[0], 1) + qshape[1:]), \
        tuple(k_cache.shape)
    if Dk != D or D % 16:
        raise ValueError(f"{fn}: the head dimension must be a multiple of 16 and equal in q and the caches "
                         f"({D}, {Dk})")
    if HK == 0 or H % HK:
        raise ValueError(f"{fn}: q's {H} heads must be a multiple of the cache's {HK} (grouped-query attention)")
    return src, kt, fp8, (B, QL, H, D, page, HK)


def _tc_tiles(tc_tiles: dict[str, Any] | str | None, G: int, D: int, itemsize: int,
              fn: str) -> tuple[dict, int, int, int]:
    """(tiles, threads, registers a thread, shared bytes) of the tensor-core decode of ``G`` query
    heads a KV head: :func:`decode_tc_tiles` (RING: paged_decode_ring, with MIN_WAVES for the split
    choice) or :data:`DECODE_TC_SINGLE` (paged_decode_tc)."""
    given = decode_tc_tiles(G, tc_tiles)
    if given["RING"]:
        tiles = {k: int(given[k]) for k in ("WARPS", "BN", "STAGES")}
        waves = float(given.get("MIN_WAVES", 1.0))
        if min(tiles.values()) < 1 or tiles["BN"] % 16 or not 0 < waves <= 64:
            raise ValueError(f"{fn}: tc_tiles: WARPS and STAGES at least 1, BN a multiple of 16, MIN_WAVES in (0, 64],"
                             f" not {given}")
        shared = 16 * (D + 8) * itemsize + max(tiles["WARPS"] * tiles["STAGES"] * 2 * tiles["BN"] * (D + 8)
                                               * itemsize, tiles["WARPS"] * 16 * (D + 2) * 4)
        tiles.update(RING=True, EAGER=bool(given.get("EAGER", False)), GATHER=bool(given.get("GATHER", False)),
                     MIN_WAVES=waves)
        if given.get("BASES"):
            tiles["BASES"] = True  # absent when false: the default kernels' compile-time keys stay as they were
        return tiles, tiles["WARPS"] * 32, 168, shared
    tiles = {**DECODE_TC_SINGLE, **{k: v for k, v in given.items() if k in ("BN", "STAGES")}, "BM": 16, "RING": False}
    return tiles, 32, 255, (tiles["BM"] + 2 * tiles["STAGES"] * tiles["BN"]) * (D + 8) * itemsize


def _simt_tiles(warps: int, unroll: int, stages: int, D: int, itemsize: int, G: int, QL: int,
                fn: str) -> tuple[dict, int, int, int]:
    """(tiles, threads, registers a thread, shared bytes) of the SIMT decode of ``G`` query heads a KV
    head and ``QL`` tokens over a cache of ``itemsize`` bytes an element."""
    lanes = decode_lanes(D, itemsize, rows=G * QL)
    tiles = dict(WARPS=int(warps), U=int(unroll), STAGES=int(stages), L=lanes)
    if min(tiles.values()) < 1:
        raise ValueError(f"{fn}: warps, unroll and stages must be at least 1, not {warps}, {unroll}, {stages}")
    regs = 48 + 8 * QL * G * (D // lanes) // 4  # about what ptxas -v reports at sm_90a
    shared = decode_shared_bytes(D, itemsize, G, QL, tiles["WARPS"], tiles["U"], tiles["STAGES"], lanes)
    return tiles, tiles["WARPS"] * 32, regs, shared


def merge_states(v: Any, s: Any, *, out: Any = None, lse_out: Any = None, out_dtype: Any = None,
                 target: str = "auto") -> tuple[Any, Any]:
    """Combine S attention states of each row into one (stdlib/merge_states.kc;
    FlashInfer's ``merge_states``, with natural-log LSEs): ``v`` (N, S, H, D), each state's output
    normalised over its own keys, ``s`` (N, S, H) f32 their log-sum-exps (-inf: no keys); returns
    ``(o, lse)``, o (N, H, D) = sum_s exp(s_s - lse) v_s and lse (N, H) = log sum_s exp(s_s), exactly
    the attention over the union of the states' keys (cascade attention, split-KV). ``v``: f32, f16 or
    bf16; o in ``out_dtype`` (default v's), or written into ``out`` / ``lse_out`` (contiguous arrays of
    v's kind: (N, H, D) of f32, f16 or bf16, and (N, H) of f32). Raises TypeError / ValueError for kinds,
    dtypes and shapes that do not match."""
    fn = "merge_states"
    src = arrays.array_scalar_type(v) if arrays.is_array(v) else None
    if src is None or src.name not in ("f16", "bf16", "f32"):
        raise TypeError(f"{fn}: v must be an array of f32, f16 or bf16, not {arrays.describe(v)}")
    if not arrays.is_array(s) or arrays.array_scalar_type(s) is None or arrays.array_scalar_type(s).name != "f32":
        raise TypeError(f"{fn}: s must be an array of f32, not {arrays.describe(s)}")
    if len(v.shape) != 4 or tuple(s.shape) != tuple(v.shape[:3]):
        raise ValueError(f"{fn}: v must be (N, S, H, D) and s (N, S, H), not {tuple(v.shape)} and {tuple(s.shape)}")
    N, S, H, D = tuple(v.shape)
    if out is None:
        dst = src if out_dtype is None else scalar_of(out_dtype)
        if dst is None or dst.name not in ("f16", "bf16", "f32"):
            raise TypeError(f"{fn}: out_dtype must be f32, f16 or bf16, not {out_dtype!r}")
        out = empty_like(v, (N, H, D), dst.name)
    kind = ArrayKind(v)
    for name, x in (("out", out), ("lse_out", lse_out)):
        if x is not None and not kind.holds(x):
            raise TypeError(f"{fn}: {name} must be an array of v's kind (numpy, or torch on v's device), not "
                            f"{arrays.describe(x)}")
    dst = arrays.array_scalar_type(out)
    if tuple(out.shape) != (N, H, D) or not arrays.is_contiguous(out) or dst is None \
            or dst.name not in ("f16", "bf16", "f32"):
        raise ValueError(f"{fn}: out must be a contiguous ({N}, {H}, {D}) array of f32, f16 or bf16")
    if lse_out is None:
        lse_out = empty_like(v, (N, H), "f32")
    elif tuple(lse_out.shape) != (N, H) or not arrays.is_contiguous(lse_out) \
            or getattr(arrays.array_scalar_type(lse_out), "name", None) != "f32":
        raise ValueError(f"{fn}: lse_out must be a contiguous ({N}, {H}) array of f32, not "
                         f"{arrays.describe(lse_out)} of shape {tuple(lse_out.shape)}")
    if N * H == 0 or D == 0:
        return out, lse_out
    v, s = contiguous(v), contiguous(s)
    mod = _common.ftz_module("merge_states", target_for(v, target))
    warps = 4
    mod.merge_states[-(-N * H // warps), warps * 32](flat(v, 1), flat(s, 1), flat(out, 1), flat(lse_out, 1),
                                                     N, S, H, D, T=src.name, OUT=dst.name, WARPS=warps,
                                                     stream=stream_of(v))
    return out, lse_out


__all__ = ["DECODE_SIMT", "DECODE_TC_DEFAULT", "DECODE_TC_SINGLE", "DECODE_TC_VARIANTS", "decode_lanes",
           "decode_shared_bytes", "decode_splits", "decode_tc_tiles", "merge_states", "paged_decode"]
