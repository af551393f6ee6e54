"""The tensor-core decode's variants (kcompiler.ops.decode.DECODE_TC_VARIANTS: EAGER rings, BN 16 and 64, 3
stages, 2 and 8 warps, one-wave split choice, GATHER's pages read a step ahead) at GQA 8:1 and 16:1 on the CPU target's emulation of mma.sync,
ldmatrix and cp.async, against test_attention.py's float64 reference and bounds; the variant table and
the split choice's MIN_WAVES; their sm_90a PTX through ptxas (registers, no spills)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from kcompiler import ops
from kcompiler.ops import _common, decode
from kcompiler.frontend.program import stdlib_dir
from ..ptxas_util import needs_ptxas, ptxas
from .attention_util import DTYPES, RNG, check, decode_reference, emulated, paged_cache  # noqa: F401 (fixture)

def _kernel_of(name: str) -> tuple:
    """A variant's kernel: its compile-time values (MIN_WAVES is the host's split choice only)."""
    return tuple(sorted((k, v) for k, v in ops.DECODE_TC_VARIANTS[name].items() if k != "MIN_WAVES"))


#: one variant of each kernel (e.g. ring_1wave runs ring's kernel with another split choice)
KERNEL_VARIANTS = [n for i, n in enumerate(ops.DECODE_TC_VARIANTS)
                   if _kernel_of(n) not in [_kernel_of(m) for m in list(ops.DECODE_TC_VARIANTS)[:i]]]


@pytest.fixture(autouse=True)
def _fresh_decode_plans():
    """Each test starts and ends with no prepared call (ops.decode.PLANS)."""
    decode.PLANS.clear()
    yield
    decode.PLANS.clear()


@pytest.mark.slow(sample=2)
@pytest.mark.parametrize("variant", KERNEL_VARIANTS)
@pytest.mark.parametrize("G,page,splits", [(8, 16, None), (16, 64, 3)], ids=["8to1-page16", "16to1-page64-split3"])
def test_tc_decode_variant_emulated(monkeypatch, emulated, variant, G, page, splits):  # noqa: F811
    """Each variant's kernel on the emulation: odd lengths over several pages and steps (a last step
    past the sequence's end), a sequence of one key, an empty one (LSE -inf, output 0), one shorter
    than a chunk; the default split choice and 3 splits (merge_states)."""
    monkeypatch.setattr(_common, "stdlib_module", emulated)
    HK, D = 2, 64
    lens = [203, 0, 1, 77, 130]
    bf = DTYPES["bf16"]
    k_cache, v_cache, table, dense = paged_cache(lens, page, HK, D, bf)
    q = RNG.standard_normal((len(lens), HK * G, D)).astype(bf)
    out, lse = ops.paged_decode(q, k_cache, v_cache, table, np.array(lens, np.int32), num_splits=splits,
                                tensor_cores=True, tc_tiles=variant, return_lse=True, target="cpu")
    ref, ref_lse = decode_reference(q, dense, D ** -0.5)
    check(out, lse, ref, ref_lse, v_cache, "bf16")


@pytest.mark.slow(sample=1)  # CI time: a deterministic sample by default, all with -m slow
@pytest.mark.parametrize("variant,page,D", [("ring_gather", 8, 16), ("w2_bn64", 8, 16), ("ring_gather", 16, 64)],
                         ids=["ring_gather-page8-D16", "w2_bn64-page8-D16", "ring_gather-page16-D64"])
def test_tc_decode_gather_emulated(monkeypatch, emulated, variant, page, D):  # noqa: F811
    """GATHER's pages a step ahead (BN / PAGE of them) where a lane's pieces of a step lie in one page
    each (PAGE x D / 8 a multiple of 32: the page picked at compile time) and where they do not (pages
    of 8 at D 16: picked by the row; BN 64 takes 8 pages a step): GQA 8:1, lengths ending mid-page
    and mid-step, one key, none, a split into 3 (merge_states) and the split choice's own count."""
    split_and_not_emulated(monkeypatch, emulated, 8, page, D, [211, 0, 1, 64, 9], variant)


