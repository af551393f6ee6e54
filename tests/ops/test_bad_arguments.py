"""Every op of kcompiler.ops called with one bad argument at a time (the CPU target): the call either
runs (a NaN, a leading batch dimension, an empty batch are all fine) or raises ValueError, TypeError,
NotImplementedError or a CompileError. Never another exception (an AttributeError on ``.shape``, an
OverflowError from numpy, a KeyError), which is an internal error shown to a user as a traceback.

The arguments of each call are small valid inputs; the mutations are those a user makes: another
dtype, one dimension more or less, a transposed view, a last dimension one too long, an empty batch, a
Python list, a bare scalar, None; for numbers: negative, zero, NaN, 2^70, a string, a fraction.
The same with torch CPU tensors (and, as a bad argument, a strided last axis or a numpy array among
tensors). Found with it (2026-11-29): top_k past int32, router_logits and block_table given as lists or
None, mx_dequantize's scales not an array (and too few of them, read past their end), seq_lens None
beside torch tensors; later the same day a caller's ``tiles`` (test_bad_tiles_are_a_value_or_type_error),
a split count past the keys (test_num_splits_past_the_keys_is_cut), merge_states' ``out`` given as a list
(AttributeError) and its unchecked ``lse_out`` (test_merge_states_lse_out_is_checked). The calls pass
their optional ``out`` arrays and numbers (eps, scale, num_splits, warps, ...) so that they are mutated
too.
"""
from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

from kcompiler import ops
from kcompiler.diagnostics import CompileError

