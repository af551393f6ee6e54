"""kcompiler.ops's norms, rotary embedding and gated activations on a CUDA GPU against torch eager and
torch.compile'd versions of the same functions, in one run: GB/s of the bytes each op must move, and
that as a % of a torch copy of the same bytes (copy_ of bytes / 2 into another buffer) timed the same
way in the same run. One table per op; hidden 2048-8192, tokens 1-8192, bf16 by default.

    python benchmarks/bench_norms.py [--ops rms_norm,rms_norm_residual,layer_norm,rotary,silu_and_mul,
        gelu_and_mul] [--hidden 2048,4096,8192] [--tokens 1,16,128,1024,8192] [--dtype bf16]
        [--timing graph|events] [--no-compile]
    python benchmarks/bench_norms.py --fused [--quick]   # SwiGLU and RMSNorm fused into ops.matmul (< 2 min)
    python benchmarks/bench_norms.py --variants [--ops ...] [--hidden ...] [--tokens ...]   # launch variants
    python benchmarks/bench_norms.py --floor [--hidden ...] [--tokens 1,16,128]   # what a small call costs

--variants: kcompiler's launch variants (kcompiler/ops/norms_plans.py: NORM_VARIANTS for rms_norm and
rms_norm_residual, ACT_VARIANTS for silu_and_mul / gelu_and_mul, ROTARY_VARIANTS for rotary) side by
side, each forced over the whole table, as % of the torch copy of the same bytes; the first column is
the current default (the table's choice), the last the best variant. No torch versions, no compile.

Timing: 'graph' (default) captures 20 calls of each variant in a torch.cuda.CUDAGraph and times a
replay with CUDA events (launch overhead out for all alike; a small working set stays in the 50 MB L2
between calls, for the copy too); 'events' is triton.testing.do_bench (L2 flushed before each call,
the host's launch time included). Each kcompiler result is checked against torch eager first.

Bytes counted (s: element size): rms_norm 2 T n s + n s (x, out, weight); rms_norm_residual 4 T n s + n s
(x, residual read and written, out); layer_norm 2 T n s + 2 n s; rotary (Llama's heads: n / 128 query
heads, a quarter as many key heads, D = R = 128) q and k read and written, plus a cache row (f32) a token;
silu_and_mul / gelu_and_mul 3 T n s (x of 2 n a row, out of n).

--fused: the matmul epilogues (kcompiler.ops.matmul_fused) against the same matmul followed by the separate
kernel, and torch eager: SwiGLU (F.silu(x @ Wg.T) * (x @ Wu.T)) for M 1-4096 with the intermediate size N
14336 or 1536 and K 4096; RMSNorm of the output rows with the residual added and written back at N 128 and
256 (a row must fit one tile), ms a call.

--floor: where the time of a small call goes (1-128 tokens), in µs a call from the same graph timing: the
torch copy the tables divide by (``copy_`` of contiguous same-type tensors is a cudaMemcpyAsync: a
memcpy node in the graph), torch's ``zero_`` (a fill kernel: stores only), an empty kcompiler kernel,
kcompiler's own copy kernel of the same bytes (16-byte vectors, the loads then the stores: the least a
kernel that reads before it writes costs), the same copy with one block reduction between the loads
and the stores (RMSNorm's shape without the weight), ops.rms_norm, and torch's rms_norm.

torch.compile: one dynamic=True compile an op (mark_dynamic on the token dimension), so a sweep does not
recompile a kernel a shape; --no-compile leaves it out.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kcompiler import ops  # noqa: E402

EPS = 1e-6


# --- the torch versions (eager; the same functions are torch.compile'd) ------------------------------

def t_rms_norm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, EPS)


def t_rms_norm_residual(x, r, w):
    h = x + r
    r.copy_(h)
    return F.rms_norm(h, (x.shape[-1],), w, EPS)


def t_layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, EPS)


def t_rotary(q, k, pos, cache):
    """vLLM's forward_native (NeoX style) in place on q (T, HQ, D) and k (T, HK, D)."""
    cs = cache.index_select(0, pos)
    cos, sin = cs.chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
    for x in (q, k):
        x1, x2 = x.float().chunk(2, dim=-1)
        x.copy_(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1))
    return q, k


def t_silu_and_mul(x):
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def t_gelu_and_mul(x):
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d]) * x[..., d:]