def split_and_not_emulated(monkeypatch, emulated, G, page, D, lens, variant=None):
    """ops.paged_decode on the tensor-core path's emulation (2 KV heads of G query heads, bf16, pages of
    ``page``, ``lens`` keys, tc_tiles ``variant``) with the split choice's count and 3 splits
    (merge_states), against the float64 reference."""
    monkeypatch.setattr(_common, "stdlib_module", emulated)
    HK = 2
    bf = DTYPES["bf16"]
    k_cache, v_cache, table, dense = paged_cache(lens, page, HK, D, bf)
    q = RNG.standard_normal((len(lens), HK * G, D)).astype(bf)
    ref, ref_lse = decode_reference(q, dense, D ** -0.5)
    for splits in (None, 3):
        out, lse = ops.paged_decode(q, k_cache, v_cache, table, np.array(lens, np.int32), num_splits=splits,
                                    tensor_cores=True, tc_tiles=variant, return_lse=True, target="cpu")
        check(out, lse, ref, ref_lse, v_cache, "bf16")


def test_tc_decode_one_wave_variant_emulated(monkeypatch, emulated):  # noqa: F811
    """A MIN_WAVES variant through ops (its key kept out of the kernel's compile-time values): GQA 8:1,
    pages of 16, lengths that split (the emulation answers with an H100's 132 slots) and an empty one."""
    monkeypatch.setattr(_common, "stdlib_module", emulated)
    HK, D, G, page = 2, 64, 8, 16
    lens = [600, 0, 33]
    bf = DTYPES["bf16"]
    k_cache, v_cache, table, dense = paged_cache(lens, page, HK, D, bf)
    q = RNG.standard_normal((len(lens), HK * G, D)).astype(bf)
    out, lse = ops.paged_decode(q, k_cache, v_cache, table, np.array(lens, np.int32), tensor_cores=True,
                                tc_tiles="eager_1wave", return_lse=True, target="cpu")
    ref, ref_lse = decode_reference(q, dense, D ** -0.5)
    check(out, lse, ref, ref_lse, v_cache, "bf16")


def test_split_count_min_waves():
    """GQA 8:1 at B 32, H 32 (128 (batch, KV head) blocks): one block an SM of 132 splits in 2 by default
    (a full wave at least), not at all with MIN_WAVES 0.9 (128 of 132 slots is one wave 97 % used);
    three blocks an SM (396 slots) take 3 splits. GQA 4:1 (256 blocks) is not split either way."""
    assert decode.split_count(128, 8192, 132) == 2
    assert decode.split_count(128, 8192, 132, min_waves=0.9) == 1
    assert decode.split_count(128, 8192, 396, min_waves=0.9) == 3
    assert decode.split_count(256, 8192, 132) == decode.split_count(256, 8192, 132, min_waves=0.9) == 1


def test_tc_tiles_by_g_and_by_name(monkeypatch):
    """decode_tc_tiles: the default by G is the entry of the least key at or above G (the last past
    them), a name picks a variant, a dict overrides the default's keys; changing one line of
    DECODE_TC_DEFAULT changes what paged_decode's tensor-core path takes; an unknown name is refused."""
    monkeypatch.setattr(decode, "DECODE_TC_DEFAULT", {4: "ring", 8: "bn16", 16: "w8"})
    assert ops.decode_tc_tiles(2) == ops.DECODE_TC_VARIANTS["ring"]
    assert ops.decode_tc_tiles(4) == ops.DECODE_TC_VARIANTS["ring"]
    assert ops.decode_tc_tiles(5) == ops.DECODE_TC_VARIANTS["bn16"]
    assert ops.decode_tc_tiles(12) == ops.decode_tc_tiles(16) == ops.DECODE_TC_VARIANTS["w8"]
    assert ops.decode_tc_tiles(32) == ops.DECODE_TC_VARIANTS["w8"]
    assert ops.decode_tc_tiles(8, "s3") == ops.DECODE_TC_VARIANTS["s3"]
    assert ops.decode_tc_tiles(8, dict(STAGES=3)) == dict(ops.DECODE_TC_VARIANTS["bn16"], STAGES=3)
    tiles, threads, _, shared = decode._tc_tiles(None, 8, 128, 2, "paged_decode")
    assert tiles == dict(RING=True, WARPS=4, BN=16, STAGES=2, EAGER=True, GATHER=False, MIN_WAVES=1.0) \
        and threads == 128
    tiles, _, _, _ = decode._tc_tiles("ring_gather", 8, 128, 2, "paged_decode")
    assert tiles == dict(RING=True, WARPS=4, BN=32, STAGES=2, EAGER=False, GATHER=True, MIN_WAVES=0.9)
    assert shared == 16 * 136 * 2 + 4 * 2 * 2 * 16 * 136 * 2  # Q + the rings (72 KB: 3 blocks an H100 SM)
    with pytest.raises(ValueError, match="tc_tiles 'nope' is none of"):
        ops.decode_tc_tiles(8, "nope")
    with pytest.raises(ValueError, match="MIN_WAVES in"):
        decode._tc_tiles(dict(MIN_WAVES=0), 8, 128, 2, "paged_decode")


