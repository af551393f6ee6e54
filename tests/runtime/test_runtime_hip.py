"""The HIP runtime path (kcompiler/runtime/hip.py) without an AMD GPU:

- the kernarg buffer, packed from a code object's metadata, against bytes computed by hand;
- HipUnavailable where hip-python or libamdhip64.so is missing (this machine has hip-python and no
  ROCm), and target 'auto' / ``kc devices`` carrying on without HIP;
- the whole launch path (load, marshal, the ``extra`` launch configuration, copy-back) against a
  fake HIP API that reads the configuration the way the HIP runtime does and runs the test kernel in
  Python;
- on a real AMD GPU (marked ``amdgpu``, skipped elsewhere): vadd compiled by kcompiler.
"""
from __future__ import annotations

import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.ir.types import BF16, BOOL, F16, F32, F64, I8, I32, I64, PointerType
from kcompiler.runtime import device as device_module
from kcompiler.runtime import hip as hip_rt
from kcompiler.runtime.codeobject import ArgInfo, KernelDescriptor, KernelInfo, read_code_object
from kcompiler.runtime.device import Artifact, KernelParam, LaunchConfigError, LaunchError
from kcompiler.runtime.hip import HipDevice, HipUnavailable, kernarg_layout, pack_kernargs
from kcompiler.runtime.module import Module, device_for

from ..amd_codeobjects import code_object
from ..draws import fresh_rng
from ..paths import EXAMPLES
from .hip_fakes import FakeHip


def store_n_artifact(arch: str = "gfx942") -> Artifact:
    """The store_n kernel of tests/amd_codeobjects.py as the pipeline would describe it."""
    return Artifact(target="amdgcn", arch=arch, symbol="store_n", binary=code_object(arch),
                    binary_kind="hsaco",
                    params=[KernelParam("a", PointerType(I32)), KernelParam("n", I32)],
                    meta={"kernel": "store_n"})


# --- kernarg packing (pure) -----------------------------------------------------------------------

def test_pack_store_n():
    art = store_n_artifact()
    data = pack_kernargs(art, [0x1122334455667788, -5])
    assert data == bytes.fromhex("8877665544332211" "fbffffff" "00000000")  # a at 0, n at 8, to 16
    co = read_code_object(art.binary)
    # the buffer ends where the hidden arguments begin
    assert len(data) == min(a.offset for a in co.kernel("store_n").hidden_args) == 16


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_layout_matches_both_kernels(arch):
    co = read_code_object(code_object(arch))
    art = Artifact("amdgcn", arch, "with_lds", code_object(arch), "hsaco",
                   [KernelParam("out", PointerType(F32)), KernelParam("x", F32)])
    layout = kernarg_layout(art, co.kernel("with_lds"))
    assert layout.offsets == (0, 8) and layout.size == 16
    assert layout.pack([8, 1.5]) == struct.pack("<Qf4x", 8, 1.5)


def _kernel(args: list[tuple[int, int, str]]) -> KernelInfo:
    """A KernelInfo with these (offset, size, value_kind) arguments, as a metadata map would give."""
    return KernelInfo(name="k", symbol="k", kd_symbol="k.kd",
                      args=tuple(ArgInfo(o, s, v) for o, s, v in args), kernarg_segment_size=256,
                      kernarg_segment_align=8, group_segment_fixed_size=0, private_segment_fixed_size=0,
                      wavefront_size=64, sgpr_count=8, vgpr_count=8, agpr_count=0,
                      max_flat_workgroup_size=1024, uses_dynamic_stack=False,
                      descriptor=KernelDescriptor.from_bytes(bytes(64)), metadata={})


