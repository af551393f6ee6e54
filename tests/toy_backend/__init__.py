"""A toy target, plugged in from the test folder: proof that a backend is one folder and one record.

``toy`` (alias ``toyish``) is the host CPU under another name, with its own arch list ``toy1``,
``toy2`` and their features: its Target is the CPU target's class renamed (target.py) and its
Device the CPU emulator renamed. Nothing in the package names it. tests/backends/test_backend_registry.py
registers it with ``register_backend(BACKEND)``, or through the ``kcompiler.backends`` entry-point
group in a child process, and compiles, lists and launches for it. It also adds a builtin to the
language, ``toy_dot`` (builtins.py), lowered to its own target intrinsic ``toy.dot4``
(intrinsics.py, lower.py): tests/backends/test_toy_builtins.py uses them.

Importing this package loads neither llvmlite nor the runtime: the record names its classes by path.
"""
from __future__ import annotations

from kcompiler.backends.registry import Backend

#: The toy's architectures and what ``comptime target.has(...)`` answers for each (besides the CPU
#: target's own "cpu", "warp32").
ARCHS = {"toy1": frozenset({"toy", "toy1"}), "toy2": frozenset({"toy", "toy1", "toy2"})}

BACKEND = Backend(
    name="toy", vendor="Toy", aliases=("toyish",),
    target=f"{__name__}.target:ToyTarget", device=f"{__name__}.target:ToyDevice",
    archs=ARCHS, default_arch="toy1", detect_arch=lambda: None,
    binary_kind="obj", binary_suffixes=(".toyo",), asm_kind="toy assembly", asm_suffixes=(".toys",),
    host_code=True, cache_tag="toy-0.1",
    # a target intrinsic (toy.dot4) and a builtin of the language that emits it (toy_dot)
    intrinsics=f"{__name__}.intrinsics", builtins=f"{__name__}.builtins:BUILTINS",
)
