"""The HIP runtime's hostcall protocol (kcompiler/runtime/hip_hostcall.py) and the check made before
launching a printing kernel, with faked runtime versions (no AMD GPU here: nothing is launched)."""
from __future__ import annotations

import pytest

from kcompiler.runtime import hip as hip_rt
from kcompiler.runtime import hip_hostcall
from kcompiler.runtime.codeobject import ArgInfo
from kcompiler.runtime.device import LaunchError
from kcompiler.runtime.hip_hostcall import check_printing_kernel, describe_version, hostcall_protocol

ROCM_622 = 60242134  # a hipRuntimeGetVersion number: HIP 6.2.42134
FAKE_NEW = 70253211


def test_versions_and_protocols(monkeypatch):
    assert describe_version(ROCM_622) == "6.2.42134"
    assert hostcall_protocol(ROCM_622, {}) == "stack"
    assert hostcall_protocol(FAKE_NEW, {}) == "stack"  # no released runtime is known to serve the other
    assert hostcall_protocol(ROCM_622, {"KC_HIP_HOSTCALL_PROTOCOL": "phase"}) == "phase"
    with pytest.raises(ValueError, match="KC_HIP_HOSTCALL_PROTOCOL"):
        hostcall_protocol(ROCM_622, {"KC_HIP_HOSTCALL_PROTOCOL": "new"})
    monkeypatch.setattr(hip_hostcall, "PHASE_PROTOCOL_VERSIONS", frozenset({FAKE_NEW}))
    assert hostcall_protocol(FAKE_NEW, {}) == "phase"
    assert hostcall_protocol(FAKE_NEW, {"KC_HIP_HOSTCALL_PROTOCOL": "stack"}) == "stack"
    check_printing_kernel("k", ROCM_622, {})
    with pytest.raises(LaunchError, match=r"kernel 'k' prints .* HIP runtime 7\.2\.53211 \(70253211\) "
                                          r"serves the phase/occupancy .*target='cpu'.*"
                                          r"USE_NEW_HOSTCALL_IMPL=OFF"):
        check_printing_kernel("k", FAKE_NEW, {})


class _Kernel:
    def __init__(self, prints: bool):
        self.args = (ArgInfo(0, 8, "global_buffer"),) + \
            ((ArgInfo(88, 8, "hidden_hostcall_buffer"),) if prints else ())


class _Handle:
    def __init__(self, prints: bool):
        self.name, self.kernel = "k", _Kernel(prints)


def test_launch_refuses_a_printing_kernel_on_a_phase_protocol_runtime(monkeypatch):
    """HipDevice.launch asks the runtime's version (faked) before launching a kernel that lists
    hidden_hostcall_buffer, and refuses it where that version serves the other protocol; a kernel that
    does not print is not checked (it goes on to the launch, which fails here for want of a GPU)."""
    monkeypatch.setattr(hip_rt, "_runtime_version", FAKE_NEW)
    monkeypatch.setattr(hip_hostcall, "PHASE_PROTOCOL_VERSIONS", frozenset({FAKE_NEW}))
    monkeypatch.delenv("KC_HIP_HOSTCALL_PROTOCOL", raising=False)
    device = object.__new__(hip_rt.HipDevice)
    with pytest.raises(LaunchError, match="7.2.53211"):
        device.launch(_Handle(True), None, (1, 1, 1), (1, 1, 1), [])
    with pytest.raises(Exception) as e:
        device.launch(_Handle(False), None, (1, 1, 1), (1, 1, 1), [])
    assert "hostcall" not in str(e.value)
