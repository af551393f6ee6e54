"""kcompiler.ops as torch custom operators (kcompiler/ops/torch_ops.py, ``kc.ops.torch``) and
``kc.torch_op``: ``torch.library.opcheck`` of each operator on CPU tensors (the CPU target runs the
kernels; the fake implementations are checked against them), results against torch's own, a
``torch.compile(fullgraph=True)`` trace without graph breaks, and on a GPU a transformer block compiled
and replayed from a CUDA graph, equal to eager."""
from __future__ import annotations

import math
import subprocess
import importlib
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kcompiler as kc  # noqa: E402
from kcompiler import ops  # noqa: E402

from ..paths import ROOT  # noqa: E402

T = kc.ops.torch
K = torch.ops.kcompiler


def _opcheck(op, args):
    # test_schema, test_autograd_registration, test_faketensor, test_aot_dispatch_dynamic
    torch.library.opcheck(op, args)


def _sdpa(q, k, v, causal):  # bshd, in f32
    o = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                                         v.transpose(1, 2).float(), is_causal=causal)
    return o.transpose(1, 2)


def test_import_kcompiler_ops_torch_ops_does_not_import_torch():
    code = "import sys, kcompiler, kcompiler.ops.torch_ops; kcompiler.torch_op; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr[-2000:]


def test_matmul_op_with_epilogue():
    g = torch.Generator().manual_seed(0)
    a, b, bias = torch.randn(24, 40, generator=g), torch.randn(40, 16, generator=g), torch.randn(16, generator=g)
    got = T.matmul(a, b, "bias_relu", x=bias)
    torch.testing.assert_close(got, torch.relu(a @ b + bias), rtol=1e-5, atol=1e-5)
    _opcheck(K.matmul.default, (a, b, "bias_relu", bias, None, 1.0, None, None))
    _opcheck(K.matmul.default, (a.bfloat16(), b.bfloat16(), None, None, None, 1.0, None, torch.float32))


def test_matmul_op_refuses_a_block_epilogue():
    a = torch.randn(4, 32)
    with pytest.raises(ValueError, match="two results"):
        T.matmul(a, torch.randn(32, 32), "to_mxfp8_e4m3")


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_attention_op(layout):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 16, 2, 16, generator=g) for _ in range(3))
    out, lse = T.attention(q, k, v, causal=True, return_lse=True)
    torch.testing.assert_close(out, _sdpa(q, k, v, True), rtol=1e-5, atol=1e-5)
    assert lse.shape == (1, 2, 16) and lse.dtype == torch.float32
    if layout == "bhsd":
        q, k, v = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    _opcheck(K.attention.default, (q, k, v, True, None, None, None, None, layout))


def test_attention_op_varlen_fake_shapes():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(12, 2, 16, generator=g) for _ in range(3))
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)
    _opcheck(K.attention.default, (q, k, v, False, 0.25, cu, cu, 7, "bshd"))


def _paged(B=2, H=2, HK=1, D=16, page=4, pages=5, seed=3):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, D, generator=g)
    kc_, vc = torch.randn(pages, page, HK, D, generator=g), torch.randn(pages, page, HK, D, generator=g)
    table = torch.tensor([[3, 0], [4, 1]], dtype=torch.int32)
    lens = torch.tensor([7, 3], dtype=torch.int32)
    return q, kc_, vc, table, lens


def test_paged_decode_op():
    q, kc_, vc, table, lens = _paged()
    out = T.paged_decode(q, kc_, vc, table, lens, max_seq_len=7)
    for b in range(2):
        n = int(lens[b])
        keys = torch.cat([kc_[p] for p in table[b]])[:n, 0]  # (n, D), one KV head
        vals = torch.cat([vc[p] for p in table[b]])[:n, 0]
        p = torch.softmax(q[b] @ keys.T / math.sqrt(16), -1)
        torch.testing.assert_close(out[b], p @ vals, rtol=1e-5, atol=1e-5)
    _opcheck(K.paged_decode.default, (q, kc_, vc, table, lens, None, None, None, 2, 7))


def test_merge_states_op():
    g = torch.Generator().manual_seed(4)
    v, s = torch.randn(2, 3, 2, 8, generator=g), torch.randn(2, 3, 2, generator=g)
    o, lse = T.merge_states(v, s)
    want_lse = torch.logsumexp(s, 1)
    torch.testing.assert_close(lse, want_lse)
    torch.testing.assert_close(o, (torch.exp(s - want_lse[:, None])[..., None] * v).sum(1), rtol=1e-5, atol=1e-5)
    _opcheck(K.merge_states.default, (v, s, torch.bfloat16))


