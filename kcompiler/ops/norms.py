"""kcompiler.ops.norms: RMSNorm (with the residual add fused), LayerNorm, rotary position embeddings in
place, and the gated activations SiLU-and-mul (SwiGLU) and GELU-and-mul (GeGLU), by std.norms's kernels
(stdlib/norms.kc).

Arrays are numpy (host; numpy out) or torch / CUDA-array-interface (device; torch out), of f32, f16 or
bf16; the math is in f32 and every result rounded once to the input's type. Rows may be strided (a
torch view whose last dimension is contiguous: q and k as views of a fused qkv projection): the row
stride is passed to the kernel, and elements move in vectors of up to 16 bytes where the length, the
strides and the data's alignment allow (else narrower ones)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import arrays
from . import _common
from ._common import data_ptr, empty_like, stream_of, target_for
from .norms_plans import NORM_MAX_VECTORS, act_plan, norm_launch, norm_plan, rotary_plan

#: Scratch of the norm kernel's cluster split (partial sums, rows x SPLIT f32), by (device, stream).
_PART: dict = {}
_PART_FLOATS = 1024
_HOST_PART = np.zeros(1, np.float32)  # numpy arrays run on the CPU target, which never splits a row


def _part(x: Any, need: int) -> Any:
    """f32 scratch of at least ``need`` elements on ``x``'s device, kept by stream (:func:`_common.kept`);
    ``need`` 0 (no split): an array the kernel does not read."""
    if not arrays.is_torch_tensor(x):
        return _HOST_PART
    if need == 0:
        return _common.const_f32(0.0, 1, x)
    if need > _PART_FLOATS:
        raise ValueError(f"the norm kernel's split needs {need} partial sums, more than {_PART_FLOATS}")
    return _common.kept(_PART, (str(x.device), stream_of(x)), x, lambda: empty_like(x, (_PART_FLOATS,), "f32"), 16)


FLOATS = ("f32", "f16", "bf16")


def _float_type(x: Any, fn: str, name: str) -> Any:
    """The scalar type of float array ``x`` (f32, f16, bf16); TypeError otherwise."""
    src = arrays.array_scalar_type(x) if arrays.is_array(x) else None
    if src is None or src.name not in FLOATS:
        raise TypeError(f"{fn}: {name} must be an array of f32, f16 or bf16, not {arrays.describe(x)}")
    return src


class _Rows:
    """Array ``a`` seen as ``rows`` x ``n`` elements with row stride ``ld`` (elements) for a kernel, its
    last ``merge`` dimensions forming a row: ``arg`` is what the launch gets (a view of ``a`` itself
    where its layout allows, else a contiguous copy, written back by :meth:`done` when the kernel
    writes it). Raises ValueError when those dimensions do not hold ``n`` elements."""

    def __init__(self, a: Any, n: int, fn: str, name: str, merge: int = 1):
        self.a, self.copied = a, False
        shape = tuple(a.shape)
        if len(shape) < merge or int(np.prod(shape[len(shape) - merge:])) != n:
            raise ValueError(f"{fn}: {name}'s last dimension{'s' if merge > 1 else ''} must hold {n} elements, "
                             f"not shape {shape}")
        self.rows = int(np.prod(shape[:len(shape) - merge]))
        if arrays.is_torch_tensor(a) and a.is_cuda:
            try:
                v = a.view(self.rows, n)
            except RuntimeError:  # strides that no row stride describes
                v = None
            if v is None or (n > 1 and v.stride(1) != 1):
                v, self.copied = a.contiguous().view(self.rows, n), True
            self.ld = v.stride(0) if self.rows > 1 else n
            # the launch takes contiguous arrays: rows apart by ld (a view of a fused qkv tensor) go as
            # the one contiguous span of memory from the first row's start to the last row's end
            self.arg = v if self.ld == n else v.as_strided(((self.rows - 1) * self.ld + n,), (1,))
        else:
            c = _common.contiguous(a)
            self.copied = c is not a
            self.arg, self.ld = c.reshape(self.rows, n), n

    def done(self) -> None:
        """Copy the kernel's result back into the caller's array where the kernel wrote a copy."""
        if not self.copied:
            return
        if arrays.is_torch_tensor(self.a):
            self.a.copy_(self.arg.view(self.a.shape))
        else:
            np.copyto(self.a, self.arg.reshape(self.a.shape))


def _vec(size: int, lengths: tuple, ptrs: tuple, least: int = 1) -> int:
    """The widest vector (elements) of at most 16 bytes of ``size``-byte elements, at least ``least``,
    that divides every length and stride in ``lengths`` and whose bytes divide every device address in
    ``ptrs`` (0 for host arrays, which are copied to aligned memory); 0 if none."""
    v = 16 // size
    while v >= least:
        if all(n % v == 0 for n in lengths) and all(p % (v * size) == 0 for p in ptrs):
            return v
        v //= 2
    return 0


def _vector_param(v: Any, n: int, fn: str, name: str, like: Any) -> Any:
    """Per-column array ``v`` (weight, bias) of ``n`` elements, of ``like``'s kind, contiguous."""
    _float_type(v, fn, name)
    if tuple(v.shape) != (n,):
        raise ValueError(f"{fn}: {name} must have shape ({n},), not {tuple(v.shape)}")
    if arrays.is_torch_tensor(like) != arrays.is_torch_tensor(v):
        raise TypeError(f"{fn}: {name} must be an array of x's kind ({arrays.describe(like)}), "
                        f"not {arrays.describe(v)}")
    return _common.flat(v, 16)


