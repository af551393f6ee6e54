"""LLVM's code generator (machine code: assembly or an object file) run where it cannot end the
user's process.

LLVM reports some errors of its code generator by ending the process: an error diagnostic with no
handler installed prints ``error: <unknown>:0:0: stack frame size (131332) exceeds limit (131056) in
function 'k'`` and calls ``exit(1)`` (``LLVMContext::diagnose``: the AMDGPU backend's private segment
past its limit after register spills, LDS past its limit, "ran out of registers"); ``report_fatal_error``
("LLVM ERROR: Cannot select: ...") prints and aborts. llvmlite exports neither a diagnostic handler nor
a fatal-error handler that could return, so kcompiler runs this one step in a child process:

- :func:`machine_code` forks (``os.fork``: the child shares the parent's optimised ``ModuleRef`` and
  target machine copy-on-write, nothing is serialised or imported again; about 10 ms of CPU time a
  kernel on top of the code generator's own, measured on the examples; a process started afresh
  with ``python -m`` would cost hundreds), the child runs ``TargetMachine.emit_object`` /
  ``emit_assembly`` with its stderr (fd 2) going to a temporary file, sends the result through a
  pipe and ends with ``os._exit``; the parent goes on once the result is in and reaps the ending
  child at its next call;
- the parent's module is left as it was (LLVM's code generator rewrites the module it compiles:
  emitted twice in one process, AMDGCN aborted), so one module can be emitted twice (assembly, then
  a binary);
- where the child ends without a result, :func:`machine_code` raises :class:`CodegenDied` with what
  LLVM printed and how the child ended; :func:`kcompiler.backends.llvm.emission` turns it into a
  located CompileError where it is the program past a limit (the private segment after spills) and
  into an InternalCompilerError naming the kernels, the stage and the target otherwise;
- LLVM's warnings of a child that succeeded are copied to the parent's stderr, as they were printed
  when the code generator ran in the parent.

Where ``os.fork`` does not exist (Windows) or fails (no memory for the child), the code generator
runs in the process itself, as before: an error LLVM ends the process on then still ends it.

The child is also where LLVM's command-line options can be set for one module without changing
them for the process: :data:`LARGE_BLOCK` below turns off the GPU load/store vectorizer (and, on AMDGCN,
the post-RA machine scheduler: amdgcn/target.py) for a module with a basic block of thousands of loads
and stores (a fully unrolled comptime loop), whose time grows as their square (4,096 stores: 3.5 s of
NVPTX's 4.2 s of code generation, 5.4 of AMDGCN's 6.4).
"""
from __future__ import annotations

import os
import signal
import struct
import sys
import tempfile
import warnings
import weakref
from typing import Any, Iterable

#: The child's exit status where Python itself failed in it (not LLVM): a traceback is in its stderr.
_PY_FAILED = 70
_HEADER = struct.Struct("<cQ")  # kind ('b' bytes, 's' text), length


class CodegenDied(RuntimeError):
    """LLVM's code generator ended the process it ran in (the child of :func:`machine_code`).
    ``printed``: everything the child printed on stderr; ``how``: 'exit status N' or 'signal SIGABRT'.
    The message gives LLVM's error lines ('error: ...', 'LLVM ERROR: ...', 'In function: ...') or,
    without any, the last lines printed."""

    def __init__(self, printed: str, how: str):
        self.printed, self.how = printed, how
        lines = printed.strip().splitlines()
        said = [ln for ln in lines if ln.startswith(("error:", "LLVM ERROR:", "In function:"))][:6] or lines[-12:]
        text = "\n".join(ln[:500] for ln in said) or "no message"
        super().__init__(f"{text} (LLVM ended the code generator's process: {how})")


#: Loads and stores in one basic block of the optimised module past which the GPU load/store vectorizer
#: is turned off for it (``large_block_options`` of :func:`machine_code`). Its time grows as the square
#: of their number (NVPTX, one chain of stores: 0.3 s at 1,024, 1.3 s at 2,048, 3.5 s at 4,096); the
#: repository's largest kernels have at most 32 in a block (attention_prefill at D=128).
LARGE_BLOCK = 1024

#: Loads and stores of each module's functions before LLVM optimised it (:func:`note_memory_ops`), but
#: those SROA and mem2reg make registers: an upper bound of a block's after optimisation (kcompiler
#: inlines device functions; LLVM's unrolling of a loop is bounded by its own thresholds), so that only
#: a module past :data:`LARGE_BLOCK` is counted again, instruction by instruction.
_MEMORY_OPS: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()

