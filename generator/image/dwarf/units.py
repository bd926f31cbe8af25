"""Compilation units, abbreviation tables and DIEs, read straight from the bytes.

Why not pyelftools here: it builds an object per DIE and per attribute
(some 30,000 DIEs a second) and copies ``.debug_info`` whole into memory; a
kernel's 174 MB of ``.debug_info`` took it over ten minutes and 11 GB.  The
source-line and variable modes need a few attributes of a few tags, in the
units a query can match: this module reads unit headers, abbreviation
tables and DIEs with plain integer arithmetic over ``bytes``, skips every
attribute it is not asked for by its form, and skips whole subtrees through
``DW_AT_sibling``.  tests/toolchain/test_dwarf_reader.py holds it equal to
pyelftools and llvm-dwarfdump on real compilers' DWARF 4 and 5.

Every read is bounds-checked: a truncated or corrupt unit raises
``DwarfError`` naming the section and offset, never IndexError.  DIE
references are followed with a depth limit, so a reference loop ends.
"""

from __future__ import annotations

import struct
from typing import Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from . import spec as S
from .sections import DwarfError, Reads, Sections, initial_length

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from

MAX_DEPTH = 256  # DIE nesting deeper than this is corrupt (compilers nest a few dozen at most)


def uleb(data, pos: int) -> Tuple[int, int]:
    """An unsigned LEB128 at ``pos``: (value, position after it).  IndexError past the end (callers turn it into
    a DwarfError with the place)."""
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = data[pos]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + 1
        shift += 7
        if shift > 640:
            raise DwarfError(f"a LEB128 number longer than 90 bytes at {pos:#x}")


def sleb(data, pos: int) -> Tuple[int, int]:
    """A signed LEB128 at ``pos``: (value, position after it)."""
    result = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            if b & 0x40:
                result -= 1 << shift
            return result, pos
        if shift > 640:
            raise DwarfError(f"a LEB128 number longer than 90 bytes at {pos:#x}")


def cstring(data, pos: int) -> Tuple[bytes, int]:
    end = data.index(0, pos) if isinstance(data, (bytes, bytearray)) else bytes(data[pos:]).index(0) + pos
    return bytes(data[pos:end]), end + 1


class Abbrev(NamedTuple):
    """One abbreviation: a DIE shape."""

    tag: int
    children: bool
    attrs: Tuple[int, ...]  # attribute codes, in order
    forms: Tuple[int, ...]  # their forms
    consts: Tuple[int, ...]  # DW_FORM_implicit_const values (0 elsewhere)


def abbrev_entry(data, pos: int, offset: int) -> Tuple[int, Optional[Abbrev], int]:
    """The entry at ``pos`` of the abbreviation table at ``offset``: (code, Abbrev, where it ends); code 0 and
    None at the table's end.  An IndexError when the section ends inside the entry."""
    code, pos = uleb(data, pos)
    if code == 0:
        return 0, None, pos
    tag, pos = uleb(data, pos)
    children = data[pos] != 0
    pos += 1
    attrs: List[int] = []
    forms: List[int] = []
    consts: List[int] = []
    while True:
        at, pos = uleb(data, pos)
        form, pos = uleb(data, pos)
        if at == 0 and form == 0:
            break
        value = 0
        if form == S.DW_FORM_implicit_const:
            value, pos = sleb(data, pos)
        attrs.append(at)
        forms.append(form)
        consts.append(value)
        if len(attrs) > 4096:
            raise DwarfError(f".debug_abbrev: abbreviation {code} at {offset:#x} has over 4096 attributes")
    return code, Abbrev(tag, children, tuple(attrs), tuple(forms), tuple(consts)), pos


def parse_abbrevs(data, offset: int) -> Tuple[Dict[int, Abbrev], int]:
    """The abbreviation table at ``offset`` of ``.debug_abbrev``: code -> Abbrev, and where it ends."""
    table: Dict[int, Abbrev] = {}
    pos = offset
    n = len(data)
    try:
        while True:
            code, ab, pos = abbrev_entry(data, pos, offset)
            if ab is None:
                return table, pos
            if code in table:
                raise DwarfError(f".debug_abbrev: the table at {offset:#x} defines code {code} twice")
            table[code] = ab
            if pos >= n:
                raise DwarfError(f".debug_abbrev: the table at {offset:#x} has no terminating 0")
    except IndexError:
        raise DwarfError(f".debug_abbrev: the table at {offset:#x} runs past the section's end") from None


