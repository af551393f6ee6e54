"""Shared fixtures: the targets present here, the ``gpu`` and ``amdgpu`` markers, and a private
kernel cache.

- ``target``: parametrises a test over "cpu" and "cuda" (marked ``gpu``), so one execution test runs
  on every target; ``pytest -m gpu`` selects the CUDA variants.
- ``@pytest.mark.gpu``: the test needs a CUDA GPU; without one it is skipped with the reason.
- ``@pytest.mark.amdgpu``: the test needs an AMD GPU through HIP (hip-python and ROCm); without one
  it is skipped with the reason.
- Every test session compiles into its own temporary cache folder (``KC_CACHE_DIR``), so results never
  depend on what an earlier run left in ``~/.cache/kcompiler``.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_session_cache = tempfile.mkdtemp(prefix="kc-test-cache-")
os.environ["KC_CACHE_DIR"] = _session_cache


def cuda_present() -> bool:
    """Whether the CUDA driver (through cuda-python) finds at least one GPU."""
    try:
        from kcompiler.runtime.cuda import is_available
    except Exception:  # noqa: BLE001 - no cuda-python: no GPU
        return False
    return is_available()


HAS_CUDA = cuda_present()


def hip_missing() -> str | None:
    """Why no AMD GPU can be used through HIP here, or None when one can."""
    try:
        from kcompiler.runtime import hip
    except Exception as e:  # noqa: BLE001
        return f"kcompiler.runtime.hip cannot be imported: {e}"
    return hip.unavailable_reason()


HIP_MISSING = hip_missing()
# "cuda" is always listed, marked gpu: without a GPU its variants are skipped with the reason.
TARGETS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=TARGETS)
def target(request) -> str:
    """A target present here: 'cpu', and 'cuda' when a GPU is."""
    return request.param


def pytest_collection_modifyitems(config, items):
    skip_cuda = pytest.mark.skip(reason="needs a CUDA GPU: the CUDA driver found none here")
    skip_amd = pytest.mark.skip(reason=f"needs an AMD GPU: {HIP_MISSING}")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_cuda)
        if "amdgpu" in item.keywords and HIP_MISSING:
            item.add_marker(skip_amd)


def pytest_unconfigure(config):
    shutil.rmtree(_session_cache, ignore_errors=True)
