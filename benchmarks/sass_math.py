"""std.math's cost in machine instructions, without a GPU: each f32 function compiled for sm_90a in a
one-element kernel (y[i] = math.f(x[i])), assembled by ptxas and disassembled, its SASS counted.

    python benchmarks/sass_math.py [--only exp,log] [--fast] [--arch sm_90a] [--keep DIR]

Prints per function: PTX instructions, SASS instructions (NOPs excluded; the kernel's indexing, load
and store are 17 of them on sm_90a), MUFU (special-function unit) instructions, branches and ptxas's
register count. The count is static: a rarely taken branch's code counts too. On the H100 a
branch-free function of about 45 SASS instructions per element or fewer (the count less 17) ran at
the copy bound in bench_math.py's 4-element kernel (docs/math.md). Needs ptxas (PATH) and a
disassembler: nvdisasm or cuobjdump from PATH, or the one named by $NVDISASM. --keep DIR writes each
function's SASS to DIR/<name>.sass.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kcompiler.numerics.mathfns import FAST, FUNCTIONS  # noqa: E402
from kcompiler.pipeline import compile_source_to  # noqa: E402

SRC = """
import std.math
kernel apply(x: ptr<f32>, z: ptr<f32>, y: ptr<f32>) {
    let i = i64(block_id.x) * i64(block_dim.x) + i64(thread_id.x);
    y[i] = CALL;
}
"""


def disassembler() -> list[str]:
    """The command that prints a cubin's SASS (its file name appended)."""
    nvd = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if nvd:
        return [nvd, "-c"]
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump:
        return [cuobjdump, "-sass"]
    sys.exit("sass_math.py: no nvdisasm or cuobjdump on PATH (or set NVDISASM)")


def count(name: str, fast: bool, arch: str, dis: list[str], keep: str | None) -> str:
    f = FUNCTIONS[name]
    fn = f"math.{'fast_' if fast else ''}{name}"
    call = f"{fn}(x[i])" if f.arity == 1 else f"{fn}(x[i], z[i])"
    ptx = compile_source_to(SRC.replace("CALL", call), "sass_math.kc", "asm", "nvptx", arch)
    body = ptx[ptx.index("{", ptx.index(".entry")):]
    n_ptx = sum(1 for line in body.splitlines()
                if line.strip().endswith(";") and not line.strip().startswith((".reg", "//")))
    with tempfile.TemporaryDirectory() as d:
        with open(f"{d}/k.ptx", "w") as fh:
            fh.write(ptx)
        r = subprocess.run(["ptxas", f"-arch={arch}", "-v", f"{d}/k.ptx", "-o", f"{d}/k.cubin"],
                           capture_output=True, text=True)
        if r.returncode:
            return f"{fn:18s} ptxas failed: {r.stderr.strip()[:200]}"
        sass = subprocess.run([*dis, f"{d}/k.cubin"], capture_output=True, text=True).stdout
    ins = [re.sub(r"\s*/\*[^*]*\*/\s*", " ", line).strip() for line in sass.splitlines()
           if re.match(r"\s*/\*[0-9a-f]{4}\*/", line)]
    ins = [i for i in ins if i and not i.startswith("NOP")]
    if keep:
        with open(os.path.join(keep, f"{'fast_' if fast else ''}{name}.sass"), "w") as fh:
            fh.write("\n".join(ins) + "\n")
    regs = re.search(r"Used (\d+) registers", r.stderr)
    mufu = sum("MUFU" in i for i in ins)
    branches = sum(bool(re.search(r"\bBRA\b", i)) for i in ins)
    return (f"{fn:18s} PTX {n_ptx:4d}  SASS {len(ins):4d}  MUFU {mufu:2d}  branches {branches:2d}  "
            f"registers {regs.group(1) if regs else '?'}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--fast", action="store_true", help="the fast versions (math.fast_<name>)")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--keep", default=None, help="a folder for each function's SASS")
    args = ap.parse_args()
    if shutil.which("ptxas") is None:
        sys.exit("sass_math.py: ptxas is not on PATH")
    dis = disassembler()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    names = [n for n in FUNCTIONS if (not args.only or n in args.only.split(","))
             and (not args.fast or n in FAST)]
    for name in names:
        print(count(name, args.fast, args.arch, dis, args.keep), flush=True)


if __name__ == "__main__":
    main()
