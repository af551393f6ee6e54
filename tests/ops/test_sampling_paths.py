"""std.sampling's paths: the vector loads (each thread owns runs of VEC contiguous elements, U runs
loaded a loop iteration, one wide load a run where rows are 16-byte aligned) on odd vocabularies (a
partial run, a partial tile), rows not 16-byte aligned, f32 and bf16, top-k/top-p/min-p combinations;
and sample_split (a row over several blocks). The sampled token is checked against the sorting
reference of sampling_util.py; U and the alignment must change no bit (they change only how elements
are loaded), and a strided or misaligned view must draw what its packed copy draws."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.frontend.program import stdlib_dir
from kcompiler.ops import sampling as S
from .sampling_util import (BF16, chi_square_p, distribution_case, grid_logits, ref_allowed, ref_probs,
                            row_params, to_torch)

TNAME = {np.dtype(np.float32): "f32", np.dtype(BF16): "bf16"}


@pytest.fixture(scope="module")
def cpu_mod():
    return kc.compile_file(stdlib_dir() / "sampling.kc", target="cpu")


@pytest.fixture(scope="module")
def cpu_blocks():
    return kc.compile_file(stdlib_dir() / "sampling_blocks.kc", target="cpu")


def launch_sample(mod, x, ld, vocab, params, cfg, seed=3, offset=1):
    rows = len(params[0])
    out = np.full(rows, -7, np.int32)
    mod.sample[rows, S.SAMPLING_THREADS](x, out, *params, vocab, ld, np.uint32(seed), np.uint32(0),
                                         np.uint32(offset), np.uint32(0), T=TNAME[x.dtype], PROBS=False, **cfg)
    return out


@pytest.mark.slow(sample=2)
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("vocab", [1, 7, 1001, 32003])
def test_unroll_and_alignment_change_no_bits(cpu_mod, cpu_blocks, dtype, vocab):
    """The host's (VEC, U) against (VEC, 1) and scalar loads of the same runs, rows packed (ld = V) and
    strided (ld = V + 3: no row but the first 16-byte aligned): the same tokens, each in the allowed set;
    softmax the same bits."""
    rng = np.random.default_rng(vocab)
    rows = 8
    params = row_params(rng, rows, vocab)
    logits = grid_logits(rng, rows, vocab + 3, dtype) + rng.normal(0, 0.01, (rows, vocab + 3)).astype(dtype)
    packed = np.ascontiguousarray(logits[:, :vocab])
    host = S.kernel_params(TNAME[np.dtype(dtype)], vocab)
    vec, unroll = host["VEC"], host["U"]
    want = launch_sample(cpu_mod, packed, vocab, vocab, params, host)
    for x, ld, cfg in ((packed, vocab, dict(host, U=1, ALIGNED=False)), (logits, vocab + 3, dict(host, ALIGNED=False))):
        np.testing.assert_array_equal(launch_sample(cpu_mod, x, ld, vocab, params, cfg), want, err_msg=str(cfg))
    ok = ref_allowed(ref_probs(packed.astype(np.float32), params[0]), *params[1:])
    assert ok[np.arange(rows), want].all()
    assert (vec, unroll) != (1, 1)
    ys = []
    for cfg in (host, dict(host, U=1, ALIGNED=False)):
        y = np.empty((rows, vocab), np.float32)
        cpu_blocks.softmax[rows, S.SAMPLING_THREADS](packed, y, params[0], vocab, vocab, T=TNAME[np.dtype(dtype)],
                                                     **cfg)
        ys.append(y)
    np.testing.assert_array_equal(ys[0], ys[1])


@pytest.mark.slow(sample=1)  # 14-19 s each on CI's cores: one dtype by default, -m slow both
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_strided_view_draws_what_its_copy_draws(dtype):
    """ops.sample on a torch view with a row stride that is no multiple of 16 bytes, starting one
    element into its buffer, and on its packed copy: the same tokens (the order of the sums depends on
    VEC only), each in the allowed set; top_k_mask_logits and top_p_renorm_probs likewise."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    rows, vocab = 8, 32003
    buf = grid_logits(rng, rows, vocab + 5, np.float32) + rng.normal(0, 0.01, (rows, vocab + 5)).astype(np.float32)
    tb = to_torch(torch, buf.astype(dtype))
    view = tb[:, 1:vocab + 1]
    assert view.stride(0) == vocab + 5 and view.data_ptr() % 16 != 0
    packed = view.contiguous()
    params = row_params(rng, rows, vocab)
    kw = dict(temperature=params[0], top_k=params[1], top_p=params[2], min_p=params[3], seed=17, offset=5)
    got = S.sample(view, **kw).numpy()
    np.testing.assert_array_equal(got, S.sample(packed, **kw).numpy())
    ok = ref_allowed(ref_probs(packed.float().numpy(), params[0]), *params[1:])
    assert ok[np.arange(rows), got].all()
    np.testing.assert_array_equal(S.top_k_mask_logits(view, params[1]).float().numpy(),
                                  S.top_k_mask_logits(packed, params[1]).float().numpy())
    pb = torch.zeros(rows, vocab + 1)
    pb[:, 1:] = torch.softmax(packed.float(), -1)
    pv = pb[:, 1:]                                    # f32 rows of stride vocab + 1, misaligned
    np.testing.assert_array_equal(S.top_p_renorm_probs(pv, params[2]).numpy(),
                                  S.top_p_renorm_probs(pv.contiguous(), params[2]).numpy())


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_greedy_across_tiles(dtype):
    """The maximum in the partial last run, then tied with one in a full tile, then all -inf but the
    last element: the lowest index of the maximum."""
    vocab = 2 * 1024 * 8 * 2 + 5               # two full tiles at the widest (VEC 8, U 2), a partial run
    rng = np.random.default_rng(2)
    x = grid_logits(rng, 4, vocab, dtype)
    x[0, vocab - 1] = 20.0
    x[1, vocab - 2] = x[1, 4097] = 20.0
    x[2] = -np.inf
    x[2, vocab - 1] = 0.0
    x[3, 16383] = x[3, 16384] = 20.0          # across the tile boundary of f32 (VEC 4, U 4)
    np.testing.assert_array_equal(S.sample(x, temperature=0.0, target="cpu"), [vocab - 1, 4097, vocab - 1, 16383])
    got = S.sample(x, top_k=1, seed=4, target="cpu")     # top-k keeps ties: either tied maximum
    assert got[0] == got[2] == vocab - 1 and got[1] in (4097, vocab - 2) and got[3] in (16383, 16384), got


