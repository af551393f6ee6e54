"""std.moe_gemm's MXFP4 tensor-core variants in machine instructions, without a GPU: each variant of
bench_moe_gemm.py's --variants table compiled for sm_90a at block_m 8 (decode batches: T <= 64 at
gpt-oss's E 32, top_k 4), assembled by ptxas and disassembled; the main loop's SASS counted.

    NVDISASM=/path/to/nvdisasm python benchmarks/sass_moe_gemm.py [--kernels moe_gemm1,moe_gemm2]

Prints per kernel and variant: ptxas's registers, the main loop's static instruction count (the largest
loop), its hot path (less the basic blocks a decode batch with scales <= 128 does not run: DEC 2's
two-factor pass, CHK 0's checked loads of the last step, DEC 1's branched second factors), hot
instructions per weight byte a lane loads (U * rows * 16 bytes a step) and integer-pipe (ALU)
instructions per byte, and the hot path by opcode. Static counts: ptxas's schedule is not timing.
Needs ptxas (PATH) and nvdisasm (PATH or $NVDISASM).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kcompiler import pipeline  # noqa: E402
from kcompiler.frontend.program import stdlib_dir  # noqa: E402

#: name -> compile-time values over the default tiling (BM 8: MT 1, KW 4, U 2); bench_moe_gemm.py's rows.
VARIANTS = {
    "default (mul)": dict(DEC=1), "shift": dict(DEC=0), "mul chk0": dict(DEC=1, CHK=0), "split": dict(DEC=2),
    "split chk0": dict(DEC=2, CHK=0), "split chk0 pf": dict(DEC=2, CHK=0, PF=1),
    "split chk0 pf U1": dict(DEC=2, CHK=0, PF=1, U=1), "split pf U1": dict(DEC=2, PF=1, U=1),
    "split chk0 U3": dict(DEC=2, CHK=0, U=3), "split chk0 U4 KW2": dict(DEC=2, CHK=0, U=4, KW=2),
    "split chk0 KW8": dict(DEC=2, CHK=0, KW=8), "split chk0 MT2": dict(DEC=2, CHK=0, MT=2),
    "mul, MXFP8 x": dict(DEC=1, X="f8e4m3"), "split chk0, MXFP8 x": dict(DEC=2, CHK=0, X="f8e4m3"),
}
ALU = ("LOP3", "SHF", "PRMT", "ISETP", "SEL", "IADD3", "VIADD", "LEA", "VIMNMX", "VIMNMX3", "PLOP3", "CS2R", "P2R")


def sass(kernel: str, comptime: dict, nvd: str) -> tuple[str, str]:
    """(ptxas's -v log, nvdisasm's listing) of std.moe_gemm's ``kernel`` at ``comptime``."""
    ptx = pipeline.emit_file(stdlib_dir() / "moe_gemm.kc", "asm", target="nvptx", arch="sm_90a", kernel=kernel,
                             comptime=comptime)
    with tempfile.TemporaryDirectory() as d:
        open(f"{d}/k.ptx", "w").write(ptx)
        log = subprocess.run(["ptxas", "-arch=sm_90a", "-v", f"{d}/k.ptx", "-o", f"{d}/k.cubin"],
                             capture_output=True, text=True, check=True).stderr
        return log, subprocess.run([nvd, "-c", f"{d}/k.cubin"], capture_output=True, text=True, check=True).stdout


def loop_blocks(text: str) -> list[tuple[int, collections.Counter]]:
    """The basic blocks (size, opcode counts) of the largest loop (a backward branch's span)."""
    ins, labels, pend = [], {}, []
    for line in text.splitlines():
        lm = re.match(r"\s*(\.L_x_\d+):", line)
        if lm:
            pend.append(lm.group(1))
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            a = int(m.group(1), 16)
            ins.append((a, m.group(3), line, tuple(pend)))
            labels.update((p, a) for p in pend)
            pend = []
    body = None
    for a, op, line, _ in ins:
        t = re.search(r"(\.L_x_\d+)", line) if op.startswith("BRA") else None
        if t and labels.get(t.group(1), 1 << 40) < a:
            span = [x for x in ins if labels[t.group(1)] <= x[0] <= a]
            body = span if body is None or len(span) > len(body) else body
    blocks, cur = [], []
    for x in body or []:
        if x[3] and cur:
            blocks.append(cur)
            cur = []
        cur.append(x)
        if x[1].startswith("BRA"):
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    return [(len(b), collections.Counter(x[1].split(".")[0] for x in b)) for b in blocks]


def hot_path(blocks, dec: int, chk: int) -> tuple[int, collections.Counter]:
    """The loop's instructions a step of a decode batch runs (see the module docstring)."""
    skip = set()
    big = sorted((i for i, b in enumerate(blocks) if b[1].get("HMUL2", 0) >= 32), key=lambda i: -blocks[i][1]["HMUL2"])
    if dec == 2 and len(big) >= 2:
        skip.add(big[0])
    loads = sorted((i for i, b in enumerate(blocks) if b[1].get("LDG", 0) >= 4), key=lambda i: -blocks[i][0])
    if chk == 0 and len(loads) >= 2:
        skip.add(loads[0])
    n, c = 0, collections.Counter()
    for i, (size, ops) in enumerate(blocks):
        if i in skip or set(ops) == {"HMUL2"} or (size == 2 and "LDG" in ops):
            continue
        n += size
        c.update(ops)
    return n, c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default="moe_gemm1,moe_gemm2")
    args = ap.parse_args()
    nvd = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if not nvd or not shutil.which("ptxas"):
        sys.exit("sass_moe_gemm.py: needs ptxas on PATH and nvdisasm (PATH or $NVDISASM)")
    for kernel in args.kernels.split(","):
        sides = 2 if kernel == "moe_gemm1" else 1
        for name, ct in VARIANTS.items():
            if "X" in ct and kernel != "moe_gemm1":
                continue
            comp = {**dict(W="u8", WS="u8", MMA=True, BM=8, MT=1, KW=4, U=2), **ct}
            log, text = sass(kernel, comp, nvd)
            regs = re.search(r"Used (\d+) registers", log).group(1)
            spill = "" if "0 bytes spill stores" in log else " SPILLS"
            blocks = loop_blocks(text)
            n, c = hot_path(blocks, comp["DEC"], comp.get("CHK", 1))
            nbytes = comp["U"] * sides * comp["MT"] * 2 * 16
            alu = sum(c[k] for k in ALU)
            top = " ".join(f"{k} {v}" for k, v in c.most_common(8))
            print(f"{kernel} {name:22s} regs {regs:>3}{spill} static {sum(b[0] for b in blocks):5d} hot {n:5d} "
                  f"per byte {n / nbytes:5.2f} ALU/byte {alu / nbytes:4.2f} | {top}", flush=True)


if __name__ == "__main__":
    main()
