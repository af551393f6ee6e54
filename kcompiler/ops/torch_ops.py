"""kcompiler.ops as torch custom operators (``torch.library.custom_op``, namespace ``kcompiler``), so that
``torch.compile(fullgraph=True)`` traces through them without a graph break and ``torch.cuda.graph``
captures and replays them::

    import kcompiler as kc
    T = kc.ops.torch                         # registers torch.ops.kcompiler.* (imports torch)
    y = T.matmul(x, w.T, "gelu")             # or torch.ops.kcompiler.matmul(x, w.T, "gelu", ...)
    o = T.attention(q, k, v, causal=True)

The operators: ``matmul``, ``scaled_matmul``, ``attention``, ``paged_decode``, ``merge_states``,
``mla_decode``, ``cast``, ``mx_quantize``. Each has a fake (meta) implementation that gives the
outputs' shapes and dtypes from the inputs' alone (no kernel, no read of a tensor's values), and
none writes its inputs (``mutates_args=()``): outputs are new tensors. They take torch tensors on a
CUDA device (the kernels run there, on torch's current stream) or on the CPU (the CPU target runs
them, for tests: ``torch.library.opcheck`` passes there). No autograd formula is registered: they
are inference operators (a backward through them raises).

In a CUDA graph capture they allocate through torch's caching allocator only, copy nothing from the
host and never wait for the device: the matmul autotuner does not time while torch captures (it
takes its cached choice, or the default tiles). As torch asks of any captured code, run the
operators once before the capture (warm-up: compiles and loads the kernels, tunes the matmul).
What reads tensors on the host, and so cannot be captured: ``attention`` with ``cu_seqlens``
(checked and measured on the host), and ``paged_decode`` / ``mla_decode`` without ``max_seq_len``.

:func:`torch_op` makes a torch operator of a user's own kernel the same way (``kc.torch_op``).

This module imports torch only when an operator is first used (``import kcompiler`` and ``import
kcompiler.ops.torch_ops`` never do); :func:`register` defines them all at once.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, Sequence

from ..runtime import arrays
from . import _common

#: The torch.ops namespace of the operators (``torch.ops.kcompiler.matmul``).
NAMESPACE = "kcompiler"

_OPS: Any = None  # torch.ops.kcompiler once register() has run


def register() -> Any:
    """Define the operators of this module in torch (once a process) and return their namespace,
    ``torch.ops.kcompiler``. Raises ImportError where torch is not installed."""
    global _OPS
    if _OPS is None:
        _define()
        import torch  # deferred: torch is optional
        _OPS = getattr(torch.ops, NAMESPACE)
    return _OPS


def _ops() -> Any:
    return _OPS if _OPS is not None else register()


# --- the Python functions (what kc.ops.torch.NAME is) ------------------------------------------------


def matmul(a: Any, b: Any, epilogue: str | None = None, *, x: Any = None, y: Any = None, s: float = 1.0,
           epilogue_source: str | None = None, out_dtype: Any = None) -> Any:
    """:func:`kcompiler.ops.matmul` as ``torch.ops.kcompiler.matmul``: ``epilogue(a @ b)`` of (M, K) and
    (K, N) f32/f16/bf16 tensors, a new (M, N) tensor of ``out_dtype`` (default a's; f32, f16, bf16,
    float8_e4m3fn, float8_e5m2). ``epilogue``: a stock epilogue's name (:data:`kcompiler.ops.EPILOGUES`)
    or, with ``epilogue_source`` (kernel-language text defining it), the name of the user's fn;
    ``x``, ``y``, ``s``: its inputs (:class:`kcompiler.ops.Epilogue`). The block (MXFP8) epilogues,
    which give two results, are not offered here (use :func:`mx_quantize` after the product). Raises
    what kcompiler.ops.matmul raises."""
    return _ops().matmul(a, b, epilogue, x, y, float(s), epilogue_source, out_dtype)


def scaled_matmul(a: Any, b: Any, scale_a: Any, scale_b: Any, *, out_dtype: Any = None) -> Any:
    """:func:`kcompiler.ops.scaled_matmul` as ``torch.ops.kcompiler.scaled_matmul``: FP8 ``(a @ b) *
    scale_a * scale_b`` (torch._scaled_mm's contract), a new (M, N) tensor of ``out_dtype`` (bf16
    default, f16, f32). CUDA tensors take the Hopper path (sm_90); CPU tensors the CPU target's
    emulation of the same kernel."""
    return _ops().scaled_matmul(a, b, scale_a, scale_b, out_dtype)


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None,
              cu_seqlens_q: Any = None, cu_seqlens_k: Any = None, max_seqlen_q: int | None = None,
              layout: str = "bshd", return_lse: bool = False) -> Any:
    """:func:`kcompiler.ops.attention` as ``torch.ops.kcompiler.attention`` (which returns the pair
    (out, lse) always): the output like q, and with ``return_lse`` also the f32 log-sum-exp ((B, Hq,
    Sq); (Hq, total_q) with ``cu_seqlens``). Variable lengths read cu_seqlens on the host: not in a
    CUDA graph capture. FP8 (e4m3) inputs are not taken here (TypeError): kcompiler.ops.attention takes
    them, with their descale factors."""
    if str(getattr(q, "dtype", "")).startswith("torch.float8"):
        raise TypeError("torch.ops.kcompiler.attention takes f16/bf16/f32 tensors; call kcompiler.ops.attention "
                        "for FP8 (e4m3) ones, with descale_q, descale_k, descale_v")
    out, lse = _ops().attention(q, k, v, bool(causal), scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, layout)
    return (out, lse) if return_lse else out


def paged_decode(q: Any, k_cache: Any, v_cache: Any, block_table: Any, seq_lens: Any, *,
                 scale: float | None = None, k_scale: Any = None, v_scale: Any = None,
                 num_splits: int | None = None, max_seq_len: int | None = None, return_lse: bool = False) -> Any:
    """:func:`kcompiler.ops.paged_decode` as ``torch.ops.kcompiler.paged_decode`` (which returns (out,
    lse) always; LSE of shape q.shape[:-1], f32). ``k_scale``, ``v_scale``: f32 tensors (one element,
    or one per KV head) for an FP8 cache. Give ``max_seq_len`` in a CUDA graph capture (else seq_lens
    is read on the host)."""
    out, lse = _ops().paged_decode(q, k_cache, v_cache, block_table, seq_lens, scale, k_scale, v_scale,
                                   num_splits, max_seq_len)
    return (out, lse) if return_lse else out


def merge_states(v: Any, s: Any, *, out_dtype: Any = None) -> Any:
    """:func:`kcompiler.ops.merge_states` as ``torch.ops.kcompiler.merge_states``: ``(o, lse)``, o (N, H,
    D) of ``out_dtype`` (default v's), lse (N, H) f32, of v (N, S, H, D) and s (N, S, H)."""
    return _ops().merge_states(v, s, out_dtype)


def mla_decode(q_nope: Any, q_pe: Any, ckv_cache: Any, kpe_cache: Any, block_table: Any, seq_lens: Any, *,
               scale: float, num_splits: int | None = None, max_seq_len: int | None = None,
               return_lse: bool = False) -> Any:
    """:func:`kcompiler.ops.mla_decode` as ``torch.ops.kcompiler.mla_decode`` (which returns (out, lse)
    always): out (B, H, D) of q's dtype, lse (B, H) f32. Give ``max_seq_len`` in a CUDA graph capture."""
    out, lse = _ops().mla_decode(q_nope, q_pe, ckv_cache, kpe_cache, block_table, seq_lens, float(scale),
                                 num_splits, max_seq_len)
    return (out, lse) if return_lse else out


def cast(x: Any, dtype: Any, *, saturate: bool = False) -> Any:
    """:func:`kcompiler.ops.cast` as ``torch.ops.kcompiler.cast``: ``x`` converted to torch dtype
    ``dtype``, a new tensor of x's shape."""
    return _ops().cast(x, dtype, bool(saturate))


def mx_quantize(x: Any, fmt: str = "f8e4m3") -> Any:
    """:func:`kcompiler.ops.mx_quantize` as ``torch.ops.kcompiler.mx_quantize``: ``(codes, scales)`` of
    x (f32/f16/bf16, the last axis a multiple of 32) in ``fmt`` 'f8e4m3' (float8_e4m3fn codes),
    'f8e5m2' (float8_e5m2) or 'int8' (int8); scales float8_e8m0fnu of shape x.shape[:-1] + (last //
    32,). FP6 and FP4 codes have no torch dtype of a byte each: use kcompiler.ops.mx_quantize."""
    return _ops().mx_quantize(x, fmt)


# --- the operators ---------------------------------------------------------------------------------------

#: The operators' schemas (torch's function schema language; ScalarType: a torch dtype).
_SCHEMAS = {
    "matmul": "(Tensor a, Tensor b, str? epilogue, Tensor? x, Tensor? y, float s, str? epilogue_source, "
              "ScalarType? out_dtype) -> Tensor",
    "scaled_matmul": "(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, ScalarType? out_dtype) -> Tensor",
    "attention": "(Tensor q, Tensor k, Tensor v, bool causal, float? scale, Tensor? cu_seqlens_q, "
                 "Tensor? cu_seqlens_k, SymInt? max_seqlen_q, str layout) -> (Tensor, Tensor)",
    "paged_decode": "(Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, Tensor seq_lens, float? scale, "
                    "Tensor? k_scale, Tensor? v_scale, SymInt? num_splits, SymInt? max_seq_len) -> (Tensor, Tensor)",
    "merge_states": "(Tensor v, Tensor s, ScalarType? out_dtype) -> (Tensor, Tensor)",
    "mla_decode": "(Tensor q_nope, Tensor q_pe, Tensor ckv_cache, Tensor kpe_cache, Tensor block_table, "
                  "Tensor seq_lens, float scale, SymInt? num_splits, SymInt? max_seq_len) -> (Tensor, Tensor)",
    "cast": "(Tensor x, ScalarType dtype, bool saturate) -> Tensor",
    "mx_quantize": "(Tensor x, str fmt) -> (Tensor, Tensor)",
}

#: Formats of mx_quantize with a torch dtype for the codes.
_MX_CODES = {"f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2", "int8": "int8"}


def _target(t: Any) -> str:
    """The target of a kcompiler op on torch tensor ``t``: the CPU target for a CPU tensor (also where
    a GPU is present), else 'auto' (the GPU that holds it)."""
    return "cpu" if t.device.type == "cpu" else "auto"


def _tune(t: Any) -> bool | None:
    """matmul's ``tune``: no timing while torch captures a CUDA graph (it would wait for the device)."""
    return False if _common.capturing(t) else None


def _define() -> None:
    """Define the operators (torch.library.custom_op) and their fake implementations."""
    import torch  # deferred: torch is optional

    lib = NAMESPACE

    def op(name: str) -> Callable:
        # the schema is given: this module's annotations are strings (from __future__ import annotations)
        return torch.library.custom_op(f"{lib}::{name}", mutates_args=(), schema=_SCHEMAS[name])

    _define_matmul(torch, op)
    _define_attention(torch, op)
    _define_conversions(torch, op)


def _define_matmul(torch: Any, op: Callable) -> None:
    """kcompiler::matmul and kcompiler::scaled_matmul."""
    from torch import Tensor

    from .matmul import BLOCK_EPILOGUES, Epilogue, matmul as matmul_fn, scaled_matmul as scaled_matmul_fn

    Dtype = Optional[torch.dtype]

    @op("matmul")
    def matmul_op(a: Tensor, b: Tensor, epilogue: Optional[str], x: Optional[Tensor], y: Optional[Tensor],
                  s: float, epilogue_source: Optional[str], out_dtype: Dtype) -> Tensor:
        ep = None
        if epilogue is not None:
            if epilogue_source is None and epilogue in BLOCK_EPILOGUES:
                raise ValueError(f"kcompiler::matmul: the block epilogue {epilogue} gives two results; use "
                                 f"kcompiler::mx_quantize after the product, or kcompiler.ops.matmul")
            ep = Epilogue(epilogue, x=x, y=y, s=s, source=epilogue_source)
        elif x is not None or y is not None or epilogue_source is not None:
            raise ValueError("kcompiler::matmul: x, y and epilogue_source need an epilogue")
        return matmul_fn(a, b, epilogue=ep, out_dtype=out_dtype, tune=_tune(a), target=_target(a))

    @matmul_op.register_fake
    def _(a, b, epilogue, x, y, s, epilogue_source, out_dtype):
        torch._check(a.dim() == 2 and b.dim() == 2, lambda: "kcompiler::matmul: a and b must be 2-D")
        return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype or a.dtype)

    @op("scaled_matmul")
    def scaled_matmul_op(a: Tensor, b: Tensor, scale_a: Tensor, scale_b: Tensor, out_dtype: Dtype) -> Tensor:
        if a.is_cuda:
            return scaled_matmul_fn(a, b, scale_a, scale_b, out_dtype=out_dtype)
        from .matmul_sm90 import scaled_matmul_cpu
        r = scaled_matmul_cpu(_host(a), _host(b), _host(scale_a), _host(scale_b),
                              out_dtype=_common.scalar_of(out_dtype or torch.bfloat16).name)
        return _from_host(r, out_dtype or torch.bfloat16)

    @scaled_matmul_op.register_fake
    def _(a, b, scale_a, scale_b, out_dtype):
        return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype or torch.bfloat16)


