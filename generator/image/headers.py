"""The ELF file's own headers: identification, the ELF64 header, program headers and section headers.

Read with ``struct``, not pyelftools: pyelftools builds a full object per
section on iteration (for ``.hash``/``.gnu.hash`` that parses the whole
table), and only the header fields are needed.  A contradiction in the
headers is a ``_Malformed`` in plain words; ``elf.KernelImage`` turns it
into the one-line UserError.
"""

import struct
from collections.abc import Sequence
from typing import NamedTuple

from .. import isa
from ..common.errors import UserError


_SHF_ALLOC = 0x2
_SHF_EXECINSTR = 0x4


class _Malformed(ValueError):
    """A contradiction in the file found by this module, said in plain words (no Python internals)."""


def type_description(e_type: int) -> str:
    """An ELF file type for a message: its name, or the number and that no ELF type has it."""
    return ET_NAMES.get(e_type, f"{e_type} (no ELF file type has that number: a corrupt header?)")


def machine_description(e_machine: int) -> str:
    """An ELF machine for a message: its name, or the number and that kinstkit does not know it."""
    return EM_NAMES.get(e_machine, f"{e_machine} (an architecture kinstkit does not know)")


class ElfIdent(NamedTuple):
    """The identification and type fields, readable from any ELF file of any class or byte order."""

    elf_class: int  # EI_CLASS: 1 ELF32, 2 ELF64
    data: int  # EI_DATA: 1 little-endian, 2 big-endian
    e_type: int
    e_machine: int

    @property
    def type_name(self) -> str:
        return type_description(self.e_type)

    @property
    def machine_name(self) -> str:
        return machine_description(self.e_machine)


ET_NAMES = {0: "ET_NONE", 1: "ET_REL", 2: "ET_EXEC", 3: "ET_DYN", 4: "ET_CORE"}
EM_NAMES = {3: "EM_386", 21: "EM_PPC64", 40: "EM_ARM", 62: "EM_X86_64", 183: "EM_AARCH64", 243: "EM_RISCV"}


def read_ident(path: str) -> ElfIdent:
    """The ELF identification of ``path``; a file that cannot be read or is not ELF is a UserError."""
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not an ELF file") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        raise UserError(f"{path}: not an ELF file")
    e_type, e_machine = struct.unpack_from("<HH" if head[5] != 2 else ">HH", head, 16)
    return ElfIdent(head[4], head[5], e_type, e_machine)


class Segment(NamedTuple):
    """One PT_LOAD program header."""

    vaddr: int
    memsz: int
    flags: int  # PF_X 1, PF_W 2, PF_R 4


class _Shdr(NamedTuple):
    """A raw section header: spec names, no pyelftools section object.

    pyelftools builds a full object per section on iteration, and for
    .hash/.gnu.hash that means parsing the whole table -- a third of a second
    on libLLVM.  We only need the header fields and the bytes.
    """

    name: str
    sh_type: int
    sh_flags: int
    sh_addr: int
    sh_offset: int
    sh_size: int
    sh_link: int
    sh_info: int
    sh_addralign: int
    sh_entsize: int


_SHT_SYMTAB = 2
_SHT_RELA = 4
_SHT_NOTE = 7
_SHT_NOBITS = 8
_SHT_REL = 9
_SHT_DYNSYM = 11


class _Ehdr(NamedTuple):
    """The ELF64 header fields kinstkit reads."""

    e_type: int
    e_machine: int
    e_phoff: int
    e_shoff: int
    e_phentsize: int
    e_phnum: int
    e_shentsize: int
    e_shnum: int
    e_shstrndx: int


_EHDR = struct.Struct("<16xHHIQQQIHHHHHH")


def _elf_header(data: Sequence[int]) -> _Ehdr:
    """The ELF64 header (``_check_ident`` has seen that the file is long enough for it)."""
    e_type, e_machine, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, shstrndx = \
        _EHDR.unpack_from(data, 0)
    return _Ehdr(e_type, e_machine, phoff, shoff, phentsize, phnum, shentsize, shnum, shstrndx)


