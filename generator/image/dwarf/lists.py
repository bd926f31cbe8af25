"""Range lists and location lists, DWARF 4 (``.debug_ranges``, ``.debug_loc``) and 5 (``.debug_rnglists``,
``.debug_loclists``), with gcc's view pairs (``DW_LLE_GNU_view_pair``).

A list is read entry by entry from its offset; every entry is checked
against the section's end, and a list that does not end before it is an
error naming the list.  Offsets come from ``DW_FORM_sec_offset`` or, in
DWARF 5, from an index (``DW_FORM_rnglistx``, ``DW_FORM_loclistx``) into
the table at the unit's ``DW_AT_rnglists_base`` / ``DW_AT_loclists_base``.
"""

from __future__ import annotations

import struct
from typing import List, NamedTuple, Optional, Tuple

from . import spec as S
from .sections import DwarfError, Reads
from .units import Unit, uleb

_U16 = struct.Struct("<H").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from

MAX_ENTRIES = 1 << 20  # a list longer than this is corrupt


class LocEntry(NamedTuple):
    """One entry of a location list: where it applies and the expression there."""

    low: int
    high: int  # one past the last address; low == high: an empty range
    expr: bytes
    default: bool = False  # DW_LLE_default_location: where no other entry applies


def _addr(data, pos: int, size: int) -> int:
    if pos + size > len(data):
        raise IndexError
    return _U64(data, pos)[0] if size == 8 else _U32(data, pos)[0]


def _list_offset(unit: Unit, form: int, value: int, section: str, base: int, reads: Optional[Reads]) -> int:
    """The section offset a list attribute names."""
    if form in (S.DW_FORM_rnglistx, S.DW_FORM_loclistx):
        data = unit.sections.get(section)
        at = base + value * unit.offset_size
        if at + unit.offset_size > len(data) or base == 0:
            raise DwarfError(f"{section}: list index {value} of the unit at {unit.offset:#x} lies outside its table")
        if reads is not None:
            reads.add(section, at, at + unit.offset_size)
        rel = (_U32 if unit.offset_size == 4 else _U64)(data, at)[0]
        return base + rel
    return value


def ranges(unit: Unit, form: int, value: int, reads: Optional[Reads] = None) -> List[Tuple[int, int]]:
    """The ranges of a ``DW_AT_ranges`` attribute, in the order listed (empty ones kept)."""
    if unit.version >= 5:
        section = ".debug_rnglists"
        offset = _list_offset(unit, form, value, section, unit.rnglists_base, reads)
        return _rnglist(unit, offset, reads)
    return _ranges4(unit, value, reads)


def _ranges4(unit: Unit, offset: int, reads: Optional[Reads]) -> List[Tuple[int, int]]:
    data = unit.sections.get(".debug_ranges")
    size = unit.addr_size
    top = (1 << (8 * size)) - 1
    base = unit.low_pc
    out: List[Tuple[int, int]] = []
    pos = offset
    try:
        for _ in range(MAX_ENTRIES):
            lo = _addr(data, pos, size)
            hi = _addr(data, pos + size, size)
            pos += 2 * size
            if lo == 0 and hi == 0:
                if reads is not None:
                    reads.add(".debug_ranges", offset, pos)
                return out
            if lo == top:
                base = hi
                continue
            out.append((base + lo, base + hi))
    except IndexError:
        pass
    raise DwarfError(f".debug_ranges: the list at {offset:#x} runs past the section's end")


def _rnglist(unit: Unit, offset: int, reads: Optional[Reads]) -> List[Tuple[int, int]]:
    data = unit.sections.get(".debug_rnglists")
    size = unit.addr_size
    base = unit.low_pc
    out: List[Tuple[int, int]] = []
    pos = offset
    where = f".debug_rnglists: the list at {offset:#x}"
    if not 0 <= offset < len(data):
        raise DwarfError(f"{where} lies outside the section ({len(data):#x} bytes)")
    try:
        for _ in range(MAX_ENTRIES):
            kind = data[pos]
            pos += 1
            if kind == S.DW_RLE_end_of_list:
                if reads is not None:
                    reads.add(".debug_rnglists", offset, pos)
                return out
            if kind == S.DW_RLE_base_addressx:
                i, pos = uleb(data, pos)
                base = unit.indexed_address(i, reads)
            elif kind == S.DW_RLE_startx_endx:
                a, pos = uleb(data, pos)
                b, pos = uleb(data, pos)
                out.append((unit.indexed_address(a, reads), unit.indexed_address(b, reads)))
            elif kind == S.DW_RLE_startx_length:
                a, pos = uleb(data, pos)
                n, pos = uleb(data, pos)
                lo = unit.indexed_address(a, reads)
                out.append((lo, lo + n))
            elif kind == S.DW_RLE_offset_pair:
                a, pos = uleb(data, pos)
                b, pos = uleb(data, pos)
                out.append((base + a, base + b))
            elif kind == S.DW_RLE_base_address:
                base = _addr(data, pos, size)
                pos += size
            elif kind == S.DW_RLE_start_end:
                lo = _addr(data, pos, size)
                hi = _addr(data, pos + size, size)
                pos += 2 * size
                out.append((lo, hi))
            elif kind == S.DW_RLE_start_length:
                lo = _addr(data, pos, size)
                pos += size
                n, pos = uleb(data, pos)
                out.append((lo, lo + n))
            else:
                raise DwarfError(f"{where}: unknown entry kind {kind:#x} at {pos - 1:#x}")
    except IndexError:
        pass
    raise DwarfError(f"{where} runs past the section's end")


