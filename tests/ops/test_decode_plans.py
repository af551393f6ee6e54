"""ops.paged_decode and ops.mla_decode called again on the same shapes (the prepared calls of
kcompiler.ops.decode.PLANS), lengths the host does not read (on a GPU, without max_seq_len) and lengths
past the block table (the kernels clamp them), on the CPU target against float64 (test_attention.py's
references and bounds)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kcompiler import ops
from .attention_util import DTYPES, RNG, check, decode_reference, mla_reference, paged_cache


@pytest.fixture(autouse=True)
def _fresh_decode_plans():
    """Each test starts and ends with no prepared call (ops.decode.PLANS)."""
    from kcompiler.ops import decode
    decode.PLANS.clear()
    yield
    decode.PLANS.clear()


def test_paged_decode_prepared_calls_cpu(monkeypatch):
    """A second call of the same shapes takes the prepared call (ops.decode.PLANS: no checks, no
    choices) and still computes each call's own inputs: new q, new and shorter lengths, with and
    without max_seq_len and split; FP8 with per-head scale arrays and with number scales (kept as
    constants); lengths past the block table's capacity still refused; a non-contiguous q takes the
    checked path and adds no plan."""
    from kcompiler.ops import decode
    HK, G, D, page = 2, 2, 64, 16
    lens = [45, 20, 130]  # the pages of each sequence: the later calls' lengths stay within them
    bf, f8 = DTYPES["bf16"], ml_dtypes.float8_e4m3fn
    k_cache, v_cache, table, _ = paged_cache(lens, page, HK, D, np.float32)
    real = decode.paged_lengths
    for fp8, ks, vs in ((False, None, None), (True, RNG.uniform(0.05, 0.2, HK).astype(np.float32),
                                              RNG.uniform(0.05, 0.2, HK).astype(np.float32)), (True, 0.125, 0.25)):
        kc, vc = ((k_cache * 8).astype(f8), (v_cache * 8).astype(f8)) if fp8 else (k_cache.astype(bf),
                                                                                  v_cache.astype(bf))
        kd = kc.astype(np.float64) * (np.asarray(ks, np.float64).reshape(-1)[None, None, :, None] if fp8 else 1)
        vd = vc.astype(np.float64) * (np.asarray(vs, np.float64).reshape(-1)[None, None, :, None] if fp8 else 1)
        for splits in (None, 2):
            decode.PLANS.clear()
            checked = []
            monkeypatch.setattr(decode, "paged_lengths", lambda *a: checked.append(1) or real(*a))
            for call, (n_lens, given) in enumerate((([45, 20, 130], None), ([40, 0, 129], 140), ([1, 16, 17], None))):
                q = RNG.standard_normal((len(lens), HK * G, D)).astype(bf)
                out, lse = ops.paged_decode(q, kc, vc, table, np.array(n_lens, np.int32), k_scale=ks, v_scale=vs,
                                            num_splits=splits, max_seq_len=given, return_lse=True, target="cpu")
                assert len(checked) == 1 and len(decode.PLANS) == 1, (call, checked, len(decode.PLANS))
                dense = [(kd[table[b, :-(-n // page)]].reshape(-1, HK, D)[:n],
                          vd[table[b, :-(-n // page)]].reshape(-1, HK, D)[:n]) for b, n in enumerate(n_lens)]
                ref, ref_lse = decode_reference(q, dense, D ** -0.5)
                check(out, lse, ref, ref_lse, vd, "bf16")
            with pytest.raises(ValueError, match="seq_lens must lie in 0 .. max_pages"):
                ops.paged_decode(q, kc, vc, table, np.array([1, 2, table.shape[1] * page + 1], np.int32), k_scale=ks,
                                 v_scale=vs, num_splits=splits, target="cpu")
            wide = np.zeros((len(lens), 2 * HK * G, D), bf)
            wide[:, ::2] = q
            out = ops.paged_decode(wide[:, ::2], kc, vc, table, np.array([1, 16, 17], np.int32), k_scale=ks,
                                   v_scale=vs, num_splits=splits, target="cpu")
            assert len(decode.PLANS) == 1 and len(checked) == 2
            check(out, lse, ref, ref_lse, vd, "bf16")


@pytest.mark.parametrize("op", ["paged", "mla"])
def test_decode_lengths_past_the_block_table_are_clamped_cpu(op):
    """Lengths the host does not check (max_seq_len given; on a GPU, not given either) are taken into
    0 .. max_pages * page_size by the kernels: a sequence claiming more keys than its row of the block
    table holds attends to the whole row (not the next sequence's pages), a negative one to nothing."""
    HK, D, page = 2, 64, 16
    lens = [32, 20]
    bf = DTYPES["bf16"]
    k_cache, v_cache, table, dense = paged_cache(lens, page, HK, D, bf)
    table = np.ascontiguousarray(table[:, :2])  # max_pages 2: sequence 0 fills its row
    cap = 2 * page
    if op == "paged":
        q = RNG.standard_normal((2, HK, D)).astype(bf)
        out, lse = ops.paged_decode(q, k_cache, v_cache, table, np.array([cap + 25, -3], np.int32), max_seq_len=64,
                                    return_lse=True, target="cpu")
        ref, ref_lse = decode_reference(q[:1], dense[:1], D ** -0.5)
        check(out[:1], lse[:1], ref, ref_lse, v_cache, "bf16")
    else:
        ckv = np.ascontiguousarray(k_cache[:, :, 0])
        kpe = RNG.standard_normal((ckv.shape[0], page, 16)).astype(bf)
        q_nope, q_pe = RNG.standard_normal((2, 2, D)).astype(bf), RNG.standard_normal((2, 2, 16)).astype(bf)
        out, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, np.array([cap + 25, -3], np.int32), scale=0.1,
                                  max_seq_len=64, return_lse=True, target="cpu")
        ref, ref_lse = mla_reference(q_nope[:1], q_pe[:1], ckv, kpe, table, [cap], page, 0.1)
        check(out[:1], lse[:1], ref, ref_lse, ckv, "bf16")
    assert np.isneginf(lse[1]).all()


