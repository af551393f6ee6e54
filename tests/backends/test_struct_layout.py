"""Struct layout: StructType's C rules (offsets, size, alignment), its text round trip (the cache's
manifests), and LLVM's own layout of the lowered struct under each target's data layout."""
from __future__ import annotations

import ctypes

import pytest
from llvmlite import binding as llvm
from llvmlite import ir as ll

from kcompiler.backends.llvm.lltypes import scalar_lltype, struct_lltype
from kcompiler.ir.types import (BOOL, F16, F32, F64, I8, I32, I64, U8, ArrayType, PointerType, StructType,
                                VectorType, alignof, sizeof, type_from_str, type_spelling)

PAIR = StructType("Pair", (("lo", F32), ("hi", F32)))
MIXED = StructType("Mixed", (("a", I8), ("b", F64), ("c", F16), ("d", BOOL)))
VEC3 = StructType("V3", (("v", VectorType(F32, 3)), ("k", U8)))
NESTED = StructType("N", (("p", PAIR), ("m", MIXED), ("arr", ArrayType(I32, 3)), ("q", PointerType(F32))))
ALL = [PAIR, MIXED, VEC3, NESTED, StructType("W", (("v", VectorType(F32, 4)), ("x", I32)))]


class _CMixed(ctypes.Structure):
    _fields_ = [("a", ctypes.c_int8), ("b", ctypes.c_double), ("c", ctypes.c_uint16), ("d", ctypes.c_bool)]


class _CPair(ctypes.Structure):
    _fields_ = [("lo", ctypes.c_float), ("hi", ctypes.c_float)]


class _CNested(ctypes.Structure):
    _fields_ = [("p", _CPair), ("m", _CMixed), ("arr", ctypes.c_int32 * 3), ("q", ctypes.c_void_p)]


@pytest.mark.parametrize("st,ct", [(PAIR, _CPair), (MIXED, _CMixed), (NESTED, _CNested)])
def test_c_rules_match_the_host_c_compiler_layout(st, ct):
    assert sizeof(st) == ctypes.sizeof(ct)
    assert alignof(st) == ctypes.alignment(ct)
    assert st.offsets == tuple(getattr(ct, n).offset for n, _ in st.fields)


def test_vec3_field_is_12_bytes_aligned_to_4():
    assert VEC3.offsets == (0, 12) and sizeof(VEC3) == 16 and alignof(VEC3) == 4


@pytest.mark.parametrize("t", ALL + [PointerType(PAIR), ArrayType(NESTED, 4)])
def test_spelling_round_trips(t):
    assert type_from_str(type_spelling(t)) == t


def _memtype(t):
    if t == BOOL:
        return ll.IntType(8)
    if isinstance(t, StructType):
        return struct_lltype(t, _memtype)
    if isinstance(t, ArrayType):
        return ll.ArrayType(_memtype(t.elem), t.count)
    if isinstance(t, VectorType):
        return ll.VectorType(scalar_lltype(t.elem), t.count)
    if isinstance(t, PointerType):
        return ll.PointerType()
    return scalar_lltype(t)


def _layouts():
    from kcompiler.backends.nvptx.target import NvptxTarget  # noqa: F401 - imported for its data layout
    out = [("nvptx", NvptxTarget.data_layout)]
    llvm.initialize_native_target()
    out.append(("host", str(llvm.Target.from_default_triple().create_target_machine().target_data)))
    return out


@pytest.mark.parametrize("st", ALL)
def test_llvm_places_fields_at_the_c_offsets(st):
    for name, dl in _layouts():
        m = ll.Module()
        m.data_layout = dl
        g = ll.GlobalVariable(m, _memtype(st), "g")
        g.initializer = ll.Constant(g.value_type, None)
        mod = llvm.parse_assembly(str(m))
        td = llvm.create_target_data(dl)
        lt = mod.get_global_variable("g").global_value_type
        got = tuple(td.get_element_offset(lt, i) for i in range(len(st.fields)))
        assert got == st.offsets, name
        assert td.get_abi_size(lt) == sizeof(st), name
