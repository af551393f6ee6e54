"""The compilation cache: artifact serialisation, atomic writes, keys, and (with the frontend) cold and
warm compiles through the public API."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

import kcompiler as kc
from kcompiler import pipeline
from kcompiler.ir.types import (SCALARS, AddressSpace, ArrayType, F16, F32, I32, PointerType,
                                VectorType)
from kcompiler.runtime import cache as cache_mod
from kcompiler.runtime.cache import (KernelCache, atomic_write, dump_artifact, load_artifact,
                                     make_key, type_from_str)
from kcompiler.runtime.device import Artifact, KernelParam


VADD = """
kernel vadd(a: ptr<f32>, b: ptr<f32>, out: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        out[i] = a[i] + b[i];
    }
}
"""


@pytest.mark.parametrize("t", list(SCALARS.values()) + [
    PointerType(F32), PointerType(F16, AddressSpace.SHARED), VectorType(F16, 8),
    PointerType(VectorType(F16, 8)), ArrayType(F32, 16), PointerType(ArrayType(I32, 4), AddressSpace.LOCAL),
    PointerType(PointerType(F32)),
])
def test_types_round_trip_through_text(t):
    assert type_from_str(str(t)) == t


def test_type_from_str_rejects_junk():
    for s in ["", "f31", "ptr<>", "vec<f32>", "[f32]"]:
        with pytest.raises(ValueError):
            type_from_str(s)


def test_artifact_round_trip():
    a = Artifact("nvptx", "sm_90a", "vadd_f32", b"\x00\x01binary\xff", "cubin",
                 [KernelParam("a", PointerType(F32)), KernelParam("n", I32)], static_shared=4096,
                 meta={"kernel": "vadd", "comptime": {"T": {"type": "f16"}, "B": 128}, "x": [1, 2]})
    b = load_artifact(dump_artifact(a))
    assert b == a
    with pytest.raises(ValueError):
        load_artifact(b"KCA1\xff\xff\xff\x00{}")
    with pytest.raises(ValueError):
        load_artifact(b"not an artifact")


def test_keys_are_canonical():
    assert make_key({"a": 1, "b": 2}) == make_key({"b": 2, "a": 1})
    assert make_key({"a": True}) != make_key({"a": 1})
    assert make_key({"T": F16}) != make_key({"T": F32})
    assert make_key("x", 1) != make_key("x", 2)


def test_atomic_write_leaves_nothing_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "sub" / "out.bin"
    atomic_write(target, b"old")
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.bin"]  # no temporary left


def test_kernel_cache_disk_and_memory(tmp_path):
    c = KernelCache(tmp_path)
    a = Artifact("cpu", "x", "k", b"bin", "obj", [KernelParam("n", I32)])
    assert c.get_artifact("ab" * 32) is None
    c.put_artifact("ab" * 32, a)
    assert c.get_artifact("ab" * 32) is a  # memory
    fresh = KernelCache(tmp_path)
    assert fresh.get_artifact("ab" * 32) == a and fresh.disk_hits == 1
    # A damaged entry is a miss, not an error.
    c.path("ab" * 32, "art").write_bytes(b"KCA1garbage")
    assert KernelCache(tmp_path).get_artifact("ab" * 32) is None
    assert list(tmp_path.rglob("*.tmp")) == []


def test_cache_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("KC_CACHE_DIR", str(tmp_path / "kc"))
    assert cache_mod.default_cache_dir() == tmp_path / "kc"
    monkeypatch.delenv("KC_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_mod.default_cache_dir() == tmp_path / "xdg" / "kcompiler"
    c = KernelCache()
    monkeypatch.setenv("KC_CACHE", "0")
    assert not c.disk_enabled


def test_disabled_disk_cache_writes_nothing(tmp_path):
    c = KernelCache(tmp_path, disk=False)
    c.put_artifact("cd" * 32, Artifact("cpu", "x", "k", b"", "obj", []))
    c.put_json("ef" * 32, {"a": 1})
    assert list(tmp_path.iterdir()) == []


# --- through the pipeline (needs the frontend) ----------------------------------------------------

def _entries(d, kind="art"):
    return sorted(d.rglob(f"*.{kind}"))


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty on-disk cache and an empty in-memory one."""
    d = tmp_path / "cache"
    monkeypatch.setenv("KC_CACHE_DIR", str(d))
    monkeypatch.setattr(cache_mod.CACHE, "_mem", {})
    return d