def test_decode_lengths_on_a_gpu_are_not_read():
    """Without max_seq_len, lengths on a GPU (here an object with __cuda_array_interface__) are not read
    on the host: the splits are planned for the block table's capacity; host lengths are read and
    checked; a given max_seq_len is taken as it is."""
    from kcompiler.ops import decode

    class OnDevice:
        __cuda_array_interface__ = dict(shape=(3,), typestr="<i4", data=(0, False), version=3)

        def __array__(self, *a, **k):
            raise AssertionError("read on the host")

    assert decode.max_len_of(OnDevice(), None, 4096, "f") == 4096
    assert decode.max_len_of(OnDevice(), 300, 4096, "f") == 300
    assert decode.max_len_of(np.array([5, 77, 0], np.int32), None, 4096, "f") == 77
    with pytest.raises(ValueError, match="seq_lens must lie in 0 .. max_pages"):
        decode.max_len_of(np.array([5, -1], np.int32), None, 4096, "f")


def test_mla_decode_prepared_calls_cpu():
    """mla_decode's second and third calls of one shape take the prepared call (ops.decode.PLANS) and
    compute their own inputs (new queries, new lengths, max_seq_len given or not)."""
    from kcompiler.ops import decode
    B, H, D, DR, page = 3, 4, 64, 16, 16
    lens = [37, 9, 70]  # the pages of each sequence: the later calls' lengths stay within them
    bf = DTYPES["bf16"]
    ckv, _, table, _ = paged_cache(lens, page, 1, D, bf)
    ckv = np.ascontiguousarray(ckv[:, :, 0])
    kpe = RNG.standard_normal((ckv.shape[0], page, DR)).astype(bf)
    scale = (128 + 64) ** -0.5
    for n_lens, given in (([37, 9, 70], None), ([30, 0, 64], 64), ([1, 1, 1], None)):
        q_nope = RNG.standard_normal((B, H, D)).astype(bf)
        q_pe = RNG.standard_normal((B, H, DR)).astype(bf)
        out, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, np.array(n_lens, np.int32), scale=scale,
                                  num_splits=2, max_seq_len=given, return_lse=True, target="cpu")
        assert len(decode.PLANS) == 1
        check(out, lse, *mla_reference(q_nope, q_pe, ckv, kpe, table, n_lens, page, scale), ckv, "bf16")
