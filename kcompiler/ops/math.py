"""kcompiler.ops.math: std.math's functions applied elementwise to arrays."""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .. import compile as compile_source
from ..numerics.mathfns import FAST, FUNCTIONS
from ..runtime import arrays
from ._common import empty_like, flat, target_for


#: The kernels behind :func:`math`: ``apply`` (one input) and ``apply2`` (two) run the std.math fn FN
#: over arrays in 4-element vectors (16-byte accesses for f32; the arrays are aligned: see
#: _common.flat). Block b covers VV tiles of 4 * block_dim consecutive elements, one after another,
#: thread t the vector at 4t of each; a vector cut by n is done element by element. No grid-stride
#: loop: the grid covers n (math_launch). On the H100 this shape ran the long functions 1-4% faster than
#: a loop over the vectors, the short ones as fast (benchmarks/RESULTS.md, 2026-11-23). FN and VV are
#: compile-time parameters given at launch (``FN="math.exp", VV=1``): one source, a specialisation a fn.
MATH_KERNEL = """
import std.math
kernel apply[T: type, VV: i32, FN: fn(x: T) -> T](x0: ptr<T>, y: ptr<T>, n: i64) {
    let tile = i64(block_dim.x) * 4i64;
    var i = i64(block_id.x) * tile * i64(VV) + i64(thread_id.x) * 4i64;
    for j in comptime range(0, VV) {
        if i + 4i64 <= n {
            let v0 = load[vec<T, 4>](x0 + i);
            var r: vec<T, 4>;
            for k in comptime range(0, 4) {
                r[k] = FN(v0[k]);
            }
            store(y + i, r);
        } else {
            var m = i;
            while m < n {
                y[m] = FN(x0[m]);
                m += 1i64;
            }
        }
        i += tile;
    }
}
kernel apply2[T: type, VV: i32, FN: fn(x: T, y: T) -> T](x0: ptr<T>, x1: ptr<T>, y: ptr<T>, n: i64) {
    let tile = i64(block_dim.x) * 4i64;
    var i = i64(block_id.x) * tile * i64(VV) + i64(thread_id.x) * 4i64;
    for j in comptime range(0, VV) {
        if i + 4i64 <= n {
            let v0 = load[vec<T, 4>](x0 + i);
            let v1 = load[vec<T, 4>](x1 + i);
            var r: vec<T, 4>;
            for k in comptime range(0, 4) {
                r[k] = FN(v0[k], v1[k]);
            }
            store(y + i, r);
        } else {
            var m = i;
            while m < n {
                y[m] = FN(x0[m], x1[m]);
                m += 1i64;
            }
        }
        i += tile;
    }
}
"""


def math_kernel(arity: int) -> str:
    """The name of :data:`MATH_KERNEL`'s kernel for fns of ``arity`` (1 or 2) arguments: 'apply' or
    'apply2', launched as ``kernel[math_launch(n, VV)](x0, [x1,] y, n, T=..., VV=..., FN="math.exp")``.
    Raises ValueError for another arity."""
    if arity not in (1, 2):
        raise ValueError(f"math: std.math's fns take 1 or 2 arguments, not {arity}")
    return "apply" if arity == 1 else "apply2"


def math_launch(n: int, vectors: int = 1) -> tuple[int, int]:
    """(grid, block) of :func:`math`'s kernel with ``vectors`` vectors a thread over ``n`` > 0
    elements: 256 threads a block (512 with 2 vectors: the faster on the H100 for gelu, the one
    function with 2), as many blocks as cover n."""
    block = 256 * vectors
    return -(-n // (4 * vectors * block)), block


@functools.lru_cache(maxsize=None)
def _math_module(target: str, target_options: tuple = ()) -> Any:
    """The module of :data:`MATH_KERNEL` for ``target``; compiled once per process (each fn's
    specialisation at its first launch, cached on disk). ``target_options``: (name, value) pairs."""
    return compile_source(MATH_KERNEL, target=target, path="<kcompiler.ops.math>",
                          target_options=dict(target_options) or None)


def math_vectors(fn: str) -> int:
    """4-element vectors a thread in :func:`math`'s kernel for std.math's ``fn`` ('gelu',
    'fast_gelu', 'exp_rp'): kcompiler.numerics.mathfns.FUNCTIONS[fn].vectors for the accurate
    functions, 1 for the others."""
    return FUNCTIONS[fn].vectors if fn in FUNCTIONS else 1


def math(name: str, *args: Any, fast: bool = False, target: str = "auto",  # noqa: A001 - its name
         target_options: dict[str, Any] | None = None) -> Any:
    """std.math's ``name`` applied elementwise by a kernel: ``math("exp", x)``, ``math("pow", x, y)``;
    a new array of the inputs' shape and kind (numpy in, numpy out; torch in, torch out). ``name`` is
    any function of kcompiler.numerics.mathfns.FUNCTIONS (its documented ulp bound there and in
    docs/math.md); ``fast=True`` runs ``math.fast_<name>`` (the hardware approximations, for the
    names in mathfns.FAST). ``target_options``: the target's own options, as :func:`kcompiler.compile`
    takes them (``{"contract": "nvptx"}`` on the CPU). Inputs: f32, f16 or bf16 (f64 for the
    functions with an f64 version), all of one dtype and shape. Raises ValueError for an unknown
    function or a wrong argument count or shape, TypeError for another dtype."""
    f = FUNCTIONS.get(name)
    if f is None:
        raise ValueError(f"math: unknown function {name!r}; one of {', '.join(FUNCTIONS)}")
    if fast and name not in FAST:
        raise ValueError(f"math: {name} has no fast version; the fast ones: {', '.join(FAST)}")
    if len(args) != f.arity:
        raise ValueError(f"math: {name} takes {f.arity} array{'s' if f.arity > 1 else ''}, got {len(args)}")
    x = args[0]
    src = arrays.array_scalar_type(x) if arrays.is_array(x) else None
    floats = ("f32", "f16", "bf16") + (("f64",) if f.f64 and not fast else ())
    if src is None or src.name not in floats:
        raise TypeError(f"math: {'fast ' if fast else ''}{name} takes arrays of {', '.join(floats)}, "
                        f"not {arrays.describe(x)}")
    for a in args[1:]:
        if not arrays.is_array(a) or arrays.array_scalar_type(a) != src or tuple(a.shape) != tuple(x.shape):
            raise ValueError(f"math: {name}'s arrays must share one dtype and shape ({src}, {tuple(x.shape)})")
    out = empty_like(x, tuple(x.shape), src.name)
    n = int(np.prod(tuple(x.shape)))
    if n:
        mod = _math_module(target_for(x, target), tuple(sorted((target_options or {}).items())))
        fn = ("fast_" if fast else "") + name
        vectors = math_vectors(fn)
        grid, block = math_launch(n, vectors)
        mod[math_kernel(f.arity)][grid, block](*[flat(a) for a in args], flat(out), n, T=src.name, VV=vectors,
                                               FN=f"math.{fn}")
    return out


__all__ = ["MATH_KERNEL", "math", "math_kernel", "math_launch", "math_vectors"]