@needs_ptxas
@pytest.mark.slow(sample=2)
@pytest.mark.parametrize("variant", KERNEL_VARIANTS)
def test_tc_decode_variant_ptx(variant):
    """Each variant's sm_90a PTX at GQA 8:1, D 128, pages of 16, assembles with no spill, in registers
    that let an SM hold as many blocks as its shared memory does (three blocks of 128 threads of
    BN 16: 168 a thread, what ops' split choice assumes), with cp.async, ldmatrix and mma.sync; GATHER
    (pages of 16 < BN) reads the block table BN / 16 times a step, not once a copy."""
    from kcompiler.pipeline import emit_file

    params = dict(T="bf16", KT="bf16", OUT="f32", D=128, G=8, PAGE=16, SPLIT=True, TC=True,
                  **{k: v for k, v in ops.DECODE_TC_VARIANTS[variant].items() if k != "MIN_WAVES"})
    ptx = emit_file(stdlib_dir() / "decode.kc", "asm", "nvptx", "sm_90a", kernel="paged_decode", comptime=params)
    for op in ("mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned.m8n8.x4.trans", "cp.async.cg"):
        assert op in ptx, op
    log = ptxas(ptx, verbose=True)
    assert " 0 bytes spill stores" in log, log
    _, threads, _, shared = decode._tc_tiles(variant, 8, 128, 2, "paged_decode")
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    assert 65536 // (threads * regs) >= min(233472 // (shared + 1024), 2048 // threads), log
    if params.get("GATHER") and params["BN"] > 16:
        loop = ptx[ptx.index("cp.async.wait_group"):]  # the steps' loop, past the prologue
        assert loop.count("ld.global.b32") <= params["BN"] // 16, loop.count("ld.global.b32")


