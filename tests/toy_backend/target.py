"""The toy target's Target and Device: the CPU target's and the CPU emulator's, renamed."""
from __future__ import annotations

from kcompiler.backends.cpu.target import CpuTarget
from kcompiler.runtime.cpu import CpuDevice

from . import ARCHS


class ToyTarget(CpuTarget):
    """The host CPU as target ``toy``; ``arch`` is ``toy1`` or ``toy2`` (checked by the record)."""

    name = "toy"

    def __init__(self, arch: str = "toy1", **opts):
        super().__init__(None, **opts)
        self.arch = arch
        self.features = self.features | ARCHS[arch]

    def lowers_intrinsic(self, intrinsic) -> bool:
        """Its own intrinsics (``toy.*``, by their LLVM lowering) and the CPU target's emulations."""
        return (intrinsic.backend == self.name and self.has(intrinsic.feature)) or super().lowers_intrinsic(intrinsic)

    def intrinsic_lowering(self, intrinsic) -> str:
        return intrinsic.lower if intrinsic.backend == self.name else super().intrinsic_lowering(intrinsic)


class ToyDevice(CpuDevice):
    """The CPU emulator, running the toy's kernels."""

    target = "toy"
