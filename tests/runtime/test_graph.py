"""kc.graph(): capture a sequence of launches, replay it. On the CPU target (here) and on CUDA
(tests marked gpu: kc.graph's stream capture, launches inside torch.cuda.graph, host arrays
refused during a capture). Each replay is compared with the same launches run eagerly."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.runtime.device import LaunchError

SRC = """
kernel axpy(y: ptr<f32>, x: ptr<f32>, a: f32, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n { y[i] = a * x[i] + y[i]; }
}
kernel square(out: ptr<f32>, y: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n { out[i] = y[i] * y[i]; }
}
kernel bump(x: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n { x[i] = x[i] + 1.0; }
}
"""


def _three(m, y, x, out, n, **kw):
    g = ((n + 63) // 64,)
    m.axpy[g, 64](y, x, 0.5, n, **kw)
    m.square[g, 64](out, y, n, **kw)
    m.bump[g, 64](x, n, **kw)


def test_cpu_graph_replays_three_launches_like_eager():
    m = kc.compile(SRC, target="cpu")
    n = 1000
    rng = np.random.default_rng(0)
    x0, y0 = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    # eager, twice
    xe, ye, oe = x0.copy(), y0.copy(), np.zeros(n, np.float32)
    _three(m, ye, xe, oe, n)
    _three(m, ye, xe, oe, n)
    # captured once (nothing runs during the capture), replayed twice
    x, y, out = x0.copy(), y0.copy(), np.zeros(n, np.float32)
    _three(m, y, x, out, n)  # warm: the fast launchers exist before the capture
    x[:], y[:], out[:] = x0, y0, 0
    with kc.graph(m) as g:
        _three(m, y, x, out, n)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(out, 0)
    g.replay()
    g.replay()
    np.testing.assert_array_equal(x, xe)
    np.testing.assert_array_equal(y, ye)
    np.testing.assert_array_equal(out, oe)
    # new inputs written into the captured arrays are what the next replay reads
    x[:] = 2.0
    y[:] = 1.0
    g.replay()
    np.testing.assert_array_equal(y, np.float32(2.0))
    np.testing.assert_array_equal(out, np.float32(4.0))
    g.close()
    with pytest.raises(LaunchError, match="nothing to replay"):
        g.replay()


def test_cpu_graph_errors():
    m = kc.compile(SRC, target="cpu")
    g = kc.graph("cpu")
    with pytest.raises(LaunchError, match="capture launches first"):
        g.replay()
    x = np.zeros(8, np.float32)
    with pytest.raises(ZeroDivisionError):
        with g:
            m.bump[1, 8](x, 8)
            1 / 0
    with pytest.raises(LaunchError, match="capture failed"):
        g.replay()
    np.testing.assert_array_equal(x, 0)  # dropped, never run
    with pytest.raises(LaunchError, match="already been captured"):
        with g:
            pass
    m.bump[1, 8](x, 8)  # no capture left open on this thread
    np.testing.assert_array_equal(x, 1)
    mb = kc.compile(SRC, target="cpu", check_bounds=True)
    with pytest.raises(LaunchError, match="check_bounds"):
        with kc.graph(mb):
            mb.bump[1, 8](x, 8)
    with pytest.raises(TypeError, match="expected a Device"):
        kc.graph(42)


def _cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


@pytest.mark.gpu
def test_cuda_graph_replays_three_launches_like_eager():
    torch = _cuda()
    m = kc.compile(SRC, target="cuda")
    n = 5000
    gen = torch.Generator(device="cuda").manual_seed(0)
    x0 = torch.randn(n, device="cuda", generator=gen)
    y0 = torch.randn(n, device="cuda", generator=gen)
    xe, ye, oe = x0.clone(), y0.clone(), torch.zeros(n, device="cuda")
    s = torch.cuda.current_stream()
    _three(m, ye, xe, oe, n, stream=s)
    _three(m, ye, xe, oe, n, stream=s)
    x, y, out = x0.clone(), y0.clone(), torch.zeros(n, device="cuda")
    torch.cuda.synchronize()
    with kc.graph(m) as g:  # launches with stream=None go to the capturing stream
        _three(m, y, x, out, n)
    torch.cuda.synchronize()
    assert torch.equal(x, x0) and torch.equal(out, torch.zeros_like(out))  # captured, not run
    g.replay(stream=s)
    g.replay(stream=s)
    torch.cuda.synchronize()
    assert torch.equal(x, xe) and torch.equal(y, ye) and torch.equal(out, oe)
    g.close()


@pytest.mark.gpu
def test_launches_under_torch_cuda_graph():
    torch = _cuda()
    m = kc.compile(SRC, target="cuda")
    n = 3000
    x0 = torch.randn(n, device="cuda")
    y0 = torch.randn(n, device="cuda")
    xe, ye, oe = x0.clone(), y0.clone(), torch.zeros(n, device="cuda")
    for _ in range(2):
        _three(m, ye, xe, oe, n)
    x, y, out = x0.clone(), y0.clone(), torch.zeros(n, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (fast launchers made) outside the capture
        _three(m, y.clone(), x.clone(), out.clone(), n, stream=side)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    tg = torch.cuda.CUDAGraph()
    with torch.cuda.graph(tg):
        _three(m, y, x, out, n, stream=torch.cuda.current_stream())
    tg.replay()
    tg.replay()
    torch.cuda.synchronize()
    assert torch.equal(x, xe) and torch.equal(y, ye) and torch.equal(out, oe)


@pytest.mark.gpu
def test_host_arrays_are_refused_during_capture():
    torch = _cuda()
    m = kc.compile(SRC, target="cuda")
    x = np.zeros(64, np.float32)
    t = torch.zeros(64, device="cuda")
    m.bump[1, 64](t, 64)  # the kernel loaded before the captures
    x[:] = -1
    with pytest.raises(LaunchError, match="parameter 'x' is a host array.*graph is being captured"):
        with kc.graph(m):
            m.bump[1, 64](x, 64)
    np.testing.assert_array_equal(x, -1)
    x[:] = 0
    tg = torch.cuda.CUDAGraph()
    with pytest.raises(LaunchError, match="host array"):
        with torch.cuda.graph(tg):
            m.bump[1, 64](t, 64, stream=torch.cuda.current_stream())
            m.bump[1, 64](x, 64, stream=torch.cuda.current_stream())
    m.bump[1, 64](x, 64)  # after the capture, the copy path works again
    np.testing.assert_array_equal(x, 1)
