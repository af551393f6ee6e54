"""Time printf through the hostcall protocol on a CUDA GPU (printf="hostcall"), for a number of
threads each printing one line, with the buffer in managed or pinned memory (KC_HOSTCALL_MEMORY),
and check that every line arrives once. Prints one line: memory, threads, seconds, lines ok.

    python benchmarks/hostcall_gpu.py N
"""
import io
import os
import sys
import time
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kcompiler as kc  # noqa: E402
from kcompiler.runtime.cuda import CudaDevice  # noqa: E402

SRC = """
kernel every(n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        printf("line %d\\n", i);
    }
}
"""

n = int(sys.argv[1])
m = kc.compile(SRC, target="cuda", target_options={"printf": "hostcall"})
m.every.specialize(n)
dev = CudaDevice.get(0)
out = io.StringIO()
t = time.perf_counter()
with redirect_stdout(out):
    m.every[(n + 255) // 256, 256](n)
    dev.synchronize()
dt = time.perf_counter() - t
lines = out.getvalue().splitlines()
ids = sorted(int(x.split()[1]) for x in lines if x.startswith("line "))
print(f"{os.environ.get('KC_HOSTCALL_MEMORY', 'managed')} threads={n} seconds={dt:.2f} "
      f"lines_ok={ids == list(range(n))} lines={len(lines)} distinct={len(set(ids))} "
      f"other={[x for x in lines if not x.startswith('line ')][:3]}", file=sys.stderr)
