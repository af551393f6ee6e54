"""The data a mixture-of-experts layer passes between its kernels: the experts' weights in one of three
formats (:class:`ExpertWeights`), activations quantised as MXFP8 (:class:`MXActivations`) and the
routing of tokens to experts in the layout the grouped GEMMs read (:class:`MoERouting`). ops/moe.py
(routing, alignment, reduction, ``ops.moe``) and ops/moe_gemm.py (the grouped GEMMs) both speak these; :func:`dequantize_reference` is the float64
reference the tests compare against.

Weight layout: E experts, each an ``(N, K)`` matrix (a Linear layer's weight: out = x @ W^T), stacked
along a first axis:

- ``"bf16"``: ``data`` bf16 ``(E, N, K)``, no scales;
- ``"fp8"``: ``data`` f8e4m3 ``(E, N, K)``, ``scales`` f32 ``(E, N)`` (per output channel: W[e, n, k]
  = data[e, n, k] * scales[e, n]);
- ``"mxfp4"``: OCP MX v1.0 MXFP4 (§5, E2M1 elements, an E8M0 scale per 32 along K): ``data`` uint8
  ``(E, N, K // 2)``, two E2M1 codes a byte, the element of lower k in the low nibble (NVIDIA's
  ``__nv_fp4x2_e2m1`` order, as ``ops.pack_fp4``), ``scales`` E8M0 ``(E, N, K // 32)`` (ml_dtypes
  ``float8_e8m0fnu`` or uint8 bytes). K is a multiple of 32.

For the gate/up projection N = 2 I: rows ``[0, I)`` are the gate, ``[I, 2 I)`` the up projection
(vLLM's ``w13`` order), and SwiGLU gives ``silu(x @ Wg^T) * (x @ Wu^T)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from ..numerics import mx as MX
from ..runtime import arrays

#: The weight formats, and the element type name of ``data`` for each.
FORMATS = {"bf16": "bf16", "fp8": "f8e4m3", "mxfp4": "u8"}


def _type_name(a: Any) -> str | None:
    t = arrays.array_scalar_type(a) if arrays.is_array(a) else None
    return t.name if t is not None else None


@dataclass(frozen=True)
class ExpertWeights:
    """E experts' ``(N, K)`` weight matrices in one format (see the module docstring for the layouts).

    Build with :meth:`bf16`, :meth:`fp8` or :meth:`mxfp4`, which check dtypes and shapes and raise
    TypeError / ValueError naming the argument. ``data`` and ``scales`` are numpy arrays or device
    arrays (torch, CuPy) on the device that runs the layer."""

    format: str
    data: Any
    scales: Any = None

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(E, N, K)``: experts, output features, input features (K unpacked for MXFP4)."""
        e, n, k = (int(d) for d in self.data.shape)
        return (e, n, 2 * k if self.format == "mxfp4" else k)

    @classmethod
    def bf16(cls, w: Any) -> "ExpertWeights":
        """``w``: bf16 ``(E, N, K)``."""
        _expect(w, "bf16", 3, "w")
        return cls("bf16", w)

    @classmethod
    def fp8(cls, codes: Any, scales: Any) -> "ExpertWeights":
        """``codes``: f8e4m3 ``(E, N, K)``; ``scales``: f32 ``(E, N)``, one per output channel."""
        _expect(codes, "f8e4m3", 3, "codes")
        _expect(scales, "f32", 2, "scales")
        if tuple(scales.shape) != tuple(codes.shape[:2]):
            raise ValueError(f"ExpertWeights.fp8: scales of shape {tuple(scales.shape)} for codes of "
                             f"{tuple(codes.shape)}: one per (expert, output channel), {tuple(codes.shape[:2])}")
        return cls("fp8", codes, scales)

    @classmethod
    def mxfp4(cls, packed: Any, scales: Any) -> "ExpertWeights":
        """``packed``: uint8 ``(E, N, K // 2)``; ``scales``: E8M0 (or uint8) ``(E, N, K // 32)``."""
        _expect(packed, "u8", 3, "packed")
        if _type_name(scales) not in ("e8m0", "u8"):
            raise TypeError(f"ExpertWeights.mxfp4: scales must be E8M0 (or their uint8 bytes), not "
                            f"{arrays.describe(scales)}")
        e, n, half = (int(d) for d in packed.shape)
        if (2 * half) % MX.BLOCK or tuple(scales.shape) != (e, n, 2 * half // MX.BLOCK):
            raise ValueError(f"ExpertWeights.mxfp4: K = {2 * half} must be a multiple of {MX.BLOCK} and scales of "
                             f"shape {(e, n, 2 * half // MX.BLOCK)}, found {tuple(scales.shape)}")
        return cls("mxfp4", packed, scales)

    @classmethod
    def quantize(cls, w: np.ndarray, format: str) -> "ExpertWeights":
        """Host helper for tests and benchmarks: float ``(E, N, K)`` numpy weights in ``format``
        (FP8: per-channel scale amax / 448, rounded to nearest even with saturation; MXFP4: OCP MX
        v1.0 §6.3 through kcompiler.numerics.mx). Returns numpy arrays."""
        w = np.asarray(w, dtype=np.float32)
        if format == "bf16":
            return cls.bf16(w.astype(ml_dtypes.bfloat16))
        if format == "fp8":
            amax = np.abs(w).max(axis=-1)
            s = np.where(amax > 0, amax / 448.0, 1.0).astype(np.float32)
            codes = (w / s[..., None]).astype(ml_dtypes.float8_e4m3fn)
            return cls.fp8(codes, s)
        if format == "mxfp4":
            codes, scales = MX.quantize(w, "f4e2m1")
            return cls.mxfp4(MX.pack_fp4(codes), scales)
        raise ValueError(f"ExpertWeights.quantize: format must be one of {sorted(FORMATS)}, not {format!r}")


def _expect(a: Any, type_name: str, ndim: int, what: str) -> None:
    if _type_name(a) != type_name or len(a.shape) != ndim:
        raise TypeError(f"ExpertWeights: {what} must be a {ndim}-D array of {type_name}, not {arrays.describe(a)}")


def dequantize_reference(w: ExpertWeights) -> np.ndarray:
    """float64 ``(E, N, K)`` values of ``w`` (host arrays), decoded as the spec says: the reference
    the kernels are tested against."""
    data = np.asarray(w.data)
    if w.format == "bf16":
        return data.astype(np.float64)
    if w.format == "fp8":
        return data.astype(np.float64) * np.asarray(w.scales, dtype=np.float64)[..., None]
    codes = MX.unpack_fp4(data)
    return MX.dequantize(codes, np.asarray(w.scales).view(np.uint8), "f4e2m1").astype(np.float64)


@dataclass(frozen=True)
class MXActivations:
    """Activations ``(T, H)`` quantised as MXFP8 (OCP MX v1.0 §5: E4M3 elements, an E8M0 scale per 32
    along H): ``codes`` f8e4m3 ``(T, H)``, ``scales`` E8M0 (ml_dtypes ``float8_e8m0fnu``, or their uint8
    bytes) ``(T, H // 32)``; x[t, h] = codes[t, h] * 2^(scales[t, h // 32] - 127), NaN for scale 0xFF.
    ``ops.mx_quantize(x, "f8e4m3")`` (device) or :meth:`quantize` (host) give them. Build with
    :meth:`mxfp8`, which checks dtypes and shapes (TypeError / ValueError naming the argument)."""

    codes: Any
    scales: Any

    @property
    def shape(self) -> tuple[int, int]:
        """``(T, H)``."""
        t, h = (int(d) for d in self.codes.shape)
        return (t, h)

    @classmethod
    def mxfp8(cls, codes: Any, scales: Any) -> "MXActivations":
        """``codes``: f8e4m3 ``(T, H)``, H a multiple of 32; ``scales``: E8M0 (or uint8) ``(T, H // 32)``."""
        if _type_name(codes) != "f8e4m3" or len(codes.shape) != 2:
            raise TypeError(f"MXActivations: codes must be a 2-D array of f8e4m3, not {arrays.describe(codes)}")
        if _type_name(scales) not in ("e8m0", "u8"):
            raise TypeError(f"MXActivations: scales must be E8M0 (or their uint8 bytes), not {arrays.describe(scales)}")
        if arrays.is_torch_tensor(codes) != arrays.is_torch_tensor(scales):
            raise TypeError("MXActivations: codes and scales must be arrays of one kind")
        t, h = (int(d) for d in codes.shape)
        if h % MX.BLOCK or tuple(scales.shape) != (t, h // MX.BLOCK):
            raise ValueError(f"MXActivations: H = {h} must be a multiple of {MX.BLOCK} and scales of shape "
                             f"{(t, h // MX.BLOCK)}, found {tuple(scales.shape)}")
        return cls(codes, scales)

    @classmethod
    def quantize(cls, x: np.ndarray) -> "MXActivations":
        """Host helper for tests: float ``(T, H)`` numpy activations as MXFP8 by kcompiler.numerics.mx
        (OCP MX v1.0 §6.3, the rules ``ops.mx_quantize`` follows on the device)."""
        codes, scales = MX.quantize(np.asarray(x, dtype=np.float32), "f8e4m3")
        return cls.mxfp8(codes, scales)

    def scales_as(self, name: str) -> Any:
        """``scales`` viewed as ``name`` ('e8m0' or 'u8': the same bytes), of their kind."""
        if _type_name(self.scales) == name:
            return self.scales
        if arrays.is_torch_tensor(self.scales):
            from ._common import torch_dtype
            return self.scales.view(torch_dtype(name))
        return np.asarray(self.scales).view(ml_dtypes.float8_e8m0fnu if name == "e8m0" else np.uint8)

    def dequantize_reference(self) -> np.ndarray:
        """float64 ``(T, H)`` values (host arrays), decoded as the spec says, in float64 (exact)."""
        codes = np.asarray(self.codes).astype(np.float64)
        s = np.asarray(self.scales).view(np.uint8).astype(np.int64)
        p = np.where(s == 0xFF, np.nan, np.ldexp(1.0, s - 127))
        return (codes.reshape(codes.shape[0], -1, MX.BLOCK) * p[..., None]).reshape(codes.shape)


@dataclass(frozen=True)
class MoERouting:
    """Which rows each grouped-GEMM tile computes (vLLM's ``moe_align_block_size`` layout).

    T tokens each choose ``top_k`` experts; assignment ``a = t * top_k + j`` is token t's j-th choice.

    Attributes (fields):

    - ``topk_ids``: i32 ``(T, top_k)``, the experts chosen (distinct within a row).
    - ``topk_weights``: f32 ``(T, top_k)``, their weights in the output sum.
    - ``sorted_ids``: i32 ``(P,)``: the assignments grouped by expert, each expert's run padded to a
      multiple of ``block_m`` with the sentinel ``T * top_k`` (no row); P is an upper bound,
      ``T * top_k + E * (block_m - 1)`` rounded up to ``block_m``, and slots past the last tile hold
      the sentinel.
    - ``tile_expert``: i32 ``(P // block_m,)``: the expert of each tile of ``block_m`` slots; -1 past
      the tiles in use.
    - ``num_tiles``: i32 ``(1,)``: the tiles in use (on the device: the GEMMs read it there, so the
      host never waits for the routing).
    - ``block_m``: the rows of a GEMM tile the layout is padded for.
    - ``top_k``: choices a token.
    - ``num_experts``: E.
    """

    topk_ids: Any
    topk_weights: Any
    sorted_ids: Any
    tile_expert: Any
    num_tiles: Any
    block_m: int
    top_k: int
    num_experts: int

    @property
    def tokens(self) -> int:
        """T."""
        return int(self.topk_ids.shape[0])

    @staticmethod
    def padded_slots(tokens: int, top_k: int, num_experts: int, block_m: int) -> int:
        """P for these sizes (see :attr:`sorted_ids`)."""
        p = tokens * top_k + num_experts * (block_m - 1)
        return -(-p // block_m) * block_m


__all__ = ["ExpertWeights", "FORMATS", "MoERouting", "dequantize_reference"]