# --- one op's inputs and its three variants ----------------------------------------------------------

def case(op, n, t, dt):
    """(bytes moved, {label: fn()}, check()) for op at hidden n, t tokens."""
    s = torch.finfo(dt).bits // 8
    dev = "cuda"
    if op.startswith("rms_norm") or op == "layer_norm":
        x = torch.randn(t, n, device=dev, dtype=dt)
        w = torch.randn(n, device=dev, dtype=dt)
        if op == "rms_norm":
            return 2 * t * n * s + n * s, {"kc": lambda: ops.rms_norm(x, w, EPS),
                                            "eager": lambda: t_rms_norm(x, w),
                                            "compiled": lambda: C["rms_norm"](x, w)}, (x, w)
        if op == "layer_norm":
            b = torch.randn(n, device=dev, dtype=dt)
            return 2 * t * n * s + 2 * n * s, {"kc": lambda: ops.layer_norm(x, w, b, EPS),
                                                "eager": lambda: t_layer_norm(x, w, b),
                                                "compiled": lambda: C["layer_norm"](x, w, b)}, (x, w, b)
        r = torch.randn(t, n, device=dev, dtype=dt)
        return 4 * t * n * s + n * s, {"kc": lambda: ops.rms_norm(x, w, EPS, residual=r),
                                        "eager": lambda: t_rms_norm_residual(x, r, w),
                                        "compiled": lambda: C["rms_norm_residual"](x, r, w)}, (x, r, w)
    if op == "rotary":
        hq, d = n // 128, 128
        hk = max(1, hq // 4)
        q = torch.randn(t, hq, d, device=dev, dtype=dt)
        k = torch.randn(t, hk, d, device=dev, dtype=dt)
        pos = torch.randint(0, 8192, (t,), device=dev)
        inv = 10000.0 ** (-torch.arange(0, d, 2, device=dev, dtype=torch.float64) / d)
        ang = torch.arange(8192, device=dev, dtype=torch.float64)[:, None] * inv[None]
        cache = torch.cat((ang.cos(), ang.sin()), -1).float()
        return 2 * t * (hq + hk) * d * s + t * (d * 4 + 8), {
            "kc": lambda: ops.rotary_embedding(q, k, pos, cache),
            "eager": lambda: t_rotary(q, k, pos, cache),
            "compiled": lambda: C["rotary"](q, k, pos, cache)}, (q, k, pos, cache)
    x = torch.randn(t, 2 * n, device=dev, dtype=dt)
    kc = ops.silu_and_mul if op == "silu_and_mul" else ops.gelu_and_mul
    eager = t_silu_and_mul if op == "silu_and_mul" else t_gelu_and_mul
    return 3 * t * n * s, {"kc": lambda: kc(x), "eager": lambda: eager(x), "compiled": lambda: C[op](x)}, (x,)


C = {}


def compiled(op):
    fn = {"rms_norm": t_rms_norm, "rms_norm_residual": t_rms_norm_residual, "layer_norm": t_layer_norm,
          "rotary": t_rotary, "silu_and_mul": t_silu_and_mul, "gelu_and_mul": t_gelu_and_mul}[op]
    return torch.compile(fn, dynamic=True)


def time_ms(fn, mode, reps=20):
    """Milliseconds a call of fn: a CUDA graph of reps calls replayed (mode 'graph'), or do_bench."""
    if mode == "events":
        from triton.testing import do_bench
        return do_bench(fn)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) / reps)
    return best


def check(op, inputs, dt):
    """kc's result against torch eager's on fresh copies of the inputs."""
    a = [x.clone() for x in inputs]
    b = [x.clone() for x in inputs]
    tol = dict(rtol=2e-2, atol=2e-2) if dt != torch.float32 else dict(rtol=1e-4, atol=1e-4)
    if op == "rms_norm":
        torch.testing.assert_close(ops.rms_norm(a[0], a[1], EPS), t_rms_norm(*b), **tol)
    elif op == "rms_norm_residual":
        torch.testing.assert_close(ops.rms_norm(a[0], a[2], EPS, residual=a[1]), t_rms_norm_residual(*b), **tol)
        torch.testing.assert_close(a[1], b[1], **tol)
    elif op == "layer_norm":
        torch.testing.assert_close(ops.layer_norm(*a, EPS), t_layer_norm(*b), **tol)
    elif op == "rotary":
        ops.rotary_embedding(*a)
        t_rotary(*b)
        torch.testing.assert_close(a[0], b[0], **tol)
        torch.testing.assert_close(a[1], b[1], **tol)
    else:
        kc = ops.silu_and_mul if op == "silu_and_mul" else ops.gelu_and_mul
        eager = t_silu_and_mul if op == "silu_and_mul" else t_gelu_and_mul
        torch.testing.assert_close(kc(a[0]), eager(b[0]), **tol)


