"""kcompiler.backends.nvptx.cubin assembles PTX as a whole program with ptxas: a relocatable compile
(``ptxas -c``, what nvJitLink does) ignores setmaxnreg and serialises every wgmma of a Hopper kernel
(ptxas infos C7504 and C7509), which cost the Hopper kernels a third of their speed (RESULTS.md,
2026-11-27)."""
import subprocess
import types

import pytest

from ...ptxas_util import needs_ptxas, ptxas


def test_assemble_is_one_whole_program_ptxas_call(monkeypatch):
    """The one ptxas call: -arch, -O3, no -c / --compile-only / -rdc; no nvJitLink import."""
    import sys

    from kcompiler.backends.nvptx import cubin
    calls = []

    def run(args, **kw):
        calls.append(list(args))
        out = args[args.index("-o") + 1]
        with open(out, "wb") as f:
            f.write(b"\x7fELF")
        return subprocess.CompletedProcess(args, 0, "", "")
    monkeypatch.setattr(cubin.shutil, "which", lambda name: "/usr/bin/ptxas" if name == "ptxas" else None)
    monkeypatch.setattr(cubin.subprocess, "run", run)
    used = []
    fake = types.SimpleNamespace(create=lambda *a: used.append(a))  # an nvJitLink that records its use
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvjitlink", fake)
    monkeypatch.setattr(sys.modules.get("cuda.bindings") or types.SimpleNamespace(), "nvjitlink", fake, raising=False)
    assert cubin.assemble(".version 8.1\n", "sm_90a") == b"\x7fELF"
    assert not used
    (args,) = calls
    assert args[1] == "-arch=sm_90a" and "-O3" in args
    assert not {"-c", "--compile-only", "-rdc", "--relocatable-device-code"} & set(args)


def test_no_ptxas_is_cubin_unavailable(monkeypatch):
    from kcompiler.backends.nvptx import cubin
    monkeypatch.setattr(cubin.shutil, "which", lambda name: None)
    with pytest.raises(cubin.CubinUnavailable, match="ptxas not found"):
        cubin.assemble(".version 8.1\n", "sm_90a")


@needs_ptxas
def test_hopper_prefill_keeps_setmaxnreg_and_wgmma_pipelining():
    """The Hopper prefill assembled as cubin.assemble does: no C7504 / C7509 infos, where the
    relocatable compile of the same PTX reports both (so this test can tell the two apart)."""
    from kcompiler.backends.nvptx import cubin
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    ptx = emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a", approx_ftz=True),
                    kernel="attention_prefill_sm90", comptime=dict(T="bf16", D=64, CAUSAL=False))
    whole = ptxas(ptx, "sm_90a", verbose=True, extra=list(cubin.PTXAS_OPTIONS))
    assert "C7504" not in whole and "C7509" not in whole, whole
    relocatable = ptxas(ptx, "sm_90a", verbose=True, extra=["-c"])
    assert "C7504" in relocatable and "C7509" in relocatable, relocatable
