"""Stage 1: the kernel image.

Reads a little-endian ELF64 file of an ISA kinstkit knows, of any of the
kinds users hand us -- an ET_EXEC kernel (FreeBSD ``/boot/kernel/kernel``,
Linux ``vmlinux``), an ET_REL module (``.ko``) or an ET_DYN shared object --
and answers the questions later stages ask: which functions are there, what
bytes lie at an address, which relocation fills a field, which segments load
where, what the build-id and the ISA are.  This is kinstkit's one ELF reader:
the ``.ko`` checks, the harness and the generators all read through it.

pyelftools reads the DWARF.  The ELF, section and program headers and the
symbol tables are unpacked with ``struct``: ``iter_symbols()`` runs at
~45 k symbols/s and a kernel has hundreds of thousands, and importing
pyelftools' ``ELFFile`` (which brings its DWARF and construct modules) costs
20 ms, a fifth of summarising a 1 MB library.  So ``ELFFile`` is made, and
imported, only when DWARF is asked for.

The image's ISA (``generator.isa``) comes from ``e_machine``; it says which
relocation types exist and how to apply them.

ET_REL sections have no addresses.  Like FreeBSD's ``link_elf_obj.c`` we lay the
SHF_ALLOC sections out one after another (honouring ``sh_addralign``) at a
synthetic base, and apply the relocations whose symbols are defined in the
file, so that displacements read from the bytes are the ones the loaded module
will have.  Relocations against undefined symbols (kernel functions such as
``__fentry__``) cannot be resolved offline, nor can types we do not apply (GOT,
TLS); they are kept as unresolved ``Reloc`` records so that callers can name
the symbolic target instead of a bogus address.  Relocations index the raw
symbol table, so ``symbols()`` keeps every entry, STT_FILE included.

Every malformed-file failure, whether found in ``open`` or later by a lazily
parsing method, is a one-line ``UserError``.
"""

from __future__ import annotations

import bisect
import functools
import gc
import io
import itertools
import mmap
import operator
import os
import struct
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

from elftools.common.exceptions import ELFError

from .. import isa
from ..common.errors import UserError
from ..isa.contract import Isa

# Base address given to the first section of an ET_REL file.  Nonzero so that
# a zero displacement or a null pointer never looks like a valid address.
REL_BASE = 0x10000

_SHF_ALLOC = 0x2
_SHF_EXECINSTR = 0x4
_STT_FUNC = 2
_STT_SECTION = 3
_STT_FILE = 4
_STB_NAMES = {0: "local", 1: "global", 2: "weak"}
_SHN_UNDEF = 0
_SHN_ABS = 0xFFF1
_SHN_COMMON = 0xFFF2
_NOT_HERE = (_SHN_UNDEF, _SHN_ABS, _SHN_COMMON)  # a symbol with this st_shndx is no function of the image

# What pyelftools and struct raise on malformed bytes.  Caught where the file
# is parsed (eagerly in ``open``, lazily in the guarded methods) and turned into
# a one-line UserError: bad input is never a traceback.  pyelftools' construct
# errors join them once ``ELFFile`` is imported (``_elffile``): before that
# nothing can raise one.
_PARSE_ERRORS: Tuple[type, ...] = (ELFError, struct.error, ValueError, IndexError, KeyError, OverflowError)

_T = TypeVar("_T")


def _guarded(method: Callable[..., _T]) -> Callable[..., _T]:
    """Turn a parse error inside a lazily-parsing method into a UserError."""

    @functools.wraps(method)
    def wrapper(self: "KernelImage", *args, **kwargs) -> _T:
        try:
            return method(self, *args, **kwargs)
        except _PARSE_ERRORS as e:
            raise _corrupt(self.path, e) from None

    return wrapper


class _Malformed(ValueError):
    """A contradiction in the file found by this module, said in plain words (no Python internals)."""


# What a parse error from pyelftools or ``struct`` means, in plain words: their
# own texts ("unpack_from requires a buffer of at least 64 bytes", "Python int
# too large to convert to C ssize_t") talk about Python, not about the file.
_MEANINGS: Tuple[Tuple[type, str], ...] = (
    (struct.error, "a header or table runs past the end of the file"),
    (OverflowError, "an offset or size is larger than any file"),
    (IndexError, "an index points past the end of its table"),
    (KeyError, "a header field holds a value no ELF file has"),
)


def _corrupt(path: str, e: BaseException) -> UserError:
    """One line for a file whose bytes contradict its own headers: the file, what is wrong, what to do."""
    if isinstance(e, _Malformed):
        what = str(e)
    elif isinstance(e, ELFError) and str(e).strip():
        what = " ".join(str(e).split())
    else:
        what = next((m for kind, m in _MEANINGS if isinstance(e, kind)), "a header field holds an impossible value")
    return UserError(f"{path}: corrupt ELF file: {what}; re-copy the file or rebuild it")