# --- fused into the matmul: gated activations and RMSNorm as ops.matmul epilogues ---------------------

def fused_section(args, dt):
    """ops.matmul + a separate ops.silu_and_mul (or ops.rms_norm) against the fused epilogue
    (ops.matmul(x, w_gate_up.T, epilogue='silu_and_mul'), ops.rms_norm_epilogue), torch eager beside:
    ms a call and the fused variant's speedup over the separate pair."""
    ms = [1, 128, 4096] if args.quick else [1, 16, 128, 1024, 4096]
    print("\nSwiGLU: x @ w_gate_up.T then silu_and_mul (separate) vs the matmul epilogue (fused); ms")
    print(f"{'N':>6} {'K':>5} {'M':>5} {'separate':>9} {'fused':>9} {'eager':>9} {'speedup':>8} {'vs eager':>8}")
    for n, k in ((14336, 4096), (1536, 4096)):
        w = torch.randn(2 * n, k, device="cuda", dtype=dt) / k ** 0.5
        wg, wu = w[:n], w[n:]
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=dt)
            h = torch.empty(m, 2 * n, device="cuda", dtype=dt)
            o = torch.empty(m, n, device="cuda", dtype=dt)

            def separate():
                ops.matmul(x, w.T, out=h)
                return ops.silu_and_mul(h, out=o)

            def fused():
                return ops.matmul(x, w.T, out=o, epilogue="silu_and_mul")

            def eager():
                return F.silu(x @ wg.T) * (x @ wu.T)

            ref = eager().float()
            for f in (separate, fused):
                torch.testing.assert_close(f().float(), ref, rtol=3e-2, atol=3e-2)
            t = [time_ms(f, args.timing) for f in (separate, fused, eager)]
            print(f"{n:>6} {k:>5} {m:>5} {t[0]:>9.4f} {t[1]:>9.4f} {t[2]:>9.4f} {t[0] / t[1]:>7.2f}x "
                  f"{t[2] / t[1]:>7.2f}x", flush=True)
    print("\nRMSNorm of the output rows (+ residual, written back): matmul then ops.rms_norm (separate) vs the "
          "matmul epilogue (fused); ms")
    print(f"{'N':>6} {'K':>5} {'M':>5} {'separate':>9} {'fused':>9} {'eager':>9} {'speedup':>8} {'vs eager':>8}")
    for n, k in ((128, 4096), (256, 4096)):
        w = torch.randn(n, k, device="cuda", dtype=dt) / k ** 0.5
        nw = torch.rand(n, device="cuda", dtype=dt) + 0.5
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=dt)
            r = torch.randn(m, n, device="cuda", dtype=dt)
            h = torch.empty(m, n, device="cuda", dtype=dt)
            o = torch.empty(m, n, device="cuda", dtype=dt)
            ep = ops.rms_norm_epilogue(nw, EPS, r, write_residual=True)

            def separate():
                ops.matmul(x, w.T, out=h)
                return ops.rms_norm(h, nw, EPS, residual=r, out=o)

            def fused():
                return ops.matmul(x, w.T, out=o, epilogue=ep)

            def eager():
                return t_rms_norm_residual(x @ w.T, r, nw)

            r0 = r.clone()
            ref = eager().float()
            for f in (separate, fused):
                r.copy_(r0)
                torch.testing.assert_close(f().float(), ref, rtol=3e-2, atol=3e-2)
            t = [time_ms(f, args.timing) for f in (separate, fused, eager)]
            print(f"{n:>6} {k:>5} {m:>5} {t[0]:>9.4f} {t[1]:>9.4f} {t[2]:>9.4f} {t[0] / t[1]:>7.2f}x "
                  f"{t[2] / t[1]:>7.2f}x", flush=True)


