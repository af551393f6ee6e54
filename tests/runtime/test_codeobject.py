"""The AMD code object reader (kcompiler/runtime/codeobject.py) on real code objects made without
kcompiler's backend (tests/amd_codeobjects.py: hand-written LLVM IR, llvmlite, ld.lld), and on
malformed bytes, which must always raise CodeObjectError."""
from __future__ import annotations

import struct
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kcompiler.runtime.codeobject import (EM_AMDGPU, ET_DYN, ET_REL, CodeObjectError, KernelDescriptor,
                                          read_code_object)

from ..amd_codeobjects import code_object, relocatable

# processor -> (EF_AMDGPU_MACH, wavefront size); AMDGPUUsage, "AMDGPU EF_AMDGPU_MACH Values"
ARCHS = {"gfx942": (0x04C, 64), "gfx1100": (0x041, 32)}


@pytest.fixture(scope="module", params=sorted(ARCHS))
def arch(request):
    return request.param


@pytest.fixture(scope="module")
def co(arch):
    return read_code_object(code_object(arch))


# --- what a code object says ------------------------------------------------------------------------

def test_header(co, arch):
    mach, _ = ARCHS[arch]
    assert co.machine == EM_AMDGPU == 224 and co.elf_type == ET_DYN
    assert co.e_flags & 0xFF == mach and co.arch == arch
    assert co.abi_version == 3 and co.code_object_version == 5  # ELFABIVERSION_AMDGPU_HSA_V5
    assert co.metadata["amdhsa.version"] == [1, 2]
    assert co.metadata["amdhsa.target"] == f"amdgcn-amd-amdhsa--{arch}"


def test_target_features(co, arch):
    """gfx942 supports xnack and sramecc (both 'any' unless asked for); gfx1100 neither."""
    if arch == "gfx942":
        assert (co.xnack, co.sramecc) == ("any", "any") and co.e_flags & 0xF00 == 0x500
    else:
        assert (co.xnack, co.sramecc) == (None, None) and co.e_flags & 0xF00 == 0
    assert co.target_id == arch


def test_features_set_on_and_off():
    co = read_code_object(code_object("gfx90a", "+xnack,-sramecc"))
    assert co.arch == "gfx90a" and co.e_flags & 0xFF == 0x03F
    assert (co.xnack, co.sramecc) == ("on", "off")
    assert co.target_id == "gfx90a:sramecc-:xnack+" == co.metadata["amdhsa.target"].split("--")[1]
    assert co.runs_on("gfx90a:sramecc-:xnack+") is None
    assert "xnack on" in co.runs_on("gfx90a:sramecc-:xnack-")
    assert "compiled for gfx90a, the device is gfx942" in co.runs_on("gfx942:sramecc+:xnack-")


def test_any_features_run_on_either_setting(co, arch):
    assert co.runs_on(arch) is None
    if arch == "gfx942":
        assert co.runs_on("gfx942:sramecc+:xnack-") is None
        assert co.runs_on("gfx942:sramecc-:xnack+") is None


def test_one_descriptor_symbol_per_kernel(co):
    assert sorted(k.name for k in co.kernels) == ["store_n", "with_lds"]
    for k in co.kernels:
        assert k.kd_symbol == k.name + ".kd" and k.symbol == k.name
        kd, code = co.symbols[k.kd_symbol], co.symbols[k.symbol]
        assert (kd.type, kd.size, kd.binding) == ("object", 64, "global")
        assert code.type == "func" and code.size > 0
        # the descriptor's entry offset leads from the descriptor to the kernel's first instruction
        assert kd.value + k.descriptor.kernel_code_entry_byte_offset == code.value
    assert co.kernel("with_lds").name == "with_lds"
    with pytest.raises(KeyError, match="no kernel 'nope'; its kernels are: store_n, with_lds"):
        co.kernel("nope")


def test_kernel_arguments(co):
    k = co.kernel("store_n")
    assert [(a.name, a.offset, a.size, a.value_kind) for a in k.explicit_args] == [
        ("a", 0, 8, "global_buffer"), ("n", 8, 4, "by_value")]
    assert k.explicit_args[0].address_space == "global"
    hidden = {a.value_kind: (a.offset, a.size) for a in k.hidden_args}
    # code object v5 implicit arguments start 8-aligned after the explicit ones (AMDGPUUsage,
    # "Code Object V5 Metadata": hidden_block_count_x at +0, hidden_group_size_x at +12)
    assert hidden["hidden_block_count_x"] == (16, 4) and hidden["hidden_group_size_x"] == (28, 2)
    assert k.kernarg_segment_align == 8
    assert k.kernarg_segment_size == k.descriptor.kernarg_size >= max(a.offset + a.size for a in k.args)


def test_lds_size(co):
    assert co.kernel("store_n").group_segment_fixed_size == 0
    k = co.kernel("with_lds")
    assert k.group_segment_fixed_size == 1024 == k.descriptor.group_segment_fixed_size  # 256 x f32
    assert k.private_segment_fixed_size == k.descriptor.private_segment_fixed_size == 0


def test_wavefront_size(co, arch):
    wave = ARCHS[arch][1]
    for k in co.kernels:
        assert k.wavefront_size == wave
        assert k.descriptor.wavefront_size32 == (wave == 32)  # kernel_code_properties bit 10
        assert k.descriptor.enable_sgpr_kernarg_segment_ptr
        assert k.max_flat_workgroup_size == 1024 and k.sgpr_count > 0 and k.vgpr_count > 0


