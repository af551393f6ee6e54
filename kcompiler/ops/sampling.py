"""Token sampling by std.sampling: :func:`sample` (greedy, top-k, top-p, min-p and their combinations,
without sorting the vocabulary: one fused kernel a call) and its building blocks :func:`softmax`,
:func:`top_k_mask_logits`, :func:`top_p_renorm_probs` (std.sampling_blocks)."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..runtime import arrays
from . import _common
from ._common import data_ptr, empty_like, target_for

#: Threads a block (a row). Fixed, never chosen by target: the order of every sum, hence the sampled
#: token, depends on it, and the CPU target and a GPU must give the same token.
SAMPLING_THREADS = 1024

#: (VEC, U) by input dtype: each thread owns runs of VEC contiguous elements (16 bytes: one wide load
#: where the rows are 16-byte aligned) and a loop iteration loads U of them before using any (see
#: stdlib/sampling.kc). VEC fixes the order of the sums, hence the tokens, the same on every target; U
#: changes only the loads. (1, 1) is the scalar path (the kernels' first version): the benchmark
#: swaps this table to time it.
SAMPLING_LOADS = {"f32": (4, 2), "f16": (8, 2), "bf16": (8, 2)}  # U: H100 2026-11-27, bench_sampling.py


def _rows(x: Any, fn: str, kinds: tuple = ("f32", "f16", "bf16")) -> tuple[Any, int, int]:
    """``x``'s scalar type, rows and vocabulary size (x 2-D with unit stride along the last axis, or
    1-D: one row); TypeError / ValueError otherwise."""
    src = arrays.array_scalar_type(x) if arrays.is_array(x) else None
    if src is None or src.name not in kinds:
        raise TypeError(f"{fn}: expected an array of {', '.join(kinds)}, not {arrays.describe(x)}")
    shape = tuple(x.shape)
    if len(shape) not in (1, 2) or shape[-1] == 0 or shape[-1] >= 2 ** 31:
        raise ValueError(f"{fn}: expected a (batch, vocab) or (vocab,) array with 0 < vocab < 2^31, not {shape}")
    return src, (shape[0] if len(shape) == 2 else 1), shape[-1]


#: What a scalar per-row parameter may be, by (function, name): a predicate and the range it states.
#: Arrays of them are not checked (that would copy a device array to the host each call).
_SCALAR_RANGES: dict[tuple[str, str], tuple[Callable[[float], bool], str]] = {
    ("sample", "temperature"): (lambda t: not math.isnan(t), "a number (<= 0: greedy), not NaN"),
    ("softmax", "temperature"): (lambda t: t > 0, "> 0"),
    ("sample", "top_p"): (lambda p: p > 0, "in (0, 1] (>= 1: off)"),
    ("top_p_renorm_probs", "top_p"): (lambda p: p > 0, "in (0, 1] (>= 1: off)"),
    ("sample", "min_p"): (lambda p: 0 <= p <= 1, "in [0, 1] (0: off)"),
}


def _row_param(v: Any, like: Any, rows: int, dtype: str, name: str, fn: str) -> Any:
    """Per-row parameter ``v`` (a scalar, or an array of ``rows``) as a contiguous 1-D array of ``dtype``
    ('f32' or 'i32') of ``like``'s kind (numpy, or torch on its device). A scalar is checked against
    :data:`_SCALAR_RANGES`; an i32 scalar (top_k) must be an integer, and is clamped to [0, 2^31 - 1]
    (every value outside (0, vocab) means off). Raises TypeError for None or a non-integer top_k,
    ValueError for a scalar out of range or an array of the wrong shape."""
    np_dtype = np.float32 if dtype == "f32" else np.int32
    if v is None or isinstance(v, (bool, str, bytes)):
        raise TypeError(f"{fn}: {name} must be a number or an array of one a row, not {v!r}")
    if isinstance(v, (int, float, np.integer, np.floating)):
        if dtype == "i32":
            if not float(v).is_integer():
                raise TypeError(f"{fn}: {name} must be an integer, not {v!r}")
            v = min(max(int(v), 0), 2**31 - 1)
        else:
            ok, want = _SCALAR_RANGES.get((fn, name), (lambda x: not math.isnan(x), "a number, not NaN"))
            if not ok(float(v)):
                raise ValueError(f"{fn}: {name} must be {want}, not {v!r}")
        # a scalar: a cached device array (no host-to-device copy a call)
        return _common.const_fill(v, rows, like, dtype)
    if arrays.is_torch_tensor(like):
        import torch  # deferred: torch is optional
        tdt = torch.float32 if dtype == "f32" else torch.int32
        t = torch.as_tensor(v, device=like.device).to(tdt)
        t = t.expand(rows).contiguous() if t.dim() == 0 else t.contiguous()
        out = t
    else:
        h = v.cpu().numpy() if arrays.is_torch_tensor(v) else np.asarray(v)
        out = np.ascontiguousarray(np.broadcast_to(h, (rows,)) if h.ndim == 0 else h, np_dtype)
    if tuple(out.shape) != (rows,):
        raise ValueError(f"{fn}: {name} must be a scalar or have one value a row ({rows}), not shape "
                         f"{tuple(out.shape)}")
    return out


def _u32_pair(v: int, name: str, fn: str) -> tuple[np.uint32, np.uint32]:
    """An integer in [0, 2^64) as its low and high 32-bit words. Raises TypeError for a non-integer,
    ValueError out of range."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{fn}: {name} must be an integer, not {v!r}")
    v = int(v)
    if not 0 <= v < 2 ** 64:
        raise ValueError(f"{fn}: {name} must be in [0, 2^64), not {v}")
    return np.uint32(v & 0xFFFFFFFF), np.uint32(v >> 32)

