"""std.matmul's Hopper path (stdlib/matmul_sm90.kc); the Hopper builtins it is built on (wgmma, TMA,
mbarrier, ...) are tested with the NVPTX backend, tests/backends/nvptx/test_hopper_builtins.py.

On every machine (CI): std.matmul_sm90 for bf16, f16 and FP8 assembling with no spills and no
serialised wgmma (ptxas -v), refused with a located error on the CPU target, the config choice, the
host launch, the CPU target's emulation of the kernel, and the parameter layout a launch packs.

On an H100 or H200: test_matmul_sm90_gpu.py. Helpers shared with test_matmul_sm90_*.py:
matmul_sm90_util.py.
"""
from __future__ import annotations

import pytest

from kcompiler.diagnostics import CompileError
from kcompiler.frontend.program import stdlib_dir
from kcompiler.pipeline import emit_file

from ..ptxas_util import needs_ptxas, ptxas
from .matmul_sm90_util import _check64, _emulated, _fp8_operands
from ..draws import fresh_rng


def test_cpu_target_refuses_with_location():
    """Without emulate_wgmma the CPU target refuses std.matmul_sm90 with a located error (the Hopper
    path is not chosen there; tests/backends/nvptx/test_hopper_builtins.py: the builtins' own)."""
    with pytest.raises(CompileError, match="std.matmul_sm90 is the Hopper path"):
        emit_file(stdlib_dir() / "matmul_sm90.kc", "llvm", "cpu", kernel="matmul_sm90", comptime=dict(T="bf16"))


SM90_KERNELS = [
    dict(T="bf16", OUT="bf16", BK=64, BN=256, CONSUMERS=2, STAGES=4),
    dict(T="bf16", OUT="f32", BK=64, BN=128, CONSUMERS=1, STAGES=8, SPLIT_K=4),
    dict(T="bf16", OUT="bf16", BK=64, BN=128, CONSUMERS=2, STAGES=6, SPLIT_K=3),
    dict(T="f8e4m3", OUT="bf16", BK=128, BN=128, CONSUMERS=1, STAGES=8, SCALE=2, SPLIT_K=2),
    dict(T="bf16", OUT="bf16", BK=64, BN=256, CONSUMERS=2, STAGES=4, B_KMAJOR=False),
    dict(T="bf16", OUT="bf16", BK=64, BN=128, CONSUMERS=1, STAGES=8, GROUP_M=1),
    dict(T="f8e4m3", OUT="bf16", BK=128, BN=256, CONSUMERS=2, STAGES=4, SCALE=1),
    dict(T="f8e5m2", OUT="f16", BK=128, BN=256, CONSUMERS=2, STAGES=4, SCALE=2),
    dict(T="bf16", OUT="bf16", BK=64, BN=256, CONSUMERS=2, STAGES=5, GROUP_M=16, PINGPONG=True),
    dict(T="f8e4m3", OUT="bf16", BK=128, BN=128, CONSUMERS=2, STAGES=6, SCALE=1, PINGPONG=True, WG_M=2, SPLIT_K=2),
    dict(T="bf16", OUT="bf16", BK=64, BN=256, CONSUMERS=2, STAGES=4, CLUSTER_M=2),
    dict(T="bf16", OUT="f32", BK=64, BN=128, CONSUMERS=2, STAGES=6, PINGPONG=True, WG_M=2, CLUSTER_M=2, B_KMAJOR=False),
    dict(T="f8e4m3", OUT="bf16", BK=128, BN=256, CONSUMERS=2, STAGES=4, SCALE=2, CLUSTER_M=2),
    # small M: 16 rows of A a stage, 11 stages (matmul_sm90.small_m_rows)
    dict(T="bf16", OUT="bf16", BK=64, BN=128, CONSUMERS=1, STAGES=11, SPLIT_K=2, AROWS=16),
    dict(T="f8e4m3", OUT="bf16", BK=128, BN=64, CONSUMERS=1, STAGES=20, SCALE=1, AROWS=8),
]


@needs_ptxas
@pytest.mark.slow(sample=8)  # 8 of the 15 configurations by default (CI time); -m slow: all
@pytest.mark.parametrize("params", SM90_KERNELS, ids=lambda p: f"{p['T']}-{p['OUT']}-{p['BN']}x{p['CONSUMERS']}-"
                                                             f"{'kn' if p.get('B_KMAJOR') is False else 'nk'}"
                                                             f"{'-pp' if p.get('PINGPONG') else ''}"
                                                             f"{'-c2' if p.get('CLUSTER_M') else ''}")
