"""kcompiler.ops.matmul_sm90_traffic.plan and explain: the Hopper matmul's default choice for a shape,
with the lines of the rules that made it (issue 23: "the tile/schedule choice explains itself"). No GPU:
the choice is host arithmetic."""
from __future__ import annotations

import itertools

import pytest

from kcompiler.ops import matmul_sm90 as mm
from kcompiler.ops.matmul_sm90_traffic import explain, plan


@pytest.mark.parametrize("M,N,K,dtype,kmajor", [
    (M, N, K, dt, km) for (M, N, K), dt, km in itertools.product(
        [(1, 4096, 4096), (16, 14336, 4096), (56, 4096, 14336), (57, 4096, 4096), (128, 14336, 4096),
         (1024, 14336, 4096), (8192, 4096, 4096), (300, 1000, 700)], ["bf16", "f8e4m3"], [True, False])])
def test_plan_is_prepares_choice(M, N, K, dtype, kmajor):
    """plan() composes what prepare does by default for the plain product: choose's configuration (by
    name), small_m_rows' AROWS and STAGES over it, choose_split on the result; choose's ``why`` list
    changes nothing it returns."""
    cfg = mm.choose(M, N, K, 132, kmajor)
    lines: list[str] = []
    assert mm.choose(M, N, K, 132, kmajor, why=lines) == cfg and lines
    want = {**cfg, **mm.small_m_rows(M, cfg)}
    p = plan(M, N, K, dtype, 132, kmajor)
    assert mm.CONFIGS[p["name"]] == cfg and p["config"] == want
    assert p["split_k"] == mm.choose_split(M, N, K, want, mm.BK[dtype], 132)
    assert p["traffic"]["t"] > 0 and len(p["why"]) > len(lines)  # choose's lines, then the split's


def test_explain_small_m():
    """16 x 4096 x 4096 bf16 on 132 SMs: the 128-row tiles refused (one consumer for M <= 64), 64 x 128
    and 64 x 64 tiles too few, 64 x 32 ones fill one wave (128 tiles); 16 rows of A a stage in 33
    stages; not split. 16 x 2048 x 4096: none fills 80 %, so 64x64 in 2 shares of 32 k-steps."""
    text = explain(16, 4096, 4096)
    head = text.splitlines()[0]
    assert "64x32 (tiles of 64 x 32, 1 consumer warpgroup, 33 stages, AROWS 16), split-K 1" in head, text
    assert "tma128x256h: not for M <= 64" in text and "64x64: 64 tiles, under 80 %" in text
    assert "64x32: 128 tiles give at least 80 %" in text
    assert "a stage holds 16 rows of A, 33 stages" in text and "split-K 1: 128 tiles" in text
    assert "traffic model" in text.splitlines()[-1]
    text = explain(16, 2048, 4096)
    assert "64x64 (tiles of 64 x 64, 1 consumer warpgroup, 19 stages, AROWS 16), split-K 2" in text.splitlines()[0]
    assert "none fills 80 %: 64x64" in text and "split-K 2: 32 tiles" in text, text


def test_explain_wave_alternative():
    """1024 x 14336 x 4096: 448 tiles of 128 x 256 (3.39 waves of 132), so the busiest block multiplies
    4 x 256 columns; 512 of 128 x 224 make it 4 x 224, and choose takes those (WAVE_ALTERNATIVES)."""
    text = explain(1024, 14336, 4096, "f8e4m3")
    assert text.startswith("1024 x 14336 x 4096 f8e4m3 on 132 multiprocessors: tma128x224h"), text
    assert "tma128x224h instead: its busiest block multiplies 896 columns, not 1024" in text


def test_explain_one_wave():
    """128 x 14336 x 4096: 128x256 tiles are 56 (under 80 % of 132); 128 x 112 ones are 128, one wave."""
    text = explain(128, 14336, 4096)
    assert ": 128x112 (tiles of 128 x 112, 2 consumer warpgroups, 7 stages), split-K 1" in text.splitlines()[0]
    assert "tma128x256h: 56 tiles, under 80 %" in text and "128x112: 128 tiles give at least 80 %" in text


def test_plan_errors():
    with pytest.raises(ValueError, match="dtype 'f32' is none of"):
        plan(16, 16, 16, "f32")
    with pytest.raises(ValueError, match="at least 1"):
        plan(0, 16, 16)