#: When :func:`sample` splits each row over several blocks (std.sampling's ``sample_split``: a block a
#: chunk of ``chunk`` elements reads it for its maximum (and, for a temperature-only row, its weight
#: sum); the row's last block finishes; one launch): batches of at most ``max_rows`` rows with a
#: vocabulary of at least ``min_vocab`` and 2 * ``chunk``, in calls that cannot filter (below). Never a
#: choice by target. Tokens: a row with top-k, top-p or min-p draws what the unsplit kernel draws (the
#: maximum is exact in any order, the rounds are the same); a temperature-only row draws another token
#: than the unsplit kernel for the same seed (the sums run in chunks), the same on every target. So a
#: seed's tokens are fixed by (batch, vocabulary, whether the call may filter) and this table.
#: The figures (bench_sampling.py, H100 80GB HBM3, 2026-11-27, µs a call, default loads u2 vs the split
#: kernel at chunk 16384; /work/devres/4/sampling.txt): temperature only, bf16 / f32 --
#: batch 1 vocab 128256: 58.2 vs 51.6 / 58.3 vs 26.9; batch 16 vocab 128256: 60.1 vs 29.8 / 60.3 vs
#: 30.9; batch 1 vocab 256000: 101.8 vs 31.9 / 103.6 vs 43.3; batch 16 vocab 256000: 105.9 vs 41.8 /
#: 107.0 vs 44.4; but batch 256: 150.5 vs 161.8 (bf16, 128256), 261.4 vs 282.7 (bf16, 256000), and
#: chunks of 4096 at vocab 32000: 24.7 vs 51.0 (batch 1), 35.6 vs 54.4 (batch 16). With top-k 50 and
#: top-p 0.9 the split kernel was within 5 % of the unsplit one at batch 1-16, vocab 128K-256K (the
#: rounds dominate: one block a row either way), before its chunks skipped the weight sums for such
#: rows. Batches 17-255 were not measured: kept unsplit.
#: With candidate lists and PRUNE (second session of 2026-11-27, same script, the rows' top-k 50 and
#: top-p 0.9), the unsplit kernel beats the split one on filtered rows: bf16 batch 1 vocab 128256 76.1
#: vs 97.4 µs, vocab 256000 121.6 vs 140.0; f32 within noise. So a call that may filter (any of top_k,
#: top_p, min_p given as an array, or as a scalar that is not off: :func:`may_filter`) stays unsplit
#: unless ``filtered`` is True (tests set it to run the split kernel's rounds): its filtered rows draw
#: the same tokens either way, its temperature-only rows then draw the unsplit kernel's token.
SAMPLING_SPLIT = {"max_rows": 16, "chunk": 16384, "min_vocab": 65536, "filtered": False}