class Unit:
    """One unit of ``.debug_info``: its header, its bytes and its abbreviations.

    Offsets given to and returned by the methods are section offsets
    (``.debug_info``), as DIE references and ``llvm-dwarfdump`` print them.
    """

    __slots__ = ("sections", "offset", "end", "version", "unit_type", "addr_size", "offset_size", "abbrev_offset",
                 "die_start", "data", "abbrevs", "base", "str_offsets_base", "addr_base", "rnglists_base",
                 "loclists_base", "low_pc", "_fixed")

    def __init__(self, sections: Sections, offset: int, header: "UnitHeader", data: bytes,
                 abbrevs: Dict[int, Abbrev]):
        self.sections = sections
        self.offset = offset
        self.end = header.end
        self.version = header.version
        self.unit_type = header.unit_type
        self.addr_size = header.addr_size
        self.offset_size = header.offset_size
        self.abbrev_offset = header.abbrev_offset
        self.die_start = header.die_start
        self.data = data  # the unit's bytes, from ``offset``
        self.abbrevs = abbrevs
        self.base = offset
        self.str_offsets_base = 8 if header.offset_size == 4 else 16  # DWARF 5's default: past the header
        self.addr_base = 8
        self.rnglists_base = 0
        self.loclists_base = 0
        self.low_pc = 0
        self._fixed: Dict[int, Optional[int]] = {}

    # -- attribute values ---------------------------------------------------------

    def value(self, form: int, pos: int, const: int = 0) -> Tuple[object, int]:
        """The raw value of one attribute at unit position ``pos``: an int (constants, addresses, offsets,
        section offsets; references as .debug_info offsets), bytes (blocks, inline strings)."""
        d = self.data
        if form == S.DW_FORM_data1 or form == S.DW_FORM_ref1 or form == S.DW_FORM_flag or form == S.DW_FORM_strx1 \
                or form == S.DW_FORM_addrx1:
            v = d[pos]
            return (v + self.base if form == S.DW_FORM_ref1 else v), pos + 1
        if form == S.DW_FORM_ref4 or form == S.DW_FORM_data4 or form == S.DW_FORM_strx4 or form == S.DW_FORM_addrx4 \
                or form == S.DW_FORM_ref_sup4:
            self._need(pos, 4)
            v = _U32(d, pos)[0]
            return (v + self.base if form == S.DW_FORM_ref4 else v), pos + 4
        if form == S.DW_FORM_strp or form == S.DW_FORM_sec_offset or form == S.DW_FORM_line_strp \
                or form == S.DW_FORM_strp_sup or form == S.DW_FORM_GNU_strp_alt or form == S.DW_FORM_GNU_ref_alt:
            return self._offset(pos)
        if form == S.DW_FORM_ref_addr:
            if self.version <= 2:
                return self._addr(pos)
            return self._offset(pos)
        if form == S.DW_FORM_flag_present:
            return 1, pos
        if form == S.DW_FORM_implicit_const:
            return const, pos
        if form == S.DW_FORM_udata or form == S.DW_FORM_strx or form == S.DW_FORM_addrx \
                or form == S.DW_FORM_loclistx or form == S.DW_FORM_rnglistx or form == S.DW_FORM_GNU_addr_index \
                or form == S.DW_FORM_GNU_str_index:
            return uleb(d, pos)
        if form == S.DW_FORM_ref_udata:
            v, pos = uleb(d, pos)
            return v + self.base, pos
        if form == S.DW_FORM_sdata:
            return sleb(d, pos)
        if form == S.DW_FORM_addr:
            return self._addr(pos)
        if form == S.DW_FORM_data2 or form == S.DW_FORM_ref2 or form == S.DW_FORM_strx2 or form == S.DW_FORM_addrx2:
            self._need(pos, 2)
            v = _U16(d, pos)[0]
            return (v + self.base if form == S.DW_FORM_ref2 else v), pos + 2
        if form == S.DW_FORM_data8 or form == S.DW_FORM_ref8 or form == S.DW_FORM_ref_sig8 \
                or form == S.DW_FORM_ref_sup8:
            self._need(pos, 8)
            v = _U64(d, pos)[0]
            return (v + self.base if form == S.DW_FORM_ref8 else v), pos + 8
        if form == S.DW_FORM_exprloc or form == S.DW_FORM_block:
            n, pos = uleb(d, pos)
            return self._block(pos, n)
        if form == S.DW_FORM_block1:
            return self._block(pos + 1, d[pos])
        if form == S.DW_FORM_block2:
            self._need(pos, 2)
            return self._block(pos + 2, _U16(d, pos)[0])
        if form == S.DW_FORM_block4:
            self._need(pos, 4)
            return self._block(pos + 4, _U32(d, pos)[0])
        if form == S.DW_FORM_string:
            end = d.find(b"\0", pos)
            if end < 0:
                raise DwarfError(f".debug_info: an inline string at {self.base + pos:#x} has no terminating NUL")
            return d[pos:end], end + 1
        if form == S.DW_FORM_strx3 or form == S.DW_FORM_addrx3:
            self._need(pos, 3)
            return d[pos] | d[pos + 1] << 8 | d[pos + 2] << 16, pos + 3
        if form == S.DW_FORM_data16:
            self._need(pos, 16)
            return d[pos:pos + 16], pos + 16
        if form == S.DW_FORM_indirect:
            real, pos = uleb(d, pos)
            if real == S.DW_FORM_indirect or real == S.DW_FORM_implicit_const:
                raise DwarfError(f".debug_info: DW_FORM_indirect names form {real:#x} at {self.base + pos:#x}")
            return self.value(real, pos)
        raise DwarfError(f".debug_info: unit at {self.offset:#x}: unknown attribute form {form:#x}")

    def _need(self, pos: int, n: int) -> None:
        if pos + n > len(self.data):
            raise DwarfError(f".debug_info: the unit at {self.offset:#x} ends inside an attribute "
                             f"(at {self.base + pos:#x})")

    def _offset(self, pos: int) -> Tuple[int, int]:
        if self.offset_size == 4:
            self._need(pos, 4)
            return _U32(self.data, pos)[0], pos + 4
        self._need(pos, 8)
        return _U64(self.data, pos)[0], pos + 8

    def _addr(self, pos: int) -> Tuple[int, int]:
        n = self.addr_size
        self._need(pos, n)
        if n == 8:
            return _U64(self.data, pos)[0], pos + 8
        if n == 4:
            return _U32(self.data, pos)[0], pos + 4
        return int.from_bytes(self.data[pos:pos + n], "little"), pos + n

    def _block(self, pos: int, n: int) -> Tuple[bytes, int]:
        self._need(pos, n)
        return self.data[pos:pos + n], pos + n

    def fixed_size(self, code: int, ab: Abbrev) -> Optional[int]:
        """The byte size of a DIE of abbreviation ``code`` when all its forms have one size, else None."""
        got = self._fixed.get(code, -1)
        if got != -1:
            return got
        size = 0
        for form in ab.forms:
            n = _fixed_form_size(form, self.addr_size, self.offset_size, self.version)
            if n is None:
                size = None
                break
            size += n
        self._fixed[code] = size
        return size

    # -- DIEs -----------------------------------------------------------------------

    def die(self, offset: int) -> Tuple[Abbrev, Dict[int, Tuple[int, object]], int]:
        """The DIE at section offset ``offset``: its abbreviation, {attribute: (form, value)}, and the section
        offset after it.  A null entry has abbreviation None."""
        pos = offset - self.base
        if not self.die_start <= pos < len(self.data):
            raise DwarfError(f".debug_info: DIE offset {offset:#x} lies outside its unit at {self.offset:#x}")
        try:
            code, pos = uleb(self.data, pos)
            if code == 0:
                return None, {}, pos + self.base  # type: ignore[return-value]
            ab = self.abbrevs.get(code)
            if ab is None:
                raise DwarfError(f".debug_info: the DIE at {offset:#x} uses abbreviation {code}, which the unit's "
                                 f"table at .debug_abbrev {self.abbrev_offset:#x} does not define")
            attrs: Dict[int, Tuple[int, object]] = {}
            for at, form, const in zip(ab.attrs, ab.forms, ab.consts):
                value, pos = self.value(form, pos, const)
                attrs[at] = (form, value)
        except IndexError:
            raise DwarfError(f".debug_info: the DIE at {offset:#x} runs past its unit's end") from None
        return ab, attrs, pos + self.base

    def children(self, offset: int) -> Iterator[int]:
        """Section offsets of the children of the DIE at ``offset`` (which must have children)."""
        ab, attrs, pos = self.die(offset)
        if ab is None or not ab.children:
            return
        yield from self._siblings(pos)

    def _siblings(self, pos: int) -> Iterator[int]:
        limit = self.base + len(self.data)
        seen = 0
        while pos < limit:
            ab, attrs, after = self.die(pos)
            if ab is None:
                return
            yield pos
            seen += 1
            if seen > len(self.data):
                raise DwarfError(f".debug_info: the unit at {self.offset:#x} loops")
            if ab.children:
                sib = attrs.get(S.DW_AT_sibling)
                if sib is not None and isinstance(sib[1], int) and pos < sib[1] <= limit:
                    after = sib[1]
                else:
                    after = self.skip_children(after)
            pos = after
        raise DwarfError(f".debug_info: the children at {pos:#x} of the unit at {self.offset:#x} have no end")

    def skip_children(self, pos: int) -> int:
        """The section offset after the children list starting at ``pos`` (and its terminating null)."""
        depth = 1
        d = self.data
        p = pos - self.base
        abbrevs = self.abbrevs
        n = len(d)
        try:
            while depth:
                if p >= n:
                    raise DwarfError(f".debug_info: the unit at {self.offset:#x} ends inside a DIE's children")
                code, p = uleb(d, p)
                if code == 0:
                    depth -= 1
                    continue
                ab = abbrevs.get(code)
                if ab is None:
                    raise DwarfError(f".debug_info: abbreviation {code} at {self.base + p:#x} is not defined")
                size = self.fixed_size(code, ab)
                if size is not None:
                    p += size
                else:
                    for form, const in zip(ab.forms, ab.consts):
                        _, p = self.value(form, p, const)
                if ab.children:
                    depth += 1
                    if depth > MAX_DEPTH:
                        raise DwarfError(f".debug_info: DIEs nest deeper than {MAX_DEPTH} in the unit at "
                                         f"{self.offset:#x}")
        except IndexError:
            raise DwarfError(f".debug_info: the unit at {self.offset:#x} ends inside a DIE") from None
        if p > n:
            raise DwarfError(f".debug_info: the unit at {self.offset:#x} ends inside a DIE")
        return p + self.base

    # -- strings, addresses, lists ------------------------------------------------------

    def string(self, form: int, value: object, reads: Optional[Reads] = None) -> str:
        """An attribute's string value, wherever its form says the text is."""
        if form == S.DW_FORM_string:
            return value.decode("utf-8", "surrogateescape")  # type: ignore[union-attr]
        if form == S.DW_FORM_strp:
            if reads is not None:
                reads.whole(".debug_str")
            return self.sections.string(".debug_str", value)  # type: ignore[arg-type]
        if form == S.DW_FORM_line_strp:
            if reads is not None:
                reads.whole(".debug_line_str")
            return self.sections.string(".debug_line_str", value)  # type: ignore[arg-type]
        if form in S.STRINGS:  # strx*: through .debug_str_offsets
            if reads is not None:
                reads.whole(".debug_str_offsets")
                reads.whole(".debug_str")
            table = self.sections.whole(".debug_str_offsets")
            at = self.str_offsets_base + value * self.offset_size  # type: ignore[operator]
            if at + self.offset_size > len(table):
                raise DwarfError(f".debug_str_offsets: index {value} lies past the section's end")
            off = (_U32 if self.offset_size == 4 else _U64)(table, at)[0]
            return self.sections.string(".debug_str", off)
        if form in (S.DW_FORM_GNU_strp_alt, S.DW_FORM_strp_sup):
            return "?"  # in a supplementary (dwz) file this reader does not open
        raise DwarfError(f".debug_info: form {S.FORM_NAMES.get(form, hex(form))} is not a string")

    def address(self, form: int, value: object, reads: Optional[Reads] = None) -> int:
        """An address attribute's value: DW_FORM_addr itself, or an index into ``.debug_addr``."""
        if form == S.DW_FORM_addr:
            return value  # type: ignore[return-value]
        if form in (S.DW_FORM_addrx, S.DW_FORM_addrx1, S.DW_FORM_addrx2, S.DW_FORM_addrx3, S.DW_FORM_addrx4,
                    S.DW_FORM_GNU_addr_index):
            return self.indexed_address(value, reads)  # type: ignore[arg-type]
        raise DwarfError(f".debug_info: form {S.FORM_NAMES.get(form, hex(form))} is not an address")

    def indexed_address(self, index: int, reads: Optional[Reads] = None) -> int:
        table = self.sections.get(".debug_addr")
        at = self.addr_base + index * self.addr_size
        if at + self.addr_size > len(table):
            raise DwarfError(f".debug_addr: index {index} lies past the section's end")
        if reads is not None:
            reads.add(".debug_addr", at, at + self.addr_size)
        return int.from_bytes(bytes(table[at:at + self.addr_size]), "little")

    def ref(self, form: int, value: object) -> Optional[int]:
        """A reference attribute as a .debug_info offset; None for one into another file (dwz, type units)."""
        if form in S.UNIT_REFS or form == S.DW_FORM_ref_addr:
            return value  # type: ignore[return-value]
        return None