@pytest.mark.slow(sample=1)
@pytest.mark.parametrize("case", [dict(top_k=0, top_p=1.0, min_p=0.0), dict(top_k=5, top_p=0.8, min_p=0.02)],
                         ids=["temperature", "topk-topp-minp"])
def test_distribution_across_tiles(monkeypatch, case):
    """Chi-square (3000 draws, p > 0.001) on a vocabulary of two full tiles and a partial one (U = 1 to
    keep the tile small: U changes no bit), the heavy tokens spread over tiles, runs and the tail."""
    monkeypatch.setitem(S.SAMPLING_LOADS, "f32", (S.SAMPLING_LOADS["f32"][0], 1))
    vec = S.SAMPLING_LOADS["f32"][0]
    vocab = 2 * S.SAMPLING_THREADS * vec + 2 * vec + 3
    rng = np.random.default_rng(9)
    row = np.full(vocab, -30.0, np.float32)
    heavy = [0, 3, vec * 5 + 1, S.SAMPLING_THREADS * vec - 1, S.SAMPLING_THREADS * vec, vocab - 4, vocab - 1]
    row[heavy] = rng.normal(0, 1.0, len(heavy)).astype(np.float32)
    row[heavy[1]] = row[heavy[4]]              # a tie across tiles
    temp = 0.8
    p = ref_probs(row[None], [temp])
    allowed = ref_allowed(p, [case["top_k"]], [case["top_p"]], [case["min_p"]], slack=0.0)[0]
    want = np.where(allowed, p[0], 0.0)
    want /= want.sum()
    x = np.repeat(row[None], 1500, 0)
    counts = np.zeros(vocab)
    for off in range(2):
        tok = S.sample(x, temperature=temp, seed=77, offset=off, target="cpu", **case)
        counts += np.bincount(tok, minlength=vocab)
    assert chi_square_p(counts, want * counts.sum()) > 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_cuda_draws_the_cpu_tokens_on_vector_paths(dtype):
    """The host's vector loads on CUDA (wide loads: packed rows; scalar loads of the same runs: a
    misaligned torch view) draw the CPU target's tokens, at odd and large vocabularies."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(21)
    for vocab in (7, 1001, 32003, 128256):
        rows = 24
        logits = grid_logits(rng, rows, vocab + 1, dtype) + rng.normal(0, 1e-2, (rows, vocab + 1)).astype(dtype)
        params = row_params(rng, rows, vocab)
        kw = dict(temperature=params[0], top_k=params[1], top_p=params[2], min_p=params[3], seed=123, offset=9)
        cpu = S.sample(np.ascontiguousarray(logits[:, 1:]), target="cpu", **kw)
        t = to_torch(torch, logits).cuda()
        np.testing.assert_array_equal(S.sample(t[:, 1:], **kw).cpu().numpy(), cpu, err_msg=f"view {vocab}")
        np.testing.assert_array_equal(S.sample(t[:, 1:].contiguous(), **kw).cpu().numpy(), cpu,
                                      err_msg=f"packed {vocab}")
        y = S.softmax(t[:, 1:].contiguous(), params[0]).cpu().numpy()
        np.testing.assert_array_equal(y, S.softmax(np.ascontiguousarray(logits[:, 1:]), params[0], target="cpu"))


# --- sample_split: a row over several blocks --------------------------------------------------------

@pytest.fixture
def split_small(monkeypatch):
    """ops.sample splits every row of 32 or more elements into chunks of 16."""
    monkeypatch.setitem(S.SAMPLING_SPLIT, "max_rows", 10 ** 6)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "chunk", 16)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "min_vocab", 0)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "filtered", True)


def test_split_chunks_policy(monkeypatch):
    monkeypatch.setitem(S.SAMPLING_SPLIT, "min_vocab", 0)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "filtered", True)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "max_rows", 8)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "chunk", 1000)          # rounded up to 1008
    assert S.split_chunks(8, 2016) == 2 and S.split_chunks(8, 2017) == 3
    assert S.split_chunks(9, 10 ** 5) == 1 and S.split_chunks(1, 2015) == 1
    monkeypatch.setitem(S.SAMPLING_SPLIT, "max_rows", 0)
    assert S.split_chunks(1, 10 ** 6) == 1
    monkeypatch.setitem(S.SAMPLING_SPLIT, "max_rows", 8)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "min_vocab", 4000)
    assert S.split_chunks(8, 3999) == 1 and S.split_chunks(8, 4000) == 4


@pytest.mark.slow(sample=1)
@pytest.mark.parametrize("probs", [False, True], ids=["logits", "probs"])
def test_split_distribution_matches_renormalised(split_small, probs):
    """Chi-square (2000 draws, p > 0.001) through the split kernel's chunk pick (temperature only):
    vocabulary 37 in three chunks of 16, ties across chunks."""
    assert S.split_chunks(2000, 37) == 3
    rng = np.random.default_rng(25)
    row = rng.normal(0, 1.5, 37).astype(np.float32)
    row[[4, 20, 36]] = row[2]
    p = ref_probs(row[None], [0.8])
    kw = dict(probs=np.repeat(p.astype(np.float32), 2000, 0)) if probs else dict(
        logits=np.repeat(row[None], 2000, 0), temperature=0.8)
    counts = np.bincount(S.sample(**kw, seed=4321, offset=0, target="cpu"), minlength=37)
    assert chi_square_p(counts, p[0] * counts.sum()) > 1e-3


@pytest.mark.slow(sample=1)  # one dtype by default (25-35 s each on CI's 2 cores); -m slow: both
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_split_token_in_allowed_set(split_small, dtype):
    """Odd vocabularies split in chunks of 16, a strided view among them: greedy is the lowest index
    of the maximum, every token lies in the allowed set, the view draws what its copy draws."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(31)
    for vocab in (33, 1001):
        rows = 16
        logits = grid_logits(rng, rows, vocab + 1, dtype)
        logits[0, 3] = logits[0, vocab] = 9.0                  # a tie at the maximum across chunks
        params = row_params(rng, rows, vocab)
        view = to_torch(torch, logits)[:, 1:]
        packed = np.ascontiguousarray(logits[:, 1:])
        want = np.argmax(packed.astype(np.float32), 1)
        np.testing.assert_array_equal(S.sample(packed, temperature=0.0, target="cpu"), want)
        ok = ref_allowed(ref_probs(packed.astype(np.float32), params[0]), *params[1:])
        for off in range(3):
            kw = dict(temperature=params[0], top_k=params[1], top_p=params[2], min_p=params[3], seed=5, offset=off)
            tok = S.sample(packed, target="cpu", **kw)
            assert ok[np.arange(rows), tok].all(), (vocab, off)
            np.testing.assert_array_equal(S.sample(view, **kw).numpy(), tok)