def test_mla_decode_op():
    g = torch.Generator().manual_seed(5)
    q_nope, q_pe = torch.randn(1, 2, 32, generator=g), torch.randn(1, 2, 16, generator=g)
    ckv, kpe = torch.randn(3, 4, 32, generator=g), torch.randn(3, 4, 16, generator=g)
    table, lens = torch.tensor([[2, 0]], dtype=torch.int32), torch.tensor([6], dtype=torch.int32)
    out = T.mla_decode(q_nope, q_pe, ckv, kpe, table, lens, scale=0.2, max_seq_len=6)
    c, r = torch.cat([ckv[2], ckv[0]])[:6], torch.cat([kpe[2], kpe[0]])[:6]
    p = torch.softmax(0.2 * (q_nope[0] @ c.T + q_pe[0] @ r.T), -1)
    torch.testing.assert_close(out[0], p @ c, rtol=1e-5, atol=1e-5)
    _opcheck(K.mla_decode.default, (q_nope, q_pe, ckv, kpe, table, lens, 0.2, None, 6))


def test_cast_op_bf16_and_fp8():
    x = torch.randn(3, 40) * 10
    assert torch.equal(T.cast(x, torch.bfloat16), x.to(torch.bfloat16))
    assert torch.equal(T.cast(x, torch.float8_e4m3fn).view(torch.uint8), x.to(torch.float8_e4m3fn).view(torch.uint8))
    back = T.cast(x.to(torch.bfloat16), torch.float32)  # a bf16 torch CPU tensor in: the CPU target reads it
    assert torch.equal(back, x.to(torch.bfloat16).float())
    _opcheck(K.cast.default, (x, torch.bfloat16, False))
    _opcheck(K.cast.default, (x, torch.float8_e5m2, True))


def test_mx_quantize_op_matches_numpy():
    x = torch.randn(4, 64)
    codes, scales = T.mx_quantize(x, "f8e4m3")
    nc, ns = ops.mx_quantize(x.numpy(), "f8e4m3", target="cpu")
    assert codes.dtype == torch.float8_e4m3fn and scales.dtype == torch.float8_e8m0fnu and scales.shape == (4, 2)
    assert np.array_equal(codes.view(torch.uint8).numpy(), nc.view(np.uint8))
    assert np.array_equal(scales.view(torch.uint8).numpy(), ns.view(np.uint8))
    _opcheck(K.mx_quantize.default, (x, "int8"))
    with pytest.raises(ValueError, match="fmt must be one of"):
        T.mx_quantize(x, "f4e2m1")


def test_scaled_matmul_op_on_the_cpu_emulation():
    g = torch.Generator().manual_seed(6)
    a = torch.randn(16, 32, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(32, 16, generator=g).to(torch.float8_e4m3fn)
    sa, sb = torch.tensor([0.5]), torch.tensor([2.0])
    got = T.scaled_matmul(a, b, sa, sb, out_dtype=torch.float32)
    torch.testing.assert_close(got, a.float() @ b.float(), rtol=1e-5, atol=1e-5)
    # not test_schema: it multiplies the inputs, which torch does not do to FP8 tensors on the CPU
    torch.library.opcheck(K.scaled_matmul.default, (a, b, sa, sb, None),
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))


def _block_fn(q, k, v, w, bias):
    """attention, then a projection with a fused bias + GELU epilogue (bshd, q (B, S, H, D))."""
    o = T.attention(q, k, v, causal=True)
    B, S, H, D = q.shape
    return T.matmul(o.reshape(B * S, H * D), w, "bias_gelu", x=bias)


def test_torch_compile_fullgraph_traces_the_ops():
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 16, 2, 16, generator=g) for _ in range(3))
    w, bias = torch.randn(32, 24, generator=g), torch.randn(24, generator=g)
    explained = torch._dynamo.explain(_block_fn)(q, k, v, w, bias)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    compiled = torch.compile(_block_fn, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, v, w, bias), _block_fn(q, k, v, w, bias))


