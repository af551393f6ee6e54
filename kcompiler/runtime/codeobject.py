"""A reader of AMD GPU code objects (HSACO): what a HIP launch and the tests need to know of one.

::

    co = read_code_object(open("vadd.hsaco", "rb").read())
    co.arch, co.code_object_version            # 'gfx942', 5
    k = co.kernel("vadd")
    [(a.offset, a.size, a.value_kind) for a in k.explicit_args]   # [(0, 8, 'global_buffer'), ...]
    k.group_segment_fixed_size, k.descriptor.kernarg_size           # LDS bytes, kernarg bytes

A code object is a little-endian ELF64 file for ``EM_AMDGPU`` (224), normally a shared object
(``ET_DYN``) linked by ``ld.lld -shared``; relocatable objects (``ET_REL``, the compiler's output
before linking) are read too. The formats, all from LLVM's "User Guide for AMDGPU Backend"
(llvm/docs/AMDGPUUsage.rst, https://llvm.org/docs/AMDGPUUsage.html):

- *ELF Code Object* → "Header": ``e_ident[EI_OSABI]`` is ``ELFOSABI_AMDGPU_HSA`` (64) and
  ``e_ident[EI_ABIVERSION]`` gives the code object version (``ELFABIVERSION_AMDGPU_HSA_V2..V6`` =
  0..4, so code object v5 is 3 and v6 is 4); ``e_flags`` holds ``EF_AMDGPU_MACH`` (bits 0-7, the
  processor, table "AMDGPU EF_AMDGPU_MACH Values") and, from code object v4, the xnack (bits 8-9) and
  sramecc (bits 10-11) target-feature settings (unsupported / any / off / on).
- *Note Records* → "Code Object V3 and Above Note Records": the ``NT_AMDGPU_METADATA`` note (type 32,
  owner ``"AMDGPU"``) holds the metadata as MessagePack, in a ``PT_NOTE`` segment / ``.note`` section.
- *Code Object Metadata* → "Code Object V3 Metadata" (and its V4/V5/V6 changes): ``amdhsa.version``
  ([1, 0] for v3, [1, 1] for v4, [1, 2] for v5 *and* v6: the metadata did not change in v6, so the
  version comes from ``EI_ABIVERSION`` and the metadata is only checked against it),
  ``amdhsa.target``, and ``amdhsa.kernels``: per kernel its name, its kernel descriptor symbol
  (``NAME.kd``), segment sizes, register counts, wavefront size and ``.args``, the kernel arguments
  with their byte offsets, sizes and value kinds (``global_buffer``, ``by_value``, and the
  ``hidden_*`` arguments the runtime fills, listed in "Code Object V5 Metadata").
- *Kernel Descriptor* → "Kernel Descriptor for GFX6-GFX12": 64 bytes at symbol ``NAME.kd``
  (``group_segment_fixed_size`` at byte 0, ``private_segment_fixed_size`` 4, ``kernarg_size`` 8,
  ``kernel_code_entry_byte_offset`` 16, ``compute_pgm_rsrc3/1/2`` 44/48/52, ``kernel_code_properties``
  56, ``kernarg_preload`` 58).

Every malformed input raises :class:`CodeObjectError` (a ValueError) saying what is wrong and where;
nothing else escapes (no IndexError, struct.error or msgpack error). The MessagePack decoder is the
``msgpack`` package, imported on first use (``pip install msgpack``; it comes with the ``test`` and
``amd`` extras).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Mapping

#: ``e_machine`` of AMD GPU code objects (ELF gABI, "EM_AMDGPU").
EM_AMDGPU = 224
#: ``e_ident[EI_OSABI]`` of code objects for the HSA runtime (ROCm, HIP).
ELFOSABI_AMDGPU_HSA = 64
#: ``e_ident[EI_ABIVERSION]`` → code object version (AMDGPUUsage, "ELF Code Object", header table).
CODE_OBJECT_VERSION_OF_ABI = {0: 2, 1: 3, 2: 4, 3: 5, 4: 6}
#: code object version → the ``amdhsa.version`` values its metadata may carry. v6 kept 1.2 (LLVM
#: briefly wrote 1.3 for v6 before reverting it, llvm-project PR 80995; both are accepted).
_METADATA_VERSIONS = {3: {(1, 0)}, 4: {(1, 1)}, 5: {(1, 2)}, 6: {(1, 2), (1, 3)}}

NT_AMDGPU_METADATA = 32
KERNEL_DESCRIPTOR_SIZE = 64

ET_REL, ET_EXEC, ET_DYN = 1, 2, 3
_PT_NOTE = 4
_SHT_SYMTAB, _SHT_NOTE, _SHT_NOBITS, _SHT_DYNSYM = 2, 7, 8, 11
_SHN_LORESERVE = 0xFF00

#: ``EF_AMDGPU_MACH`` values of the AMDGCN processors (AMDGPUUsage, table "AMDGPU EF_AMDGPU_MACH
#: Values", LLVM 20). A value missing here falls back to the processor named by ``amdhsa.target``.
EF_AMDGPU_MACH = 0x0FF
MACH_NAMES = {
    0x020: "gfx600", 0x021: "gfx601", 0x022: "gfx700", 0x023: "gfx701", 0x024: "gfx702",
    0x025: "gfx703", 0x026: "gfx704", 0x028: "gfx801", 0x029: "gfx802", 0x02A: "gfx803",
    0x02B: "gfx810", 0x02C: "gfx900", 0x02D: "gfx902", 0x02E: "gfx904", 0x02F: "gfx906",
    0x030: "gfx908", 0x031: "gfx909", 0x032: "gfx90c", 0x033: "gfx1010", 0x034: "gfx1011",
    0x035: "gfx1012", 0x036: "gfx1030", 0x037: "gfx1031", 0x038: "gfx1032", 0x039: "gfx1033",
    0x03A: "gfx602", 0x03B: "gfx705", 0x03C: "gfx805", 0x03D: "gfx1035", 0x03E: "gfx1034",
    0x03F: "gfx90a", 0x040: "gfx940", 0x041: "gfx1100", 0x042: "gfx1013", 0x043: "gfx1150",
    0x044: "gfx1103", 0x045: "gfx1036", 0x046: "gfx1101", 0x047: "gfx1102", 0x048: "gfx1200",
    0x04A: "gfx1151", 0x04B: "gfx941", 0x04C: "gfx942", 0x04E: "gfx1201", 0x04F: "gfx950",
    0x051: "gfx9-generic", 0x052: "gfx10-1-generic", 0x053: "gfx10-3-generic",
    0x054: "gfx11-generic", 0x055: "gfx1152", 0x058: "gfx1153", 0x059: "gfx12-generic",
    0x05F: "gfx9-4-generic",
}

# e_flags target features. Code object v4 and later: two bits each (AMDGPUUsage, "AMDGPU ELF Header
# e_flags for Code Object V4 and After"); v3: one bit each, set = on.
_FEATURE_V4 = {0: None, 1: "any", 2: "off", 3: "on"}  # None: the processor does not support it
_XNACK_V3, _SRAMECC_V3 = 0x100, 0x200


class CodeObjectError(ValueError):
    """The bytes are not a well-formed AMD HSA code object; the message says what is wrong."""


# --- results ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Symbol:
    """An ELF symbol: ``value`` (an address in a linked object, an offset in its section in a
    relocatable one), ``size`` in bytes, ``type`` ('func', 'object', 'notype', 'section', 'file' or
    'other'), ``binding`` ('local', 'global', 'weak', 'other') and ``section`` (section index)."""

    value: int
    size: int
    type: str
    binding: str
    section: int


@dataclass(frozen=True)
class ArgInfo:
    """One kernel argument of the metadata's ``.args`` (AMDGPUUsage, "Code Object V3 Kernel Argument
    Metadata Map"): ``offset`` and ``size`` in bytes in the kernarg segment, ``value_kind``
    ('global_buffer', 'by_value', 'dynamic_shared_pointer', ..., or 'hidden_*' for the implicit
    arguments the runtime fills), the source ``name`` and ``address_space`` when given."""

    offset: int
    size: int
    value_kind: str
    name: str | None = None
    address_space: str | None = None

    @property
    def hidden(self) -> bool:
        """Whether the runtime fills this argument (``hidden_*`` value kinds), not the caller."""
        return self.value_kind.startswith("hidden_")


@dataclass(frozen=True)
class KernelDescriptor:
    """The 64-byte kernel descriptor at symbol ``NAME.kd`` (AMDGPUUsage, "Kernel Descriptor for
    GFX6-GFX12"). Sizes are bytes; ``kernel_code_entry_byte_offset`` is from the descriptor's own
    address to the kernel's first instruction. ``raw``: the 64 bytes."""

    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    kernel_code_entry_byte_offset: int
    compute_pgm_rsrc3: int
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    kernel_code_properties: int
    kernarg_preload: int
    raw: bytes = field(repr=False)

    _LAYOUT = struct.Struct("<IIIIq20xIIIHH4x")

    @classmethod
    def from_bytes(cls, data: bytes) -> "KernelDescriptor":
        """Decode 64 descriptor bytes. Raises CodeObjectError for another length."""
        if len(data) != KERNEL_DESCRIPTOR_SIZE:
            raise CodeObjectError(f"a kernel descriptor is {KERNEL_DESCRIPTOR_SIZE} bytes, got "
                                  f"{len(data)}")
        (group, private, kernarg, _reserved, entry, rsrc3, rsrc1, rsrc2, props,
         preload) = cls._LAYOUT.unpack(data)
        return cls(group, private, kernarg, entry, rsrc3, rsrc1, rsrc2, props, preload, bytes(data))

    # COMPUTE_PGM_RSRC1 (AMDGPUUsage, "compute_pgm_rsrc1 for GFX6-GFX12")
    @property
    def granulated_workitem_vgpr_count(self) -> int:
        """Bits 0-5 of rsrc1: VGPR blocks used by a work-item, minus one (the block size depends
        on the processor and wavefront size)."""
        return self.compute_pgm_rsrc1 & 0x3F

    @property
    def granulated_wavefront_sgpr_count(self) -> int:
        """Bits 6-9 of rsrc1: SGPR blocks of a wavefront, minus one (0 from GFX10 on)."""
        return (self.compute_pgm_rsrc1 >> 6) & 0xF

    # COMPUTE_PGM_RSRC2 (AMDGPUUsage, "compute_pgm_rsrc2 for GFX6-GFX12")
    @property
    def enable_private_segment(self) -> bool:
        """Bit 0 of rsrc2: the kernel uses scratch (private) memory."""
        return bool(self.compute_pgm_rsrc2 & 1)

    @property
    def user_sgpr_count(self) -> int:
        """Bits 1-5 of rsrc2: SGPRs the dispatch sets up before the kernel starts."""
        return (self.compute_pgm_rsrc2 >> 1) & 0x1F

    @property
    def enable_workgroup_id(self) -> tuple[bool, bool, bool]:
        """Bits 7-9 of rsrc2: whether the workgroup id x / y / z is passed in an SGPR."""
        r = self.compute_pgm_rsrc2
        return bool(r >> 7 & 1), bool(r >> 8 & 1), bool(r >> 9 & 1)

    @property
    def enable_vgpr_workitem_id(self) -> int:
        """Bits 11-12 of rsrc2: work-item ids passed in VGPRs: 0 x, 1 x and y, 2 x, y and z."""
        return (self.compute_pgm_rsrc2 >> 11) & 3

    # kernel_code_properties (AMDGPUUsage, "Kernel Descriptor for GFX6-GFX12", bytes 56-57)
    @property
    def enable_sgpr_kernarg_segment_ptr(self) -> bool:
        """Bit 3: the kernarg segment's address is passed in SGPRs."""
        return bool(self.kernel_code_properties >> 3 & 1)

    @property
    def wavefront_size32(self) -> bool:
        """Bit 10 (ENABLE_WAVEFRONT_SIZE32, GFX10+): the kernel runs in wave32 mode."""
        return bool(self.kernel_code_properties >> 10 & 1)

    @property
    def uses_dynamic_stack(self) -> bool:
        """Bit 11: the kernel's stack size is not known at compile time."""
        return bool(self.kernel_code_properties >> 11 & 1)


@dataclass(frozen=True)
class KernelInfo:
    """A kernel of a code object, from its ``amdhsa.kernels`` metadata entry (AMDGPUUsage, "Code
    Object V3 Kernel Metadata Map") and its kernel descriptor.

    ``name``: the kernel's name (what ``hipModuleGetFunction`` takes); ``symbol``: its code symbol;
    ``kd_symbol``: its kernel descriptor's symbol (``NAME.kd``). Sizes are bytes:
    ``kernarg_segment_size`` (explicit and hidden arguments), ``group_segment_fixed_size`` (static LDS;
    dynamic LDS is added at launch), ``private_segment_fixed_size`` (scratch per work-item).
    ``max_flat_workgroup_size``: the most work-items a workgroup may have. ``metadata``: the whole
    entry as decoded."""

    name: str
    symbol: str
    kd_symbol: str
    args: tuple[ArgInfo, ...]
    kernarg_segment_size: int
    kernarg_segment_align: int
    group_segment_fixed_size: int
    private_segment_fixed_size: int
    wavefront_size: int
    sgpr_count: int
    vgpr_count: int
    agpr_count: int
    max_flat_workgroup_size: int
    uses_dynamic_stack: bool
    descriptor: KernelDescriptor
    metadata: Mapping[str, Any] = field(repr=False)

    @property
    def explicit_args(self) -> tuple[ArgInfo, ...]:
        """The arguments the caller passes (not ``hidden_*``), in order."""
        return tuple(a for a in self.args if not a.hidden)

    @property
    def hidden_args(self) -> tuple[ArgInfo, ...]:
        """The implicit arguments the runtime fills (``hidden_*``)."""
        return tuple(a for a in self.args if a.hidden)


@dataclass(frozen=True)
class CodeObject:
    """A parsed code object (see the module docstring for the fields' sources).

    ``machine``: ``e_machine`` (224). ``elf_type``: ``ET_DYN`` (3) for a loadable code object,
    ``ET_REL`` (1) for an unlinked one. ``e_flags``: the raw flags. ``abi_version``: ``EI_ABIVERSION``.
    ``arch``: the processor ('gfx942'). ``xnack`` / ``sramecc``: 'any', 'on', 'off', or None where
    the processor lacks the feature. ``target_id``: processor and the features that are on or off,
    as HIP's ``gcnArchName`` writes them ('gfx90a:sramecc+:xnack-'). ``code_object_version``: 2 to 6.
    ``metadata``: the decoded ``NT_AMDGPU_METADATA``. ``symbols``: name → :class:`Symbol` (the
    ``.symtab``, else ``.dynsym``). ``kernels``: one :class:`KernelInfo` per kernel."""

    machine: int
    elf_type: int
    e_flags: int
    abi_version: int
    arch: str
    xnack: str | None
    sramecc: str | None
    target_id: str
    code_object_version: int
    metadata: Mapping[str, Any] = field(repr=False)
    symbols: Mapping[str, Symbol] = field(repr=False)
    kernels: tuple[KernelInfo, ...] = ()

    def kernel(self, name: str) -> KernelInfo:
        """The kernel called ``name``. Raises KeyError naming the kernels there are."""
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"the code object has no kernel {name!r}; its kernels are: "
                       f"{', '.join(k.name for k in self.kernels) or 'none'}")

    def runs_on(self, target_id: str) -> str | None:
        """Why this code object cannot run on a device whose target ID (HIP's ``gcnArchName``, e.g.
        'gfx90a:sramecc+:xnack-') is ``target_id``, or None when it can (AMDGPUUsage, "Target ID":
        the processors must match, and a feature set on or off must match the device's)."""
        processor, *features = target_id.split(":")
        if processor != self.arch:
            return f"it was compiled for {self.arch}, the device is {processor}"
        device = {f[:-1]: ("on" if f.endswith("+") else "off") for f in features
                  if f.endswith(("+", "-"))}
        for name in ("sramecc", "xnack"):
            mine = getattr(self, name)
            if mine in ("on", "off") and device.get(name, mine) != mine:
                return f"it was compiled with {name} {mine}, the device runs with {name} {device[name]}"
        return None