def test_cold_compile_creates_one_entry_and_warm_start_skips_frontend_and_llvm(fresh_cache, monkeypatch):
    m = kc.compile(VADD, target="cpu")
    art = m.artifact("vadd")
    assert [p.name for p in art.params] == ["a", "b", "out", "n"]
    assert len(_entries(fresh_cache)) == 1
    assert len(_entries(fresh_cache, "json")) == 1  # the program's manifest

    # A new process: empty memory cache, and every compiler stage made to fail.
    cache_mod.CACHE.clear_memory()

    def boom(*a, **k):
        raise AssertionError("a warm start ran a compiler stage")
    import kcompiler.backends.llvm as llvm_backend
    import kcompiler.frontend as frontend
    monkeypatch.setattr(llvm_backend, "compile_ir", boom)
    monkeypatch.setattr(frontend, "load_program", boom)
    monkeypatch.setattr(frontend, "lower", boom)
    monkeypatch.setattr(frontend, "check", boom)
    t0 = time.perf_counter()
    m2 = kc.compile(VADD, target="cpu")
    art2 = m2.artifact("vadd")
    warm = time.perf_counter() - t0
    assert art2 == art
    assert len(_entries(fresh_cache)) == 1
    assert warm < 0.05, f"warm start took {warm * 1e3:.1f} ms"


def test_changed_source_or_options_miss(fresh_cache):
    kc.compile(VADD, target="cpu").artifact("vadd")
    kc.compile(VADD.replace("a[i] + b[i]", "a[i] * b[i]"), target="cpu").artifact("vadd")
    kc.compile(VADD, target="cpu", opt_level=1).artifact("vadd")
    assert len(_entries(fresh_cache)) == 3


def test_failing_compile_leaves_no_entry(fresh_cache, monkeypatch):
    import kcompiler.backends.llvm as llvm_backend

    def broken(*a, **k):
        raise RuntimeError("LLVM crashed half-way")
    monkeypatch.setattr(llvm_backend, "compile_ir", broken)
    m = kc.compile(VADD, target="cpu")
    with pytest.raises(RuntimeError, match="half-way"):
        m.artifact("vadd")
    assert _entries(fresh_cache) == []
    assert list(fresh_cache.rglob("*.tmp")) == []


def test_bad_program_leaves_no_manifest(fresh_cache):
    with pytest.raises(kc.CompileError):
        kc.compile("kernel k(a: ptr<f32>) { a[0] = undefined_name; }", target="cpu")
    assert _entries(fresh_cache, "json") == []


def test_imported_module_change_invalidates(fresh_cache, tmp_path):
    lib = tmp_path / "mylib.kc"
    lib.write_text("fn twice(x: f32) -> f32 { return x * 2.0; }\n")
    main = tmp_path / "main.kc"
    main.write_text("import mylib\nkernel k(a: ptr<f32>) { a[0] = mylib.twice(a[0]); }\n")
    kc.compile_file(main, target="cpu").artifact("k")
    cache_mod.CACHE.clear_memory()
    lib.write_text("fn twice(x: f32) -> f32 { return x + x + 0.0; }\n")
    kc.compile_file(main, target="cpu").artifact("k")
    assert len(_entries(fresh_cache)) == 2


def test_atomic_write_gives_ordinary_permissions(tmp_path):
    atomic_write(tmp_path / "a.txt", "x")
    mode = (tmp_path / "a.txt").stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask
    os.chmod(tmp_path / "a.txt", 0o600)
    atomic_write(tmp_path / "a.txt", "y")  # an existing file keeps its mode
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o600