def _define_attention(torch: Any, op: Callable) -> None:
    """kcompiler::attention, paged_decode, merge_states and mla_decode."""
    from torch import Tensor

    # the functions (kcompiler.ops.attention is the function, which shadows its module)
    from .attention import attention as attention_fn
    from .decode import merge_states as merge_states_fn, paged_decode as paged_decode_fn
    from .mla import mla_decode as mla_decode_fn

    Dtype = Optional[torch.dtype]

    @op("attention")
    def attention_op(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: Optional[float],
                     cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: Optional[int],
                     layout: str) -> tuple[Tensor, Tensor]:
        return attention_fn(q, k, v, causal=causal, scale=scale, cu_seqlens_q=cu_seqlens_q,
                                    cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q, layout=layout,
                                    return_lse=True, target=_target(q))

    @attention_op.register_fake
    def _(q, k, v, causal, scale, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, layout):
        if cu_seqlens_q is not None:
            lse = (q.shape[1], q.shape[0])
        elif layout == "bshd":
            lse = (q.shape[0], q.shape[2], q.shape[1])
        else:
            lse = (q.shape[0], q.shape[1], q.shape[2])
        return torch.empty_like(q, memory_format=torch.contiguous_format), q.new_empty(lse, dtype=torch.float32)

    @op("paged_decode")
    def paged_decode_op(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor, seq_lens: Tensor,
                        scale: Optional[float], k_scale: Optional[Tensor], v_scale: Optional[Tensor],
                        num_splits: Optional[int], max_seq_len: Optional[int]) -> tuple[Tensor, Tensor]:
        return paged_decode_fn(q, k_cache, v_cache, block_table, seq_lens, scale=scale, k_scale=k_scale,
                                   v_scale=v_scale, num_splits=num_splits, max_seq_len=max_seq_len,
                                   return_lse=True, target=_target(q))

    @paged_decode_op.register_fake
    def _(q, k_cache, v_cache, block_table, seq_lens, scale, k_scale, v_scale, num_splits, max_seq_len):
        return (torch.empty_like(q, memory_format=torch.contiguous_format),
                q.new_empty(q.shape[:-1], dtype=torch.float32))

    @op("merge_states")
    def merge_states_op(v: Tensor, s: Tensor, out_dtype: Dtype) -> tuple[Tensor, Tensor]:
        return merge_states_fn(v, s, out_dtype=out_dtype, target=_target(v))

    @merge_states_op.register_fake
    def _(v, s, out_dtype):
        N, _, H, D = v.shape
        return v.new_empty((N, H, D), dtype=out_dtype or v.dtype), v.new_empty((N, H), dtype=torch.float32)

    @op("mla_decode")
    def mla_decode_op(q_nope: Tensor, q_pe: Tensor, ckv_cache: Tensor, kpe_cache: Tensor, block_table: Tensor,
                      seq_lens: Tensor, scale: float, num_splits: Optional[int],
                      max_seq_len: Optional[int]) -> tuple[Tensor, Tensor]:
        return mla_decode_fn(q_nope, q_pe, ckv_cache, kpe_cache, block_table, seq_lens, scale=scale,
                              num_splits=num_splits, max_seq_len=max_seq_len, return_lse=True,
                              target=_target(q_nope))

    @mla_decode_op.register_fake
    def _(q_nope, q_pe, ckv_cache, kpe_cache, block_table, seq_lens, scale, num_splits, max_seq_len):
        B, H, D = q_nope.shape
        return q_nope.new_empty((B, H, D)), q_nope.new_empty((B, H), dtype=torch.float32)


