"""std.sampling's candidate lists (ops.sampling.SAMPLING_LISTS, the kernels' CAP): after a full pass
each thread keeps its candidates (weight, index) in shared memory and the later rejection rounds read
them instead of the row. The lists change how a round finds its sums, never their order: the sampled
token must be bit-identical to the kernels' first version (CAP 0) for every CAP, seed, vocabulary,
dtype and top-k / top-p / min-p combination (the CPU target; the same bits on a GPU by construction,
checked there by the gpu test). Also: sample_split, which runs the same rounds after a split maximum,
draws the unsplit kernel's token for every row with top-k, top-p or min-p."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kcompiler.ops import sampling as S
from .sampling_util import grid_logits, ref_allowed, ref_probs, row_params, to_torch

BF16 = ml_dtypes.bfloat16


def draws(x, params, seeds, probs=False, target="cpu"):
    """Tokens of ops.sample for each seed (offset = seed % 3), stacked (seeds, rows)."""
    temp, top_k, top_p, min_p = params
    kw = dict(probs=x) if probs else dict(logits=x)
    return np.stack([np.asarray(S.sample(**kw, temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, seed=s,
                                         offset=s % 3, target=target)) for s in seeds])


def case(rng, rows, vocab, dtype, spread):
    """Logits: a 1/8 grid (ties) plus noise, scaled by ``spread`` (small: flat rows, many candidates
    a thread after a rejection, the lists overflow; large: few); -inf in two rows."""
    x = grid_logits(rng, rows, vocab, np.float32) * spread + rng.normal(0, 0.05, (rows, vocab))
    if rows > 2:
        x[1, ::7] = -np.inf                    # weight 0: never drawn, skipped by PRUNE's test
        x[2, :] = -np.inf
        x[2, vocab // 2] = 0.0
    return x.astype(dtype)


@pytest.mark.slow(sample=1)
@pytest.mark.parametrize("dtype", [np.float32, BF16, "probs"], ids=["f32", "bf16", "probs"])
@pytest.mark.parametrize("vocab", [7, 1001, 4099, 32003])
def test_lists_change_no_bits(monkeypatch, dtype, vocab, full_sweep):
    """CAP 0 (no lists) against the host's CAP and CAP 1 and 3 (lists that overflow: those threads read
    the row again), 12 seeds (4 by default: CI time; -m slow: 12), 16 rows of every combination of
    top-k / top-p / min-p (and rows without any), flat and peaked rows: the same tokens, each in the
    allowed set of the sorting reference."""
    rng = np.random.default_rng(vocab)
    rows = 16
    params = row_params(rng, rows, vocab)
    params[1][::3] = np.minimum(params[1][::3], 3)          # small top-k: more rounds
    for spread in (0.3, 2.0):
        x = case(rng, rows, vocab, np.float32 if dtype == "probs" else dtype, spread)
        if dtype == "probs":
            x = ref_probs(x, params[0]).astype(np.float32)
        seeds = range(12 if full_sweep else 4)
        monkeypatch.setattr(S, "SAMPLING_LISTS", 0)
        monkeypatch.setattr(S, "SAMPLING_PRUNE", False)         # the kernels' first version
        want = draws(x, params, seeds, probs=dtype == "probs")
        ok = ref_allowed(ref_probs(x.astype(np.float32), params[0]) if dtype != "probs" else x.astype(np.float64),
                         *params[1:])
        assert all(ok[np.arange(rows), w].all() for w in want)
        for cap, prune in ((16, True), (1, True), (3, False), (0, True)):
            monkeypatch.setattr(S, "SAMPLING_LISTS", cap)
            monkeypatch.setattr(S, "SAMPLING_PRUNE", prune)
            np.testing.assert_array_equal(draws(x, params, seeds, probs=dtype == "probs"), want,
                                          err_msg=f"CAP {cap}, PRUNE {prune}, spread {spread}")


def test_list_cap_follows_shared_memory(monkeypatch):
    """The host's CAP: SAMPLING_LISTS where the device's shared memory a block holds the lists (and the
    kernels' 1 KiB), else as many slots as fit (AMD's 64 KiB LDS: 7), never negative."""
    class Dev:
        shared_memory_per_block = 64 * 1024
    monkeypatch.setattr(S._common, "device_of", lambda mod, x: Dev)
    assert S.list_cap(None, None) == 7
    Dev.shared_memory_per_block = 227 * 1024
    assert S.list_cap(None, None) == S.SAMPLING_LISTS == 16
    Dev.shared_memory_per_block = 512
    assert S.list_cap(None, None) == 0


@pytest.mark.slow(sample=1)  # one dtype by default (CI time); -m slow: both
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_split_filtered_rows_draw_the_unsplit_tokens(monkeypatch, dtype):
    """sample_split (vocabulary 4099 in chunks of 512) and sample, both with lists: rows with top-k,
    top-p or min-p draw the same token (the maximum is exact in any order, the rounds are the same);
    temperature-only rows may differ but lie in the row."""
    rng = np.random.default_rng(7)
    rows, vocab = 16, 4099
    params = row_params(rng, rows, vocab)
    x = case(rng, rows, vocab, dtype, 1.0)
    want = draws(x, params, range(6))
    monkeypatch.setitem(S.SAMPLING_SPLIT, "max_rows", 64)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "chunk", 512)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "min_vocab", 0)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "filtered", True)
    assert S.split_chunks(rows, vocab) == 9
    got = draws(x, params, range(6))
    filtered = (params[1] > 0) | (params[2] < 1) | (params[3] > 0)
    assert filtered.sum() == 14
    np.testing.assert_array_equal(got[:, filtered], want[:, filtered])
    assert ((got >= 0) & (got < vocab)).all()


def test_default_split_rule():
    """SAMPLING_SPLIT's measured rule: split at batch <= 16 and vocabulary >= 64K (chunks of 16384),
    else one block a row."""
    assert S.split_chunks(1, 128256) == 8 and S.split_chunks(16, 256000) == 16
    assert S.split_chunks(17, 256000) == 1 and S.split_chunks(1, 32000) == 1 and S.split_chunks(256, 128256) == 1
    assert S.split_chunks(1, 128256, filtered=True) == 1
    # a call may filter where any of top_k, top_p, min_p is an array or a scalar that is on
    assert not S.may_filter(0, 1.0, 0.0, 100) and not S.may_filter(100, 1.5, -1.0, 100)
    assert S.may_filter(50, 1.0, 0.0, 100) and S.may_filter(0, 0.9, 0.0, 100) and S.may_filter(0, 1.0, 0.1, 100)
    assert S.may_filter(np.zeros(2, np.int32), 1.0, 0.0, 100)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_cuda_lists_draw_the_cpu_tokens(monkeypatch, dtype):
    """On CUDA with the host's CAP (128 KiB of shared memory a block) and PRUNE, split (the default at
    batch <= 16, vocab >= 64K) and unsplit: the tokens of the CPU target without lists and PRUNE, at
    vocabularies up to 256000; and a CUDA graph captured and replayed on a side stream (the split
    kernel's scratch fresh in the capture) gives the eager call's tokens."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(99)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "filtered", True)   # the split kernel's rounds too
    for rows, vocab in ((1, 256000), (4, 128256), (24, 32003)):
        params = row_params(rng, rows, vocab)
        if rows == 1:
            params[1][:], params[2][:] = 50, 0.9                # the benchmark's top-k + top-p row
        x = case(rng, rows, vocab, dtype, 1.0)
        monkeypatch.setattr(S, "SAMPLING_LISTS", 0)
        monkeypatch.setattr(S, "SAMPLING_PRUNE", False)
        cpu = draws(x, params, range(3))                    # the kernels' first version (split as on CUDA)
        monkeypatch.setattr(S, "SAMPLING_LISTS", 16)
        monkeypatch.setattr(S, "SAMPLING_PRUNE", True)
        t = to_torch(torch, x).cuda()
        tp = [torch.as_tensor(p).cuda() for p in params]
        got = np.stack([S.sample(t, temperature=tp[0], top_k=tp[1], top_p=tp[2], min_p=tp[3], seed=s,
                                 offset=s % 3).cpu().numpy() for s in range(3)])
        assert (S.split_chunks(rows, vocab, True) > 1) == (rows <= 16)   # split and unsplit ("filtered" set)
        np.testing.assert_array_equal(got, cpu, err_msg=f"{rows}x{vocab}")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            eager = S.sample(t, temperature=tp[0], top_k=tp[1], top_p=tp[2], min_p=tp[3], seed=5, offset=1)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                out = S.sample(t, temperature=tp[0], top_k=tp[1], top_p=tp[2], min_p=tp[3], seed=5, offset=1)
            for _ in range(2):
                g.replay()
        torch.cuda.synchronize()
        np.testing.assert_array_equal(out.cpu().numpy(), eager.cpu().numpy())