#: The same count times the function's basic blocks, before optimisation: the bound under which
#: :func:`late_gvn_cost` need not walk the optimised module (under :data:`GVN_HEAVY`: 0).
_BLOCKS_X_MEMORY_OPS: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


def note_memory_ops(ref: Any, llvm_ir: Any, alloca_space: int = 0) -> None:
    """Note for ``ref`` (an llvmlite ModuleRef) the most loads and stores of one function of
    ``llvm_ir``, the llvmlite.ir Module it was parsed from, leaving out those of a stack slot
    (address space ``alloca_space``) itself or at constant indices of it: a local variable or an
    array indexed by constants, which become registers. A pass over Python objects: well under a
    millisecond for the examples, 14 ms for attention_prefill (25,000 instructions; 4,680 loads and
    stores, 564 counted)."""
    from llvmlite import ir as ll

    def constant(x: Any) -> bool:  # the lowering widens indices to i64: sext i32 3 to i64
        return isinstance(x, ll.Constant) or (isinstance(x, ll.CastInstr) and isinstance(x.operands[0], ll.Constant))

    def slot(p: Any) -> bool:
        if isinstance(p, ll.GEPInstr):
            if not all(constant(x) for x in p.indices):
                return False
            p = p.pointer
        return (isinstance(p, (ll.AllocaInstr, ll.FormattedConstant))  # lower_memory.py: opaque(alloca)
                and getattr(p.type, "addrspace", 0) == alloca_space)

    def memory(i: Any) -> bool:
        if isinstance(i, ll.LoadInstr):
            return not slot(i.operands[0])
        return isinstance(i, ll.StoreInstr) and not slot(i.operands[1])
    counts = [(sum(memory(i) for b in f.blocks for i in b.instructions), len(f.blocks)) for f in llvm_ir.functions]
    _MEMORY_OPS[ref] = max((m for m, _ in counts), default=0)
    _BLOCKS_X_MEMORY_OPS[ref] = max((m * nb for m, nb in counts), default=0)


#: blocks x loads of one function past which NVPTX's code generator runs at O2, not O3
#: (:func:`late_gvn_cost`). At O3 its IR passes end with a GVN (TargetPassConfig's
#: addEarlyCSEOrGVNPass; O2 runs EarlyCSE there), whose time grows about as the cube of a chain of
#: predicated loads: a comptime loop of n ``if i < n { acc += x[i] }``, NVPTX code generation 5.4 s at
#: n = 256, 52 s at 512, over 200 s at 1,023 (2.4 and 9.8 s at O2; found by the fuzzer, 2026-11-29).
#: The 129 NVPTX modules the test suite's PTX/SASS tests compile stay under it (the largest, std.sampling's
#: sample, 857 blocks x 371 loads = 318,000), so their code is as before.
GVN_HEAVY = 400_000


def late_gvn_cost(ref: Any) -> int:
    """The most (basic blocks x loads) of one function of ``ref``, an llvmlite ModuleRef: what the
    late GVN of NVPTX's code generator at O3 costs (:data:`GVN_HEAVY`); 0 without counting where
    :func:`note_memory_ops` noted that no function of it comes near (the walk over the optimised module
    costs about 10 us an instruction: 53 ms for 5,600)."""
    if _BLOCKS_X_MEMORY_OPS.get(ref, GVN_HEAVY + 1) <= GVN_HEAVY:
        return 0
    best = 0
    for f in ref.functions:
        blocks = list(f.blocks)
        loads = sum(i.opcode == "load" for b in blocks for i in b.instructions)
        best = max(best, len(blocks) * loads)
    return best


def largest_block(ref: Any) -> int:
    """The most loads and stores of one basic block of ``ref``, an llvmlite ModuleRef; 0 without
    counting where :func:`note_memory_ops` noted that no function of it has more than
    :data:`LARGE_BLOCK` in all (counting walks the optimised module at 8-11 us an instruction: 49 ms
    for 6,100; only modules that the code generator then takes seconds over get that far)."""
    if _MEMORY_OPS.get(ref, LARGE_BLOCK + 1) <= LARGE_BLOCK:
        return 0
    return max((sum(i.opcode in ("load", "store") for i in b.instructions) for f in ref.functions
                for b in f.blocks), default=0)