# --- ELF reading --------------------------------------------------------------------------------

class _Reader:
    """Bounds-checked reads from the file's bytes; every failure is a CodeObjectError."""

    def __init__(self, data: bytes):
        self.data = data

    def unpack(self, fmt: struct.Struct, offset: int, what: str) -> tuple:
        if offset < 0 or offset + fmt.size > len(self.data):
            raise CodeObjectError(f"truncated: {what} at byte {offset} needs {fmt.size} bytes, the "
                                  f"file has {len(self.data)}")
        return fmt.unpack_from(self.data, offset)

    def bytes(self, offset: int, size: int, what: str) -> bytes:
        if offset < 0 or size < 0 or offset + size > len(self.data):
            raise CodeObjectError(f"truncated: {what} at byte {offset} needs {size} bytes, the file "
                                  f"has {len(self.data)}")
        return self.data[offset:offset + size]

    def string(self, table: bytes, index: int, what: str) -> str:
        if not 0 <= index < len(table):
            raise CodeObjectError(f"{what}: name offset {index} is outside its string table "
                                  f"({len(table)} bytes)")
        end = table.find(b"\0", index)
        if end < 0:
            raise CodeObjectError(f"{what}: the name at offset {index} is not NUL-terminated")
        try:
            return table[index:end].decode("utf-8")
        except UnicodeDecodeError:
            raise CodeObjectError(f"{what}: the name at offset {index} is not UTF-8") from None