class UnitHeader(NamedTuple):
    """A unit header (7.5.1)."""

    offset: int  # of the unit in .debug_info
    end: int  # one past its last byte, relative to ``offset``
    version: int
    unit_type: int
    addr_size: int
    offset_size: int
    abbrev_offset: int
    die_start: int  # the first DIE, relative to ``offset``


def unit_header(info, offset: int) -> UnitHeader:
    """The header of the unit at ``offset`` of ``.debug_info`` (``info``: the section's bytes)."""
    where = f".debug_info: the unit at {offset:#x}"
    end, pos, offset_size = initial_length(info, offset, where)
    if pos + 2 > end:
        raise DwarfError(f"{where} is too short for a header")
    version = _U16(info, pos)[0]
    pos += 2
    if not 2 <= version <= 5:
        raise DwarfError(f"{where} has DWARF version {version}; versions 2 to 5 are read")
    need = (1 + 1 + offset_size) if version >= 5 else (offset_size + 1)
    if pos + need > end:
        raise DwarfError(f"{where} is too short for a header")
    if version >= 5:
        unit_type = info[pos]
        addr_size = info[pos + 1]
        pos += 2
        abbrev = (_U32 if offset_size == 4 else _U64)(info, pos)[0]
        pos += offset_size
        if unit_type in (S.DW_UT_skeleton, S.DW_UT_split_compile):
            pos += 8  # dwo_id
        elif unit_type in (S.DW_UT_type, S.DW_UT_split_type):
            pos += 8 + offset_size  # type signature, type offset
    else:
        unit_type = S.DW_UT_compile
        abbrev = (_U32 if offset_size == 4 else _U64)(info, pos)[0]
        pos += offset_size
        addr_size = info[pos]
        pos += 1
    if addr_size not in (4, 8):
        raise DwarfError(f"{where} has an address size of {addr_size}; 4 and 8 are read")
    if pos > end:
        raise DwarfError(f"{where} is too short for a header")
    return UnitHeader(offset, end - offset, version, unit_type, addr_size, offset_size, abbrev, pos - offset)


