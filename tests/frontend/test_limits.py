"""kcompiler's limits (kcompiler/limits.py, docs/LANGUAGE.md "Limits"): programs at a limit compile on
every target, programs past it get a located error, and nothing in between dies of Python's recursion
limit, a C stack overflow or an LLVM abort. Each deep program runs in a subprocess, so that a segfault
or an abort fails the test instead of ending the test run."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kcompiler.frontend import load_program, lower
from kcompiler.limits import MAX_DEPTH, MAX_LOOP_DEPTH
from kcompiler.pipeline import resolve_target
from ..paths import ROOT



def _kc(*args, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "kcompiler.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)


def nested_whiles(n: int) -> str:
    body = "x[0] = 1.0;"
    for _ in range(n):
        body = f"while x[0] < 1.0 {{ {body} }}"
    return f"kernel k(x: ptr<f32>) {{ {body} }}\n"


def else_if_chain(n: int) -> str:
    s = "if x[0] < 0.0 { x[0] = 0.0; }" + "".join(f" else if x[0] < {i}.0 {{ x[0] = {i}.0; }}"
                                                   for i in range(1, n))
    return f"kernel k(x: ptr<f32>) {{ {s} }}\n"


def nested_ifs(n: int) -> str:
    body = "x[0] = 1.0;"
    for _ in range(n):
        body = f"if x[0] < 1.0 {{ {body} }}"
    return f"kernel k(x: ptr<f32>) {{ {body} }}\n"


def nested_blocks(n: int) -> str:
    return "kernel k(x: ptr<f32>) { " + "{ " * n + "x[0] = 1.0; " + "} " * n + "}\n"


def nested_parens(n: int) -> str:
    return "kernel k(x: ptr<f32>) { x[0] = " + "(" * n + "x[0]" + " + 1.0)" * n + "; }\n"


def _located_error(r: subprocess.CompletedProcess, path: Path, words: str) -> None:
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr
    assert "internal compiler error" not in r.stderr
    m = re.search(rf"{re.escape(str(path))}:(\d+):(\d+): error: ([^\n]*)", r.stderr)
    assert m, r.stderr[-2000:]
    assert words in m.group(3), m.group(3)


# Each shape just inside the limit: (shape, n), n the largest the parser accepts (found by bisection
# when the limit was set; the test below checks that n + a few is rejected).
AT_LIMIT = [(else_if_chain, 993), (nested_ifs, 331), (nested_blocks, 995), (nested_parens, 995)]


@pytest.mark.parametrize("shape,n", AT_LIMIT, ids=[s.__name__ for s, _ in AT_LIMIT])
def test_deepest_accepted_programs_compile_on_every_target(tmp_path, shape, n):
    p = tmp_path / "deep.kc"
    p.write_text(shape(n))
    for target in ("nvptx", "amdgcn", "cpu"):
        r = _kc("compile", "-t", target, p, "-o", tmp_path / "out")
        assert r.returncode == 0, (target, r.returncode, r.stderr[-2000:])


@pytest.mark.parametrize("shape,n", AT_LIMIT, ids=[s.__name__ for s, _ in AT_LIMIT])
def test_one_level_past_the_limit_is_a_located_error(tmp_path, shape, n):
    p = tmp_path / "deep.kc"
    p.write_text(shape(n + 2))
    for cmd in ("check", "compile"):
        _located_error(_kc(cmd, p), p, f"nesting too deep: expressions and blocks may nest at most {MAX_DEPTH}")


@pytest.mark.parametrize("shape", [nested_whiles, else_if_chain, nested_ifs, nested_blocks, nested_parens])
def test_far_past_the_limit_is_a_located_error_never_a_crash(tmp_path, shape):
    p = tmp_path / "deep.kc"
    p.write_text(shape(3000))
    r = _kc("compile", "-t", "cpu", p)
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])  # not a signal (segfault, abort)
    _located_error(r, p, "too deep")


def test_issue_19_repros_327_whiles_and_326_else_ifs(tmp_path):
    """327 nested whiles (once a RecursionError in ir.core's walk) are past the loop limit: a located
    error at the 65th loop; a 326-branch else-if chain (once a RecursionError) compiles."""
    p = tmp_path / "w.kc"
    p.write_text(nested_whiles(327))
    for cmd in ("check", "compile"):
        r = _kc(cmd, p)
        _located_error(r, p, f"loops nested too deep: this 'while' is loop {MAX_LOOP_DEPTH + 1} of a nest in k")
    col = len("kernel k(x: ptr<f32>) { ") + len("while x[0] < 1.0 { ") * MAX_LOOP_DEPTH + 1  # loop 65
    assert f"{p}:1:{col}: error" in r.stderr
    q = tmp_path / "e.kc"
    q.write_text(else_if_chain(326))
    r = _kc("compile", "-t", "nvptx", q, "-o", tmp_path / "e.ptx")
    assert r.returncode == 0, r.stderr[-2000:]
    assert ".entry k" in (tmp_path / "e.ptx").read_text()


def test_loop_nest_at_the_limit_compiles(tmp_path):
    p = tmp_path / "w.kc"
    p.write_text(nested_whiles(MAX_LOOP_DEPTH))
    r = _kc("compile", "-t", "nvptx", p, "-o", tmp_path / "w.ptx")
    assert r.returncode == 0, r.stderr[-2000:]


def test_loops_nested_by_inlining_are_a_located_error(tmp_path):
    """Each device function's loop nest is in bounds; inlined into one another they are not."""
    n = MAX_LOOP_DEPTH // 2 + 1  # each function: its while, and the loop its early return is wrapped in
    fns = [f"fn g{f}(x: ptr<f32>) -> f32 {{ var s = 0.0; while x[0] < 1.0 {{ if x[1] > 2.0 {{ return 2.0; }} "
           f"s = s + {f'g{f + 1}(x)' if f + 1 < n else '1.0'}; }} return s; }}" for f in range(n)]
    p = tmp_path / "inl.kc"
    p.write_text("\n".join(fns) + "\nkernel k(x: ptr<f32>) { x[0] = g0(x); }\n")
    assert _kc("check", p).returncode == 0  # no function alone is too deep
    _located_error(_kc("compile", "-t", "cpu", p), p, "loops nested too deep")


def test_walk_is_preorder_and_linear():
    """Region.walk (iterative) yields the ops in the order of the recursive definition."""
    def reference(region):
        for op in region.ops:
            yield op
            for r in op.regions:
                yield from reference(r)

    src = else_if_chain(40).replace("x[0] = 0.0;", "for i in range(0, 4) { while x[1] < 2.0 { x[1] = 2.0; } }")
    module = lower(load_program(src, "w.kc"), resolve_target("nvptx", "sm_90"))
    body = module.get("k").body
    got = list(body.walk())
    assert got == list(reference(body))
    assert len(got) > 200 and {"for", "while", "if"} <= {op.name for op in got}


def test_comptime_unroll_past_the_size_limit_is_a_quick_located_error(tmp_path):
    """for i in comptime range(0, 65536) (the iteration budget) took over 300 s and 1.3 GB; 16384, 51 s.
    Now the function-size limit stops it at the range, in seconds."""
    import time

    from kcompiler.limits import MAX_FUNCTION_OPS
    p = tmp_path / "u.kc"
    for n in (65536, 16384):
        p.write_text(f"kernel k(x: ptr<f32>) {{ for i in comptime range(0, {n}) {{ x[i] = f32(i); }} }}\n")
        t = time.monotonic()
        r = _kc("compile", p)
        assert time.monotonic() - t < 20
        _located_error(r, p, f"function too large: unrolling this comptime for loop")
        assert f"{p}:1:43: error" in r.stderr and f"{MAX_FUNCTION_OPS:,} IR ops" in r.stderr
    p.write_text("kernel k(x: ptr<f32>) { for i in comptime range(0, 4096) { x[i] = f32(i); } }\n")
    r = _kc("compile", "-e", "ir", p)
    assert r.returncode == 0 and r.stdout.count("store") == 4096, r.stderr[-2000:]


def test_inlining_past_the_size_limit_is_a_quick_located_error(tmp_path):
    """1,000 inlined math.exp and math.sin calls made 1.75 million IR ops: over 300 s and 3 GB."""
    import time
    p = tmp_path / "e.kc"
    p.write_text("import std.math\nkernel k(x: ptr<f32>) { for i in comptime range(0, 1000) "
                 "{ x[i] = math.exp(x[i]) * math.sin(x[i]); } }\n")
    t = time.monotonic()
    r = _kc("compile", p)
    assert time.monotonic() - t < 20
    _located_error(r, p, "function too large: k would be more than")
    assert f"{p}:2:8: error" in r.stderr


def test_amdgcn_lds_over_the_limit_is_a_located_error_not_an_llvm_exit(tmp_path):
    """shared s: [f32; 16385] on gfx942 passed kc check, then LLVM ended the process ("local memory
    (65540) exceeds limit (65536)"); sgemm[TILE=1023] the same. 16384 floats fit; gfx950 has 160 KiB."""
    def prog(n):
        return (f"kernel k(x: ptr<f32>) {{\n    shared s: [f32; {n}];\n    s[thread_id.x] = x[0];\n"
                "    x[1] = s[0];\n}\n")
    p = tmp_path / "lds.kc"
    p.write_text(prog(16385))
    for cmd in ("check", "compile"):
        r = _kc(cmd, "-t", "amdgcn", "-a", "gfx942", p)
        _located_error(r, p, "shared memory of 65,540 bytes in k exceeds the 65,536-byte LDS")
        assert f"{p}:2:5: error" in r.stderr
    assert _kc("compile", "-t", "amdgcn", "-a", "gfx950", p, "-o", tmp_path / "a.s").returncode == 0
    p.write_text(prog(16384))
    assert _kc("compile", "-t", "amdgcn", "-a", "gfx942", p, "-o", tmp_path / "b.s").returncode == 0
    sgemm = ROOT / "examples" / "sgemm.kc"
    r = _kc("compile", "-t", "amdgcn", "-a", "gfx942", sgemm, "-P", "TILE=1023", "-o", tmp_path / "c.s")
    _located_error(r, sgemm, "shared memory of 4,186,116 bytes in sgemm[TILE=1023] exceeds")


def test_llvm_rejecting_kcompilers_output_is_an_internal_compiler_error(monkeypatch):
    """A RuntimeError from llvmlite (LLVM rejecting the IR kcompiler made) comes back as an
    InternalCompilerError naming the stage and the kernel and asking for a report."""
    import llvmlite.binding as llvm

    from kcompiler.backends import llvm as kl
    from kcompiler.pipeline import lower_to_ir
    target = resolve_target("nvptx", "sm_90")
    module = lower_to_ir(load_program("kernel sax(x: ptr<f32>) { x[0] = 1.0; }\n", "s.kc"), target, {"sax": {}})

    def bad(text):
        raise RuntimeError("LLVM IR parsing error\n<string>:3:1: error: redefinition of argument")
    monkeypatch.setattr(llvm, "parse_assembly", bad)
    with pytest.raises(kl.InternalCompilerError) as e:
        kl.compile_ir(module, target)
    msg = str(e.value)
    assert msg.startswith("internal compiler error: parsing the LLVM IR kcompiler made failed for sax")
    assert "redefinition of argument" in msg and "please report it" in msg


# --- resource limits per target (kcompiler/limits.py ResourceLimits; the numbers: backends/*/archs.py) ---

def _shared_prog(n: int) -> str:
    return (f"kernel k(x: ptr<f32>) {{\n    shared s: [f32; {n}];\n    s[thread_id.x] = x[0];\n"
            "    barrier();\n    x[1] = s[5];\n}\n")


def _local_prog(n: int, tile: bool = False) -> str:
    head = "kernel k[TILE: i32](x: ptr<f32>, n: i32)" if tile else "kernel k(x: ptr<f32>, n: i32)"
    size = "TILE" if tile else str(n)
    return (f"{head} {{\n    var a: [f32; {size}];\n    a[thread_id.x] = x[0];\n    x[1] = a[n];\n}}\n")


def test_nvptx_static_shared_memory_past_48_kib_is_a_located_error_naming_dynamic_shared(tmp_path):
    """12,289 floats of static shared memory went to ptxas, which refused them ("uses too much shared
    data (0xc004 bytes, 0xc000 max)"), reported as a kcompiler bug without a location. 12,288 fit."""
    p = tmp_path / "sh.kc"
    p.write_text(_shared_prog(12289))
    for cmd in ("check", "compile"):
        r = _kc(cmd, "-t", "nvptx", "-a", "sm_90", p)
        _located_error(r, p, "shared memory of 49,156 bytes in k exceeds the 49,152-byte static shared "
                             "memory of a block on sm_90; more needs dynamic shared memory")
        assert f"{p}:2:5: error" in r.stderr and "dynamic_shared[T]()" in r.stderr and "shared=" in r.stderr
    p.write_text(_shared_prog(12288))
    r = _kc("compile", "-t", "nvptx", "-a", "sm_90", p, "-o", tmp_path / "a.cubin")
    assert r.returncode == 0, r.stderr[-2000:]  # ptxas assembled it
    assert (tmp_path / "a.cubin").read_bytes()[:4] == b"\x7fELF"


@pytest.mark.parametrize("target,arch,limit,reserve", [
    ("nvptx", "sm_90", 512 * 1024, 0), ("amdgcn", "gfx942", 131056, 16), ("amdgcn", "gfx950", 131056, 16),
    ("amdgcn", "gfx1100", 262136, 16)])
def test_local_arrays_past_the_private_memory_are_a_located_error(tmp_path, target, arch, limit, reserve):
    """A local array past the private segment ended the process in LLVM on AMDGCN ("stack frame size
    (800004) exceeds limit (131056)"); on NVIDIA ptxas took 8 MB of stack frame and the launch would
    fail. At the edge it compiles (cubin through ptxas; AMDGCN assembly through LLVM); 4 bytes more is a
    located error at the declaration naming the kernel with its compile-time values."""
    fit = (limit - reserve) // 4
    p = tmp_path / "loc.kc"
    p.write_text(_local_prog(0, tile=True))
    out = tmp_path / ("a.cubin" if target == "nvptx" else "a.s")
    r = _kc("compile", "-t", target, "-a", arch, p, "-P", f"TILE={fit}", "-o", out)
    assert r.returncode == 0, r.stderr[-2000:]
    r = _kc("compile", "-t", target, "-a", arch, p, "-P", f"TILE={fit + 1}", "-o", out)
    _located_error(r, p, f"local array of {(fit + 1) * 4:,} bytes in k[TILE={fit + 1}] exceeds the {limit:,}-byte")
    assert f"{p}:2:5: error" in r.stderr and arch in r.stderr


def test_local_arrays_of_inlined_device_functions_count_in_the_kernel(tmp_path):
    """Two calls of a device function with a 70,000-byte array: each fits gfx942's private segment,
    inlined twice into the kernel they do not (LLVM ended the process)."""
    p = tmp_path / "inl.kc"
    p.write_text("fn g(x: ptr<f32>, n: i32) -> f32 {\n    var a: [f32; 17500];\n    a[thread_id.x] = x[0];\n"
                 "    return a[n];\n}\nkernel k(x: ptr<f32>, n: i32) {\n    x[1] = g(x, n) + g(x, n + 1);\n}\n")
    r = _kc("compile", "-t", "amdgcn", "-a", "gfx942", p, "-o", tmp_path / "a.s")
    _located_error(r, p, "2 local arrays of, together, 140,000 bytes in k exceed the 131,056-byte private")
    assert f"{p}:2:5: error" in r.stderr


def test_nvptx_kernel_parameters_past_32764_bytes_are_a_located_error(tmp_path):
    """4,096 pointers (32,768 bytes) went to ptxas ("uses too much parameter space (0x8000 bytes, 0x7ffc
    max)"), reported as a kcompiler bug; 4,095 assemble."""
    def prog(n):
        return "kernel k(" + ", ".join(f"p{i}: ptr<f32>" for i in range(n)) + ") {\n    p0[0] = 1.0;\n}\n"
    p = tmp_path / "par.kc"
    p.write_text(prog(4096))
    r = _kc("compile", "-t", "nvptx", "-a", "sm_90", p, "-o", tmp_path / "a.cubin")
    _located_error(r, p, "the parameters of k take 32,768 bytes, more than the 32,764 bytes")
    assert f"{p}:1:8: error" in r.stderr
    p.write_text(prog(4095))
    r = _kc("compile", "-t", "nvptx", "-a", "sm_90", p, "-o", tmp_path / "a.cubin")
    assert r.returncode == 0, r.stderr[-2000:]


def test_param_block_layout():
    from kcompiler.ir.types import F32, I32, TENSOR_MAP, AddressSpace, PointerType
    from kcompiler.limits import param_block_size
    ptr = PointerType(F32, AddressSpace.GLOBAL)
    assert param_block_size([I32, ptr, I32]) == 4 + 4 + 8 + 4   # the pointer aligned to 8
    assert param_block_size([I32, TENSOR_MAP]) == 64 + 128  # a tensor map aligned to 64


def test_emission_failures_are_internal_compiler_errors_naming_kernel_and_stage(monkeypatch):
    """What ptxas or LLVM's code generator rejects (not a user's program: those limits are checked
    first) is an InternalCompilerError naming the kernel with its values and the stage; a missing
    ptxas still passes as CubinUnavailable."""
    from kcompiler.backends.llvm import InternalCompilerError
    from kcompiler.backends.nvptx import cubin
    from kcompiler.pipeline import compile_source_to
    src = "kernel sax[N: i32](x: ptr<f32>) { x[0] = f32(N); }\n"

    def bad(ptx, arch):
        raise RuntimeError("ptxas rejected the PTX kcompiler generated (a kcompiler bug):\nptxas error : boom")
    monkeypatch.setattr(cubin, "assemble", bad)
    with pytest.raises(InternalCompilerError) as e:
        compile_source_to(src, "s.kc", "obj", "nvptx", "sm_90", comptime={"N": 3})
    msg = str(e.value)
    assert msg.startswith("internal compiler error: the target's code generator and assembler/linker")
    assert "sax[N=3] (nvptx sm_90)" in msg and "boom" in msg and "please report it" in msg

    def missing(ptx, arch):
        raise cubin.CubinUnavailable("ptxas not found on PATH")
    monkeypatch.setattr(cubin, "assemble", missing)
    with pytest.raises(cubin.CubinUnavailable):
        compile_source_to(src, "s.kc", "obj", "nvptx", "sm_90", comptime={"N": 3})


def test_ptxas_shared_memory_refusal_is_a_located_error_not_an_internal_error(monkeypatch):
    """Arrays whose sizes fit 48 KiB but whose alignment padding does not reach ptxas: its refusal
    ("uses too much shared data") comes back as a located error at the kernel, not a kcompiler bug."""
    from kcompiler.backends.nvptx import cubin
    from kcompiler.diagnostics import CompileError
    from kcompiler.pipeline import compile_source_to

    def refuse(ptx, arch):
        raise RuntimeError("ptxas rejected the PTX kcompiler generated (a kcompiler bug):\nptxas error   : "
                           "Entry function 'k__T_2' uses too much shared data (0xc00c bytes, 0xc000 max)")
    monkeypatch.setattr(cubin, "assemble", refuse)
    with pytest.raises(CompileError) as e:
        compile_source_to("kernel k[T: i32](x: ptr<f32>) {\n    x[0] = f32(T);\n}\n", "s.kc", "obj", "nvptx",
                          "sm_90", comptime={"T": 2})
    msg = e.value.render()
    assert "s.kc:1:8: error: shared memory of 49,164 bytes in k[T=2], with the padding" in msg, msg
    assert "dynamic_shared[T]()" in msg