def test_pack_padding_and_every_scalar_kind():
    params = [("flag", BOOL), ("c", I8), ("p", PointerType(F16)), ("h", F16), ("b", BF16),
              ("i", I32), ("d", F64), ("q", I64)]
    kernel = _kernel([(0, 1, "by_value"), (1, 1, "by_value"), (8, 8, "global_buffer"),
                      (16, 2, "by_value"), (18, 2, "by_value"), (20, 4, "by_value"),
                      (24, 8, "by_value"), (32, 8, "by_value"), (40, 4, "hidden_block_count_x")])
    art = Artifact("amdgcn", "gfx942", "k", b"", "hsaco", [KernelParam(n, t) for n, t in params])
    layout = kernarg_layout(art, kernel)
    values = [True, -2, 0xDEADBEEF00, 1.0, 0x3FC0, 7, 0.25, -1]  # bf16 1.5 as its bits
    expected = (b"\x01" + b"\xfe" + bytes(6)
                + (0xDEADBEEF00).to_bytes(8, "little")
                + bytes.fromhex("003c")            # f16 1.0
                + bytes.fromhex("c03f")            # bf16 bits 0x3fc0
                + (7).to_bytes(4, "little")
                + bytes.fromhex("000000000000d03f")  # f64 0.25
                + b"\xff" * 8)
    assert layout.pack(values) == expected and layout.size == 40


def test_pack_refuses_a_signature_the_code_object_does_not_have():
    art = store_n_artifact()
    wrong = Artifact(**{**art.__dict__,
                        "params": [KernelParam("a", PointerType(I32)), KernelParam("n", I64)]})
    with pytest.raises(LaunchError, match=r"kernel 'store_n': parameter 'n' \(i64, 8 bytes, by_value\) "
                                          r"does not match its code object argument 'n' \(4 bytes at "
                                          r"offset 8"):
        pack_kernargs(wrong, [0, 1])
    fewer = Artifact(**{**art.__dict__, "params": [KernelParam("a", PointerType(I32))]})
    with pytest.raises(LaunchError, match="lists 2 explicit arguments, its signature has 1 parameter$"):
        pack_kernargs(fewer, [0])
    other = Artifact(**{**art.__dict__, "symbol": "nope"})
    with pytest.raises(LaunchError, match="no kernel 'nope'"):
        pack_kernargs(other, [0, 1])
    with pytest.raises(LaunchError, match="cannot pack its arguments"):
        pack_kernargs(art, [0, 1 << 40])
    broken = Artifact(**{**art.__dict__, "binary": art.binary[:100]})
    with pytest.raises(LaunchError, match="the code object is malformed: truncated"):
        pack_kernargs(broken, [0, 1])


def test_arch_of():
    assert hip_rt.arch_of("gfx90a:sramecc+:xnack-") == "gfx90a"
    assert hip_rt.arch_of(b"gfx1100\0\0\0") == "gfx1100"


# --- without HIP ------------------------------------------------------------------------------------

@pytest.fixture
def fresh_probe(monkeypatch):
    """Forget what an earlier test found out about HIP (the probe is cached per process)."""
    monkeypatch.setattr(hip_rt, "_probe", None)
    monkeypatch.setattr(hip_rt, "_hip", None)
    monkeypatch.setattr(device_module, "_INSTANCES", {})


@pytest.fixture
def no_rocm(fresh_probe):
    """This machine: hip-python installed, libamdhip64.so absent."""
    pytest.importorskip("hip", reason="hip-python is not installed")
    if hip_rt.is_available():
        pytest.skip("the HIP runtime is present here")
    hip_rt._probe = None


def test_hip_unavailable_says_what_is_missing(no_rocm):
    assert hip_rt.is_available() is False and hip_rt.device_count() == 0
    assert hip_rt.detected_arch() is None
    with pytest.raises(HipUnavailable, match=r"libamdhip64\.so could not be loaded .*install ROCm.*"
                                             r"ROCM_PATH or LD_LIBRARY_PATH") as e:
        HipDevice.get(0)
    assert isinstance(e.value, LaunchError)
    with pytest.raises(HipUnavailable):
        device_for("amdgcn")