def _norm(fn: str, x: Any, weight: Any, bias: Any, eps: float, residual: Any, write_residual: bool,
          out: Any, layer: bool, target: str) -> Any:
    src = _float_type(x, fn, "x")
    n = int(x.shape[-1]) if len(x.shape) else 0
    if n == 0:
        raise ValueError(f"{fn}: x must have a nonzero last dimension, not shape {tuple(x.shape)}")
    xr = _Rows(x, n, fn, "x")
    rr = None
    if residual is not None:
        if _float_type(residual, fn, "residual") != src or tuple(residual.shape) != tuple(x.shape):
            raise ValueError(f"{fn}: residual must be an array of x's dtype and shape ({src}, {tuple(x.shape)})")
        rr = _Rows(residual, n, fn, "residual")
    if out is None:
        out = empty_like(x, tuple(x.shape), src.name)
    elif _float_type(out, fn, "out") != src or tuple(out.shape) != tuple(x.shape):
        raise ValueError(f"{fn}: out must be an array of x's dtype and shape ({src}, {tuple(x.shape)})")
    orow = _Rows(out, n, fn, "out")
    w = _vector_param(weight, n, fn, "weight", x) if weight is not None else None
    b = _vector_param(bias, n, fn, "bias", x) if bias is not None else None
    if xr.rows == 0:
        return out
    lds = (n, xr.ld, orow.ld) + ((rr.ld,) if rr else ())
    ptrs = tuple(data_ptr(a.arg) for a in (xr, orow) + ((rr,) if rr else ()))
    vec = _vec(src.size, lds, ptrs)
    for a in (w, b):  # the weight and bias are read VEC elements at once too
        while a is not None and data_ptr(a) % (vec * arrays.array_scalar_type(a).size):
            vec //= 2
    mod = _common.stdlib_module("norms", target_for(x, target))
    cluster = mod.target_has("cluster")
    sms = _common.device_of(mod, x).multiprocessor_count
    grid, block, nv, per, split = norm_plan(xr.rows, n, vec, layer, cluster, sms)
    w0 = w if w is not None else xr.arg  # an array the kernel does not read (HAS_W false)
    b0 = b if b is not None else xr.arg
    part = _part(x, xr.rows * split if split > 1 else 0)
    mod.norm[grid, block](xr.arg, xr.ld, rr.arg if rr else xr.arg, rr.ld if rr else 0, w0, b0, orow.arg, orow.ld,
                          n, xr.rows, float(eps), part, T=src.name, VEC=vec, NV=nv, LN=layer, RES=rr is not None,
                          WRITE=bool(rr is not None and write_residual), HAS_W=w is not None,
                          HAS_B=b is not None, ROWS=per, SPLIT=split, MAXT=1 << (block - 1).bit_length(),
                          stream=stream_of(x))
    orow.done()
    if rr is not None and write_residual:
        rr.done()
    return out


