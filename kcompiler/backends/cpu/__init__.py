"""The host CPU target: GPU kernels compiled for the host and run with GPU semantics (see target.py)."""
from .target import CpuTarget

__all__ = ["CpuTarget"]
