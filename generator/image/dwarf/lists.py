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
    return [(e.low, e.high) for e in _pairs4(unit, ".debug_ranges", offset, reads)]


def _pairs4(unit: Unit, section: str, offset: int, reads: Optional[Reads]) -> List[LocEntry]:
    """The entries of the DWARF 2-4 list at ``offset`` of ``section``: address pairs, a base-address entry
    (the largest address, then the base), 0 0 at the end; in ``.debug_loc`` each pair is followed by its
    expression (a 2-byte length and the bytes), ``.debug_ranges`` has none."""
    data = unit.sections.get(section)
    located = section == ".debug_loc"
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
                    reads.add(section, offset, pos)
                return out
            if lo == top:
                base = hi
                continue
            e = b""
            if located:
                n = _U16(data, pos)[0]
                pos += 2
                if pos + n > len(data):
                    raise IndexError
                e = bytes(data[pos:pos + n])
                pos += n
            out.append(LocEntry(base + lo, base + hi, e))
    except (IndexError, struct.error):
        pass
    raise DwarfError(f"{section}: the list at {offset:#x} runs past the section's end")


def _rnglist(unit: Unit, offset: int, reads: Optional[Reads]) -> List[Tuple[int, int]]:
    return [(e.low, e.high) for e in _list5(unit, ".debug_rnglists", offset, reads)]


def locations(unit: Unit, form: int, value: int, reads: Optional[Reads] = None) -> List[LocEntry]:
    """The entries of a location list named by a ``DW_AT_location`` (or ``DW_AT_frame_base``) attribute."""
    if unit.version >= 5:
        section = ".debug_loclists"
        offset = _list_offset(unit, form, value, section, unit.loclists_base, reads)
        return _loclist(unit, offset, reads)
    return _loc4(unit, value, reads)


def _loc4(unit: Unit, offset: int, reads: Optional[Reads]) -> List[LocEntry]:
    return _pairs4(unit, ".debug_loc", offset, reads)


def _loclist(unit: Unit, offset: int, reads: Optional[Reads]) -> List[LocEntry]:
    return _list5(unit, ".debug_loclists", offset, reads)


# DWARF 5's range and location list entries (7.25, 7.29) have the same shapes under two numberings; a
# location entry adds its expression (a ULEB length and the bytes).  Shape names: "end", "basex" (base by
# .debug_addr index), "startx_endx", "startx_length", "offset_pair", "default" (locations only), "base",
# "start_end", "start_length", "view_pair" (gcc's DW_LLE_GNU_view_pair: two location views, skipped).
_SHAPES = {
    ".debug_rnglists": {S.DW_RLE_end_of_list: "end", S.DW_RLE_base_addressx: "basex",
                        S.DW_RLE_startx_endx: "startx_endx", S.DW_RLE_startx_length: "startx_length",
                        S.DW_RLE_offset_pair: "offset_pair", S.DW_RLE_base_address: "base",
                        S.DW_RLE_start_end: "start_end", S.DW_RLE_start_length: "start_length"},
    ".debug_loclists": {S.DW_LLE_end_of_list: "end", S.DW_LLE_base_addressx: "basex",
                        S.DW_LLE_startx_endx: "startx_endx", S.DW_LLE_startx_length: "startx_length",
                        S.DW_LLE_offset_pair: "offset_pair", S.DW_LLE_default_location: "default",
                        S.DW_LLE_base_address: "base", S.DW_LLE_start_end: "start_end",
                        S.DW_LLE_start_length: "start_length", S.DW_LLE_GNU_view_pair: "view_pair"},
}


def _list5(unit: Unit, section: str, offset: int, reads: Optional[Reads]) -> List[LocEntry]:
    """The entries of the DWARF 5 list at ``offset`` of ``section`` (ranges have an empty expression)."""
    data = unit.sections.get(section)
    shapes = _SHAPES[section]
    located = section == ".debug_loclists"
    size = unit.addr_size
    base = unit.low_pc
    out: List[LocEntry] = []
    pos = offset
    where = f"{section}: the list at {offset:#x}"
    if not 0 <= offset < len(data):
        raise DwarfError(f"{where} lies outside the section ({len(data):#x} bytes)")

    def expr(p: int) -> Tuple[bytes, int]:
        if not located:
            return b"", p
        n, p = uleb(data, p)
        if p + n > len(data):
            raise IndexError
        return bytes(data[p:p + n]), p + n

    try:
        for _ in range(MAX_ENTRIES):
            kind = data[pos]
            shape = shapes.get(kind)
            pos += 1
            if shape == "end":
                if reads is not None:
                    reads.add(section, offset, pos)
                return out
            if shape == "basex":
                i, pos = uleb(data, pos)
                base = unit.indexed_address(i, reads)
                continue
            if shape == "base":
                base = _addr(data, pos, size)
                pos += size
                continue
            if shape == "view_pair":
                _, pos = uleb(data, pos)
                _, pos = uleb(data, pos)
                continue
            if shape in ("startx_endx", "startx_length", "offset_pair"):
                a, pos = uleb(data, pos)
                b, pos = uleb(data, pos)
                lo = unit.indexed_address(a, reads) if shape != "offset_pair" else base + a
                hi = (unit.indexed_address(b, reads) if shape == "startx_endx" else
                      lo + b if shape == "startx_length" else base + b)
            elif shape in ("start_end", "start_length"):
                lo = _addr(data, pos, size)
                pos += size
                if shape == "start_end":
                    hi = _addr(data, pos, size)
                    pos += size
                else:
                    n, pos = uleb(data, pos)
                    hi = lo + n
            elif shape == "default":
                e, pos = expr(pos)
                out.append(LocEntry(0, 0, e, True))
                continue
            else:
                raise DwarfError(f"{where}: unknown entry kind {kind:#x} at {pos - 1:#x}")
            e, pos = expr(pos)
            out.append(LocEntry(lo, hi, e))
    except (IndexError, struct.error):
        pass
    raise DwarfError(f"{where} runs past the section's end")