def test_torch_op_of_a_users_kernel():
    mod = kc.compile("""
kernel axpb[T: type](x: ptr<T>, out: ptr<T>, a: f32, b: f32, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n { out[i] = T(a * f32(x[i]) + b); }
}""", target="cpu")
    op = kc.torch_op(mod.axpb, name="kc_tests::axpb", outputs=lambda x, a=1.0: [(x.shape, x.dtype)],
                     grid=lambda x, a: (-(-x.numel() // 64),), block=64,
                     args=lambda x, a, out: (x, out, a, 1.0, x.numel()), params={"T": "f32"})
    x = torch.randn(100)
    torch.testing.assert_close(op(x, 3.0), 3.0 * x + 1.0)
    assert torch.equal(torch.ops.kc_tests.axpb(x, 2.0)[0], op(x, 2.0))
    _opcheck(torch.ops.kc_tests.axpb.default, (x, 0.5))
    bad = kc.torch_op(mod.axpb, name="kc_tests::axpb_bad", outputs=lambda x: [(x.shape, x.dtype)],
                      grid=1, block=64, mutates=("x",))
    with pytest.raises(ValueError, match="returns nothing"):
        bad(x)


def _example():
    """examples/torch_op.py (a script of the checkout beside its _driver.py, not an installed module)."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        return importlib.import_module("torch_op")
    finally:
        sys.path.remove(str(ROOT / "examples"))


def test_torch_op_example_runs_on_the_cpu():
    example = _example()
    assert " ok on cpu" in example.run("cpu", n=1000)


# --- on a CUDA GPU ---------------------------------------------------------------------------------------


class _TransformerBlock(torch.nn.Module):
    """Pre-norm-free transformer block on kcompiler's operators: QKV projection, causal attention,
    output projection (residual fused as an epilogue), MLP (bias + GELU fused, then the residual)."""

    def __init__(self, dim=256, heads=4):
        super().__init__()
        g = torch.Generator().manual_seed(8)
        self.heads, self.dim = heads, dim
        init = lambda *s: torch.nn.Parameter(torch.randn(*s, generator=g) / math.sqrt(s[-1]), requires_grad=False)  # noqa: E731
        self.w_qkv, self.w_o = init(3 * dim, dim), init(dim, dim)
        self.w_up, self.w_down = init(4 * dim, dim), init(dim, 4 * dim)
        self.b_up = torch.nn.Parameter(torch.randn(4 * dim, generator=g) * 0.1, requires_grad=False)

    def forward(self, x):
        B, S, Dm = x.shape
        H = self.heads
        x2 = x.reshape(B * S, Dm)
        qkv = T.matmul(x2, self.w_qkv.T).view(B, S, 3, H, Dm // H)
        o = T.attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
        h = T.matmul(o.reshape(B * S, Dm), self.w_o.T, "residual", y=x2)
        u = T.matmul(h, self.w_up.T, "bias_gelu", x=self.b_up)
        return T.matmul(u, self.w_down.T, "residual", y=h).view(B, S, Dm)

    def reference(self, x):  # torch's own ops, f32
        B, S, Dm = x.shape
        H = self.heads
        f = {n: p.float() for n, p in self.named_parameters()}
        x2 = x.float().reshape(B * S, Dm)
        qkv = (x2 @ f["w_qkv"].T).view(B, S, 3, H, Dm // H)
        o = _sdpa(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], True).reshape(B * S, Dm)
        h = o @ f["w_o"].T + x2
        u = torch.nn.functional.gelu(h @ f["w_up"].T + f["b_up"])
        return (u @ f["w_down"].T + h).view(B, S, Dm)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_transformer_block_compiled_and_graph_replayed_equal_eager(backend):
    torch.manual_seed(0)
    blk = _TransformerBlock().to("cuda", torch.bfloat16)
    x = torch.randn(2, 128, 256, device="cuda", dtype=torch.bfloat16)
    eager = blk(x)  # also warms up: compiles, loads and tunes the kernels
    torch.testing.assert_close(eager.float(), blk.reference(x), rtol=3e-2, atol=3e-2)
    compiled = torch.compile(blk, fullgraph=True, backend=backend)
    assert torch.equal(compiled(x), eager)
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # torch's warm-up before a capture, on a side stream
        for _ in range(2):
            compiled(static_x)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = compiled(static_x)
    x2 = torch.randn_like(x)
    static_x.copy_(x2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, blk(x2))
    static_x.copy_(x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_y, eager)


@pytest.mark.gpu
def test_ops_opcheck_on_cuda():
    g = torch.Generator(device="cuda").manual_seed(9)
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    _opcheck(K.matmul.default, (a, a, "gelu", None, None, 1.0, None, None))
    q = torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    _opcheck(K.attention.default, (q, q, q, True, None, None, None, None, "bshd"))


@pytest.mark.gpu
def test_torch_op_example_runs_on_cuda():
    example = _example()
    assert " ok on cuda" in example.run("cuda", n=100_003)