def test_matmul_sm90_assembles(params, tmp_path):
    """std.matmul_sm90 assembles for sm_90a with no spills and no serialised wgmma (ptxas warns
    C7510-C7520 when it has to fence wgmma for register reasons), with setmaxnreg honoured; an
    N-major B is read transposed (imm-trans-b 1)."""
    ptx = emit_file(stdlib_dir() / "matmul_sm90.kc", "asm", "nvptx", "sm_90a", kernel="matmul_sm90", comptime=params)
    k = 16 if params["T"] in ("bf16", "f16") else 32
    assert f"wgmma.mma_async.sync.aligned.m64n{params['BN']}k{k}.f32" in ptx
    # 4 wgmmas a k-step (BK / K: 32 bytes each of a 128-byte row), for each of WG_M m64 row blocks (ping-pong);
    # LLVM unrolls the k-loop twice where the accumulators are few (FP8 on 64 columns)
    n = ptx.count("wgmma.mma_async")
    assert n in (4 * params.get("WG_M", 1), 8 * params.get("WG_M", 1)), n
    # clusters: launched in pairs, B's halves multicast, stages released in both blocks of the pair
    cluster = params.get("CLUSTER_M", 1) == 2
    assert (".reqnctapercluster 2, 1, 1" in ptx) == cluster and ("multicast::cluster" in ptx) == cluster
    assert ("mapa.shared::cluster" in ptx) == cluster and ("barrier.cluster.wait" in ptx) == cluster
    if k == 16:
        assert (", p, 1, 1, 0, 1;" in ptx) == (params.get("B_KMAJOR") is False)
    assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx
    log = ptxas(ptx, verbose=True)
    assert " 0 bytes spill stores" in log, log
    assert "C75" not in log, log  # serialised wgmma, ignored setmaxnreg, injected warpgroup.arrive...


@needs_ptxas
def test_matmul_sm90_epilogue_assembles(tmp_path):
    """The epilogue kernel with a stock epilogue that reads x (a bias) and applies ReLU."""
    ptx = emit_file(stdlib_dir() / "matmul_sm90.kc", "asm", "nvptx", "sm_90a", kernel="matmul_sm90_epilogue",
                    comptime=dict(T="bf16", OUT="bf16", X="bf16", EPI="epilogue.bias_relu"))
    log = ptxas(ptx, verbose=True)
    assert " 0 bytes spill stores" in log and "C75" not in log, log


def test_clusters_refused_on_the_cpu_target():
    """CLUSTER_M = 2 needs thread-block clusters, which the CPU target does not emulate: a located
    error there (its tests run CLUSTER_M = 1; the H100 runs the pairs, test_every_config)."""
    from kcompiler.backends import get_target
    with pytest.raises(CompileError, match="CLUSTER_M is 1, or 2") as ei:
        emit_file(stdlib_dir() / "matmul_sm90.kc", "llvm", get_target("cpu", emulate_wgmma=True), kernel="matmul_sm90",
                  comptime=dict(T="bf16", CLUSTER_M=2))
    assert "matmul_sm90.kc:" in str(ei.value)


