"""``kc compile`` through the cache (issue 18 item 9): a warm compile of a cached kernel reads its
output without the frontend or LLVM, gives the same bytes as a cold one, and misses whenever the
source, an imported file, an option, the target, the arch, the stage, the kernel or a -P value
changes; ``import kcompiler`` and a warm ``kc compile`` import none of the heavy dependencies."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kcompiler.cli import main
from kcompiler.runtime import cache as cache_mod
from ..paths import ROOT

HEAVY = ("torch", "cuda", "hip", "lark", "llvmlite", "numpy")


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("KC_CACHE_DIR", str(d))
    monkeypatch.setattr(cache_mod.CACHE, "_mem", {})
    return d


@pytest.fixture
def no_compiler(monkeypatch):
    """After this, any frontend or LLVM stage fails the test (what a warm start must not run)."""
    def arm():
        def boom(*a, **k):
            raise AssertionError("a warm kc compile ran a compiler stage")
        import kcompiler.backends.llvm as llvm_backend
        import kcompiler.frontend as frontend
        import kcompiler.pipeline as pipeline
        for mod, name in [(llvm_backend, "compile_ir"), (frontend, "load_program"), (frontend, "check"),
                          (frontend, "lower"), (pipeline, "load"), (pipeline, "emit")]:
            monkeypatch.setattr(mod, name, boom)
    return arm


def _kc(*args: str) -> int:
    cache_mod.CACHE.clear_memory()  # as a new process would start
    return main(list(args))


def _files(d: Path, kind: str) -> list[Path]:
    return sorted(d.rglob(f"*.{kind}"))


@pytest.mark.parametrize("target, arch, emit, suffix", [
    ("nvptx", "sm_90", "asm", ".ptx"), ("nvptx", "sm_90", "obj", ".cubin"), ("cpu", None, "obj", ".o"),
    ("amdgcn", "gfx942", "asm", ".s"), ("nvptx", "sm_80", "llvm", ".ll"), ("cpu", None, "ir", ".kcir")])
def test_warm_compile_reads_the_cache(fresh_cache, tmp_path, no_compiler, target, arch, emit, suffix):
    src = ROOT / "examples" / "saxpy.kc"
    cold, warm = tmp_path / f"cold{suffix}", tmp_path / f"warm{suffix}"
    common = [str(src), "--target", target, "--emit", emit, "-P", "T=f32"] + (["--arch", arch] if arch else [])
    assert _kc("compile", *common, "-o", str(cold)) == 0
    assert len(_files(fresh_cache, "emit")) == 1
    no_compiler()
    assert _kc("compile", *common, "-o", str(warm)) == 0
    assert warm.read_bytes() == cold.read_bytes() and cold.stat().st_size > 0


def test_stdout_output_is_the_same_warm(fresh_cache, capsysbinary, no_compiler):
    args = ["compile", str(ROOT / "examples" / "vadd.kc"), "--target", "nvptx", "--arch", "sm_90"]
    assert _kc(*args) == 0
    cold = capsysbinary.readouterr().out
    no_compiler()
    assert _kc(*args) == 0
    assert capsysbinary.readouterr().out == cold and b".entry vadd" in cold


def test_every_key_part_misses(fresh_cache, tmp_path):
    """Each change below must compile anew: one more entry each, and its own output."""
    lib = tmp_path / "mylib.kc"
    lib.write_text("fn twice(x: f32) -> f32 { return x * 2.0; }\n")
    main_kc = tmp_path / "main.kc"
    main_kc.write_text("import mylib\nkernel k[B: i32 = 1](a: ptr<f32>) { a[0] = mylib.twice(a[0]) + f32(B); }\n"
                       "kernel j(a: ptr<f32>) { a[0] = 1.0; }\n")
    out = tmp_path / "out.ptx"
    base = [str(main_kc), "--target", "nvptx", "--arch", "sm_90", "--emit", "asm", "-o", str(out)]
    outputs = []

    def run(*extra: str) -> None:
        assert _kc("compile", *base, *extra) == 0
        outputs.append(out.read_bytes())

    run()
    run()  # warm: no new entry
    assert len(_files(fresh_cache, "emit")) == 1
    variants = [("-O", "1"), ("--fast-math",), ("--arch", "sm_80"), ("-P", "B=2"), ("--kernel", "j"),
                ("--emit", "llvm"), ("--check-bounds",), ("--target", "amdgcn", "--arch", "gfx942")]
    for v in variants:
        run(*v)
    assert len(_files(fresh_cache, "emit")) == 1 + len(variants)
    lib.write_text("fn twice(x: f32) -> f32 { return x + x + 7.0; }\n")  # an imported file changes
    run()
    assert b"7.0" in outputs[-1] or b"0f40E00000" in outputs[-1], "the changed import was not compiled"
    assert outputs[-1] != outputs[0]
    main_kc.write_text(main_kc.read_text().replace("f32(B)", "f32(B) * 3.0"))  # the source changes
    run()
    assert outputs[-1] != outputs[-2]


def test_failed_compile_stores_nothing(fresh_cache, tmp_path, capsys):
    bad = tmp_path / "bad.kc"
    bad.write_text("kernel k(a: ptr<f32>) { a[0] = nope; }\n")
    assert _kc("compile", str(bad), "--target", "nvptx", "--arch", "sm_90") == 1
    assert "nope" in capsys.readouterr().err
    assert _files(fresh_cache, "emit") == []


def test_damaged_output_entry_is_recompiled(fresh_cache, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="kcompiler.cache")
    out = tmp_path / "v.ptx"
    args = ["compile", str(ROOT / "examples" / "vadd.kc"), "--target", "nvptx", "--arch", "sm_90", "-o", str(out)]
    assert _kc(*args) == 0
    good_out = out.read_bytes()
    (entry,) = _files(fresh_cache, "emit")
    good = entry.read_bytes()
    for at in (10, len(good) // 2, len(good) - 1):
        entry.write_bytes(good[:at] + bytes([good[at] ^ 1]) + good[at + 1:])
        assert _kc(*args) == 0
        assert out.read_bytes() == good_out
        assert any(str(entry) in r.getMessage() for r in caplog.records)
        caplog.clear()
        assert entry.read_bytes() == good


def _modules_after(code: str, cache: Path) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KC_CACHE_DIR": str(cache)}
    probe = code + "\nimport sys\nprint(sorted({m.split('.')[0] for m in sys.modules}))"
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return set(eval(r.stdout.strip().splitlines()[-1]))  # noqa: S307 - our own probe's list


def test_import_kcompiler_imports_no_heavy_dependency(tmp_path):
    assert _modules_after("import kcompiler", tmp_path) & set(HEAVY) == set()


def test_warm_kc_compile_imports_no_heavy_dependency(tmp_path):
    run = ("from kcompiler.cli import main\nassert main(['compile', {src!r}, '--target', 'nvptx', '--arch', "
           "'sm_90', '-o', {out!r}]) == 0").format(src=str(ROOT / "examples" / "vadd.kc"),
                                                   out=str(tmp_path / "v.ptx"))
    cold = _modules_after(run, tmp_path / "cache")
    assert {"llvmlite", "lark"} <= cold  # the probe sees a compile's imports
    assert _modules_after(run, tmp_path / "cache") & set(HEAVY) == set()


def test_default_arch_without_a_driver_imports_no_gpu_runtime(tmp_path):
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        pytest.skip("a CUDA driver is present: the default arch is the GPU's, found through cuda-python")
    except OSError:
        pass
    code = ("from kcompiler.backends import default_arch\n"
            "assert default_arch('nvptx') == 'sm_90' and default_arch('cuda') == 'sm_90'\n"
            "import importlib.util\n"
            "if importlib.util.find_spec('hip') is None:\n"
            "    assert default_arch('amdgcn') == 'gfx942'\n")
    assert _modules_after(code, tmp_path) & set(HEAVY) == set()
