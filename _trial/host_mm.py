import time, cProfile, pstats, io, torch
from kcompiler import ops
def per_call(fn, n=300):
    for _ in range(50): fn()
    torch.cuda.synchronize()
    t=time.perf_counter()
    for _ in range(n): fn()
    t1=time.perf_counter()
    torch.cuda.synchronize()
    return (t1-t)/n*1e6, (time.perf_counter()-t)/n*1e6
for (M,N,K) in [(16,256,256),(128,4096,4096)]:
    a=torch.randn(M,K,device="cuda",dtype=torch.bfloat16); b=torch.randn(N,K,device="cuda",dtype=torch.bfloat16).T
    out=torch.empty(M,N,device="cuda",dtype=torch.bfloat16)
    for name,fn in [("ops.matmul",lambda: ops.matmul(a,b)),("ops.matmul out",lambda: ops.matmul(a,b,out=out)),
                    ("torch.matmul",lambda: torch.matmul(a,b)),("torch.mm out",lambda: torch.mm(a,b,out=out))]:
        h,w=per_call(fn)
        print(f"{M}x{N}x{K} {name:16s} host {h:6.1f} us/call, wall {w:6.1f}")
a=torch.randn(16,256,device="cuda",dtype=torch.bfloat16); b=torch.randn(256,256,device="cuda",dtype=torch.bfloat16).T
out=torch.empty(16,256,device="cuda",dtype=torch.bfloat16)
pr=cProfile.Profile(); pr.enable()
for _ in range(3000): ops.matmul(a,b,out=out)
pr.disable(); torch.cuda.synchronize()
s=io.StringIO(); pstats.Stats(pr,stream=s).sort_stats("tottime").print_stats(18); print(s.getvalue()[:3000])