def test_relocatable_object_is_read_too(arch):
    co = read_code_object(relocatable(arch))
    assert co.elf_type == ET_REL and co.arch == arch and co.code_object_version == 5
    assert co.kernel("with_lds").descriptor.group_segment_fixed_size == 1024


def test_descriptor_fields():
    raw = struct.pack("<IIIIq20xIIIHH4x", 1024, 16, 272, 0, -256, 0x10, 0x00AF0042, 0x1391,
                      (1 << 3) | (1 << 10), 0)
    d = KernelDescriptor.from_bytes(raw)
    assert (d.group_segment_fixed_size, d.private_segment_fixed_size, d.kernarg_size) == (1024, 16, 272)
    assert d.kernel_code_entry_byte_offset == -256 and d.compute_pgm_rsrc3 == 0x10
    assert (d.granulated_workitem_vgpr_count, d.granulated_wavefront_sgpr_count) == (2, 1)
    assert d.enable_private_segment and d.user_sgpr_count == 8
    assert d.enable_workgroup_id == (True, True, True) and d.enable_vgpr_workitem_id == 2  # x, y, z
    assert d.enable_sgpr_kernarg_segment_ptr and d.wavefront_size32 and not d.uses_dynamic_stack
    assert d.raw == raw
    with pytest.raises(CodeObjectError, match="64 bytes"):
        KernelDescriptor.from_bytes(raw[:63])


# --- malformed input ----------------------------------------------------------------------------------

def _patched(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value):]


def _note_type_offset(data: bytes) -> int:
    """Byte offset of the NT_AMDGPU_METADATA note's type field."""
    i = data.index(b"AMDGPU\0")
    assert struct.unpack_from("<I", data, i - 4)[0] == 32
    return i - 4


@pytest.mark.parametrize("data, message", [
    (b"", "not an ELF file"),
    (b"MZ\x90\x00" + bytes(100), "not an ELF file"),
    (b"\x7fELF", "truncated: the ELF header"),
    (b"\x7fELF\x01\x01\x01" + bytes(60), "not an ELF64 file"),
])
def test_garbage(data, message):
    with pytest.raises(CodeObjectError, match=message):
        read_code_object(data)


def test_not_an_amd_elf():
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    host = llvm.Target.from_default_triple().create_target_machine().emit_object(
        llvm.parse_assembly("define i32 @f() {\n  ret i32 1\n}"))
    with pytest.raises(CodeObjectError, match="not an AMD GPU code object: e_machine is"):
        read_code_object(host)


def test_header_fields_are_checked():
    data = code_object("gfx942")
    with pytest.raises(CodeObjectError, match="not a little-endian"):
        read_code_object(_patched(data, 5, b"\x02"))
    with pytest.raises(CodeObjectError, match="not an HSA code object: EI_OSABI is 65"):
        read_code_object(_patched(data, 7, b"\x41"))  # ELFOSABI_AMDGPU_PAL
    with pytest.raises(CodeObjectError, match="unknown EI_ABIVERSION 9"):
        read_code_object(_patched(data, 8, b"\x09"))
    with pytest.raises(CodeObjectError,
                       match=r"says code object v4, but its metadata's amdhsa.version is \[1, 2\]"):
        read_code_object(_patched(data, 8, b"\x02"))
    flags = struct.unpack_from("<I", data, 48)[0]
    with pytest.raises(CodeObjectError,
                       match="e_flags say gfx90a .* amdhsa.target says amdgcn-amd-amdhsa--gfx942"):
        read_code_object(_patched(data, 48, struct.pack("<I", flags & ~0xFF | 0x03F)))


def test_v6_is_read_from_the_abi_version():
    """Code object v6 keeps the metadata version 1.2 (llvm-project PR 80995): EI_ABIVERSION 4 alone
    says v6."""
    co = read_code_object(_patched(code_object("gfx942"), 8, b"\x04"))
    assert co.code_object_version == 6 and co.abi_version == 4


def test_missing_or_broken_metadata():
    data = code_object("gfx942")
    t = _note_type_offset(data)
    with pytest.raises(CodeObjectError, match="no NT_AMDGPU_METADATA note"):
        read_code_object(_patched(data, t, struct.pack("<I", 33)))
    desc = t + 4 + 8  # type, then the 7-byte owner name padded to 8
    with pytest.raises(CodeObjectError, match="not valid MessagePack|holds a int, not a map"):
        read_code_object(_patched(data, desc, b"\xc1" * 4))  # 0xc1: never used in MessagePack


def test_msgpack_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "msgpack", None)
    with pytest.raises(ImportError, match="pip install msgpack"):
        read_code_object(code_object("gfx942"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_truncation_is_a_code_object_error(data):
    full = code_object("gfx1100")
    n = data.draw(st.integers(0, len(full) - 1), label="length")
    with pytest.raises(CodeObjectError):
        read_code_object(full[:n])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_corrupt_bytes_never_escape_as_other_errors(data):
    """Any byte overwritten anywhere: the reader parses it or says CodeObjectError, nothing else."""
    full = bytearray(code_object("gfx942"))
    for _ in range(data.draw(st.integers(1, 4), label="changes")):
        at = data.draw(st.integers(0, len(full) - 1), label="offset")
        full[at] = data.draw(st.integers(0, 255), label="byte")
    try:
        read_code_object(bytes(full))
    except CodeObjectError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes_after_an_amd_header(tail):
    head = code_object("gfx942")[:64]
    with pytest.raises(CodeObjectError):
        read_code_object(head + tail)
