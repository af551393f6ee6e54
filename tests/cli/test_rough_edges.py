"""A new user's rough edges (issue 18, item 7): types in messages spelled as the language spells them,
a command's usage errors print that command's usage, and a kernel called without a launch
configuration says how to launch it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.cli import main
from kcompiler.ir.types import (BF16, F16, F32, TENSOR_MAP, VOID, AddressSpace, ArrayType, PointerType,
                                VectorType)
from ..paths import ROOT

SAXPY = ROOT / "examples" / "saxpy.kc"
VADD = ROOT / "examples" / "vadd.kc"


def test_a_type_given_for_an_integer_parameter_is_spelled_as_the_language_does(tmp_path, capsys):
    assert main(["compile", str(SAXPY), "-P", "T=f16", "-P", "VEC=f16", "-o", str(tmp_path / "s.ptx")]) == 1
    err = capsys.readouterr().err
    assert "compile-time parameter VEC is an integer (i32); got the type f16" in err, err
    assert "ScalarType" not in err and "kind=" not in err
    assert not (tmp_path / "s.ptx").exists()
    m = kc.compile_file(str(SAXPY), target="cpu")
    x = np.ones(8, np.float16)
    with pytest.raises(TypeError, match=r"VEC is an integer \(i32\); got the type bf16$"):
        m.saxpy[1, 1](x, x, 1.0, 8, VEC=BF16)
    with pytest.raises(TypeError, match=r"T is a type; got 4$"):
        m.saxpy.specialize(T=4)
    # a numpy class given for an integer is named, not sent to its unbound .item()
    with pytest.raises(TypeError, match=r"VEC is an integer \(i32\); got the Python class numpy.float16"):
        m.saxpy[1, 1](x, x, 1.0, 8, VEC=np.float16)


def test_the_repr_of_a_type_is_its_spelling():
    """So that a type inside any message, list or dict reads as in the language."""
    cases = {F16: "f16", VectorType(BF16, 4): "vec<bf16, 4>", PointerType(F32): "ptr<f32>",
             PointerType(F16, AddressSpace.SHARED): "ptr<f16, shared>", ArrayType(F32, 3): "[f32; 3]",
             VOID: "void", TENSOR_MAP: "tensor_map"}
    for t, spelled in cases.items():
        assert repr(t) == str(t) == spelled
    assert f"{[F16, PointerType(F32)]}" == "[f16, ptr<f32>]"
    assert f"{ {'T': F16} !r}" == "{'T': f16}"


@pytest.mark.parametrize("argv, command", [
    (["compile", str(VADD), "-P", "BOGUS=1"], "compile"),
    (["compile", str(VADD), "-P", "noequals"], "compile"),
    (["check", str(VADD), "--arch", "sm_1"], "check"),
])
def test_usage_errors_print_the_commands_usage(argv, command, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: kc {command} "), err
    assert f"kc {command}: error: " in err


def test_the_bogus_parameter_message_names_it(capsys):
    with pytest.raises(SystemExit):
        main(["compile", str(VADD), "-P", "BOGUS=1"])
    assert "kc compile: error: no kernel has a compile-time parameter BOGUS" in capsys.readouterr().err


def test_a_kernel_called_without_a_launch_configuration_says_how_to_launch_it():
    m = kc.compile_file(str(VADD), target="cpu")
    a = np.ones(16, np.float32)
    out = np.zeros(16, np.float32)
    with pytest.raises(TypeError, match=r"kernel 'vadd' needs a launch configuration: launch it as "
                                        r"vadd\[grid, block\]\(a, b, out, n\)"):
        m.vadd(a, a, out, 16)
    assert not out.any()  # nothing ran
    m.vadd[1, 16](a, a, out, 16)
    assert (out == 2).all()
