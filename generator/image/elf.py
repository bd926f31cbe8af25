"""Stage 1: the kernel image.

Reads a little-endian ELF64 file of an ISA kinstkit knows, of any of the
kinds users hand us -- an ET_EXEC kernel (FreeBSD ``/boot/kernel/kernel``,
Linux ``vmlinux``), an ET_REL module (``.ko``) or an ET_DYN shared object --
and answers the questions later stages ask: which functions are there, what
bytes lie at an address, which relocation fills a field, which segments load
where, what the build-id and the ISA are.  This is kinstkit's one ELF reader:
the ``.ko`` checks, the harness and the generators all read through it.

The file is read by concept, as pyelftools splits it: ``headers`` (the ELF,
program and section headers), ``sections`` (the ``Section`` record and the
ET_REL layout base), ``relocations`` (``Reloc``) and ``symbols`` (symbol
tables, ``Function``); this module is ``KernelImage``, which holds the bytes
and answers through them, and it re-exports their records (but ``Reloc``,
read only where there are relocations: a library's summary has none).  pyelftools
reads only the DWARF: importing its ``ELFFile`` (which brings its DWARF and
construct modules) costs 20 ms, a fifth of summarising a 1 MB library, so
``ELFFile`` is made, and imported, only when DWARF is asked for.

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
import io
import itertools
import mmap
import operator
import os
import struct
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

from elftools.common.exceptions import ELFError

from .. import isa
from ..common.errors import UserError
from ..isa.contract import Isa
from .headers import (_PT_LOAD, _PT_NOTE, _SHF_ALLOC, _SHF_EXECINSTR, _SHT_DYNSYM, _SHT_NOBITS, _SHT_NOTE,
                      _SHT_REL, _SHT_RELA, _SHT_SYMTAB, EM_NAMES, ET_NAMES, ElfIdent, Segment, _check_ident,
                      _elf_header, _Malformed, _program_headers, _section_headers, _Shdr, machine_description,
                      read_ident, type_description)
from .sections import REL_BASE, Section
from .symbols import (_NOT_HERE, _SHN_ABS, _SHN_COMMON, _SHN_UNDEF, _STB_NAMES, _STT_FILE, _STT_FUNC, _STT_SECTION,
                      Function, _Sym, _symbol_columns, _symbol_name, _symbol_table_bytes, _unpack_symbols,
                      _without_gc, corrupt_function)

if TYPE_CHECKING:  # read where relocations are (an ET_REL file, or check-ko's ET_DYN): a library's summary has none
    from .relocations import Reloc

# The records and readers of the modules above are this module's too: every stage imports them from here.
__all__ = ["EM_NAMES", "ET_NAMES", "REL_BASE", "ElfIdent", "Function", "KernelImage", "Section", "Segment",
           "corrupt_function", "machine_description", "read_ident", "type_description"]


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
        self.functions()  # folding them checks that each lies inside its section (_group_functions)
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
        from .relocations import Reloc, _implicit_addend

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
        from .relocations import Reloc

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
        groups.setdefault((addr, size, file), []).append((name, bind))
    return _group_functions(img, groups)


@_without_gc
def _linked_functions(img: KernelImage, sec: _Shdr) -> List[Function]:
    """``_fold_functions`` of a linked image's symbol table ``sec``, read as columns with no record per entry.

    A kernel's 130,000 symbols hold 50,000 functions, and a shared library's
    dynamic symbols are a third imports; what ``functions()`` of a library
    costs is mostly this.  ``tests/toolchain/test_image.py`` holds it equal
    to folding every entry.
    """
    strtab, data = _symbol_table_bytes(img._data, img._shdrs, sec)
    names, infos, shndx, values, sizes = _symbol_columns(data)
    everyone = range(len(infos))
    funcs = [i for i in itertools.compress(everyone, infos.translate(_IS_FUNC))
             if sizes[i] and shndx[i] not in _NOT_HERE]
    # A local's file is the last STT_FILE entry before it (in a .symtab; a .dynsym has none).
    files = list(itertools.compress(everyone, infos.translate(_IS_FILE)))
    file_names = [None, *(_symbol_name(strtab, names[k]) for k in files)]  # by bisect: none before the first
    # Names: an ASCII table (nearly every one) is read as str, a slice per name with no decode.
    text = strtab.decode("ascii") if strtab.isascii() else None
    groups: _Groups = {}
    for i in funcs:
        bind = infos[i] >> 4
        key = (values[i], sizes[i], file_names[bisect.bisect_left(files, i)] if bind == 0 else None)
        if text is None:
            name = _symbol_name(strtab, names[i])
        else:
            end = text.find("\0", names[i])
            name = text[names[i] : end] if end >= 0 else ""
        group = groups.get(key)
        if group is None:
            groups[key] = [(name, bind)]
        else:
            group.append((name, bind))
    return _group_functions(img, groups)


# st_info -> 1 for an STT_FUNC (STT_FILE) entry, else 0: selectors for itertools.compress.
_IS_FUNC = bytes(int(i & 0xF == _STT_FUNC) for i in range(256))
_IS_FILE = bytes(int(i & 0xF == _STT_FILE) for i in range(256))


def _group_functions(img: KernelImage, groups: _Groups) -> List[Function]:
    """One Function per group, sorted by address: the primary name a global's, then a weak one's, then the
    first by name; the other names its aliases.

    Each must lie inside a section: the first that does not, in that order,
    makes the one-line error of a corrupt file (``corrupt_function``), which
    ``open`` reports.  Checked here, where each function's section is looked
    up anyway, rather than in a second pass over 50,000 functions.
    """
    out = []
    outside = []  # functions that do not lie inside a section
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
            lo, hi, section = (sec.addr, sec.addr + sec.size, sec.name) if sec else (addr, addr, "?")
        f = make(Function, (name, addr, size, binding[bind], file, section, aliases))
        out.append(f)
        if addr + size > hi:
            outside.append(f)
    if outside:
        raise corrupt_function(img.path, min(outside, key=operator.attrgetter("address", "name")))
    _by_address_then_name(out)
    return out


def _by_address_then_name(funcs: List[Function]) -> None:
    """Sort ``funcs`` by (address, name).

    By address alone first: an int key sorts in a fraction of a tuple key's
    time (libLLVM's 35,000 functions shuffled: 15 ms against 80).  Then each
    run of functions that share an address (an alias of another size, locals
    of two files) by name: few, and short.
    """
    by_address = operator.attrgetter("address")
    funcs.sort(key=by_address)
    addrs = list(map(by_address, funcs))
    by_name = operator.attrgetter("name")
    for lo, hi in _runs(addrs):
        funcs[lo:hi] = sorted(funcs[lo:hi], key=by_name)


def _runs(values: List[int]) -> Iterator[Tuple[int, int]]:
    """[lo, hi) of each run of two or more equal neighbours in ``values``."""
    hi = 0
    for i in itertools.compress(range(1, len(values)), map(operator.eq, values, values[1:])):
        if i < hi:
            continue  # inside the run found last
        hi = i + 1
        while hi < len(values) and values[hi] == values[i]:
            hi += 1
        yield i - 1, hi