def test_config_choice():
    """The largest tile (of those that have run on an H100) that still gives most multiprocessors a
    tile, else the smallest; one consumer warpgroup for M <= 64."""
    from kcompiler.ops import matmul_sm90 as m
    assert m.choose(8192, 8192, 8192) == m.CONFIGS["tma128x256h"]
    assert m.choose(1024, 4096, 4096) == m.CONFIGS["tma128x256h"]  # 128 tiles of 132
    # waves: 448 tiles of 128 x 256 (4 waves of 256 columns) against 512 of 128 x 224 (4 of 224)
    assert m.choose(1024, 14336, 4096) == m.CONFIGS["tma128x224h"]
    assert m.choose(512, 14336, 4096) == m.CONFIGS["tma128x224h"]  # 2 waves either way
    assert m.choose(1024, 14336, 4096, b_kmajor=False) == m.CONFIGS["tma128x256h"]  # N-major: BN of 64s
    assert m.choose(4096, 14336, 4096) == m.CONFIGS["tma128x256h"]  # 14 x 256 = 16 x 224: the first
    assert m.choose(4096, 4096, 4096) == m.CONFIGS["tma128x256h"]  # 4 x 256 < 5 x 224
    assert m.choose(8192, 8192, 8192) == m.CONFIGS["tma128x256h"]  # 16 x 256 against 18 x 224: within the margin
    assert m.choose(128, 4096, 4096) == m.CONFIGS["64x64"]  # 128 tiles of 132
    # M <= 64: 128 tiles of 64 x 112 rather than 112 of 64 x 128 at N = 14336 (WAVE_ALTERNATIVES), 128 of
    # 64 x 32 rather than 64 of 64 x 64 in shares of K at N = 4096 (ONE_WAVE); not where 64 x 32 takes
    # two waves (M 128 by 4096: 64x64's 128 tiles; M 16 by 8192: 64x64 fills the wave first)
    assert m.choose(16, 14336, 4096) == m.CONFIGS["64x112"]
    assert m.choose(16, 4096, 4096) == m.CONFIGS["64x32"] == m.choose(64, 4096, 14336)
    assert m.choose(16, 8192, 8192) == m.CONFIGS["64x64"] and m.choose(16, 16384, 4096) == m.CONFIGS["64x128"]
    assert m.choose(128, 2048, 4096) == m.CONFIGS["64x64"] == m.choose(16, 2048, 4096)  # CHOICE_MAX_M; too few
    # 128 x 112 where 128 x 256 tiles are too few: 128 of them at 128 x 14336; not for an N-major B, a block
    # or gated epilogue (BN a multiple of 64, 32)
    assert m.choose(128, 14336, 4096) == m.CONFIGS["128x112"]
    assert m.choose(128, 14336, 4096, b_kmajor=False) == m.CONFIGS["64x128"]
    assert m.choose(128, 14336, 4096, bn_multiple=32) == m.CONFIGS["64x128"]
    assert m.choose(1024, 14336, 4096, bn_multiple=32) == m.CONFIGS["tma128x224h"]  # 224 = 7 x 32
    assert m.choose(512, 4096, 4096) == m.CONFIGS["64x128"]  # 148 tiles of 128 x 112: more than one wave
    assert m.choose(1, 8, 8) == m.CONFIGS["64x64"]
    assert m.choose(16, 14336, 4096, sms=100) == m.CONFIGS["64x112"]  # 2 tiles a block either way, 112 < 128
    assert m.choose(16, 14336, 4096, b_kmajor=False) == m.CONFIGS["64x128"]  # N-major: BN of 64s
    assert set(m.CHOICES) <= set(m.CONFIGS)
    # split-K where the tiles fill at most half of the multiprocessors, at least 32 k-steps a share
    c, c64 = m.CONFIGS["64x128"], m.CONFIGS["64x64"]
    assert m.choose_split(16, 4096, 4096, c64, 64) == 2 and m.choose_split(16, 4096, 14336, c64, 64) == 2
    assert m.choose_split(16, 4096, 14336, c, 64) == 4 and m.choose_split(128, 4096, 4096, c64, 64) == 1
    assert m.choose_split(16, 14336, 4096, c, 64) == 1 and m.choose_split(16, 4096, 4096, c64, 128) == 1
    assert m.choose_split(1, 8, 8, c64, 64) == 1 and m.choose_split(16, 256, 8192, c64, 64) == 4
    for cfg in m.CONFIGS.values():
        assert m.shared_bytes(cfg, "bf16") <= 227 * 1024


class _CheckedLaunches:
    """Stands in for a CUDA module: each launch compiles the specialisation for sm_90a (no GPU) and
    checks the arguments against its parameters (kcompiler.runtime.arrays.check_args), as a launch
    would, then records it."""

    def __init__(self, module):
        self.module, self.launches = module, []

    def __getattr__(self, name):
        kernel = getattr(self.module, name)

        class _Grid:
            def __getitem__(_, cfg):
                def launch(*args, shared=0, stream=None, **params):
                    from kcompiler.runtime import arrays
                    art = kernel.specialize(*args, **params)
                    arrays.check_args(name, art.params, args)
                    self.launches.append((name, cfg, shared, params, art))
                return launch
        return _Grid()


