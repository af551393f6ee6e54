"""setmaxnreg's register pool in the warp-specialised Hopper kernels (std.attention_sm90,
std.matmul_sm90, std.mla_sm90, std.moe_sm90_mx).

PTX ISA, setmaxnreg: "A pool of available registers is maintained per-CTA"; setmaxnreg.dec releases a
warpgroup's registers to it and setmaxnreg.inc "blocks the execution until enough registers are
available in the CTA's register pool". Every warpgroup starts at the kernel's register count (ptxas -v's
"Used N registers": the launch bound's), so the producer's release must cover the consumers' increase:
dec + consumers x inc <= (consumers + 1) x N. std.moe_sm90_mx asked for 64 + 2 x 224 = 512 against 3 x
168 = 504 and hung on the H100 once ptxas honoured setmaxnreg (benchmarks/RESULTS.md, 2026-11-27).
"""
from __future__ import annotations

import re

import pytest

from kcompiler.frontend.program import stdlib_dir
from kcompiler.pipeline import emit_file

from ..ptxas_util import needs_ptxas, ptxas

#: (stdlib file, kernel, compile-time values, consumer warpgroups): one producer warpgroup besides
CASES = [("moe_sm90_mx.kc", "matmul_sm90_grouped_mxfp4", dict(OUT="bf16", FUSE=1), 2),
         ("moe_sm90_mx.kc", "matmul_sm90_grouped_mxfp4", dict(OUT="bf16", FUSE=0), 2),
         ("matmul_sm90.kc", "matmul_sm90", dict(T="bf16"), 2),
         ("mla_sm90.kc", "mla_decode_sm90", dict(T="bf16", OUT="bf16"), 2),
         ("attention_sm90.kc", "attention_prefill_sm90", dict(T="bf16", D=128, CAUSAL=True, PINGPONG=True, TURNS=1), 2),
         ("attention_sm90.kc", "attention_prefill_sm90", dict(T="bf16", D=64, CONSUMERS=3), 3),
         ("attention_sm90.kc", "attention_prefill_sm90", dict(T="bf16", D=256, BN=96, CONSUMERS=1), 1),
         ("attention_sm90.kc", "attention_prefill_sm90", dict(T="bf16", D=64, CONSUMERS=1, BLOCKS_PER_SM=2), 1)]


def pool(ptx: str, log: str) -> tuple[int, int, int]:
    """(the kernel's registers a thread, the producer's setmaxnreg.dec, the consumers' setmaxnreg.inc)
    from its PTX and ptxas -v's report."""
    used = int(re.search(r"Used (\d+) registers", log).group(1))
    dec = re.findall(r"setmaxnreg\.dec\.sync\.aligned\.u32 (\d+);", ptx)
    inc = re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32 (\d+);", ptx)
    assert len(set(dec)) == 1 and len(set(inc)) == 1, (dec, inc)
    return used, int(dec[0]), int(inc[0])


def _ids(c) -> str:
    return f"{c[1]}-{'-'.join(f'{k}{v}' for k, v in c[2].items())}"


#: The MoE kernels (the one that hung) and the default matmul always run; of the attention and MLA
#: kernels a sample of 2 by default (CI time), all with -m slow.
PARAMS = [pytest.param(c, id=_ids(c), marks=[pytest.mark.slow(sample=2)] if k >= 3 else [])
          for k, c in enumerate(CASES)]


@needs_ptxas
@pytest.mark.parametrize("case", PARAMS)
def test_consumers_increase_within_the_producers_release(case):
    """dec + consumers x inc <= (consumers + 1) x the kernel's registers: setmaxnreg.inc never waits
    for registers the block does not have."""
    path, kernel, comptime, consumers = case
    ptx = emit_file(stdlib_dir() / path, "asm", "nvptx", "sm_90a", kernel=kernel, comptime=comptime)
    used, dec, inc = pool(ptx, ptxas(ptx, verbose=True))
    assert dec <= used <= inc
    assert dec + consumers * inc <= (consumers + 1) * used, (used, dec, inc)


def test_pool_rule_catches_the_old_mxfp4_split():
    """The rule against the split that hung (64 + 2 x 224 at 168): 512 > 504; the kernel now refuses it
    at compile time."""
    import kcompiler as kc
    assert 64 + 2 * 224 > 3 * 168 and 64 + 2 * 216 <= 3 * 168
    with pytest.raises(kc.CompileError, match="DQ_REGS \\+ 2 CONS_REGS <= 504"):
        emit_file(stdlib_dir() / "moe_sm90_mx.kc", "asm", "nvptx", "sm_90a", kernel="matmul_sm90_grouped_mxfp4",
                  comptime=dict(OUT="bf16", CONS_REGS=224))
