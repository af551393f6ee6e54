"""std.random: Philox 4x32-10 against Random123's known-answer vectors (kat_vectors, the three
philox4x32 10 lines) and an independent Python implementation of the SC'11 paper's algorithm on random
counters and keys; uniform24's exact values. Runs on the CPU target and CUDA (marked gpu)."""
from __future__ import annotations

import numpy as np

import kcompiler as kc

SRC = """
import std.random
kernel philox(ctr: ptr<vec<u32, 4>>, key: ptr<vec<u32, 2>>, out: ptr<vec<u32, 4>>, u: ptr<vec<f32, 4>>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        out[i] = random.philox4x32_10(ctr[i], key[i]);
        u[i] = random.uniform4(ctr[i], key[i]);
    }
}
"""

#: Random123's kat_vectors, "philox4x32 10": counter (4 words), key (2 words), expected (4 words).
KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


def philox_ref(ctr, key):
    """Philox4x32-10 from the paper in Python integers (M0 0xD2511F53, M1 0xCD9E8D57, Weyl 0x9E3779B9,
    0xBB67AE85)."""
    c0, c1, c2, c3 = (int(v) for v in ctr)
    k0, k1 = (int(v) for v in key)
    mask = 0xFFFFFFFF
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & mask, (k1 + 0xBB67AE85) & mask
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & mask, (p0 >> 32) ^ c3 ^ k1, p0 & mask
    return c0, c1, c2, c3


def run(target, ctr, key):
    m = kc.compile(SRC, target=target, path="random_test.kc")
    n = ctr.shape[0]
    out, u = np.empty((n, 4), np.uint32), np.empty((n, 4), np.float32)
    m.philox[(n + 127) // 128, 128](ctr, key, out, u, n)
    return out, u


def test_reference_matches_random123_kat():
    for ctr, key, want in KAT:
        assert philox_ref(ctr, key) == want


def test_philox_known_answers_and_reference(target):
    rng = np.random.default_rng(25)
    n = 1000
    ctr = rng.integers(0, 2 ** 32, (n, 4), dtype=np.uint32)
    key = rng.integers(0, 2 ** 32, (n, 2), dtype=np.uint32)
    for i, (c, k, _) in enumerate(KAT):
        ctr[i], key[i] = c, k
    out, u = run(target, ctr, key)
    for i, (_, _, want) in enumerate(KAT):
        assert tuple(int(v) for v in out[i]) == want
    ref = np.array([philox_ref(c, k) for c, k in zip(ctr, key)], np.uint32)
    np.testing.assert_array_equal(out, ref)
    # uniform24: the low 24 bits times 2^-24, exactly; in [0, 1)
    np.testing.assert_array_equal(u, ((ref & 0xFFFFFF).astype(np.float64) * 2.0 ** -24).astype(np.float32))
    assert u.min() >= 0.0 and u.max() < 1.0