_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")   # ELF64 header, 64 bytes
_SHDR = struct.Struct("<IIQQQQIIQQ")         # ELF64 section header, 64 bytes
_PHDR = struct.Struct("<IIQQQQQQ")           # ELF64 program header, 56 bytes
_SYM = struct.Struct("<IBBHQQ")              # ELF64 symbol, 24 bytes
_NHDR = struct.Struct("<III")                # note header: namesz, descsz, type

_SYM_TYPES = {0: "notype", 1: "object", 2: "func", 3: "section", 4: "file"}
_SYM_BINDINGS = {0: "local", 1: "global", 2: "weak"}


@dataclass(frozen=True)
class _Section:
    name_index: int
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int
    align: int


def _header(r: _Reader) -> tuple:
    if len(r.data) < 4 or r.data[:4] != b"\x7fELF":
        raise CodeObjectError("not an ELF file (no \\x7fELF magic): an AMD code object is an ELF64 "
                              "file")
    ident, e_type, machine, _version, _entry, phoff, shoff, flags, ehsize, phentsize, phnum, \
        shentsize, shnum, _shstrndx = r.unpack(_EHDR, 0, "the ELF header")
    if ident[4] != 2:
        raise CodeObjectError(f"not an ELF64 file (EI_CLASS {ident[4]}): AMD code objects are ELF64")
    if ident[5] != 1:
        raise CodeObjectError(f"not a little-endian ELF file (EI_DATA {ident[5]})")
    if machine != EM_AMDGPU:
        raise CodeObjectError(f"not an AMD GPU code object: e_machine is {machine}, not EM_AMDGPU "
                              f"({EM_AMDGPU})")
    if ident[7] != ELFOSABI_AMDGPU_HSA:
        raise CodeObjectError(f"not an HSA code object: EI_OSABI is {ident[7]}, not "
                              f"ELFOSABI_AMDGPU_HSA ({ELFOSABI_AMDGPU_HSA})")
    if e_type not in (ET_REL, ET_EXEC, ET_DYN):
        raise CodeObjectError(f"unexpected ELF type e_type={e_type} (a code object is ET_DYN)")
    if ehsize < _EHDR.size or (shnum and shentsize != _SHDR.size) \
            or (phnum and phentsize != _PHDR.size):
        raise CodeObjectError(f"malformed ELF header: e_ehsize {ehsize}, e_shentsize {shentsize}, "
                              f"e_phentsize {phentsize}")
    return ident[8], e_type, machine, flags, phoff, phnum, shoff, shnum