def unit_headers(info) -> Iterator[UnitHeader]:
    """Every unit header of ``.debug_info``, in order."""
    offset = 0
    n = len(info)
    while offset < n:
        h = unit_header(info, offset)
        yield h
        offset += h.end


class UnitReader:
    """Opens units of one file's ``.debug_info`` with their abbreviations (shared between units that share a
    table), and finds the unit holding a DIE offset."""

    def __init__(self, sections: Sections):
        self.sections = sections
        self.info = sections.get(".debug_info")
        self.abbrev_data = sections.get(".debug_abbrev")
        self._abbrevs: Dict[int, Tuple[Dict[int, Abbrev], int]] = {}
        self._starts: Optional[List[int]] = None
        self._units: Dict[int, Unit] = {}

    def abbrevs(self, offset: int, reads: Optional[Reads] = None) -> Dict[int, Abbrev]:
        got = self._abbrevs.get(offset)
        if got is None:
            if not 0 <= offset < len(self.abbrev_data):
                raise DwarfError(f".debug_abbrev: table offset {offset:#x} lies outside the section")
            got = parse_abbrevs(self.abbrev_data, offset)
            self._abbrevs[offset] = got
        if reads is not None:
            reads.add(".debug_abbrev", offset, got[1])
        return got[0]

    def unit(self, offset: int, reads: Optional[Reads] = None, header: Optional[UnitHeader] = None) -> Unit:
        """The unit at ``offset``, its top DIE's base attributes read (str_offsets, addr, list bases, low_pc)."""
        u = self._units.get(offset)
        if u is None:
            h = header or unit_header(self.info, offset)
            data = bytes(self.info[offset:offset + h.end])
            u = Unit(self.sections, offset, h, data, self.abbrevs(h.abbrev_offset))
            _read_bases(u)
            self._units[offset] = u
        if reads is not None:
            reads.add(".debug_info", offset, offset + u.end)
            self.abbrevs(u.abbrev_offset, reads)
        return u

    def unit_of(self, die_offset: int, reads: Optional[Reads] = None) -> Unit:
        """The unit that holds the DIE at ``die_offset``."""
        import bisect

        if self._starts is None:
            self._starts = [h.offset for h in unit_headers(self.info)]
        i = bisect.bisect_right(self._starts, die_offset) - 1
        if i < 0:
            raise DwarfError(f".debug_info: DIE offset {die_offset:#x} precedes every unit")
        u = self.unit(self._starts[i], reads)
        if not u.offset + u.die_start <= die_offset < u.offset + u.end:
            raise DwarfError(f".debug_info: DIE offset {die_offset:#x} lies in no unit's DIEs")
        return u


