"""kcompiler.ops as a package: imported lazily (``kc.ops``), its paths chosen by the module's target
features (``Module.target_has``), its launches sized by the Device's limits, not by H100 constants."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.frontend import stdlib_dir
from kcompiler.ops import decode_splits
from kcompiler.runtime.device import Device
from ..paths import ROOT



def test_kc_ops_is_imported_at_first_use(tmp_path):
    """``import kcompiler`` loads neither kcompiler.ops nor numpy; ``kc.ops.matmul`` then works."""
    probe = ("import sys, kcompiler as kc\n"
             "before = sorted(m for m in sys.modules if m.startswith('kcompiler.ops') or m == 'numpy')\n"
             "import numpy as np\n"
             "a = np.arange(6, dtype=np.float32).reshape(2, 3)\n"
             "c = kc.ops.matmul(a, a.T.copy(), target='cpu')\n"
             "assert np.allclose(c, a @ a.T), c\n"
             "print(before, 'kcompiler.ops' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KC_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[] True"


def test_module_target_has_answers_the_kernels_comptime_test():
    """Module.target_has is what ``comptime target.has(...)`` answers: the CPU target has 'cpu' and,
    only with emulate_mma, 'mma'; sm_90a has 'wgmma', sm_80 not."""
    plain = kc.compile("kernel k() {}", target="cpu")
    emulated = kc.compile("kernel k() {}", target="cpu", target_options={"emulate_mma": True})
    assert plain.target_has("cpu") and not plain.target_has("mma")
    assert emulated.target_has("mma") and not emulated.target_has("nvptx")
    assert kc.compile("kernel k() {}", target="nvptx", arch="sm_90a").target_has("wgmma")
    assert not kc.compile("kernel k() {}", target="nvptx", arch="sm_80").target_has("wgmma")


@dataclass
class FakeDevice:
    """The limits of a device, as kcompiler.runtime.device.Device gives them."""

    multiprocessor_count: int = 16
    shared_memory_per_multiprocessor: int = 228 * 1024
    threads_per_multiprocessor: int = 2048
    shared_memory_per_block: int = 227 * 1024


@pytest.mark.parametrize("device, want", [
    # 100 KiB blocks of 128 threads, 32 registers: 2 a multiprocessor by shared memory, 32 slots; 8 blocks a
    # split fill them in 4 splits
    (FakeDevice(), 4),
    (FakeDevice(multiprocessor_count=32), 8),                   # 64 slots
    (FakeDevice(shared_memory_per_multiprocessor=110 * 1024), 2),  # 1 block a multiprocessor: 16 slots
    (FakeDevice(threads_per_multiprocessor=128), 2),            # 1 block of 128 threads a multiprocessor
])
def test_decode_splits_follow_the_devices_limits(device, want):
    assert decode_splits(8, 65536, device, 128, 100 * 1024, 32) == want


def test_device_defaults_are_an_h100s():
    """The figures a device that cannot read them keeps (the CPU target): an H100 SXM's, as CUDA's
    device attributes give them there (132 SMs, 228 KiB per SM, 2048 threads, 227 KiB a block)."""
    assert (Device.multiprocessor_count, Device.shared_memory_per_multiprocessor, Device.threads_per_multiprocessor,
            Device.shared_memory_per_block) == (132, 233472, 2048, 232448)


def test_mla_hopper_path_checks_the_devices_shared_memory(monkeypatch):
    """std.mla_sm90's tiles are checked against the shared memory a block may have on the device that
    runs it (here a fake one of 100,000 bytes), not against sm_90's constant."""
    from kcompiler.ops import mla as ops_mla

    emulated = kc.compile_file(stdlib_dir() / "mla_sm90.kc", target="cpu", target_options={"emulate_wgmma": True})
    monkeypatch.setattr(ops_mla, "_mla_sm90_module", lambda target: emulated)
    z = np.zeros
    q_nope, q_pe = z((1, 4, 256), np.float16), z((1, 4, 64), np.float16)
    ckv, kpe = z((1, 64, 256), np.float16), z((1, 64, 64), np.float16)
    tiles = ops_mla.MLA_SM90_TILES
    assert ops_mla.mla_sm90_reason_not(q_nope, q_pe, ckv, kpe, tiles, "cpu") is None
    need = ops_mla.mla_sm90_shared_bytes(256, 64, tiles)
    limit = need - 1
    monkeypatch.setattr(ops_mla, "device_of", lambda mod, x: FakeDevice(shared_memory_per_block=limit))
    why = ops_mla.mla_sm90_reason_not(q_nope, q_pe, ckv, kpe, tiles, "cpu")
    assert why == (f"BN {tiles['BN']} in {tiles['STAGES']} stages needs {need} bytes of shared memory, more "
                   f"than the {limit} a block may have on this device")


@pytest.mark.gpu
def test_cuda_device_limits_from_the_driver():
    """CudaDevice's limits are the driver's: the multiprocessors torch counts; on sm_90 228 KiB of
    shared memory a multiprocessor, 227 KiB a block, 2048 threads (CUDA C Programming Guide, Compute
    Capability 9.0)."""
    torch = pytest.importorskip("torch")
    from kcompiler.runtime.cuda import CudaDevice

    dev = CudaDevice.get(0)
    assert dev.multiprocessor_count == torch.cuda.get_device_properties(0).multi_processor_count
    if dev.arch.startswith("sm_90"):
        assert (dev.shared_memory_per_multiprocessor, dev.shared_memory_per_block,
                dev.threads_per_multiprocessor) == (233472, 232448, 2048)