ALLOWED = (ValueError, TypeError, NotImplementedError, CompileError)
RNG = np.random.default_rng(20261129)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def bf16(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(ml_dtypes.bfloat16)


T, H, E, INTER = 5, 64, 4, 32

#: op name -> (function, positional arguments, keyword arguments): a valid call.
CALLS = {
    "rms_norm": (ops.rms_norm, (f32(T, H), f32(H)), {"residual": f32(T, H), "eps": 1e-6, "out": f32(T, H)}),
    "layer_norm": (ops.layer_norm, (f32(T, H), f32(H), f32(H)), {"eps": 1e-5, "out": f32(T, H)}),
    "rotary_embedding": (ops.rotary_embedding, (f32(T, 2, 16), f32(T, 1, 16), np.arange(T), f32(32, 16)), {}),
    "silu_and_mul": (ops.silu_and_mul, (f32(T, 2 * H),), {"out": f32(T, H)}),
    "gelu_and_mul": (ops.gelu_and_mul, (f32(T, 2 * H),), {"out": f32(T, H)}),
    "softmax": (ops.softmax, (f32(3, 100), 0.7), {}),
    "top_k_mask_logits": (ops.top_k_mask_logits, (f32(3, 100), 5), {}),
    "top_p_renorm_probs": (ops.top_p_renorm_probs, (np.full((3, 100), 0.01, np.float32), 0.5), {}),
    "sample": (ops.sample, (f32(3, 100),), {"temperature": 0.8, "top_k": 5, "top_p": 0.9, "min_p": 0.05,
                                            "seed": 1}),
    "matmul": (ops.matmul, (f32(17, 32), f32(32, 24)), {"epilogue": ops.Epilogue("bias_gelu", x=f32(24))}),
    "attention": (ops.attention, (f32(1, 16, 2, 16), f32(1, 16, 2, 16), f32(1, 16, 2, 16)),
                  {"causal": True, "scale": 0.25}),
    "paged_decode": (ops.paged_decode, (f32(2, 4, 16), f32(6, 16, 2, 16), f32(6, 16, 2, 16),
                                        np.array([[0, 1, 2], [3, 4, 5]], np.int32), np.array([40, 17], np.int32)),
                     {"scale": 0.25, "num_splits": 2, "warps": 2, "unroll": 2, "stages": 2}),
    "merge_states": (ops.merge_states, (f32(3, 2, 4, 16), f32(3, 2, 4)), {"out": f32(3, 4, 16), "lse_out": f32(3, 4)}),
    "cast": (ops.cast, (f32(40), ml_dtypes.float8_e4m3fn), {}),
    "mx_quantize": (ops.mx_quantize, (f32(4, 64),), {}),
    "mx_dequantize": (ops.mx_dequantize, ops.mx_quantize(f32(2, 64), target="cpu"), {}),
    "nvfp4_quantize": (ops.nvfp4_quantize, (f32(3, 32), 2.0), {}),
    "nvfp4_dequantize": (ops.nvfp4_dequantize, ops.nvfp4_quantize(f32(3, 32), target="cpu"), {}),
    "moe_route": (ops.moe_route, (f32(T, E), 2), {}),
    "moe": (ops.moe, (bf16(T, H), f32(T, E), bf16(E, 2 * INTER, H), bf16(E, H, INTER), 2), {}),
}


def mutations(v):
    """(name, bad value) pairs for argument value ``v``."""
    if isinstance(v, np.ndarray):
        yield "int32", v.astype(np.int32)
        yield "complex64", v.astype(np.complex64)
        yield "one dimension more", v[None]
        if v.ndim > 1:
            yield "flattened", v.reshape(-1)
            yield "transposed", np.swapaxes(v, -1, -2)
        yield "last dimension + 1", np.concatenate([v, v[..., :1]], axis=-1)
        yield "empty", v[:0]
        yield "a list", v.tolist()
        yield "a scalar", np.float32(1.0)
    elif isinstance(v, ops.Epilogue):
        for name, bad in mutations(v.x):
            yield "epilogue x " + name, ops.Epilogue(v.fn, x=bad)
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        yield from (("negative", -3), ("zero", 0), ("NaN", float("nan")), ("2^70", 2**70), ("a string", "x"),
                    ("a fraction", 2.5))
    yield "None", None


#: Ops whose results have no torch dtype (FP4 codes one a byte): numpy only, as documented.
NUMPY_ONLY = {"nvfp4_quantize", "nvfp4_dequantize"}


def as_torch(v):
    """``v`` with its numpy arrays (and an Epilogue's x) as torch CPU tensors of the same dtype."""
    import torch
    if isinstance(v, ops.Epilogue):
        return ops.Epilogue(v.fn, x=as_torch(v.x))
    if not isinstance(v, np.ndarray):
        return v
    named = {ml_dtypes.bfloat16: torch.bfloat16, ml_dtypes.float8_e4m3fn: torch.float8_e4m3fn,
             ml_dtypes.float8_e8m0fnu: torch.float8_e8m0fnu}
    for np_dtype, t_dtype in named.items():
        if v.dtype == np_dtype:
            bits = {1: np.uint8, 2: np.int16}[v.dtype.itemsize]
            return torch.from_numpy(np.ascontiguousarray(v).view(bits)).view(t_dtype)
    return torch.from_numpy(np.ascontiguousarray(v))


def torch_mutations(v):
    """Mutations of a torch tensor argument: those of its numpy twin, plus a strided last axis and a
    numpy array (another kind than the other arguments); other arguments: :func:`mutations`."""
    import torch
    if not isinstance(v, torch.Tensor):
        yield from ((n, as_torch(b)) for n, b in mutations(v))
        return
    yield "float64", v.to(torch.float64)
    yield "int32", v.to(torch.int32)
    yield "one dimension more", v[None]
    if v.dim() > 1:
        yield "transposed", v.transpose(-1, -2)
        yield "flattened", v.reshape(-1)
        yield "a strided last axis", v[..., ::2]
    yield "empty", v[:0]
    yield "a numpy array", (v if v.dtype in (torch.float32, torch.int32, torch.int64) else v.float()).numpy()
    yield "None", None


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("op", sorted(CALLS))
def test_one_bad_argument_is_a_value_or_type_error(op, kind):
    fn, args, kwargs = CALLS[op]
    if kind == "torch":
        pytest.importorskip("torch")
        if op in NUMPY_ONLY:
            pytest.skip("FP4 codes have no torch dtype (one a byte): numpy only")
        args, kwargs = tuple(as_torch(a) for a in args), {k: as_torch(a) for k, a in kwargs.items()}
    muts = mutations if kind == "numpy" else torch_mutations
    fn(*args, target="cpu", **kwargs)  # the valid call runs
    internal = []
    cases = [(f"argument {i}", i, None, m) for i, a in enumerate(args) for m in muts(a)]
    cases += [(f"{k}=", None, k, m) for k, a in kwargs.items() for m in muts(a)]
    for where, i, key, (what, bad) in cases:
        a, kw = list(args), dict(kwargs)
        if key is None:
            a[i] = bad
        else:
            kw[key] = bad
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(*a, target="cpu", **kw)
        except ALLOWED:
            pass
        except Exception as e:  # noqa: BLE001 - what the test is looking for
            internal.append(f"{op}: {where} {what}: {type(e).__name__}: {e}")
    assert not internal, "\n".join(internal)


#: op name -> (a call taking ``tiles``, the full tiles of the path it takes on the CPU target)
TILED = {
    "attention": (lambda t: ops.attention(f32(1, 40, 2, 32), f32(1, 40, 2, 32), f32(1, 40, 2, 32), causal=True,
                                          tiles=t, target="cpu"), dict(BM=64, BN=32, WARPS=2, STAGES=2)),
    "matmul": (lambda t: ops.matmul(f32(33, 40), f32(40, 24), tiles=t, target="cpu"),
               dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=2)),
    "matmul rms_norm": (lambda t: ops.matmul(f32(33, 40), f32(40, 24), tiles=t, target="cpu",
                                             epilogue=ops.Epilogue("rms_norm", x=np.ones(24, np.float32))),
                        dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=2)),
}