def machine_code(tm: Any, ref: Any, kind: str, large_block_options: Iterable[str] = ()) -> bytes | str:
    """``tm.emit_object(ref)`` (``kind`` 'obj': bytes) or ``tm.emit_assembly(ref)`` ('asm': str) of an
    llvmlite TargetMachine and ModuleRef, run in a forked child (module docstring).
    ``large_block_options``: LLVM command-line options (``-disable-nvptx-load-store-vectorizer``) the
    child sets before it emits a module with more than :data:`LARGE_BLOCK` loads and stores in a block.
    Raises :class:`CodegenDied` where LLVM ended the child; ValueError for another ``kind``."""
    if kind not in ("obj", "asm"):
        raise ValueError(f"machine code is 'obj' or 'asm', not {kind!r}")
    options = tuple(large_block_options)

    def run() -> Any:
        if options and largest_block(ref) > LARGE_BLOCK:
            import llvmlite.binding as llvm
            for o in options:  # process-wide: in the child they end with it
                llvm.set_option("kcompiler", o)
        return tm.emit_object(ref) if kind == "obj" else tm.emit_assembly(ref)
    if not hasattr(os, "fork"):
        return tm.emit_object(ref) if kind == "obj" else tm.emit_assembly(ref)
    err = tempfile.TemporaryFile()
    try:
        r, w = os.pipe()
        try:
            with warnings.catch_warnings():  # Python 3.12+: "multi-threaded, fork() may deadlock": the
                warnings.simplefilter("ignore", DeprecationWarning)  # child only runs LLVM, then _exit
                pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return run()
        if pid == 0:  # the child: never returns
            _child(run, w, err.fileno(), r)
        os.close(w)
        return _parent(pid, r, err)
    finally:
        err.close()


def _child(run: Any, w: int, err_fd: int, r: int) -> None:
    """Run the code generator, write :data:`_HEADER` and the result to ``w``, and end the process."""
    status = _PY_FAILED
    try:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent ends the child itself
        except ValueError:  # not the main thread's interpreter: the parent still ends it
            pass
        os.close(r)
        os.dup2(err_fd, 2)
        if "faulthandler" in sys.modules:  # its dump of an abort would go to the parent's stderr as noise
            sys.modules["faulthandler"].disable()
        out = run()
        data = out.encode() if isinstance(out, str) else bytes(out)
        view = memoryview(_HEADER.pack(b"s" if isinstance(out, str) else b"b", len(data)) + data)
        while view:
            view = view[os.write(w, view):]
        os.close(w)  # the parent goes on while this process is torn down (milliseconds)
        status = 0
    except BaseException:  # noqa: BLE001 - reported to the parent through the stderr file
        try:
            import traceback

            os.write(2, traceback.format_exc().encode(errors="replace"))
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(status)


#: Children that gave their result and are ending: reaped (waitpid WNOHANG) at the next call, so that
#: the parent does not wait for the teardown of a process the size of its own.
_ENDING: list[int] = []


def _reap_ended() -> None:
    for pid in list(_ENDING):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (a waitpid(-1) of the application)
            done = pid
        if done:
            try:
                _ENDING.remove(pid)
            except ValueError:  # another thread reaped it
                pass


def _read(r: int) -> bytes:
    """What the child writes to ``r``: up to the end of its result (:data:`_HEADER` gives the length)
    or until it closes ``r`` or ends."""
    buf = bytearray()
    with os.fdopen(r, "rb", buffering=0) as f:  # closes r
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            buf += b
            if len(buf) >= _HEADER.size and len(buf) >= _HEADER.size + _HEADER.unpack_from(buf)[1]:
                break  # the whole result: the child closes its end as it ends
    return bytes(buf)


def _parent(pid: int, r: int, err: Any) -> bytes | str:
    """Read the child's result from ``r``; raise CodegenDied where it gave none (reaping it)."""
    _reap_ended()
    reaped = False
    try:
        payload = _read(r)
        if len(payload) >= _HEADER.size:
            kind, n = _HEADER.unpack_from(payload)
            if len(payload) == _HEADER.size + n:
                _ENDING.append(pid)
                reaped = True
                err.seek(0)
                printed = err.read()
                if printed:  # LLVM's warnings, as the parent would have printed them
                    sys.stderr.flush()
                    os.write(2, printed)
                data = payload[_HEADER.size:]
                return data.decode() if kind == b"s" else data
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:  # reaped elsewhere: how it ended is unknown
            status = None
        reaped = True
    finally:
        if not reaped:  # interrupted (KeyboardInterrupt): end the child, then let it pass
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
    err.seek(0)
    printed = err.read().decode(errors="replace")
    if status is None:
        how = "it ended without a result"
    elif os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        how = f"signal {signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig}"
    else:
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
        how = f"exit status {code}" + (" in Python, not LLVM" if code == _PY_FAILED else "")
    raise CodegenDied(printed, how)


__all__ = ["CodegenDied", "LARGE_BLOCK", "largest_block", "machine_code", "note_memory_ops"]