class _Phdr(NamedTuple):
    """A raw ELF64 program header."""

    p_type: int
    p_flags: int
    p_offset: int
    p_vaddr: int
    p_paddr: int
    p_filesz: int
    p_memsz: int
    p_align: int


_PT_LOAD = 1
_PT_NOTE = 4
_PN_XNUM = 0xFFFF
_PHDR = struct.Struct("<IIQQQQQQ")


def _program_headers(data: Sequence[int], hdr: _Ehdr, shdrs: list["_Shdr"]) -> list[_Phdr]:
    """Every program header (none in an ET_REL file), extended numbering included."""
    phnum = hdr.e_phnum
    if phnum == _PN_XNUM and shdrs:
        phnum = shdrs[0].sh_info
    if hdr.e_phoff == 0 or phnum == 0:
        return []
    if hdr.e_phentsize != _PHDR.size:
        raise _Malformed(f"the program header size is {hdr.e_phentsize} bytes; ELF64 program headers are 56")
    end = hdr.e_phoff + phnum * _PHDR.size
    if end > len(data):
        raise _Malformed(f"the program headers end at byte {end}, past the file's end ({len(data)} bytes)")
    return [_Phdr(*_PHDR.unpack_from(data, hdr.e_phoff + i * _PHDR.size)) for i in range(phnum)]


def _section_headers(data: Sequence[int], hdr: _Ehdr) -> list[_Shdr]:
    """Every section header, read with ``struct`` (extended numbering included)."""
    shoff, shnum, shentsize, shstrndx = hdr.e_shoff, hdr.e_shnum, hdr.e_shentsize, hdr.e_shstrndx
    if shoff == 0:
        return []
    if shentsize != 64:
        raise _Malformed(f"the section header size is {shentsize} bytes; ELF64 section headers are 64")
    fmt = struct.Struct("<IIQQQQIIQQ")
    if shoff + 64 > len(data):
        raise _Malformed(f"the section headers start at byte {shoff}, past the file's end ({len(data)} bytes)")
    first = fmt.unpack_from(data, shoff)
    if shnum == 0:
        shnum = first[5]  # sh_size of section 0
    if shstrndx == 0xFFFF:
        shstrndx = first[6]  # sh_link of section 0
    if shoff + 64 > len(data) or shoff + shnum * 64 > len(data):
        raise _Malformed(f"the section headers end at byte {shoff + shnum * 64}, past the file's end "
                         f"({len(data)} bytes)")
    raw = [fmt.unpack_from(data, shoff + i * 64) for i in range(shnum)]
    if shstrndx >= shnum:
        raise _Malformed(f"the section name table is section {shstrndx}, but there are {shnum} sections")
    strtab = b""
    if 0 < shstrndx < shnum:
        st = raw[shstrndx]
        strtab = bytes(data[st[4] : st[4] + st[5]])
    out = []
    for r in raw:
        end = strtab.find(b"\0", r[0])
        name = strtab[r[0] : end if end >= 0 else len(strtab)].decode("utf-8", "replace")
        out.append(_Shdr(name, *r[1:]))
    return out


def _check_ident(path: str, data: Sequence[int]) -> None:
    """Reject non-ELF and 32-bit files before pyelftools sees them."""
    if len(data) == 0:
        raise UserError(f"{path}: empty file; pass a kernel, .ko or shared object")
    if len(data) < 16 or bytes(data[:4]) != b"\x7fELF":
        raise UserError(f"{path}: not an ELF file; pass a kernel, .ko or shared object")
    if data[4] not in (1, 2) or data[5] not in (1, 2):
        raise UserError(f"{path}: corrupt ELF file: its class byte is {data[4]} and its byte-order byte {data[5]}, "
                        "and ELF has only 1 and 2 for each; re-copy the file or rebuild it")
    if data[4] != 2:
        raise UserError(f"{path}: 32-bit ELF; kinstkit reads ELF64 images ({', '.join(isa.SUPPORTED)})")
    if data[5] != 1:
        raise UserError(f"{path}: big-endian ELF; kinstkit reads little-endian images ({', '.join(isa.SUPPORTED)})")
    if len(data) < 64:
        raise UserError(f"{path}: truncated ELF header ({len(data)} bytes); re-copy the file")