def test_hip_pythons_own_dlopen_error_is_caught(no_rocm, monkeypatch):
    """Past the quick check, hip-python's first call raises RuntimeError("failed to dlopen ..."):
    that is HipUnavailable too, with the loader's words."""
    monkeypatch.setattr(hip_rt, "_library_missing", lambda: None)
    with pytest.raises(HipUnavailable, match="libamdhip64.so: cannot open shared object file"):
        HipDevice.get(0)


def test_without_hip_python(fresh_probe, monkeypatch):
    monkeypatch.setattr(hip_rt.importlib.util, "find_spec", lambda name: None)
    assert not hip_rt.is_available()
    with pytest.raises(HipUnavailable, match=r"hip-python is not installed \(pip install hip-python"):
        HipDevice.get(0)


def test_launch_raises_hip_unavailable_but_compiling_works(no_rocm):
    """A module for target hip is made and specialised without a GPU; the launch says HIP is missing."""
    mod = Module(_FakeProgram(store_n_artifact()))
    a = np.zeros(64, np.int32)
    with pytest.raises(HipUnavailable, match="libamdhip64.so"):
        mod.store_n[1, 64](a, 7)


def test_kc_compile_for_hip_without_a_gpu(no_rocm):
    src = "kernel fill(a: ptr<i32>, n: i32) {\n    a[thread_id.x] = n;\n}\n"
    try:
        mod = kc.compile(src, target="hip", arch="gfx942")
        art = mod.fill.specialize()
    except NotImplementedError:
        pytest.skip("the AMDGCN backend is not there yet")
    assert art.binary_kind == "hsaco" and read_code_object(art.binary).arch == "gfx942"
    assert [(a.offset, a.size) for a in read_code_object(art.binary).kernel(art.symbol).explicit_args] \
        == [(0, 8), (8, 4)]
    with pytest.raises(HipUnavailable):
        mod.fill[1, 64](np.zeros(64, np.int32), 3)


def test_auto_and_devices_carry_on_without_hip(no_rocm, capsys):
    assert kc.resolve_target_name("auto") in ("nvptx", "cpu")
    assert not any(d.target == "amdgcn" for d in kc.devices())
    from kcompiler.cli import main

    assert main(["devices"]) == 0
    assert "cpu" in capsys.readouterr().out


# --- the launch path, against a fake HIP API ----------------------------------------------------------

class _FakeProgram:
    """What runtime.Module needs of a ProgramHandle, for one prebuilt artifact."""

    def __init__(self, artifact: Artifact):
        self.art = artifact
        self.target_name, self.arch = artifact.target, artifact.arch
        self.source = SimpleNamespace(path="<fake>")
        self.kernel_names = [artifact.symbol]

    def comptime_names(self, k):
        return []

    def param_names(self, k):
        return [p.name for p in self.art.params]

    def infer_comptime(self, k, types, given):
        return {}

    def artifact_key(self, k, values):
        return f"fake-{id(self)}-{k}"

    def artifact(self, k, values):
        return self.art


@pytest.fixture
def fake_hip(fresh_probe, monkeypatch):
    fake = FakeHip()
    monkeypatch.setattr(hip_rt, "_hip", fake)
    monkeypatch.setattr(hip_rt, "_probe", (1, None))
    monkeypatch.setattr(hip_rt, "_runtime_version", None)
    return fake


def test_device_from_the_properties(fake_hip):
    dev = HipDevice.get(0)
    assert HipDevice.get(0) is dev and device_for("amdgcn") is dev
    assert (dev.arch, dev.target_id, dev.name, dev.warp_size) == ("gfx942", "gfx942:sramecc+:xnack-",
                                                                  "Fake MI300X", 64)
    assert hip_rt.is_available() and hip_rt.detected_arch() == "gfx942"


