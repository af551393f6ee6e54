"""The ``kc`` command: exit codes (0 ok, 1 rejected program, 2 bad usage), located messages on stderr,
atomic outputs, and PTX that ptxas accepts."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from kcompiler.cli import main

from ..cli_util import VADD, kc
from ..paths import ROOT
from ..draws import fresh_rng


BAD = """kernel bad(out: ptr<f32>, n: i32) {
    let i = thread_id.x;
    out[i] = undefined_name * 2.0;
}
"""


# --- usage: exit 2 -----------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    [], ["compile"], ["frobnicate", "x.kc"], ["compile", "x.kc", "--target", "metal"],
    ["compile", "x.kc", "--emit", "spirv"], ["compile", "x.kc", "-P", "noequals"],
    ["compile", "x.kc", "-P", "X=1.5"], ["compile", "x.kc", "-O", "7"],
])
def test_bad_usage_exits_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "usage: kc" in capsys.readouterr().err


def test_param_values():
    from kcompiler.ir.types import F16, PointerType
    from kcompiler.pipeline import parse_param_value
    assert parse_param_value("128") == 128 and parse_param_value("0x10") == 16
    assert parse_param_value("true") is True and parse_param_value("False") is False
    assert parse_param_value("f16") == F16 and parse_param_value("ptr<f16>") == PointerType(F16)
    with pytest.raises(ValueError):
        parse_param_value("1.5")


def test_version_and_help():
    r = kc("--version")
    assert r.returncode == 0 and r.stdout.startswith("kc ")
    r = kc("compile", "--help")
    assert r.returncode == 0 and "--emit" in r.stdout


def test_missing_file_exits_1(tmp_path, capsys):
    assert main(["compile", str(tmp_path / "nope.kc")]) == 1
    err = capsys.readouterr().err
    assert "cannot read" in err and "nope.kc" in err and "Traceback" not in err


def test_unknown_arch_is_usage(tmp_path, capsys):
    f = tmp_path / "k.kc"
    f.write_text("")
    with pytest.raises(SystemExit) as e:
        main(["compile", str(f), "--arch", "sm_75"])
    assert e.value.code == 2
    assert "sm_75" in capsys.readouterr().err


def test_unknown_amd_arch_is_bad_usage(tmp_path, capsys):
    f = tmp_path / "k.kc"
    f.write_text("kernel k(a: ptr<f32>) {}\n")
    with pytest.raises(SystemExit) as e:
        main(["compile", str(f), "--target", "hip", "--arch", "gfx800"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "unknown AMD arch 'gfx800'" in err and "gfx942" in err and "Traceback" not in err


# --- compiling (needs the frontend) -----------------------------------------------------------

def test_compile_vadd_to_ptx(tmp_path):
    out = tmp_path / "vadd.ptx"
    r = kc("compile", VADD, "--target", "nvptx", "--arch", "sm_90", "-o", out)
    assert r.returncode == 0, r.stderr
    ptx = out.read_text()
    assert ".target sm_90" in ptx and ".entry" in ptx and "vadd" in ptx
    assert r.stdout == ""


def test_default_emit_is_ptx_on_stdout():
    r = kc("compile", VADD, "--target", "cuda", "--arch", "sm_80")
    assert r.returncode == 0, r.stderr
    assert ".target sm_80" in r.stdout


@pytest.mark.parametrize("stage, needle", [("ast", "vadd"), ("ir", "kernel @"), ("llvm", "define"),
                                           ("asm", ".entry")])
def test_every_text_stage_prints(stage, needle, capsys):
    assert main(["compile", str(VADD), "--target", "nvptx", "--arch", "sm_90", "--emit", stage]) == 0
    assert needle in capsys.readouterr().out


def test_emit_obj_writes_a_file_beside_the_source(tmp_path):
    if shutil.which("ptxas") is None:
        pytest.skip("no PTX assembler (ptxas) here")
    src = tmp_path / "vadd.kc"
    src.write_text(VADD.read_text())
    r = kc("compile", src, "--emit", "obj", "--arch", "sm_90a")
    assert r.returncode == 0, r.stderr
    cubin = tmp_path / "vadd.cubin"
    assert cubin.read_bytes()[:4] == b"\x7fELF"


def test_cpu_target_assembly(capsys):
    assert main(["compile", str(VADD), "--target", "cpu", "--emit", "llvm"]) == 0
    assert "define" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas not on PATH")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ptx_assembles_with_ptxas(tmp_path, arch):
    out = tmp_path / "vadd.ptx"
    r = kc("compile", VADD, "--target", "nvptx", "--arch", arch, "-o", out)
    assert r.returncode == 0, r.stderr
    a = subprocess.run(["ptxas", f"-arch={arch}", str(out), "-o", str(tmp_path / "v.cubin")],
                       capture_output=True, text=True)
    assert a.returncode == 0, a.stderr


def test_compile_error_exits_1_with_located_message_and_no_output(tmp_path):
    src = tmp_path / "bad.kc"
    src.write_text(BAD)
    out = tmp_path / "bad.ptx"
    r = kc("compile", src, "-o", out)
    assert r.returncode == 1
    assert f"{src}:3:" in r.stderr and "error:" in r.stderr and "^" in r.stderr
    assert "undefined_name" in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [src]  # no temporary either


def test_failed_compile_keeps_the_old_output(tmp_path):
    src = tmp_path / "bad.kc"
    src.write_text(BAD)
    out = tmp_path / "out.ptx"
    out.write_text("previous")
    assert kc("compile", src, "-o", out).returncode == 1
    assert out.read_text() == "previous"


def test_check(tmp_path):
    r = kc("check", VADD)
    assert r.returncode == 0 and r.stderr == ""
    src = tmp_path / "bad.kc"
    src.write_text(BAD)
    r = kc("check", src)
    assert r.returncode == 1 and f"{src}:3:" in r.stderr and "Traceback" not in r.stderr


def test_unknown_kernel_and_param(tmp_path, capsys):
    assert main(["compile", str(VADD), "--kernel", "nope"]) == 1
    assert "no kernel named 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["compile", str(VADD), "-P", "BLOCK=128"])
    assert e.value.code == 2


def test_generic_kernel_needs_its_params(tmp_path, capsys):
    saxpy = ROOT / "examples" / "saxpy.kc"
    assert main(["compile", str(saxpy), "-P", "T=f16", "-P", "VEC=8", "-o", str(tmp_path / "s.ptx")]) == 0
    assert ".entry" in (tmp_path / "s.ptx").read_text()
    assert main(["compile", str(saxpy), "-o", str(tmp_path / "t.ptx")]) == 1
    assert "T" in capsys.readouterr().err
    assert not (tmp_path / "t.ptx").exists()


def test_no_assembler_is_a_clean_error(tmp_path, monkeypatch, capsys):
    from kcompiler.backends.nvptx import cubin

    def unavailable(ptx, arch):
        raise cubin.CubinUnavailable("ptxas not found on PATH")
    monkeypatch.setattr(cubin, "assemble", unavailable)
    out = tmp_path / "v.cubin"
    assert main(["compile", str(VADD), "--emit", "obj", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "cannot write a cubin" in err and "Traceback" not in err and not out.exists()


# --- kc run ------------------------------------------------------------------------------------

SCALE = """
kernel scale(x: ptr<f32>, y: ptr<f32>, a: f32, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        y[i] = a * x[i];
    }
}
"""


def test_run_saves_the_arrays(tmp_path):
    src = tmp_path / "scale.kc"
    src.write_text(SCALE)
    x = fresh_rng().standard_normal(1001).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = kc("run", src, "--kernel", "scale", "--grid", "4", "--block", "256", "--target", "cpu",
           f"x=@{tmp_path / 'x.npy'}", "y=zeros:f32[1001]", "a=2.5", "n=1001", "--out", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), np.float32(2.5) * x)
    assert "wrote" in r.stderr and "y.npy" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["x=arange:f32[10]", "a=1", "n=10"], "missing argument: y"),
    (["x=arange:f32[10]", "y=zeros:q9[10]", "a=1", "n=10"], "unknown dtype 'q9'"),
    (["x=arange:f32[10]", "y=zeros:f32[10]", "a=1", "n=10", "z=3"], "no parameter 'z'"),
    (["x=arange:f32[10]", "y=zeros:f32[10]", "a=one", "n=10"], "a=one: not a number"),
    (["x=@/nonexistent.npy", "y=zeros:f32[10]", "a=1", "n=10"], "cannot read /nonexistent.npy"),
])
def test_run_argument_errors(tmp_path, args, message):
    src = tmp_path / "scale.kc"
    src.write_text(SCALE)
    r = kc("run", src, "-k", "scale", "-g", "1", "-b", "32", "--target", "cpu", *args, cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_run_wrong_dtype_is_a_clean_error(tmp_path):
    src = tmp_path / "scale.kc"
    src.write_text(SCALE)
    r = kc("run", src, "-k", "scale", "-g", "1", "-b", "32", "--target", "cpu", "x=zeros:f64[10]",
           "y=zeros:f32[10]", "a=1", "n=10", cwd=tmp_path)
    assert r.returncode == 1 and "scale" in r.stderr and "'x'" in r.stderr and "Traceback" not in r.stderr