@pytest.mark.gpu
@pytest.mark.parametrize("page", [16, 64])
def test_tc_decode_variants_gpu(page):
    """Every variant (and ops' default) on the GPU at GQA 8:1 and 16:1, D 128: odd lengths over many
    pages and steps, one key, none (LSE -inf, output 0); the split choice's own count and 3 splits."""
    import torch

    lens = [1, 4097, 333, 0, 2048, 77]
    D = 128
    for HK, G in ((4, 8), (2, 16)):
        k_cache, v_cache, table, _ = paged_cache(lens, page, HK, D, np.float32)
        kc_t, vc_t = torch.from_numpy(k_cache).cuda().bfloat16(), torch.from_numpy(v_cache).cuda().bfloat16()
        kc, vc = kc_t.float().cpu().numpy(), vc_t.float().cpu().numpy()
        dense = [(kc[table[b, :-(-n // page)]].reshape(-1, HK, D)[:n],
                  vc[table[b, :-(-n // page)]].reshape(-1, HK, D)[:n]) for b, n in enumerate(lens)]
        q = torch.randn(len(lens), HK * G, D, device="cuda", dtype=torch.bfloat16)
        ref, ref_lse = decode_reference(q.float().cpu().numpy(), dense, D ** -0.5)
        for variant in [None] + list(ops.DECODE_TC_VARIANTS):
            for splits in (None, 3):
                out, lse = ops.paged_decode(q, kc_t, vc_t, torch.from_numpy(table).cuda(),
                                            torch.tensor(lens, dtype=torch.int32, device="cuda"), num_splits=splits,
                                            tensor_cores=True, tc_tiles=variant, return_lse=True)
                try:
                    check(out.cpu().float().numpy(), lse.cpu().numpy(), ref, ref_lse, vc, "bf16")
                except AssertionError as e:
                    raise AssertionError(f"variant {variant}, G {G}, page {page}, splits {splits}: {e}") from None


def test_tc_tiles_bases_key():
    """BASES reaches the kernel's compile-time values only where a variant asks for it: the default at
    GQA 4:1 and 8:1 (ring_gather_bases), not GQA 16:1's (ring, whose kernel's key stays as it was)."""
    tiles, _, _, _ = decode._tc_tiles("ring_gather_bases", 8, 128, 2, "paged_decode")
    assert tiles == dict(RING=True, WARPS=4, BN=32, STAGES=2, EAGER=False, GATHER=True, MIN_WAVES=0.9, BASES=True)
    assert decode._tc_tiles(None, 8, 128, 2, "paged_decode")[0] == tiles
    assert decode._tc_tiles(None, 4, 128, 2, "paged_decode")[0] == tiles
    assert "BASES" not in decode._tc_tiles(None, 16, 128, 2, "paged_decode")[0]


# CI time: 4:1 by default (GQA 8:1 runs on the emulation by default in test_tc_decode_variant_emulated and
# test_tc_decode_gather_emulated); -m slow: both
@pytest.mark.parametrize("G,page,D", [(4, 16, 64), pytest.param(8, 16, 64, marks=pytest.mark.slow(sample=0))],
                         ids=["4to1-p16", "8to1-p16"])
def test_tc_decode_default_emulated(monkeypatch, emulated, G, page, D):  # noqa: F811
    """The default tensor-core decode (ring_gather_bases at GQA 4:1 and 8:1: GATHER's pages a step
    ahead, BASES' unchecked full steps beside the bounded last one) on the emulation: lengths ending
    mid-page and mid-step, past several full steps, one key, none; the split choice and 3 splits."""
    assert ops.decode_tc_tiles(G) == ops.DECODE_TC_VARIANTS["ring_gather_bases"]
    split_and_not_emulated(monkeypatch, emulated, G, page, D, [197, 0, 1, 64, 130])


@needs_ptxas
@pytest.mark.slow(sample=1)  # CI time: one case by default
@pytest.mark.parametrize("variant,twin,page,D,fast", [
    ("ring_gather_bases", "ring_gather", 16, 128, True),   # GATHER, 2 pages a step
    ("ring_bases", "ring", 64, 128, True),                 # one page a step (BN 32 divides 64)
    ("ring_bases", "ring", 16, 128, False),                # pages smaller than BN without GATHER
    ("ring_gather_bases", "ring_gather", 16, 80, False),   # 10 pieces a row: no column fixed a lane
], ids=["gather-p16", "p64", "p16-no-gather", "D80"])
def test_tc_decode_bases_ptx(variant, twin, page, D, fast):
    """Where BASES applies, the kernel holds a second, unchecked form of the copies (full steps) beside
    the bounded one: twice the twin's cp.async; elsewhere the same PTX as the twin. Both assemble for
    sm_90a without spills."""
    from kcompiler.pipeline import emit_file

    def ptx_of(name):
        params = dict(T="bf16", KT="bf16", OUT="bf16", D=D, G=8, PAGE=page, SPLIT=False, TC=True,
                      **{k: v for k, v in ops.DECODE_TC_VARIANTS[name].items() if k != "MIN_WAVES"})
        return emit_file(stdlib_dir() / "decode.kc", "asm", "nvptx", "sm_90a", kernel="paged_decode", comptime=params)
    mine, theirs = ptx_of(variant), ptx_of(twin)
    n, m = mine.count("cp.async.cg"), theirs.count("cp.async.cg")
    assert n == (2 * m if fast else m), (n, m)
    assert " 0 bytes spill stores" in ptxas(mine, verbose=True)