def _sections(r: _Reader, shoff: int, shnum: int) -> list[_Section]:
    if shoff == 0:
        return []
    if shnum == 0:  # extended numbering: the real count is section 0's sh_size
        shnum = _Section(*_take(r.unpack(_SHDR, shoff, "section header 0"))).size
    if shnum > (len(r.data) - shoff) // _SHDR.size:
        raise CodeObjectError(f"truncated: {shnum} section headers at byte {shoff} do not fit in "
                              f"the file ({len(r.data)} bytes)")
    return [_Section(*_take(r.unpack(_SHDR, shoff + i * _SHDR.size, f"section header {i}")))
            for i in range(shnum)]


def _take(fields: tuple) -> tuple:
    """Section header fields in _Section's order (name, type, flags, addr, offset, size, link,
    entsize, addralign), dropping sh_info."""
    name, type_, flags, addr, offset, size, link, _info, align, entsize = fields
    return name, type_, flags, addr, offset, size, link, entsize, align


def _contents(r: _Reader, s: _Section, what: str) -> bytes:
    if s.type == _SHT_NOBITS:
        return b""
    return r.bytes(s.offset, s.size, what)


def _symbols(r: _Reader, sections: list[_Section]) -> dict[str, Symbol]:
    """The symbols of ``.symtab`` (or ``.dynsym`` in a stripped object). A global symbol wins over
    a local one of the same name."""
    tables = [s for s in sections if s.type == _SHT_SYMTAB] \
        or [s for s in sections if s.type == _SHT_DYNSYM]
    out: dict[str, Symbol] = {}
    for table in tables[:1]:
        if table.entsize != _SYM.size:
            raise CodeObjectError(f"malformed symbol table: entry size {table.entsize}, expected "
                                  f"{_SYM.size}")
        if not 0 < table.link < len(sections):
            raise CodeObjectError(f"malformed symbol table: its string table is section {table.link}")
        data = _contents(r, table, "the symbol table")
        strtab = _contents(r, sections[table.link], "the symbol string table")
        sub = _Reader(data)
        for i in range(1, len(data) // _SYM.size):
            name_i, info, _other, shndx, value, size = sub.unpack(_SYM, i * _SYM.size, f"symbol {i}")
            if not name_i:
                continue
            name = r.string(strtab, name_i, f"symbol {i}")
            sym = Symbol(value, size, _SYM_TYPES.get(info & 0xF, "other"),
                         _SYM_BINDINGS.get(info >> 4, "other"), shndx)
            if name not in out or out[name].binding == "local":
                out[name] = sym
    return out


def _notes(r: _Reader, blobs: list[tuple[int, int, int]]) -> list[tuple[str, int, bytes]]:
    """(owner, type, description) of each note in the given (offset, size, alignment) ranges
    (ELF gABI "Note Section": namesz, descsz, type, then name and desc, each padded)."""
    out = []
    for offset, size, align in blobs:
        align = 8 if align == 8 else 4
        data = r.bytes(offset, size, "a note segment")
        sub, p = _Reader(data), 0
        while p + _NHDR.size <= len(data):
            namesz, descsz, type_ = sub.unpack(_NHDR, p, "a note header")
            name_at = p + _NHDR.size
            desc_at = name_at + (namesz + align - 1) // align * align
            name = sub.bytes(name_at, namesz, "a note's owner name").rstrip(b"\0")
            desc = sub.bytes(desc_at, descsz, "a note's description")
            out.append((name.decode("latin-1"), type_, desc))
            p = desc_at + (descsz + align - 1) // align * align
    return out


def _metadata(notes: list[tuple[str, int, bytes]]) -> dict:
    for owner, type_, desc in notes:
        if owner == "AMDGPU" and type_ == NT_AMDGPU_METADATA:
            try:
                import msgpack
            except ImportError:
                raise ImportError("reading AMD code objects needs the msgpack package: pip install "
                                  "msgpack") from None
            try:
                md = msgpack.unpackb(desc, raw=False, strict_map_key=False)
            except Exception as e:  # noqa: BLE001 - any decoding failure means a malformed note
                raise CodeObjectError(f"the NT_AMDGPU_METADATA note is not valid MessagePack: "
                                      f"{type(e).__name__}: {e}") from None
            if not isinstance(md, dict):
                raise CodeObjectError(f"the NT_AMDGPU_METADATA note holds a {type(md).__name__}, "
                                      f"not a map")
            return md
    raise CodeObjectError("no NT_AMDGPU_METADATA note (owner 'AMDGPU', type 32): not a code object "
                          "of version 3 or later")


# --- metadata fields ----------------------------------------------------------------------------

def _get(m: Mapping, key: str, kind: type | tuple, where: str, default: Any = ...) -> Any:
    """``m[key]``, checked to be of ``kind`` (ints also non-negative); raises CodeObjectError."""
    if key not in m:
        if default is not ...:
            return default
        raise CodeObjectError(f"{where}: the metadata lacks the required field {key!r}")
    v = m[key]
    if kind is int:
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise CodeObjectError(f"{where}: {key} must be a non-negative integer, got {v!r}")
    elif not isinstance(v, kind):
        raise CodeObjectError(f"{where}: {key} has the wrong type ({type(v).__name__})")
    return v


def _kernel(md: Mapping, i: int, symbols: Mapping[str, Symbol], descriptor: Any) -> KernelInfo:
    if not isinstance(md, dict):
        raise CodeObjectError(f"amdhsa.kernels[{i}] is not a map")
    name = _get(md, ".name", str, f"amdhsa.kernels[{i}]")
    where = f"kernel '{name}'"
    kd = _get(md, ".symbol", str, where)
    args = []
    for j, a in enumerate(_get(md, ".args", list, where, [])):
        if not isinstance(a, dict):
            raise CodeObjectError(f"{where}: argument {j} is not a map")
        w = f"{where}, argument {j}"
        args.append(ArgInfo(_get(a, ".offset", int, w), _get(a, ".size", int, w),
                            _get(a, ".value_kind", str, w), _get(a, ".name", str, w, None),
                            _get(a, ".address_space", str, w, None)))
    size = _get(md, ".kernarg_segment_size", int, where)
    for a in args:
        if a.offset + a.size > size:
            raise CodeObjectError(f"{where}: argument {a.name or a.value_kind} at bytes "
                                  f"{a.offset}..{a.offset + a.size} lies beyond the {size}-byte "
                                  f"kernarg segment")
    return KernelInfo(
        name=name, symbol=kd[:-3] if kd.endswith(".kd") else name, kd_symbol=kd, args=tuple(args),
        kernarg_segment_size=size,
        kernarg_segment_align=_get(md, ".kernarg_segment_align", int, where),
        group_segment_fixed_size=_get(md, ".group_segment_fixed_size", int, where),
        private_segment_fixed_size=_get(md, ".private_segment_fixed_size", int, where),
        wavefront_size=_get(md, ".wavefront_size", int, where),
        sgpr_count=_get(md, ".sgpr_count", int, where),
        vgpr_count=_get(md, ".vgpr_count", int, where),
        agpr_count=_get(md, ".agpr_count", int, where, 0),
        max_flat_workgroup_size=_get(md, ".max_flat_workgroup_size", int, where),
        uses_dynamic_stack=bool(_get(md, ".uses_dynamic_stack", bool, where, False)),
        descriptor=descriptor(kd, where), metadata=md)


def _features(e_flags: int, abi_version: int) -> tuple[str | None, str | None]:
    """(xnack, sramecc) settings from e_flags."""
    if abi_version >= 2:  # code object v4 and later
        return _FEATURE_V4[(e_flags >> 8) & 3], _FEATURE_V4[(e_flags >> 10) & 3]
    return ("on" if e_flags & _XNACK_V3 else "off"), ("on" if e_flags & _SRAMECC_V3 else "off")


def _target_processor(md: Mapping) -> str | None:
    """The processor of ``amdhsa.target`` ('amdgcn-amd-amdhsa--gfx90a:xnack+' → 'gfx90a')."""
    t = md.get("amdhsa.target")
    if not isinstance(t, str) or "--" not in t:
        return None
    return t.split("--", 1)[1].split(":", 1)[0] or None


# --- the entry point ----------------------------------------------------------------------------

def read_code_object(data: bytes) -> CodeObject:
    """Parse an AMD HSA code object (the bytes of a ``.hsaco``, or an unlinked object).

    Raises CodeObjectError (a ValueError) for anything that is not a well-formed code object of
    version 3 or later: not ELF64 little-endian, not EM_AMDGPU / HSA, truncated headers or tables,
    a missing or malformed metadata note, metadata that disagrees with the ELF header, a kernel whose
    descriptor symbol is missing or not 64 bytes. Raises ImportError when msgpack is not installed."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"read_code_object takes bytes, got {type(data).__name__}")
    r = _Reader(bytes(data))
    abi, e_type, machine, flags, phoff, phnum, shoff, shnum = _header(r)
    version = CODE_OBJECT_VERSION_OF_ABI.get(abi)
    if version is None:
        known = ", ".join(f"{a} = v{v}" for a, v in CODE_OBJECT_VERSION_OF_ABI.items())
        raise CodeObjectError(f"unknown EI_ABIVERSION {abi} for ELFOSABI_AMDGPU_HSA (known: {known})")
    if version < 3:
        raise CodeObjectError("code object v2 (EI_ABIVERSION 0) is not supported: its metadata is YAML")
    sections = _sections(r, shoff, shnum)

    blobs = []
    if phoff and phnum:
        if phnum > (len(r.data) - phoff) // _PHDR.size:
            raise CodeObjectError(f"truncated: {phnum} program headers at byte {phoff} do not fit in "
                                  f"the file ({len(r.data)} bytes)")
        for i in range(phnum):
            p_type, _flags, off, _va, _pa, filesz, _memsz, align = r.unpack(
                _PHDR, phoff + i * _PHDR.size, f"program header {i}")
            if p_type == _PT_NOTE:
                blobs.append((off, filesz, align))
    if not blobs:  # a relocatable object has no segments: its notes are in SHT_NOTE sections
        blobs = [(s.offset, s.size, s.align) for s in sections if s.type == _SHT_NOTE]
    md = _metadata(_notes(r, blobs))

    mv = _get(md, "amdhsa.version", list, "the metadata")
    if len(mv) != 2 or not all(isinstance(x, int) for x in mv):
        raise CodeObjectError(f"amdhsa.version must be [major, minor], got {mv!r}")
    if tuple(mv) not in _METADATA_VERSIONS.get(version, {tuple(mv)}):
        expected = " or ".join(str(list(v)) for v in sorted(_METADATA_VERSIONS[version]))
        raise CodeObjectError(f"EI_ABIVERSION {abi} says code object v{version}, but its metadata's "
                              f"amdhsa.version is {mv} (v{version} metadata is {expected})")

    mach = flags & EF_AMDGPU_MACH
    arch = MACH_NAMES.get(mach)
    named = _target_processor(md)
    if arch is None:
        arch = named or f"unknown-mach-0x{mach:03x}"
    elif named is not None and named != arch:
        raise CodeObjectError(f"e_flags say {arch} (EF_AMDGPU_MACH 0x{mach:03x}) but amdhsa.target "
                              f"says {md.get('amdhsa.target')}")
    xnack, sramecc = _features(flags, abi)
    target_id = arch + "".join(f":{n}{'+' if v == 'on' else '-'}"
                               for n, v in (("sramecc", sramecc), ("xnack", xnack))
                               if v in ("on", "off"))
    symbols = _symbols(r, sections)

    def descriptor(kd: str, where: str) -> KernelDescriptor:
        sym = symbols.get(kd)
        if sym is None:
            raise CodeObjectError(f"{where}: its kernel descriptor symbol {kd!r} is not in the "
                                  f"symbol table")
        if sym.size != KERNEL_DESCRIPTOR_SIZE:
            raise CodeObjectError(f"{where}: {kd} is {sym.size} bytes, a kernel descriptor is "
                                  f"{KERNEL_DESCRIPTOR_SIZE}")
        if not 0 < sym.section < min(len(sections), _SHN_LORESERVE) \
                or sections[sym.section].type == _SHT_NOBITS:
            raise CodeObjectError(f"{where}: {kd} is not in a section with contents")
        s = sections[sym.section]
        start = sym.value if e_type == ET_REL else sym.value - s.addr
        if not 0 <= start <= s.size - KERNEL_DESCRIPTOR_SIZE:
            raise CodeObjectError(f"{where}: {kd} (at 0x{sym.value:x}) lies outside its section")
        return KernelDescriptor.from_bytes(r.bytes(s.offset + start, KERNEL_DESCRIPTOR_SIZE, kd))

    kernels = tuple(_kernel(k, i, symbols, descriptor)
                    for i, k in enumerate(_get(md, "amdhsa.kernels", list, "the metadata", [])))
    return CodeObject(machine=machine, elf_type=e_type, e_flags=flags, abi_version=abi, arch=arch,
                      xnack=xnack, sramecc=sramecc, target_id=target_id, code_object_version=version,
                      metadata=md, symbols=symbols, kernels=kernels)


__all__ = ["read_code_object", "CodeObject", "KernelInfo", "ArgInfo", "KernelDescriptor", "Symbol",
           "CodeObjectError", "EM_AMDGPU", "ELFOSABI_AMDGPU_HSA", "CODE_OBJECT_VERSION_OF_ABI",
           "MACH_NAMES", "NT_AMDGPU_METADATA", "KERNEL_DESCRIPTOR_SIZE", "ET_REL", "ET_DYN"]
