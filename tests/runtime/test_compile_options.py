"""Options of ``kc.compile`` / ``kc.compile_file`` are checked where they are given: a bad value is
a ValueError from compile(), not a failure inside LLVM at the first launch."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc

SRC = "kernel fill(o: ptr<i32>, v: i32) { o[thread_id.x] = v; }"
PRINTS = 'kernel k(n: i32) { printf("hi %d\\n", n); }'


@pytest.mark.parametrize("options, message", [
    ({"opt_level": 7}, "opt_level must be an integer from 0 to 3, not 7"),
    ({"opt_level": -1}, "opt_level must be an integer from 0 to 3"),
    ({"opt_level": 2.0}, "opt_level must be an integer from 0 to 3"),
    ({"opt_level": True}, "opt_level must be an integer from 0 to 3"),
    ({"check_bounds": "yes"}, "check_bounds must be True or False"),
    ({"fast_math": 1}, "fast_math must be True or False"),
])
def test_bad_compile_options(options, message):
    with pytest.raises(ValueError, match=message):
        kc.compile(SRC, target="cpu", **options)


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_every_opt_level_runs(level):
    o = np.zeros(8, np.int32)
    kc.compile(SRC, target="cpu", opt_level=level).fill[1, 8](o, 5)
    assert (o == 5).all()


def test_cpu_accepts_printf_hostcall(tmp_path, capsys):
    """The CPU target always prints through hostcall: the option means what it does anyway (was:
    TypeError, CpuTarget.__init__() got an unexpected keyword argument 'printf')."""
    path = tmp_path / "k.kc"
    path.write_text(PRINTS)
    mod = kc.compile_file(path, target="cpu", target_options={"printf": "hostcall"})
    mod.k[1, 2](7)
    assert capsys.readouterr().out == "hi 7\nhi 7\n"


def test_amdgcn_accepts_printf_hostcall():
    mod = kc.compile(PRINTS, target="amdgcn", arch="gfx942", target_options={"printf": "hostcall"})
    assert mod._program.target.printf_method == "hostcall"


@pytest.mark.parametrize("target", ["cpu", "amdgcn"])
def test_other_printf_is_refused_at_compile(target):
    with pytest.raises(ValueError, match=f"{target} target: printf .* may be 'hostcall' or 'buffered', not 'vprintf'"):
        kc.compile(PRINTS, target=target, target_options={"printf": "vprintf"})
