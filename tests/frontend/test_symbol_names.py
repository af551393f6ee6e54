"""Source names as symbols (issue 19, items 1 and 5): identifiers of any length, and kernels and device
functions named like the C library's, the runtime's or LLVM's own symbols, on every target. The CPU
target prefixes every symbol of the program (kc.NAME: no identifier has a dot); NVIDIA refuses a
kernel (exported as it is) named like the CUDA device runtime's functions, and renames a device
function of such a name; the NVPTX output is assembled with ptxas, the AMDGCN one linked into a code
object."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to

from ..ptxas_util import ptxas


def _long_source(n: int) -> str:
    """Kernel parameters, locals, loop variables, shared arrays, fns and the kernel itself named by
    identifiers of ``n`` + 1 characters, two of each kind sharing their first ``n``."""
    p = "q" * n
    return f"""fn {p}a(x: f32) -> f32 {{ return x + 1.0; }}
fn {p}b(x: f32) -> f32 {{ return x + 2.0; }}
kernel {p}k(out: ptr<f32>, {p}x: f32, {p}y: f32) {{
    shared {p}s: [f32; 32];
    shared {p}t: [f32; 32];
    {p}s[thread_id.x] = {p}x;
    {p}t[thread_id.x] = {p}y;
    barrier();
    var {p}u = 0.0;
    var {p}v = 0.0;
    for {p}i in range(0, 3) {{
        for {p}j in range(0, 2) {{
            {p}u = {p}u + f32({p}i);
            {p}v = {p}v + f32({p}j);
        }}
    }}
    out[thread_id.x] = {p}a({p}s[thread_id.x]) * 10.0 + {p}b({p}t[31 - thread_id.x]) + {p}u * 100.0 + {p}v * 1000.0;
}}
"""


@pytest.mark.parametrize("n", [1024, 3000])
def test_long_identifiers_on_the_cpu(n):
    src = _long_source(n)
    m = kc.compile(src, target="cpu")
    out = np.zeros(32, np.float32)
    getattr(m, "q" * n + "k")[1, 32](out, 3.0, 5.0)
    # a(3) * 10 + b(5) + (0+0+1+1+2+2) * 100 + (0+1)*3 * 1000
    np.testing.assert_array_equal(out, np.full(32, 4.0 * 10 + 7.0 + 600.0 + 3000.0, np.float32))


@pytest.mark.parametrize("n", [1024, 3000])
@pytest.mark.parametrize("target", ["nvptx", "amdgcn"])
def test_long_identifiers_assemble(n, target):
    assert len(compile_source_to(_long_source(n), "long.kc", "obj", target=target)) > 0  # code object
    if target == "nvptx":
        ptxas(compile_source_to(_long_source(n), "long.kc", "asm", target=target, arch="sm_90"), "sm_90")


NAMES = ["free", "malloc", "calloc", "aligned_alloc", "llvm", "memcpy", "memset", "main", "abort", "fmaf",
         "__kc_cpu_info", "__kc_check_access", "__kc_frame_alloc", "kc_run_blocks", "vprintf", "__assertfail",
         "__ockl_hostcall_internal"]


def _named(name: str, kind: str) -> str:
    """A kernel (``kind`` 'kernel') or a device function ('fn') named ``name`` that prints, takes the
    square root and copies: what makes the targets declare their runtime's symbols."""
    body = 'printf("%d\\n", i32(thread_id.x));\n    out[thread_id.x] = {v};'
    if kind == "kernel":
        return (f"kernel {name}(out: ptr<f32>, x: f32) {{\n    "
                + body.format(v="sqrt(x) + f32(thread_id.x)") + "\n}\n")
    return (f"fn {name}(x: f32, n: i32) -> f32 {{\n    var s = 0.0;\n    for i in range(0, n) {{ s = s + sqrt(x); }}\n"
            f"    return s;\n}}\nkernel k(out: ptr<f32>, x: f32) {{\n    "
            + body.format(v=f"{name}(x, 1) + f32(thread_id.x)") + "\n}\n")


@pytest.mark.parametrize("kind", ["kernel", "fn"])
@pytest.mark.parametrize("name", NAMES)
def test_runtime_names_on_the_cpu(name, kind, capfd):
    m = kc.compile(_named(name, kind), target="cpu")
    out = np.zeros(4, np.float32)
    m.kernel(name if kind == "kernel" else "k")[1, 4](out, 9.0)
    np.testing.assert_array_equal(out, [3, 4, 5, 6])
    assert sorted(capfd.readouterr().out.split()) == ["0", "1", "2", "3"]


@pytest.mark.slow(sample=24)  # CI time: a deterministic sample by default, all with -m slow
@pytest.mark.parametrize("kind", ["kernel", "fn"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("target", ["nvptx", "amdgcn"])
def test_runtime_names_on_the_gpus(name, kind, target):
    src = _named(name, kind)
    reserved = kc.pipeline.resolve_target(target, None).reserved_symbols
    if kind == "kernel" and name in reserved:
        with pytest.raises(CompileError) as e:
            compile_source_to(src, "r.kc", "asm", target=target)
        (d,) = e.value.diagnostics
        assert (d.span.line, d.span.col) == (1, 8)
        assert f"a kernel cannot be named '{name}' on {target}" in d.message
        return
    out = compile_source_to(src, "r.kc", "asm", target=target, arch="sm_90" if target == "nvptx" else None)
    if target == "nvptx":
        assert "vprintf" in out
        ptxas(out, "sm_90")
    else:
        assert len(compile_source_to(src, "r.kc", "obj", target=target)) > 0  # linked by ld.lld


def test_kc_check_reports_a_reserved_kernel_name(tmp_path, capsys):
    from kcompiler.cli import main
    f = tmp_path / "free.kc"
    f.write_text("kernel free(out: ptr<f32>) {\n    out[0] = 1.0;\n}\n")
    assert main(["check", str(f), "--target", "nvptx"]) == 1
    err = capsys.readouterr().err
    assert f"{f}:1:8: error: a kernel cannot be named 'free' on nvptx" in err
    assert main(["check", str(f), "--target", "cpu"]) == 0