@pytest.mark.parametrize("op", sorted(TILED))
def test_bad_tiles_are_a_value_or_type_error(op):
    """``tiles`` a caller gives (the kernel's tile sizes): not a dict, a key missing or one the kernel
    does not take, and each value in turn 0, negative, 2^20, 2^40, odd, a string, a float, None, a bool.
    Only ValueError, TypeError or CompileError may come out (the launch's limits too:
    kcompiler.LaunchConfigError is a ValueError). Found with it (2026-11-29): a partial dict raised
    KeyError, BM 0 ZeroDivisionError, BM 2^20 a LaunchError (a RuntimeError), and matmul's STAGES 0
    aborted the process (the SIMT kernel wrote past shared memory sized at 0 bytes)."""
    fn, full = TILED[op]
    fn(full)  # the valid call runs
    bad = ["abc", 5, [1, 2], {k: v for k, v in list(full.items())[1:]}, {**full, "FOO": 1}]
    bad += [{**full, k: v} for k in full for v in (0, -16, 1 << 20, 1 << 40, 7, "x", 16.0, None, True)]
    internal = []
    for t in bad:
        try:
            fn(t)
        except ALLOWED:
            pass
        except Exception as e:  # noqa: BLE001 - what the test is looking for
            internal.append(f"{op}: tiles={t!r}: {type(e).__name__}: {e}")
    assert not internal, "\n".join(internal)


def test_num_splits_past_the_keys_is_cut():
    """paged_decode's num_splits beyond the longest sequence's keys is cut to that (each chunk a key at
    least): 2^40 raised MemoryError (its scratch allocated), 2^20 allocated 512 MB for 40 keys. The
    result equals the default's."""
    fn, args, kwargs = CALLS["paged_decode"]
    want = fn(*args, target="cpu", scale=0.25)
    for n in (41, 1 << 20, 1 << 40):
        np.testing.assert_allclose(fn(*args, target="cpu", scale=0.25, num_splits=n), want, rtol=1e-5, atol=1e-6)


def test_merge_states_lse_out_is_checked():
    """merge_states' ``lse_out`` of the wrong size, dtype or kind is refused. Before (2026-11-29) it was
    not checked: a 1-element view of a larger buffer had 11 floats written past its end (N H = 12)."""
    fn, args, _ = CALLS["merge_states"]
    big = np.full(100, -7.0, np.float32)
    with pytest.raises(ValueError, match=r"lse_out must be a contiguous \(3, 4\) array of f32"):
        fn(*args, lse_out=big[:1], target="cpu")
    assert (big == -7.0).all()
    for bad in (np.zeros((3, 4), np.float64), np.zeros((4, 3), np.float32), np.zeros((3, 8), np.float32)[:, ::2]):
        with pytest.raises(ValueError, match="lse_out"):
            fn(*args, lse_out=bad, target="cpu")
    with pytest.raises(TypeError, match="lse_out must be an array of v's kind"):
        fn(*args, lse_out=[[0.0] * 4] * 3, target="cpu")
    out, lse = fn(*args, lse_out=np.zeros((3, 4), np.float32), target="cpu")
    want_out, want_lse = fn(*args, target="cpu")
    np.testing.assert_array_equal(lse, want_lse)
    np.testing.assert_array_equal(out, want_out)
