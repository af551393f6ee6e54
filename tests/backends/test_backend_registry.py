"""The backend registry (issue 21): a target is one folder and one record, and everything that lists
targets reads the registry. A toy target defined in the test folder (tests/toy_backend) plugs in
through ``register_backend`` and through the ``kcompiler.backends`` entry-point group, with no other
file edited, and compiles, launches, prints its LLVM IR, is listed and rejects an unknown arch."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.backends import get_target
from kcompiler.backends.registry import Backend, backends, find_backend, register_backend, unregister_backend
from kcompiler.cli import main
from tests import toy_backend
from ..paths import ROOT

VADD = ROOT / "examples" / "vadd.kc"

# Writes 2 on a toy2 chip, 1 elsewhere: the record's features reach ``comptime target.has``.
WHICH = """
kernel which(out: ptr<i32>) {
    comptime if target.has("toy2") { out[thread_id.x] = 2; } else { out[thread_id.x] = 1; }
}
"""


@pytest.fixture
def toy():
    register_backend(toy_backend.BACKEND)
    yield toy_backend.BACKEND
    unregister_backend("toy")


def test_builtin_records_agree_with_their_targets():
    """Each built-in record's archs are what its Target answers (features, name, binary kind)."""
    assert [b.name for b in backends()][:3] == ["nvptx", "amdgcn", "cpu"]
    for b in backends():
        for arch, features in b.archs.items():
            t = get_target(b.name, arch)
            assert (t.name, t.arch, t.features, t.binary_kind) == (b.name, arch, features, b.binary_kind)
    assert get_target("cpu").binary_kind == find_backend("cpu").binary_kind


def test_lists_come_from_the_registry(toy):
    assert kc.TARGETS == ("nvptx", "amdgcn", "cpu", "toy")
    assert kc.TARGET_ALIASES["toyish"] == "toy" and kc.TARGET_ALIASES["cuda"] == "nvptx"
    assert find_backend("TOYISH") is toy
    with pytest.raises(ValueError, match=r"unknown target 'metal'; expected one of: amdgcn, cpu, cuda, hip, "
                                         r"nvptx, toy, toyish"):
        find_backend("metal")


def test_toy_target_compiles_and_launches(toy):
    out = np.zeros(4, np.int32)
    mod = kc.compile(WHICH, target="toy")
    assert (mod.target, mod.arch) == ("toy", "toy1")  # the record's default arch
    mod.which[1, 4](out)
    assert type(mod.device).__name__ == "ToyDevice" and out.tolist() == [1] * 4
    mod = kc.compile(WHICH, target="toyish", arch="toy2")
    mod.which[1, 4](out)
    assert out.tolist() == [2] * 4
    a, b = np.arange(5, dtype=np.float32), np.full(5, 0.5, np.float32)
    c = np.zeros_like(a)
    kc.compile_file(VADD, target="toy").vadd[1, 8](a, b, c, 5)
    np.testing.assert_array_equal(c, a + b)


def test_toy_unknown_arch(toy):
    with pytest.raises(ValueError, match=r"unknown Toy arch 'toy9'; expected one of: toy1, toy2"):
        kc.compile(WHICH, target="toy", arch="toy9")


def test_toy_through_the_cli(toy, tmp_path, capsys):
    assert main(["compile", str(VADD), "--target", "toy", "--emit", "llvm"]) == 0
    assert "define" in capsys.readouterr().out
    src = tmp_path / "vadd.kc"
    src.write_text(VADD.read_text())
    assert main(["compile", str(src), "--target", "toyish", "--emit", "obj"]) == 0
    assert (tmp_path / "vadd.toyo").read_bytes()[:4] == b"\x7fELF"  # the record's binary suffix
    assert main(["compile", str(src), "--target", "toy", "-o", str(tmp_path / "v.toys")]) == 0
    assert "vadd" in (tmp_path / "v.toys").read_text()  # the record's asm suffix: assembly
    with pytest.raises(SystemExit) as e:
        main(["compile", str(src), "--target", "toy", "--arch", "toy9"])
    assert e.value.code == 2 and "unknown Toy arch 'toy9'; expected one of: toy1, toy2" in capsys.readouterr().err
    assert main(["targets"]) == 0
    assert "toy (also toyish): Toy;" in capsys.readouterr().out
    assert main(["devices"]) == 0
    assert any(line.startswith("toy ") for line in capsys.readouterr().out.splitlines())


def test_register_refuses_a_taken_name(toy):
    with pytest.raises(ValueError, match="target name cuda is taken by backend nvptx"):
        register_backend(Backend(name="mine", vendor="Me", target="x:Y", aliases=("cuda",)))
    with pytest.raises(ValueError, match="default arch 'z' is not one of its archs"):
        Backend(name="bad", vendor="Me", target="x:Y", archs={"a": frozenset()}, default_arch="z")


def test_plugin_through_an_entry_point(tmp_path):
    """An installed package's ``kcompiler.backends`` entry point (a dist-info folder on the path) is
    found by a fresh process, which lists the toy, compiles for it and prints its LLVM IR, and
    ``import kcompiler`` plus the listing still load no llvmlite."""
    dist = tmp_path / "kc_toy-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kc-toy\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[kcompiler.backends]\ntoy = tests.toy_backend:BACKEND\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]))

    def run(*argv):
        return subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, timeout=300)

    r = run("-c", "import sys, kcompiler as kc; print(kc.TARGETS, kc.TARGET_ALIASES['toyish']); "
                  "print('llvmlite' in sys.modules)")
    assert r.returncode == 0 and r.stdout.split("\n")[:2] == ["('nvptx', 'amdgcn', 'cpu', 'toy') toy", "False"], r
    r = run("-m", "kcompiler.cli", "compile", str(VADD), "--target", "toy", "--arch", "toy2", "--emit", "llvm")
    assert r.returncode == 0 and "define" in r.stdout, r.stderr
    r = run("-m", "kcompiler.cli", "compile", str(VADD), "--target", "toy", "--arch", "toy9")
    assert r.returncode == 2 and "unknown Toy arch 'toy9'" in r.stderr, r.stderr
    r = run("-m", "kcompiler.cli", "targets")
    assert r.returncode == 0 and "toy (also toyish)" in r.stdout, r.stderr


def test_cache_keys_carry_the_record(toy):
    """A plug-in's code is outside the compiler's fingerprint: its record's cache_tag (its version) is
    part of the keys, with the host processor for a target of host code; GPU targets' keys have none."""
    from kcompiler.pipeline import _host_id, host_cpu_id

    assert _host_id("toy") == f"{host_cpu_id()}:toy-0.1"
    assert _host_id("cpu") == host_cpu_id() and _host_id("cuda") == ""