def _read_bases(u: Unit) -> None:
    """The unit DIE's attributes that other attributes are relative to."""
    ab, attrs, _ = u.die(u.offset + u.die_start)
    if ab is None:
        return
    for at, slot in ((S.DW_AT_str_offsets_base, "str_offsets_base"), (S.DW_AT_addr_base, "addr_base"),
                     (S.DW_AT_rnglists_base, "rnglists_base"), (S.DW_AT_loclists_base, "loclists_base")):
        got = attrs.get(at)
        if got is not None and isinstance(got[1], int):
            setattr(u, slot, got[1])
    low = attrs.get(S.DW_AT_low_pc)
    if low is not None:
        try:
            u.low_pc = u.address(*low)
        except DwarfError:
            u.low_pc = 0


def _fixed_form_size(form: int, addr_size: int, offset_size: int, version: int) -> Optional[int]:
    if form in (S.DW_FORM_data1, S.DW_FORM_ref1, S.DW_FORM_flag, S.DW_FORM_strx1, S.DW_FORM_addrx1):
        return 1
    if form in (S.DW_FORM_data2, S.DW_FORM_ref2, S.DW_FORM_strx2, S.DW_FORM_addrx2):
        return 2
    if form in (S.DW_FORM_strx3, S.DW_FORM_addrx3):
        return 3
    if form in (S.DW_FORM_data4, S.DW_FORM_ref4, S.DW_FORM_strx4, S.DW_FORM_addrx4, S.DW_FORM_ref_sup4):
        return 4
    if form in (S.DW_FORM_data8, S.DW_FORM_ref8, S.DW_FORM_ref_sig8, S.DW_FORM_ref_sup8):
        return 8
    if form == S.DW_FORM_data16:
        return 16
    if form in (S.DW_FORM_strp, S.DW_FORM_sec_offset, S.DW_FORM_line_strp, S.DW_FORM_strp_sup,
                S.DW_FORM_GNU_strp_alt, S.DW_FORM_GNU_ref_alt):
        return offset_size
    if form == S.DW_FORM_ref_addr:
        return addr_size if version <= 2 else offset_size
    if form == S.DW_FORM_addr:
        return addr_size
    if form in (S.DW_FORM_flag_present, S.DW_FORM_implicit_const):
        return 0
    return None


Visitor = Callable[[int, Abbrev, Dict[int, Tuple[int, object]], int], bool]