def corrupt_function(path: str, f: "Function") -> UserError:
    """The one line for a function symbol that does not lie inside its section (``open`` and ``probes``)."""
    name = f.qualified or f"at {f.address:#x} (no name)"
    return UserError(f"{path}: corrupt symbol table: function {name} lies outside its section; "
                     "re-copy the file or rebuild it")


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


def _program_headers(data: Sequence[int], hdr: _Ehdr, shdrs: List["_Shdr"]) -> List[_Phdr]:
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


def _elffile(data: Sequence[int]):
    """pyelftools' ``ELFFile`` over ``data``, imported on first use; from then on its construct errors are
    parse errors too."""
    global _PARSE_ERRORS, _MEANINGS
    from elftools.construct.core import ConstructError
    from elftools.elf.elffile import ELFFile

    if ConstructError not in _PARSE_ERRORS:
        _PARSE_ERRORS += (ConstructError,)
        _MEANINGS += ((ConstructError, "a header runs past the end of the file"),)
    return ELFFile(io.BytesIO(data) if isinstance(data, bytes) else _MmapStream(data))


def _section_headers(data: Sequence[int], hdr: _Ehdr) -> List[_Shdr]:
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


class Section(NamedTuple):
    """One SHF_ALLOC section, with the address it has (or was given).

    A NamedTuple, as the other records here: ``dataclasses`` imports
    ``inspect``, which costs a small image's summary 8 ms."""

    name: str
    index: int
    addr: int  # sh_addr, or the synthetic address for ET_REL
    offset: int  # sh_offset in the file
    size: int  # sh_size
    executable: bool  # SHF_EXECINSTR
    nobits: bool  # SHT_NOBITS: no bytes in the file

    @property
    def label(self) -> str:
        """The name for messages; a section whose name is empty (a corrupt name offset) by its index."""
        return self.name or f"#{self.index} (no name)"


class Function(NamedTuple):
    """A function symbol: STT_FUNC with a nonzero size.

    Aliases (several names at one address and size) are folded into one
    Function; ``name`` is the first global name, ``aliases`` the others.
    A NamedTuple: a kernel has 50,000, made before any work can start.
    """

    name: str
    address: int
    size: int
    binding: str  # "global", "local" or "weak"
    file: Optional[str]  # STT_FILE that precedes a local symbol
    section: str
    aliases: Tuple[str, ...] = ()

    @property
    def qualified(self) -> str:
        """``name@file`` for a local symbol, the plain name otherwise."""
        if self.binding == "local" and self.file:
            return f"{self.name}@{self.file}"
        return self.name


class Reloc(NamedTuple):
    """A relocation that lands in an allocated section (ET_REL only).

    A NamedTuple: a large module has hundreds of thousands."""

    address: int  # where the field is (synthetic address)
    type: str  # R_X86_64_*
    symbol: str  # symbol name ("" for a section symbol without a name)
    addend: int
    resolved: bool  # True when applied: a type we apply, against a symbol defined here
    width: int = 4  # bytes of the field it fills (0: a type kinstkit does not know)


class _Sym(NamedTuple):
    """One symbol table entry (a NamedTuple: kernels have hundreds of thousands)."""

    name: str
    value: int
    size: int
    type: int
    bind: int
    shndx: int
    file: Optional[str]