def _define_conversions(torch: Any, op: Callable) -> None:
    """kcompiler::cast and kcompiler::mx_quantize."""
    from torch import Tensor

    from .cast import cast as cast_fn
    from .mx import mx_quantize as mx_quantize_fn

    @op("cast")
    def cast_op(x: Tensor, dtype: torch.dtype, saturate: bool) -> Tensor:
        return cast_fn(x, dtype, saturate=saturate, target=_target(x))

    @cast_op.register_fake
    def _(x, dtype, saturate):
        return torch.empty_like(x, dtype=dtype, memory_format=torch.contiguous_format)

    @op("mx_quantize")
    def mx_quantize_op(x: Tensor, fmt: str) -> tuple[Tensor, Tensor]:
        if fmt not in _MX_CODES:
            raise ValueError(f"kcompiler::mx_quantize: fmt must be one of {', '.join(_MX_CODES)} (codes a torch "
                             f"dtype holds), not {fmt!r}")
        return mx_quantize_fn(x, fmt, target=_target(x))

    @mx_quantize_op.register_fake
    def _(x, fmt):
        torch._check(fmt in _MX_CODES, lambda: f"kcompiler::mx_quantize: no torch dtype for {fmt} codes")
        codes = torch.empty_like(x, dtype=getattr(torch, _MX_CODES[fmt]), memory_format=torch.contiguous_format)
        return codes, x.new_empty((*x.shape[:-1], x.shape[-1] // 32), dtype=torch.float8_e8m0fnu)

def _host(t: Any) -> Any:
    """A torch CPU tensor as a numpy array of its kernel type (ml_dtypes for bf16 and FP8), no copy."""
    st = arrays.array_scalar_type(t)
    raw = t.detach().contiguous()
    try:
        return raw.numpy()
    except TypeError:  # numpy has no such dtype: the same bytes, viewed as ml_dtypes'
        import torch  # deferred: torch is optional
        return raw.view(torch.uint8 if st.size == 1 else torch.int16).numpy().view(arrays.numpy_dtype(st))


def _from_host(a: Any, dtype: Any) -> Any:
    """numpy array ``a`` (ml_dtypes allowed) as a torch CPU tensor of ``dtype`` (the same bytes)."""
    import numpy as np
    import torch  # deferred: torch is optional
    if a.dtype.kind in "fiub" and a.dtype.name in ("float16", "float32", "float64", "int8", "uint8", "int32"):
        return torch.from_numpy(np.ascontiguousarray(a))
    same = {1: np.uint8, 2: np.int16, 4: np.int32}[a.dtype.itemsize]
    return torch.from_numpy(np.ascontiguousarray(a).view(same)).view(dtype)


# --- a user's kernel as a torch operator -------------------------------------------------------------------


def torch_op(kernel: Any, *, name: str, outputs: Callable[..., Sequence[tuple]], grid: Any, block: Any,
             args: Callable[..., Sequence[Any]] | None = None, params: Any = None, shared: Any = 0,
             mutates: Sequence[str] = ()) -> Callable[..., Any]:
    """A torch custom operator (``torch.library.custom_op``) that launches ``kernel`` (a Kernel of a
    compiled module, ``mod.vadd``) on torch tensors: callable as the returned function and as
    ``torch.ops.NS.OP`` (``name`` = "NS::OP"), traced by ``torch.compile(fullgraph=True)`` and captured
    by ``torch.cuda.graph`` (launched on torch's current stream, outputs from torch's allocator).

    - ``outputs(*inputs)``: the new tensors the kernel writes, a list of ``(shape, dtype)``; the
      operator's inputs are this function's parameters, in order (tensors, unless annotated
      ``int``/``float``/``bool``/``str``, or with such a default). It serves as the fake implementation
      too, so it must use only shapes, dtypes and scalars, never a tensor's values.
    - ``grid``, ``block``: the launch (an int or tuple), or functions of the inputs giving it.
    - ``args(*inputs, *outs)``: the kernel's arguments in order (default: the inputs then the
      outputs); scalars from shapes here (``a.numel()``).
    - ``params``: compile-time values (a dict, or a function of the inputs giving one, e.g. the
      element type from a dtype); ``shared``: dynamic shared-memory bytes (an int or a function).
    - ``mutates``: names of inputs the kernel writes in place (torch's ``mutates_args``). Such an
      operator returns nothing: ``outputs`` must then give ``[]`` (torch.compile's functionalisation
      takes no list of results beside inputs written in place).

    The operator returns the one output, or a tuple of them (None when there are none). The module
    must be compiled for where the tensors live (target 'cpu' for CPU tensors, 'cuda' for CUDA ones).
    Raises ImportError without torch; what ``torch.library.custom_op`` raises for a bad name or
    signature; at a call, what the launch raises."""
    import torch  # deferred: torch is optional

    sig = inspect.signature(outputs)
    scalar = (int, float, bool, str)
    plist = []
    for p in sig.parameters.values():
        ann = p.annotation if p.annotation in scalar else (
            type(p.default) if p.default is not inspect.Parameter.empty and type(p.default) in scalar else torch.Tensor)
        plist.append(p.replace(annotation=ann, kind=inspect.Parameter.POSITIONAL_OR_KEYWORD))
    n_out = [None]  # the count of outputs, known at the first call (fake or real)

    def shapes(*inputs: Any) -> list[tuple]:
        outs = [(tuple(s) if not isinstance(s, int) else (s,), dt) for s, dt in outputs(*inputs)]
        n_out[0] = len(outs)
        return outs

    def value(f: Any, inputs: tuple) -> Any:
        return f(*inputs) if callable(f) else f

    def new_outputs(inputs: tuple, make: Callable[[Any, tuple, Any], Any]) -> Any:
        like = next((x for x in inputs if isinstance(x, torch.Tensor)), None)
        outs = [make(like, s, dt) for s, dt in shapes(*inputs)]
        if mutates and outs:
            raise ValueError(f"{name}: an operator that writes its inputs (mutates={tuple(mutates)}) returns "
                             f"nothing: outputs must give []")
        return like, outs

    def impl(*inputs: Any) -> Any:
        like, outs = new_outputs(inputs, lambda t, s, dt: torch.empty(
            s, dtype=dt, device=t.device if t is not None else "cpu"))
        kargs = args(*inputs, *outs) if args is not None else (*inputs, *outs)
        stream = _common.stream_of(like) if like is not None else None
        kernel[value(grid, inputs), value(block, inputs)](*kargs, shared=value(shared, inputs), stream=stream,
                                                          **(value(params, inputs) or {}))
        return None if mutates else outs

    def fake(*inputs: Any) -> Any:
        _, outs = new_outputs(inputs, lambda t, s, dt: t.new_empty(s, dtype=dt) if t is not None
                              else torch.empty(s, dtype=dt))
        return None if mutates else outs

    ret = None if mutates else list[torch.Tensor]
    impl.__signature__ = inspect.Signature(plist, return_annotation=ret)  # type: ignore[attr-defined]
    impl.__name__ = name.split("::")[-1]
    fake.__signature__ = impl.__signature__  # type: ignore[attr-defined]
    cop = torch.library.custom_op(name, impl, mutates_args=tuple(mutates))
    cop.register_fake(fake)

    def call(*inputs: Any, **kw: Any) -> Any:
        outs = cop(*inputs, **kw)
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)

    call.__doc__ = f"The torch operator {name} of kernel {getattr(kernel, 'name', kernel)!r} (kc.torch_op)."
    call.__name__ = impl.__name__
    call.op = cop  # type: ignore[attr-defined]
    return call


__all__ = ["NAMESPACE", "attention", "cast", "matmul", "merge_states", "mla_decode", "mx_quantize", "paged_decode",
           "register", "scaled_matmul", "torch_op"]
