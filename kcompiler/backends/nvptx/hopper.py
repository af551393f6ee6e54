"""The registry's lowering of NVIDIA's Hopper intrinsics (intrinsics.py: ``nvptx.wgmma.*``,
``nvptx.tma.load``, ``nvptx.tma.bulk_load``, ``nvptx.tma.store*``, ``nvptx.mbarrier.*``, ``nvptx.setmaxnreg``,
``nvptx.fence.proxy_async``, ``nvptx.cluster.*``, ``nvptx.tma.load_multicast``) to the PTX of wgmma.py, tma.py and cluster.py.
Each needs its feature (``wgmma``, ``tma``, ``mbarrier``, ``cluster``, ``setmaxnreg``: sm_90, wgmma
and setmaxnreg sm_90a); the frontend refuses them first, with the call's
location, and this is the backstop for IR built directly."""
from __future__ import annotations

from llvmlite import ir as ll

from ...ir.intrinsics import get
from ..errors import UnsupportedOnTarget
from ..llvm.lower import LoweringContext
from . import cluster, tma, wgmma

_I32 = ll.IntType(32)


def lower(target, ctx: LoweringContext, op, args: list[ll.Value]) -> ll.Value | None:
    """Lower one Hopper intrinsic op on an NVPTX target (module docstring)."""
    name, at = op.attrs["intrinsic"].removeprefix("nvptx."), op.attrs
    b = ctx.b
    need = get(op.attrs["intrinsic"]).feature
    if not target.has(need):
        raise UnsupportedOnTarget(f"{name} needs {'sm_90' if need in ('tma', 'mbarrier', 'cluster') else 'sm_90a'}, "
                                  f"not {target.arch}")
    if name == "wgmma.mma_async":
        acc = [b.extract_element(args[2], ll.Constant(_I32, k)) for k in range(at["n"] // 2)]
        d = wgmma.wgmma(ctx, at["n"], at["a_type"], at["b_type"], args[0], args[1], acc, args[3],
                        bool(at["trans_b"]))
        out: ll.Value = ll.Constant(args[2].type, ll.Undefined)
        for k, x in enumerate(d):
            out = b.insert_element(out, x, ll.Constant(_I32, k))
        return out
    if name == "wgmma.desc":
        return wgmma.wgmma_desc(ctx, args[0], at["swizzle"], at["lbo"], at["sbo"])
    if name == "tma.load":
        # TMA writes whole swizzle periods: the kernel's dynamic shared memory starts 1024-aligned
        gv = target.dynamic_shared(ctx)
        gv.align = max(gv.align or 0, tma.SHARED_ALIGN)
        tma.tma_load(ctx, args[0], args[1], args[2], args[3:])
        return None
    if name == "tma.bulk_load":
        tma.bulk_load(ctx, *args)
        return None
    if name == "tma.store":
        gv = target.dynamic_shared(ctx)
        gv.align = max(gv.align or 0, tma.SHARED_ALIGN)
        tma.tma_store(ctx, args[0], args[1], args[2:])
        return None
    if name == "tma.load_multicast":
        gv = target.dynamic_shared(ctx)
        gv.align = max(gv.align or 0, tma.SHARED_ALIGN)
        cluster.tma_load_multicast(ctx, args[0], args[1], args[2], args[3], args[4:])
        return None
    if name == "cluster.ctarank":
        return cluster.cluster_ctarank(ctx)
    if name == "mbarrier.try_wait":
        return b.icmp_unsigned("!=", tma.mbarrier_try_wait(ctx, *args), ll.Constant(_I32, 0))
    simple = {"wgmma.fence": lambda: wgmma.wgmma_fence(ctx),
              "wgmma.commit_group": lambda: wgmma.wgmma_commit(ctx),
              "wgmma.wait_group": lambda: wgmma.wgmma_wait(ctx, at["n"]),
              "setmaxnreg": lambda: wgmma.setmaxnreg(ctx, at["n"], bool(at["increase"])),
              "mbarrier.init": lambda: tma.mbarrier_init(ctx, *args),
              "mbarrier.arrive": lambda: tma.mbarrier_arrive(ctx, *args),
              "mbarrier.arrive_expect_tx": lambda: tma.mbarrier_arrive_expect_tx(ctx, *args),
              "mbarrier.wait": lambda: tma.mbarrier_wait(ctx, *args),
              "fence.proxy_async": lambda: tma.fence_proxy_async(ctx),
              "tma.store_commit": lambda: tma.bulk_commit(ctx),
              "tma.store_wait": lambda: tma.bulk_wait(ctx, at["n"], bool(at["read"])),
              "cluster.arrive": lambda: cluster.cluster_arrive(ctx),
              "cluster.wait": lambda: cluster.cluster_wait(ctx),
              "mbarrier.arrive_cluster": lambda: cluster.mbarrier_arrive_cluster(ctx, *args)}
    simple[name]()
    return None


__all__ = ["lower"]