@pytest.mark.parametrize("epilogue, M", [(None, 300), ("source", 300), ("source", 16)])
def test_host_launch_matches_kernel(monkeypatch, epilogue, M):
    """kcompiler.ops.matmul_sm90.run passes what the kernel's signature asks (tensor maps, pointers, the
    epilogue's inputs), within the shared memory a block may have; checked without a GPU. M 16: a
    user's epilogue module takes small_m_rows' AROWS and stages too."""
    import kcompiler as kc
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90
    from kcompiler.runtime.tensormap import TensorMap

    monkeypatch.setattr(matmul_sm90, "cached_tensor_map",
                        lambda x, box: TensorMap(bytes(128), 0, "bf16", x.shape, box, 128, None))
    N, K = 520, 264
    a = np.zeros((M, K), ml_dtypes.bfloat16)
    b = np.zeros((N, K), ml_dtypes.bfloat16)
    out = np.zeros((M, N), np.float32)
    src = "fn twice(acc: f32, row: i32, col: i32, ld: i32, x: ptr<f32>, y: ptr<f32>, s: f32) -> f32 {\n" \
          "    return s * acc;\n}\n"
    if epilogue == "source":
        mod = _CheckedLaunches(matmul_sm90.epilogue_module(src, "nvptx", "sm_90a"))
        epi = ("twice", out.reshape(-1), out.reshape(-1), 2.0)
    else:
        mod = _CheckedLaunches(kc.compile_file(stdlib_dir() / "matmul_sm90.kc", target="nvptx", arch="sm_90a"))
        epi = None if epilogue is None else ("epilogue.bias", np.zeros(N, ml_dtypes.bfloat16), out.reshape(-1), 1.0)
    matmul_sm90.run(mod, a, b, out, epilogue=epi, sms=132)
    (name, (grid, block), shared, params, art), = mod.launches
    assert name == ("matmul_sm90" if epilogue is None else "matmul_sm90_epilogue")
    cfg = {**matmul_sm90.choose(M, N, K), **matmul_sm90.small_m_rows(M, matmul_sm90.choose(M, N, K))}
    assert ("AROWS" in params) == (M <= 56)
    assert {k: params[k] for k in cfg} == cfg and block == 128 * (cfg["CONSUMERS"] + 1)
    assert grid == min(132, -(-M // (64 * cfg["CONSUMERS"])) * -(-N // cfg["BN"]))
    assert shared == matmul_sm90.shared_bytes(params, "bf16") <= 227 * 1024
    assert [str(p.type) for p in art.params][:3] == ["tensor_map", "tensor_map", "ptr<f32>"]


def test_host_launch_clusters(monkeypatch):
    """Clusters of 2 along M: the grid whole pairs (rounded down to the blocks given), each block's B
    box half the tile's rows, no split-K (a located ValueError for one asked for)."""
    import kcompiler as kc
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90
    from kcompiler.runtime.tensormap import TensorMap

    boxes = []

    def fake_map(x, box):
        boxes.append(tuple(box))
        return TensorMap(bytes(128), 0, "bf16", x.shape, box, 128, None)
    monkeypatch.setattr(matmul_sm90, "cached_tensor_map", fake_map)
    M, N, K = 300, 520, 264  # 3 rows of 128-row tiles: 2 pairs, one of them half past M; 3 columns
    a = np.zeros((M, K), ml_dtypes.bfloat16)
    b = np.zeros((N, K), ml_dtypes.bfloat16)
    out = np.zeros((M, N), np.float32)
    mod = _CheckedLaunches(kc.compile_file(stdlib_dir() / "matmul_sm90.kc", target="nvptx", arch="sm_90a"))
    cfg = matmul_sm90.CONFIGS["c2x128x256"]
    for sms, grid in ((132, 12), (7, 6)):
        boxes.clear()
        matmul_sm90.run(mod, a, b, out, config=cfg, sms=sms)
        (_, (g, block), shared, params, _), = mod.launches[-1:]
        assert g == grid and block == 384 and params["CLUSTER_M"] == 2 and params.get("SPLIT_K", 1) == 1
        assert boxes == [(128, 64), (128, 64)]  # A: 128 rows; B: 128 of the tile's 256
    with pytest.raises(ValueError, match="clusters"):
        matmul_sm90.run(mod, a, b, out, config=cfg, split_k=2)


# --- on the CPU target's emulation of wgmma, TMA and mbarriers (backends/cpu/hopper.py) ------------------


EMU_CASES = [  # (M, N, K), T, config, B K-major, OUT
    ((70, 130, 72), "bf16", "64x128", True, "f32"),
    ((130, 264, 200), "bf16", "128x256", True, "bf16"),
    ((130, 264, 200), "f16", "128x128", False, "f32"),
    ((70, 136, 72), "bf16", "64x128", False, "f32"),
    ((33, 131, 136), "bf16", "64x64", True, "f32"),  # N odd: the unaligned store; 40 rows of A a stage (AROWS)
    ((5, 136, 392), "bf16", "64x64", False, "bf16"),  # 8 rows of A a stage, 20 stages, N-major B
]


@pytest.mark.parametrize("shape, t, config, b_kmajor, out_t", EMU_CASES,
                         ids=[f"{'x'.join(map(str, c[0]))}-{c[1]}-{c[2]}-{'nk' if c[3] else 'kn'}" for c in EMU_CASES])
def test_emulated_matmul_sm90(shape, t, config, b_kmajor, out_t):
    """The whole Hopper kernel (producer / consumer warpgroups, mbarrier parities over the persistent
    tiles of 3 blocks, TMA zero fill past the edges, swizzled wgmma operands, K-major and N-major B)
    on the CPU target's emulation, against numpy in float64, on fresh random inputs of odd sizes."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90
    M, N, K = shape
    dt = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
    rng = fresh_rng()
    a = rng.standard_normal((M, K)).astype(dt[t])
    b = rng.standard_normal((N, K)).astype(dt[t])
    out = np.full((M, N), np.nan, {"f32": np.float32, "bf16": ml_dtypes.bfloat16}[out_t])
    matmul_sm90.run(_emulated(), a, b if b_kmajor else np.ascontiguousarray(b.T), out, b_kmajor=b_kmajor,
                    config=matmul_sm90.CONFIGS[config], sms=3)
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    _check64(out, a64 @ b64, K, np.abs(a64) @ np.abs(b64))


def test_small_m_rows():
    """Small M: a stage holds M rows of A rounded up to 8 and the stages fill SMALL_M_SHARED, on one
    consumer's 64-row tiles only; an explicit AROWS is kept, and refused below M."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90 as m
    c64, c128 = m.CONFIGS["64x64"], m.CONFIGS["64x128"]
    assert m.small_m_rows(16, c128) == {"AROWS": 16, "STAGES": 11}
    assert m.small_m_rows(1, c64) == {"AROWS": 8, "STAGES": 22}
    assert m.small_m_rows(56, c64)["AROWS"] == 56 and m.small_m_rows(57, c64) == {}
    for name in ("128x256", "tma128x256h", "pp64x256", "128x128"):
        assert m.small_m_rows(16, m.CONFIGS[name]) == {}
    for rows in range(1, 57):
        for cfg in (c64, c128):
            got = {**cfg, **m.small_m_rows(rows, cfg)}
            assert got["STAGES"] >= cfg["STAGES"] and m.shared_bytes(got, "bf16") <= m.SMALL_M_SHARED + 1024
    a = np.zeros((20, 64), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="AROWS 16 holds M <= AROWS"):
        m.run(_emulated(), a, np.zeros((64, 64), ml_dtypes.bfloat16), np.zeros((20, 64), np.float32),
              config={**c64, "AROWS": 16}, sms=3)


def test_choice_keeps_the_kernels_rules():
    """Over a grid of shapes, the default choice (choose, choose_split, small_m_rows) is one the kernel
    accepts: BN a multiple of 64 for an N-major B and of 32 for a block or gated epilogue, AROWS only on
    one consumer's tiles and at least M, split-K shares of at least one k-step, shared memory within the
    227 KiB a block may have."""
    from kcompiler.ops import matmul_sm90 as m
    for M in (1, 7, 8, 16, 33, 56, 57, 64, 65, 100, 128, 129, 256, 512, 1000, 1024, 4096, 8192):
        for N in (8, 64, 256, 1000, 4096, 8192, 14336, 28672):
            for K, bk in ((4096, 64), (4096, 128), (14336, 64), (72, 64)):
                for b_kmajor, mult in ((True, 8), (False, 8), (True, 32)):
                    cfg = m.choose(M, N, K, 132, b_kmajor, mult)
                    step = max(mult, 8 if b_kmajor else 64)
                    assert cfg["BN"] % step == 0, (M, N, cfg)
                    rows = m.small_m_rows(M, cfg)
                    if rows:
                        assert cfg["CONSUMERS"] == 1 and not cfg.get("PINGPONG") and M <= rows["AROWS"] <= 56
                    assert m.shared_bytes({**cfg, **rows}, "bf16") <= 227 * 1024, (M, N, cfg, rows)
                    split = m.choose_split(M, N, K, cfg, bk, 132)
                    assert 1 <= split <= max(1, -(-K // bk)), (M, N, K, split)


@pytest.mark.parametrize("split_k, out_t", [(3, "bf16"), (5, "f32")])
def test_emulated_split_k(split_k, out_t):
    """Split-K: each tile's K loop in shares (one of them empty with 5 shares of 4 k-steps), the partial
    products summed by the thread that completes each slot's count (the fix-up), bf16 or f32 C."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90
    M, N, K = 40, 136, 200
    rng = fresh_rng()
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    out = np.full((M, N), np.nan, {"f32": np.float32, "bf16": ml_dtypes.bfloat16}[out_t])
    matmul_sm90.run(_emulated(), a, b, out, config=matmul_sm90.CONFIGS["64x128"], sms=3, split_k=split_k)
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    _check64(out, a64 @ b64, K, np.abs(a64) @ np.abs(b64))


PINGPONG_CASES = [  # (M, N, K), config, B K-major, split-K, blocks
    ((70, 264, 200), "pp64x256", True, 3, 3),  # 2 x 2 tiles in 3 shares: 4 units a block, 2 a consumer
    ((200, 136, 136), "pp128x128", False, 1, 2),  # WG_M = 2 (two m64 wgmmas a k-slice), N-major B
]


@pytest.mark.parametrize("shape, config, b_kmajor, split_k, sms", PINGPONG_CASES,
                         ids=[f"{c[1]}-{'nk' if c[2] else 'kn'}-split{c[3]}" for c in PINGPONG_CASES])
def test_emulated_pingpong(shape, config, b_kmajor, split_k, sms):
    """Ping-pong (PINGPONG): the block's units alternate between its two consumer warpgroups, each
    skipping the other's k-steps in the one stage ring (a wrong count there, or a wrong arrival
    count on the empty barriers, hangs or reads another unit's stage), on odd sizes, with split-K's
    fix-up and an N-major B; against numpy in float64."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90
    M, N, K = shape
    rng = fresh_rng()
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    out = np.full((M, N), np.nan, np.float32)
    matmul_sm90.run(_emulated(), a, b if b_kmajor else np.ascontiguousarray(b.T), out, b_kmajor=b_kmajor,
                    config=matmul_sm90.CONFIGS[config], sms=sms, split_k=split_k)
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    _check64(out, a64 @ b64, K, np.abs(a64) @ np.abs(b64))


PINGPONG_MANY_UNITS = [  # (M, N, K), config, STAGES, B K-major, split-K, blocks
    ((192, 256, 256), "pp64x256", 2, True, 1, 1),  # 3 units in one block (odd), 4 k-steps each = 2 rounds
    ((320, 512, 512), "pp64x256", 2, True, 1, 3),  # 10 units over 3 blocks (4, 3, 3), 8 k-steps each
    ((320, 384, 384), "pp128x128", 3, False, 1, 2),  # WG_M = 2, N-major B, 9 units over 2 blocks
    ((192, 256, 512), "pp64x256", 2, True, 2, 2),  # split-K: 6 shares of 4 k-steps over 2 blocks
]


@pytest.mark.parametrize("shape, config, stages, b_kmajor, split_k, sms", PINGPONG_MANY_UNITS,
                         ids=[f"{c[1]}-{c[2]}st-{'nk' if c[3] else 'kn'}-split{c[4]}-{c[5]}blocks"
                              for c in PINGPONG_MANY_UNITS])
def test_emulated_pingpong_many_units(shape, config, stages, b_kmajor, split_k, sms, monkeypatch):
    """Ping-pong with several units a block, both consumers on several of them, an odd count among
    them, and units of at least 2 STAGES k-steps: a consumer that skips the other's unit then waits on
    full[s] for a phase P while the fill of phase P - 1 may still be pending, which a parity wait takes
    for P unless the consumers' order barrier makes it wait for the other's unit first (the H100's
    "unspecified launch failure" at 1024 x 14336 x 4096 before that barrier; here: a stale stage read
    or a deadlock, which the emulation reports after KC_CPU_DEADLOCK_SECONDS). Against numpy in
    float64, the output poisoned first."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90
    monkeypatch.setenv("KC_CPU_DEADLOCK_SECONDS", "3")
    M, N, K = shape
    rng = fresh_rng()
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    out = np.full((M, N), np.nan, np.float32)
    matmul_sm90.run(_emulated(), a, b if b_kmajor else np.ascontiguousarray(b.T), out, b_kmajor=b_kmajor,
                    config=dict(matmul_sm90.CONFIGS[config], STAGES=stages), sms=sms, split_k=split_k)
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    _check64(out, a64 @ b64, K, np.abs(a64) @ np.abs(b64))


@pytest.mark.parametrize("fmt, per_row", [("float8_e4m3fn", False), ("float8_e5m2", True)])
def test_emulated_split_k_fixup_with_epilogue_and_scales(fmt, per_row):
    """Split-K with FP8 scales and an epilogue (applied once, to the sum, by the fix-up): the same bits as
    the unsplit kernel would not hold (another order of additions), so against float64; twice on the
    same workspace, which the kernel leaves as it found it (counts zero), with the same bits both times."""
    import numpy as np

    from kcompiler.ops import matmul_sm90
    M, N, K = 45, 136, 1040
    rng = fresh_rng()
    a, b, sa, sb = _fp8_operands(rng, fmt, M, N, K, per_row)
    bias = rng.standard_normal(N).astype(np.float32)
    ws, counts = matmul_sm90._split_workspace(a, 3 * 128, 3 * 64)
    outs = []
    for _ in range(2):
        out = np.full((M, N), np.nan, np.float32)
        import unittest.mock
        with unittest.mock.patch.object(matmul_sm90, "_split_workspace", lambda *_: (ws, counts)):
            matmul_sm90.run(_emulated(), a, b, out, scale_a=sa, scale_b=sb, scale=2 if per_row else 1,
                            config=matmul_sm90.CONFIGS["64x128"], sms=4, split_k=3,
                            epilogue=("epilogue.bias_relu", bias, out.reshape(-1), 1.0))
        assert not counts.any()
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    scale = (sa[:, None] * sb[None, :]).astype(np.float64) if per_row else float(sa[0]) * float(sb[0])
    ref = np.maximum((a64 @ b64) * scale + bias, 0)
    _check64(outs[0], ref, K, (np.abs(a64) @ np.abs(b64)) * scale + np.abs(bias), fp8=True)


@pytest.mark.parametrize("fmt, per_row", [("float8_e4m3fn", False), ("float8_e4m3fn", True), ("float8_e5m2", True)])
def test_emulated_fp8_scales(fmt, per_row):
    """FP8 (k32 wgmma, 128-byte rows of 128 elements) with per-tensor or per-row/column scales."""
    import numpy as np

    from kcompiler.ops import matmul_sm90
    M, N, K = 77, 136, 272
    rng = fresh_rng()
    a, b, sa, sb = _fp8_operands(rng, fmt, M, N, K, per_row)
    out = np.full((M, N), np.nan, np.float32)
    matmul_sm90.run(_emulated(), a, b, out, scale_a=sa, scale_b=sb, scale=2 if per_row else 1,
                    config=matmul_sm90.CONFIGS["128x256"], sms=2)
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    scale = (sa[:, None] * sb[None, :]).astype(np.float64) if per_row else float(sa[0]) * float(sb[0])
    _check64(out, (a64 @ b64) * scale, K, (np.abs(a64) @ np.abs(b64)) * scale, fp8=True)


def test_emulated_epilogues():
    """A stock epilogue reading a bias and a user's epilogue from source, in the Hopper kernel's store."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90
    M, N, K = 70, 136, 72
    rng = fresh_rng()
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(N).astype(np.float32)
    out = np.full((M, N), np.nan, np.float32)
    matmul_sm90.run(_emulated(), a, w, out, epilogue=("epilogue.bias_relu", bias, out.reshape(-1), 1.0), sms=2)
    p64 = a.astype(np.float64) @ w.astype(np.float64).T
    absprod = np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    _check64(out, np.maximum(p64 + bias, 0), K, absprod + np.abs(bias))
    src = "fn twice_plus_row(acc: f32, row: i32, col: i32, ld: i32, x: ptr<f32>, y: ptr<f32>, s: f32) -> f32 {\n" \
          "    return s * acc + f32(row);\n}\n"
    out[:] = np.nan
    matmul_sm90.run(_emulated(src), a, w, out, epilogue=("twice_plus_row", out.reshape(-1), out.reshape(-1), 2.0),
                    sms=2)
    _check64(out, 2 * p64 + np.arange(M)[:, None], K, 2 * absprod + M)


@pytest.mark.slow(sample=2)
@pytest.mark.parametrize("t, config, fmt", [("bf16", "64x128", "e4m3"), ("bf16", "128x256", "e5m2"),
                                            ("f8e4m3", "128x128", "e4m3")])
def test_emulated_mx_block_epilogue(t, config, fmt):
    """The MXFP8 block epilogue in the Hopper kernel's store (wgmma's fragments: a quad of lanes a row's
    32 columns), composed after a per-element bias: codes and E8M0 scales bit for bit those of
    kcompiler.numerics.mx.quantize of the same kernel's f32 result (per-tensor FP8 scales applied first)."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90
    from kcompiler.numerics import mx
    M, N, K = 77, 160, 272
    rng = fresh_rng()
    dt = {"bf16": ml_dtypes.bfloat16, "f8e4m3": ml_dtypes.float8_e4m3fn}[t]
    a = rng.standard_normal((M, K)).astype(dt)
    b = rng.standard_normal((N, K)).astype(dt)
    a[5, 3] = np.nan  # row 5: every block NaN
    bias = rng.standard_normal(N).astype(np.float32)
    sa, sb = np.float32([0.75]), np.float32([1.5])
    scale = 1 if t == "f8e4m3" else 0
    ref = np.full((M, N), np.nan, np.float32)
    cfg = matmul_sm90.CONFIGS[config]
    matmul_sm90.run(_emulated(), a, b, ref, scale_a=sa, scale_b=sb, scale=scale, config=cfg, sms=3,
                    epilogue=("epilogue.bias", bias, ref.reshape(-1), 1.0))
    codes = np.zeros((M, N), getattr(ml_dtypes, {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}[fmt]))
    scales = np.zeros((M, N // 32), ml_dtypes.float8_e8m0fnu)
    matmul_sm90.run(_emulated(), a, b, codes, scale_a=sa, scale_b=sb, scale=scale, config=cfg, sms=3,
                    epilogue=("epilogue.bias", bias, ref.reshape(-1), 1.0), block=(f"epilogue.to_mxfp8_{fmt}", scales))
    want_c, want_s = mx.quantize(ref, f"f8{fmt}")
    assert (scales.view(np.uint8)[5] == 0xFF).all()
    if t == "bf16" and fmt == "e4m3":  # the block epilogue in the module of a user's epilogue source too
        src = "fn add_bias(acc: f32, row: i32, col: i32, ld: i32, x: ptr<f32>, y: ptr<f32>, s: f32) -> f32 {\n" \
              "    return acc + x[col];\n}\n"
        c2, s2 = np.zeros_like(codes), np.zeros_like(scales)
        matmul_sm90.run(_emulated(src), a, b, c2, config=cfg, sms=3, block=("kc_std_epilogue.to_mxfp8_e4m3", s2),
                        epilogue=("add_bias", bias, ref.reshape(-1), 1.0))
        np.testing.assert_array_equal(s2.view(np.uint8), want_s.view(np.uint8))
        np.testing.assert_array_equal(c2.view(np.uint8), want_c.view(np.uint8))
    np.testing.assert_array_equal(scales.view(np.uint8), want_s.view(np.uint8))
    np.testing.assert_array_equal(codes.view(np.uint8), want_c.view(np.uint8))


def test_emulated_mbarrier_phases():
    """mbarrier semantics of the emulation: a fresh barrier's parity-1 phase counts as complete; a phase
    completes with its last arrival and its last transaction byte, in either order."""
    import numpy as np

    import kcompiler as kc
    src = """
    kernel k(out: ptr<u32>) {
        let bar = bitcast[ptr<u64, shared>](dynamic_shared[u64]());
        mbarrier_init(bar, 2);
        out[0] = u32(mbarrier_try_wait(bar, 1));          // 1: the phase before the first
        out[1] = u32(mbarrier_try_wait(bar, 0));          // 0
        mbarrier_arrive_expect_tx(bar, 64);
        mbarrier_arrive(bar);
        out[2] = u32(mbarrier_try_wait(bar, 0));          // 0: 64 bytes pending
    }
    """
    mod = kc.compile(src, target="cpu", target_options={"emulate_wgmma": True})
    out = np.zeros(3, np.uint32)
    mod.k[1, 1](out, shared=16)
    assert out.tolist() == [1, 0, 0]


def test_emulated_mbarrier_wait_deadlock_is_reported(monkeypatch):
    """An mbarrier_wait that nothing can end (here: the phase awaits an arrival no thread makes) stops
    the emulated launch with the CPU target's deadlock error naming the wait's line, instead of
    spinning for ever (a kernel's mbarrier bug then fails a test rather than hanging it)."""
    import numpy as np

    import kcompiler as kc
    from kcompiler.runtime.device import LaunchError
    src = """
    kernel k(out: ptr<u32>) {
        let bar = bitcast[ptr<u64, shared>](dynamic_shared[u64]());
        if thread_id.x == 0 {
            mbarrier_init(bar, 2);
        }
        barrier();
        mbarrier_arrive(bar);
        mbarrier_wait(bar, 0);
        out[thread_id.x] = 1u32;
    }
    """
    monkeypatch.setenv("KC_CPU_DEADLOCK_SECONDS", "1")
    mod = kc.compile(src, target="cpu", target_options={"emulate_wgmma": True})
    out = np.zeros(1, np.uint32)
    with pytest.raises(LaunchError, match=r"deadlock in block \(0,0,0\).*<string>:9:"):
        mod.k[1, 1](out, shared=16)
    mod.k[1, 2](np.zeros(2, np.uint32), shared=16)  # two arrivals: the phase completes


def test_tma_strides():
    """An axis of one element gets a packed stride (torch reports any for it)."""
    from kcompiler.runtime.tensormap import tma_strides
    assert tma_strides((1, 8), (2, 2), 2) == (16, 2)     # a (1, 8) bf16 view of a column
    assert tma_strides((4, 8), (16, 2), 2) == (16, 2)
    assert tma_strides((4, 1), (2, 2), 2) == (2, 2)      # rows of 2 bytes: tensor_map refuses them
    assert tma_strides((3, 1, 8), (64, 7, 2), 2) == (64, 16, 2)


def test_tensor_map_parameter_layout():
    """A launch packs a tensor map's 128 bytes at a 64-byte aligned offset, scalars in 8-byte slots."""
    from kcompiler.ir.types import TENSOR_MAP, I32, PointerType, F32
    from kcompiler.runtime.cuda import _param_offsets, _param_struct
    from kcompiler.runtime.device import KernelParam

    class Art:
        symbol = "k"
        params = [KernelParam("n", I32), KernelParam("ta", TENSOR_MAP), KernelParam("c", PointerType(F32)),
                  KernelParam("tb", TENSOR_MAP)]

    assert _param_offsets(Art()) == [0, 64, 192, 256]
    assert _param_struct(Art()).size == 384
    assert _param_offsets(Art(), 56) == [56, 64, 192, 256]
    assert _param_struct(Art(), 56).size == 384 - 56


def test_tensor_map_type_roundtrips():
    from kcompiler.ir.types import TENSOR_MAP, alignof, sizeof
    from kcompiler.runtime.cache import type_from_str

    assert type_from_str("tensor_map") == TENSOR_MAP and sizeof(TENSOR_MAP) == 128 and alignof(TENSOR_MAP) == 64
