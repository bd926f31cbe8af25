"""Line number programs (DWARF 2 to 5, section 6.2): the header with its file table, and the rows.

Why not pyelftools: a source-line query reads every unit's header to learn
which units name a file (as gdb does), and pyelftools decodes a unit's
whole program to give its header; it also divides by a corrupt
``line_range`` of 0 and appends negative lines.  ``header`` reads only the
header; ``rows`` runs the state machine of one program.  Both check every
length against the section, and a program's rows against the header's
numbers: corrupt input is a ``DwarfError`` naming the program's offset.
tests/toolchain/test_dwarf_reader.py holds both equal to pyelftools and
``llvm-dwarfdump --debug-line`` on real compilers' DWARF 4 and 5.
"""

from __future__ import annotations

import struct
from typing import List, NamedTuple, Optional, Tuple

from . import spec as S
from .sections import DwarfError, Reads, Sections, initial_length
from .units import sleb, uleb

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from

ROW_STMT = 1  # row flag: is_stmt
ROW_END = 2  # row flag: end_sequence (the address is one past the sequence's last byte)
MAX_LINE = 0xFFFFFFFF


class FileEntry(NamedTuple):
    """One entry of a line program's file table."""

    name: str
    dir_index: int


class LineHeader(NamedTuple):
    """A line program's header (6.2.4)."""

    offset: int  # of the program in .debug_line
    end: int  # one past its last byte (section offset)
    program: int  # where its opcodes start (section offset)
    version: int
    offset_size: int
    min_inst_length: int
    max_ops: int
    default_is_stmt: bool
    line_base: int
    line_range: int
    opcode_base: int
    opcode_lengths: Tuple[int, ...]
    dirs: Tuple[str, ...]
    files: Tuple[FileEntry, ...]

    @property
    def file_base(self) -> int:
        """The number of the first file table entry: 1 before DWARF 5, 0 from it."""
        return 0 if self.version >= 5 else 1


def header(sections: Sections, offset: int, reads: Optional[Reads] = None) -> LineHeader:
    """The header of the line program at ``offset`` of ``.debug_line``."""
    data = sections.get(".debug_line")
    where = f".debug_line: the program at {offset:#x}"
    try:
        return _header(sections, data, offset, where, reads)
    except (IndexError, struct.error):
        raise DwarfError(f"{where}: its header runs past its end") from None


def _header(sections: Sections, data, offset: int, where: str, reads: Optional[Reads]) -> LineHeader:
    end, pos, offset_size = initial_length(data, offset, where)
    version = _U16(data, pos)[0]
    pos += 2
    if not 2 <= version <= 5:
        raise DwarfError(f"{where} has version {version}; versions 2 to 5 are read")
    if version >= 5:
        pos += 2  # address_size, segment_selector_size
    hlen = (_U32 if offset_size == 4 else _U64)(data, pos)[0]
    pos += offset_size
    program = pos + hlen
    if program > end:
        raise DwarfError(f"{where}: its header_length {hlen} runs past the program's end")
    # The header's bytes are all a query reads before deciding to decode the program.
    hdr = bytes(data[pos:program])
    if reads is not None:
        reads.add(".debug_line", offset, program)
    p = 0
    min_len = hdr[p]
    p += 1
    max_ops = 1
    if version >= 4:
        max_ops = hdr[p]
        p += 1
    default_is_stmt = hdr[p] != 0
    line_base = hdr[p + 1] - 256 if hdr[p + 1] >= 128 else hdr[p + 1]
    line_range = hdr[p + 2]
    opcode_base = hdr[p + 3]
    p += 4
    if line_range == 0:
        raise DwarfError(f"{where} has a line_range of 0 (special opcodes would divide by it)")
    if opcode_base == 0:
        raise DwarfError(f"{where} has an opcode_base of 0")
    if max_ops == 0:
        raise DwarfError(f"{where} has a maximum_operations_per_instruction of 0")
    lengths = tuple(hdr[p:p + opcode_base - 1])
    if len(lengths) != opcode_base - 1:
        raise DwarfError(f"{where}: its header ends inside standard_opcode_lengths")
    p += opcode_base - 1
    if version >= 5:
        dirs_raw, p = _entries5(sections, hdr, p, offset_size, where, reads)
        files_raw, p = _entries5(sections, hdr, p, offset_size, where, reads)
        dirs = tuple(e[0] for e in dirs_raw)
        files = tuple(FileEntry(name, d) for name, d in files_raw)
    else:
        dirs_l: List[str] = []
        while True:
            name, p = _cstring(hdr, p)
            if name is None:
                break
            dirs_l.append(name)
        files_l: List[FileEntry] = []
        while True:
            name, p = _cstring(hdr, p)
            if name is None:
                break
            d, p = uleb(hdr, p)
            _, p = uleb(hdr, p)  # mtime
            _, p = uleb(hdr, p)  # length
            files_l.append(FileEntry(name, d))
        dirs, files = tuple(dirs_l), tuple(files_l)
    return LineHeader(offset, end, program, version, offset_size, min_len, max_ops, default_is_stmt, line_base,
                      line_range, opcode_base, lengths, dirs, files)


