"""``sched_barrier()``: the machine code's scheduler moves no instruction across it.

NVIDIA: ptxas has no such directive; the barrier ends ptxas's basic block with a branch it can neither
fold nor if-convert (to a spin loop never entered: %nsmid is never 0). AMD: LLVM's
``llvm.amdgcn.sched.barrier(0)``. The CPU target: nothing. What it is for (a wgmma wait kept below a
softmax) is tests/ops/test_attention_sm90.py's test_prefill_sm90_overlap_in_sass."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.pipeline import compile_source_to

from ..draws import fresh_rng
from ..ptxas_util import needs_nvdisasm, needs_ptxas, ptxas, sass

SRC = """
kernel k(x: ptr<f32>, y: ptr<f32>, n: i32) {
    let i = i32(block_id.x * block_dim.x + thread_id.x);
    if i < n {
        let a = x[i] * 3.0;
        sched_barrier();
        y[i] = a - 1.0;
    }
}
"""


@needs_ptxas
def test_nvptx_ends_ptxas_block_with_a_branch_it_cannot_fold():
    ptx = compile_source_to(SRC, "k.kc", "asm", "nvptx", "sm_90a")
    body = ptx.split(".entry k", 1)[1]
    assert "mov.u32 n, %nsmid;" in body and "nanosleep.u32 1;" in body
    assert body.index("ld.global") < body.index("%nsmid") < body.index("st.global")
    ptxas(ptx, "sm_90a")


@needs_nvdisasm
def test_nvptx_barrier_survives_ptxas():
    """The branch and the spin loop are still in the SASS (a branch ptxas folded would take the
    barrier with it)."""
    code = sass(compile_source_to(SRC, "k.kc", "asm", "nvptx", "sm_90a"))
    assert any(x.startswith("NANOSLEEP") for x in code), code
    assert sum("BRA" in x for x in code) >= 2, code


def test_amdgcn_emits_the_llvm_sched_barrier():
    ll_text = compile_source_to(SRC, "k.kc", "llvm", "amdgcn", "gfx942")
    assert "call void @llvm.amdgcn.sched.barrier(i32 0)" in ll_text
    compile_source_to(SRC, "k.kc", "asm", "amdgcn", "gfx942")


def test_cpu_runs_through_it():
    m = kc.compile(SRC, target="cpu", path="k.kc")
    x = fresh_rng().integers(-10**6, 10**6, 77).astype(np.float32)  # 3 x - 1 exact, contracted or not
    y = np.zeros_like(x)
    m.k[3, 32](x, y, x.size)
    np.testing.assert_array_equal(y, x * np.float32(3) - np.float32(1))


def test_takes_no_arguments():
    with pytest.raises(kc.CompileError, match="sched_barrier"):
        kc.compile(SRC.replace("sched_barrier()", "sched_barrier(1)"), target="cpu", path="k.kc")