class KernelImage:
    """A read-only view of one ELF image.  Open it with ``KernelImage.open``."""

    def __init__(self, path: str, data: bytes):
        self.path = path
        self._data = data
        self._ehdr = _elf_header(data)
        self._elf = None  # pyelftools' ELFFile, made for DWARF only (``_elffile``)
        self.e_type: str = ET_NAMES.get(self._ehdr.e_type, str(self._ehdr.e_type))
        self.isa: Isa  # set by _check_shape: the image's ISA (stage 2); None only with open(any_machine=True)
        self._shdrs: List[_Shdr] = _section_headers(data, self._ehdr)
        self.sections: List[Section] = self._layout_sections()
        self._starts = [s.addr for s in self.sections]
        self._by_index: Dict[int, Section] = {s.index: s for s in self.sections}
        self._rela_for: Optional[Dict[int, List[object]]] = None
        self._relocated: Dict[int, bytes] = {}
        self._relocs: Optional[List[Reloc]] = None
        self._reloc_addrs: List[int] = []
        self._symbols: Optional[List[_Sym]] = None
        self._functions: Optional[List[Function]] = None
        self._function_starts: Optional[List[int]] = None
        self._data_in_code: Optional[List[Tuple[int, int]]] = None

    # -- opening ----------------------------------------------------------

    @classmethod
    def open(cls, path: str, *, any_machine: bool = False) -> "KernelImage":
        """Open and validate ``path``; every problem is a one-line UserError.

        Every command opens files through here, so a corrupt file is found,
        and reported with the same line, by each of them (``validate``).
        ``any_machine`` accepts an ELF64 file of any architecture, whose ISA
        is then None and whose relocations are not read: check-ko judges a
        module's architecture itself, as a check that fails rather than as
        bad input.
        """
        try:
            with open(path, "rb") as f:
                try:
                    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                except ValueError:  # empty file
                    data = b""
        except FileNotFoundError:
            raise UserError(f"{path}: no such file; pass --kernel PATH of an ELF image")
        except IsADirectoryError:
            raise UserError(f"{path}: is a directory; pass the kernel file itself")
        except OSError as e:
            raise UserError(f"{path}: cannot read: {e.strerror}")
        _check_ident(path, data)
        try:
            img = cls(path, data)
            img._check_shape(any_machine)
        except _PARSE_ERRORS as e:
            raise _corrupt(path, e) from None
        img._validate()
        return img

    def _validate(self) -> None:
        """Parse what is otherwise parsed lazily -- the build-id note, the symbol table and the functions
        folded from it, each inside its section, and an ET_REL file's relocations -- so that corruption
        anywhere in them is found at open, whichever command opened the file."""
        self.build_id
        lo = hi = 0  # the section of the function before: functions are in address order
        for f in self.functions():
            if not lo <= f.address < hi:
                sec = self.section_at(f.address)
                if sec is None:
                    raise corrupt_function(self.path, f)
                lo, hi = sec.addr, sec.addr + sec.size
            if f.address + f.size > hi:
                raise corrupt_function(self.path, f)
        if self.e_type == "ET_REL" and self.isa is not None:
            self.relocations()

    def _check_shape(self, any_machine: bool = False) -> None:
        try:
            self.isa = isa.for_machine(self.machine)
        except UserError as e:
            if not any_machine:
                raise UserError(f"{self.path}: {e}") from None
            self.isa = None
        if self.e_type not in ("ET_EXEC", "ET_REL", "ET_DYN"):
            raw = struct.unpack_from("<H", self._data, 16)[0]
            raise UserError(
                f"{self.path}: ELF type {type_description(raw)} is not a kernel (ET_EXEC), a module (ET_REL) or a "
                "shared object (ET_DYN); pass one of those"
            )
        size = len(self._data)
        for s in self.sections:
            if not s.nobits and s.offset + s.size > size:
                raise UserError(
                    f"{self.path}: truncated: section {s.label} ends at byte "
                    f"{s.offset + s.size} but the file has {size}; re-copy the file"
                )

    # -- identity ---------------------------------------------------------

    @property
    def machine(self) -> str:
        """pyelftools' name of ``e_machine`` (``EM_X86_64``), or its number where pyelftools has no name."""
        raw = self._ehdr.e_machine
        if raw in EM_NAMES:
            return EM_NAMES[raw]
        from elftools.elf.enums import ENUM_E_MACHINE  # only for a machine kinstkit does not read

        names = {v: k for k, v in ENUM_E_MACHINE.items() if isinstance(v, int)}
        return names.get(raw, str(raw))

    @property
    def arch(self) -> str:
        """The ISA's name (``amd64``)."""
        return self.isa.name

    @property
    @_guarded
    def build_id(self) -> Optional[str]:
        """The NT_GNU_BUILD_ID note as hex, or None when the image has none."""
        for sec in self._shdrs:
            if sec.sh_type != _SHT_NOTE:
                continue
            data = self._data[sec.sh_offset : sec.sh_offset + sec.sh_size]
            pos = 0
            while pos + 12 <= len(data):
                namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
                name_end = pos + 12 + namesz
                desc = pos + 12 + (namesz + 3) // 4 * 4
                if desc + descsz > len(data):
                    break
                if ntype == 3 and bytes(data[pos + 12 : name_end]).rstrip(b"\0") == b"GNU":
                    return bytes(data[desc : desc + descsz]).hex()
                pos = desc + (descsz + 3) // 4 * 4
        return None

    def sha256(self) -> str:
        import hashlib

        return hashlib.sha256(self._data).hexdigest()

    @_guarded
    def segments(self) -> List[Segment]:
        """The PT_LOAD segments (none in an ET_REL file)."""
        return [Segment(ph.p_vaddr, ph.p_memsz, ph.p_flags)
                for ph in _program_headers(self._data, self._ehdr, self._shdrs) if ph.p_type == _PT_LOAD]

    @_guarded
    def build_id_note(self) -> Tuple[int, bytes]:
        """(link-time address, bytes) of the NT_GNU_BUILD_ID descriptor in a PT_NOTE segment, or (0, b"")."""
        for ph in _program_headers(self._data, self._ehdr, self._shdrs):
            if ph.p_type != _PT_NOTE:
                continue
            data = self._data[ph.p_offset : ph.p_offset + ph.p_filesz]
            align = max(4, ph.p_align or 4)
            off = 0
            while off + 12 <= len(data):
                namesz, descsz, ntype = struct.unpack_from("<III", data, off)
                name_off = off + 12
                desc_off = name_off + ((namesz + align - 1) & ~(align - 1))
                if ntype == 3 and bytes(data[name_off : name_off + namesz]) == b"GNU\0":
                    return ph.p_vaddr + desc_off, bytes(data[desc_off : desc_off + descsz])
                off = desc_off + ((descsz + align - 1) & ~(align - 1))
        return 0, b""

    # -- sections and bytes -----------------------------------------------

    def _layout_sections(self) -> List[Section]:
        out = []
        next_addr = REL_BASE
        for idx, sec in enumerate(self._shdrs):
            flags = sec.sh_flags
            if not flags & _SHF_ALLOC or sec.sh_size == 0:
                continue
            addr = sec.sh_addr
            if self.e_type == "ET_REL":
                align = max(sec.sh_addralign, 1)
                addr = (next_addr + align - 1) // align * align
                next_addr = addr + sec.sh_size
            out.append(
                Section(
                    name=sec.name,
                    index=idx,
                    addr=addr,
                    offset=sec.sh_offset,
                    size=sec.sh_size,
                    executable=bool(flags & _SHF_EXECINSTR),
                    nobits=sec.sh_type == _SHT_NOBITS,
                )
            )
        out.sort(key=lambda s: s.addr)
        return out

    def section_at(self, address: int) -> Optional[Section]:
        i = bisect.bisect_right(self._starts, address) - 1
        while i >= 0:
            s = self.sections[i]
            if s.addr <= address < s.addr + s.size:
                return s
            if s.addr + s.size <= address:
                return None
            i -= 1
        return None

    def section_by_index(self, index: int) -> Optional[Section]:
        return self._by_index.get(index)

    def has_section(self, name: str) -> bool:
        """True when a section called ``name`` exists, of any kind (``.debug_info``, ``.gnu_debuglink``)."""
        return any(s.name == name for s in self._shdrs)

    def section_data(self, name: str) -> Optional[bytes]:
        """The raw file bytes of the first section called ``name``, allocated or not; None when there is none
        or it has no bytes in the file (SHT_NOBITS)."""
        for s in self._shdrs:
            if s.name == name:
                if s.sh_type == _SHT_NOBITS or s.sh_offset + s.sh_size > len(self._data):
                    return None
                return bytes(self._data[s.sh_offset : s.sh_offset + s.sh_size])
        return None

    def section_view(self, name: str) -> Optional[Tuple[memoryview, int]]:
        """The file bytes of the first section called ``name`` without a copy, and its ``sh_flags``; None when
        there is none or it has no bytes in the file.  For the DWARF reader: a kernel's ``.debug_info`` is
        hundreds of MB, read a unit at a time from the mapping."""
        for s in self._shdrs:
            if s.name == name:
                if s.sh_type == _SHT_NOBITS or s.sh_offset + s.sh_size > len(self._data):
                    return None
                return memoryview(self._data)[s.sh_offset : s.sh_offset + s.sh_size], s.sh_flags
        return None

    def section_headers_digest(self) -> str:
        """The SHA-256 of the ELF header and the section headers: names an image without a build-id cheaply."""
        import hashlib

        return hashlib.sha256(bytes(self._data[:64]) + repr(self._shdrs).encode()).hexdigest()

    @_guarded
    def dwarf_info(self):
        """pyelftools' ``DWARFInfo`` of this file (compressed sections inflated); the caller checks
        ``has_section(".debug_info")`` first."""
        if self._elf is None:
            self._elf = _elffile(self._data)
        return self._elf.get_dwarf_info(relocate_dwarf_sections=self.e_type == "ET_REL")

    @_guarded
    def read(self, address: int, size: int) -> bytes:
        """The bytes at ``address``; relocated for ET_REL.  Must lie in one section."""
        s = self.section_at(address)
        if s is None or address + size > s.addr + s.size:
            raise UserError(
                f"{self.path}: address {address:#x}+{size} is not inside one allocated section"
            )
        if s.nobits:
            return bytes(size)
        start = address - s.addr
        if self.e_type == "ET_REL":
            return self._section_bytes(s)[start : start + size]
        return bytes(self._data[s.offset + start : s.offset + start + size])

    def read_in(self, sec: Section, address: int, size: int) -> bytes:
        """``read`` for a caller that holds the section and has checked that ``[address, address + size)``
        lies in it: whole-image work reads 50,000 functions this way without a lookup each."""
        start = address - sec.addr
        if sec.nobits:
            return bytes(size)
        if self.e_type == "ET_REL":
            return self._section_bytes(sec)[start : start + size]
        return self._data[sec.offset + start : sec.offset + start + size]

    def _section_bytes(self, s: Section) -> bytes:
        """A section's bytes with the relocations we can resolve applied."""
        cached = self._relocated.get(s.index)
        if cached is not None:
            return cached
        buf = bytearray(self._data[s.offset : s.offset + s.size])
        insert = self.isa.reloc_insert
        for r, width, pcrel, value in self._raw_relocs_for(s):
            if not r.resolved:
                continue
            if pcrel:
                value -= r.address
            at = r.address - s.addr
            field = insert(r.type, bytes(buf[at : at + width]), value) if insert is not None else None
            if field is not None:  # a bit field of an instruction word (arm64, riscv)
                buf[at : at + width] = field
                continue
            fmt, mask = ("<Q", 0xFFFFFFFFFFFFFFFF) if width == 8 else ("<I", 0xFFFFFFFF)
            struct.pack_into(fmt, buf, r.address - s.addr, value & mask)
        self._relocated[s.index] = bytes(buf)
        return self._relocated[s.index]

    # -- relocations (ET_REL) ---------------------------------------------

    def _rela_sections(self) -> Dict[int, List[object]]:
        """Relocation sections by the index of the section they apply to."""
        if self._rela_for is None:
            out: Dict[int, List[object]] = {}
            for rsec in self._shdrs:
                if rsec.sh_type in (_SHT_RELA, _SHT_REL):
                    out.setdefault(rsec.sh_info, []).append(rsec)
            self._rela_for = out
        return self._rela_for

    def _raw_relocs_for(self, s: Section) -> Iterator[Tuple[Reloc, int, bool, int]]:
        """Each relocation of ``s`` we understand, with its width, pc-relativity
        and ``S + A``.  SHT_REL keeps its addend in the unrelocated field."""
        syms = self.symbols()
        reloc_type = self.isa.reloc_type
        raw = b"" if s.nobits else self._data[s.offset : s.offset + s.size]
        for rsec in self._rela_sections().get(s.index, ()):
            is_rela = rsec.sh_type == _SHT_RELA
            fmt, step = ("<QQq", 24) if is_rela else ("<QQ", 16)
            data = bytes(self._data[rsec.sh_offset : rsec.sh_offset + rsec.sh_size])
            for ent in struct.iter_unpack(fmt, data[: len(data) // step * step]):
                r_offset, r_info = ent[0], ent[1]
                rtype, symidx = r_info & 0xFFFFFFFF, r_info >> 32
                kind = reloc_type(rtype)
                if kind is None or symidx >= len(syms):
                    continue
                name, width, pcrel, applied = kind
                if r_offset + width > s.size:
                    raise UserError(
                        f"{self.path}: corrupt relocation: {name} at offset {r_offset:#x} lies outside "
                        f"section {s.label} ({s.size} bytes); re-copy the file or rebuild it"
                    )
                addend = ent[2] if is_rela else _implicit_addend(raw, r_offset, width)
                sym = syms[symidx]
                value, resolved = self._symbol_address(sym)
                resolved = resolved and applied
                reloc = Reloc(s.addr + r_offset, name, self._reloc_symbol_name(sym), addend, resolved, width)
                yield reloc, width, pcrel, value + addend

    def _reloc_symbol_name(self, sym: _Sym) -> str:
        """The symbol's name; a section symbol (no name) is named after its section."""
        if sym.name or sym.type != _STT_SECTION:
            return sym.name
        sec = self.section_by_index(sym.shndx)
        if sec is not None:
            return sec.name
        if 0 <= sym.shndx < len(self._shdrs):
            return self._shdrs[sym.shndx].name
        return ""

    def _symbol_address(self, sym: _Sym) -> Tuple[int, bool]:
        if sym.shndx in (_SHN_UNDEF, _SHN_COMMON):
            return 0, False
        if sym.shndx == _SHN_ABS:
            return sym.value, True
        if self.e_type != "ET_REL":
            return sym.value, True
        sec = self.section_by_index(sym.shndx)
        if sec is None:
            return 0, False
        return sec.addr + sym.value, True

    @_guarded
    def relocations(self) -> List[Reloc]:
        """All relocations into allocated sections, sorted by address (ET_REL)."""
        if self._relocs is None:
            out: List[Reloc] = []
            if self.e_type == "ET_REL":
                for s in self.sections:
                    out.extend(r for r, _, _, _ in self._raw_relocs_for(s))
            out.sort(key=lambda r: r.address)
            self._relocs = out
            self._reloc_addrs = [r.address for r in out]
        return self._relocs

    @_guarded
    def dynamic_relocations(self) -> Dict[int, Reloc]:
        """ET_DYN: the relocations a loader applies (SHT_RELA with no target section), by address.

        A FreeBSD arm64 or riscv ``.ko`` is linked ``-Bshareable``: a pointer
        in its data is a ``*_RELATIVE`` relocation whose addend is the
        address it designates, or a symbol relocation the kernel linker
        resolves at load.  ``resolved`` is True for a symbol defined in the
        file (``*_RELATIVE`` has none: its addend alone is the address).
        """
        out: Dict[int, Reloc] = {}
        if self.e_type != "ET_DYN":
            return out
        syms, _ = self.dynamic_symbols()
        for rsec in self._shdrs:
            if rsec.sh_type != _SHT_RELA or rsec.sh_info != 0:
                continue
            data = bytes(self._data[rsec.sh_offset : rsec.sh_offset + rsec.sh_size])
            for r_offset, r_info, addend in struct.iter_unpack("<QQq", data[: len(data) // 24 * 24]):
                kind = self.isa.reloc_type(r_info & 0xFFFFFFFF)
                symidx = r_info >> 32
                if kind is None:
                    continue
                sym = syms[symidx] if 0 < symidx < len(syms) else None
                name = sym.name if sym is not None else ""
                defined = sym is None or sym.shndx not in (_SHN_UNDEF, _SHN_COMMON)
                out[r_offset] = Reloc(r_offset, kind.name, name, addend, defined, kind.width)
        return out

    def relocs_in(self, address: int, size: int) -> List[Reloc]:
        """Relocations whose field starts in ``[address, address + size)``."""
        relocs = self.relocations()
        lo = bisect.bisect_left(self._reloc_addrs, address)
        hi = bisect.bisect_left(self._reloc_addrs, address + size)
        return relocs[lo:hi]

    # -- symbols ------------------------------------------------------------

    @_guarded
    def symbols(self) -> List[_Sym]:
        """The symbol table (.symtab, else .dynsym), unpacked in bulk."""
        if self._symbols is None:
            sec = self._symbol_table()
            self._symbols = [] if sec is None else _unpack_symbols(self._data, self._shdrs, sec)
        return self._symbols

    def _symbol_table(self) -> Optional[_Shdr]:
        by_type = {sec.sh_type: sec for sec in reversed(self._shdrs)}
        return by_type.get(_SHT_SYMTAB) or by_type.get(_SHT_DYNSYM)

    @_guarded
    def functions(self) -> List[Function]:
        """Every STT_FUNC with a size, aliases folded, sorted by address."""
        if self._functions is None:
            if self._symbols is None and self.e_type != "ET_REL":
                # Linked images: only the functions' entries (ET_REL keeps every entry: relocations index them).
                sec = self._symbol_table()
                self._functions = [] if sec is None else _linked_functions(self, sec)
            else:
                self._functions = _fold_functions(self, self.symbols())
        return self._functions

    def function_at(self, address: int) -> Optional[Function]:
        """The function whose ``[address, address + size)`` holds ``address``, or None.

        Functions rarely overlap; when they do, the one starting closest
        below ``address`` wins.
        """
        funcs = self.functions()
        if self._function_starts is None:
            self._function_starts = [f.address for f in funcs]
        i = bisect.bisect_right(self._function_starts, address) - 1
        for f in reversed(funcs[max(0, i - 16) : i + 1]):
            if f.address <= address < f.address + f.size:
                return f
        return None

    @_guarded
    def data_in_code(self) -> List[Tuple[int, int]]:
        """Address ranges ``[start, end)`` of executable sections that mapping symbols mark as data, sorted.

        arm64 and riscv objects carry local symbols named ``$d`` (data
        follows), ``$x`` (code follows; ``$a``/``$t`` on 32-bit ARM), with an
        optional ``.suffix`` (RISC-V's ``$x`` may carry the ISA string that
        follows: ``$xrv64i2p1_m2p0...``): a literal pool or a jump table inside
        a function's bounds.  A ``$d`` range ends at the next mapping symbol of
        its section, or the section's end."""
        if self._data_in_code is None:
            marks: List[Tuple[int, bool, int]] = []  # (address, data?, end of its section)
            for s in self.symbols():
                name = s.name
                if s.bind != 0 or len(name) < 2 or name[0] != "$" or name[1] not in "dxat":
                    continue
                if name[2:3] not in ("", ".") and name[1] != "x":  # RISC-V's $x may name its ISA: $xrv64i2p1_...
                    continue
                addr, ok = self._symbol_address(s)
                sec = self.section_at(addr) if ok else None
                if sec is not None and sec.executable:
                    marks.append((addr, name[1] == "d", sec.addr + sec.size))
            marks.sort()
            ranges: List[Tuple[int, int]] = []
            for i, (addr, data, end) in enumerate(marks):
                if not data:
                    continue
                nxt = marks[i + 1][0] if i + 1 < len(marks) else end
                hi = min(nxt, end)
                if ranges and ranges[-1][1] >= addr:
                    ranges[-1] = (ranges[-1][0], max(ranges[-1][1], hi))
                elif hi > addr:
                    ranges.append((addr, hi))
            self._data_in_code = ranges
        return self._data_in_code

    def has_symtab(self) -> bool:
        """True when the image has a full ``.symtab`` (not only the exported ``.dynsym``)."""
        return any(s.sh_type == _SHT_SYMTAB for s in self._shdrs)

    def adopt_symbols(self, other: "KernelImage") -> None:
        """Take ``other``'s symbol table: a stripped image's separate debug file keeps the ``.symtab``
        the image lost, with the same addresses.  Only for linked images (ET_EXEC, ET_DYN), whose
        symbol values are addresses rather than section offsets."""
        if self.e_type == "ET_REL" or other.e_type == "ET_REL":
            raise UserError(
                f"{self.path}: cannot take the symbols of {other.path}: a module's symbols are section-relative"
            )
        self._symbols = other.symbols()
        self._functions = None
        self._function_starts = None
        self._data_in_code = None

    def lookup(self, spec: str) -> Function:
        """Find one function by ``name``, ``name@file`` or ``0xADDRESS``.

        A local name defined in several files is ambiguous: the error lists
        each candidate with the two ways to pick it.
        """
        funcs = self.functions()
        if not funcs:
            raise UserError(
                f"{self.path}: no function symbols (stripped image?); use an unstripped kernel or its debug file"
            )
        if spec.lower().startswith("0x"):
            try:
                addr = int(spec, 16)
            except ValueError:
                raise UserError(f"{spec}: not a hexadecimal address")
            for f in funcs:
                if f.address == addr:
                    return f
            raise UserError(f"{self.path}: no function starts at {spec}")
        name, _, file = spec.partition("@")
        cands = [f for f in funcs if name == f.name or name in f.aliases]
        if file:
            cands = [f for f in cands if f.file and (f.file == file or os.path.basename(f.file) == file)]
        if not cands:
            near = sorted({f.name for f in funcs if name and (name in f.name or f.name in name)})[:5]
            hint = f"; similar: {', '.join(near)}" if near else ""
            raise UserError(f"{self.path}: unknown function '{spec}'{hint}")
        if len(cands) > 1:
            globals_ = [f for f in cands if f.binding != "local"]
            if len(globals_) == 1:
                return globals_[0]
            choices = "; ".join(f"{f.qualified} or {f.address:#x}" for f in cands)
            raise UserError(f"{self.path}: function '{spec}' is ambiguous: pick one of {choices}")
        return cands[0]

    def function_bytes(self, f: Function) -> bytes:
        return self.read(f.address, f.size)

    def read_cstring(self, address: int, limit: int = 4096) -> Optional[bytes]:
        """The NUL-terminated string at ``address``, or None when it is not in the file."""
        sec = self.section_at(address)
        if sec is None or sec.nobits:
            return None
        data = self.read(address, min(limit, sec.addr + sec.size - address))
        end = data.find(b"\0")
        return data if end < 0 else data[:end]

    @_guarded
    def dynamic_symbols(self) -> Tuple[List["_Sym"], str]:
        """The symbols a kernel linker resolves against, and the table's name.

        A FreeBSD kernel is linked ``--export-dynamic`` and its linker looks
        symbols up in ``.dynsym`` (the debug ``.symtab`` is not searched for
        non-debug lookups since FreeBSD 14); an image without ``.dynsym`` (a
        module, the embedded sample kernel) is read through ``.symtab``.
        """
        by_type = {sec.sh_type: sec for sec in reversed(self._shdrs)}
        sec = by_type.get(_SHT_DYNSYM)
        if sec is None:
            return self.symbols(), ".symtab" if _SHT_SYMTAB in by_type else ""
        return _unpack_symbols(self._data, self._shdrs, sec), ".dynsym"


class _MmapStream:
    """A minimal file object over an mmap, so pyelftools does not copy it."""

    def __init__(self, m: mmap.mmap):
        self._m = m
        self._pos = 0

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self._m)}[whence]
        self._pos = base + pos
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        end = len(self._m) if n is None or n < 0 else min(self._pos + n, len(self._m))
        out = self._m[self._pos : end]
        self._pos = max(self._pos, end)
        return out


def _implicit_addend(raw: Sequence[int], off: int, width: int) -> int:
    """SHT_REL: the addend is the field's (signed) value before relocation."""
    if off + width > len(raw):
        return 0
    return int.from_bytes(bytes(raw[off : off + width]), "little", signed=True)


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


def _without_gc(fn: Callable[..., _T]) -> Callable[..., _T]:
    """Run ``fn`` with the cycle collector paused.

    Unpacking a kernel's symbols makes a few hundred thousand tuples, none in
    a cycle; each collection the allocations trigger would walk all the
    tuples made so far, a seventh of the work.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return wrapper


def _symbol_table_bytes(raw: Sequence[int], shdrs: List[_Shdr], sec: _Shdr) -> Tuple[bytes, bytes]:
    """(string table, entries) of the symbol table ``sec``."""
    if not 0 <= sec.sh_link < len(shdrs):
        raise _Malformed(f"symbol table {sec.name or '(unnamed)'} names string table section {sec.sh_link}, "
                         f"but there are {len(shdrs)} sections")
    st = shdrs[sec.sh_link]
    data = bytes(raw[sec.sh_offset : sec.sh_offset + sec.sh_size])
    return bytes(raw[st.sh_offset : st.sh_offset + st.sh_size]), data[: len(data) // 24 * 24]


def _symbol_name(strtab: bytes, offset: int) -> str:
    """The string at ``offset`` of a string table ("" past its end)."""
    end = strtab.find(b"\0", offset)
    return strtab[offset:end].decode("utf-8", "replace") if end >= 0 else ""


@_without_gc
def _unpack_symbols(raw: Sequence[int], shdrs: List[_Shdr], sec: _Shdr) -> List[_Sym]:
    """Every entry of the symbol table ``sec``."""
    strtab, data = _symbol_table_bytes(raw, shdrs, sec)
    names = _string_starts(strtab)
    out: List[_Sym] = []
    file: Optional[str] = None
    for st_name, st_info, _other, st_shndx, st_value, st_size in struct.iter_unpack("<IBBHQQ", data):
        name = names.get(st_name)
        if name is None:  # a shared tail ("init" inside "do_init"), or past the table
            name = _symbol_name(strtab, st_name)
        stype, bind = st_info & 0xF, st_info >> 4
        if stype == _STT_FILE:
            file = name
        # Every entry is kept, STT_FILE too: relocations index this list.
        out.append(_Sym(name, st_value, st_size, stype, bind, st_shndx, file if bind == 0 else None))
    return out


def _string_starts(strtab: bytes) -> Dict[int, str]:
    """Every string of a string table by its offset, decoded in one pass.

    A kernel has over 100,000 symbols; one split beats a find, a slice and a
    decode per symbol.  Byte offsets equal character offsets only for ASCII,
    so a table with other bytes decodes its strings one by one.
    """
    if strtab.isascii():
        parts = strtab.decode("ascii").split("\0")
        lengths = map(len, parts)
    else:
        pieces = strtab.split(b"\0")
        parts = [p.decode("utf-8", "replace") for p in pieces]
        lengths = map(len, pieces)
    offsets = itertools.accumulate((n + 1 for n in lengths), initial=0)
    return dict(zip(offsets, parts))


# Functions by (address, size, file of a local), each with its symbols' (name, binding).
_Groups = Dict[Tuple[int, int, Optional[str]], List[Tuple[str, int]]]


@_without_gc
def _fold_functions(img: KernelImage, syms: List[_Sym]) -> List[Function]:
    """Group STT_FUNC symbols by (address, size); pick a stable primary name."""
    groups: _Groups = {}
    rel = img.e_type == "ET_REL"
    for s in syms:
        name, addr, size, stype, bind, shndx, file = s
        if stype != _STT_FUNC or size == 0 or shndx in _NOT_HERE:
            continue
        if rel:
            addr, ok = img._symbol_address(s)
            if not ok:
                continue
        # Locals of different files never alias each other, even at one address (``_Sym.file`` is None
        # for a global).
        key = (addr, size, file)
        group = groups.get(key)
        if group is None:
            groups[key] = [(name, bind)]
        else:
            group.append((name, bind))
    return _group_functions(img, groups)


@_without_gc
def _linked_functions(img: KernelImage, sec: _Shdr) -> List[Function]:
    """``_fold_functions`` of a linked image's symbol table ``sec``, read in one pass with no record per entry.

    A kernel's 130,000 symbols hold 50,000 functions, and a shared library's
    dynamic symbols are a third imports; what ``functions()`` of a small
    library costs is mostly this loop.  ``tests/toolchain/test_image.py``
    holds it equal to folding every entry.
    """
    strtab, data = _symbol_table_bytes(img._data, img._shdrs, sec)
    groups: _Groups = {}
    file: Optional[str] = None
    for st_name, st_info, _other, shndx, value, size in struct.iter_unpack("<IBBHQQ", data):
        stype = st_info & 0xF
        if stype == _STT_FILE:
            file = _symbol_name(strtab, st_name)
            continue
        if stype != _STT_FUNC or size == 0 or shndx in _NOT_HERE:
            continue
        bind = st_info >> 4
        key = (value, size, file if bind == 0 else None)
        group = groups.get(key)
        if group is None:
            groups[key] = [(_symbol_name(strtab, st_name), bind)]
        else:
            group.append((_symbol_name(strtab, st_name), bind))
    return _group_functions(img, groups)


def _group_functions(img: KernelImage, groups: _Groups) -> List[Function]:
    """One Function per group, sorted by address: the primary name a global's, then a weak one's, then the
    first by name; the other names its aliases."""
    out = []
    make = tuple.__new__  # Function's own __new__ is a Python function, a third of this loop
    binding = tuple(_STB_NAMES.get(b, "other") for b in range(16))
    lo = hi = 0
    section = "?"
    for (addr, size, file), group in groups.items():
        aliases: Tuple[str, ...] = ()
        if len(group) > 1:
            group.sort(key=lambda e: (e[1] == 0, e[1] == 2, e[0]))
            aliases = tuple(sorted({name for name, _ in group[1:]} - {group[0][0]}))
        name, bind = group[0]
        if not lo <= addr < hi:  # functions come mostly in address order: look a section up when they leave it
            sec = img.section_at(addr)
            lo, hi, section = (sec.addr, sec.addr + sec.size, sec.name) if sec else (addr, addr + 1, "?")
        out.append(make(Function, (name, addr, size, binding[bind], file, section, aliases)))
    out.sort(key=operator.attrgetter("address", "name"))
    return out
