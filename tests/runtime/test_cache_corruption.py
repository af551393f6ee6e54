"""A damaged cache entry is never served: byte flips, truncation and JSON of the wrong shape in every
kind of file of ``KC_CACHE_DIR`` (NVPTX cubin / PTX, AMDGCN code object, CPU object, program manifests)
give a one-line warning naming the file, a recompile whose result equals a fresh compile, and a
repaired entry. The CPU target also runs the kernel, in fresh processes, against numpy."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.runtime import cache as cache_mod
from kcompiler.runtime.cache import (DamagedEntry, dump_artifact, dump_json, dump_record, load_artifact,
                                     load_json, load_record)
from kcompiler.runtime.device import Artifact, KernelParam
from kcompiler.ir.types import F32, I32, PointerType
from ..paths import ROOT

SAXPY = ROOT / "examples" / "saxpy.kc"
F32_T = kc.pipeline.type_from_str("f32")


def _flips(n: int, count: int = 24) -> list[int]:
    """``count`` byte offsets spread over a file of ``n`` bytes, first and last included."""
    return sorted({round(i * (n - 1) / (count - 1)) for i in range(count)})


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1:]


def _damages(data: bytes) -> list[tuple[str, bytes]]:
    """Every byte-flip and truncation probe of a file's bytes."""
    out = [(f"flip@{i}", _flip(data, i)) for i in _flips(len(data))]
    out += [(f"truncate@{n}", data[:n]) for n in (0, 3, 40, len(data) // 2, len(data) - 1)]
    return out


# --- the formats alone ------------------------------------------------------------------------------

def test_every_flip_and_truncation_of_a_record_is_detected():
    a = Artifact("cpu", "native", "k", bytes(range(256)) * 4, "obj", [KernelParam("p", PointerType(F32)),
                 KernelParam("n", I32)], static_shared=16, meta={"kernel": "k", "comptime": {}})
    data = dump_artifact(a)
    assert load_artifact(data) == a
    for what, bad in [(f"flip@{i}", _flip(data, i)) for i in range(len(data))] + \
                     [(f"truncate@{n}", data[:n]) for n in range(len(data))]:
        with pytest.raises(DamagedEntry):
            load_artifact(bad)
            pytest.fail(what)


def test_every_flip_and_truncation_of_a_json_entry_is_detected():
    v = {"kernels": {"saxpy": {"comptime": [["T", "type", None]], "params": ["x"]}}, "infer": {}}
    data = dump_json(v)
    assert load_json(data) == v
    json.loads(data)  # the entry itself is JSON a person can read
    for what, bad in [(f"flip@{i}", _flip(data, i)) for i in range(len(data))] + \
                     [(f"truncate@{n}", data[:n]) for n in range(len(data))]:
        try:
            got = load_json(bad)
        except DamagedEntry:
            continue
        # A flip inside the digest's hex that stays hex, or a case flip, would be caught too; the only
        # bytes allowed to change without detection are none.
        pytest.fail(f"{what}: {got!r}")


def test_artifact_header_of_the_wrong_shape_is_damaged():
    good = {"target": "cpu", "arch": "x", "symbol": "k", "binary_kind": "obj", "params": [["n", "i32"]],
            "static_shared": 0, "meta": {}}
    assert load_artifact(dump_record(good, b"bin")).params == [KernelParam("n", I32)]
    for bad in [{**good, "params": [["n"]]}, {**good, "params": [["n", "i33"]]},
                {**good, "static_shared": "0"}, {**good, "meta": []}, {**good, "symbol": 7},
                {k: v for k, v in good.items() if k != "meta"}]:
        with pytest.raises(DamagedEntry):
            load_artifact(dump_record(bad, b"bin"))


# --- through the pipeline -----------------------------------------------------------------------------

@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("KC_CACHE_DIR", str(d))
    monkeypatch.setattr(cache_mod.CACHE, "_mem", {})
    return d


def _only(d: Path, kind: str) -> Path:
    files = sorted(d.rglob(f"*.{kind}"))
    assert len(files) == 1, files
    return files[0]


def _artifact(target: str, arch: str) -> Artifact:
    """The saxpy f32 artifact as a fresh process gets it: the in-memory cache emptied first."""
    cache_mod.CACHE.clear_memory()
    return kc.compile_file(SAXPY, target=target, arch=arch).artifact("saxpy", T=F32_T)


def _warned(caplog, path: Path) -> bool:
    lines = [r.getMessage() for r in caplog.records if r.name == "kcompiler.cache"]
    caplog.clear()
    return any(str(path) in line and "damaged cache entry" in line and "\n" not in line for line in lines)


@pytest.mark.slow(sample=2)  # CI time: a deterministic sample by default, all with -m slow
@pytest.mark.parametrize("target, arch, kind", [("nvptx", "sm_90", "cubin"), ("amdgcn", "gfx942", "hsaco"),
                                                ("cpu", None, "obj")])
def test_damaged_artifact_is_recompiled_and_replaced(fresh_cache, caplog, target, arch, kind):
    caplog.set_level(logging.WARNING, logger="kcompiler.cache")
    want = _artifact(target, arch)
    assert want.binary_kind == kind
    art = _only(fresh_cache, "art")
    good = art.read_bytes()
    probes = _damages(good) + [("wrong-shaped JSON", json.dumps({"target": target}).encode()),
                               ("a manifest in its place", dump_json({"kernels": {}}))]
    for what, bad in probes:
        art.write_bytes(bad)
        got = _artifact(target, arch)
        assert got == want, what
        assert _warned(caplog, art), what
        assert load_artifact(art.read_bytes()) == want, f"{what}: the entry was not repaired"
    assert len(list(fresh_cache.rglob("*.art"))) == 1
    assert list(fresh_cache.rglob("*.tmp")) == []


def test_damaged_ptx_artifact_is_recompiled(fresh_cache, caplog, monkeypatch):
    """Where no assembler is found the NVPTX artifact is PTX text; it is checked the same way."""
    from kcompiler.backends.nvptx.target import NvptxTarget

    def no_cubin(self, ref, kind, _emit=NvptxTarget.emit):
        if kind == "obj":
            raise type("CubinUnavailable", (RuntimeError,), {})("no assembler")
        return _emit(self, ref, kind)
    monkeypatch.setattr(NvptxTarget, "emit", no_cubin)
    caplog.set_level(logging.WARNING, logger="kcompiler.cache")
    want = _artifact("nvptx", "sm_90")
    assert want.binary_kind == "ptx"
    art = _only(fresh_cache, "art")
    good = art.read_bytes()
    for what, bad in _damages(good):
        art.write_bytes(bad)
        assert _artifact("nvptx", "sm_90") == want, what
        assert _warned(caplog, art), what
        assert art.read_bytes() == good, what


def _kernels_after(src_target: str = "cpu") -> tuple[list[str], list[str]]:
    cache_mod.CACHE.clear_memory()
    m = kc.compile_file(SAXPY, target=src_target)
    comptime = m.saxpy.comptime_names  # first, as a user would: a manifest that lacks saxpy is rechecked
    return m.kernels, comptime


@pytest.mark.parametrize("target", ["nvptx", "cpu"])
def test_damaged_manifest_is_rebuilt(fresh_cache, caplog, target):
    caplog.set_level(logging.WARNING, logger="kcompiler.cache")
    m = kc.compile_file(SAXPY, target=target)
    want = (m.kernels, m.saxpy.comptime_names)
    assert want == (["saxpy"], ["T", "VEC"])
    man = _only(fresh_cache, "json")
    good = man.read_bytes()
    value = load_json(good)
    wrong_shapes = [
        json.dumps({"kernels": {}}).encode(),                      # valid JSON, no checksum
        b"[]", b"null", b'"saxpy"',
        dump_json({**value, "kernels": {}}),                       # checksummed, wrong content
        dump_json({**value, "kernels": {"saxpy": {"params": []}}}),  # checksummed, no 'comptime'
        dump_json({**value, "kernels": []}),
        dump_json({**value, "infer": {"k": {"T": {"type": "f33"}}}}),
        dump_json([value]),
    ]
    for what, bad in _damages(good) + [(f"shape {i}", b) for i, b in enumerate(wrong_shapes)]:
        man.write_bytes(bad)
        assert _kernels_after(target) == want, what
        assert _warned(caplog, man), what
        assert load_json(man.read_bytes()) == value, f"{what}: the manifest was not repaired"


def test_unreadable_entry_is_a_miss(fresh_cache, caplog):
    caplog.set_level(logging.WARNING, logger="kcompiler.cache")
    want = _artifact("cpu", None)
    art = _only(fresh_cache, "art")
    art.unlink()
    art.mkdir()  # reading it raises IsADirectoryError
    cache_mod.CACHE.clear_memory()
    assert _artifact("cpu", None) == want
    assert _warned(caplog, art)


# --- the CPU target runs the kernel, each probe in a fresh process -----------------------------------

_RUN = """
import numpy as np, kcompiler as kc
m = kc.compile_file({path!r}, target="cpu")
n = 1000
x = np.arange(n, dtype=np.float32); y = np.full(n, 2.0, np.float32)
m.saxpy[(n + 511) // 512, 128](x, y, np.float32(3.0), n)
np.save({out!r}, y)
"""


def _run_fresh(tmp_path: Path, cache: Path) -> tuple[np.ndarray, str]:
    out = tmp_path / "y.npy"
    env = {**os.environ, "KC_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", _RUN.format(path=str(SAXPY), out=str(out))], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return np.load(out), r.stderr


def test_cpu_target_runs_right_after_damage_in_fresh_processes(tmp_path):
    cache = tmp_path / "cache"
    want = 3.0 * np.arange(1000, dtype=np.float32) + 2.0
    y, _ = _run_fresh(tmp_path, cache)
    np.testing.assert_array_equal(y, want)
    art, man = _only(cache, "art"), _only(cache, "json")
    good_art, good_man = art.read_bytes(), man.read_bytes()
    # A flip in the object's code, in its header, a truncated object, a flipped manifest.
    probes = [(art, _flip(good_art, len(good_art) - 700)), (art, _flip(good_art, 60)),
              (art, good_art[:len(good_art) // 2]), (man, _flip(good_man, len(good_man) // 2))]
    for path, bad in probes:
        path.write_bytes(bad)
        y, err = _run_fresh(tmp_path, cache)
        np.testing.assert_array_equal(y, want)
        assert f"damaged cache entry {path}" in err, err
        assert path.read_bytes() == (good_art if path == art else good_man)
        y, err = _run_fresh(tmp_path, cache)  # repaired: no warning the second time
        assert "damaged" not in err, err


def test_digest_is_sha256_of_the_payload():
    """The record's header names the payload's sha256 (an independent hashlib call)."""
    head, payload = load_record(dump_record({"x": 1}, b"payload"))
    assert head["payload_sha256"] == hashlib.sha256(b"payload").hexdigest()
    assert payload == b"payload" and head["payload_size"] == 7
