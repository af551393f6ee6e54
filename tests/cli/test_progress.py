"""Long work shows progress on stderr (kcompiler.progress): the kernel being compiled and the
autotuner's candidates, with KC_VERBOSE=1 or ``kc -v``; only steps longer than a second on a
terminal by default; nothing in non-interactive runs."""
from __future__ import annotations

import io
import sys
import time
import uuid
from pathlib import Path

import pytest

import kcompiler as kc
from kcompiler import cli, progress
from kcompiler.runtime.autotune import CandidateRejected, autotune
from kcompiler.runtime.cache import KernelCache
from ..paths import ROOT



class _Tty(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _tune(tmp_path):
    def time_fn(c):
        if c["BM"] == 32:
            raise CandidateRejected("needs more shared memory\nthan the device has")
        return {64: 2e-3, 128: 1e-3}[c["BM"]]

    return autotune({"op": "matmul", "M": 256}, [{"BM": 32}, {"BM": 64}, {"BM": 128}], time_fn,
                    cache=KernelCache(tmp_path), enabled=True, unit="s")


def test_verbose_autotune_shows_each_candidate(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KC_VERBOSE", "1")
    assert _tune(tmp_path) == {"BM": 128}
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "kc: autotuning op=matmul M=256: timing 3 candidates ..."
    assert err[1] == "kc:   candidate 1/3 BM=32: rejected (needs more shared memory)"
    assert err[2] == "kc:   candidate 2/3 BM=64: 0.002 s"
    assert err[3] == "kc:   candidate 3/3 BM=128: 0.001 s"
    assert err[4] == "kc:   chose BM=128"
    assert err[5].startswith("kc: autotuning op=matmul M=256: timing 3 candidates: done in ")
    assert len(err) == 6
    # the cached choice: no tuning, nothing to show
    assert _tune(tmp_path) == {"BM": 128}
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("value", [None, "0", "off"])
def test_quiet_when_not_interactive_or_turned_off(tmp_path, capsys, monkeypatch, value):
    """Unset and stderr not a terminal (capsys's), or KC_VERBOSE=0 even on a terminal: nothing."""
    if value is None:
        monkeypatch.delenv("KC_VERBOSE", raising=False)
    else:
        monkeypatch.setenv("KC_VERBOSE", value)
        monkeypatch.setattr("sys.stderr", _Tty())
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    with progress.step("slow work"):
        time.sleep(0.05)
        progress.note("a line")
    assert _tune(tmp_path) == {"BM": 128}
    assert (sys.stderr.getvalue() if value else capsys.readouterr().err) == ""


def test_terminal_shows_only_steps_that_last(monkeypatch):
    """On a terminal with KC_VERBOSE unset: a step that ends before DELAY_S shows nothing; one that
    lasts shows its title, what it noted before and after, and its time."""
    tty = _Tty()
    monkeypatch.delenv("KC_VERBOSE", raising=False)
    monkeypatch.setattr("sys.stderr", tty)
    monkeypatch.setattr(progress, "DELAY_S", 60.0)
    with progress.step("quick"):
        progress.note("not shown")
    assert tty.getvalue() == ""

    monkeypatch.setattr(progress, "DELAY_S", 0.01)
    with progress.step("compiling big"):
        progress.note("early")
        deadline = time.monotonic() + 30
        while "compiling big ..." not in tty.getvalue():  # the timer fired (no fixed sleep: no race)
            assert time.monotonic() < deadline, tty.getvalue()
            time.sleep(0.01)
        progress.note("late")
    lines = tty.getvalue().splitlines()
    assert lines[:3] == ["kc: compiling big ...", "kc:   early", "kc:   late"]
    assert lines[3].startswith("kc: compiling big: done in ") and len(lines) == 4


def test_failed_step_says_so(capsys, monkeypatch):
    monkeypatch.setenv("KC_VERBOSE", "1")
    with pytest.raises(KeyError):
        with progress.step("work"):
            raise KeyError("x")
    assert capsys.readouterr().err.splitlines()[-1].startswith("kc: work: failed in ")


def test_kernel_compile_is_shown(capsys, monkeypatch):
    """A specialisation compiled (not found in the cache) shows its kernel, values and target."""
    monkeypatch.setenv("KC_VERBOSE", "1")
    src = f"// {uuid.uuid4()}\nkernel k[N: i32](o: ptr<i32>) {{ o[0] = N; }}\n"
    kc.compile(src, target="cpu").k.specialize(N=3)
    err = capsys.readouterr().err
    assert "kc: parsing and checking <string> ..." in err
    assert "kc: compiling k[N=3] for cpu " in err and ": done in " in err


def test_kc_dash_v(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("KC_VERBOSE", raising=False)
    vadd = str(ROOT / "examples" / "vadd.kc")
    assert cli.main(["compile", vadd, "-o", str(tmp_path / "a.ptx")]) == 0
    assert capsys.readouterr().err == ""
    for n, flags in enumerate((["-v", "compile"], ["compile", "-v"])):
        src = tmp_path / f"v{n}.kc"  # a file of its own: a miss, since kc compile is cached
        src.write_text(Path(vadd).read_text())
        for hit in (False, True):
            assert cli.main([*flags, str(src), "-o", str(tmp_path / "a.ptx")]) == 0
            err = capsys.readouterr().err
            if hit:
                assert f"kc: asm of {src} for nvptx sm_90: from the cache" in err
            else:
                assert "kc: compiling vadd for nvptx sm_90 ..." in err and "done in" in err
    assert progress.mode() == "off"  # -v lasts for its command only
