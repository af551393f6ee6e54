"""LLVM's code generator runs in a forked child (kcompiler/backends/llvm/codegen.py): what it ends the
process on (an error diagnostic: exit(1); report_fatal_error: abort) comes back as a located error
where it is the program past a limit (AMDGCN's private segment with register spills) and as an
InternalCompilerError naming kernel, stage and target otherwise. Each case runs in a subprocess, so
that a regression ends that process, not the test run."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from ..paths import ROOT


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _kc(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kcompiler.cli", *map(str, args)], capture_output=True,
                          text=True, env=_env(), timeout=300)


def _py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=_env(), timeout=300)


def spilling_kernel(live: int = 48, array: int = 32760) -> str:
    """A kernel whose local array fits gfx942's private segment (32,760 floats: 131,040 bytes of
    131,056, so kcompiler's own check passes) and whose ``live`` vec4 values, live across a loop that
    stores to global memory, are more than the 128 VGPRs of a wave64 kernel of 1,024 threads: LLVM
    spills them to the private segment, past its end ("stack frame size (131332) exceeds limit
    (131056)", which ended the process)."""
    lines = ["kernel k(x: ptr<f32>, y: ptr<vec<f32, 4>>, n: i32) {", f"    var a: [f32; {array}];",
             "    let t = i32(thread_id.x);"]
    lines += [f"    let v{j} = y[t * {live} + {j}];" for j in range(live)]
    lines.append(f"    for i in range(0, n) {{ a[(i * 7 + t) % {array}] = x[i]; x[i + 1] = a[(i * 5) % {array}]; }}")
    lines.append("    let s = " + " + ".join(f"v{j}" for j in range(live)) + ";")
    lines.append(f"    x[t] = a[t % {array}] + s.x + s.y + s.z + s.w;")
    return "\n".join(lines) + "\n}\n"


@pytest.mark.parametrize("emit", ["asm", "obj"])
def test_register_spills_past_the_private_segment_are_a_located_error(tmp_path, emit):
    """Before: LLVM printed "error: <unknown>:0:0: stack frame size (131332) exceeds limit (131056) in
    function 'k'" and ended the process (exit 1, no location, nothing said it was the program). Now:
    exit 1 with a located error at the kernel naming the bytes, the limit and the arch; no output file."""
    p = tmp_path / "spill.kc"
    p.write_text(spilling_kernel())
    out = tmp_path / ("k.s" if emit == "asm" else "k.co")
    r = _kc("compile", "-t", "amdgcn", "-a", "gfx942", "-e", emit, "-o", out, p)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "internal compiler error" not in r.stderr, r.stderr[-2000:]
    m = re.search(rf"{re.escape(str(p))}:1:8: error: private memory of ([\d,]+) bytes a work-item in k \(its "
                  r"local arrays and the registers the code generator spilled to memory\) exceeds the "
                  r"131,056-byte private segment of a work-item on gfx942", r.stderr)
    assert m, r.stderr[-2000:]
    assert int(m.group(1).replace(",", "")) > 131056
    assert not out.exists()
    # fewer live values: no spill past the end, it compiles
    p.write_text(spilling_kernel(live=8))
    r = _kc("compile", "-t", "amdgcn", "-a", "gfx942", "-e", emit, "-o", out, p)
    assert r.returncode == 0, r.stderr[-2000:]


# A module LLVM's instruction selector cannot select on each target (an abort, "LLVM ERROR: Cannot
# select"), emitted under the name of a real lowered kernel 'k' through the pipeline's emission().
_CANNOT_SELECT = {
    ("amdgcn", "gfx942"): ("bf16 = AMDGPUISD::RSQ", """
        target triple = "amdgcn-amd-amdhsa"
        declare bfloat @llvm.amdgcn.rsq.bf16(bfloat)
        define amdgpu_kernel void @k(ptr addrspace(1) %p) {
          %x = load bfloat, ptr addrspace(1) %p
          %y = call bfloat @llvm.amdgcn.rsq.bf16(bfloat %x)
          store bfloat %y, ptr addrspace(1) %p
          ret void
        }"""),
    ("nvptx", "sm_90"): ("intrinsic %llvm.amdgcn.workitem.id.x", """
        target triple = "nvptx64-nvidia-cuda"
        declare i32 @llvm.amdgcn.workitem.id.x()
        define ptx_kernel void @k(ptr addrspace(1) %p) {
          %x = call i32 @llvm.amdgcn.workitem.id.x()
          store i32 %x, ptr addrspace(1) %p
          ret void
        }"""),
}


@pytest.mark.parametrize("target,arch", list(_CANNOT_SELECT))
@pytest.mark.parametrize("kind", ["asm", "obj"])
def test_an_llvm_abort_in_the_code_generator_is_an_internal_compiler_error(target, arch, kind):
    """Before: "LLVM ERROR: Cannot select" and SIGABRT of the user's process. Now the process lives on
    and gets an InternalCompilerError naming the stage, the kernel, the target and LLVM's words."""
    if kind == "obj" and target == "nvptx":
        pytest.importorskip("shutil").which("ptxas") or pytest.skip("no ptxas")
    words, ir = _CANNOT_SELECT[(target, arch)]
    r = _py(f"""
        import llvmlite.binding as llvm
        from kcompiler.backends.llvm import InternalCompilerError, emission, initialize
        from kcompiler.pipeline import load, lower_to_ir, resolve_target, Source
        t = resolve_target({target!r}, {arch!r})
        module = lower_to_ir(load(Source("kernel k(x: ptr<f32>) {{ x[0] = 1.0; }}", "k.kc")), t, {{"k": {{}}}})
        initialize()
        ref = llvm.parse_assembly({textwrap.dedent(ir)!r})
        ref.verify()
        try:
            with emission(module, t, {kind!r}):
                t.emit(ref, {kind!r})
        except InternalCompilerError as e:
            print("ICE:", e)
        print("alive")
        """)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert r.stdout.rstrip().endswith("alive"), r.stdout
    assert "ICE: internal compiler error: the target's code generator" in r.stdout, r.stdout
    assert f"failed for k ({target} {arch}): LLVM ERROR: Cannot select" in r.stdout and words in r.stdout
    assert "LLVM ended the code generator's process: signal SIGABRT" in r.stdout
    assert "please report it" in r.stdout


@pytest.mark.parametrize("target,arch", [("amdgcn", "gfx942"), ("nvptx", "sm_90"), ("cpu", None)])
def test_emitting_one_optimised_module_twice_gives_the_same_code(target, arch):
    """The code generator rewrote the parent's module as it ran: a second emission (the pipeline's
    PTX fallback where ptxas is missing emits obj, then asm) gave other PTX or host assembly and, on
    AMDGCN, aborted ("Cannot select: intrinsic %llvm.amdgcn.if"). In a child the parent's module is
    untouched."""
    r = _py(f"""
        from kcompiler.backends.llvm import compile_ir
        from kcompiler.frontend import check
        from kcompiler.pipeline import load, lower_to_ir, resolve_target, Source
        t = resolve_target({target!r}, {arch!r})
        p = load(Source(open({str(ROOT / "examples" / "softmax.kc")!r}).read(), "softmax.kc"))
        check(p, t)
        ref = compile_ir(lower_to_ir(p, t, {{"softmax": {{}}}}), t)
        a = t.emit(ref, "asm")
        b = t.emit(ref, "asm")
        print("same" if a == b and len(a) > 1000 else "different")
        """)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert r.stdout.strip() == "same"


def test_machine_code_reports_how_the_child_ended_and_relays_its_warnings(capfd):
    """Unit: a child ended by a signal or an exit status gives CodegenDied with LLVM's error lines and
    how it ended; a child that succeeds returns its result and what it printed reaches our stderr."""
    from kcompiler.backends.llvm.codegen import CodegenDied, machine_code

    class FakeTM:
        def __init__(self, act):
            self.act = act

        def emit_assembly(self, ref):
            return self.act()

        def emit_object(self, ref):
            return self.act()

    def abort():
        os.write(2, b"noise\nLLVM ERROR: Cannot select: something\nIn function: k\n")
        os.abort()

    def leave():
        os.write(2, b"error: <unknown>:0:0: stack frame size (9) exceeds limit (8) in function 'k'\n")
        os._exit(1)

    def warn():
        os.write(2, b"warning: a warning of LLVM\n")
        return "x" * 3_000_000  # more than a pipe holds

    with pytest.raises(CodegenDied) as e:
        machine_code(FakeTM(abort), None, "asm")
    assert str(e.value) == ("LLVM ERROR: Cannot select: something\nIn function: k "
                            "(LLVM ended the code generator's process: signal SIGABRT)")
    assert "noise" in e.value.printed
    with pytest.raises(CodegenDied) as e:
        machine_code(FakeTM(leave), None, "obj")
    assert str(e.value).endswith("in function 'k' (LLVM ended the code generator's process: exit status 1)")
    capfd.readouterr()
    assert machine_code(FakeTM(warn), None, "asm") == "x" * 3_000_000
    assert machine_code(FakeTM(lambda: b"\x7fELF" * 10), None, "obj") == b"\x7fELF" * 10
    assert "warning: a warning of LLVM" in capfd.readouterr().err


def test_a_block_of_more_than_large_block_loads_and_stores_is_compiled_without_the_vectorizer():
    """LLVM's GPU load/store vectorizer takes time growing as the square of a block's loads and stores
    (4,096 unrolled stores: 3.5 of NVPTX's 4.2 s of code generation). Past codegen.LARGE_BLOCK in a
    block the child turns it off: the copy into shared memory keeps its scalar stores (before: v4
    stores, and the time); a small block is still vectorized."""
    from kcompiler.backends.llvm.codegen import LARGE_BLOCK
    from kcompiler.pipeline import Source, emit

    def ptx(n: int) -> str:
        src = (f"kernel k(x: ptr<f32>) {{\n    shared s: [f32; {n}];\n    for i in comptime range(0, {n}) "
               "{ s[i] = x[i]; }\n    barrier();\n    x[thread_id.x] = s[thread_id.x];\n}\n")
        return emit(Source(src, "sh.kc"), "asm", "nvptx", "sm_90")
    small = ptx(8)
    assert small.count("st.shared.v4.b32") == 2
    n = LARGE_BLOCK // 2 + 50  # n loads and n stores in the block
    big = ptx(n)
    assert big.count("st.shared.v4") == 0 and big.count("st.shared.b32") == n


def test_a_long_chain_of_predicated_loads_takes_nvptx_codegen_at_o2(monkeypatch):
    """NVPTX's code generator at O3 ends its IR passes with a GVN whose time grows about as the cube of a
    chain of predicated loads (a comptime loop of 512 ``if i < n { acc += x[i] }``: 52 s of code
    generation, where O2's EarlyCSE takes 2 s; the fuzzer's hang of 2026-11-29). Past codegen.GVN_HEAVY
    (blocks x loads of a function) the target emits at O2; a small kernel stays at O3. The PTX is the
    same computation: every load is still there."""
    import llvmlite.binding as llvm

    from kcompiler.backends.llvm.codegen import GVN_HEAVY, late_gvn_cost
    from kcompiler.pipeline import Source, emit

    def src(n: int) -> Source:
        return Source(f"kernel k(x: ptr<f32>, out: ptr<f32>, n: i32) {{\n    var acc: f32 = 0.0;\n"
                      f"    for k in comptime range(0, {n}) {{\n        let i = k * block_dim.x + thread_id.x;\n"
                      "        if i < n {\n            acc += x[i];\n        }\n    }\n    out[thread_id.x] = acc;\n}\n",
                      f"chain{n}.kc")

    small = llvm.parse_assembly(emit(src(8), "llvm", "nvptx", "sm_90"))
    big = llvm.parse_assembly(emit(src(512), "llvm", "nvptx", "sm_90"))
    assert late_gvn_cost(small) < GVN_HEAVY < late_gvn_cost(big)
    from kcompiler.backends.nvptx.target import NvptxTarget
    levels = []
    tm = NvptxTarget.target_machine
    monkeypatch.setattr(NvptxTarget, "target_machine", lambda self, opt_level=3: levels.append(opt_level) or
                        tm(self, opt_level))
    assert emit(src(8), "asm", "nvptx", "sm_90").count("ld.global") == 8
    ptx = emit(src(512), "asm", "nvptx", "sm_90")  # a minute at O3
    assert ptx.count("ld.global") == 512, ptx.count("ld.global")
    assert levels[-1] == 2 and 3 in levels[:-1], levels  # the small kernel's code generator ran at O3
