"""Stand-ins for the pipeline in runtime tests: a program whose kernels are built as IR directly
(no frontend), compiled through the real LLVM lowering and targets."""
from __future__ import annotations

from typing import Callable

from kcompiler.ir import Builder, Function, Module as IrModule, Value
from kcompiler.ir.types import VOID
from kcompiler.pipeline import Source, artifact_of_ir
from kcompiler.runtime.cache import make_key


def ir_kernel(name: str, params: list[tuple[str, object]], body: Callable) -> IrModule:
    """An IR module with one kernel ``name``; ``body(builder, *param_values)`` fills it."""
    fn = Function(name, [Value(t, n) for n, t in params], VOID, "kernel")
    b = Builder(fn.body)
    body(b, *fn.params)
    return IrModule(name, [fn])


def global_index(b: Builder) -> Value:
    return b.add(b.mul(b.special("block_id"), b.special("block_dim")), b.special("thread_id"))


class IrProgram:
    """What runtime.Module needs of a ProgramHandle, over kernels given as IR modules (no
    compile-time parameters)."""

    def __init__(self, target, kernels: dict[str, IrModule]):
        self.target = target
        self.kernels = kernels
        self.source = Source("", "<ir>")
        self.target_name, self.arch = target.name, target.arch
        self._arts = {}

    @property
    def kernel_names(self):
        return list(self.kernels)

    def comptime_names(self, k):
        return []

    def param_names(self, k):
        return [v.hint for v in self.kernels[k].functions[0].params]

    def infer_comptime(self, k, types, given):
        return dict(given)

    def artifact_key(self, k, values):
        return make_key(id(self), k, values)

    def artifact(self, k, values):
        if k not in self._arts:
            self._arts[k] = artifact_of_ir(self.kernels[k], k, self.target)
        return self._arts[k]
