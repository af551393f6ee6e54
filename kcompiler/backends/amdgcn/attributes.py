"""The ``amdgpu-no-*`` function attributes: which of the runtime's inputs a kernel does not use.

A kernel's code object asks the HIP runtime for every input its function does not carry an
``amdgpu-no-*`` attribute for: SGPRs (dispatch pointer, queue pointer, workgroup ids...), VGPRs
(workitem ids y and z) and the hidden kernel arguments (``hidden_hostcall_buffer``,
``hidden_heap_v1``, ``hidden_multigrid_sync_arg``, ``hidden_default_queue``,
``hidden_completion_action``, ``hidden_queue_ptr``). LLVM's AMDGPUAttributor infers the attributes,
but only in the optimisation pipeline: at ``-O 0`` it does not run, and every kernel asked for all of
them, so the runtime made a hostcall buffer, a listener thread and a heap for a kernel that never
prints, and refused it on a host without PCIe atomics ("Pcie atomics not enabled, hostcall not
supported", clr rocclr/device/rocm/rocvirtual.cpp). kcompiler emits every read of these inputs
itself, so it states the attributes at every optimisation level (:func:`mark_unused_inputs`).

Sources: the attribute names are LLVM's ``llvm/lib/Target/AMDGPU/AMDGPUAttributes.def``
(llvm/llvm-project, commit 2f0b774dc), which the attributor infers and AMDGPUUsage ("LLVM IR
Attributes") describes; the intrinsics that need each input are those AMDGPUAttributor.cpp's
``intrinsicToAttrMask`` maps to it. Left to LLVM: ``amdgpu-no-lds-kernel-id`` (the LDS lowering pass
introduces its use), ``amdgpu-no-flat-scratch-init`` and ``amdgpu-no-wwm``.
"""
from __future__ import annotations

from llvmlite import ir as ll

#: Attribute -> the intrinsics (names, or prefixes ending in '.') whose use needs the input
#: (AMDGPUAttributor.cpp, intrinsicToAttrMask).
#: An attribute is stated on a function that reaches none of them. Every architecture kcompiler
#: targets (gfx90a and later) has aperture registers and the doorbell id, so neither address space
#: casts nor ``llvm.trap`` need the queue pointer there (same file, ``needsQueuePtr`` and the trap
#: case).
BY_INTRINSIC: dict[str, tuple[str, ...]] = {
    "amdgpu-no-dispatch-ptr": ("llvm.amdgcn.dispatch.ptr",),
    "amdgpu-no-queue-ptr": ("llvm.amdgcn.queue.ptr",),
    "amdgpu-no-dispatch-id": ("llvm.amdgcn.dispatch.id",),
    "amdgpu-no-implicitarg-ptr": ("llvm.amdgcn.implicitarg.ptr",),
    "amdgpu-no-workgroup-id-x": ("llvm.amdgcn.workgroup.id.x",),
    "amdgpu-no-workgroup-id-y": ("llvm.amdgcn.workgroup.id.y",),
    "amdgpu-no-workgroup-id-z": ("llvm.amdgcn.workgroup.id.z",),
    "amdgpu-no-workitem-id-x": ("llvm.amdgcn.workitem.id.x",),
    "amdgpu-no-workitem-id-y": ("llvm.amdgcn.workitem.id.y",),
    "amdgpu-no-workitem-id-z": ("llvm.amdgcn.workitem.id.z",),
    # Cluster ids (gfx1250): LLVM 22 also enables the workgroup-id y and z SGPRs of a kernel without
    # these (found by compiling: with them, -O 0 kernels get the SGPRs -O 2 gives them).
    "amdgpu-no-cluster-id-x": ("llvm.amdgcn.cluster.",),
    "amdgpu-no-cluster-id-y": ("llvm.amdgcn.cluster.",),
    "amdgpu-no-cluster-id-z": ("llvm.amdgcn.cluster.",),
}

#: Hidden arguments kcompiler never reads (it has no device malloc, device enqueue or multi-grid
#: sync): stated on every function.
NEVER_READ = ("amdgpu-no-multigrid-sync-arg", "amdgpu-no-heap-ptr", "amdgpu-no-default-queue",
              "amdgpu-no-completion-action")

#: Stated on a function that reaches no read of ``hidden_hostcall_buffer`` (:func:`note_hostcall`).
HOSTCALL = "amdgpu-no-hostcall-ptr"


def note_hostcall(module: ll.Module, fn: ll.Function) -> None:
    """Record that ``fn`` reads the hostcall buffer's hidden argument (std.hostcall's
    ``hostcall_buffer()``), for :func:`mark_unused_inputs`."""
    readers = module.__dict__.setdefault("_kc_hostcall_readers", set())
    readers.add(fn.name)


def _callees(fn: ll.Function) -> set[str]:
    out = set()
    for block in fn.blocks:
        for inst in block.instructions:
            if isinstance(inst, ll.CallInstr):
                callee = inst.callee
                out.add(callee.name if isinstance(callee, ll.Function) else "<indirect>")
    return out


def mark_unused_inputs(module: ll.Module) -> None:
    """Add the ``amdgpu-no-*`` attributes each defined function of ``module`` qualifies for: every
    input whose intrinsics (:data:`BY_INTRINSIC`) or hostcall-buffer read (:func:`note_hostcall`) it
    does not reach through its calls, and :data:`NEVER_READ`. A function that reaches an indirect
    call, inline assembly or a declared function that is not an intrinsic gets none (what it uses
    is not known here)."""
    defined = {f.name: f for f in module.functions if f.blocks}
    readers = module.__dict__.get("_kc_hostcall_readers", set())
    direct = {name: _callees(f) for name, f in defined.items()}
    reach: dict[str, set[str]] = {}
    for name in defined:  # the call graph's transitive closure, from each function
        seen, todo = set(), [name]
        while todo:
            for c in direct.get(todo.pop(), ()):
                if c not in seen:
                    seen.add(c)
                    if c in defined:
                        todo.append(c)
        reach[name] = seen | {name}
    for name, fn in defined.items():
        used = reach[name]
        if any(c == "<indirect>" or (c not in defined and not c.startswith("llvm.")) for c in used):
            continue
        attrs = [a for a, needs in BY_INTRINSIC.items()
                 if not any(c == n or (n.endswith(".") and c.startswith(n)) for c in used for n in needs)]
        attrs += NEVER_READ
        if not used.intersection(readers):
            attrs.append(HOSTCALL)
        for a in attrs:
            set.add(fn.attributes, f'"{a}"')  # llvmlite's attribute set lists no such; set.add skips its check


__all__ = ["BY_INTRINSIC", "HOSTCALL", "NEVER_READ", "mark_unused_inputs", "note_hostcall"]
