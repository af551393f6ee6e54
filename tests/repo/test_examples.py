"""Every example under examples/ runs its driver on each target present (the CPU always, CUDA when a GPU
is) and checks its result against numpy, on fresh random inputs each run. pipeline.py keeps its data
in kcompiler device arrays (no torch or CuPy) and, where torch is installed, hands its result to torch
by DLPack with the pointer checked equal."""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys

import pytest

from ..paths import EXAMPLES as EXAMPLES_DIR

EXAMPLES = str(EXAMPLES_DIR)
NAMES = ["vadd", "saxpy", "reduce", "sgemm", "softmax", "pipeline", "raybox"]


@pytest.fixture(scope="module")
def drivers():
    sys.path.insert(0, EXAMPLES)
    try:
        yield {name: importlib.import_module(name) for name in NAMES}
    finally:
        sys.path.remove(EXAMPLES)


@pytest.mark.parametrize("name", NAMES)
def test_example(drivers, name, target):
    line = drivers[name].run(target)
    assert f" ok on {target}" in line, line


@pytest.mark.parametrize("name", NAMES)
def test_example_on_wave64(drivers, name, monkeypatch):
    """The examples with 64-lane warps (AMD CDNA's wavefronts) on the CPU target: code that assumes
    32 lanes shows here, without an AMD GPU."""
    import kcompiler as kc

    def compile_w64(example, target):
        return kc.compile_file(os.path.join(EXAMPLES, example + ".kc"), target="cpu", arch="host-w64")

    monkeypatch.setattr(drivers[name], "compile_example", compile_w64)
    line = drivers[name].run("cpu")
    assert " ok on cpu" in line, line


AMD_PARAMS = {"saxpy": [{"T": "f16", "VEC": 8}, {"T": "bf16", "VEC": 8}, {"T": "f32", "VEC": 4}],
              "reduce": [{"ITEMS": 4}]}


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201"])
@pytest.mark.parametrize("name", NAMES)
def test_example_code_objects(name, arch):
    """Every example links into an AMD code object for every architecture, and the code object says
    what it must: EM_AMDGPU, the arch, code object v5, one kernel descriptor per kernel, the kernel
    arguments at the offsets and sizes of the signature, the LDS declared, the wavefront size."""
    from kcompiler.backends.amdgcn import ARCHS
    from kcompiler.pipeline import emit_file, parse_param_value
    from kcompiler.runtime.codeobject import read_code_object

    for params in AMD_PARAMS.get(name, [{}]):
        values = {k: parse_param_value(str(v)) for k, v in params.items()}
        data = emit_file(os.path.join(EXAMPLES, name + ".kc"), "obj", "amdgcn", arch, comptime=values)
        co = read_code_object(data)
        assert co.machine == 224 and co.arch == arch
        assert co.code_object_version == 5
        ir = emit_file(os.path.join(EXAMPLES, name + ".kc"), "ir", "amdgcn", arch, comptime=values)
        kernels = [line.split("@")[1].split("(")[0] for line in ir.splitlines() if line.startswith("kernel @")]
        assert sorted(k.name for k in co.kernels) == sorted(kernels)
        for k in co.kernels:
            assert k.kd_symbol == k.name + ".kd" and k.kd_symbol in co.symbols
            assert k.wavefront_size == ARCHS[arch][0]
            explicit = [a for a in k.args if not a.value_kind.startswith("hidden_")]
            check_kernarg_layout(ir, k.name, explicit)
            assert k.group_segment_fixed_size == shared_bytes(ir, k.name)


def check_kernarg_layout(ir: str, kernel: str, args) -> None:
    """The explicit arguments sit at the natural C layout of the kernel's IR signature: pointers 8
    bytes, scalars their size, each aligned to its size."""
    header = next(line for line in ir.splitlines() if line.startswith(f"kernel @{kernel}("))
    types = [p.split(":", 1)[1].strip() for p in split_params(header[header.index("(") + 1:header.index(") ")])]
    offset = 0
    assert len(args) == len(types)
    for a, t in zip(args, types):
        size = 8 if t.startswith("ptr") else int("".join(ch for ch in t if ch.isdigit())) // 8
        offset = (offset + size - 1) // size * size
        assert (a.offset, a.size) == (offset, size), (kernel, t, a)
        offset += size


def split_params(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in (out + [cur]) if p.strip()]


def shared_bytes(ir: str, kernel: str) -> int:
    header = next(line for line in ir.splitlines() if line.startswith(f"kernel @{kernel}("))
    import re

    m = re.search(r"shared_bytes=(\d+)", header)
    return int(m.group(1)) if m else 0


# Compile-time values the generic examples need to be compiled on their own (without arguments to
# infer them from).
PTX_PARAMS = {"saxpy": [{"T": "f16", "VEC": 8}, {"T": "bf16", "VEC": 8}, {"T": "f32", "VEC": 4}],
              "reduce": [{"ITEMS": 4}]}


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
@pytest.mark.parametrize("name", NAMES)
def test_example_ptx_assembles(tmp_path, name):
    """Every example's PTX for sm_90a is accepted by ptxas, with no register spills."""
    from kcompiler.pipeline import emit_file, parse_param_value

    for params in PTX_PARAMS.get(name, [{}]):
        values = {k: parse_param_value(str(v)) for k, v in params.items()}
        ptx = emit_file(os.path.join(EXAMPLES, name + ".kc"), "asm", "nvptx", "sm_90a", comptime=values)
        src = tmp_path / f"{name}.ptx"
        src.write_text(ptx)
        r = subprocess.run(["ptxas", "-arch=sm_90a", "-v", str(src), "-o", str(tmp_path / "out.cubin")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "bytes spill stores" not in r.stderr or " 0 bytes spill stores" in r.stderr, r.stderr
