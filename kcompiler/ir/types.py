"""The types of kcompiler's IR (and of the kernel language, which uses the same objects).

Types are immutable and compare by value; ``str(t)`` is the spelling in the language and in printed IR:
``f32``, ``vec<f16, 8>``, ``ptr<f32, shared>``, ``[f32; 16]``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Type:
    """Base of all IR types. ``repr(t)`` is ``str(t)`` too, so that a type shown in any message (or in a
    list or dict of them) reads as the language spells it, never ``ScalarType(name='f16', ...)``."""

    def __repr__(self) -> str:
        return str(self)

    @property
    def is_scalar(self) -> bool:
        return isinstance(self, ScalarType)

    @property
    def is_pointer(self) -> bool:
        return isinstance(self, PointerType)

    @property
    def is_vector(self) -> bool:
        return isinstance(self, VectorType)


@dataclass(frozen=True, repr=False)
class VoidType(Type):
    def __str__(self) -> str:
        return "void"


@dataclass(frozen=True, repr=False)
class ScalarType(Type):
    """A scalar: ``kind`` is 'bool', 'int' (signed), 'uint', 'float' or 'minifloat'; ``bits`` its width.

    ``bf16`` is a float of 16 bits told apart from ``f16`` by its name. The 'minifloat' kind holds the
    small storage formats (``f8e4m3``, ``f8e5m2``, their FNUZ variants, ``e8m0``, and the FP6/FP4
    ``f6e2m3``, ``f6e3m2``, ``f4e2m1``, a byte each; described in :mod:`kcompiler.numerics.formats`):
    values are converted to and from the arithmetic floats, not computed on.
    """

    name: str
    kind: str
    bits: int

    def __str__(self) -> str:
        return self.name

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_minifloat(self) -> bool:
        """A small storage float (the 8-bit ones, and FP6/FP4 held in a byte)."""
        return self.kind == "minifloat"

    @property
    def is_int(self) -> bool:
        """Signed or unsigned integer (not bool)."""
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def size(self) -> int:
        """Size in bytes in memory (bool is one byte)."""
        return max(self.bits // 8, 1)


@dataclass(frozen=True, repr=False)
class VectorType(Type):
    """``vec<T, N>``: N scalars of type T, loaded and stored as one access."""

    elem: ScalarType
    count: int

    def __str__(self) -> str:
        return f"vec<{self.elem}, {self.count}>"

    @property
    def size(self) -> int:
        return self.elem.size * self.count


class AddressSpace(str, Enum):
    """Where a pointer points. The numbers each target gives them live in its Target.address_spaces."""

    GLOBAL = "global"
    SHARED = "shared"
    LOCAL = "local"
    CONST = "const"
    #: the module's constant tables (``const`` arrays): NVPTX's .const bank, AMDGCN's constant space
    CONSTANT = "constant"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, repr=False)
class PointerType(Type):
    """``ptr<T>`` (global memory) or ``ptr<T, space>``."""

    pointee: Type
    space: AddressSpace = AddressSpace.GLOBAL

    def __str__(self) -> str:
        if self.space == AddressSpace.GLOBAL:
            return f"ptr<{self.pointee}>"
        return f"ptr<{self.pointee}, {self.space}>"

    @property
    def size(self) -> int:
        return 8


@dataclass(frozen=True, repr=False)
class ArrayType(Type):
    """``[T; N]``: a fixed array, in registers (local) or in shared memory."""

    elem: Type
    count: int

    def __str__(self) -> str:
        return f"[{self.elem}; {self.count}]"

    @property
    def size(self) -> int:
        return sizeof(self.elem) * self.count


@dataclass(frozen=True, repr=False)
class TensorMapType(Type):
    """``tensor_map``: a TMA tensor map (CUDA's ``CUtensorMap``, 128 opaque bytes aligned to 64), made
    on the host (kcompiler.runtime.tensormap) and passed by value as a kernel parameter; on NVIDIA it
    is a ``.param .align 64 .b8 [128]`` grid constant (PTX ISA 8.x, "Tensor-map" and "Kernel
    parameter attribute: __grid_constant__"). Only ``cp.async.bulk.tensor`` (``tma_load``) reads it."""

    def __str__(self) -> str:
        return "tensor_map"

    @property
    def size(self) -> int:
        return 128


@dataclass(frozen=True, repr=False)
class StructType(Type):
    """``struct Pair { lo: f32, hi: f32 }``: named fields laid out by C's rules (as CUDA's parameter
    space, AMD's kernarg segment and the host's C ABI lay out a struct): each field at the next offset
    that is a multiple of its alignment, the struct aligned to its largest field's alignment and its
    size rounded up to a multiple of it. ``name`` is the spelling in the language (``Pair``, or
    ``Acc[f32]`` for an instance of a generic struct); ``fields`` the (name, type) pairs in order.

    The layout helpers (:attr:`offsets`, :attr:`size`, :attr:`align`) are what a later split of a
    struct value into 32-bit words (shuffles) or a host packer (a numpy structured dtype with these
    offsets and ``itemsize``) use; the padding bytes between fields are unspecified."""

    name: str
    fields: tuple[tuple[str, Type], ...]

    def __str__(self) -> str:
        return self.name

    def field_index(self, name: str) -> int:
        """The position of field ``name``; KeyError if there is none."""
        for i, (n, _) in enumerate(self.fields):
            if n == name:
                return i
        raise KeyError(name)

    @property
    def offsets(self) -> tuple[int, ...]:
        """The byte offset of each field (C rules)."""
        out, at = [], 0
        for _, t in self.fields:
            a = alignof(t)
            at = (at + a - 1) // a * a
            out.append(at)
            at += sizeof(t)
        return tuple(out)

    @property
    def align(self) -> int:
        return max((alignof(t) for _, t in self.fields), default=1)

    @property
    def size(self) -> int:
        if not self.fields:
            return 0
        end = self.offsets[-1] + sizeof(self.fields[-1][1])
        a = self.align
        return (end + a - 1) // a * a

    def spelled(self) -> str:
        """The whole definition in one line, which :func:`type_from_str` reads back (the cache's
        manifests): ``struct Pair{lo: f32, hi: f32}``."""
        return f"struct {self.name}{{" + ", ".join(f"{n}: {type_spelling(t)}" for n, t in self.fields) + "}"


def type_spelling(t: Type) -> str:
    """``str(t)`` with every struct spelled whole (:meth:`StructType.spelled`), so that
    :func:`type_from_str` can read it back."""
    if isinstance(t, StructType):
        return t.spelled()
    if isinstance(t, PointerType):
        inner = type_spelling(t.pointee)
        return f"ptr<{inner}>" if t.space == AddressSpace.GLOBAL else f"ptr<{inner}, {t.space}>"
    if isinstance(t, ArrayType):
        return f"[{type_spelling(t.elem)}; {t.count}]"
    return str(t)


VOID = VoidType()
TENSOR_MAP = TensorMapType()
BOOL = ScalarType("bool", "bool", 1)
I8, I16, I32, I64 = (ScalarType(f"i{b}", "int", b) for b in (8, 16, 32, 64))
U8, U16, U32, U64 = (ScalarType(f"u{b}", "uint", b) for b in (8, 16, 32, 64))
F16 = ScalarType("f16", "float", 16)
BF16 = ScalarType("bf16", "float", 16)
F32 = ScalarType("f32", "float", 32)
F64 = ScalarType("f64", "float", 64)
F8E4M3, F8E5M2, F8E4M3FNUZ, F8E5M2FNUZ, E8M0 = (
    ScalarType(n, "minifloat", 8) for n in ("f8e4m3", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz", "e8m0"))
#: FP6 and FP4: ``bits`` is the code's width; each value takes a byte (the code in its low bits).
F6E2M3, F6E3M2, F4E2M1 = ScalarType("f6e2m3", "minifloat", 6), ScalarType("f6e3m2", "minifloat", 6), \
    ScalarType("f4e2m1", "minifloat", 4)

#: Every scalar type by its name in the language.
SCALARS: dict[str, ScalarType] = {
    t.name: t for t in (BOOL, I8, I16, I32, I64, U8, U16, U32, U64, F16, BF16, F32, F64,
                        F8E4M3, F8E5M2, F8E4M3FNUZ, F8E5M2FNUZ, E8M0, F6E2M3, F6E3M2, F4E2M1)
}


def sizeof(t: Type) -> int:
    """Size in bytes of a value of type ``t`` in memory."""
    if isinstance(t, (ScalarType, VectorType, PointerType, ArrayType, TensorMapType, StructType)):
        return t.size
    raise TypeError(f"type {t} has no size")


def alignof(t: Type) -> int:
    """Natural alignment in bytes (vectors align to their whole size, up to 16)."""
    if isinstance(t, ArrayType):
        return alignof(t.elem)
    if isinstance(t, VectorType):
        n = t.size
        return n if n & (n - 1) == 0 and n <= 16 else t.elem.size
    if isinstance(t, TensorMapType):
        return 64
    if isinstance(t, StructType):
        return t.align
    return sizeof(t)


def elem_of(t: Type) -> ScalarType:
    """The scalar type of a scalar or of a vector's lanes."""
    if isinstance(t, VectorType):
        return t.elem
    if isinstance(t, ScalarType):
        return t
    raise TypeError(f"{t} is neither a scalar nor a vector")


# --- types in text (the cache's manifests, compile-time type values given as strings) ------------------------------------------------------------------------------

_PTR = re.compile(r"^ptr<(.*)>$")
_VEC = re.compile(r"^vec<(.*),\s*(\d+)>$")
_ARR = re.compile(r"^\[(.*);\s*(\d+)\]$")


_STRUCT = re.compile(r"^struct\s+([^{]+)\{(.*)\}$", re.S)


def _split_top(s: str, sep: str = ",") -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in "<[{":
            depth += 1
        elif c in ">]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return [p.strip() for p in parts if p.strip()]


def _struct_from_str(name: str, body: str) -> StructType:
    fields = []
    for part in _split_top(body):
        fname, colon, ftype = part.partition(":")
        if not colon:
            raise ValueError(f"not a struct field: {part!r}")
        fields.append((fname.strip(), type_from_str(ftype)))
    return StructType(name, tuple(fields))


def _split_last_comma(s: str) -> tuple[str, str | None]:
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        c = s[i]
        if c in ">]}":
            depth += 1
        elif c in "<[{":
            depth -= 1
        elif c == "," and depth == 0:
            return s[:i].strip(), s[i + 1:].strip()
    return s.strip(), None


def type_from_str(s: str) -> Type:
    """Parse a type printed by ``str(Type)`` (``f32``, ``ptr<f16, shared>``, ``vec<f16, 8>``,
    ``[f32; 16]``) or by :func:`type_spelling` (structs spelled whole). Raises ValueError for text
    that is not one."""
    s = s.strip()
    if s in SCALARS:
        return SCALARS[s]
    if s == "void":
        return VOID
    if s == "tensor_map":
        return TENSOR_MAP
    m = _STRUCT.match(s)
    if m:
        return _struct_from_str(m.group(1).strip(), m.group(2))
    m = _VEC.match(s)
    if m:
        elem = type_from_str(m.group(1))
        return VectorType(elem, int(m.group(2)))  # type: ignore[arg-type]
    m = _ARR.match(s)
    if m:
        return ArrayType(type_from_str(m.group(1)), int(m.group(2)))
    m = _PTR.match(s)
    if m:
        inner, space = _split_last_comma(m.group(1))
        if space is not None and space in {a.value for a in AddressSpace}:
            return PointerType(type_from_str(inner), AddressSpace(space))
        return PointerType(type_from_str(m.group(1)))
    raise ValueError(f"not a type: {s!r}")
