"""What every example driver shares: the --target option, compiling the example's .kc file, and
the comparison against numpy."""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # run from a checkout without installing

import kcompiler as kc  # noqa: E402


def compile_example(name: str, target: str):
    """Compile examples/<name>.kc for ``target`` ('cuda', 'hip', 'cpu' or 'auto')."""
    return kc.compile_file(os.path.join(HERE, name + ".kc"), target=target)


def check_close(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> float:
    """Assert ‖got − want‖ / ‖want‖ ≤ rtol (norms in float64); returns the relative error."""
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.all(np.isfinite(got64)), f"{what}: non-finite values in the result"
    err = float(np.linalg.norm(got64 - want64) / max(np.linalg.norm(want64), 1e-300))
    assert err <= rtol, f"{what}: relative error {err:.3g} > {rtol:g}"
    return err


def main(run) -> None:
    """Parse --target and call ``run(target)``, which returns a line to print."""
    p = argparse.ArgumentParser(description=run.__doc__)
    p.add_argument("--target", default="auto", choices=["auto", "cuda", "hip", "cpu"])
    args = p.parse_args()
    print(run(args.target))