@pytest.mark.gpu
def test_split_cuda_draws_the_cpu_tokens(monkeypatch):
    """The split kernel at its default chunk on CUDA draws the CPU target's tokens (f32 and bf16, a
    misaligned view, temperature only and filtered rows), and 10^6 draws match the distribution."""
    torch = pytest.importorskip("torch")
    monkeypatch.setitem(S.SAMPLING_SPLIT, "max_rows", 64)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "chunk", 8192)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "min_vocab", 0)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "filtered", True)
    rng = np.random.default_rng(41)
    for dtype in (np.float32, BF16):
        for vocab in (32003, 128256):
            rows = 8
            logits = grid_logits(rng, rows, vocab + 1, dtype) + rng.normal(0, 1e-2, (rows, vocab + 1)).astype(dtype)
            params = row_params(rng, rows, vocab)
            assert S.split_chunks(rows, vocab) > 1
            kw = dict(temperature=params[0], top_k=params[1], top_p=params[2], min_p=params[3], seed=8, offset=2)
            cpu = S.sample(np.ascontiguousarray(logits[:, 1:]), target="cpu", **kw)
            t = to_torch(torch, logits).cuda()[:, 1:]
            np.testing.assert_array_equal(S.sample(t, **kw).cpu().numpy(), cpu, err_msg=f"{dtype} {vocab}")
    monkeypatch.setitem(S.SAMPLING_SPLIT, "max_rows", 10 ** 6)
    monkeypatch.setitem(S.SAMPLING_SPLIT, "chunk", 16)
    distribution_case(100_000, 10, "cuda")


