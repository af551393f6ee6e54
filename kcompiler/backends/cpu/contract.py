"""NVPTX's contraction of multiply-adds, applied to the CPU target's optimised LLVM IR.

The shared lowering marks float arithmetic ``contract`` (nvcc's ``-fmad=true``). Where the host has
an FMA, LLVM's x86/AArch64 code generator then fuses ``a * b + c`` only where the product has a
single use. NVPTX declares aggressive fusion (``enableAggressiveFMAFusion``), so its DAG combiner
fuses a contractable multiply into every contractable add or subtract it feeds in the same basic
block, also when the product has other uses; the product is then still computed, rounded, for
those. Code that needs a rounded product, such as the residual ``fma(-p, b, a)`` of ``p = a * b`` in
an error-free transformation, breaks on the GPU and not on the CPU. :func:`fuse_like_nvptx`
rewrites the CPU target's optimised LLVM IR the way NVPTX's instruction selection does, so that
such code also breaks on the CPU (``CpuTarget(contract="nvptx")``).

The rules are those of LLVM's DAGCombiner (``visitFADDForFMACombine``, ``visitFSUBForFMACombine``
and the canonicalisations of ``visitFADD`` / ``visitFSUB`` before them), for instructions that
both carry ``contract`` (or ``fast``), checked against llvmlite's NVPTX back end (LLVM 22):

- ``fadd (fmul a, b), c`` and ``fadd c, (fmul a, b)``  -> ``fma(a, b, c)``
- ``fsub (fmul a, b), c``                              -> ``fma(a, b, -c)``
- ``fsub c, (fmul a, b)``                              -> ``fma(-a, b, c)``
- ``fsub (fneg (fmul a, b)), c``                       -> ``fma(-a, b, -c)``
- ``fadd (fneg x), c`` is ``fsub c, x`` and ``fsub c, (fneg x)`` is ``fadd c, x`` first.
- Both operands products: the one with fewer uses is fused (a tie: the first operand; the
  combiner tries the first operand first, after swapping the two when the first has more uses).

Uses are counted in the function before any rewriting; the DAG counts them in its basic block as
it combines, which can differ where both operands of one add are products with several uses.
Not emulated: NVPTX's code generation also fuses some products into adds in another basic block
(measured with llvmlite's LLVM 22: a product in a loop header into an add in a conditional block of
the loop, or a product before a branch into an add on one side; not into both sides of a diamond,
nor into an add after a loop), and the ``fpext`` folds (an f32 product extended to f64 and added).
ptxas, given ``mul.f32`` and ``add.f32`` that LLVM left apart (across blocks, through a phi or a
select), kept them apart in every case measured.
"""
from __future__ import annotations

import re

#: An arithmetic instruction line of LLVM IR: indent, result name, opcode, fast-math flags, the rest
#: (type and operands).
_INST = re.compile(r'^(\s+)(%[-\w.$]+|%"[^"]*") = (fadd|fsub|fmul|fneg) '
                   r'((?:(?:fast|nnan|ninf|nsz|arcp|contract|afn|reassoc) )*)(.*)$')
_NAME = re.compile(r'%[-\w.$]+|%"[^"]*"')
_LABEL = re.compile(r'^([-\w.$]+|"[^"]*"):')
_SUFFIX = {"float": "f32", "double": "f64", "half": "f16", "bfloat": "bf16"}


def _contractable(flags: str) -> bool:
    return "contract" in flags or "fast" in flags


def _split_top(s: str) -> list[str]:
    """``s`` split at the commas outside brackets and quotes, each part stripped."""
    parts, depth, start, quoted = [], 0, 0, False
    for i, c in enumerate(s):
        if c == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(s[start:i].strip())
            start = i + 1
    parts.append(s[start:].strip())
    return parts


def _type_and_operands(rest: str) -> tuple[str, list[str]]:
    """The type and the operands (metadata attachments left out) of an instruction's tail."""
    if rest.startswith("<"):
        end = rest.index(">") + 1
    else:
        end = rest.index(" ")
    ty, ops = rest[:end], _split_top(rest[end:])
    return ty, [o for o in ops if not o.startswith("!")]


def _intrinsic_suffix(ty: str) -> str | None:
    m = re.fullmatch(r"<(\d+) x (\w+)>", ty)
    if m:
        s = _SUFFIX.get(m.group(2))
        return f"v{m.group(1)}{s}" if s else None
    return _SUFFIX.get(ty)