def locations(unit: Unit, form: int, value: int, reads: Optional[Reads] = None) -> List[LocEntry]:
    """The entries of a location list named by a ``DW_AT_location`` (or ``DW_AT_frame_base``) attribute."""
    if unit.version >= 5:
        section = ".debug_loclists"
        offset = _list_offset(unit, form, value, section, unit.loclists_base, reads)
        return _loclist(unit, offset, reads)
    return _loc4(unit, value, reads)


def _loc4(unit: Unit, offset: int, reads: Optional[Reads]) -> List[LocEntry]:
    data = unit.sections.get(".debug_loc")
    size = unit.addr_size
    top = (1 << (8 * size)) - 1
    base = unit.low_pc
    out: List[LocEntry] = []
    pos = offset
    try:
        for _ in range(MAX_ENTRIES):
            lo = _addr(data, pos, size)
            hi = _addr(data, pos + size, size)
            pos += 2 * size
            if lo == 0 and hi == 0:
                if reads is not None:
                    reads.add(".debug_loc", offset, pos)
                return out
            if lo == top:
                base = hi
                continue
            n = _U16(data, pos)[0]
            pos += 2
            if pos + n > len(data):
                raise IndexError
            out.append(LocEntry(base + lo, base + hi, bytes(data[pos:pos + n])))
            pos += n
    except (IndexError, struct.error):
        pass
    raise DwarfError(f".debug_loc: the list at {offset:#x} runs past the section's end")


def _loclist(unit: Unit, offset: int, reads: Optional[Reads]) -> List[LocEntry]:
    data = unit.sections.get(".debug_loclists")
    size = unit.addr_size
    base = unit.low_pc
    out: List[LocEntry] = []
    pos = offset
    where = f".debug_loclists: the list at {offset:#x}"
    if not 0 <= offset < len(data):
        raise DwarfError(f"{where} lies outside the section ({len(data):#x} bytes)")

    def expr(p: int) -> Tuple[bytes, int]:
        n, p = uleb(data, p)
        if p + n > len(data):
            raise IndexError
        return bytes(data[p:p + n]), p + n

    try:
        for _ in range(MAX_ENTRIES):
            kind = data[pos]
            pos += 1
            if kind == S.DW_LLE_end_of_list:
                if reads is not None:
                    reads.add(".debug_loclists", offset, pos)
                return out
            if kind == S.DW_LLE_base_addressx:
                i, pos = uleb(data, pos)
                base = unit.indexed_address(i, reads)
            elif kind == S.DW_LLE_startx_endx:
                a, pos = uleb(data, pos)
                b, pos = uleb(data, pos)
                e, pos = expr(pos)
                out.append(LocEntry(unit.indexed_address(a, reads), unit.indexed_address(b, reads), e))
            elif kind == S.DW_LLE_startx_length:
                a, pos = uleb(data, pos)
                n, pos = uleb(data, pos)
                e, pos = expr(pos)
                lo = unit.indexed_address(a, reads)
                out.append(LocEntry(lo, lo + n, e))
            elif kind == S.DW_LLE_offset_pair:
                a, pos = uleb(data, pos)
                b, pos = uleb(data, pos)
                e, pos = expr(pos)
                out.append(LocEntry(base + a, base + b, e))
            elif kind == S.DW_LLE_default_location:
                e, pos = expr(pos)
                out.append(LocEntry(0, 0, e, True))
            elif kind == S.DW_LLE_base_address:
                base = _addr(data, pos, size)
                pos += size
            elif kind == S.DW_LLE_start_end:
                lo = _addr(data, pos, size)
                hi = _addr(data, pos + size, size)
                pos += 2 * size
                e, pos = expr(pos)
                out.append(LocEntry(lo, hi, e))
            elif kind == S.DW_LLE_start_length:
                lo = _addr(data, pos, size)
                pos += size
                n, pos = uleb(data, pos)
                e, pos = expr(pos)
                out.append(LocEntry(lo, lo + n, e))
            elif kind == S.DW_LLE_GNU_view_pair:
                _, pos = uleb(data, pos)
                _, pos = uleb(data, pos)
            else:
                raise DwarfError(f"{where}: unknown entry kind {kind:#x} at {pos - 1:#x}")
    except IndexError:
        pass
    raise DwarfError(f"{where} runs past the section's end")