def rms_norm(x: Any, weight: Any, eps: float = 1e-6, residual: Any = None, *, write_residual: bool = True,
             out: Any = None, target: str = "auto") -> Any:
    """RMSNorm of each row (the last dimension, n) of ``x``: ``h / sqrt(mean(h^2) + eps) * weight``.

    ``x``: (..., n) of f32, f16 or bf16; ``weight``: (n,) of a float type (or None: no scale).
    ``residual``: (..., n) like x, or None. Given, the residual add is fused: h = x + residual, rounded
    to x's type as a residual stream holds it (the norm is of that rounded sum), and with
    ``write_residual`` (the default) the sum is written back into ``residual`` in place, as vLLM's
    ``fused_add_rms_norm`` does (there also ``x`` is overwritten: pass ``out=x`` for that). Returns
    ``out`` (a new array of x's shape and kind unless given). The sum of squares is accumulated in f32
    (a block reduction), 1 / sqrt by std.math's correctly rounded rsqrt, each element rounded once.
    Rows may be strided torch views (last dimension contiguous). Raises TypeError for another dtype,
    ValueError for mismatched shapes or rows longer than the kernel holds (:func:`norm_launch`)."""
    return _norm("rms_norm", x, weight, None, eps, residual, write_residual, out, False, target)


def layer_norm(x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5, *, residual: Any = None,
               write_residual: bool = True, out: Any = None, target: str = "auto") -> Any:
    """LayerNorm of each row (last dimension, n) of ``x``: ``(h - mean) / sqrt(var + eps) * weight +
    bias`` with the biased variance (torch.nn.functional.layer_norm's), computed in two passes over the
    row held in registers (the mean, then the squares of h - mean; f32 block reductions).

    ``x``: (..., n) of f32, f16 or bf16; ``weight``, ``bias``: (n,) float arrays or None (1 and 0).
    ``residual``, ``write_residual``, ``out``: as :func:`rms_norm`. Returns ``out``. Raises as
    :func:`rms_norm`."""
    return _norm("layer_norm", x, weight, bias, eps, residual, write_residual, out, True, target)


