"""Array operations built from the standard library's kernels, callable from Python like numpy's.

Each takes host (numpy) or device (torch, CuPy) arrays and runs on ``target`` ('auto': where the
input lives — a CUDA tensor on the GPU, a numpy array on CUDA when there is a GPU, else the CPU
target). The kernels are compiled once per process and specialisation (the disk cache keeps them
across processes). Device limits (multiprocessors, shared memory) come from the
:class:`~kcompiler.runtime.device.Device` that runs them, paths from the target's features
(``Module.target_has``).

One module per family: cast, mx (MX, NVFP4, FP4/FP6 packing), math, matmul (and matmul_sm90, its
Hopper path), attention (prefill), decode (paged decode, merge_states), mla, norms (RMSNorm, LayerNorm,
rotary embeddings, gated activations), sampling (sample, softmax, top-k/top-p), moe (mixture of experts:
routing, alignment, reduction, the layer), moe_gemm (its grouped GEMMs; moe_types their weights and
routing layout); _common holds what they share. The functions are re-exported here:
``kcompiler.ops.matmul`` is the function (it shadows its
module, as ``cast``, ``math`` and ``attention`` do theirs); reach a module itself with ``from
kcompiler.ops.matmul import matmul_tiles`` or ``importlib.import_module("kcompiler.ops.matmul")``.

``kcompiler.ops.torch`` (kcompiler.ops.torch_ops, imported at that first use): the ops as torch custom
operators, ``torch.ops.kcompiler.*``, for torch.compile and CUDA graphs.
"""
from __future__ import annotations

from typing import Any

from . import matmul_sm90
from .attention import (ATTENTION_MFMA_TILES, ATTENTION_SIMT_TILES, ATTENTION_SM90_TILES, ATTENTION_TILES, attention,
                        attention_shared_bytes, attention_sm90_reason_not, attention_sm90_shared_bytes)
from .cast import cast
from .decode import (DECODE_SIMT, DECODE_TC_DEFAULT, DECODE_TC_SINGLE, DECODE_TC_VARIANTS, decode_lanes,
                     decode_shared_bytes, decode_splits, decode_tc_tiles, merge_states, paged_decode)
from .math import MATH_KERNEL, math, math_kernel, math_launch, math_vectors
from .matmul import (BLOCK_EPILOGUES, EPILOGUES, FUSED_EPILOGUES, MATMUL_TILES, MATMUL_TUNE_CANDIDATES, Epilogue,
                     matmul, matmul_shared_bytes, matmul_tiles, matmul_tuned_tiles, scaled_matmul)
from .matmul_fused import rms_norm_epilogue
from .mla import (MLA_SM90_MIN_HEADS, MLA_SM90_SMALL_HEADS, MLA_SM90_SMALL_TILES, MLA_SM90_TILES, mla_decode, mla_sm90_reason_not, mla_sm90_shared_bytes,
                  mla_sm90_splits)
from .moe_gemm import (MOE_GEMM_TILES, MOE_VALUES_PER_LOAD, moe_block_m, moe_gemm_down, moe_gemm_swiglu,
                       moe_gemm_tiles, moe_grid_tiles)
from .moe import (MOE_ALIGN_CHUNK, MOE_ALIGN_MAX_EXPERTS, MOE_FUSED_MAX_ASSIGNMENTS, MOE_MODES, MOE_ROUTE_MAX_EXPERTS,
                  MOE_SM90_MIN_ROWS_PER_EXPERT, MOE_SM90_MXFP4_MIN_ROWS_PER_EXPERT,
                  MOE_ROUTE_MAX_TOP_K, MOE_SIMT_BN, MOE_SIMT_THREADS, moe, moe_align, moe_route, moe_route_align,
                  moe_simt_block_m, moe_sum)
from .norms import gelu_and_mul, layer_norm, rms_norm, rotary_embedding, silu_and_mul
from .sampling import SAMPLING_THREADS, sample, softmax, top_k_mask_logits, top_p_renorm_probs
from .mx import (mx_dequantize, mx_quantize, nvfp4_dequantize, nvfp4_quantize, pack_fp4, pack_fp6, unpack_fp4,
                 unpack_fp6)

__all__ = ["ATTENTION_MFMA_TILES", "ATTENTION_SIMT_TILES", "ATTENTION_SM90_TILES", "ATTENTION_TILES", "BLOCK_EPILOGUES",
           "DECODE_SIMT", "DECODE_TC_DEFAULT", "DECODE_TC_SINGLE", "DECODE_TC_VARIANTS", "EPILOGUES", "FUSED_EPILOGUES",
           "MATH_KERNEL", "MATMUL_TILES", "MATMUL_TUNE_CANDIDATES", "MLA_SM90_MIN_HEADS", "MLA_SM90_SMALL_HEADS", "MLA_SM90_SMALL_TILES", "MLA_SM90_TILES",
           "MOE_ALIGN_CHUNK", "MOE_ALIGN_MAX_EXPERTS", "MOE_FUSED_MAX_ASSIGNMENTS", "MOE_GEMM_TILES", "MOE_MODES", "MOE_ROUTE_MAX_EXPERTS", "MOE_SM90_MIN_ROWS_PER_EXPERT",
           "MOE_SM90_MXFP4_MIN_ROWS_PER_EXPERT",
           "MOE_ROUTE_MAX_TOP_K", "MOE_SIMT_BN", "MOE_SIMT_THREADS", "MOE_VALUES_PER_LOAD", "SAMPLING_THREADS",
           "Epilogue", "attention", "attention_shared_bytes", "attention_sm90_reason_not",
           "attention_sm90_shared_bytes", "cast", "decode_lanes", "decode_shared_bytes", "decode_splits",
           "decode_tc_tiles", "gelu_and_mul", "layer_norm", "math", "math_kernel", "math_launch", "math_vectors",
           "matmul", "matmul_shared_bytes", "matmul_sm90", "matmul_tiles", "matmul_tuned_tiles", "merge_states",
           "mla_decode", "mla_sm90_reason_not", "mla_sm90_shared_bytes", "mla_sm90_splits", "moe", "moe_align",
           "moe_block_m", "moe_gemm_down", "moe_gemm_swiglu", "moe_gemm_tiles", "moe_grid_tiles", "moe_route", "moe_route_align",
           "moe_simt_block_m",
           "moe_sum", "mx_dequantize", "mx_quantize", "nvfp4_dequantize", "nvfp4_quantize", "pack_fp4", "pack_fp6",
           "paged_decode", "rms_norm", "rms_norm_epilogue", "rotary_embedding", "sample", "scaled_matmul",
           "silu_and_mul", "softmax", "top_k_mask_logits", "top_p_renorm_probs", "unpack_fp4", "unpack_fp6"]


def __getattr__(name: str) -> Any:
    # kc.ops.torch: the ops as torch custom operators (kcompiler.ops.torch_ops; imports torch, which
    # nothing else here does, and defines torch.ops.kcompiler.*)
    if name == "torch":
        from . import torch_ops

        torch_ops.register()
        return torch_ops
    raise AttributeError(f"module 'kcompiler.ops' has no attribute {name!r}")