class _Function:
    """The rewriting state of one function: its use counts and the products of the current block."""

    def __init__(self, lines: list[str]):
        self.uses: dict[str, int] = {}
        for line in lines:
            body = line.split(" = ", 1)[1] if " = " in line else line
            for n in _NAME.findall(body):
                self.uses[n] = self.uses.get(n, 0) + 1
        self.products: dict[str, tuple[str, str, str]] = {}   # name -> (type, a, b), fmul contract
        self.negated: dict[str, str] = {}                      # name -> x, for name = fneg x

    def product(self, v: str, ty: str) -> tuple[str, str] | None:
        p = self.products.get(v)
        return (p[1], p[2]) if p is not None and p[0] == ty else None


def fuse_like_nvptx(text: str) -> tuple[str, int]:
    """``text`` (a module of LLVM IR) with every contractable ``fadd``/``fsub`` whose operand is a
    contractable ``fmul`` of its basic block (or the ``fneg`` of one) replaced by ``llvm.fma`` of
    that product's operands, by the rules of the module docstring; and how many were replaced.
    Declarations of the ``llvm.fma`` intrinsics used are added where missing."""
    out: list[str] = []
    fn: _Function | None = None
    used: dict[str, str] = {}   # intrinsic suffix -> type
    count = 0
    fresh = 0

    def fresh_name() -> str:
        nonlocal fresh
        fresh += 1
        return f"%kc.nvfma.{fresh}"

    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("define "):
            end = next(j for j in range(i, len(lines)) if lines[j] == "}")
            fn = _Function(lines[i:end])
            out.append(line)
            continue
        if fn is None:
            out.append(line)
            continue
        if line == "}":
            fn = None
            out.append(line)
            continue
        if _LABEL.match(line) or not line.strip():
            fn.products.clear()
            fn.negated.clear()
            out.append(line)
            continue
        m = _INST.match(line)
        if m is None:
            out.append(line)
            continue
        indent, name, opcode, flags, rest = m.groups()
        ty, ops = _type_and_operands(rest)
        if opcode == "fneg":  # the combiner looks through a negation whatever its flags
            fn.negated[name] = ops[0]
            out.append(line)
            continue
        if not _contractable(flags):
            out.append(line)
            continue
        if opcode == "fmul":
            fn.products[name] = (ty, ops[0], ops[1])
            out.append(line)
            continue
        suffix = _intrinsic_suffix(ty)
        if suffix is None:
            out.append(line)
            continue
        fused = _fuse(fn, opcode, ty, ops[0], ops[1])
        if fused is None:
            out.append(line)
            continue
        a, b, c, neg_a, neg_c = fused
        fl = flags.strip()
        fl = fl + " " if fl else ""
        if neg_a:
            t = fresh_name()
            out.append(f"{indent}{t} = fneg {fl}{ty} {a}")
            a = t
        if neg_c:
            t = fresh_name()
            out.append(f"{indent}{t} = fneg {fl}{ty} {c}")
            c = t
        out.append(f"{indent}{name} = call {fl}{ty} @llvm.fma.{suffix}({ty} {a}, {ty} {b}, {ty} {c})")
        used[suffix] = ty
        count += 1
    result = "\n".join(out)
    for suffix, ty in used.items():
        if not re.search(rf"^declare [^\n]*@llvm\.fma\.{suffix}\(", result, re.M):
            result += f"\ndeclare {ty} @llvm.fma.{suffix}({ty}, {ty}, {ty})\n"
    return result, count


def _fuse(fn: _Function, opcode: str, ty: str, x: str, y: str) -> tuple[str, str, str, bool, bool] | None:
    """(a, b, c, negate a, negate c) of the fma that ``x opcode y`` becomes, or None."""
    # visitFADD / visitFSUB canonicalise negations first, in this order.
    if opcode == "fadd" and y in fn.negated:
        opcode, y = "fsub", fn.negated[y]
    elif opcode == "fadd" and x in fn.negated:
        opcode, x, y = "fsub", y, fn.negated[x]
    elif opcode == "fsub" and y in fn.negated:
        opcode, y = "fadd", fn.negated[y]
    px, py = fn.product(x, ty), fn.product(y, ty)
    fewer_y = px is not None and py is not None and fn.uses.get(x, 0) > fn.uses.get(y, 0)
    if opcode == "fadd":
        if px is not None and not fewer_y:
            return px[0], px[1], y, False, False
        if py is not None:
            return py[0], py[1], x, False, False
        return None
    if px is not None and not fewer_y:
        return px[0], px[1], y, False, True
    if py is not None:
        return py[0], py[1], x, True, False
    nx = fn.product(fn.negated[x], ty) if x in fn.negated else None
    if nx is not None:
        return nx[0], nx[1], y, True, True
    return None