def _cstring(hdr: bytes, p: int) -> Tuple[Optional[str], int]:
    """The NUL-terminated string at ``p`` and the offset past it; None for the empty one that ends a
    DWARF 2-4 directory or file table."""
    end = hdr.index(0, p)
    if end == p:
        return None, p + 1
    return hdr[p:end].decode("utf-8", "surrogateescape"), end + 1


def _entries5(sections: Sections, hdr: bytes, p: int, offset_size: int, where: str,
              reads: Optional[Reads]) -> Tuple[List[Tuple[str, int]], int]:
    """A DWARF 5 directory or file table: (path, directory index) per entry."""
    nformats = hdr[p]
    p += 1
    formats = []
    for _ in range(nformats):
        ct, p = uleb(hdr, p)
        form, p = uleb(hdr, p)
        formats.append((ct, form))
    count, p = uleb(hdr, p)
    if count > len(hdr):
        raise DwarfError(f"{where}: its header claims {count} table entries in {len(hdr)} bytes")
    out = []
    for _ in range(count):
        path, d = "", 0
        for ct, form in formats:
            value, p = _form5(hdr, p, form, offset_size, where)
            if ct == S.DW_LNCT_path:
                path = _path5(sections, form, value, where, reads)
            elif ct == S.DW_LNCT_directory_index:
                d = value  # type: ignore[assignment]
        out.append((path, d))
    return out, p


def _form5(hdr: bytes, p: int, form: int, offset_size: int, where: str):
    if form == S.DW_FORM_string:
        end = hdr.index(0, p)
        return hdr[p:end], end + 1
    if form in (S.DW_FORM_line_strp, S.DW_FORM_strp, S.DW_FORM_sec_offset):
        return ((_U32 if offset_size == 4 else _U64)(hdr, p)[0]), p + offset_size
    if form in (S.DW_FORM_udata, S.DW_FORM_strx):
        return uleb(hdr, p)
    if form in (S.DW_FORM_data1, S.DW_FORM_strx1):
        return hdr[p], p + 1
    if form in (S.DW_FORM_data2, S.DW_FORM_strx2):
        return _U16(hdr, p)[0], p + 2
    if form in (S.DW_FORM_data4, S.DW_FORM_strx4):
        return _U32(hdr, p)[0], p + 4
    if form == S.DW_FORM_data8:
        return _U64(hdr, p)[0], p + 8
    if form == S.DW_FORM_data16:
        if p + 16 > len(hdr):
            raise IndexError
        return hdr[p:p + 16], p + 16
    if form == S.DW_FORM_block:
        n, p = uleb(hdr, p)
        if p + n > len(hdr):
            raise IndexError
        return hdr[p:p + n], p + n
    raise DwarfError(f"{where}: its file table uses form {S.FORM_NAMES.get(form, hex(form))}, which a line table "
                     "header cannot hold")


def _path5(sections: Sections, form: int, value, where: str, reads: Optional[Reads]) -> str:
    if form == S.DW_FORM_string:
        return value.decode("utf-8", "surrogateescape")
    if form == S.DW_FORM_line_strp:
        if reads is not None:
            reads.whole(".debug_line_str")
        return sections.string(".debug_line_str", value)
    if form == S.DW_FORM_strp:
        if reads is not None:
            reads.whole(".debug_str")
        return sections.string(".debug_str", value)
    raise DwarfError(f"{where}: a path in form {S.FORM_NAMES.get(form, hex(form))} needs a unit's string offsets")


Row = Tuple[int, int, int, int, int]  # (address, file number as the program gives it, line, ROW_* flags, view)
MAX_VIEW = 0xFFFF


def rows(sections: Sections, h: LineHeader, reads: Optional[Reads] = None, addr_size: int = 8) -> List[Row]:
    """Every row the program emits, in program order, END rows included.

    A row's file is the raw file register (see ``LineHeader.file_base``).
    A line that would leave [0, 2**32) or a file number the table does not
    have is an error: only a corrupt program writes either.  A row's view
    (DWARF 5 location views, as gcc numbers them and binutils prints them)
    counts the rows since the address last advanced: ``DW_LNE_set_address``
    and every nonzero advance but ``DW_LNS_fixed_advance_pc``'s reset it.
    """
    data = sections.get(".debug_line")
    if reads is not None:
        reads.add(".debug_line", h.offset, h.end)
    code = bytes(data[h.program:h.end])
    try:
        return _run(code, h, addr_size)
    except (IndexError, struct.error):
        raise DwarfError(f".debug_line: the program at {h.offset:#x} ends inside an instruction") from None