def rotary_embedding(q: Any, k: Any, positions: Any, cos_sin_cache: Any, interleaved: bool = False, *,
                     head_size: int | None = None, target: str = "auto") -> tuple[Any, Any]:
    """Rotary position embedding applied to ``q`` and ``k`` in place; returns (q, k).

    ``q``: (T, HQ, D) or (T, HQ * D) (with ``head_size`` D), or (..., HQ, D) with T the product of the
    leading dimensions; ``k``: the same with HK heads, or None. f32, f16 or bf16, one dtype; torch
    views of a fused qkv tensor are rotated in place through their row stride. ``positions``: T
    integers (int32 or int64), each below the cache's rows (checked for host arrays only: a device
    check would synchronise). ``cos_sin_cache``: (max_position, R) floats, vLLM's layout: row p holds
    cos(p theta_i) for i < R / 2, then sin(p theta_i). R, the rotary dimension, is even and at most D;
    the last D - R elements of each head are left alone (partial rotary).

    ``interleaved=False``: GPT-NeoX style (rotate_half; vLLM's is_neox=True): element i pairs with
    i + R / 2. ``interleaved=True``: GPT-J style: 2 i pairs with 2 i + 1. A pair (a, b) becomes
    (a cos - b sin, b cos + a sin), in f32, rounded once. Raises TypeError / ValueError for bad dtypes
    or shapes."""
    fn = "rotary_embedding"
    src = _float_type(q, fn, "q")
    cst = _float_type(cos_sin_cache, fn, "cos_sin_cache")
    if len(cos_sin_cache.shape) != 2 or cos_sin_cache.shape[1] % 2 or cos_sin_cache.shape[1] == 0:
        raise ValueError(f"{fn}: cos_sin_cache must be (max_position, R) with R even, not "
                         f"{tuple(cos_sin_cache.shape)}")
    rot = int(cos_sin_cache.shape[1])

    def heads(a: Any, name: str) -> tuple[int, int]:
        shape = tuple(a.shape)
        if len(shape) >= 3:
            if head_size is not None and head_size != shape[-1]:
                raise ValueError(f"{fn}: head_size {head_size} differs from {name}'s last dimension {shape[-1]}")
            return shape[-1], shape[-2]
        if len(shape) != 2 or head_size is None:
            raise ValueError(f"{fn}: {name} must be (T, H, D), or (T, H * D) with head_size given, not {shape}")
        if shape[1] % head_size:
            raise ValueError(f"{fn}: {name}'s last dimension {shape[1]} is not a multiple of head_size {head_size}")
        return head_size, shape[1] // head_size

    d, hq = heads(q, "q")
    tokens = int(np.prod(q.shape[:-2])) if len(q.shape) >= 3 else int(q.shape[0])
    hk = 0
    if k is not None:
        if _float_type(k, fn, "k") != src:
            raise TypeError(f"{fn}: k must be an array of q's dtype {src}, not {arrays.describe(k)}")
        dk, hk = heads(k, "k")
        tk = int(np.prod(k.shape[:-2])) if len(k.shape) >= 3 else int(k.shape[0])
        if dk != d or tk != tokens:
            raise ValueError(f"{fn}: k must have q's tokens ({tokens}) and head size ({d}), not shape {tuple(k.shape)}")
    if rot > d:
        raise ValueError(f"{fn}: the rotary dimension {rot} (cos_sin_cache's columns) exceeds the head size {d}")
    pos = positions
    if arrays.is_torch_tensor(pos):
        if str(pos.dtype) not in ("torch.int32", "torch.int64"):
            raise TypeError(f"{fn}: positions must hold int32 or int64, not {pos.dtype}")
        pos = pos.reshape(-1).contiguous()
    else:
        pos = np.ascontiguousarray(np.asarray(pos)).reshape(-1)
        if pos.dtype not in (np.int32, np.int64):
            raise TypeError(f"{fn}: positions must hold int32 or int64, not {pos.dtype}")
        if pos.size and (pos.min() < 0 or pos.max() >= cos_sin_cache.shape[0]):
            raise ValueError(f"{fn}: positions must lie in [0, {cos_sin_cache.shape[0]}) (cos_sin_cache's rows)")
    if pos.shape[0] != tokens:
        raise ValueError(f"{fn}: positions must hold one position a token ({tokens}), not {pos.shape[0]}")
    if tokens == 0 or hq + hk == 0:
        return q, k
    qr = _Rows(q, hq * d, fn, "q", 1 if len(q.shape) == 2 else 2)
    kr = _Rows(k, hk * d, fn, "k", 1 if len(k.shape) == 2 else 2) if k is not None else None
    cache = _common.flat(_common.contiguous(cos_sin_cache), 16)
    lengths = (rot // 2 if not interleaved else rot, d, qr.ld) + ((kr.ld,) if kr else ())
    ptrs = (data_ptr(qr.arg),) + ((data_ptr(kr.arg),) if kr else ())
    vec = _vec(src.size, lengths, ptrs, 2 if interleaved else 1)
    while vec > (2 if interleaved else 1) and data_ptr(cache) % ((vec // 2 if interleaved else vec) * cst.size):
        vec //= 2
    if vec == 0:  # interleaved: an odd row stride, or an address not aligned to a pair
        raise ValueError(f"{fn}: interleaved pairs need q and k rows aligned to pairs of elements")
    per = (rot // 2 if not interleaved else rot) // vec
    total = (hq + hk) * per
    mod = _common.stdlib_module("norms", target_for(q, target))
    gy, block, ni = rotary_plan(tokens, total, vec, _common.device_of(mod, q).multiprocessor_count)
    p_type = "i32" if str(pos.dtype).endswith("int32") else "i64"
    mod.rotary[(tokens, gy), block](qr.arg, qr.ld, kr.arg if kr else qr.arg, kr.ld if kr else 0, pos, cache, hq, hk,
                                    d, rot, T=src.name, C=cst.name, P=p_type, VEC=vec, NEOX=not interleaved, NI=ni,
                                    stream=stream_of(q))
    qr.done()
    if kr:
        kr.done()
    return q, k


#: The activation of each gated form, by the element type of the result: std.math's accurate
#: functions for f32; for f16 / bf16 results the reduced-precision ones where one exists for that
#: form (silu_rp; gelu_rp is GELU's tanh form), accurate to about 2^-22 relative, far below the
#: result's own rounding (docs/math.md).
ACTIVATIONS = {("silu", "f32"): "math.silu", ("silu", "16"): "math.silu_rp",
               ("gelu", "f32"): "math.gelu", ("gelu", "16"): "math.gelu",
               ("gelu_tanh", "f32"): "math.gelu_tanh", ("gelu_tanh", "16"): "math.gelu_rp"}


def _act_and_mul(fn: str, act: str, x: Any, out: Any, target: str) -> Any:
    src = _float_type(x, fn, "x")
    shape = tuple(x.shape)
    if not shape or shape[-1] % 2:
        raise ValueError(f"{fn}: x's last dimension must be even (2 d), not shape {shape}")
    d = shape[-1] // 2
    oshape = shape[:-1] + (d,)
    if out is None:
        out = empty_like(x, oshape, src.name)
    elif _float_type(out, fn, "out") != src or tuple(out.shape) != oshape:
        raise ValueError(f"{fn}: out must be an array of x's dtype and shape ({src}, {oshape})")
    if d == 0:
        return out
    xr, orow = _Rows(x, 2 * d, fn, "x"), _Rows(out, d, fn, "out")
    if xr.rows == 0:
        return out
    vec = _vec(src.size, (d, xr.ld, orow.ld), (data_ptr(xr.arg), data_ptr(orow.arg)))
    mod = _common.stdlib_module("norms", target_for(x, target))
    gy, block, nv = act_plan(xr.rows, d, vec, _common.device_of(mod, x).multiprocessor_count)
    mod.act_and_mul[(xr.rows, gy), block](
        xr.arg, xr.ld, orow.arg, orow.ld, d, T=src.name, VEC=vec,
        ACT=ACTIVATIONS[(act, "f32" if src.name == "f32" else "16")], NV=nv, stream=stream_of(x))
    orow.done()
    return out


def silu_and_mul(x: Any, *, out: Any = None, target: str = "auto") -> Any:
    """SwiGLU's gate: ``silu(x[..., :d]) * x[..., d:]`` for ``x`` of shape (..., 2 d) (vLLM's
    silu_and_mul); returns (..., d) of x's type and kind (or fills ``out``). f32, f16, bf16; the math in
    f32, rounded once (SiLU by std.math: silu, or silu_rp for 16-bit results, :data:`ACTIVATIONS`).
    Raises TypeError for another dtype, ValueError for an odd last dimension or a wrong ``out``."""
    return _act_and_mul("silu_and_mul", "silu", x, out, target)


def gelu_and_mul(x: Any, approximate: str = "none", *, out: Any = None, target: str = "auto") -> Any:
    """GeGLU's gate: ``gelu(x[..., :d]) * x[..., d:]`` for ``x`` of shape (..., 2 d); ``approximate``:
    'none' (the erf form, std.math.gelu) or 'tanh' (0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))),
    torch's approximate='tanh'). Returns (..., d) as :func:`silu_and_mul`; raises as it does, and
    ValueError for another ``approximate``."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu_and_mul: approximate must be 'none' or 'tanh', not {approximate!r}")
    return _act_and_mul("gelu_and_mul", "gelu" if approximate == "none" else "gelu_tanh", x, out, target)


__all__ = ["ACTIVATIONS", "NORM_MAX_VECTORS", "gelu_and_mul", "layer_norm", "norm_launch", "rms_norm",
           "rotary_embedding", "silu_and_mul"]