#: Candidate lists (std.sampling's CAP, see stdlib/sampling.kc): each thread keeps up to this many of
#: its candidates (weight and index, in shared memory: CAP * SAMPLING_THREADS * 8 bytes a block, 128
#: KiB at 16) from the first full pass of a row with top-k or top-p, and the later rounds read the
#: lists instead of the row (and the exp of every element); a thread with more candidates than that
#: reads the row, and writes its list again, as before. The tokens are the same bits for every CAP
#: (0: no lists, the kernels' first version) and every target; the host lowers it to what the
#: device's shared memory a block holds (e.g. 7 on AMD's 64 KiB LDS).
SAMPLING_LISTS = 16

#: Whether the rejection rounds after the first skip the exp of an element whose exponent
#: (x - max) / temperature is at most log(pivot) - 2^-10 (std.sampling's PRUNE: its weight cannot
#: exceed the pivot, so it adds nothing to the round's sums): one compare an element instead of an exp
#: for all but the few heavy ones. The same tokens either way (False: the kernels' first version).
SAMPLING_PRUNE = True


def split_chunks(rows: int, vocab: int, filtered: bool = False) -> int:
    """How many blocks :func:`sample` gives a row of ``vocab`` in a batch of ``rows`` (1: unsplit), by
    :data:`SAMPLING_SPLIT`; the chunk length is a multiple of 16 elements. ``filtered``: the call may
    filter rows (:func:`may_filter`): unsplit unless SAMPLING_SPLIT["filtered"]."""
    chunk = split_chunk()
    if filtered and not SAMPLING_SPLIT.get("filtered", False):
        return 1
    if rows > min(int(SAMPLING_SPLIT["max_rows"]), 65535) or vocab < max(2 * chunk,  # grid.y <= 65535
                                                                          int(SAMPLING_SPLIT.get("min_vocab", 0))):
        return 1
    return -(-vocab // chunk)


def may_filter(top_k: Any, top_p: Any, min_p: Any, vocab: int) -> bool:
    """Whether :func:`sample`'s parameters may filter a row of ``vocab``: any of them an array (its
    values stay on the device), or a scalar that is on (0 < top_k < vocab, top_p < 1, min_p > 0)."""
    def off(v: Any, is_off: Any) -> bool:
        return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and is_off(v)
    return not (off(top_k, lambda k: k <= 0 or k >= vocab) and off(top_p, lambda p: p >= 1)
                and off(min_p, lambda m: m <= 0))


def split_chunk() -> int:
    """:data:`SAMPLING_SPLIT`'s chunk length rounded up to a multiple of 16 elements."""
    return -(-int(SAMPLING_SPLIT["chunk"]) // 16) * 16


def list_cap(mod: Any, x: Any) -> int:
    """The candidate-list slots a thread (std.sampling's CAP) for ``mod``'s kernels on ``x``:
    :data:`SAMPLING_LISTS`, lowered to what the device's shared memory a block holds beside the
    kernels' own 1 KiB (0: no lists)."""
    limit = int(_common.device_of(mod, x).shared_memory_per_block) - 1024
    return max(0, min(int(SAMPLING_LISTS), limit // (SAMPLING_THREADS * 8)))


def kernel_params(dtype: str, ld: int, address: int = 0) -> dict:
    """std.sampling's THREADS, VEC, U and ALIGNED for rows of scalar type ``dtype`` ('f32', 'f16' or
    'bf16') with row stride ``ld`` elements, the first at device address ``address`` (0: a host array,
    copied to aligned device memory or read in place by the CPU target): VEC and U from
    :data:`SAMPLING_LOADS` by dtype (never by target), ALIGNED when every row starts 16-byte aligned
    (address and ld * element size multiples of 16: a GPU's wide load needs it; it changes no bits,
    only whether a vector is one load or VEC)."""
    vec, unroll = SAMPLING_LOADS[dtype]
    size = {"f32": 4, "f16": 2, "bf16": 2}[dtype]
    aligned = vec > 1 and vec * size <= 16 and (ld * size) % 16 == 0 and address % 16 == 0
    return dict(THREADS=SAMPLING_THREADS, VEC=vec, U=unroll, ALIGNED=aligned)


def _loads(src: Any, x2: Any, ld: int) -> dict:
    return kernel_params(src.name, ld, data_ptr(x2))


def _zeros_i32(like: Any, n: int) -> Any:
    """n int32 zeros of ``like``'s kind (torch: filled on its device)."""
    if arrays.is_torch_tensor(like):
        import torch  # deferred: torch is optional
        return torch.zeros(n, dtype=torch.int32, device=like.device)
    return np.zeros(n, np.int32)


#: sample_split's scratch kept between calls, by (device, stream, rows, chunks): the chunks' maxima,
#: their indices and weight sums, and the rows' arrival counts (zero between launches: the row's last
#: block resets its count). One set a stream (a stream runs its calls in order); none is kept for
#: host (numpy) arrays or while torch captures a CUDA graph (a fresh set then, as moe's plans do).
_SPLIT_SCRATCH: dict = {}


def _split_scratch(x: Any, rows: int, chunks: int) -> tuple:
    """(part_m, part_i, part_s, arrive) for :func:`sample`'s split launch on ``x`` (see
    :data:`_SPLIT_SCRATCH`)."""
    n = rows * chunks
    key = (x.device, _common.stream_of(x), rows, chunks) if arrays.is_torch_tensor(x) and x.is_cuda else None
    return _common.kept(_SPLIT_SCRATCH, key, x, lambda: (empty_like(x, (n,), "f32"), empty_like(x, (n,), "i32"),
                                                         empty_like(x, (n,), "f32"), _zeros_i32(x, rows)), 64)


def _row_view(x: Any, rows: int, vocab: int) -> tuple[Any, int]:
    """``x`` as an array the kernel indexes by row * ld + i, and ld (rows need not be packed: a torch
    view with unit stride along the vocabulary is passed as the 1-D span from its first element to its
    last, which the launcher takes as contiguous; its address may then be misaligned)."""
    x2 = x.reshape(rows, vocab) if len(tuple(x.shape)) == 1 else x
    if arrays.is_torch_tensor(x2):
        if x2.stride(-1) != 1 or x2.stride(0) < 0:
            x2 = x2.contiguous()
        ld = int(x2.stride(0)) if rows > 1 else vocab
        if not x2.is_contiguous():
            x2 = x2.as_strided(((rows - 1) * ld + vocab,), (1,))
        return x2, ld
    x2 = np.ascontiguousarray(x2)
    return x2, vocab


def sample(logits: Any = None, *, probs: Any = None, temperature: Any = 1.0, top_k: Any = 0,
           top_p: Any = 1.0, min_p: Any = 0.0, seed: int = 0, offset: int = 0, target: str = "auto") -> Any:
    """One token a row from ``logits`` (softmax(logits / temperature)) or from ``probs`` (used as given,
    need not sum to 1), restricted to the row's top-k, top-p and min-p sets: int32 indices of shape
    (batch,) (a 0-d array for a 1-D row), of the input's kind. One fused kernel a call, a block a row,
    no sort.

    Inputs: (batch, vocab) or (vocab,) arrays of f32, f16 or bf16 (numpy, or torch on the CPU or a GPU).
    Per-row parameters (a scalar, or an array of batch values): ``temperature`` (<= 0: greedy, the
    lowest index of the row's maximum; from probs only its sign matters), ``top_k`` (<= 0 or >= vocab:
    off; an integer), ``top_p`` (in (0, 1]; >= 1: off), ``min_p`` (in [0, 1]: keep w >= min_p * max w;
    0: off). A scalar outside its range (or NaN) raises ValueError; an array's values are not checked
    (that would copy it to the host each call): keep them in range. The allowed set
    is the intersection, all three judged on the same softmax(logits / temperature) distribution (not
    one after another), ties included: top-k keeps a token if fewer than top_k tokens have a larger
    probability, top-p if the tokens more probable than it hold less than top_p of the mass. The token
    is drawn from the distribution restricted to that set and renormalised.

    Algorithm (std.sampling's ``sample``; FlashInfer's sorting-free rejection sampling): a pass for the
    maximum, then rounds: draw a token j by inverse CDF with one uniform from the candidates (weights
    above a pivot, initially all within min-p); one pass counts and sums the tokens more probable than
    j; if j is within top-k and top-p it is returned, else the pivot rises to j's probability (no
    lighter token can be allowed) and j is redrawn from the heavier ones, whose sums that pass formed.
    Accepted draws are exactly distributed as the renormalised restricted distribution; the expected
    number of rounds is O(log V) (each rejection discards the candidates lighter than a probability-
    weighted draw, as in randomized quickselect), in practice 1-5; greedy rows and rows without top-k
    and top-p take two passes.

    Randomness: Philox 4x32-10 (std.random), round r of row b from lane r % 4 of
    philox4x32_10(counter=(offset_lo, offset_hi, b, r // 4), key=(seed_lo, seed_hi)), u = (x & 0xFFFFFF)
    * 2^-24; ``seed`` and ``offset`` are integers in [0, 2^64) (advance ``offset`` each step). The same
    (seed, offset, inputs) give the same tokens on the CPU target and a GPU (every sum is a fixed
    sequence of f32 operations, :data:`SAMPLING_THREADS` threads a row and :data:`SAMPLING_LOADS`'s
    runs on every target).

    Memory: every pass streams the row in runs of 16 bytes (4 f32 or 8 bf16/f16 elements a thread,
    several runs loaded before any is used; one wide load a run where the rows are 16-byte aligned),
    so a single block, all that works at batch 1, keeps enough bytes in flight. A torch view with unit
    stride along the vocabulary is read in place.

    Cheaper rounds (the same tokens): rounds after the first take the exp only of elements that may
    weigh more than the pivot (:data:`SAMPLING_PRUNE`: a compare of the exponent against log(pivot)
    first), and each thread keeps its candidates in shared memory after a full pass
    (:data:`SAMPLING_LISTS`), so that the later rounds read at most that many entries a thread instead
    of the row: a filtered row takes full passes for the maximum, round 0 and usually round 1.

    Split rows (:data:`SAMPLING_SPLIT`, :func:`split_chunks`: batches of up to 16 rows of 64K or more
    tokens, chunks of 16384, where no top-k / top-p / min-p may filter: :func:`may_filter`): still one
    launch, grid (chunks, batch). Each block reads its chunk for its
    maximum (and for a temperature-only row its weight sum); the row's last block picks a chunk by the
    chunk sums and reads that chunk once more for the token (temperature only: 2 passes over V spread
    over the chunks' blocks, plus one chunk); rows with top-k / top-p / min-p then run the rounds above
    in that one block and draw the unsplit kernel's token. A temperature-only row draws another token
    split than unsplit (the sums run by chunk), so the tokens for a seed are fixed by (batch, vocabulary,
    whether the call may filter) and the tables, the same on every target.
    Raises TypeError / ValueError for other dtypes or shapes, or both or neither of logits and probs."""
    if (logits is None) == (probs is None):
        raise ValueError("sample: give exactly one of logits and probs")
    x = probs if logits is None else logits
    src, rows, vocab = _rows(x, "sample")
    one_row = len(tuple(x.shape)) == 1
    out = empty_like(x, (rows,), "i32")
    params = [_row_param(v, x, rows, d, n, "sample") for v, d, n in
              ((temperature, "f32", "temperature"), (top_k, "i32", "top_k"), (top_p, "f32", "top_p"),
               (min_p, "f32", "min_p"))]
    s_lo, s_hi = _u32_pair(seed, "seed", "sample")
    o_lo, o_hi = _u32_pair(offset, "offset", "sample")
    x2, ld = _row_view(x, rows, vocab)
    chunks = split_chunks(rows, vocab, may_filter(top_k, top_p, min_p, vocab))
    if rows:
        mod = _common.stdlib_module("sampling", target_for(x, target))
        cap = list_cap(mod, x)
        kw = dict(T=src.name, PROBS=logits is None, CAP=cap, PRUNE=bool(SAMPLING_PRUNE),
                  shared=cap * SAMPLING_THREADS * 8,
                  stream=_common.stream_of(x), **_loads(src, x2, ld))
        if chunks > 1:
            part_m, part_i, part_s, arrive = _split_scratch(x, rows, chunks)
            mod.sample_split[(chunks, rows), SAMPLING_THREADS](
                x2, out, *params, vocab, ld, s_lo, s_hi, o_lo, o_hi, split_chunk(), part_m, part_i, part_s, arrive,
                **kw)
        else:
            mod.sample[rows, SAMPLING_THREADS](x2, out, *params, vocab, ld, s_lo, s_hi, o_lo, o_hi, **kw)
    return out.reshape(()) if one_row else out


def softmax(logits: Any, temperature: Any = 1.0, *, target: str = "auto") -> Any:
    """softmax(logits / temperature) over the last axis, as f32 of the input's shape and kind; one
    kernel, a block a row (three passes: max, sum, write; std.math's exp). ``temperature``: > 0, a
    scalar or one a row. Raises TypeError / ValueError for other dtypes or shapes, or a scalar
    temperature <= 0 or NaN (an array's values are not checked)."""
    src, rows, vocab = _rows(logits, "softmax")
    out = empty_like(logits, tuple(logits.shape), "f32")
    temp = _row_param(temperature, logits, rows, "f32", "temperature", "softmax")
    x2, ld = _row_view(logits, rows, vocab)
    if rows:
        mod = _common.stdlib_module("sampling_blocks", target_for(logits, target))
        mod.softmax[rows, SAMPLING_THREADS](x2, out, temp, vocab, ld, T=src.name, stream=_common.stream_of(logits),
                                            **_loads(src, x2, ld))
    return out


def top_k_mask_logits(logits: Any, top_k: Any, *, target: str = "auto") -> Any:
    """``logits`` with every value outside its row's top-k set (the values with fewer than top_k larger
    ones in the row: ties at the k-th value kept) replaced by -inf; same dtype, shape and kind. The
    k-th value is found without sorting: a bisection over the 2^32 order-preserving keys of f32 (32
    counting passes over the row, a block a row). ``top_k``: an integer scalar or one a row; <= 0 or
    >= vocab keeps the row. Raises TypeError / ValueError for other dtypes or shapes, or a top_k that is
    not an integer."""
    src, rows, vocab = _rows(logits, "top_k_mask_logits")
    out = empty_like(logits, tuple(logits.shape), src.name)
    k = _row_param(top_k, logits, rows, "i32", "top_k", "top_k_mask_logits")
    x2, ld = _row_view(logits, rows, vocab)
    if rows:
        mod = _common.stdlib_module("sampling_blocks", target_for(logits, target))
        mod.top_k_mask_logits[rows, SAMPLING_THREADS](x2, out, k, vocab, ld, T=src.name,
                                                      stream=_common.stream_of(logits), **_loads(src, x2, ld))
    return out


def top_p_renorm_probs(probs: Any, top_p: Any, *, target: str = "auto") -> Any:
    """``probs`` restricted to each row's top-p set (the tokens more probable than which the row holds
    less than top_p of its mass; ties kept) and renormalised to sum 1; 0 elsewhere. f32 of the input's
    shape and kind. The cut is found without sorting: a bisection over the f32 keys, 32 summing passes
    (a block a row). ``top_p``: in (0, 1], a scalar or one a row; 1 only renormalises. Raises
    TypeError / ValueError for other dtypes or shapes, or a scalar top_p <= 0 or NaN (an array's values
    are not checked; a row whose top_p is <= 0 comes back all zeros)."""
    src, rows, vocab = _rows(probs, "top_p_renorm_probs")
    out = empty_like(probs, tuple(probs.shape), "f32")
    p = _row_param(top_p, probs, rows, "f32", "top_p", "top_p_renorm_probs")
    x2, ld = _row_view(probs, rows, vocab)
    if rows:
        mod = _common.stdlib_module("sampling_blocks", target_for(probs, target))
        mod.top_p_renorm_probs[rows, SAMPLING_THREADS](x2, out, p, vocab, ld, T=src.name,
                                                       stream=_common.stream_of(probs), **_loads(src, x2, ld))
    return out


__all__ = ["SAMPLING_LISTS", "SAMPLING_LOADS", "SAMPLING_PRUNE", "SAMPLING_SPLIT", "SAMPLING_THREADS", "kernel_params", "list_cap", "may_filter",
           "split_chunk", "split_chunks", "sample", "softmax", "top_k_mask_logits", "top_p_renorm_probs"]