def test_launch_packs_the_metadata_layout_and_copies_back(fake_hip):
    mod = Module(_FakeProgram(store_n_artifact()))
    a = np.zeros(100, np.int32)
    mod.store_n[2, 64](a, -9, shared=256, stream=5)
    assert (a[:64] == -9).all() and (a[64:] == 0).all()  # written on the "device", copied back
    (launch,) = fake_hip.launches
    assert launch["grid"] == (2, 1, 1) and launch["block"] == (64, 1, 1)
    assert launch["shared"] == 256 and launch["stream"] == 5
    assert len(launch["buffer"]) == 16 and launch["buffer"][8:] == struct.pack("<i4x", -9)
    assert fake_hip.memory == {}  # the device copy was freed


def test_launch_errors_name_the_hip_error_and_the_kernel(fake_hip):
    mod = Module(_FakeProgram(store_n_artifact()))
    fake_hip.fail_launch = 1
    a = np.zeros(64, np.int32)
    with pytest.raises(LaunchError, match=r"launching kernel 'store_n' with grid \(1, 1, 1\), block "
                                          r"\(64, 1, 1\).*hipErrorInvalidValue \(invalid argument\)"):
        mod.store_n[1, 64](a, 1)
    assert fake_hip.memory == {}  # freed, not copied back
    fake_hip.fail_launch = 0
    # the launch's limits: kcompiler.LaunchConfigError, a LaunchError and a ValueError
    with pytest.raises(LaunchConfigError,
                       match="65537 bytes of dynamic shared memory .* exceed the 65536 bytes"):
        mod.store_n[1, 64](a, 1, shared=65537)
    with pytest.raises(LaunchConfigError, match=r"a block of \(2048, 1, 1\) is 2048 work-items; it may have "
                                                r"at most 1024"):
        mod.store_n[1, 2048](a, 1)
    assert issubclass(LaunchConfigError, ValueError) and issubclass(LaunchConfigError, LaunchError)


def test_a_hip_python_for_another_rocm_is_a_launch_error(fake_hip, monkeypatch):
    """hip-python raises RuntimeError when a function is missing from the libamdhip64 it loaded."""
    def missing(*args):
        raise RuntimeError("failed to load symbol 'hipModuleLoadData'")

    monkeypatch.setattr(fake_hip, "hipModuleLoadData", missing)
    with pytest.raises(LaunchError, match="hipModuleLoadData is not in this HIP runtime .*install the "
                                          "hip-python release that matches the installed ROCm"):
        HipDevice.get(0).load(store_n_artifact())


def test_load_refuses_a_code_object_for_another_chip(fake_hip):
    dev = HipDevice.get(0)
    with pytest.raises(LaunchError, match="compiled for gfx1100, the device is gfx942; compile it with "
                                          "arch='gfx942'"):
        dev.load(store_n_artifact("gfx1100"))
    ptx = Artifact("nvptx", "sm_90", "k", b".version 8.0", "ptx", [])
    with pytest.raises(LaunchError, match="HIP cannot load a 'ptx' binary"):
        dev.load(ptx)


def test_devices_list_hip(fake_hip, capsys):
    assert any(d.target == "amdgcn" and d.arch == "gfx942" for d in kc.devices())
    from kcompiler.cli import main

    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "amdgcn" in out and "Fake MI300X" in out and "cpu" in out


def test_auto_picks_hip_after_cuda(fake_hip):
    from kcompiler.runtime import cuda

    assert kc.resolve_target_name("auto") == ("nvptx" if cuda.is_available() else "amdgcn")


# --- a real AMD GPU ---------------------------------------------------------------------------------

@pytest.mark.amdgpu
def test_vadd_on_the_amd_gpu():
    mod = kc.compile_file(EXAMPLES / "vadd.kc", target="hip")
    n = 100_003
    rng = fresh_rng()
    a, b = rng.random(n, np.float32), rng.random(n, np.float32)
    out = np.empty_like(a)
    mod.vadd[(n + 255) // 256, 256](a, b, out, n)
    np.testing.assert_array_equal(out, a + b)