def _run(code: bytes, h: LineHeader, addr_size: int) -> List[Row]:
    out: List[Row] = []
    append = out.append
    where = f".debug_line: the program at {h.offset:#x}"
    nfiles = len(h.files) + h.file_base
    opcode_base, line_base, line_range = h.opcode_base, h.line_base, h.line_range
    min_len, max_ops = h.min_inst_length, h.max_ops
    lengths = h.opcode_lengths
    const_add = (255 - opcode_base) // line_range
    n = len(code)
    pos = 0
    address, op_index, file, line, view = 0, 0, 1, 1, 0
    stmt = h.default_is_stmt
    while pos < n:
        op = code[pos]
        pos += 1
        if op >= opcode_base or op == S.DW_LNS_advance_pc or op == S.DW_LNS_const_add_pc:
            # One address-advance rule for a special opcode and both advance_pc forms.
            if op >= opcode_base:
                adv = (op - opcode_base) // line_range
            elif op == S.DW_LNS_advance_pc:
                adv, pos = uleb(code, pos)
            else:
                adv = const_add
            if max_ops == 1:
                delta = min_len * adv
            else:
                delta = min_len * ((op_index + adv) // max_ops)
                op_index = (op_index + adv) % max_ops
            if delta:
                address += delta
                view = 0
            if op >= opcode_base:  # a special opcode also advances the line and appends a row
                line += line_base + (op - opcode_base) % line_range
                if not 0 <= line <= MAX_LINE:
                    raise DwarfError(f"{where}: line {line} at {address:#x} is out of range")
                append((address, file, line, ROW_STMT if stmt else 0, view if view < MAX_VIEW else MAX_VIEW))
                view += 1
        elif op == S.DW_LNS_copy:
            append((address, file, line, ROW_STMT if stmt else 0, view if view < MAX_VIEW else MAX_VIEW))
            view += 1
        elif op == S.DW_LNS_advance_line:
            d, pos = sleb(code, pos)
            line += d
            if not 0 <= line <= MAX_LINE:
                raise DwarfError(f"{where}: DW_LNS_advance_line makes the line {line}, out of range")
        elif op == S.DW_LNS_set_file:
            file, pos = uleb(code, pos)
            if not h.file_base <= file < nfiles:
                raise DwarfError(f"{where}: DW_LNS_set_file {file}, but the file table has entries "
                                 f"{h.file_base} to {nfiles - 1}")
        elif op == S.DW_LNS_set_column:
            _, pos = uleb(code, pos)
        elif op == S.DW_LNS_negate_stmt:
            stmt = not stmt
        elif op == S.DW_LNS_fixed_advance_pc:
            address += _U16(code, pos)[0]
            pos += 2
            op_index = 0
        elif op == 0:
            length, pos = uleb(code, pos)
            if length == 0 or pos + length > n:
                raise DwarfError(f"{where}: an extended opcode of length {length} at {pos:#x} runs past the end")
            sub = code[pos]
            if sub == S.DW_LNE_end_sequence:
                append((address, file, line, ROW_END, 0))
                address, op_index, file, line, view = 0, 0, 1, 1, 0
                stmt = h.default_is_stmt
            elif sub == S.DW_LNE_set_address:
                size = length - 1
                address = int.from_bytes(code[pos + 1:pos + 1 + size], "little")
                op_index = 0
                view = 0
            pos += length
        elif op <= len(lengths):  # a standard opcode this reader has no use for: skip its operands
            for _ in range(lengths[op - 1]):
                _, pos = uleb(code, pos)
        else:
            raise DwarfError(f"{where}: opcode {op} has no length in the header")
        if address >= 1 << 64:
            raise DwarfError(f"{where}: the address passes 2**64")
    return out


def file_paths(h: LineHeader, comp_dir: str) -> List[str]:
    """The program's file table as paths, joined as LLVM's symbolizer joins them and normalised (the list index
    is the file number minus ``h.file_base``); "" for an entry with no name."""
    import posixpath

    out = []
    for entry in h.files:
        out.append(join_path(h, comp_dir, entry, posixpath))
    return out


def join_path(h: LineHeader, comp_dir: str, entry: FileEntry, posixpath) -> str:
    """One file entry's path: DWARF 5's directory 0 is the compilation directory itself; a relative directory
    is under the compilation directory."""
    name = entry.name
    if not name:
        return ""
    d = entry.dir_index
    if h.version >= 5:
        include = h.dirs[d] if d < len(h.dirs) else ""
        prefix = "" if d == 0 or include.startswith("/") else comp_dir
    else:
        include = h.dirs[d - 1] if 0 < d <= len(h.dirs) else ""
        prefix = "" if include.startswith("/") else comp_dir
    return posixpath.normpath(posixpath.join(prefix, include, name))