def variants_section(args, dt):
    """Each op's launch variants against the copy of the same bytes, one row a shape (module docstring)."""
    from kcompiler.ops import norms_plans as P
    tables = {"rms_norm": ("NORM_TILES", P.NORM_VARIANTS), "rms_norm_residual": ("NORM_TILES", P.NORM_VARIANTS),
              "layer_norm": ("NORM_TILES", P.NORM_VARIANTS), "silu_and_mul": ("ACT_TILES", P.ACT_VARIANTS),
              "gelu_and_mul": ("ACT_TILES", P.ACT_VARIANTS), "rotary": ("ROTARY_TILES", P.ROTARY_VARIANTS)}
    for op in args.ops.split(","):
        table, names = tables[op]
        default = getattr(P, table)
        cols = ["default"] + list(names)
        print(f"\n{op} variants: % of a torch copy of the same bytes (copy in GB/s)", flush=True)
        print(f"{'hidden':>6} {'tokens':>6} {'copy':>7} " + " ".join(f"{c:>7}" for c in cols) + "   best")
        for n in map(int, args.hidden.split(",")):
            for t in map(int, args.tokens.split(",")):
                nbytes, runs, inputs = case(op, n, t, dt)
                src = torch.empty(nbytes // 2 // 2, device="cuda", dtype=torch.int16)
                dst = torch.empty_like(src)
                copy = nbytes / time_ms(lambda: dst.copy_(src), args.timing) / 1e6
                row, best = f"{n:>6} {t:>6} {copy:>7.0f} ", (0.0, "")
                for c in cols:
                    setattr(P, table, default if c == "default" else {(P.ANY, P.ANY): c})
                    P.clear_plans()
                    try:
                        if c != "default":
                            check(op, inputs, dt)
                        pct = 100 * nbytes / time_ms(runs["kc"], args.timing) / 1e6 / copy
                        row += f" {pct:>6.0f}%"
                        if c != "default" and pct > best[0]:
                            best = (pct, c)
                    except Exception as e:  # a variant that fails is reported, not fatal
                        row += f" {'ERR':>7}"
                        print(f"  {op} {c} {n}x{t}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                setattr(P, table, default)
                P.clear_plans()
                print(row + f"   {best[1]}", flush=True)


FLOOR_SRC = """
kernel empty(x: ptr<i16>) {
}

// y = x, 16-byte vectors (8 i16), one a thread
kernel copy8(x: ptr<i16>, y: ptr<i16>, n: i32) {
    let i = (i32(block_id.x) * i32(block_dim.x) + i32(thread_id.x)) * 8;
    if i < n {
        store(y + i, load[vec<i16, 8>](x + i));
    }
}

// a row a block: y = x * (1 / sqrt(mean(x^2) + 1e-6)), one 16-byte vector a thread (RMSNorm's shape)
kernel reduce8(x: ptr<bf16>, y: ptr<bf16>, n: i32) {
    shared part: [f32; 32];
    let i = i32(thread_id.x) * 8;
    let row = i64(block_id.x) * i64(n);
    var v = vec<bf16, 8>(bf16(0.0));
    if i < n {
        v = load[vec<bf16, 8>](x + row + i);
    }
    let f = vec<f32, 8>(v);
    var s: f32 = 0.0;
    for k in comptime range(0, 8) {
        s = fma(f[k], f[k], s);
    }
    for k in comptime range(0, 5) {
        s += shuffle_xor(s, 16 >> k);
    }
    if lane_id == 0 {
        part[i32(warp_id)] = s;
    }
    barrier();
    var r: f32 = 0.0;
    if i32(lane_id) < i32(block_dim.x) / 32 {
        r = part[i32(lane_id)];
    }
    for k in comptime range(0, 5) {
        r += shuffle_xor(r, 16 >> k);
    }
    if i < n {
        store(y + row + i, vec<bf16, 8>(f * rsqrt(r / f32(n) + 1e-6)));
    }
}
"""


def floor_section(args):
    """µs a call of the pieces of a small RMSNorm call, bf16 (module docstring, --floor)."""
    import kcompiler as kc
    mod = kc.compile(FLOOR_SRC, target="cuda", path="bench_norms_floor.kc")
    cur = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731  (launches must join the capture)
    print("\nµs a call (graph of 20): memcpy = torch copy_ of RMSNorm's bytes; kernels below")
    cols = ["memcpy", "zero_", "kc empty", "kc copy", "kc copy+reduce", "ops.rms_norm", "torch rms_norm"]
    print(f"{'hidden':>6} {'tokens':>6} " + " ".join(f"{c:>14}" for c in cols))
    for n in map(int, args.hidden.split(",")):
        for t in map(int, args.tokens.split(",")):
            x = torch.randn(t, n, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
            o = torch.empty_like(x)
            half = (2 * t * n + n) // 2  # RMSNorm's bytes (x, out, weight) / 2, as i16: copied once
            src = torch.zeros(half, device="cuda", dtype=torch.int16)
            dst = torch.empty_like(src)
            e = mod.empty[1, 64].bind()
            c = mod.copy8[-(-half // 8 // 256), 256].bind()
            r = mod.reduce8[t, -(-n // 8 // 32) * 32].bind()
            runs = [lambda: dst.copy_(src), lambda: dst.zero_(), lambda: e(src, stream=cur()),
                    lambda: c(src, dst, half, stream=cur()), lambda: r(x, o, n, stream=cur()),
                    lambda: ops.rms_norm(x, w, EPS, out=o),
                    lambda: F.rms_norm(x, (n,), w, EPS)]
            c(src, dst, half, stream=cur())
            torch.cuda.synchronize()
            assert torch.equal(src, dst), "the copy kernel"
            if n // 8 <= 1024:
                ref = (x.float() * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + 1e-6))
                r(x, o, n, stream=cur())
                torch.cuda.synchronize()
                assert torch.allclose(o.float(), ref, rtol=2e-2, atol=2e-2), "the reduction kernel"
            else:
                runs[4] = None
            row = f"{n:>6} {t:>6} "
            for fn in runs:
                row += f" {1000 * time_ms(fn, args.timing):>13.2f}" if fn else f" {'-':>13}"
            print(row, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fused", action="store_true",
                    help="only the section of gated activations and RMSNorm fused into the matmul")
    ap.add_argument("--variants", action="store_true",
                    help="kcompiler's launch variants of each op side by side (kcompiler/ops/norms_plans.py)")
    ap.add_argument("--floor", action="store_true",
                    help="what a small call's time is made of: memcpy, fill, empty and copy kernels, RMSNorm")
    ap.add_argument("--quick", action="store_true", help="fewer sizes (M 1, 128, 4096 in the fused section)")
    ap.add_argument("--ops", default="rms_norm,rms_norm_residual,layer_norm,rotary,silu_and_mul,gelu_and_mul")
    ap.add_argument("--hidden", default="2048,4096,8192")
    ap.add_argument("--tokens", default="1,16,128,1024,8192")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    ap.add_argument("--timing", default="graph", choices=["graph", "events"])
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    torch._dynamo.config.cache_size_limit = 64
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}, timing {args.timing}")
    if args.fused:
        fused_section(args, dt)
        return
    if args.variants:
        variants_section(args, dt)
        return
    if args.floor:
        floor_section(args)
        return
    for op in args.ops.split(","):
        if not args.no_compile:
            C[op] = compiled(op)
        print(f"\n{op}: GB/s (% of a torch copy of the same bytes)")
        cols = ["kc", "eager"] + ([] if args.no_compile else ["compiled"])
        print(f"{'hidden':>6} {'tokens':>6} {'copy':>8} " + " ".join(f"{c:>16}" for c in cols))
        for n in map(int, args.hidden.split(",")):
            for t in map(int, args.tokens.split(",")):
                nbytes, runs, inputs = case(op, n, t, dt)
                check(op, inputs, dt)
                src = torch.empty(nbytes // 2 // 2, device="cuda", dtype=torch.int16)
                dst = torch.empty_like(src)
                copy = nbytes / time_ms(lambda: dst.copy_(src), args.timing) / 1e6
                row = f"{n:>6} {t:>6} {copy:>8.1f} "
                for c in cols:
                    gbs = nbytes / time_ms(runs[c], args.timing) / 1e6
                    row += f" {gbs:>7.1f} ({100 * gbs / copy:>4.0f}%)"
                print(row, flush=True)


if __name__ == "__main__":
    main()
