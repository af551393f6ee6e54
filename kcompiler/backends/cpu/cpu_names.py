"""Which CPU names the CPU target accepts: those LLVM knows for the host's triple and can generate the
host's code for (64-bit on an x86-64 host).

LLVM checks a CPU name only when it generates code, and then badly for a library: an unknown name
prints "'znver9' is not a recognized processor for this target (ignoring processor)" on stderr for
every subtarget it builds, and a CPU without 64-bit mode (``i386``, ``pentium4``) ends the process
with "LLVM ERROR: 64-bit code requested on a subtarget that doesn't support it!". llvmlite has no
call that lists the CPUs or checks a name. So a name is tried once per process in a child Python
process (about 0.3 s), which also prints LLVM's list (``-mcpu=help``, on stderr, for a 32-bit
triple of the same target where that listing does not end the process); the child's stderr is
parsed, never shown. The host's own CPU (``native``) needs no check.
"""
from __future__ import annotations

import difflib
import functools
import re
import subprocess
import sys

__all__ = ["check_cpu_name", "cpu_names"]

_MARK = "@@kc-cpu-probe@@"
# argv: the triple, the triple to list the CPUs with, the CPU name ("" lists only)
_CHILD = f"""
import sys
import llvmlite.binding as llvm
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
triple, list_triple, cpu = sys.argv[1:4]
m = llvm.parse_assembly("define void @f() {{ ret void }}")
llvm.Target.from_triple(list_triple).create_target_machine(cpu="help").emit_object(m)
sys.stderr.write("{_MARK}\\n")
sys.stderr.flush()
if cpu:
    m = llvm.parse_assembly("define void @f() {{ ret void }}")
    llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, jit=True).emit_object(m)
print("{_MARK}")
"""


def _list_triple(triple: str) -> str:
    # LLVM's listing goes on to build a subtarget for the CPU "help", which on x86-64 ends the process
    # (it has no 64-bit mode); the same X86 target in 32-bit mode lists the same CPUs and carries on.
    return re.sub(r"^x86_64", "i386", triple)


@functools.cache
def _probe(triple: str, cpu: str) -> tuple[tuple[str, ...], str | None]:
    """(LLVM's CPU names for ``triple``, None if ``cpu`` generates code for ``triple`` else why not:
    'unknown', '32-bit' or LLVM's message). Raises RuntimeError when the child cannot run at all."""
    r = subprocess.run([sys.executable, "-c", _CHILD, triple, _list_triple(triple), cpu],
                       capture_output=True, text=True, timeout=120)
    listing, mark, after = r.stderr.partition(_MARK)
    if not mark:
        raise RuntimeError(f"cannot list LLVM's CPUs for {triple}: {r.stderr.strip()[-500:]}")
    names = tuple(re.findall(r"^  (\S+)\s+- Select the ", listing, re.M))
    if not cpu:
        return names, None
    if "is not a recognized processor" in after or cpu not in names:
        return names, "unknown"
    if "64-bit code requested" in after:
        return names, "32-bit"
    if r.returncode != 0 or _MARK not in r.stdout:
        return names, (after.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
    return names, None


def _process_triple() -> str:
    # llvmlite imported here: this module is imported with the package (backends/cpu/__init__.py),
    # which must not load llvmlite
    import llvmlite.binding as llvm

    return llvm.get_process_triple()


def cpu_names(triple: str | None = None) -> list[str]:
    """Every CPU name LLVM knows for ``triple`` (default: this process's), sorted; on an x86-64 host
    this includes 32-bit CPUs, which :func:`check_cpu_name` rejects."""
    return sorted(_probe(triple or _process_triple(), "")[0])


def check_cpu_name(cpu: str, triple: str | None = None) -> None:
    """Raise ValueError unless LLVM generates code for ``triple`` (default: this process's) with CPU
    ``cpu`` (an LLVM name such as 'x86-64-v3' or 'znver4'): for a name LLVM does not know (with the
    closest known names), or for a CPU that cannot run the triple's code (a 32-bit x86 CPU on an
    x86-64 host). The message names the CPU target's spellings, as the GPU targets' do."""
    triple = triple or _process_triple()
    names, why = _probe(triple, cpu)
    if why is None:
        return
    if why == "unknown":
        close = difflib.get_close_matches(cpu, names, n=4, cutoff=0.6)
        examples = [n for n in ("x86-64-v3", "znver4", "neoverse-v2", "apple-m2") if n in names]
        hint = f"closest: {', '.join(close)}" if close else f"e.g. {', '.join(examples or names[:2])}"
        raise ValueError(f"unknown CPU arch {cpu!r} for {triple}; expected 'native' (this machine), 'host' "
                         f"or a CPU name LLVM knows ({hint}; all of them: kcompiler.backends.cpu.cpu_names())")
    if why == "32-bit":
        raise ValueError(f"CPU arch {cpu!r} has no 64-bit mode; the CPU target compiles for {triple}: "
                         "expected 'native', 'host' or a 64-bit CPU (x86-64, x86-64-v2, x86-64-v3, "
                         "x86-64-v4, znver4, ...)")
    raise ValueError(f"CPU arch {cpu!r} cannot compile for {triple}: {why}")
