"""The host CPU target: GPU kernels compiled for the host and run with GPU semantics (see target.py)."""
from .cpu_names import check_cpu_name, cpu_names
from .target import CpuTarget

__all__ = ["CpuTarget", "check_cpu_name", "cpu_names"]