# --- AMD: the same kernels for gfx942 (checked statically: no AMD GPU here) -----------------------------------

SAMPLING_KERNELS = [(k, t) for k in ("sample", "sample_split", "softmax", "top_k_mask_logits", "top_p_renorm_probs",
                                     "sample+lists") for t in ("bf16", "f32")]


@pytest.mark.slow(sample=2)  # ~5 s a kernel on CI's cores; -m slow: all ten
@pytest.mark.parametrize("kernel, T", SAMPLING_KERNELS, ids=[f"{k}-{t}" for k, t in SAMPLING_KERNELS])
def test_sampling_kernels_build_for_gfx942(kernel, T):
    """Each std.sampling kernel with the loads ops.sample chooses (:data:`SAMPLING_LOADS`, rows 16-byte
    aligned) compiles for gfx942 with LLVM's AMDGPU backend: 16-byte global loads, no scratch (nothing
    spilled to private memory), and at most 128 VGPRs, so that a workgroup of SAMPLING_THREADS (1024
    work-items, 16 wavefronts of 64 on 4 SIMDs of 512 VGPRs a lane) fits one compute unit (AMDGPUUsage,
    "AMDGPU Kernel Descriptor" / the code object's .vgpr_count)."""
    import re
    from kcompiler import pipeline
    params = dict(S.kernel_params(T, 4096), T=T)
    if kernel.startswith("sample"):
        params["PROBS"] = False
    if kernel == "sample+lists":       # the lists that fit a workgroup's 64 KiB of LDS (list_cap), PRUNE
        kernel, params["CAP"], params["PRUNE"] = "sample", 7, True
    asm = pipeline.emit_file(stdlib_dir() / ("sampling.kc" if kernel.startswith("sample") else "sampling_blocks.kc"),
                             "asm", target="amdgcn", arch="gfx942", kernel=kernel,
                             comptime=params)
    assert "global_load_dwordx4" in asm
    assert ".private_segment_fixed_size: 0" in asm and ".vgpr_spill_count: 0" in asm
    vgprs = int(re.search(r"\.vgpr_count:\s+(\d+)", asm).group(1))
    assert vgprs <= 4 * 512 * 64 // S.SAMPLING_THREADS, vgprs  # 4 SIMDs x 512 VGPRs x 64 lanes a CU
