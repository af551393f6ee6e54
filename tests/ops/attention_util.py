"""Helpers of the attention tests (test_attention.py, test_attention_sm90*.py, test_decode_*.py,
test_mla_sm90.py): float64 references (numpy; torch's SDPA in float64 on the GPU), the error bound,
random inputs, paged caches, and the CPU target's emulated standard-library modules.

Tolerance: the reference is computed in float64 from the inputs as given (already rounded to their
dtype). The kernel rounds P to the input dtype for the second product (relative error u_in per
weight, so up to u_in * sum_j p_j |v_j| <= u_in * max|v| in the output), exponentiates with the
machine's ex2.approx (relative error about 2^-22), accumulates in f32, and rounds the result once into
the output dtype (u_out |o|). The bound used: 2 u_in max|v| + u_out |o| + 1e-5 max|v|, and 1e-5
(+ |lse| 2^-20) for the log-sum-exp, which is kept in f32.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.frontend.program import stdlib_dir

from ..draws import fresh_rng

RNG = fresh_rng()
DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def reference(q, k, v, causal, scale, cu_q=None, cu_k=None):
    """(out, lse) in float64 for (B, S, H, D) inputs or packed varlen ones (lse: (B, H, Sq) or (H, total))."""
    if cu_q is not None:
        outs, lses = [], []
        for b in range(len(cu_q) - 1):
            o, l = reference(q[None, cu_q[b]:cu_q[b + 1]], k[None, cu_k[b]:cu_k[b + 1]],
                             v[None, cu_k[b]:cu_k[b + 1]], causal, scale)
            outs.append(o[0])
            lses.append(l[0])
        return np.concatenate(outs, 0), np.concatenate(lses, 1)
    G = q.shape[2] // k.shape[2]
    q64 = q.astype(np.float64).transpose(0, 2, 1, 3)
    k64 = np.repeat(k.astype(np.float64).transpose(0, 2, 1, 3), G, axis=1)
    v64 = np.repeat(v.astype(np.float64).transpose(0, 2, 1, 3), G, axis=1)
    s = q64 @ k64.transpose(0, 1, 3, 2) * scale
    Sq, Sk = s.shape[-2], s.shape[-1]
    if causal:
        s = np.where(np.arange(Sk)[None, :] > np.arange(Sq)[:, None] + Sk - Sq, -np.inf, s)
    mx = s.max(-1, keepdims=True) if Sk else np.full(s.shape[:-1] + (1,), -np.inf)
    safe = np.where(np.isfinite(mx), mx, 0.0)
    p = np.exp(s - safe)
    l = p.sum(-1, keepdims=True)
    out = np.where(l > 0, p @ v64 / np.where(l > 0, l, 1.0), 0.0)
    with np.errstate(divide="ignore"):
        lse = np.log(l[..., 0]) + safe[..., 0]
    return out.transpose(0, 2, 1, 3), lse


def check(out, lse, ref, ref_lse, v, dtype, lse_tol=0.0):
    """``out`` and ``lse`` within the module docstring's bounds of the float64 ``ref`` and ``ref_lse``;
    ``dtype``: the inputs' and the output's type name (v may be given widened); ``lse_tol``: added to
    the LSE's bound (a kernel's own share of its error, e.g. :func:`fold_lse_tol`)."""
    u_in = u_out = float(ml_dtypes.finfo(DTYPES[dtype]).eps) / 2
    vmax = float(np.abs(v.astype(np.float64)).max()) if v.size else 0.0
    check_bounds(out, lse, ref, ref_lse, 2 * u_in * vmax + u_out * np.abs(ref) + 1e-5 * vmax + 1e-30,
                 1e-5 + np.abs(ref_lse) * 2.0 ** -20 + lse_tol)


def check_bounds(out, lse, ref, ref_lse, tol, lse_tol):
    """Asserts that ``out`` is finite and within ``tol`` (broadcast to ref's shape) of ``ref`` elementwise
    (naming the worst element), that ``lse`` is -inf exactly where ``ref_lse`` is, and within ``lse_tol``
    of it elsewhere."""
    o = np.asarray(out, np.float64)
    assert np.isfinite(o).all(), "non-finite outputs"
    err = np.abs(o - ref)
    w = np.unravel_index(np.argmax(err - tol), err.shape)
    tw = np.broadcast_to(tol, err.shape)[w]
    assert (err <= tol).all(), f"out{list(w)} = {o[w]}, want {ref[w]} (error {err[w]:.3g} > {tw:.3g})"
    lse = np.asarray(lse, np.float64)
    fin = np.isfinite(ref_lse)
    assert (np.isneginf(lse) == ~fin).all(), "LSE -inf exactly where a row sees no key"
    lerr = np.abs(lse[fin] - ref_lse[fin])
    assert (lerr <= np.broadcast_to(lse_tol, ref_lse.shape)[fin]).all(), f"LSE error {lerr.max():.3g}"


def fold_lse_tol(keys: int, bn: int) -> float:
    """The LSE error an online softmax adds folding ``keys`` keys in tiles of ``bn`` in one block: each
    tile's step l = l * alpha + (the tile's sum) rounds up to three times in f32 (the rescale, the add,
    the tile's partial sums reassociated across lanes), so l's relative error, hence the LSE's absolute
    one, grows by at most 3 u32 a tile. (H100, std.mla_sm90 with one split of 4097 keys: 1.3e-5 at 64
    keys a tile, 2.4e-5 at 32, where the fixed bound above is ~1.5e-5.)"""
    return 3 * -(-keys // bn) * 2.0 ** -24


def qkv(B, Sq, Sk, H, HK, D, dtype):
    return (RNG.standard_normal((B, Sq, H, D)).astype(DTYPES[dtype]),
            RNG.standard_normal((B, Sk, HK, D)).astype(DTYPES[dtype]),
            RNG.standard_normal((B, Sk, HK, D)).astype(DTYPES[dtype]))


@pytest.fixture(scope="module")
def emulated():
    """A stand-in for kcompiler.ops._common.stdlib_module: std.NAME (std.attention, std.decode, std.mla,
    std.merge_states) on the CPU target with NVIDIA's warp-matrix instructions emulated, each compiled
    once: the ops then take their tensor-core paths."""
    mods = {}

    def module(name, target="cpu"):
        if name not in mods:
            mods[name] = kc.compile_file(stdlib_dir() / f"{name}.kc", target="cpu",
                                         target_options={"emulate_mma": True}, check_bounds=True)
        return mods[name]
    return module


def paged_cache(lens, page, HK, D, dtype, extra_pages=3):
    """A shuffled paged cache holding sequences of ``lens`` tokens: (k_cache, v_cache, block_table, the
    dense k and v per sequence)."""
    need = [-(-n // page) for n in lens]
    max_pages = max(max(need), 1) + 1
    pages = sum(need) + extra_pages
    order = RNG.permutation(pages)
    k_cache = RNG.standard_normal((pages, page, HK, D)).astype(dtype)
    v_cache = RNG.standard_normal((pages, page, HK, D)).astype(dtype)
    table = np.full((len(lens), max_pages), -1, np.int32)  # unused entries: never read
    dense, at = [], 0
    for b, n in enumerate(lens):
        table[b, :need[b]] = order[at:at + need[b]]
        at += need[b]
        dense.append((k_cache[table[b, :need[b]]].reshape(-1, HK, D)[:n],
                      v_cache[table[b, :need[b]]].reshape(-1, HK, D)[:n]))
    return k_cache, v_cache, table, dense


def decode_reference(q, dense, scale, ks=1.0, vs=1.0):
    outs, lses = [], []
    for b, (k, v) in enumerate(dense):
        o, l = reference(q[b:b + 1, None], (k.astype(np.float64) * ks)[None], (v.astype(np.float64) * vs)[None],
                         False, scale)
        outs.append(o[0, 0])
        lses.append(l[0, :, 0])
    return np.stack(outs), np.stack(lses)


def mla_reference(q_nope, q_pe, ckv, kpe, table, lens, page, scale):
    """float64 MLA decode: attention with keys [c, k_pe] and values c, queries [q_nope, q_pe]."""
    D = ckv.shape[-1]
    DR = kpe.shape[-1]
    q = np.concatenate([q_nope, q_pe], -1).astype(np.float64)
    ref, ref_lse = [], []
    for b, n in enumerate(lens):
        pages = table[b, :-(-n // page)]
        c = ckv[pages].reshape(-1, D)[:n].astype(np.float64)
        kp = kpe[pages].reshape(-1, DR)[:n].astype(np.float64)
        o, l = reference(q[b:b + 1, None], np.concatenate([c, kp], -1)[None, :, None], c[None, :, None], False, scale)
        ref.append(o[0, 0])
        ref_lse.append(l[0, :, 0])
    return np.stack(ref), np.stack(ref_lse)


def attention_in_layout(q, k, v, causal, layout, path, tiles=None):
    """ops.attention on (B, S, H, D) torch q, k, v passed in ``layout`` ('bshd' as they are, 'bhsd'
    transposed copies) by ``path`` (with ``tiles``, None: the defaults); returns (out as (B, S, H, D),
    lse)."""
    from kcompiler import ops
    if layout == "bshd":
        return ops.attention(q, k, v, causal=causal, return_lse=True, path=path, tiles=tiles)
    out, lse = ops.attention(*(x.transpose(1, 2).contiguous() for x in (q, k, v)), causal=causal,
                             layout="bhsd", return_lse=True, path=path, tiles=tiles)
    return out.transpose(1, 2), lse


def sdpa64(q, k, v, causal, scale):
    """torch SDPA in float64 of (B, S, H, D) tensors (GQA by repeating K/V heads, the causal mask
    bottom-right aligned); (out (B, Sq, H, D), lse (B, H, Sq))."""
    import torch

    G = q.shape[2] // k.shape[2]
    q64, k64, v64 = (x.double().transpose(1, 2) for x in (q, k, v))
    k64, v64 = k64.repeat_interleave(G, 1), v64.repeat_interleave(G, 1)
    Sq, Sk = q64.shape[2], k64.shape[2]
    mask = None
    if causal:
        mask = torch.arange(Sk, device=q.device)[None, :] <= torch.arange(Sq, device=q.device)[:, None] + Sk - Sq
    out = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, attn_mask=mask, scale=scale)
    s = q64 @ k64.transpose(-1, -2) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return out.transpose(1, 2), torch.logsumexp(s, -1)
