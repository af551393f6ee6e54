"""Helpers of the Hopper prefill's tests (test_attention_sm90*.py): the module kcompiler.ops.attention,
an autouse fixture that gives each test an empty plan cache, the kernel compiled for the CPU target's
wgmma emulation (a fixture), its sm_90a PTX, and packed variable-length inputs."""
from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np
import pytest

from ..draws import fresh_rng

RNG = fresh_rng()

#: The module kcompiler.ops.attention (the package's attribute of that name is the function).
ops_attention = importlib.import_module("kcompiler.ops.attention")


@pytest.fixture(autouse=True)
def fresh_plans(monkeypatch):
    """Each test starts with no prepared Hopper-path call (ops.attention's PLANS): one made on the
    emulated module must not serve another test's call."""
    from collections import OrderedDict
    monkeypatch.setattr(ops_attention, "PLANS", OrderedDict())


@pytest.fixture(scope="module")
def emulated():
    """std.attention_sm90 on the CPU target with the Hopper instructions emulated."""
    import kcompiler as kc
    from kcompiler.frontend.program import stdlib_dir
    return kc.compile_file(stdlib_dir() / "attention_sm90.kc", target="cpu", target_options={"emulate_wgmma": True})


def sm90_ptx(**comptime) -> str:
    """sm_90a PTX of attention_prefill_sm90 as ops builds it (approx_ftz)."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    return emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a", approx_ftz=True),
                     kernel="attention_prefill_sm90", comptime=comptime)


def exp2_under_pv(code: list[str]) -> int:
    """The MUFU.EX2 of SASS ``code`` (tests/ptxas_util.sass) between the first wait for S
    (WARPGROUP.DEPBAR.LE gsb0, 0x1: one group, P V, may still run) and the next wait for P V (0x0):
    the softmax's exponentials that run under P V."""
    start = next(i for i, x in enumerate(code) if x.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x1"))
    end = next(i for i in range(start, len(code)) if code[i].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
    return sum(x.startswith("MUFU.EX2") for x in code[start:end])


def packed_with_nan_tails(lq, lk, H, HK, D, tail_q, tail_k):
    """Packed bf16 q, k, v of sequences of ``lq`` queries and ``lk`` keys (int32 cu_seqlens), with
    ``tail_q`` / ``tail_k`` rows of NaN past the last sequence (a buffer longer than the total, as
    torch.empty may leave it)."""
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q = RNG.standard_normal((cu_q[-1] + tail_q, H, D)).astype(ml_dtypes.bfloat16)
    k = RNG.standard_normal((cu_k[-1] + tail_k, HK, D)).astype(ml_dtypes.bfloat16)
    v = RNG.standard_normal((cu_k[-1] + tail_k, HK, D)).astype(ml_dtypes.bfloat16)
    q[cu_q[-1]:], k[cu_k[-1]:], v[cu_k[-1]:] = np.nan, np.nan, np.nan
    return cu_q, cu_k, q, k, v
