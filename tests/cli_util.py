"""Running the ``kc`` command in tests: :func:`kc` runs ``python -m kcompiler.cli`` in a subprocess
(so exit codes, stdio and deaths are real) with the checkout on PYTHONPATH; ``VADD`` is
examples/vadd.kc."""
from __future__ import annotations

import os
import subprocess
import sys

from .paths import EXAMPLES, ROOT

VADD = EXAMPLES / "vadd.kc"


def kc(*args, cwd=None):
    """Run ``python -m kcompiler.cli`` as a subprocess (so exit codes and stdio are real)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "kcompiler.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env)
