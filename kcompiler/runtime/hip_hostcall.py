"""Which hostcall protocol the HIP runtime serves, and the check made before launching a kernel
that prints on AMD.

kcompiler's device code (stdlib/hostcall.kc) speaks the *stack* protocol: the buffer layout and
free/ready stacks of ROCm device-libs ockl ``hostcall_impl.cl`` without ``USE_NEW_HOSTCALL_IMPL``,
served by clr's ``HostcallBuffer::processPackets`` (docs/amd-hostcall.md §2-§5). clr can be built
with ``-DUSE_NEW_HOSTCALL_IMPL=ON`` to serve a *phase/occupancy* protocol with an incompatible buffer
(§9). What the sources read say (docs/amd-hostcall.md §9 names each file and commit):

- every clr release tag read (ROCm/clr up to ``rocm-6.2.2``) has only the stack protocol;
- the newer clr (ROCm/rocm-systems ``projects/clr``, commit 000ee47f7) has both, selected by the CMake
  option ``USE_NEW_HOSTCALL_IMPL``, which defaults to OFF;
- no source read says that a released ROCm turns it on, and the runtime reports no protocol.

So no HIP runtime version is known to serve the other protocol, and :func:`hostcall_protocol`
answers "stack" unless told otherwise by ``KC_HIP_HOSTCALL_PROTOCOL`` (for a runtime built with the
option on). Where the device code meets the other buffer anyway, it recognises it (byte 40 is odd in
the stack layout, an aligned address in the other) and prints nothing instead of writing into it.
"""
from __future__ import annotations

import os

from .device import LaunchError

#: The protocols (see the module's docstring).
PROTOCOLS = ("stack", "phase")

#: HIP runtime versions (``hipRuntimeGetVersion``: major * 10^7 + minor * 10^5 + patch) known to
#: serve the phase/occupancy protocol. None is known (module docstring); kept as data so that a
#: release found to ship it is one line here.
PHASE_PROTOCOL_VERSIONS: frozenset[int] = frozenset()


def describe_version(version: int) -> str:
    """``hipRuntimeGetVersion``'s number as text: 60242134 -> "6.2.42134" (HIP_VERSION_MAJOR,
    _MINOR, _PATCH, as hip_version.h composes HIP_VERSION)."""
    return f"{version // 10_000_000}.{version // 100_000 % 100}.{version % 100_000}"


def hostcall_protocol(version: int, env: dict | None = None) -> str:
    """The protocol the HIP runtime of ``version`` serves: ``KC_HIP_HOSTCALL_PROTOCOL`` ("stack" or
    "phase") when set, else "phase" for the versions of :data:`PHASE_PROTOCOL_VERSIONS`, else "stack".
    Raises ValueError for another value of the variable."""
    env = os.environ if env is None else env
    chosen = env.get("KC_HIP_HOSTCALL_PROTOCOL", "").strip()
    if chosen:
        if chosen not in PROTOCOLS:
            raise ValueError(f"KC_HIP_HOSTCALL_PROTOCOL must be 'stack' or 'phase', not {chosen!r}")
        return chosen
    return "phase" if version in PHASE_PROTOCOL_VERSIONS else "stack"


def check_printing_kernel(kernel: str, version: int, env: dict | None = None) -> None:
    """Raise LaunchError if kernel ``kernel``, which makes hostcalls (its code object lists
    ``hidden_hostcall_buffer``), cannot be served by the HIP runtime of ``version``: one that serves
    the phase/occupancy protocol. The message names the version and the ways out."""
    if hostcall_protocol(version, env) == "stack":
        return
    raise LaunchError(
        f"kernel '{kernel}' prints (printf through hostcall), but the HIP runtime "
        f"{describe_version(version)} ({version}) serves the phase/occupancy hostcall protocol "
        f"(clr built with USE_NEW_HOSTCALL_IMPL), whose buffer kcompiler's device code does not "
        f"speak: compile it with target_options={{'printf': 'buffered'}} (kc run --printf buffered), which "
        f"needs no hostcall, remove the printf calls, run the kernel on the CPU target (target='cpu') to "
        f"see its output, or use a HIP runtime built with -DUSE_NEW_HOSTCALL_IMPL=OFF "
        f"(KC_HIP_HOSTCALL_PROTOCOL=stack if this one was misidentified)")


__all__ = ["PHASE_PROTOCOL_VERSIONS", "PROTOCOLS", "check_printing_kernel", "describe_version",
           "hostcall_protocol"]
